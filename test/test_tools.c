// test_tools: the shell tools as a user runs them, fed names a user might choose:
// tools/plot_log.sh and dev/plot_schedules.sh with a backquoted command and a double
// quote in the file names (gnuplot once ran the command), and tools/transfer_eval.sh's
// own argument errors. The scripts are found beside this program's build directory.
#include "test/test.h"

static char bin[4096], root[4200], tmp[4096];

static int exists(const char *name) {
    char p[8400];
    snprintf(p, sizeof p, "%s/%s", tmp, name);
    return access(p, F_OK) == 0;
}

static void test_plots(void) {
    if (test_system("command -v gnuplot >/dev/null 2>&1") != 0) {
        SKIP("gnuplot not found: the plot scripts are not run (apt-get install gnuplot-nox)");
        return;
    }
    // a log named x`touch P1`"q.log: the name is the plot's title and the PNG's stem
    char p[8400];
    snprintf(p, sizeof p, "%s/x`touch P1`\"q.log", tmp);
    FILE *f = fopen(p, "w");
    if (!f) { perror(p); exit(1); }
    fputs("# step epoch lr loss bpc scale skipped gnorm chars/s\n"
          "train 1 0.01 0.001 5.5 7.9 1 0 1.0 100\ntrain 2 0.02 0.002 5.0 7.2 1 0 1.0 100\n"
          "val 2 0.02 5.1 7.3\ntrain 3 0.03 0.002 4.5 6.5 1 0 1.0 100\n", f);
    fclose(f);
    int rc = test_system("cd %s && %s/tools/plot_log.sh 'x`touch P1`\"q.log' >plot.out 2>&1", tmp, root);
    CHECK(rc == 0 && !exists("P1"), "plot_log.sh 'x`touch P1`\"q.log': exit %d, the backquoted command did not run (P1 %s)",
          rc, exists("P1") ? "exists" : "absent");
    snprintf(p, sizeof p, "%s/x`touch P1`\"q.png", tmp);
    CHECK(file_size(p) > 1000, "and the PNG is there under that name (%ld bytes)", file_size(p));
    // plot_schedules.sh (which runs from the repository root): a temporary directory
    // (TMPDIR) and an output name with the same characters; the command's path is absolute
    char tdir[8400];
    snprintf(tdir, sizeof tdir, "%s/t`touch %s/P2`\"q", tmp, tmp);
    rc = test_system("mkdir -p '%s' && cd %s && BUILD=%s TMPDIR='%s' %s/dev/plot_schedules.sh '%s/s`touch P2`\"q.png' >sched.out 2>&1",
                     tdir, tmp, bin, tdir, root, tmp);
    CHECK(rc == 0 && !exists("P2"), "plot_schedules.sh with such names: exit %d, the backquoted command did not run (P2 %s)",
          rc, exists("P2") ? "exists" : "absent");
    snprintf(p, sizeof p, "%s/s`touch P2`\"q.png", tmp);
    CHECK(file_size(p) > 1000, "and the PNG is there under that name (%ld bytes)", file_size(p));
    CHECK(test_system("ls -a %s | grep -q '\\.tmp\\.'", tmp) != 0, "no temporary file left behind");
}

static void test_transfer_eval_args(void) {
    char out[4300];
    snprintf(out, sizeof out, "%s/eval.out", tmp);
    int rc = test_system("%s/tools/transfer_eval.sh -o >%s 2>&1", root, out);
    CHECK(rc == 2 && test_system("tail -n 1 %s | grep -qx 'error: -o needs a value (the output directory)'", out) == 0 &&
          test_system("grep -q 'unbound variable' %s", out) != 0, "transfer_eval.sh -o without a value: exit %d, says so (no \"unbound variable\")", rc);
    rc = test_system("%s/tools/transfer_eval.sh --help >%s 2>&1", root, out);
    CHECK(rc == 0 && test_system("grep -q 'transfer_eval.sh \\[-o OUTDIR\\] CKPT DATA' %s", out) == 0 &&
          test_system("grep -q 'set -' %s", out) != 0, "transfer_eval.sh --help: exit %d, the usage and no line of code", rc);
    rc = test_system("%s/tools/transfer_eval.sh onlyone >%s 2>&1", root, out);
    CHECK(rc == 2 && test_system("tail -n 1 %s | grep -q 'error: need CKPT and DATA'", out) == 0, "transfer_eval.sh with one argument: exit %d", rc);
}

// No tool writes over one of its own inputs: each such command exits 2 naming both, the input as it was.
static void test_outputs_apart(void) {
    int rc = test_system("cd %s && %s/prepare --builtin 20000 -o d > /dev/null 2>&1 && "
                         "%s/train --hidden 8 --embed 4 --batch 2 --seq-len 8 --corpus-bytes 20000 --steps 1 --val-every 0 "
                         "--sample-len 0 --out run > /dev/null 2>&1 && cp run/latest.ckpt m.ckpt && cp m.ckpt m.keep && "
                         "printf 'label,sentence\n1,good\n0,bad\n' > in.csv && cp in.csv in.keep && cp d/train_000.bin t.keep",
                         tmp, bin, bin);
    CHECK(rc == 0, "outputs apart: shards, a checkpoint and a CSV to work on (exit %d)", rc);
    const char *cases[][3] = {
        {"transfer featurize -m m.ckpt -o m.ckpt in.csv", "-o m.ckpt and -m m.ckpt are the same file", "m.ckpt m.keep"},
        {"transfer featurize -m m.ckpt -o in.csv in.csv", "-o in.csv and INPUT in.csv are the same file", "in.csv in.keep"},
        {"transfer heatmap -m m.ckpt --unit 0 -o h h.dat", "-o h.dat and INPUT h.dat are the same file", "h.dat in.keep"},
        {"prepare --format text -o d d/train_000.bin", "input d/train_000.bin is one of the files -o d is about to replace",
         "d/train_000.bin t.keep"},
        {"import_npy -o npy/0.npy npy", "-o npy/0.npy and input npy/0.npy are the same file", "npy/0.npy in.keep"},
    };
    test_system("mkdir -p %s/npy && cp %s/in.csv %s/npy/0.npy && cp %s/in.csv %s/h.dat", tmp, tmp, tmp, tmp, tmp);
    for (int k = 0; k < (int)(sizeof cases / sizeof cases[0]); k++) {
        rc = test_system("cd %s && %s/%s > al.out 2>&1", tmp, bin, cases[k][0]);
        int said = test_system("grep -q -- '%s' %s/al.out", cases[k][1], tmp) == 0;
        int kept = test_system("cd %s && cmp -s %s", tmp, cases[k][2]) == 0;
        CHECK(rc == 2 && said && kept, "outputs apart: %s: exit %d, names both, the input kept", cases[k][0], rc);
    }
    rc = test_system("cd %s && cp in.csv a.feat && %s/transfer classify --summary a.feat a.feat a.feat a.feat > al.out 2>&1 && false; "
                     "grep -q -- '--summary a.feat and train a.feat are the same file' al.out && cmp -s a.feat in.keep", tmp, bin);
    CHECK(rc == 0, "outputs apart: transfer classify --summary one of its feature files: refused, the file kept");
}

int main(void) {
    snprintf(bin, sizeof bin, "%s", test_bin_dir());
    snprintf(root, sizeof root, "%s/..", bin);
    const char *base = getenv("TMPDIR");
    snprintf(tmp, sizeof tmp, "%s/test_tools.XXXXXX", base && *base ? base : "/tmp");
    if (!mkdtemp(tmp)) { perror("mkdtemp"); return 1; }
    test_plots();
    test_transfer_eval_args();
    test_outputs_apart();
    int rc = test_summary("test_tools");
    if (rc == 0) test_system("rm -rf %s", tmp);
    else printf("(files kept in %s)\n", tmp);
    return rc;
}

#!/usr/bin/python3
"""Regenerates a sweep's results from its run logs alone: results.md (final
validation bits per character per rule x batch size, 'diverged' where a run
diverged) and, with gnuplot, three PNGs: final val bpc against batch size, the
loss curves at the largest batch, and the learning-rate schedules at the
largest batch (dev/sweep/README.md).

    dev/sweep/sweep_report.py DIR            # DIR holds runs/<rule>_k<k>.log and .out
    dev/sweep/sweep_report.py --check LOG    # the divergence test on one log: prints
                                         # "diverged STEP REASON" or "ok", exit 0
    dev/sweep/sweep_report.py --claim DIR    # DIR holds lr*/ (the base-lr search) and seed*/
                                         # (sweeps that differ only in --seed): per-seed
                                         # reports, then DIR/claim.md and DIR/claim.png,
                                         # the test of LEGW's claim (dev/sweep/README.md)

Everything comes from the trainer's own files: the log (doc/formats.md,
"Training log") and its stdout (.out: the start-up table, for the batch, the
planned steps and the peak lr). The divergence rule lives here, and
dev/sweep/sweep.py imports it, so the sweep stops a run on exactly the test this
report applies afterwards. Standard library only.
"""
import contextlib
import gzip
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile

RULES = ["linear", "sqrt", "legw", "puri", "constant", "puri-run"]
WINDOW = 20     # train steps averaged by the divergence rule
MARGIN = 1.02   # ... and how far above the first step's loss their mean must be
EXPLODED = 2 * math.log(256)  # a loss above twice a uniform model's: train.h's loss_diverged, which stops the trainer
RUN_RE = re.compile(r"^(?P<rule>[a-z][a-z0-9.-]*)_k(?P<k>\d+)\.log(\.gz)?$")  # a finished run's log may be gzipped
ALPHA_RE = re.compile(r"^alpha(\d(\.\d+)?)$")


def alpha_of(rule):
    """A in [0, 2] for the rule alphaA (peak = lr k^A with LEGW's warmup and decay), else None."""
    m = ALPHA_RE.match(rule)
    return float(m.group(1)) if m and float(m.group(1)) <= 2 else None


def rule_order(rule):
    """Sort key: the named rules in RULES' order, then alphaA by A."""
    return (0, RULES.index(rule), 0.0) if rule in RULES else (1, 0, alpha_of(rule) or 0.0)


def die(msg):
    print("error: " + msg, file=sys.stderr)
    sys.exit(2)


def parse_float(s):
    try:
        return float(s)  # accepts nan, -nan, inf as C's printf writes them
    except ValueError:
        return float("nan")


def parse_log_lines(lines, train, val):
    """Appends (step, epoch, lr, loss, bpc, gradient norm before clipping; nan for a skipped
    step) to train and (step, epoch, loss, bpc) to val. A resumed run appends to its log; if it
    resumed from a checkpoint older than the last line written (a hard kill), steps repeat: a step at or below the
    last one seen rewinds the record to it, so each step is counted once. Returns
    the length train had after its last rewind: the entries from there on are new."""
    low = len(train)
    for line in lines:
        f = line.split()
        if len(f) >= 6 and f[0] == "train":
            step = int(f[1])
            while train and train[-1][0] >= step:
                train.pop()
            low = min(low, len(train))
            while val and val[-1][0] >= step:
                val.pop()
            gnorm = parse_float(f[8]) if len(f) >= 9 and f[7] == "0" else float("nan")  # a skipped step logs 0
            train.append((step, parse_float(f[2]), parse_float(f[3]), parse_float(f[4]), parse_float(f[5]), gnorm))
        elif len(f) >= 5 and f[0] == "val":
            step = int(f[1])
            while val and val[-1][0] >= step:
                val.pop()
            val.append((step, parse_float(f[2]), parse_float(f[3]), parse_float(f[4])))
    return low


BLOCK_CHARS = 8192  # a thinned log's line: the steps of this many training characters (dev/sweep/thin_logs.py)
THIN_HEADER = ("# thinned by dev/sweep/thin_logs.py from the trainer's log: one block line per %d training characters, "
               "block <last step> <epoch> <lr> <mean loss> <mean bpc> <rms grad norm> <steps> <clipped steps>; "
               "val lines as written\n" % BLOCK_CHARS)


def blocks(train, chars_per_step, clip):
    """The train steps in consecutive blocks of BLOCK_CHARS characters (the last block may be
    shorter): (last step, epoch, lr at it, mean loss, mean bpc, root mean square gradient norm
    over the steps that logged one, steps, steps whose gradient norm was above clip (0: the
    run does not clip)). One step's loss is one batch's, which at B0 is 32 characters: a block
    is the same amount of text at every batch, so its noise and its lag do not depend on B."""
    n = max(1, int(round(BLOCK_CHARS / chars_per_step)))
    out = []
    for i in range(0, len(train), n):
        b = train[i:i + n]
        g = [t[5] for t in b if len(t) > 5 and math.isfinite(t[5])]
        out.append((b[-1][0], b[-1][1], b[-1][2], sum(t[3] for t in b) / len(b), sum(t[4] for t in b) / len(b),
                    math.sqrt(sum(x * x for x in g) / len(g)) if g else float("nan"), len(b),
                    sum(1 for x in g if x > clip) if clip > 0 else 0))
    return out


def read_thin(path):
    """A thinned log: (blocks, val) as blocks() and parse_log_lines() give them. A log thinned before
    the clipped count was kept has None there."""
    out, val = [], []
    with (gzip.open(path, "rt", errors="replace") if path.endswith(".gz") else open(path, errors="replace")) as fh:
        for line in fh:
            f = line.split()
            if len(f) >= 8 and f[0] == "block":
                out.append((int(f[1]),) + tuple(parse_float(x) for x in f[2:7]) + (int(f[7]),)
                           + (int(f[8]) if len(f) > 8 else None,))
            elif f and f[0] == "val":
                parse_log_lines([line], [], val)
    return out, val


def read_log(path):
    train, val = [], []
    with (gzip.open(path, "rt", errors="replace") if path.endswith(".gz") else open(path, errors="replace")) as fh:
        parse_log_lines(fh, train, val)
    return train, val


def divergence(train, val, planned_steps=None, window=WINDOW, start=0):
    """The rule: a run has diverged at the first step where its train loss (or a
    validation loss) is not finite, or where the mean train loss over the last
    `window` steps is above the first step's loss (the loss went up from where it
    started, for long enough not to be a single bad batch; "above" means by more
    than 2%, so that a run still sitting at the uniform-prediction loss of its
    first steps, give or take batch noise, is not called diverged). The window is
    shortened to the run's length for runs of fewer steps. Tests train[start:]
    only (the sweep's watcher tested the earlier steps already, so each poll costs
    the new lines, not the whole log). Returns (step, reason) or None."""
    if planned_steps:
        window = max(1, min(window, planned_steps))
    prev = train[start - 1][0] if 0 < start <= len(train) else -1
    vi = 0
    while vi < len(val) and val[vi][0] <= prev:
        vi += 1
    first = train[0][3] if train else None
    for i in range(max(0, start), len(train)):
        step, loss = train[i][0], train[i][3]
        while vi < len(val) and val[vi][0] <= step:
            if not math.isfinite(val[vi][2]):
                return val[vi][0], "validation loss %s" % val[vi][2]
            vi += 1
        if not math.isfinite(loss):
            return step, "train loss %s" % loss
        if loss > EXPLODED:
            return step, "train loss %.4g nats, above twice a uniform model's" % loss
        if i + 1 >= window:
            mean = sum(t[3] for t in train[i + 1 - window:i + 1]) / window
            if mean > MARGIN * first:
                return step, ("mean train loss of the last %d steps %.3f > 1.02 x first step's %.3f"
                              % (window, mean, first))
    for v in val[vi:]:
        if not math.isfinite(v[2]):
            return v[0], "validation loss %s" % v[2]
    return None


ARCHIVE = "logs.tar.xz"  # an experiment's run trees, packed by dev/sweep/pack_logs.py
PAGE_SUFFIXES = (".md", ".png")  # what the reports write: the pages and their plots, never packed


def packed_experiment(path):
    """The directory at or above path that holds an ARCHIVE, or None."""
    d = os.path.abspath(path)
    while True:
        if os.path.exists(os.path.join(d, ARCHIVE)):
            return d
        up = os.path.dirname(d)
        if up == d:
            return None
        d = up


def unpack_archive(exp, dest):
    """Extracts exp's ARCHIVE into dest, refusing a member that would land outside it."""
    with tarfile.open(os.path.join(exp, ARCHIVE), "r:xz") as tf:
        for m in tf.getmembers():
            if not m.isfile() or os.path.isabs(m.name) or ".." in m.name.split("/"):
                die("%s: member %s is not a plain file inside the experiment" % (os.path.join(exp, ARCHIVE), m.name))
        for m in tf.getmembers():
            out = os.path.join(dest, m.name)
            os.makedirs(os.path.dirname(out), exist_ok=True)
            with tf.extractfile(m) as src, open(out, "wb") as fh:
                shutil.copyfileobj(src, fh)


@contextlib.contextmanager
def unpacked(paths):
    """Yields paths to read the run trees of paths by: a path inside an experiment packed into
    ARCHIVE (dev/sweep/pack_logs.py) is read from a temporary copy of its trees, unpacked at the
    same path relative to the working directory, which is changed to the copy's root meanwhile
    (so that the pages print the paths they were given); on leaving, every page and plot written
    in the copy is copied to the same place in the experiment. Other paths are yielded as they
    are (absolute while the directory is changed)."""
    exps = sorted({e for e in map(packed_experiment, paths) if e})
    if not exps:
        yield list(paths)
        return
    cwd = os.getcwd()
    for e in exps:
        if os.path.relpath(e, cwd).startswith(".."):
            die("%s is packed (%s) and outside the working directory: run from above it" % (e, ARCHIVE))
    with tempfile.TemporaryDirectory() as tmp:
        for e in exps:
            unpack_archive(e, os.path.join(tmp, os.path.relpath(e, cwd)))
        mapped = [os.path.relpath(os.path.abspath(p), cwd) if packed_experiment(p) else os.path.abspath(p)
                  for p in paths]
        os.chdir(tmp)
        try:
            yield mapped
        finally:
            os.chdir(cwd)
        for e in exps:
            copy = os.path.join(tmp, os.path.relpath(e, cwd))
            for d, subdirs, files in os.walk(copy):
                for f in files:
                    if f.endswith(PAGE_SUFFIXES):
                        dest = os.path.join(e, os.path.relpath(os.path.join(d, f), copy))
                        os.makedirs(os.path.dirname(dest), exist_ok=True)
                        shutil.copyfile(os.path.join(d, f), dest + ".tmp")
                        os.replace(dest + ".tmp", dest)


def table_value(text, name):
    """A value from the trainer's start-up table (`| name | value |`)."""
    m = re.search(r"^\| %s\s*\| (.*?)\s*\|$" % re.escape(name), text, re.M)
    return m.group(1) if m else None


def run_names(runs_dir):
    """The runs in runs_dir, by their .out files (every run has one, thinned or not)."""
    if not os.path.isdir(runs_dir):
        return []
    return sorted(f[:-4] for f in os.listdir(runs_dir) if f.endswith(".out") and RUN_RE.match(f[:-4] + ".log"))


def read_run_blocks(runs_dir, name):
    """One run as blocks (blocks()), from its log if it is here, else from its thinned log:
    rule, k, seed, B, T, the start-up table's planned steps, lrs, warmup, decay and optimizer,
    the validation lines, the last step, status ('done', 'diverged', 'incomplete'), the final
    val bpc of a finished run, and for a diverged one the step and the reason. A thinned log
    keeps no single steps, so the divergence rule cannot be applied to it again: the status,
    step and reason are then the ones the sweep recorded (.status) when the rule watched the run."""
    m = RUN_RE.match(name + ".log")
    raw = [p for p in (os.path.join(runs_dir, name + x) for x in (".log", ".log.gz")) if os.path.exists(p)]
    thin = next((p for p in (os.path.join(runs_dir, name + x) for x in (".thin.gz", ".thin")) if os.path.exists(p)),
                None)
    with open(os.path.join(runs_dir, name + ".out"), errors="replace") as fh:
        text = fh.read()
    sm = re.search(r" --seed (\d+)", text.split("\n", 1)[0])
    bm = re.search(r"= (\d+), T = (\d+)", table_value(text, "batch") or "")  # "8 rows/rank x 1 ranks = 8, T = 32"
    steps = table_value(text, "steps")
    r = {"rule": m.group("rule"), "k": int(m.group("k")), "name": name, "seed": int(sm.group(1)) if sm else None,
         "B": int(bm.group(1)) if bm else None, "T": int(bm.group(2)) if bm else None,
         "planned": int(steps.split()[0]) if steps else None, "peak": table_value(text, "peak lr"),
         "base_lr": table_value(text, "base lr"), "warmup": table_value(text, "warmup"),
         "cap": table_value(text, "lr cap"), "decay": table_value(text, "decay"),
         "optimizer": table_value(text, "optimizer")}
    if not r["B"]:
        die("%s: no batch in the start-up table of %s.out" % (runs_dir, name))
    cm = re.search(r"clip ([0-9.e+-]+)", r["optimizer"] or "")
    r["clip"] = float(cm.group(1)) if cm else 0.0
    status = None
    if os.path.exists(os.path.join(runs_dir, name + ".status")):
        with open(os.path.join(runs_dir, name + ".status")) as fh:
            status = json.load(fh)
    if raw:
        train, val = read_log(raw[0])
        r["blocks"] = blocks(train, r["B"] * r["T"], r["clip"])
        d = divergence(train, val, r["planned"])
    elif thin:
        r["blocks"], val = read_thin(thin)
        d = (status["step"], status["reason"]) if status is not None and status["status"] == "diverged" else None
    else:
        die("%s: %s has neither a log nor a thinned log" % (runs_dir, name))
    r["val"], r["last_step"] = val, r["blocks"][-1][0] if r["blocks"] else 0
    final = [v for v in val if v[0] == r["planned"]]
    if d:
        r["status"], r["div_step"], r["div_reason"] = "diverged", d[0], d[1]
    elif final:
        r["status"], r["bpc"] = "done", final[-1][3]
    else:
        r["status"] = "incomplete"
    return r


def fmt_k(r):
    return "B=%d (k=%d)" % (r["B"], r["k"]) if r.get("B") else "k=%d" % r["k"]


def cell(r):
    if r is None:
        return "-"
    if r["status"] == "done":
        return "%.3f" % r["bpc"]
    if r["status"] == "diverged":
        return "diverged (step %d of %s)" % (r["div_step"], r["planned"])
    return "incomplete (step %d of %s)" % (r["last_step"], r["planned"])


def write_table(runs, path, png_names):
    tmp = path + ".tmp"
    with open(tmp, "w") as fh:
        fh.write("\n".join(table_lines(runs, png_names)) + "\n")
    os.replace(tmp, path)


def table_lines(runs, png_names):
    """results.md's lines: the final val bpc table, then one row per run."""
    ks = sorted({r["k"] for r in runs})
    rules = sorted({r["rule"] for r in runs}, key=rule_order)
    by = {(r["rule"], r["k"]): r for r in runs}
    B0 = None
    for r in runs:
        if r.get("B"):
            B0 = r["B"] // r["k"]
    hdr = ["rule"] + [("B=%d (k=%d)" % (B0 * k, k)) if B0 else "k=%d" % k for k in ks]
    lines = ["# Sweep results", "",
             "Regenerated by `dev/sweep/sweep_report.py` from the run logs in `runs/`. "
             "Final validation bits per character (lower is better) after the same number of epochs "
             "at every batch; 'diverged' marks a run stopped by the divergence rule (a non-finite loss, or "
             "the mean train loss of the last %d steps more than 2%% above the first step's loss); '-' was not run."
             % WINDOW,
             "",
             "| " + " | ".join(hdr) + " |",
             "|" + "|".join(["---"] * len(hdr)) + "|"]
    for rule in rules:
        lines.append("| " + " | ".join([rule] + [cell(by.get((rule, k))) for k in ks]) + " |")
    lines += ["", "Per run: steps, peak learning rate and warmup (from the trainer's start-up table), "
              "the last train loss in bpc (mean of the last block of %d training characters), and why a diverged "
              "run was stopped." % BLOCK_CHARS, "",
              "| run | batch | steps | peak lr | warmup | last train bpc | status |",
              "|---|---|---|---|---|---|---|"]
    for rule in rules:
        for k in ks:
            r = by.get((rule, k))
            if not r:
                continue
            last = "%.3f" % r["blocks"][-1][4] if r["blocks"] else "-"
            status = r["status"]
            if status == "diverged":
                status = "diverged at step %d: %s" % (r["div_step"], r["div_reason"])
            elif status == "done":
                status = "done: val bpc %.3f" % r["bpc"]
            lines.append("| %s | %s | %s of %s | %s | %s | %s | %s |" % (
                r["name"], r.get("B") or "?", r["last_step"], r["planned"],
                (r["peak"] or "?").split(" at ")[0], r["warmup"] or "?", last, status))
    if png_names:
        lines += [""] + ["![%s](%s)" % (alt, name) for name, alt in png_names]
    return lines


COLORS = {"linear": "#d62728", "sqrt": "#1f77b4", "legw": "#2ca02c", "puri": "#9467bd", "constant": "#7f7f7f",
          "puri-run": "#e377c2"}
# alphaA by eighths of A (A = 0.5 is legw's green): 0, 1/8, ..., 1, then black
ALPHA_COLORS = ["#c7c7c7", "#bcbd22", "#8c564b", "#17becf", "#2ca02c", "#ff7f0e", "#1f3f8f", "#e377c2", "#d62728"]


def color(rule):
    a = alpha_of(rule)
    if a is None:
        return COLORS.get(rule, "black")
    i = int(round(a * 8))
    return ALPHA_COLORS[i] if i < len(ALPHA_COLORS) else "black"


def plots(runs, outdir):
    """Three PNGs with gnuplot; returns [(file name, alt text)]."""
    if not shutil.which("gnuplot"):
        print("note: gnuplot not found (apt-get install gnuplot-nox): wrote the table, no plots", file=sys.stderr)
        return []
    rules = sorted({r["rule"] for r in runs}, key=rule_order)
    kmax = max(r["k"] for r in runs)
    largest = [r for r in runs if r["k"] == kmax]
    made = []
    with tempfile.TemporaryDirectory() as tmp:
        # 1. final val bpc against batch size; diverged runs as crosses along the top
        done = [r for r in runs if r["status"] == "done"]
        ymax = max([r["bpc"] for r in done] + [1.0]) * 1.15
        cmds = []
        for rule in rules:
            pts = sorted((r["B"] or r["k"], r["bpc"]) for r in done if r["rule"] == rule)
            fn = os.path.join(tmp, "bpc_%s" % rule)
            with open(fn, "w") as fh:
                fh.writelines("%d %.6f\n" % p for p in pts)
            if pts:
                cmds.append('"%s" using 1:2 with linespoints lw 2 pt 7 lc rgb "%s" title "%s"'
                            % (fn, color(rule), rule))
        div = [r for r in runs if r["status"] == "diverged"]
        if div:
            fn = os.path.join(tmp, "div")
            with open(fn, "w") as fh:
                for r in div:
                    off = 1.0 + 0.04 * rules.index(r["rule"])  # spread rules that diverge at one batch
                    fh.write("%f %f\n" % ((r["B"] or r["k"]) * off, ymax * 0.97))
            cmds.append('"%s" using 1:2 with points pt 2 ps 2.5 lw 3 lc rgb "black" title "diverged (stopped)"' % fn)
        if cmds:
            gp = ['set terminal pngcairo size 900,560 font "sans,11"',
                  'set output "%s/bpc_vs_batch.png.tmp"' % outdir,
                  'set logscale x 2', 'set grid', 'set key outside right',
                  'set xlabel "global batch B (sequences)"', 'set ylabel "final validation bits per character"',
                  'set yrange [0:%f]' % ymax,
                  'set title "Final validation bpc after the same number of epochs"',
                  "plot " + ", ".join(cmds)]
            gnuplot(gp, outdir, "bpc_vs_batch.png")
            made.append(("bpc_vs_batch.png", "final validation bpc against batch size, one line per rule"))
        # 2 and 3. train loss and learning rate against epoch at the largest batch
        B = largest[0].get("B")
        curves, scheds = [], []
        for r in sorted(largest, key=lambda r: rules.index(r["rule"])):
            fn = os.path.join(tmp, "curve_%s" % r["rule"])
            with open(fn, "w") as fh:
                fh.writelines("%g %g %g\n" % (t[1], t[4], t[2]) for t in r["blocks"] if math.isfinite(t[4]))
            vn = os.path.join(tmp, "val_%s" % r["rule"])
            with open(vn, "w") as fh:
                fh.writelines("%g %g\n" % (v[1], v[3]) for v in r["val"] if math.isfinite(v[3]))
            c = color(r["rule"])
            t = r["rule"] + (" (diverged%s)" % (", off the top" if any(x[4] > 10 for x in r["blocks"]) else "")
                             if r["status"] == "diverged" else "")
            curves.append('"%s" using 1:2 with lines lw 2 lc rgb "%s" title "%s train"' % (fn, c, t))
            if os.path.getsize(vn):
                curves.append('"%s" using 1:2 with points pt 7 ps 1.3 lc rgb "%s" title "%s val"' % (vn, c, r["rule"]))
            scheds.append('"%s" using 1:3 with lines lw 2 lc rgb "%s" title "%s"' % (fn, c, r["rule"]))
        head = ['set terminal pngcairo size 900,560 font "sans,11"', 'set grid', 'set key outside right',
                'set xlabel "epoch"']
        gnuplot(head + ['set output "%s/curves_largest.png.tmp"' % outdir, 'set ylabel "bits per character"',
                        'set key inside top right',
                        'set yrange [0:10]',  # 8 bpc is a uniform guess; a diverged run goes far above
                        'set title "Loss against epochs at the largest batch, B=%s (k=%d)"' % (B, kmax),
                        "plot " + ", ".join(curves)], outdir, "curves_largest.png")
        made.append(("curves_largest.png",
                     "train (lines) and validation (points) bpc against epoch at the largest batch"))
        gnuplot(head + ['set output "%s/schedules_largest.png.tmp"' % outdir, 'set ylabel "learning rate"',
                        'set logscale y', 'set format y "%.0e"',
                        'set title "The learning rate each run used at the largest batch, B=%s (k=%d)"' % (B, kmax),
                        "plot " + ", ".join(scheds)], outdir, "schedules_largest.png")
        made.append(("schedules_largest.png", "learning rate against epoch at the largest batch, one line per rule"))
    return made


def gnuplot(cmds, outdir, name):
    p = subprocess.run(["gnuplot"], input="\n".join(cmds) + "\n", text=True, capture_output=True)
    if p.returncode != 0:
        die("gnuplot failed on %s: %s" % (name, p.stderr.strip()))
    os.replace(os.path.join(outdir, name + ".tmp"), os.path.join(outdir, name))


def report(d):
    runs_dir = os.path.join(d, "runs")
    if not os.path.isdir(runs_dir):
        die("%s has no runs/ directory (is it a sweep directory? see dev/sweep/sweep.py)" % d)
    names = run_names(runs_dir)
    if not names:
        die("%s holds no runs (<rule>_k<k>.out and its log)" % runs_dir)
    runs = [r for r in (read_run_blocks(runs_dir, f) for f in names) if r["blocks"]]
    if not runs:
        die("no run log in %s has a 'train' line" % runs_dir)
    pngs = plots(runs, d)
    write_table(runs, os.path.join(d, "results.md"), pngs)
    print("wrote %s%s" % (os.path.join(d, "results.md"), "".join(", " + os.path.join(d, p) for p, _ in pngs)))


# ----------------------------------------------------------------------------
# The claim test (dev/sweep/README.md): across seeds, which k keep the small-batch accuracy.

CLAIM_MARGIN = 0.02  # "keeps the accuracy": mean final val bpc at most 2% above the baseline's
T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306}  # Student t, 97.5%


def mean_ci(xs):
    """Mean and the half-width of its 95% interval (Student t; None for one value)."""
    n = len(xs)
    m = sum(xs) / n
    if n < 2:
        return m, None
    sd = math.sqrt(sum((x - m) ** 2 for x in xs) / (n - 1))
    return m, T975.get(n - 1, 1.96) * sd / math.sqrt(n)


def diff_ci(a, b):
    """Mean of a minus mean of b, and a 95% half-width (Welch's standard error, the
    smaller sample's degrees of freedom: conservative); None unless both have 2+ values."""
    d = sum(a) / len(a) - sum(b) / len(b)
    if len(a) < 2 or len(b) < 2:
        return d, None
    var = lambda xs: sum((x - sum(xs) / len(xs)) ** 2 for x in xs) / (len(xs) - 1)
    se = math.sqrt(var(a) / len(a) + var(b) / len(b))
    return d, T975.get(min(len(a), len(b)) - 1, 1.96) * se


def paired_ci(a, b):
    """Mean over the seeds both dicts ({seed: value}) hold of a[seed] - b[seed], the half-width
    of its 95% interval (Student t on the paired differences; None below 2 pairs), and the
    differences themselves, by seed."""
    common = sorted(set(a) & set(b))
    ds = [a[s] - b[s] for s in common]
    if not ds:
        return None, None, []
    m, ci = mean_ci(ds)
    return m, ci, list(zip(common, ds))


def read_sweep(d):
    runs_dir = os.path.join(d, "runs")
    return [r for r in (read_run_blocks(runs_dir, f) for f in run_names(runs_dir)) if r["blocks"]]


def claim_report(d):
    lines, plot_args = claim_lines(d)
    png = claim_plot(*plot_args, d)
    if png:
        lines += ["", "![%s](%s)" % ("mean final val bpc against batch size, one line per rule, 95% intervals", png)]
    tmp = os.path.join(d, "claim.md.tmp")
    with open(tmp, "w") as fh:
        fh.write("\n".join(lines) + "\n")
    os.replace(tmp, os.path.join(d, "claim.md"))
    print("wrote %s%s" % (os.path.join(d, "claim.md"), ", " + os.path.join(d, png) if png else ""))


def claim_lines(d):
    """claim.md's lines but its plot, and the plot's arguments (claim_plot)."""
    subdirs = sorted(x for x in os.listdir(d) if os.path.isdir(os.path.join(d, x))) if os.path.isdir(d) else []
    seeds = [x for x in subdirs if re.match(r"^seed\d+", x)]
    lrs = [x for x in subdirs if x.startswith("lr")]
    if not seeds:
        die("%s has no seed*/ sweep directories (see dev/sweep/README.md)" % d)
    lines = ["# Does LEGW keep the small-batch accuracy?", "",
             "Regenerated by `dev/sweep/sweep_report.py --claim %s` from the run logs alone (dev/sweep/README.md)."
             % os.path.basename(os.path.normpath(d)), ""]
    # 1. the base-lr search at B0
    if lrs:
        rows = []
        for x in lrs:
            for r in read_sweep(os.path.join(d, x)):
                peak = (r["peak"] or "?").split(" at ")[0]
                rows.append((float(peak) if peak != "?" else 0.0, r))
        rows.sort(key=lambda t: t[0])
        lines += ["## The base learning rate, tuned first at B0 (LEGW, k = 1, seed 1)", "",
                  "| lr | " + " | ".join("%g" % lr for lr, _ in rows) + " |",
                  "|---|" + "---|" * len(rows),
                  "| final val bpc | " + " | ".join(cell(r) for _, r in rows) + " |", ""]
    # 2. every seed's runs, by (rule, k)
    by = {}
    B0 = None
    seen = {}
    seedval = {}  # (rule, k) -> {seed: final bpc}: seeds are paired across rules and batches
    for sd in seeds:
        for r in read_sweep(os.path.join(d, sd)):
            m = re.search(r" --seed (\d+)", open(os.path.join(d, sd, "runs", r["name"] + ".out")).readline())
            key = (r["rule"], r["k"], m.group(1) if m else sd)
            if key in seen:
                die("%s/%s and %s/%s are the same run (rule %s, k %d, seed %s): a seed counts once"
                    % (seen[key], r["name"], sd, r["name"], key[0], key[1], key[2]))
            seen[key] = sd
            by.setdefault((r["rule"], r["k"]), []).append((sd, r))
            if r["status"] == "done":
                seedval.setdefault((r["rule"], r["k"]), {})[key[2]] = r["bpc"]
            if r.get("B"):
                B0 = r["B"] // r["k"]
    ks = sorted({k for _, k in by})
    rules = sorted({rr for rr, _ in by}, key=rule_order)
    vals = {key: [r["bpc"] for _, r in v if r["status"] == "done"] for key, v in by.items()}
    base = vals.get(("legw", 1), [])
    if not base:
        die("no finished legw run at k = 1 in %s: the baseline is missing" % d)
    bm, bci = mean_ci(base)
    limit = bm * (1 + CLAIM_MARGIN)
    lines += ["## Final validation bpc, mean over seeds", "",
              "Mean final validation bits per character, with the 95%% interval of the mean where a point has 2 or "
              "more seeds, and (n) the number of seeds. The baseline is the tuned small batch, LEGW at k = 1: %.4f; "
              "the margin is %g%% of it, so a point keeps the small-batch accuracy when its mean is at most %.4f. "
              "'div' counts diverged runs." % (bm, 100 * CLAIM_MARGIN, limit), "",
              "| rule | " + " | ".join(("B=%d (k=%d)" % (B0 * k, k)) if B0 else "k=%d" % k for k in ks) + " |",
              "|---|" + "---|" * len(ks)]
    for rule in rules:
        cells = []
        for k in ks:
            runs = by.get((rule, k), [])
            xs = vals.get((rule, k), [])
            ndiv = sum(1 for _, r in runs if r["status"] == "diverged")
            if not runs:
                cells.append("-")
                continue
            if not xs:
                cells.append("diverged (%d)" % ndiv if ndiv else "incomplete")
                continue
            m, ci = mean_ci(xs)
            c = "%.3f" % m + (" ± %.3f" % ci if ci is not None else "") + " (%d)" % len(xs)
            if ndiv:
                c += ", %d div" % ndiv
            if len(xs) < len(runs) - ndiv:
                c += ", %d unfinished" % (len(runs) - ndiv - len(xs))
            cells.append(c)
        lines.append("| %s | %s |" % (rule, " | ".join(cells)))
    # 3. the verdict per rule
    lines += ["", "## The largest k that keeps the small-batch accuracy", "",
              "For each rule: the largest k up to which every batch's mean final bpc is within %g%% of the baseline "
              "(%.4f), and at the next k (where the rule falls out of the margin) and at the largest k, the "
              "difference from the baseline. A seed sets the initial weights of every run it names, so the "
              "difference is taken seed by seed (paired) over the seeds both sides have, with the 95%% interval of "
              "the mean difference (Student t) where 2 or more. A diverged run counts as outside the margin."
              % (100 * CLAIM_MARGIN, limit), "",
              "| rule | largest k within %g%% | first k outside | its mean bpc - baseline | "
              "at k = %d: mean bpc - baseline |"
              % (100 * CLAIM_MARGIN, ks[-1]), "|---|---|---|---|---|"]

    def diff_text(rule, k):
        xs = vals.get((rule, k), [])
        runs = by.get((rule, k), [])
        if any(r["status"] == "diverged" for _, r in runs):
            return "diverged"
        if not xs:
            return "-"
        pm, pci, pairs = paired_ci(seedval.get((rule, k), {}), seedval.get(("legw", 1), {}))
        if pci is not None:
            return "%+.3f ± %.3f (paired, %d)" % (pm, pci, len(pairs))
        if len(pairs) == 1:
            return "%+.3f (seed %s alone)" % (pm, pairs[0][0])
        dd, ci = diff_ci(xs, base)
        return "%+.3f" % dd + (" ± %.3f" % ci if ci is not None else " (1 seed)")

    for rule in rules:
        best, first_out = None, None
        for k in ks:
            runs = by.get((rule, k), [])
            if not runs:
                continue
            xs = vals.get((rule, k), [])
            if any(r["status"] == "incomplete" for _, r in runs):
                first_out = "k = %d not finished" % k
                break
            ok = xs and not any(r["status"] == "diverged" for _, r in runs) and sum(xs) / len(xs) <= limit
            if not ok:
                first_out = k
                break
            best = k
        lines.append("| %s | %s | %s | %s | %s |" % (
            rule, best if best is not None else "none", first_out if first_out is not None else "none (all within)",
            diff_text(rule, first_out) if isinstance(first_out, int) else "-", diff_text(rule, ks[-1])))
    # 3b. every rule against the baseline, k by k
    lines += ["", "## Every point against the baseline", "",
              "Final bpc minus the baseline's (LEGW at k = 1), as in the table above: paired by seed where both "
              "sides have the same 2 or more seeds, with (n) the number of pairs; one seed: against that seed's "
              "baseline. The margin is +%.4f." % (limit - bm), "",
              "| rule | " + " | ".join("k=%d" % k for k in ks) + " |", "|---|" + "---|" * len(ks)]
    for rule in rules:
        lines.append("| %s | %s |" % (rule, " | ".join(diff_text(rule, k) if by.get((rule, k)) else "-" for k in ks)))
    # 3c. how often the clip changed a step: the recipe is the same at every k only if about never
    clip_rows = []
    for rule in rules:
        cells = []
        for k in ks:
            shares = []
            for _, r in by.get((rule, k), []):
                if r["clip"] > 0 and r["blocks"] and all(b[7] is not None for b in r["blocks"]):
                    shares.append(100.0 * sum(b[7] for b in r["blocks"]) / sum(b[6] for b in r["blocks"]))
            cells.append("%.1f%% (%d)" % (sum(shares) / len(shares), len(shares)) if shares else "-")
        clip_rows.append("| %s | %s |" % (rule, " | ".join(cells)))
    lines += ["", "## How often clipping changed a step", "",
              "Share of the steps whose gradient norm (logged before clipping) was above the clip threshold of the "
              "run's start-up table, mean over the seeds, (n) runs; '-': no clipping, or not run.", "",
              "| rule | " + " | ".join("k=%d" % k for k in ks) + " |", "|---|" + "---|" * len(ks)] + clip_rows
    # 4. the reconstructed puri rule against LEGW, batch by batch (Puri et al.'s claim: it converges
    # where linear scaling does not)
    pk = [k for k in ks if paired_ci(seedval.get(("puri", k), {}), seedval.get(("legw", k), {}))[2]]
    if pk:
        base, cap, decay = (next((r[f] for v in by.values() for _, r in v if r["rule"] == "puri" and r.get(f)), "?")
                            for f in ("base_lr", "cap", "decay"))
        pairs = {k: paired_ci(seedval[("puri", k)], seedval[("legw", k)]) for k in pk}
        lines += ["", "## puri against LEGW", "",
                  "Final bpc of the reconstructed `puri` rule minus LEGW's at the same k and seed, the mean over the "
                  "seeds both have, with the 95% interval of the paired differences where 2 or more (negative: puri "
                  "is better); below, each seed's difference.", "",
                  "The `puri` rule is a reconstruction (doc/schedules.md), not a published schedule. Its assumptions, "
                  "as these runs' start-up tables state them: the peak is the base lr (%s) times k, capped at %s "
                  "(sweep.py's default --lr-cap: 6 x the base, the reference recipe's 3e-3 cap over its 5e-4 base "
                  "lr); no warmup; decay %s, at every batch. The runs are far shorter than that horizon, so the rate "
                  "stays near its peak: this is linear scaling up to the cap, then a nearly constant rate."
                  % (base, cap, decay), "",
                  "| k | " + " | ".join(str(k) for k in pk) + " |", "|---|" + "---|" * len(pk),
                  "| puri - legw | " + " | ".join(
                      "%+.3f" % pairs[k][0] + (" ± %.3f" % pairs[k][1] if pairs[k][1] is not None else "")
                      + " (%d)" % len(pairs[k][2]) for k in pk) + " |",
                  "| by seed | " + " | ".join(", ".join("%s: %+.3f" % (sd, x) for sd, x in pairs[k][2])
                                              for k in pk) + " |"]
    return lines, (by, vals, rules, ks, bm, limit)


def claim_plot(by, vals, rules, ks, bm, limit, d):
    if not shutil.which("gnuplot"):
        print("note: gnuplot not found (apt-get install gnuplot-nox): wrote the table, no plot", file=sys.stderr)
        return None
    cmds = []
    with tempfile.TemporaryDirectory() as tmp:
        top = 0.0
        for i, rule in enumerate(rules):
            fn = os.path.join(tmp, rule)
            with open(fn, "w") as fh:
                for k in ks:
                    xs = vals.get((rule, k), [])
                    if xs and not any(r["status"] == "diverged" for _, r in by.get((rule, k), [])):
                        m, ci = mean_ci(xs)
                        top = max(top, m + (ci or 0))
                        fh.write("%g %.6f %.6f\n" % (k * (1 + 0.03 * (i - 1.5)), m, ci or 0))  # spread the bars
            if os.path.getsize(fn):
                cmds.append('"%s" using 1:2:3 with yerrorlines lw 2 pt 7 lc rgb "%s" title "%s"'
                            % (fn, color(rule), rule))
        cmds.append('%f with lines dt 2 lw 2 lc rgb "black" title "baseline + %g%%"' % (limit, 100 * CLAIM_MARGIN))
        gp = ['set terminal pngcairo size 900,560 font "sans,11"', 'set output "%s/claim.png.tmp"' % d,
              'set logscale x 2', 'set grid', 'set key outside right', 'set xrange [0.8:%g]' % (ks[-1] * 1.25),
              'set xlabel "k = B / B0 (same epochs at every k)"', 'set ylabel "final validation bpc (mean over seeds)"',
              'set yrange [%f:%f]' % (bm * 0.97, max(top, limit) * 1.03),
              'set title "Mean final validation bpc, 95% intervals where 2+ seeds"', "plot " + ", ".join(cmds)]
        gnuplot(gp, d, "claim.png")
    return "claim.png"


def main(argv):
    if len(argv) == 2 and argv[0] == "--claim":
        with unpacked([argv[1]]) as (d,):
            for x in sorted(os.listdir(d)) if os.path.isdir(d) else []:
                if re.match(r"^seed\d+", x) and os.path.isdir(os.path.join(d, x, "runs")):
                    report(os.path.join(d, x))
            claim_report(d)
        return 0
    if len(argv) == 2 and argv[0] == "--check":
        if not os.path.exists(argv[1]):
            die("cannot read log %s" % argv[1])
        train, val = read_log(argv[1])
        d = divergence(train, val)
        print("diverged %d %s" % d if d else "ok")
        return 0
    if len(argv) != 1 or argv[0].startswith("-"):
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        die("usage: dev/sweep/sweep_report.py DIR  |  dev/sweep/sweep_report.py --check LOG  |  "
            "dev/sweep/sweep_report.py --claim DIR")
    with unpacked([argv[0]]) as (d,):
        report(d)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

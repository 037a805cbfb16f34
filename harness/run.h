// harness/run.h: a training run's settings and files, everything about a run that is not the
// training itself: the flag table and its parser (options_parse, --help), the run record
// a checkpoint carries so that a resume continues its own run on its own data
// (run_record, options_from_record, data_identity), and the run directory, checked apart
// from the inputs, locked and prepared before the first step (run_dir_open). train.h
// includes it; the loop there reads Options and writes through a RunDir.
#pragma once
#include "harness/checkpoint.h"  // defines: CKPT_MAGIC, the run record's data lines, and via it mlstm.h
#include "data.h"      // defines: Stream, Shard (the shards a run reads: their identity, check_outputs_apart)
#include "schedule.h"  // defines: LrSettings, lr_settings_set, lr_settings_value
#include <assert.h>
#include <dirent.h>
#include <limits.h>
#include <stddef.h>
#include <sys/file.h>
#ifdef __cplusplus
#include <type_traits>  // (the flag table's type checks, FIELD_IS, in the GPU trainer's C++)
#endif

// ----------------------------------------------------------------------------
// Settings. One table lists every flag of both trainers: options_parse reads it and --help
// prints it, so the two cannot disagree. The schedule's flags are parsed and explained by
// schedule.h (lr_settings_set, lr_settings_help).

// The trainers (train.h's model_backend says which one is running): a flag is taken by both,
// or by one of them (the GPU trainer's --matmul).
typedef enum { BACKEND_CPU = 1, BACKEND_GPU = 2, BACKEND_ANY = BACKEND_CPU | BACKEND_GPU } Backend;
typedef enum { MATMUL_WMMA, MATMUL_CUBLASLT } MatmulKind;  // --matmul, the GPU trainer's
// --bf16-kernel, the CPU trainer's: which kernel sums --bf16's products (train.c, model_products)
typedef enum { BF16_AUTO, BF16_AMX, BF16_AVX512, BF16_AMX_EMULATED, BF16_AVX512_EMULATED } Bf16Kernel;

typedef struct {
    MlstmConfig model;
    int B, T;                  // rows per rank, steps per sequence
    long steps;                // stop when this many batches have been read (skipped steps count)
    LrSettings lr;
    double clip;               // global gradient-norm clip, 0: off
    int fp16;                  // --fp16 given (what the run does is the backend's answer: Run.precision)
    int bf16;                  // --bf16: the CPU trainer's products in BF16 (fast.h, gemm.h)
    int bf16_kernel;           // Bf16Kernel: which kernel, with --bf16
    long inject_overflow;      // rank 0 seeds this data step's backward with S = inf, -1: never
    const char *train, *val;   // shard directory or comma-separated shard files; NULL: built-in corpus
    long corpus_bytes;         // built-in corpus: training bytes (val is 1/40 of it)
    int reset_docs;            // zero the state at document starts (framed data)
    long seed;
    long val_every, val_steps; // validate every N steps on up to M batches of the val stream (0: all)
    long val_batch;            // validation rows in all ranks together, 0: the training batch
    long sample_every;
    int sample_len;
    const char *prompt;
    double temperature;
    const char *out;           // the run directory: checkpoints, log, lock (RunDir)
    const char *resume, *init_from;
    int overwrite;             // a new run may replace the run in --out
    long ckpt_every;
    long print_every;
    int threads;
    int matmul;                // MatmulKind: the GPU trainer's matmuls
    uint64_t given;            // bit i: flags[i] was on the command line
} Options;

// Limits of the sizes: far beyond the paper's (H=4096, D=64, T=256, 128 rows per GPU),
// small enough that every size product below fits its type with room to spare.
// (MAX_HIDDEN, MAX_EMBED: harness/checkpoint.h, which every checkpoint reader applies; MAX_THREADS: util.h)
#define MAX_ROWS (1 << 20)
#define MAX_SEQ_LEN (1 << 20)
#define MAX_STEPS (1L << 50)

// How a flag's value is read and where it goes: a whole number or a number within
// [min, max], a string, a switch that stores 1 (on) or 0 (off), or one of the words of its
// `arg` ('|' between them) stored as its index. The default --help prints is read from the
// Options that options_defaults fills, so it is the one the code uses.
typedef enum {
    ARG_SWITCH_ON, ARG_SWITCH_OFF, ARG_INT, ARG_LONG, ARG_DOUBLE, ARG_STR, ARG_CHOICE, ARG_SCHEDULE, ARG_HELP
} ArgKind;
// What --resume does with a flag. A checkpoint records the run it belongs to (its run
// record, doc/formats.md), so that a resume continues that run and no other:
//   RUN_DEFINING    T, the schedule, clip, precision, seed, the built-in corpus's size:
//                   taken from the record; given again, the value must agree
//   RUN_SCORING     --val-steps, --val-batch: which batches and rows a validation reads.
//                   In a run whose best.ckpt is judged by validation (train.h's Best:
//                   scores are comparable only over the same text) taken from the record,
//                   and given again the value must agree; in any other run the invocation's
//   RUN_DATA        --train, --val: where the data is now, the record's place unless
//                   given; the run's data is known by its content (the shards' sizes
//                   and checksums the record holds), so data moved or named another
//                   way resumes, and changed bytes at the same path are refused
//   RUN_LENGTH      --steps: the record's unless given anew
//   RUN_MODEL       the model and the global batch, in the checkpoint's header
//                   (config_from_checkpoint checks them)
//   RUN_INVOCATION  outputs, reporting, threads, the GPU trainer's --matmul: this invocation's,
//                   not recorded, so two runs that train alike write checkpoints alike wherever
//                   they write them (--matmul picks how the products are summed, not what the
//                   run computes: like a run moved between the trainers, a resume may change it)
typedef enum { RUN_DEFINING, RUN_SCORING, RUN_DATA, RUN_LENGTH, RUN_MODEL, RUN_INVOCATION } RunRule;
typedef struct {
    const char *name, *arg;
    ArgKind kind;
    size_t at;          // offsetof the field in Options
    double min, max;
    const char *help;
    const char *unset;  // the default in words when the field is 0 or NULL (NULL: print the value)
    RunRule on_resume;
    Backend backends;   // the trainers that take it
} Flag;
// A flag's kind and its field, as one: the field's C type must be the kind's, or the table does
// not compile, in C (_Generic) and in the GPU trainer's C++ ("array size is negative" at the
// entry whose AS_ kind and field differ).
#ifdef __cplusplus
#define FIELD_IS(field, type) std::is_same<decltype(((Options *)0)->field), type>::value
#else
#define FIELD_IS(field, type) _Generic(((Options *)0)->field, type: 1, default: 0)
#endif
#define AT(field, type) (offsetof(Options, field) + 0 * sizeof(char[FIELD_IS(field, type) ? 1 : -1]))
#define AS_SWITCH_ON(field) ARG_SWITCH_ON, AT(field, int)
#define AS_SWITCH_OFF(field) ARG_SWITCH_OFF, AT(field, int)
#define AS_INT(field) ARG_INT, AT(field, int)
#define AS_LONG(field) ARG_LONG, AT(field, long)
#define AS_DOUBLE(field) ARG_DOUBLE, AT(field, double)
#define AS_STR(field) ARG_STR, AT(field, const char *)
#define AS_CHOICE(field) ARG_CHOICE, AT(field, int)
#define AS_SCHEDULE ARG_SCHEDULE, 0  // (Options.lr, through schedule.h)
#define AS_HELP ARG_HELP, 0
static const Flag flags[] = {
    {"train", "PATH", AS_STR(train), 0, 0,
     "training data: a directory of train_NNN.bin shards or comma-separated shard files",
     "the built-in review corpus, no download", RUN_DATA, BACKEND_ANY},
    {"val", "PATH", AS_STR(val), 0, 0,
     "validation data, as --train", "the val_NNN.bin shards beside --train", RUN_DATA, BACKEND_ANY},
    {"corpus-bytes", "N", AS_LONG(corpus_bytes), 1, 1L << 40,
     "built-in corpus: bytes of training text; val is 1/40 of it", NULL, RUN_DEFINING, BACKEND_ANY},
    {"no-reset-docs", NULL, AS_SWITCH_OFF(reset_docs), 0, 0,
     "keep the state across document starts (default: reset at each '\\n' of framed data)", NULL, RUN_DEFINING,
     BACKEND_ANY},
    {"hidden", "H", AS_INT(model.H), 1, MAX_HIDDEN, "hidden units, 4096 in the paper", NULL, RUN_MODEL, BACKEND_ANY},
    {"embed", "D", AS_INT(model.D), 1, MAX_EMBED, "embedding width, 64 in the paper", NULL, RUN_MODEL, BACKEND_ANY},
    {"no-weight-norm", NULL, AS_SWITCH_OFF(model.wnorm), 0, 0,
     "train without weight normalisation (default: on, as the reference models)", NULL, RUN_MODEL, BACKEND_ANY},
    {"batch", "B", AS_INT(B), 1, MAX_ROWS,
     "sequences per rank per step; the global batch is ranks x B", NULL, RUN_MODEL, BACKEND_ANY},
    {"seq-len", "T", AS_INT(T), 1, MAX_SEQ_LEN,
     "characters per sequence, the truncated-BPTT window, 256 in the paper", NULL, RUN_DEFINING, BACKEND_ANY},
    {"steps", "N", AS_LONG(steps), 1, MAX_STEPS,
     "train until N batches have been read; the default decay ends here", NULL, RUN_LENGTH, BACKEND_ANY},
    {"clip", "X", AS_DOUBLE(clip), 0, 1e30, "clip the global gradient norm to X, 0 = off", NULL, RUN_DEFINING,
     BACKEND_ANY},
    {"fp16", NULL, AS_SWITCH_ON(fp16), 0, 0,
     "dynamic loss scaling, as FP16 training needs (the CPU trainer runs the\n"
     "                         protocol in FP32; the GPU build fixes its precision)", NULL, RUN_DEFINING, BACKEND_ANY},
    {"bf16", NULL, AS_SWITCH_ON(bf16), 0, 0,
     "BF16 products (operands rounded to BF16, sums and master weights FP32; the\n"
     "                         cell, softmax, norms and Adam FP32) on AMX-BF16 tiles or AVX512-BF16, or where\n"
     "                         the CPU has neither an emulation of AVX512-BF16's bits, much slower (a warning\n"
     "                         says so); the settings table's precision row says which", NULL, RUN_DEFINING,
     BACKEND_CPU},
    {"bf16-kernel", "auto|amx|avx512bf16|amx-emulated|avx512bf16-emulated", AS_CHOICE(bf16_kernel), 0, 0,
     "with --bf16, its kernel: auto (AMX-BF16, else AVX512-BF16, as the CPU allows),\n"
     "                         one of those two, or a scalar emulation of either's bits on any CPU (slow).\n"
     "                         Their sums differ in order: naming one keeps a run's bits on another CPU kind",
     NULL, RUN_INVOCATION, BACKEND_CPU},
    {"inject-overflow", "STEP", AS_LONG(inject_overflow), 1, MAX_STEPS,
     "rank 0 seeds data step STEP's backward with S = inf: to see on your\n"
     "                         machine that an overflow skips the step on every rank", "never", RUN_INVOCATION,
     BACKEND_ANY},
    {"seed", "N", AS_LONG(seed), 0, 9.2e18,
     "seed of the initial weights, the built-in corpus and sampling", NULL, RUN_DEFINING, BACKEND_ANY},
    {"val-every", "N", AS_LONG(val_every), 0, MAX_STEPS,
     "validate every N steps, 0 = only at the end", NULL, RUN_INVOCATION, BACKEND_ANY},
    {"val-steps", "N", AS_LONG(val_steps), 0, MAX_STEPS,
     "batches per validation, 0 = the whole val stream", NULL, RUN_SCORING, BACKEND_ANY},
    {"val-batch", "N", AS_LONG(val_batch), 1, MAX_ROWS,
     "validate on N rows in all, whatever --batch and the ranks; runs at different\n"
     "                         batches then score the same rows and windows", "the training batch", RUN_SCORING,
     BACKEND_ANY},
    {"sample-every", "N", AS_LONG(sample_every), 0, MAX_STEPS,
     "print a sample every N steps, 0 = only at the end", NULL, RUN_INVOCATION, BACKEND_ANY},
    {"sample-len", "N", AS_INT(sample_len), 0, 1 << 30,
     "characters per sample, 0 = no samples", NULL, RUN_INVOCATION, BACKEND_ANY},
    {"prompt", "TEXT", AS_STR(prompt), 0, 0, "what a sample starts from", NULL, RUN_INVOCATION, BACKEND_ANY},
    {"temperature", "X", AS_DOUBLE(temperature), 1e-6, 1e6, "sampling temperature", NULL, RUN_INVOCATION, BACKEND_ANY},
    {"out", "DIR", AS_STR(out), 0, 0,
     "the run directory: latest.ckpt, best.ckpt, train.log and lock", NULL, RUN_INVOCATION, BACKEND_ANY},
    {"ckpt-every", "N", AS_LONG(ckpt_every), 0, MAX_STEPS,
     "write latest.ckpt every N steps, 0 = only at the end", NULL, RUN_INVOCATION, BACKEND_ANY},
    {"resume", "PATH", AS_STR(resume), 0, 0,
     "continue the run in directory PATH (its latest.ckpt: model and batch, optimiser,\n"
     "                         schedule, data position, state), or from a checkpoint file into --out;\n"
     "                         the model flags may be left out", "a new run", RUN_INVOCATION, BACKEND_ANY},
    {"init-from", "PATH", AS_STR(init_from), 0, 0,
     "a new run from the weights of this checkpoint (a run directory: its best.ckpt):\n"
     "                         fresh optimiser, step 0, any --batch and number of ranks (fine-tuning)",
     "mlstm_init's weights for --seed", RUN_INVOCATION, BACKEND_ANY},
    {"overwrite", NULL, AS_SWITCH_ON(overwrite), 0, 0,
     "a new run may replace the run in --out, its checkpoints and log (default: refuse)", NULL, RUN_INVOCATION,
     BACKEND_ANY},
    {"print-every", "N", AS_LONG(print_every), 1, MAX_STEPS, "progress line every N steps", NULL, RUN_INVOCATION,
     BACKEND_ANY},
    {"threads", "N", AS_INT(threads), 1, MAX_THREADS, "OpenMP threads", "all cores", RUN_INVOCATION, BACKEND_ANY},
    {"matmul", "wmma|cublaslt", AS_CHOICE(matmul), 0, 0,
     "the matmuls: wmma, the hand-written kernel (SIMT in the FP32 build),\n"
     "                         or cublaslt, cuBLASLt's",
     NULL, RUN_INVOCATION, BACKEND_GPU},
    {"lr-schedule", "NAME", AS_SCHEDULE, 0, 0, NULL, NULL, RUN_DEFINING, BACKEND_ANY},
    {"lr", "X", AS_SCHEDULE, 0, 0, NULL, NULL, RUN_DEFINING, BACKEND_ANY},
    {"base-batch", "N", AS_SCHEDULE, 0, 0, NULL, NULL, RUN_DEFINING, BACKEND_ANY},
    {"warmup-epochs", "X", AS_SCHEDULE, 0, 0, NULL, NULL, RUN_DEFINING, BACKEND_ANY},
    {"warmup-steps", "N", AS_SCHEDULE, 0, 0, NULL, NULL, RUN_DEFINING, BACKEND_ANY},
    {"decay", "SHAPE", AS_SCHEDULE, 0, 0, NULL, NULL, RUN_DEFINING, BACKEND_ANY},
    {"decay-epochs", "X", AS_SCHEDULE, 0, 0, NULL, NULL, RUN_DEFINING, BACKEND_ANY},
    {"decay-steps", "N", AS_SCHEDULE, 0, 0, NULL, NULL, RUN_DEFINING, BACKEND_ANY},
    {"decay-power", "X", AS_SCHEDULE, 0, 0, NULL, NULL, RUN_DEFINING, BACKEND_ANY},
    {"decay-rate", "X", AS_SCHEDULE, 0, 0, NULL, NULL, RUN_DEFINING, BACKEND_ANY},
    {"min-lr", "X", AS_SCHEDULE, 0, 0, NULL, NULL, RUN_DEFINING, BACKEND_ANY},
    {"lr-cap", "X", AS_SCHEDULE, 0, 0, NULL, NULL, RUN_DEFINING, BACKEND_ANY},
    {"help", NULL, AS_HELP, 0, 0, "this text", NULL, RUN_INVOCATION, BACKEND_ANY},
};
#undef AT
enum { NFLAGS = sizeof flags / sizeof flags[0] };
static_assert(NFLAGS <= 64, "Options.given has one bit per flag");

static int flag_index(const char *name) {
    for (int i = 0; i < NFLAGS; i++)
        if (!strcmp(flags[i].name, name)) return i;
    fail("no flag --%s (a bug)", name);
    return -1;
}
static int flag_given(const Options *o, const char *name) { return (o->given >> flag_index(name)) & 1; }

static void options_defaults(Options *o) {
    memset(o, 0, sizeof *o);
    o->model = (MlstmConfig){256, 64, 256, 1};
    o->B = 32;
    o->T = 64;
    o->steps = 800;
    // The small CPU model learns faster than the paper's recipe (5e-4 at 128) allows, so
    // without --lr-schedule the default is LEGW at 2e-3 tuned for batch 32. Not marked
    // as given: a named preset brings its own reference-recipe values. The decay ends
    // at --steps unless --decay-epochs or --decay-steps say otherwise (train_main).
    lr_preset(&o->lr, LR_LEGW);
    o->lr.base_lr = 2e-3;
    o->lr.base_batch = 32;
    o->clip = 1.0;
    o->inject_overflow = -1;
    o->corpus_bytes = 4000000;
    o->reset_docs = 1;
    o->seed = 1;
    o->val_every = 200;
    o->sample_len = 200;
    o->prompt = "\n This ";
    o->temperature = 0.8;
    o->out = "out";
    o->print_every = 10;
}

// Choice k of an ARG_CHOICE flag's words (`arg`, '|' between them) into out[64]; 0 if it has none.
static int choice_name(const Flag *f, int k, char out[64]) {
    const char *w = f->arg;
    for (int i = 0; i < k && w; i++) {
        w = strchr(w, '|');
        if (w) w++;
    }
    if (!w || !*w) return 0;
    snprintf(out, 64, "%.*s", (int)strcspn(w, "|"), w);
    return 1;
}
// The index of word v among an ARG_CHOICE flag's words, or -1.
static int choice_index(const Flag *f, const char *v) {
    char w[64];
    for (int k = 0; choice_name(f, k, w); k++)
        if (!strcmp(w, v)) return k;
    return -1;
}

// The default of flags[i], from the Options options_defaults filled.
static void flag_default(const Flag *f, const Options *d, char *out, size_t n) {
    const char *p = (const char *)d + f->at;
    long x = 0;
    if (f->kind == ARG_INT) x = *(const int *)p;
    if (f->kind == ARG_LONG) x = *(const long *)p;
    const char *s = f->kind == ARG_STR ? *(const char *const *)p : NULL;
    int zero = f->kind == ARG_STR ? !s : f->kind == ARG_DOUBLE ? *(const double *)p == 0 : x == 0 || x == -1;
    char word[64];
    if (f->kind == ARG_CHOICE && choice_name(f, *(const int *)p, word)) snprintf(out, n, " %s", word);
    else if (f->unset && zero) snprintf(out, n, ": %s", f->unset);
    else if (f->kind == ARG_DOUBLE) snprintf(out, n, " %g", *(const double *)p);
    else if (f->kind == ARG_STR) {  // quoted, a newline as \n
        size_t k = 0;
        out[k++] = ' ';
        out[k++] = '"';
        for (; *s && k + 4 < n; s++) {
            if (*s == '\n') out[k++] = '\\', out[k++] = 'n';
            else out[k++] = *s;
        }
        out[k++] = '"';
        out[k] = 0;
    } else snprintf(out, n, " %ld", x);
}

static void usage_resume(FILE *f, Backend backend);
// --help: the flags this trainer (backend) takes.
static void usage(FILE *f, const char *prog, Backend backend) {
    Options d;
    options_defaults(&d);
    fprintf(f, "usage: %s [flags]   (mpirun -np N %s [flags] for data parallelism)\n\n", prog, prog);
    for (int i = 0; i < NFLAGS; i++) {
        const Flag *fl = &flags[i];
        if (!fl->help || !(fl->backends & backend)) continue;
        char lhs[160], def[160];
        snprintf(lhs, sizeof lhs, "--%s%s%s", fl->name, fl->arg ? " " : "", fl->arg ? fl->arg : "");
        if (strlen(lhs) > 22) fprintf(f, "  %s\n", lhs), lhs[0] = 0;  // too wide for the column: a line of its own
        fprintf(f, "  %-22s %s", lhs, fl->help);
        if (fl->arg) {
            flag_default(fl, &d, def, sizeof def);
            fprintf(f, " (default%s)", def);
        }
        fprintf(f, "\n");
    }
    fprintf(f, "\n");
    usage_resume(f, backend);
    lr_settings_help_with(f, &d.lr, "--steps");
}

static void apply_flag(Options *o, int i, const char *v) {
    const Flag *f = &flags[i];
    char *p = (char *)o + f->at;
    char dashed[64];
    snprintf(dashed, sizeof dashed, "--%s", f->name);
    o->given |= 1ULL << i;
    switch (f->kind) {
    case ARG_SWITCH_ON:
    case ARG_SWITCH_OFF:  // no value on the command line; "on" in a run record (flag_value), nothing else
        if (v && strcmp(v, "on")) fail("--%s: a switch, recorded as \"on\", got \"%s\"", f->name, v);
        *(int *)p = f->kind == ARG_SWITCH_ON;
        break;
    case ARG_INT: *(int *)p = (int)parse_whole(dashed, v, (long long)f->min, (long long)f->max); break;
    case ARG_LONG: *(long *)p = (long)parse_whole(dashed, v, (long long)f->min, (long long)f->max); break;
    case ARG_DOUBLE: *(double *)p = parse_real(dashed, v, f->min, f->max); break;
    case ARG_STR: *(const char **)p = v; break;
    case ARG_CHOICE:
        *(int *)p = choice_index(f, v);
        if (*(int *)p < 0) fail("--%s: expected one of %s, got \"%s\"", f->name, f->arg, v);
        break;
    case ARG_SCHEDULE:
        if (!lr_settings_set(&o->lr, dashed, v)) fail("--%s: not a schedule flag (a bug)", f->name);
        break;
    case ARG_HELP: break;
    }
}

static int flag_named(const char *name, size_t n) {
    for (int i = 0; i < NFLAGS; i++)
        if (strlen(flags[i].name) == n && !strncmp(flags[i].name, name, n)) return i;
    return -1;
}

// --name value or --name=value (util.h, cli_word), "--" ends the flags; the flags this trainer
// (backend) takes.
static void options_parse(Options *o, int argc, char **argv, Backend backend) {
    options_defaults(o);
    int k = 1;
    for (CliFlag c; k < argc; k++) {
        CliWord w = cli_word(argv[k], &c);
        if (w == CLI_END_OF_FLAGS) k++;
        if (w == CLI_END_OF_FLAGS || w == CLI_ARGUMENT) break;  // an argument: refused below
        if (w == CLI_SINGLE_DASH) {
            int i = flag_named(argv[k] + 1, strcspn(argv[k] + 1, "="));
            if (i >= 0) fail("unknown flag %s: flags start with two dashes (--%s)", argv[k], flags[i].name);
            fail("unknown flag %s (flags start with two dashes; see --help)", argv[k]);
        }
        int i = flag_named(c.name, c.len);
        if (i < 0) fail("unknown flag --%.*s (see --help)", (int)c.len, c.name);
        const Flag *f = &flags[i];
        if (!(f->backends & backend))
            fail("--%s: a flag of the %s trainer, not of this one (see --help)", f->name,
                 f->backends == BACKEND_GPU ? "GPU" : "CPU");
        if (f->kind == ARG_HELP) {
            usage(stdout, argv[0], backend);
            exit(0);
        }
        const char *v = c.value;
        if (f->arg && !v && k + 1 >= argc) fail("--%s needs a value (see --help)", f->name);
        if (f->arg && !v) v = argv[++k];
        if (!f->arg && v) fail("--%s takes no value, got \"%s\"", f->name, argv[k]);
        apply_flag(o, i, v);
    }
    if (k < argc) fail("unexpected argument \"%s\" (flags are --name value; see --help)", argv[k]);
    if (o->resume && o->init_from)
        fail("--resume and --init-from: give one (--resume continues a run, --init-from starts one)");
}

// Checks across flags, once a resume has filled in the run's own.
static void options_check(const Options *o) {
    if (o->val && !o->train) fail("--val given without --train");
    if (o->bf16_kernel != BF16_AUTO && !o->bf16)
        fail("--bf16-kernel given without --bf16 (an FP32 run has no BF16 kernel)");
    if ((long)o->B * o->T > INT_MAX)
        fail("--batch %d x --seq-len %d: too large (at most %d characters per step)", o->B, o->T, INT_MAX);
}

// ----------------------------------------------------------------------------
// The run record: the values of the RUN_DEFINING, RUN_DATA and RUN_LENGTH flags, then
// the identity of the data, written into every checkpoint (doc/formats.md, "The run
// record") as pairs of NUL-terminated strings: the name without dashes and the value as
// apply_flag reads it back, then "train data" and "val data" (data_identity). A resume
// replays it (options_from_record) and checks the data against it (data_identity_check);
// the ranks compare the same text for all flags and their data (ranks_agree).

// The value of flags[i] in o as text that apply_flag reads back to the same value, in
// buf[64] or the string itself; NULL when the flag sets nothing (a switch that is off, a
// path not given, a schedule flag that does not describe o->lr, --help).
static const char *flag_value(const Options *o, int i, char *buf) {
    const Flag *f = &flags[i];
    const char *p = (const char *)o + f->at;
    char dashed[64];
    switch (f->kind) {
    case ARG_SWITCH_ON: return *(const int *)p ? "on" : NULL;
    case ARG_SWITCH_OFF: return *(const int *)p ? NULL : "on";
    case ARG_INT: snprintf(buf, 64, "%d", *(const int *)p); break;
    case ARG_LONG: snprintf(buf, 64, "%ld", *(const long *)p); break;
    case ARG_DOUBLE: snprintf(buf, 64, "%.17g", *(const double *)p); return buf;
    case ARG_STR: return *(const char *const *)p;
    case ARG_CHOICE: return choice_name(f, *(const int *)p, buf) ? buf : NULL;
    case ARG_SCHEDULE:
        snprintf(dashed, sizeof dashed, "--%s", f->name);
        return lr_settings_value(&o->lr, dashed, buf, 64) ? buf : NULL;
    case ARG_HELP: return NULL;
    }
    // a whole number whose default is a word (--val-batch: the training batch) is unset at 0 or -1
    return f->unset && (!strcmp(buf, "0") || !strcmp(buf, "-1")) ? NULL : buf;
}

typedef struct {
    char *text;  // (bytes,) name\0value\0 pairs
    size_t bytes, cap;
} RunText;

static void run_text_add(RunText *r, const char *name, const char *value) {
    size_t n = strlen(name) + 1, v = strlen(value) + 1;
    if (n + v > SIZE_MAX / 2 - r->bytes) fail("the settings are too long to record");
    if (r->bytes + n + v > r->cap) {
        r->cap = 2 * (r->bytes + n + v);
        r->text = (char *)realloc(r->text, r->cap);
        if (!r->text) fail("out of memory recording the settings (%zu bytes)", r->cap);
    }
    memcpy(r->text + r->bytes, name, n);
    memcpy(r->text + r->bytes + n, value, v);
    r->bytes += n + v;
}

static int flag_recorded(int i) { return flags[i].on_resume == RUN_DEFINING || flags[i].on_resume == RUN_SCORING ||
                                         flags[i].on_resume == RUN_DATA || flags[i].on_resume == RUN_LENGTH; }

// The record of o's run (the flags a run record holds), or of all its flags.
typedef enum { RECORD_RUN, RECORD_ALL_FLAGS } RecordWhat;
static RunText run_record(const Options *o, RecordWhat what) {
    RunText r = {NULL, 0, 0};
    for (int i = 0; i < NFLAGS; i++) {
        char buf[64];
        const char *v = flag_value(o, i, buf);
        if (v && (what == RECORD_ALL_FLAGS || flag_recorded(i))) run_text_add(&r, flags[i].name, v);
    }
    return r;
}

// The value a record holds for `name`, or NULL. `text` ends in a NUL past its `bytes`.
static const char *run_text_find(const char *text, size_t bytes, const char *name) {
    for (size_t at = 0; at < bytes;) {
        const char *n = text + at, *v = n + strlen(n) + 1;
        if (!strcmp(n, name)) return v;
        at = (size_t)(v + strlen(v) + 1 - text);
    }
    return NULL;
}

// Copies the field of flags[i] from src to dst (a schedule flag: the whole schedule); the
// field's size is its kind's (the table's AS_ macros make the two agree).
static void flag_copy(Options *dst, const Options *src, int i) {
    const Flag *f = &flags[i];
    size_t size = f->kind == ARG_LONG ? sizeof(long) : f->kind == ARG_DOUBLE ? sizeof(double)
                : f->kind == ARG_STR ? sizeof(const char *) : sizeof(int);
    if (f->kind == ARG_SCHEDULE) dst->lr = src->lr;
    else if (f->kind != ARG_HELP) memcpy((char *)dst + f->at, (const char *)src + f->at, size);
}

// flags[i]'s value for a message: numbers as %g (the record's %.17g is exact, not readable),
// text cut; a flag that sets nothing (flag_value's NULL) as what that means: a switch off,
// else its default in words.
static void flag_shown(int i, const char *value, char out[200]) {
    char *end;
    double x = value ? strtod(value, &end) : 0;
    if (!value && (flags[i].kind == ARG_SWITCH_ON || flags[i].kind == ARG_SWITCH_OFF)) snprintf(out, 200, "off");
    else if (!value) snprintf(out, 200, "not given (%s)", flags[i].unset ? flags[i].unset : "its default");
    else if (end != value && !*end) snprintf(out, 200, x == floor(x) && fabs(x) < 1e15 ? "%.0f" : "%g", x);
    else snprintf(out, 200, "%.180s%s", value, strlen(value) > 180 ? "..." : "");
}

// ----------------------------------------------------------------------------
// The data's identity. A run is tied to the bytes it reads, not to the path it read them
// from: one line per shard, "<bytes> <checksum> <name>", the checksum the shard's
// header carries (data.h, verified when the shard was opened) or, for the built-in
// corpus, the one computed over the generated text. Names are for messages only, at most
// RECORD_NAME_MAX bytes of them, a newline in one written as '?' (harness/checkpoint.h,
// ckpt_identity_line, is the line's form every reader checks).

static char *data_identity(const Stream *s) {
    size_t cap = 64 + (size_t)s->n_shards * 300, n = 0;
    char *text = (char *)mallocCheck(cap);
    for (int i = 0; i < s->n_shards; i++) {
        const Shard *sh = &s->shards[i];
        const char *slash = strrchr(sh->path, '/');
        char *name = text + n + snprintf(text + n, cap - n, "%lld %016llx ", (long long)sh->size,
                                         (unsigned long long)sh->checksum);
        n += (size_t)snprintf(text + n, cap - n, "%lld %016llx %.*s\n", (long long)sh->size,
                              (unsigned long long)sh->checksum, RECORD_NAME_MAX, slash ? slash + 1 : sh->path);
        for (; name < text + n - 1; name++)
            if (*name == '\n') *name = '?';
    }
    return text;
}

// The line of shard i in an identity text, copied into line[320] without its newline; 0 if none.
static int identity_line(const char *text, int i, char line[320]) {
    for (int k = 0; k < i && text; k++) {
        text = strchr(text, '\n');
        if (text) text++;
    }
    if (!text || !*text) return 0;
    size_t len = strcspn(text, "\n");
    snprintf(line, 320, "%.*s", (int)(len < 319 ? len : 319), text);
    return 1;
}
static int identity_shards(const char *text) {
    int n = 0;
    for (char line[320]; identity_line(text, n, line);) n++;
    return n;
}

// Says how `now` differs from `then` (two identity texts) in msg, a clause about `now` ("it has 3
// shards, ..."), or returns 0 when the data is the same.
static int data_identity_differs(const char *then, const char *now, char *msg, size_t cap) {
    int n_then = identity_shards(then), n_now = identity_shards(now);
    if (n_then != n_now) {
        snprintf(msg, cap, "it has %d shard%s, where %d %s read", n_now, n_now == 1 ? "" : "s", n_then,
                 n_then == 1 ? "was" : "were");
        return 1;
    }
    for (int i = 0; i < n_now; i++) {
        char a[320], b[320], name_a[210] = "", name_b[210] = "";
        long long size_a = -1, size_b = -1;
        unsigned long long sum_a = 0, sum_b = 0;
        identity_line(then, i, a);
        identity_line(now, i, b);
        sscanf(a, "%lld %llx %209s", &size_a, &sum_a, name_a);
        sscanf(b, "%lld %llx %209s", &size_b, &sum_b, name_b);
        if (size_a == size_b && sum_a == sum_b) continue;
        snprintf(msg, cap, "its shard %d (%s) holds %lld bytes with checksum %016llx, where shard %d (%s) held %lld "
                 "bytes with checksum %016llx", i, name_b, size_b, sum_b, i, name_a, size_a, sum_a);
        return 1;
    }
    return 0;
}

// --resume: the data this invocation opened must be the data the run read.
static void data_identity_check(const char *ckpt, const char *flag, const char *where, const char *then,
                                const char *now) {
    char msg[1200];
    if (data_identity_differs(then, now, msg, sizeof msg))
        fail("%s %s is not the data of the run in checkpoint %s: %s. A resume continues on the run's "
             "data: give %s its place, or start a new run from the weights with --init-from", flag, where, ckpt, msg,
             flag);
}

// A path made absolute for the record, so a resume from another directory finds the data;
// a comma-separated list path by path. malloc'd.
static char *absolute_paths(const char *spec) {
    size_t cap = strlen(spec) * 2 + 4096, n = 0;
    char *out = (char *)mallocCheck(cap), *copy = strdup(spec), *save = NULL;
    if (!copy) fail("out of memory");
    for (char *p = strtok_r(copy, ",", &save); p; p = strtok_r(NULL, ",", &save)) {
        char *real = realpath(p, NULL);
        const char *use = real ? real : p;
        if (n + strlen(use) + 2 > cap) {
            cap = 2 * (n + strlen(use) + 2);
            out = (char *)realloc(out, cap);
            if (!out) fail("out of memory");
        }
        n += (size_t)snprintf(out + n, cap - n, "%s%s", n ? "," : "", use);
        free(real);
    }
    free(copy);
    return out;
}

// A number a record always holds when it records the flag (one with no word for unset) is
// missing only from a record written before the flag was recorded: the command line's stands.
static int record_predates(const Options *rec, int i) {
    ArgKind k = flags[i].kind;
    return !((rec->given >> i) & 1) && (k == ARG_INT || k == ARG_LONG || k == ARG_DOUBLE) && !flags[i].unset;
}

// --resume: the run's settings from the checkpoint's record `text` (bytes, NUL-terminated
// past the end). A RUN_DEFINING flag given on the command line must agree with it (a
// RUN_SCORING one too when the run is scored_by_validation); a RUN_LENGTH or RUN_DATA one
// given replaces it (the data is then checked by content); all others keep the command
// line's value. The data's identity is returned in identity[2]
// (train, val; NULL in a record written before the identity was recorded).
static void options_from_record(Options *o, const char *path, const char *text, size_t bytes,
                                const char *identity[2], int scored_by_validation) {
    if (bytes == 0 || text[bytes - 1] != 0)
        fail("checkpoint %s: its run record is not a list of settings (corrupt file)", path);
    Options rec;
    options_defaults(&rec);
    identity[0] = identity[1] = NULL;
    for (size_t at = 0; at < bytes;) {
        const char *name = text + at, *value = name + strlen(name) + 1;
        int i = flag_named(name, strlen(name));
        int data = !strcmp(name, RECORD_TRAIN_DATA) || !strcmp(name, RECORD_VAL_DATA);
        if (value >= text + bytes || (!data && (i < 0 || !flag_recorded(i))))
            fail("checkpoint %s: its run record holds \"%s\", not a setting this trainer records (written by "
                 "another version?)", path, name);
        if (data) identity[!strcmp(name, RECORD_VAL_DATA)] = value;
        else {  // a value this build refuses (another version's limits, a corrupt file) is the file's to name
            char keep[sizeof fail_where];
            memcpy(keep, fail_where, sizeof keep);
            if (snprintf(fail_where, sizeof fail_where, "%scheckpoint %.200s, its run record: ", keep, path) < 0)
                fail_where[0] = 0;
            apply_flag(&rec, i, value);
            memcpy(fail_where, keep, sizeof keep);
        }
        at = (size_t)(value + strlen(value) + 1 - text);
    }
    for (int i = 0; i < NFLAGS; i++) {  // first every check, against the command line's values
        RunRule rule = flags[i].on_resume;
        int must_agree = rule == RUN_DEFINING || (rule == RUN_SCORING && scored_by_validation);
        if (!must_agree || !((o->given >> i) & 1) || record_predates(&rec, i)) continue;
        char b1[64], b2[64];
        const char *mine = flag_value(o, i, b1), *run = flag_value(&rec, i, b2);
        if (!mine != !run || (mine && strcmp(mine, run))) {
            char shown[2][200];
            flag_shown(i, mine, shown[0]);
            flag_shown(i, run, shown[1]);
            fail("--%s %s disagrees with checkpoint %s, whose run has --%s %s: a resume continues that run (leave "
                 "the flag out, or start a new run from its weights with --init-from)", flags[i].name, shown[0],
                 path, flags[i].name, shown[1]);
        }
    }
    for (int i = 0; i < NFLAGS; i++) {  // then the copies (one schedule flag copies all of them)
        int invocation_own = flags[i].on_resume == RUN_SCORING && !scored_by_validation;
        if (flag_recorded(i) && !record_predates(&rec, i) && !invocation_own &&
            (!((o->given >> i) & 1) || flags[i].kind == ARG_SCHEDULE))
            flag_copy(o, &rec, i);
    }
}

// A checkpoint with no run record (format version 1, or one written from Python) says
// nothing of the run's data, T or schedule: the command line must, rather than the
// defaults (the built-in corpus) standing in for them unseen.
static void options_without_record(const Options *o, const char *path) {
    const char *missing[4];
    int n = 0;
    if (!flag_given(o, "train") && !flag_given(o, "corpus-bytes"))
        missing[n++] = "the data (--train, or --corpus-bytes)";
    if (!flag_given(o, "seq-len")) missing[n++] = "--seq-len";
    if (!flag_given(o, "lr-schedule")) missing[n++] = "--lr-schedule";
    if (!o->train && !flag_given(o, "seed")) missing[n++] = "--seed (it makes the built-in corpus)";
    if (n)
        fail("checkpoint %s has no run record (format version 1, or written from Python), so the run's settings are "
             "the command line's: give %s%s%s%s%s%s%s", path, missing[0], n > 1 ? ", " : "", n > 1 ? missing[1] : "",
             n > 2 ? ", " : "", n > 2 ? missing[2] : "", n > 3 ? ", " : "", n > 3 ? missing[3] : "");
}

// What --resume does with the flags, for --help (this trainer's: backend).
static void usage_resume(FILE *f, Backend backend) {
    fprintf(f, "A run is a directory (--out, above). --resume DIR continues the run in\n"
               "DIR; a checkpoint file continues into --out. The model and the global batch come from the\n"
               "checkpoint's header; the data (known by content: --train and --val say where it is now),\n"
               "--corpus-bytes, --no-reset-docs, --seq-len, the schedule, --clip, --fp16 and --seed from its run\n"
               "record (given again, they must agree); --val-steps and --val-batch too when best.ckpt is judged by\n"
               "validation. --steps is the run's unless given anew, and these are each invocation's own, with the\n"
               "defaults above:\n ");
    int col = 1;
    for (int i = 0; i < NFLAGS; i++) {
        if (flags[i].on_resume != RUN_INVOCATION || flags[i].kind == ARG_HELP || !(flags[i].backends & backend))
            continue;
        if (col + 3 + (int)strlen(flags[i].name) > 96) fprintf(f, "\n "), col = 1;
        col += fprintf(f, " --%s", flags[i].name);
    }
    fprintf(f, "\n\n");
}

// ----------------------------------------------------------------------------
// The run directory (--out): one run's files in one place, as llm.c's -o and nanoGPT's
// out_dir keep them. Rank 0 checks, locks and prepares it before the first step, so a
// bad --out costs no training time.
//   latest.ckpt  the last checkpoint: what --resume DIR continues, exactly
//   best.ckpt    the best checkpoint so far (train.h, best_offer); replaced only by a better one
//   train.log    the log; its first line names the run, so it is only ever written by its own run
//   lock         flock'ed while a trainer runs in the directory
// A resume of DIR's own latest.ckpt into DIR continues the run; any other start writes
// into a directory that holds no run, or replaces the run there with --overwrite.

#define RUN_LOG "train.log"
#define RUN_LOCK "lock"
// The log's first line: what it is, and whose. A file that does not start so is not a
// training log, and is never appended to, cut or replaced.
#define LOG_FIRST_LINE "# mlstm.c training log of run %016llx"
#define LOG_COLUMNS "# train step epoch lr loss bpc scale skipped gnorm chars_per_s | val step epoch loss bpc\n"

typedef struct {
    char dir[4096];
    char latest[4200], best[4200], log_path[4200], lock_path[4200];
    FILE *log;
    int dir_fd;          // the directory locked, held open from then on (run_dir_check_held)
    int lock_fd;
    int replacing;       // the directory holds an earlier run (--overwrite) until this run's first checkpoint
    int val_owed;        // a resume: the log says the validation at the checkpoint's step was cut short
    AtomicFile new_log;  // while replacing: this run's log, beside the earlier run's (util.h, atomic_open)
} RunDir;

static void run_dir_paths(RunDir *d, const char *dir) {
    if (snprintf(d->dir, sizeof d->dir, "%s", dir) >= (int)sizeof d->dir) fail("--out %s: path too long", dir);
    snprintf(d->latest, sizeof d->latest, "%s/%s", dir, RUN_LATEST_CKPT);
    snprintf(d->best, sizeof d->best, "%s/%s", dir, RUN_BEST_CKPT);
    snprintf(d->log_path, sizeof d->log_path, "%s/%s", dir, RUN_LOG);
    snprintf(d->lock_path, sizeof d->lock_path, "%s/%s", dir, RUN_LOCK);
    d->log = NULL;
    d->dir_fd = -1;
    d->lock_fd = -1;
    d->replacing = 0;
    d->val_owed = 0;
}

// Whether --out still names the directory this trainer locked, and its lock the file this
// trainer holds: the same device and inode now as when they were opened.
static int run_dir_is_held(const RunDir *d) {
    struct stat held, now, lock_held, lock_now;
    return fstat(d->dir_fd, &held) == 0 && stat(d->dir, &now) == 0 && held.st_dev == now.st_dev &&
           held.st_ino == now.st_ino && fstat(d->lock_fd, &lock_held) == 0 && stat(d->lock_path, &lock_now) == 0 &&
           lock_held.st_dev == lock_now.st_dev && lock_held.st_ino == lock_now.st_ino;
}

// A trainer writes only into the directory it locked. The files are written by path, so a
// directory removed, renamed away or replaced while the run goes on (by another run's, by a
// link to one) would have this run's checkpoints land in whatever --out names now, past
// another trainer's lock. Checked before every write into the directory (each log line,
// each checkpoint): the run stops there, writing nothing, and says where its files are.
static void run_dir_check_held(const RunDir *d) {
    if (d->dir_fd < 0 || run_dir_is_held(d)) return;
    char fd_link[64], where[4096] = "";
    snprintf(fd_link, sizeof fd_link, "/proc/self/fd/%d", d->dir_fd);
    ssize_t k = readlink(fd_link, where, sizeof where - 1);
    where[k > 0 ? k : 0] = 0;
    const char *deleted = " (deleted)";
    size_t n = strlen(where), nd = strlen(deleted);
    int removed = n >= nd && !strcmp(where + n - nd, deleted);
    char kept[4200] = "this run's files stay in the directory it locked";
    if (removed) snprintf(kept, sizeof kept, "the directory it locked was removed, with this run's files");
    else if (n) snprintf(kept, sizeof kept, "this run's files are in %s", where);
    fail("--out %s is no longer the directory this trainer locked (it was removed, renamed or replaced, or its %s "
         "was, while the run went on): stopping without writing there; %s", d->dir, RUN_LOCK, kept);
}

// mkdir -p `dir`.
static void make_dirs(const char *flag, const char *path) {
    char dir[4096];
    if (snprintf(dir, sizeof dir, "%s", path) >= (int)sizeof dir) fail("%s: path too long", flag);
    for (char *p = dir + 1;; p++) {
        if (*p != '/' && *p) continue;
        char keep = *p;
        *p = 0;
        if (mkdir(dir, 0777) != 0 && errno != EEXIST)
            fail("%s %s: cannot create directory %s: %s", flag, path, dir, strerror(errno));
        *p = keep;
        if (!keep) break;
    }
    struct stat sb;
    if (stat(path, &sb) != 0 || !S_ISDIR(sb.st_mode)) fail("%s %s: not a directory", flag, path);
}

static int exists(const char *path, struct stat *sb) { return stat(path, sb) == 0; }

// The run a log belongs to, from its first line: 1 and *id when it is a training log (id 0:
// written before logs named their run), 0 when it is not one, -1 when it is empty.
static int log_owner(const char *path, uint64_t *id) {
    FILE *f = fopen(path, "r");
    char line[256] = "";
    if (!f) return -1;
    int got = fgets(line, sizeof line, f) != NULL;
    fclose(f);
    unsigned long long x = 0;
    *id = 0;
    if (!got) return -1;
    if (sscanf(line, LOG_FIRST_LINE, &x) == 1) {  // the whole line, or a cut one that names no run
        char whole[64];
        snprintf(whole, sizeof whole, LOG_FIRST_LINE "\n", x);
        *id = x;
        return !strcmp(line, whole);
    }
    return !strncmp(line, "# train step epoch", 18);  // an earlier version's log
}

// One line of the log; a failed write (a full disk) is an error, not a silent gap.
static void log_printf(RunDir *d, const char *fmt, ...) {
    run_dir_check_held(d);
    va_list ap;
    va_start(ap, fmt);
    int r = vfprintf(d->log, fmt, ap);
    va_end(ap);
    if (r < 0 || fflush(d->log) != 0) fail("%s: cannot write: %s", d->log_path, strerror(errno));
}

// A validation that a signal cut short leaves this line in the log, after its step's train
// line and before that step's checkpoint (train.h, after_step): the resume that finds it at the
// end of what it keeps of the log owes the run that validation, and runs it before its first step.
#define LOG_VAL_CUT "# val %ld cut short by a signal; a resume runs it\n"

// On resume the log keeps what came before the checkpoint's step: lines written after it
// (by a run killed before its next checkpoint) are about to be repeated. Returns the bytes
// kept, and in *val_cut_at where a LOG_VAL_CUT line of data_step starts when it ends them, else -1.
static long log_kept(FILE *log, long data_step, long *val_cut_at) {
    rewind(log);
    char *line = NULL, val_cut[64];
    size_t cap = 0;
    ssize_t len;
    long keep = 0, step;
    snprintf(val_cut, sizeof val_cut, LOG_VAL_CUT, data_step);
    *val_cut_at = -1;
    while ((len = getline(&line, &cap, log)) > 0) {
        if (line[len - 1] != '\n') break;  // a line cut short by a kill
        if ((sscanf(line, "train %ld", &step) == 1 || sscanf(line, "val %ld", &step) == 1) && step > data_step) break;
        *val_cut_at = strcmp(line, val_cut) ? -1 : keep;
        keep += len;
    }
    free(line);
    return keep;
}

// Whether the run's log at log_path owes the validation of data_step (a LOG_VAL_CUT line ends
// what a resume there keeps); read before the lock is taken, to tell a resume at the run's last
// step that it has this to do.
static int log_owes_validation(const char *log_path, long data_step) {
    FILE *f = fopen(log_path, "r");
    long val_cut_at = -1;
    if (f) log_kept(f, data_step, &val_cut_at), fclose(f);
    return val_cut_at >= 0;
}

// The log cut back to the checkpoint's step; an owed validation's LOG_VAL_CUT line goes too, so
// that the resumed run's log reads as the uninterrupted run's (d->val_owed says it was there).
static void log_truncate(RunDir *d, long data_step) {
    long val_cut_at, keep = log_kept(d->log, data_step, &val_cut_at);
    d->val_owed = val_cut_at >= 0;
    if (d->val_owed) keep = val_cut_at;
    if (ftruncate(fileno(d->log), keep) != 0 || fseek(d->log, 0, SEEK_END) != 0)
        fail("%s: cannot write: %s", d->log_path, strerror(errno));
}

// Removes <file>.tmp.<pid> files a killed trainer left beside the run's checkpoints (whole
// checkpoints' worth of bytes each) and its log (a replacing run's, run_dir_replaced):
// beside the file each name leads to, since a checkpoint that is a symbolic link is written
// through it (util.h, atomic_open). Only a trainer holding the run's lock writes them.
static void remove_stale_temps(const RunDir *d) {
    run_dir_check_held(d);
    const char *names[3] = {d->latest, d->best, d->log_path};
    for (int k = 0; k < 3; k++) {
        char target[4096], dir[4096];
        struct stat st;
        path_follow_links("--out", names[k], target, &st);
        const char *slash = strrchr(target, '/'), *base = slash ? slash + 1 : target;
        snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - target) : 1, slash ? target : ".");
        if (slash == target) snprintf(dir, sizeof dir, "/");
        DIR *dd = opendir(dir);
        if (!dd) continue;
        size_t nb = strlen(base);
        for (struct dirent *e = readdir(dd); e; e = readdir(dd)) {
            const char *s = e->d_name, *pid = s + nb + 5;
            if (strncmp(s, base, nb) || strncmp(s + nb, ".tmp.", 5) || !*pid ||
                strspn(pid, "0123456789") != strlen(pid))
                continue;
            char p[8300];
            snprintf(p, sizeof p, "%s/%s", dir, s);
            if (unlink(p) == 0) printf("removed %s, left by a trainer that was killed while writing a checkpoint\n", p);
        }
        closedir(dd);
    }
}

// No output may be an input: a checkpoint written over a shard, or over the checkpoint a
// run starts from, loses what it replaces. Names are compared as files (same_file), so a
// symlink or hard link is its target. The one pair allowed is the resumed run's own
// latest.ckpt, read whole before the first write and replaced by rename.
typedef struct { const char *flag, *path; } RunInput;
static void check_outputs_apart(const RunDir *d, const Options *o, const char *resumed_ckpt, int continuing,
                                const Stream *train, const Stream *val) {
    int n = 0, cap = 2 + train->n_shards + val->n_shards;
    RunInput *in = (RunInput *)mallocCheck(sizeof(RunInput) * (size_t)cap);
    if (resumed_ckpt) in[n++] = (RunInput){"--resume", resumed_ckpt};
    char init_file[4200];  // a run directory stands for its best.ckpt (checkpoint_file)
    if (o->init_from) in[n++] = (RunInput){"--init-from", checkpoint_file(o->init_from, init_file, sizeof init_file)};
    for (int k = 0; k < 2; k++) {
        const Stream *s = k ? val : train;
        for (int i = 0; o->train && i < s->n_shards; i++)
            in[n++] = (RunInput){k ? "--val" : "--train", s->shards[i].path};
    }
    const char *outs[4] = {d->latest, d->best, d->log_path, d->lock_path};
    for (int i = 0; i < n; i++)
        for (int j = 0; j < 4; j++) {
            if (j == 0 && continuing && !strcmp(in[i].flag, "--resume")) continue;  // the run's own checkpoint
            if (same_file(in[i].path, outs[j]))
                fail("%s %s is %s: a run's outputs must not overwrite its inputs (give another --out)", in[i].flag,
                     in[i].path, outs[j]);
        }
    free(in);
}

// An earlier run's file in the directory: a checkpoint or a training log, or something
// else that a run must not replace even when told to.
static int holds_run_file(const char *path, int is_log, int overwrite) {
    struct stat sb;
    if (lstat(path, &sb) != 0) return 0;
    if (!exists(path, &sb))
        fail("%s is a symbolic link that leads to no file (%s): remove it, or give another --out", path,
             strerror(errno));
    if (!S_ISREG(sb.st_mode)) fail("%s: not a regular file (give another --out)", path);
    if (sb.st_size == 0) return 0;
    uint64_t id;
    char magic[8] = {0};
    FILE *f = is_log ? NULL : fopen(path, "rb");
    int ours = is_log ? log_owner(path, &id) == 1 : f && fread(magic, 1, 8, f) == 8 && !memcmp(magic, CKPT_MAGIC, 8);
    if (f) fclose(f);
    if (!ours && overwrite)
        fail("%s is not a %s, so --overwrite does not replace it: move it away, or give another --out", path,
             is_log ? "training log" : "checkpoint");
    return 1;
}

// A new run that replaces an earlier one (--overwrite) writes its log beside the earlier
// run's, and that run stays whole until the new run's first checkpoint: a new run that
// fails or stops before it (a divergence, a signal) leaves the earlier run as it was, its
// log included, to be continued. Such a run removes its own log at exit (fail() exits
// from anywhere).
static RunDir *run_dir_replacing;
static void run_dir_discard_new_log(void) {
    RunDir *d = run_dir_replacing;
    if (!d || !d->replacing || !d->log) return;
    fclose(d->log);
    d->log = NULL;
    if (run_dir_is_held(d)) unlink(d->new_log.tmp);
    else if (!strcmp(d->new_log.target, d->log_path))  // in the directory held, wherever it is now
        unlinkat(d->dir_fd, d->new_log.tmp + strlen(d->dir) + 1, 0);
}
// This run's first checkpoint, `written` (its latest.ckpt or best.ckpt), is in place: the
// earlier run goes, its other checkpoint removed and its log replaced by this run's.
static void run_dir_replaced(RunDir *d, const char *written) {
    if (!d->replacing) return;
    run_dir_check_held(d);
    const char *other = strcmp(written, d->latest) ? d->latest : d->best;
    if (unlink(other) != 0 && errno != ENOENT) fail("cannot remove %s (the earlier run's): %s", other, strerror(errno));
    if (fflush(d->log) != 0 || rename(d->new_log.tmp, d->new_log.target) != 0)
        fail("%s: cannot write: %s", d->log_path, strerror(errno));
    d->replacing = 0;
}

// The identity of a run continued in its directory: its checkpoint's, which its log and best.ckpt
// carry, and the format its checkpoints are written in. A version 4 checkpoint's identity is its
// record's and model's (harness/checkpoint.h, ckpt_run_identity), which the continued run has computed again
// from the same settings into *run_id. One of version 3 was made by an older rule: the run keeps
// it and writes version 3, whose identity no reader checks. A checkpoint that names no run (0:
// versions 1 and 2), or one of version 4 without a record (its flags then define the run, not
// the file), cannot be continued there. record: the checkpoint's, NULL when it has none.
static void run_id_continued(uint64_t *run_id, uint32_t *version, const char *path, const CkptHeader *hd,
                             const char *record) {
    uint64_t id = hd->st.run_id;
    if (id == 0)  // its log and best.ckpt cannot be told to be its run's
        fail("checkpoint %s names no run (an older file), so it cannot be continued in its directory: continue it "
             "into a new one (--resume %s --out DIR)", path, path);
    if (hd->version < 4) {
        *run_id = id;
        *version = 3;
    } else if (!record)
        fail("checkpoint %s has no run record, so its run %016llx is not the one the command line defines: it cannot "
             "be continued in its directory; continue it into a new one (--resume %s --out DIR)", path,
             (unsigned long long)id, path);
    else if (id != *run_id)
        fail("checkpoint %s is run %016llx, and its settings continued make run %016llx (a bug)", path,
             (unsigned long long)id, (unsigned long long)*run_id);
}

// Checks, locks and prepares the run directory (rank 0). continuing: this is a resume
// of the run in the directory (its latest.ckpt, whose run is run_id); else a new run, or
// a run continued from a checkpoint elsewhere, into a directory that holds no run unless
// --overwrite says to replace it. The log is opened for appending, after its checks. An
// earlier run's checkpoints stay until this run's first checkpoint replaces them (train.h),
// so a new run that fails early loses nothing. resumed_ckpt: the checkpoint a resume read (NULL
// for none), resumed_as_read: its identity as read (fstat, the file still open).
static void run_dir_open(RunDir *d, const Options *o, int continuing, uint64_t run_id, long data_step,
                         const char *resumed_ckpt, const struct stat *resumed_as_read, const Stream *train,
                         const Stream *val) {
    if (!*o->out) fail("--out: empty path");
    make_dirs("--out", o->out);
    run_dir_paths(d, o->out);
    int earlier = 0;
    const char *files[3] = {d->latest, d->best, d->log_path};
    for (int k = 0; k < 3; k++) earlier |= holds_run_file(files[k], k == 2, o->overwrite) ? 1 << k : 0;
    if (!continuing && earlier == 4 && !o->overwrite)  // only a log: a run that stopped before its first checkpoint
        fail("--out %s holds the log of a run that wrote no checkpoint (%s): there is nothing to resume; add "
             "--overwrite to replace that log, or give another --out", o->out, files[2]);
    if (!continuing && earlier && !o->overwrite && !(earlier & 1))  // nothing to continue: a run stopped early
        fail("--out %s holds a run that wrote no %s (%s): there is nothing to resume; add --overwrite to replace it, "
             "or give another --out", o->out, RUN_LATEST_CKPT, files[1]);
    if (!continuing && earlier && !o->overwrite)
        fail("--out %s holds a run (%s): continue it with --resume %s, give another --out, or --overwrite to replace "
             "it", o->out, files[0], o->out);
    check_outputs_apart(d, o, resumed_ckpt, continuing, train, val);
    // the directory is held from here (run_dir_check_held), its lock opened in it
    d->dir_fd = open(o->out, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (d->dir_fd < 0) fail("--out %s: %s", o->out, strerror(errno));
    d->lock_fd = openat(d->dir_fd, RUN_LOCK, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (d->lock_fd < 0) fail("--out %s: cannot write %s: %s", o->out, d->lock_path, strerror(errno));
    if (flock(d->lock_fd, LOCK_EX | LOCK_NB) != 0) fail("--out %s is in use by another trainer (it holds %s)", o->out,
                                                        d->lock_path);
    // The trainer that held the lock until now may have replaced latest.ckpt after this one read
    // it: continuing from the older would cut the log back and overwrite the newer checkpoint.
    struct stat now;
    if (continuing && (stat(d->latest, &now) != 0 || now.st_dev != resumed_as_read->st_dev ||
                       now.st_ino != resumed_as_read->st_ino))
        fail("--resume %s: %s was replaced after this trainer read it (by the trainer that held %s): resume again "
             "to continue from the newer one", o->resume, d->latest, o->out);
    remove_stale_temps(d);
    uint64_t log_id = 0;
    int log_state = log_owner(d->log_path, &log_id);  // 1: a training log, 0: not one, -1: none or empty
    if (continuing && log_state == 1 && log_id != run_id)
        fail("%s belongs to run %016llx, and %s to run %016llx: a log is only written by its own run (move one of "
             "them away)", d->log_path, (unsigned long long)log_id, resumed_ckpt, (unsigned long long)run_id);
    if (continuing && log_state == 0)
        fail("%s is not a training log: move it away to continue the run", d->log_path);
    d->replacing = !continuing && earlier;
    if (d->replacing) {  // the earlier run's log stays until this run's first checkpoint (run_dir_replaced)
        atomic_open(&d->new_log, d->log_path);
        d->log = d->new_log.f;
        static int at_exit_set = 0;
        if (!at_exit_set++) atexit(run_dir_discard_new_log);
        run_dir_replacing = d;
    } else {  // opened in the directory held, not by its path
        int keep = continuing && log_state == 1;
        int fd = openat(d->dir_fd, RUN_LOG, O_RDWR | O_CREAT | O_CLOEXEC | (keep ? 0 : O_TRUNC), 0666);
        d->log = fd >= 0 ? fdopen(fd, "r+") : NULL;
        if (fd >= 0 && !d->log) close(fd);
    }
    if (!d->log) fail("%s: cannot write: %s", d->log_path, strerror(errno));
    if (continuing && log_state == 1) log_truncate(d, data_step);
    else {
        log_printf(d, LOG_FIRST_LINE "\n", (unsigned long long)run_id);
        if (resumed_ckpt) log_printf(d, "# continues %s at step %ld\n", resumed_ckpt, data_step);
        log_printf(d, LOG_COLUMNS);
    }
}

static void run_dir_close(RunDir *d) {
    run_dir_discard_new_log();  // a run stopped before its first checkpoint: the earlier run stays
    run_dir_replacing = NULL;
    if (d->log) fclose(d->log);
    if (d->lock_fd >= 0) close(d->lock_fd);  // releases the lock
    if (d->dir_fd >= 0) close(d->dir_fd);
    d->log = NULL;
    d->lock_fd = -1;
    d->dir_fd = -1;
}

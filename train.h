// train.h: the training loop, shared by both trainers. Options and --help (one flag
// table), the processes (MPI), the data streams, evaluation, sampling, checkpoints,
// signals and train_main, the step of doc/design.md ("The training step") one batch
// at a time. It knows nothing of how the model computes: a backend does that, behind
// the model_* functions of the contract below. train.c is the CPU backend (mlstm.h),
// train.cu the GPU backend (kernels, FP16 + FP32 master weights, NCCL); each includes
// this file, defines the contract's functions and its own main().
#pragma once
#include "mlstm.h"     // defines: MlstmConfig, Mlstm, mlstm_forward, checkpoint_save/load, real
#include "data.h"      // defines: Stream, Loader, loader_batch, corpus_stream
#include "schedule.h"  // defines: LrSettings, LossScaler, StepDecision, decide_step
#include <assert.h>
#include <float.h>
#include <getopt.h>
#include <signal.h>
#include <time.h>
#include <dirent.h>
#include <limits.h>
#include <stddef.h>
#include <sys/file.h>
#ifdef USE_MPI
#include <mpi.h>
#endif

// The loss scaler's state (schedule.h) travels in the checkpoint's scaler field (mlstm.h).
static_assert(LOSS_SCALER_BYTES <= CKPT_SCALER_BYTES, "the loss scaler must fit its checkpoint field");

// ----------------------------------------------------------------------------
// The backend contract. The loop owns the data, the schedule, the loss scaler and
// the files; the backend owns the model, its gradients and Adam moments, and the
// carried state. Every step the loop calls, in this order (doc/design.md, "The
// training step", says why the order is this one):
//   model_step            forward from the carried state, backward seeded with the
//                         loss scale S; leaves S * this rank's gradients, advances
//                         the carried state, returns this rank's mean loss (nats)
//   model_inject_overflow (tests only) makes the gradients overflow
//   model_allreduce       gradients = their mean over the ranks
//   model_overflow        1 if a reduced gradient is inf/NaN
//   model_apply           only if the step is not skipped: unscale by d->inv_scale,
//                         clip the global norm to `clip` (0: off), Adam step number
//                         `applied` at d->lr; returns the unscaled norm before clipping
// and between steps, model_eval: forward only on the backend's separate validation
// state (first = 1 zeroes it), touching neither the training state nor the weights.
//
// Host copies, in the checkpoint's layout (FP32, whatever the backend computes in):
//   model_host   the Mlstm whose params, adam_m, adam_v equal the backend's current
//                master weights and moments; a backend that keeps them elsewhere
//                copies them back here when they changed since the last call. Its
//                activation buffers hold at least one row and one step (sample()
//                runs mlstm_forward on it).
//   model_state  (B,H) host arrays equal to the current carried training state.
//   model_loaded the caller overwrote what model_host and model_state returned (a
//                resume): the backend takes them as the truth from now on.
// model_create builds the model with mlstm_init's weights for `seed` (the same on
// every backend) and a zero state. model_precision says what the backend computes
// in: given whether --fp16 was asked for, it returns 1 when gradients are FP16
// (dynamic loss scaling on) and names the precision for the settings table.

typedef struct Model Model;
static Model *model_create(MlstmConfig cfg, int B, int T, uint64_t seed);
static void model_free(Model *md);
static int model_precision(int fp16_requested, const char **description);
static Mlstm *model_host(Model *md);
static void model_state(Model *md, real **h, real **c);
static void model_loaded(Model *md);
static double model_step(Model *md, const uint8_t *in, const uint8_t *tg, const uint8_t *rs, double scale);
static void model_inject_overflow(Model *md);
static void model_allreduce(Model *md);
static int model_overflow(Model *md);
static double model_apply(Model *md, const StepDecision *d, double clip, long applied);
static double model_eval(Model *md, const uint8_t *in, const uint8_t *tg, const uint8_t *rs, int first);

// ----------------------------------------------------------------------------
// Settings. One table lists every flag: getopt_long is built from it and --help
// prints it, so the two cannot disagree. The schedule's flags are parsed and
// explained by schedule.h (lr_settings_set, lr_settings_help).

typedef struct {
    MlstmConfig model;
    int B, T;                  // rows per rank, steps per sequence
    long steps;                // stop when this many batches have been read (skipped steps count)
    LrSettings lr;
    double clip;               // global gradient-norm clip, 0: off
    int fp16;                  // --fp16 given; then, from model_precision, whether gradients are FP16
    long inject_overflow;      // make this data step overflow (tests), -1: never
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
    const char *ckpt, *resume, *init_from, *log;
    int overwrite;             // a new run may replace an existing checkpoint and log
    long ckpt_every;
    long print_every;
    int threads;
    uint64_t given;            // bit i: flags[i] was on the command line
} Options;

// Limits of the sizes: far beyond the paper's (H=4096, D=64, T=256, 128 rows per GPU),
// small enough that every size product below fits its type with room to spare.
#define MAX_HIDDEN 65536
#define MAX_EMBED 65536
#define MAX_ROWS (1 << 20)
#define MAX_SEQ_LEN (1 << 20)
#define MAX_THREADS 1024   // beyond this libgomp fails to create its thread stacks
#define MAX_STEPS (1L << 50)

// How a flag's value is read and where it goes: a whole number or a number within
// [min, max], a string, or a switch that stores `min`. The default --help prints is
// read from the Options that options_defaults fills, so it is the one the code uses.
typedef enum { ARG_SET, ARG_INT, ARG_LONG, ARG_DOUBLE, ARG_STR, ARG_SCHEDULE, ARG_HELP } ArgKind;
typedef struct {
    const char *name, *arg;
    ArgKind kind;
    size_t at;          // offsetof the field in Options
    double min, max;
    const char *help;
    const char *unset;  // the default in words when the field is 0 or NULL (NULL: print the value)
} Flag;
#define AT(field) offsetof(Options, field)
static const Flag flags[] = {
    {"train", "PATH", ARG_STR, AT(train), 0, 0,
     "training data: a directory of train_NNN.bin shards or comma-separated shard files",
     "the built-in review corpus, no download"},
    {"val", "PATH", ARG_STR, AT(val), 0, 0, "validation data, as --train", "the val_NNN.bin shards beside --train"},
    {"corpus-bytes", "N", ARG_LONG, AT(corpus_bytes), 1, 1L << 40,
     "built-in corpus: bytes of training text; val is 1/40 of it", NULL},
    {"no-reset-docs", NULL, ARG_SET, AT(reset_docs), 0, 0,
     "keep the state across document starts (default: reset at each '\\n' of framed data)", NULL},
    {"hidden", "H", ARG_INT, AT(model.H), 1, MAX_HIDDEN, "hidden units, 4096 in the paper", NULL},
    {"embed", "D", ARG_INT, AT(model.D), 1, MAX_EMBED, "embedding width, 64 in the paper", NULL},
    {"no-weight-norm", NULL, ARG_SET, AT(model.wnorm), 0, 0,
     "train without weight normalisation (default: on, as the reference models)", NULL},
    {"batch", "B", ARG_INT, AT(B), 1, MAX_ROWS, "sequences per rank per step; the global batch is ranks x B", NULL},
    {"seq-len", "T", ARG_INT, AT(T), 1, MAX_SEQ_LEN,
     "characters per sequence, the truncated-BPTT window, 256 in the paper", NULL},
    {"steps", "N", ARG_LONG, AT(steps), 1, MAX_STEPS,
     "train until N batches have been read; the default decay ends here", NULL},
    {"clip", "X", ARG_DOUBLE, AT(clip), 0, 1e30, "clip the global gradient norm to X, 0 = off", NULL},
    {"fp16", NULL, ARG_SET, AT(fp16), 1, 0,
     "dynamic loss scaling, as FP16 training needs (the CPU trainer runs the\n"
     "                         protocol in FP32; the GPU build fixes its precision)", NULL},
    {"inject-overflow", "STEP", ARG_LONG, AT(inject_overflow), 0, MAX_STEPS,
     "make the gradients of data step STEP overflow (for tests)", "never"},
    {"seed", "N", ARG_LONG, AT(seed), 0, 9.2e18,
     "seed of the initial weights, the built-in corpus and sampling", NULL},
    {"val-every", "N", ARG_LONG, AT(val_every), 0, MAX_STEPS, "validate every N steps, 0 = only at the end", NULL},
    {"val-steps", "N", ARG_LONG, AT(val_steps), 0, MAX_STEPS,
     "batches per validation, 0 = the whole val stream", NULL},
    {"val-batch", "N", ARG_LONG, AT(val_batch), 1, MAX_ROWS,
     "validate on N rows in all, whatever --batch and the ranks; runs at different\n"
     "                         batches then score the same rows and windows", "the training batch"},
    {"sample-every", "N", ARG_LONG, AT(sample_every), 0, MAX_STEPS,
     "print a sample every N steps, 0 = only at the end", NULL},
    {"sample-len", "N", ARG_INT, AT(sample_len), 0, 1 << 30, "characters per sample, 0 = no samples", NULL},
    {"prompt", "TEXT", ARG_STR, AT(prompt), 0, 0, "what a sample starts from", NULL},
    {"temperature", "X", ARG_DOUBLE, AT(temperature), 1e-6, 1e6, "sampling temperature", NULL},
    {"ckpt", "PATH", ARG_STR, AT(ckpt), 0, 0, "write checkpoints here (and hold PATH.lock while running)", NULL},
    {"ckpt-every", "N", ARG_LONG, AT(ckpt_every), 0, MAX_STEPS,
     "write a checkpoint every N steps, 0 = only at the end", NULL},
    {"resume", "PATH", ARG_STR, AT(resume), 0, 0,
     "continue from this checkpoint (model and batch, optimiser, schedule, data\n"
     "                         position, state); the model flags may be left out", "a new run"},
    {"init-from", "PATH", ARG_STR, AT(init_from), 0, 0,
     "a new run from this checkpoint's weights: fresh optimiser, step 0,\n"
     "                         any --batch and number of ranks (fine-tuning)",
     "mlstm_init's weights for --seed"},
    {"overwrite", NULL, ARG_SET, AT(overwrite), 1, 0,
     "a new run may replace an existing --ckpt and --log (default: refuse)", NULL},
    {"log", "PATH", ARG_STR, AT(log), 0, 0, "machine-readable log, one line per step and per validation", NULL},
    {"print-every", "N", ARG_LONG, AT(print_every), 1, MAX_STEPS, "progress line every N steps", NULL},
    {"threads", "N", ARG_INT, AT(threads), 1, MAX_THREADS, "OpenMP threads", "all cores"},
    {"lr-schedule", "NAME", ARG_SCHEDULE, 0, 0, 0, NULL, NULL}, {"lr", "X", ARG_SCHEDULE, 0, 0, 0, NULL, NULL},
    {"base-batch", "N", ARG_SCHEDULE, 0, 0, 0, NULL, NULL}, {"warmup-epochs", "X", ARG_SCHEDULE, 0, 0, 0, NULL, NULL},
    {"warmup-steps", "N", ARG_SCHEDULE, 0, 0, 0, NULL, NULL}, {"decay", "SHAPE", ARG_SCHEDULE, 0, 0, 0, NULL, NULL},
    {"decay-epochs", "X", ARG_SCHEDULE, 0, 0, 0, NULL, NULL}, {"decay-steps", "N", ARG_SCHEDULE, 0, 0, 0, NULL, NULL},
    {"decay-power", "X", ARG_SCHEDULE, 0, 0, 0, NULL, NULL}, {"decay-rate", "X", ARG_SCHEDULE, 0, 0, 0, NULL, NULL},
    {"min-lr", "X", ARG_SCHEDULE, 0, 0, 0, NULL, NULL}, {"lr-cap", "X", ARG_SCHEDULE, 0, 0, 0, NULL, NULL},
    {"help", NULL, ARG_HELP, 0, 0, 0, "this text", NULL},
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
    o->ckpt = "out/model.ckpt";
    o->log = "out/train.log";
    o->print_every = 10;
}

// The default of flags[i], from the Options options_defaults filled.
static void flag_default(const Flag *f, const Options *d, char *out, size_t n) {
    const char *p = (const char *)d + f->at;
    long x = 0;
    if (f->kind == ARG_INT) x = *(const int *)p;
    if (f->kind == ARG_LONG) x = *(const long *)p;
    const char *s = f->kind == ARG_STR ? *(const char *const *)p : NULL;
    int zero = f->kind == ARG_STR ? !s : f->kind == ARG_DOUBLE ? *(const double *)p == 0 : x == 0 || x == -1;
    if (f->unset && zero) snprintf(out, n, ": %s", f->unset);
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

static void usage(FILE *f, const char *prog) {
    Options d;
    options_defaults(&d);
    fprintf(f, "usage: %s [flags]   (mpirun -np N %s [flags] for data parallelism)\n\n", prog, prog);
    for (int i = 0; i < NFLAGS; i++) {
        const Flag *fl = &flags[i];
        if (!fl->help) continue;
        char lhs[64], def[160];
        snprintf(lhs, sizeof lhs, "--%s%s%s", fl->name, fl->arg ? " " : "", fl->arg ? fl->arg : "");
        fprintf(f, "  %-22s %s", lhs, fl->help);
        if (fl->kind != ARG_SET && fl->kind != ARG_HELP) {
            flag_default(fl, &d, def, sizeof def);
            fprintf(f, " (default%s)", def);
        }
        fprintf(f, "\n");
    }
    fprintf(f, "\n");
    lr_settings_help_with(f, &d.lr, "--steps");
}

static double parse_number(const Flag *f, const char *v) {
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (errno || end == v || *end || x != x) fail("--%s: expected a number, got \"%s\"", f->name, v);
    if (x < f->min || x > f->max) fail("--%s: must be between %g and %g, got %s", f->name, f->min, f->max, v);
    return x;
}
// Whole numbers: digits only (no 1e3, no 12x, no 0x10), range-checked before any
// conversion to int, so 4294967298 is an error and not 2.
static long parse_whole(const Flag *f, const char *v) {
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (end == v || *end) fail("--%s: expected a whole number, got \"%s\"", f->name, v);
    if (errno == ERANGE || x < (long long)f->min || x > (long long)f->max)
        fail("--%s: must be between %.0f and %.0f, got %s", f->name, f->min, f->max, v);
    return (long)x;
}

static void apply_flag(Options *o, int i, const char *v) {
    const Flag *f = &flags[i];
    char *p = (char *)o + f->at;
    char dashed[64];
    o->given |= 1ULL << i;
    switch (f->kind) {
    case ARG_SET: *(int *)p = (int)f->min; break;
    case ARG_INT: *(int *)p = (int)parse_whole(f, v); break;
    case ARG_LONG: *(long *)p = parse_whole(f, v); break;
    case ARG_DOUBLE: *(double *)p = parse_number(f, v); break;
    case ARG_STR: *(const char **)p = v; break;
    case ARG_SCHEDULE:
        snprintf(dashed, sizeof dashed, "--%s", f->name);
        if (!lr_settings_set(&o->lr, dashed, v)) fail("--%s: not a schedule flag (a bug)", f->name);
        break;
    case ARG_HELP: break;
    }
}

static void options_parse(Options *o, int argc, char **argv) {
    options_defaults(o);
    struct option longopts[NFLAGS + 1];
    for (int i = 0; i < NFLAGS; i++)
        longopts[i] = (struct option){flags[i].name, flags[i].arg ? required_argument : no_argument, NULL, 1000 + i};
    longopts[NFLAGS] = (struct option){NULL, 0, NULL, 0};
    opterr = 0;  // we say what was wrong ourselves, then exit 2
    int c;
    while ((c = getopt_long(argc, argv, ":", longopts, NULL)) != -1) {
        if (c == '?') fail("unknown flag %s (see --help)", argv[optind - 1]);
        if (c == ':') fail("%s needs a value (see --help)", argv[optind - 1]);
        if (flags[c - 1000].kind == ARG_HELP) {
            usage(stdout, argv[0]);
            exit(0);
        }
        apply_flag(o, c - 1000, optarg);
    }
    if (optind < argc) fail("unexpected argument \"%s\" (flags are --name value; see --help)", argv[optind]);
    if (o->val && !o->train) fail("--val given without --train");
    if (o->resume && o->init_from)
        fail("--resume and --init-from: give one (--resume continues a run, --init-from starts one)");
    if ((long)o->B * o->T > INT_MAX)
        fail("--batch %d x --seq-len %d: too large (at most %d characters per step)", o->B, o->T, INT_MAX);
}

// ----------------------------------------------------------------------------
// Processes. Without MPI, or when not started by mpirun, there is one process.

static int world = 1, rank = 0;

static void dist_init(int *argc, char ***argv) {
#ifdef USE_MPI
    // Only call MPI_Init when a launcher started us, so a plain ./train needs no MPI runtime.
    if (getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_SIZE") || getenv("PMIX_RANK")) {
        MPI_Init(argc, argv);
        MPI_Comm_size(MPI_COMM_WORLD, &world);
        MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    }
#else
    (void)argc;
    (void)argv;
#endif
}
static void dist_finish(void) {
#ifdef USE_MPI
    if (world > 1 || getenv("OMPI_COMM_WORLD_SIZE")) MPI_Finalize();
#endif
}
// In-place sum over ranks (doc/design.md, "The training step", step 4; the GPU trainer uses NCCL).
static void dist_sum(real *x, size_t n) {
#ifdef USE_MPI
    MPI_Datatype type = sizeof(real) == 4 ? MPI_FLOAT : MPI_DOUBLE;
    if (world > 1) MPI_Allreduce(MPI_IN_PLACE, x, (int)n, type, MPI_SUM, MPI_COMM_WORLD);
#else
    (void)x;
    (void)n;
#endif
}
static double dist_sum1(double x) {
#ifdef USE_MPI
    if (world > 1) MPI_Allreduce(MPI_IN_PLACE, &x, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
#endif
    return x;
}
// Rank 0 collects every rank's (B,H) rows into (G,H), for the checkpoint.
static void dist_gather(const real *mine, real *all, size_t n) {
#ifdef USE_MPI
    if (world > 1) {
        MPI_Gather(mine, (int)n, sizeof(real) == 4 ? MPI_FLOAT : MPI_DOUBLE, all, (int)n,
                   sizeof(real) == 4 ? MPI_FLOAT : MPI_DOUBLE, 0, MPI_COMM_WORLD);
        return;
    }
#endif
    memcpy(all, mine, n * sizeof(real));
}

// ----------------------------------------------------------------------------
// Signals: the first SIGINT/SIGTERM asks the loop to stop at its next check (after
// the step, or between two batches of a validation pass), write a checkpoint and
// exit 0. A second one exits at once: the checkpoint on disk is whole, since each is
// written to a temporary file and renamed, and the next start removes that file.

static volatile sig_atomic_t stop_requested = 0;
static void on_signal(int sig) {
    if (stop_requested) {
        static const char msg[] = "\nsecond signal: exiting now; the last checkpoint written is intact\n";
        ssize_t r = write(2, msg, sizeof msg - 1);
        (void)r;
        _exit(128 + sig);
    }
    stop_requested = 1;
}
// Every rank stops at the same check, so no collective is left waiting.
static int stop_agreed(void) { return dist_sum1(stop_requested) > 0; }

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

// ----------------------------------------------------------------------------
// Data: shards from --train/--val, or the built-in corpus generated in memory.

static void open_stream(Stream *s, const char *spec, const char *split) {
    struct stat sb;
    if (stat(spec, &sb) == 0 && S_ISDIR(sb.st_mode)) {
        stream_open_dir(s, spec, split, 1);
        return;
    }
    char *copy = strdup(spec), *save = NULL;
    const char *paths[4096];
    int n = 0;
    for (char *p = strtok_r(copy, ",", &save); p && n < 4096; p = strtok_r(NULL, ",", &save)) paths[n++] = p;
    stream_open(s, paths, n, 1);
    free(copy);
}

static void open_data(const Options *o, Stream *train, Stream *val) {
    if (!o->train) {
        corpus_stream(train, o->corpus_bytes, o->seed, 0);
        corpus_stream(val, o->corpus_bytes / 40, o->seed, 1);
        return;
    }
    open_stream(train, o->train, "train");
    struct stat sb;
    if (o->val) open_stream(val, o->val, "val");
    else if (stat(o->train, &sb) == 0 && S_ISDIR(sb.st_mode)) open_stream(val, o->train, "val");
    else fail("--train names shard files: give the validation shards with --val");
}

// Refuses a split too small for one batch, saying which split it is.
static void loader_open(Loader *l, const Stream *s, int B, int T, const char *what) {
    int64_t G = (int64_t)world * B, need = G * T + 1;
    if (s->size < need)
        fail("%s has %lld bytes, too few for %lld rows of %d+1 bytes (need at least %lld): use a smaller --batch or "
             "--seq-len, or more data", what, (long long)s->size, (long long)G, T, (long long)need);
    loader_init(l, s, world, rank, B, T);
}

// Stateful truncated BPTT: the state after the last step of a forward feeds the next one.
static void carry(Mlstm *m, real *h, real *c) {
    memcpy(h, mlstm_h_out(m), sizeof(real) * m->b * m->cfg.H);
    memcpy(c, mlstm_c_out(m), sizeof(real) * m->b * m->cfg.H);
}

// A validation pass that has run VAL_QUIET_S seconds shows its progress on rank 0:
// a line rewritten in place on a terminal, else a line then and at every 10% after.
#define VAL_QUIET_S 2.0
static void val_progress(long done, long n, double t0, double *shown, int *tenths) {
    double t = now_seconds(), eta = (t - t0) / done * (n - done);
    if (rank != 0 || t - t0 < VAL_QUIET_S) return;
    int tty = isatty(1), pct = (int)(100 * done / n);
    if (tty ? t - *shown < 0.25 : pct / 10 <= *tenths) return;
    printf("%svalidation %3d%% (%ld/%ld batches, ETA %02d:%02d)%s", tty ? "\r" : "", pct, done, n, (int)(eta / 60),
           (int)eta % 60, tty ? " " : "\n");
    fflush(stdout);
    *shown = t;
    *tenths = pct / 10;
}

// Mean loss over `steps` batches of the val stream from a zero state (0: all of it).
// NAN when a signal asked to stop during the pass (checked before every batch).
static double evaluate(Model *md, const Loader *val, long steps, uint8_t *in, uint8_t *tg, uint8_t *rs) {
    long n = loader_steps_per_epoch(val);
    if (steps > 0 && steps < n) n = steps;
    double sum = 0, t0 = now_seconds(), shown = t0;
    int tenths = -1;  // the 10% step of the last line shown
    for (long s = 0; s < n; s++) {
        if (stop_agreed()) {
            sum = NAN;
            break;
        }
        loader_batch(val, s, in, tg, rs);
        sum += model_eval(md, in, tg, rs, s == 0);
        val_progress(s + 1, n, t0, &shown, &tenths);
    }
    if (rank == 0 && isatty(1) && now_seconds() - t0 >= VAL_QUIET_S) printf("\r%60s\r", "");  // clear the progress line
    return dist_sum1(sum / n) / world;
}

// --val-batch: the val rows are fixed in number, whatever the training batch, so that
// every run of a batch sweep is scored on the same rows and windows (at a large
// training batch the rows would otherwise be short and start mid-document). They
// need a model of their own width: `ev`, given the training weights before each
// validation (on a GPU a host round trip of the weights, once per validation).
static double validate(Model *md, Model *ev, const Loader *val, long steps, uint8_t *in, uint8_t *tg, uint8_t *rs) {
    if (ev != md) {
        const Mlstm *src = model_host(md);
        memcpy(model_host(ev)->params, src->params, sizeof(real) * src->nparams);
        model_loaded(ev);
    }
    return evaluate(ev, val, steps, in, tg, rs);
}

// Generates text after `prompt` with the host model, one byte at a time from a zero
// state (rank 0 only; the host model needs buffers for at least one row and step).
// Each byte is drawn by mlstm.h's sample_byte from the log of the softmax the forward
// left in probs. A model whose probabilities are not finite (NaN weights) has no
// distribution to draw from: the sample stops there and says so, and training goes on.
// With reset_docs the state is zeroed before each '\n' read, as in training and generate.
static void sample(Mlstm *m, const char *prompt, int len, double temperature, int reset_docs, uint64_t *rng,
                   FILE *out) {
    int H = m->cfg.H, V = m->cfg.V;
    real *h = (real *)mallocCheck(sizeof(real) * H), *c = (real *)mallocCheck(sizeof(real) * H);
    uint8_t x = (uint8_t)(prompt[0] ? prompt[0] : '\n'), dummy = 0;
    size_t np = strlen(prompt);
    SamplerConfig sc = {temperature, 0, 1.0};
    fprintf(out, "---- sample ----\n%s", prompt);
    for (size_t i = 1; i < np + (size_t)len; i++) {
        uint8_t reset = (uint8_t)(reset_docs && x == '\n');  // a document starts
        mlstm_forward(m, &x, &dummy, &reset, h, c, 1, 1);
        carry(m, h, c);
        if (i < np) {  // still reading the prompt
            x = (uint8_t)prompt[i];
            continue;
        }
        real logp[256];  // log 0 = -inf: a byte whose probability underflowed is never drawn
        for (int v = 0; v < V; v++) logp[v] = log(m->probs[v]);
        int v = sample_byte(logp, V, sc, rng);
        if (v < 0) {
            fprintf(out, "\n(sample stopped: the model's probabilities are NaN or Inf)");
            break;
        }
        x = (uint8_t)v;
        fputc(x, out);
    }
    fprintf(out, "\n----------------\n");
    free(h);
    free(c);
}

// ----------------------------------------------------------------------------
// Checkpoints: rank 0 gathers the carried state of all G rows and writes;
// every rank reads the whole file and keeps its own rows.

static void save_checkpoint(const char *path, Model *md, int B, const LossScaler *ls, long applied, long data_step,
                            uint64_t rng) {
    Mlstm *m = model_host(md);
    real *h, *c;
    model_state(md, &h, &c);
    int H = m->cfg.H, G = world * B;
    real *hall = (real *)mallocCheck(sizeof(real) * G * H);
    real *call = (real *)mallocCheck(sizeof(real) * G * H);
    dist_gather(h, hall, (size_t)B * H);
    dist_gather(c, call, (size_t)B * H);
    if (rank == 0) {
        TrainState st;
        memset(&st, 0, sizeof st);
        st.step = applied;
        st.data_step = data_step;
        st.rng = rng;
        st.G = G;
        loss_scaler_serialize(ls, st.scaler);
        checkpoint_save(path, m, &st, hall, call);
    }
    free(hall);
    free(call);
}

// A checkpoint to read (--resume, --init-from) is a regular file: open() on a FIFO
// would wait for a writer forever, and a directory is a slip of the path.
static void check_input_file(const char *flag, const char *path) {
    struct stat sb;
    if (!*path) fail("--%s: empty path", flag);
    if (stat(path, &sb) != 0) fail("--%s %s: %s", flag, path, strerror(errno));
    if (S_ISDIR(sb.st_mode)) fail("--%s %s: is a directory, not a checkpoint", flag, path);
    if (!S_ISREG(sb.st_mode)) fail("--%s %s: not a regular file", flag, path);
}

// checkpoint_header checks the magic, the sizes and the checksum; a checksum cannot
// vouch for what its writer put under it, so the fields the loop trusts are checked here.
static CkptHeader read_checkpoint_header(const char *flag, const char *path) {
    check_input_file(flag, path);
    CkptHeader hd;
    checkpoint_header(path, &hd);
    if (hd.cfg.H > MAX_HIDDEN || hd.cfg.D > MAX_EMBED)
        fail("checkpoint %s: D=%d H=%d, beyond this build's limits (%d, %d)", path, hd.cfg.D, hd.cfg.H, MAX_EMBED,
             MAX_HIDDEN);
    if (hd.st.data_step > (uint64_t)MAX_STEPS)
        fail("checkpoint %s: data step %llu is beyond any run (at most %ld): a corrupt file", path,
             (unsigned long long)hd.st.data_step, MAX_STEPS);
    if (hd.st.step > hd.st.data_step)
        fail("checkpoint %s: %llu applied steps but only %llu batches read: a corrupt file", path,
             (unsigned long long)hd.st.step, (unsigned long long)hd.st.data_step);
    return hd;
}

// --resume and --init-from take the model from the checkpoint, so it need not be
// repeated; a model flag that was given must agree. --resume also takes the global
// batch, since the checkpoint carries the state of its G rows.
static void config_from_checkpoint(Options *o, const char *path, const CkptHeader *hd) {
    if (flag_given(o, "hidden") && o->model.H != hd->cfg.H)
        fail("--hidden %d disagrees with checkpoint %s (H=%d)", o->model.H, path, hd->cfg.H);
    if (flag_given(o, "embed") && o->model.D != hd->cfg.D)
        fail("--embed %d disagrees with checkpoint %s (D=%d)", o->model.D, path, hd->cfg.D);
    if (flag_given(o, "no-weight-norm") && hd->cfg.wnorm)
        fail("--no-weight-norm disagrees with checkpoint %s (weight norm on)", path);
    o->model = hd->cfg;
    if (!o->resume) return;
    int G = hd->st.G;
    if (flag_given(o, "batch") && (long)o->B * world != G)
        fail("--batch %d x %d ranks = %ld rows disagrees with checkpoint %s (%d rows; --init-from starts at any batch)",
             o->B, world, (long)o->B * world, path, G);
    if (G % world)
        fail("checkpoint %s carries the state of %d rows, which %d ranks cannot share: resume on a number of ranks that "
             "divides %d", path, G, world, G);
    o->B = G / world;
}

// No step recovers from inf or NaN weights, moments or state.
static void check_finite(const char *path, const char *what, const real *x, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i]))
            fail("checkpoint %s: %s[%zu] is %g (a diverged or corrupt model)", path, what, i, (double)x[i]);
}

// --resume: everything, the carried state of this rank's rows included.
static void load_checkpoint(const char *path, Model *md, int B, LossScaler *ls, long *applied, long *data_step,
                            uint64_t *rng, int fp16) {
    Mlstm *m = model_host(md);
    real *h, *c;
    model_state(md, &h, &c);
    int H = m->cfg.H, G = world * B;
    TrainState st;
    real *hall = (real *)mallocCheck(sizeof(real) * G * H);
    real *call = (real *)mallocCheck(sizeof(real) * G * H);
    checkpoint_load(path, m, &st, hall, call, G);
    check_finite(path, "params", m->params, m->nparams);
    check_finite(path, "adam_m", m->adam_m, m->nparams);
    check_finite(path, "adam_v", m->adam_v, m->nparams);
    check_finite(path, "h", hall, (size_t)G * H);
    check_finite(path, "c", call, (size_t)G * H);
    memcpy(h, hall + (size_t)rank * B * H, sizeof(real) * B * H);
    memcpy(c, call + (size_t)rank * B * H, sizeof(real) * B * H);
    free(hall);
    free(call);
    if (loss_scaler_deserialize(ls, st.scaler) != 0) fail("checkpoint %s: the loss scaler state is invalid", path);
    if ((ls->ceiling > 1.0) != (fp16 != 0))
        fail("checkpoint %s was written %s --fp16; resume with the same mode", path, fp16 ? "without" : "with");
    *applied = (long)st.step;
    *data_step = (long)st.data_step;
    *rng = st.rng;
    model_loaded(md);
}

// --init-from: the weights only. Adam's moments start at zero, the carried state too,
// and the step, schedule and loss scale start afresh: fine-tuning at any batch.
static void init_from_checkpoint(const char *path, Model *md, int B, int G_file) {
    Mlstm *m = model_host(md);
    real *h, *c;
    model_state(md, &h, &c);
    size_t n = (size_t)G_file * m->cfg.H;
    TrainState st;
    real *hall = (real *)mallocCheck(sizeof(real) * n), *call = (real *)mallocCheck(sizeof(real) * n);
    checkpoint_load(path, m, &st, hall, call, G_file);
    check_finite(path, "params", m->params, m->nparams);
    free(hall);
    free(call);
    memset(m->adam_m, 0, sizeof(real) * m->nparams);
    memset(m->adam_v, 0, sizeof(real) * m->nparams);
    memset(h, 0, sizeof(real) * (size_t)B * m->cfg.H);
    memset(c, 0, sizeof(real) * (size_t)B * m->cfg.H);
    model_loaded(md);
}

// ----------------------------------------------------------------------------
// Output files (rank 0): checked, locked and prepared before the first step, so a
// bad --ckpt or --log costs no training time.

typedef struct {
    FILE *f;
    const char *path;
    int lock_fd;  // <ckpt>.lock, flock'ed while this trainer runs
} Outputs;

// mkdir -p of the directory above `path`.
static void make_parent_dirs(const char *flag, const char *path) {
    char dir[4096];
    if (snprintf(dir, sizeof dir, "%s", path) >= (int)sizeof dir) fail("--%s: path too long", flag);
    char *slash = strrchr(dir, '/');
    if (!slash || slash == dir) return;
    *slash = 0;
    for (char *p = dir + 1;; p++) {
        if (*p != '/' && *p) continue;
        char keep = *p;
        *p = 0;
        if (mkdir(dir, 0777) != 0 && errno != EEXIST)
            fail("--%s %s: cannot create directory %s: %s", flag, path, dir, strerror(errno));
        *p = keep;
        if (!keep) break;
    }
}

static int exists(const char *path, struct stat *sb) { return stat(path, sb) == 0; }

// One line of the log; a failed write (a full disk) is an error, not a silent gap.
static void log_printf(Outputs *out, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int r = vfprintf(out->f, fmt, ap);
    va_end(ap);
    if (r < 0 || fflush(out->f) != 0) fail("--log %s: cannot write: %s", out->path, strerror(errno));
}

// On resume the log keeps what came before the checkpoint's step: lines written
// after it (by a run killed before its next checkpoint) are about to be repeated.
static void log_truncate(Outputs *out, long data_step) {
    rewind(out->f);
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    long keep = 0, step;
    while ((len = getline(&line, &cap, out->f)) > 0) {
        if (line[len - 1] != '\n') break;  // a line cut short by a kill
        if ((sscanf(line, "train %ld", &step) == 1 || sscanf(line, "val %ld", &step) == 1) && step > data_step) break;
        keep += len;
    }
    free(line);
    if (ftruncate(fileno(out->f), keep) != 0 || fseek(out->f, 0, SEEK_END) != 0)
        fail("--log %s: cannot write: %s", out->path, strerror(errno));
}

// Removes <ckpt>.tmp.<pid> files a killed trainer left (whole checkpoints' worth of
// bytes each). Only a trainer holding <ckpt>.lock writes them, so any there are stale.
static void remove_stale_temps(const char *ckpt) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", ckpt);
    char *slash = strrchr(dir, '/');
    const char *base = slash ? slash + 1 : ckpt;
    if (slash) *slash = 0; else snprintf(dir, sizeof dir, ".");
    if (slash == dir) snprintf(dir, sizeof dir, "/");
    size_t nb = strlen(base);
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d))) {
        const char *s = e->d_name;
        const char *pid = s + nb + 5;
        if (strncmp(s, base, nb) || strncmp(s + nb, ".tmp.", 5) || !*pid || strspn(pid, "0123456789") != strlen(pid))
            continue;
        char p[8300];
        snprintf(p, sizeof p, "%s/%s", dir, s);
        if (unlink(p) == 0) printf("removed %s, left by a trainer that was killed while writing a checkpoint\n", p);
    }
    closedir(d);
}

// A log holds a run's results once it has a line that is not a # comment.
static int log_has_results(const char *path) {
    FILE *f = fopen(path, "r");
    char line[256];
    int found = 0;
    while (f && !found && fgets(line, sizeof line, f)) found = line[0] != '#';
    if (f) fclose(f);
    return found;
}

static Outputs outputs_open(const Options *o, long data_step) {
    Outputs out = {NULL, o->log, -1};
    struct stat sb;
    const char *names[2][2] = {{"ckpt", o->ckpt}, {"log", o->log}};
    for (int i = 0; i < 2; i++) {
        const char *flag = names[i][0], *path = names[i][1];
        if (!*path) fail("--%s: empty path", flag);
        make_parent_dirs(flag, path);
        if (exists(path, &sb) && S_ISDIR(sb.st_mode)) fail("--%s %s: is a directory", flag, path);
        if (exists(path, &sb) && !S_ISREG(sb.st_mode) && i == 0) fail("--ckpt %s: not a regular file", path);
        // a new run does not replace the files of an earlier one unless asked to
        int earlier = exists(path, &sb) && S_ISREG(sb.st_mode) && sb.st_size > 0 && (i == 0 || log_has_results(path));
        if (earlier && !o->resume && !o->overwrite)
            fail("--%s %s exists (an earlier run's): continue it with --resume %s, or give --overwrite to replace it",
                 flag, path, i == 0 ? path : o->ckpt);
    }
    // the lock, which also shows that the checkpoint's directory is writable
    char lock[4200];
    snprintf(lock, sizeof lock, "%s.lock", o->ckpt);
    out.lock_fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (out.lock_fd < 0) fail("--ckpt %s: cannot write %s: %s", o->ckpt, lock, strerror(errno));
    if (flock(out.lock_fd, LOCK_EX | LOCK_NB) != 0)
        fail("--ckpt %s is in use by another trainer (it holds %s)", o->ckpt, lock);
    remove_stale_temps(o->ckpt);
    out.f = fopen(o->log, "a+");
    if (!out.f) fail("--log %s: cannot write: %s", o->log, strerror(errno));
    long kept = 0;  // bytes of the log that stay
    if (fstat(fileno(out.f), &sb) == 0 && S_ISREG(sb.st_mode)) {
        if (flock(fileno(out.f), LOCK_EX | LOCK_NB) != 0) fail("--log %s is in use by another trainer", o->log);
        if (o->resume) log_truncate(&out, data_step);
        else if (ftruncate(fileno(out.f), 0) != 0) fail("--log %s: cannot write: %s", o->log, strerror(errno));
        kept = ftell(out.f);
    }
    // the header starts a new log (a resume into a new file, too); an unwritable log fails here, before any step
    if (!o->resume || kept == 0)
        log_printf(&out, "# train step epoch lr loss bpc scale skipped gnorm chars_per_s | val step epoch loss bpc\n");
    return out;
}

static void outputs_close(Outputs *out) {
    if (out->f) fclose(out->f);
    if (out->lock_fd >= 0) close(out->lock_fd);  // releases the lock
}

// The host memory the parameters, their gradients and Adam's two moments take, against
// this machine's: a model that cannot fit is a flag to change, said before allocating.
static void check_memory(const MlstmConfig *c, double extra_bytes, const char *flags_named) {
    double need = 4.0 * param_count(c) * sizeof(real) + extra_bytes;
    double have = (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGESIZE);
    if (have > 0 && need > have)
        fail("%s too large: the model needs %.1f GB of memory, this machine has %.1f GB", flags_named, need / 1e9, have / 1e9);
}

static void print_settings(const Options *o, Model *md, const char *precision, const Stream *train_s,
                           const Stream *val_s, const Loader *train) {
    int B = o->B, G = world * B;
    printf("| %-24s | %-40s |\n", "setting", "value");
    printf("|%s|%s|\n", "--------------------------", "------------------------------------------");
#define ROW(name, ...)                                 \
    do {                                               \
        char v_[128];                                  \
        snprintf(v_, sizeof v_, __VA_ARGS__);          \
        printf("| %-24s | %-40s |\n", name, v_);       \
    } while (0)
    const MlstmConfig *c = &o->model;
    ROW("model", "mLSTM V=%d D=%d H=%d, weight norm %s", c->V, c->D, c->H, c->wnorm ? "on" : "off");
    ROW("parameters", "%zu", model_host(md)->nparams);
    ROW("FLOPs per char (fwd)", "%.3g (training ~3x)", flops_per_char(&o->model));
#ifdef _OPENMP
    ROW("ranks x threads", "%d x %d", world, omp_get_max_threads());
#else
    ROW("ranks x threads", "%d x 1", world);
#endif
    ROW("batch", "%d rows/rank x %d ranks = %d, T = %d", B, world, G, o->T);
    ROW("train data", "%s, %lld bytes", o->train ? o->train : "built-in corpus", (long long)train_s->size);
    const char *val_name = o->val ? o->val : o->train ? o->train : "built-in corpus";
    ROW("val data", "%s, %lld bytes", val_name, (long long)val_s->size);
    if (o->val_batch) ROW("val batch", "%ld rows in all (--val-batch)", o->val_batch);
    ROW("steps per epoch", "%ld", loader_steps_per_epoch(train));
    double epochs = (double)o->steps / loader_steps_per_epoch(train);
    ROW("steps", "%ld (%.2f epochs)%s", o->steps, epochs, o->resume ? ", resuming" : "");
    ROW("state reset", "%s", train->reset_docs ? "at document, shard and epoch starts" : "at shard and epoch starts");
    lr_settings_print(stdout, &o->lr, G);
    ROW("optimizer", "Adam b1 0.9 b2 0.999 eps 1e-8, clip %g", o->clip);
    ROW("precision", "%s", precision);
    ROW("checkpoint", "%s%s", o->ckpt, o->resume ? " (resumed)" : "");
    if (o->init_from) ROW("initial weights", "%s", o->init_from);
    ROW("log", "%s", o->log);
#undef ROW
    fflush(stdout);
}

// ----------------------------------------------------------------------------
// The loop: doc/design.md, "The training step", one step at a time, then progress, log, validation,
// samples and checkpoints.

// Skipped steps in a row that a smaller loss scale cannot cure (FP32, or FP16 at the
// scale's floor) before the run stops: the gradients are inf/NaN whatever S is, so the
// model has diverged and skipping would only read the rest of the data for nothing.
#define STUCK_SKIPS 10

#ifdef MODEL_MAX_LOSS_SCALE  // a backend whose storage bounds S defines it (train.cu: FP16's range)
static void loss_scaler_cap(LossScaler *ls) {  // S starts at most at the cap and never grows past it
    if (ls->ceiling > MODEL_MAX_LOSS_SCALE) ls->ceiling = MODEL_MAX_LOSS_SCALE;
    if (ls->scale > MODEL_MAX_LOSS_SCALE) ls->scale = MODEL_MAX_LOSS_SCALE;
}
#endif

static int train_main(int argc, char **argv) {
    dist_init(&argc, &argv);
    stop_requested = 0;
    Options o;
    options_parse(&o, argc, argv);
    const char *precision;
    o.fp16 = model_precision(o.fp16, &precision);
#ifdef _OPENMP
    if (o.threads) omp_set_num_threads(o.threads);
#endif
    // the model (and, resuming, the batch) from a checkpoint, checked before any work
    CkptHeader from;
    const char *from_path = o.resume ? o.resume : o.init_from;
    if (from_path) {
        from = read_checkpoint_header(o.resume ? "resume" : "init-from", from_path);
        config_from_checkpoint(&o, from_path, &from);
        if (o.resume && (long)from.st.data_step >= o.steps)
            fail("checkpoint %s is at step %llu and --steps is %ld: nothing to train (give a larger --steps)", o.resume,
                 (unsigned long long)from.st.data_step, o.steps);
    }
    // the decay ends at --steps unless a horizon was given (a run of any length decays to its end)
    if (!(o.lr.given & GIVEN_HORIZON)) {
        o.lr.horizon = (double)o.steps;
        o.lr.horizon_in_epochs = 0;
    }
    int B = o.B, T = o.T, G = world * B;
    if ((long)world * B > INT_MAX / 2) fail("--batch %d x %d ranks: too many rows", B, world);
    if (o.val_batch % world) fail("--val-batch: %ld rows do not split evenly over %d ranks", o.val_batch, world);
    if (o.val_batch / world > INT_MAX / T) fail("--val-batch: %ld rows of %d steps are too many", o.val_batch, T);
    int VB = o.val_batch && o.val_batch != G ? (int)(o.val_batch / world) : B;  // val rows per rank
    Stream train_s, val_s;
    open_data(&o, &train_s, &val_s);
    char what[2][4200];
    if (o.train) {
        snprintf(what[0], sizeof what[0], "the training data (--train %s)", o.train);
        snprintf(what[1], sizeof what[1], "the validation data (--val %s)", o.val ? o.val : o.train);
    } else {
        snprintf(what[0], sizeof what[0], "the built-in corpus's training split (--corpus-bytes %ld)", o.corpus_bytes);
        snprintf(what[1], sizeof what[1], "the built-in corpus's validation split (1/40 of --corpus-bytes %ld)", o.corpus_bytes);
    }
    Loader train, val;
    loader_open(&train, &train_s, B, T, what[0]);
    loader_open(&val, &val_s, VB, T, what[1]);
    train.reset_docs = val.reset_docs = train.reset_docs && o.reset_docs;
    o.lr.epoch_sequences = (double)loader_steps_per_epoch(&train) * G;  // sequences per epoch at this batch
    lr_settings_check(&o.lr);

    check_memory(&o.model, 0, "--hidden, --embed:");
    Model *md = model_create(o.model, B, T, (uint64_t)o.seed);
    Model *ev = VB != B ? model_create(o.model, VB, T, (uint64_t)o.seed) : md;  // the validation model
    size_t rows = B > VB ? B : VB;
    uint8_t *in = (uint8_t *)mallocCheck(rows * T);  // (rows,T) inputs, targets, state resets
    uint8_t *tg = (uint8_t *)mallocCheck(rows * T);
    uint8_t *rs = (uint8_t *)mallocCheck(rows * T);
    LossScaler scaler;
    loss_scaler_init(&scaler, o.fp16);
    long applied = 0, data_step = 0;
    uint64_t rng = (uint64_t)o.seed ^ 0x5eed5eed5eed5eedULL;
    if (o.resume) load_checkpoint(o.resume, md, B, &scaler, &applied, &data_step, &rng, o.fp16);
#ifdef MODEL_MAX_LOSS_SCALE
    loss_scaler_cap(&scaler);  // a resumed scaler too (a checkpoint of the CPU trainer's --fp16 may hold 2^16)
#endif
    if (o.init_from) init_from_checkpoint(o.init_from, md, B, from.st.G);
    // the output files last of what can fail at start-up, so a refused start leaves none
    // behind, and still before the first step, so a bad path costs no training
    Outputs out = {NULL, o.log, -1};
    if (rank == 0) out = outputs_open(&o, data_step);
    if (rank == 0) print_settings(&o, md, precision, &train_s, &val_s, &train);

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);

    if (data_step == 0 && o.val_every) {  // the baseline the validation curve falls from
        double vl = validate(md, ev, &val, o.val_steps, in, tg, rs);
        if (rank == 0 && !isnan(vl)) {
            log_printf(&out, "val 0 0 %.6f %.6f\n", vl, vl / M_LN2);
            printf("step %6d | val bpc %.4f\n", 0, vl / M_LN2);
        }
    }
    double fpc = flops_per_char(&o.model), t_start = now_seconds(), train_seconds = 0, loss_avg = 0;
    long start_step = data_step, n_avg = 0, stuck = 0;
    while (data_step < o.steps && !stop_agreed()) {
        // steps 1-3 of doc/design.md, "The training step": read the batch, forward, backward seeded with S
        double t0 = now_seconds();
        loader_batch(&train, data_step, in, tg, rs);
        double scale = scaler.scale;
        double loss = model_step(md, in, tg, rs, scale);
        if (data_step == o.inject_overflow && rank == 0) model_inject_overflow(md);
        // 4: all-reduce the gradients (mean over ranks)
        model_allreduce(md);
        loss = dist_sum1(loss) / world;
        // 5-7: overflow check on the reduced gradients, then skip, or unscale + clip + Adam
        int overflow = model_overflow(md);
        StepDecision d = decide_step(&scaler, &o.lr, &applied, G, overflow);
        double gnorm = d.apply ? model_apply(md, &d, o.clip, applied) : 0;
        data_step++;
        stuck = d.apply ? 0 : stuck + (!o.fp16 || scale <= scaler.floor);

        // progress and log (rank 0); throughput counts training time only, not validation or sampling
        double t = now_seconds(), cps = (double)G * T / (t - t0);
        train_seconds += t - t0;
        loss_avg += loss;
        n_avg++;
        double epoch = (double)data_step / loader_steps_per_epoch(&train);
        if (rank == 0) {
            log_printf(&out, "train %ld %.4f %.6e %.6f %.6f %g %d %.6e %.0f\n", data_step, epoch, d.lr, loss,
                       loss / M_LN2, scale, !d.apply, gnorm, cps);
            if (data_step % o.print_every == 0 || data_step == o.steps || !d.apply) {
                double elapsed = t - t_start;
                double eta = elapsed / (data_step - start_step) * (o.steps - data_step);
                double chars = (double)G * T * (data_step - start_step);
                double chars_per_s = chars / train_seconds;
                printf("step %6ld/%ld | epoch %.2f | bpc %.3f | lr %.2e | scale %g | ", data_step, o.steps, epoch,
                       loss_avg / n_avg / M_LN2, d.lr, d.scale);
                printf("%s%.0f chars/s | %.1f GFLOP/s | ETA %02d:%02d\n", d.apply ? "" : "SKIPPED (overflow) | ",
                       chars_per_s, 3 * fpc * chars_per_s / 1e9, (int)(eta / 60), (int)eta % 60);
                fflush(stdout);
                loss_avg = 0;
                n_avg = 0;
            }
        }
        if (stuck >= STUCK_SKIPS)
            fail("step %ld: %d steps in a row skipped with inf/NaN gradients %s: the model has diverged; stopping "
                 "without a checkpoint (try a lower --lr)", data_step, STUCK_SKIPS,
                 o.fp16 ? "at the smallest loss scale" : "(FP32: no loss scale to lower)");
        int last = data_step == o.steps;
        if ((o.val_every && data_step % o.val_every == 0) || last) {
            double vl = validate(md, ev, &val, o.val_steps, in, tg, rs);
            if (rank == 0 && !isnan(vl)) {
                log_printf(&out, "val %ld %.4f %.6f %.6f\n", data_step, epoch, vl, vl / M_LN2);
                printf("step %6ld | val bpc %.4f\n", data_step, vl / M_LN2);
            }
        }
        if (rank == 0 && o.sample_len > 0 && ((o.sample_every && data_step % o.sample_every == 0) || last)) {
            sample(model_host(md), o.prompt, o.sample_len, o.temperature, train.reset_docs, &rng, stdout);
        }
        // SIGINT/SIGTERM on any rank stops every rank after this step
        int stop = stop_agreed();
        if ((o.ckpt_every && data_step % o.ckpt_every == 0) || last || stop) {
            save_checkpoint(o.ckpt, md, B, &scaler, applied, data_step, rng);
            if (rank == 0) {
                printf("step %6ld | checkpoint %s\n", data_step, o.ckpt);
                fflush(stdout);
            }
        }
        if (stop) {
            if (rank == 0) printf("stopped by a signal at step %ld; resume with --resume %s\n", data_step, o.ckpt);
            break;
        }
    }
    if (rank == 0 && stop_requested && data_step == start_step)
        printf("stopped by a signal before the first step; nothing to save\n");
    if (rank == 0) outputs_close(&out);
    if (ev != md) model_free(ev);
    model_free(md);
    stream_free(&train_s);
    stream_free(&val_s);
    free(in);
    free(tg);
    free(rs);
    dist_finish();
    return 0;
}

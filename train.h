// train.h: the training loop, shared by both trainers: the step of doc/design.md ("The
// training step") one batch at a time, with the processes (MPI), signals, data streams,
// evaluation, sampling and checkpoints around it, in train_main. It knows nothing of how
// the model computes: a backend does that, behind the model_* functions of the contract
// below. train.c is the CPU backend (mlstm.h), train.cu the GPU backend (kernels, FP16 +
// FP32 master weights, NCCL); each includes this file, defines the contract's functions
// and its own main(). The run's settings and files (flags, the run record, the log and
// the lock) are run.h's.
#pragma once
#include "run.h"       // defines: Options, options_parse, run_record, options_from_record, Outputs
#include "mlstm.h"     // defines: MlstmConfig, Mlstm, mlstm_forward, checkpoint_save_run/open/read, real
#include "data.h"      // defines: Stream, Loader, loader_batch, corpus_stream
#include "schedule.h"  // defines: LrSettings, LossScaler, StepDecision, decide_step
#include <assert.h>
#include <float.h>
#include <signal.h>
#include <time.h>
#include <limits.h>
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
//   model_step       forward from the carried state, backward seeded with the loss
//                    scale S; leaves S * this rank's gradients, advances the carried
//                    state, returns this rank's mean loss (nats)
//   model_allreduce  gradients = their mean over the ranks
//   model_check      the reduced gradients: whether any is inf/NaN, and their L2 norm
//                    (still times S)
//   model_apply      only if the step is not skipped: gradients *= grad_factor (1/S,
//                    times the clip's factor, both made by the loop), then Adam step
//                    number `applied` at learning rate lr
// and between steps, model_eval: forward only on the backend's separate validation
// state (first = 1 zeroes it), touching neither the training state nor the weights.
//
// Host copies, in the checkpoint's layout (FP32, whatever the backend computes in):
//   model_host   the Mlstm whose params, adam_m, adam_v equal the backend's current
//                master weights and moments; a backend that keeps them elsewhere
//                copies them back here at each call (for checkpoints, sampling and
//                validation, so not every step). Its activation buffers hold at
//                least one row and one step (sample() runs mlstm_forward on it).
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
static void model_allreduce(Model *md);
typedef struct {
    int overflow;  // 1: some reduced gradient is inf or NaN
    double norm;   // their global L2 norm, times S like them
} GradientCheck;
static GradientCheck model_check(Model *md);
static void model_apply(Model *md, double grad_factor, double lr, long applied);
static double model_eval(Model *md, const uint8_t *in, const uint8_t *tg, const uint8_t *rs, int first);

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
        if (world > 1) {  // the hosts of a cluster may see different files: an error names its rank and host
            char host[MPI_MAX_PROCESSOR_NAME];
            int len = 0;
            MPI_Get_processor_name(host, &len);
            snprintf(fail_where, sizeof fail_where, "rank %d on %s: ", rank, host);
        }
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
// In-place sum over ranks (step 4 of the README's step table; the GPU trainer uses NCCL).
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
// All ranks must run one configuration: a rank with another --hidden would all-reduce
// buffers of another size (a crash or a hang), another --steps would leave collectives
// waiting, and any other flag would train a different model in silence while only
// rank 0's is saved. Before any work, rank 0's flags (all of them, after a resume filled
// them in) and data sizes go to every rank; the lowest rank that differs names the first
// differing flag, and every rank exits 2.
static void ranks_agree(const Options *o, int64_t train_bytes, int64_t val_bytes) {
#ifdef USE_MPI
    if (world == 1) return;
    RunText mine = run_record(o, RECORD_ALL_FLAGS);
    char sizes[2][32];
    snprintf(sizes[0], sizeof sizes[0], "%lld", (long long)train_bytes);
    snprintf(sizes[1], sizeof sizes[1], "%lld", (long long)val_bytes);
    run_text_add(&mine, "train data bytes", sizes[0]);
    run_text_add(&mine, "val data bytes", sizes[1]);
    long long n = (long long)mine.bytes;
    MPI_Bcast(&n, 1, MPI_LONG_LONG, 0, MPI_COMM_WORLD);
    if (n < 1 || n > INT_MAX) fail("rank %d: rank 0's settings are %lld bytes long", rank, n);
    char *first = (char *)mallocCheck((size_t)n + 1);
    if (rank == 0) memcpy(first, mine.text, (size_t)n);
    MPI_Bcast(first, (int)n, MPI_CHAR, 0, MPI_COMM_WORLD);
    first[n] = 0;
    // the first entry (flag order, then the data sizes) whose presence or value differs
    const char *names[NFLAGS + 2];
    for (int i = 0; i < NFLAGS; i++) names[i] = flags[i].name;
    names[NFLAGS] = "train data bytes";
    names[NFLAGS + 1] = "val data bytes";
    int differ = NFLAGS + 2;
    const char *v0 = NULL, *v1 = NULL;
    for (int i = 0; i < NFLAGS + 2 && differ == NFLAGS + 2; i++) {
        v0 = run_text_find(first, (size_t)n, names[i]);
        v1 = run_text_find(mine.text, mine.bytes, names[i]);
        if (!v0 != !v1 || (v0 && strcmp(v0, v1))) differ = i;
    }
    int report[2] = {differ, rank}, lowest[2];  // the smallest (entry, rank) pair reports
    MPI_Allreduce(report, lowest, 1, MPI_2INT, MPI_MINLOC, MPI_COMM_WORLD);
    if (lowest[0] < NFLAGS + 2) {
        if (rank == lowest[1]) {
            char shown[2][200];
            flag_shown(v1, shown[0]);
            flag_shown(v0, shown[1]);
            const char *dashes = differ < NFLAGS ? "--" : "";
            fprintf(stderr, "error: rank %d has %s%s %s, rank 0 %s%s %s: all ranks must be started with the same "
                    "flags and see the same data\n", rank, dashes, names[differ], shown[0], dashes, names[differ],
                    shown[1]);
        }
        MPI_Barrier(MPI_COMM_WORLD);  // the message is out before any rank exits
        MPI_Finalize();
        exit(EXIT_BAD_INPUT);
    }
    free(first);
    free(mine.text);
#else
    (void)o;
    (void)train_bytes;
    (void)val_bytes;
#endif
}

// Waits until every rank has come here. A rank that failed before (exit 2) never
// comes, and mpirun ends the job, the waiting ranks included.
static void dist_barrier(void) {
#ifdef USE_MPI
    if (world > 1) MPI_Barrier(MPI_COMM_WORLD);
#endif
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
    size_t n = 0, cap = 1;  // as many paths as there are commas, plus one
    for (const char *c = spec; *c; c++) cap += *c == ',';
    if (!copy || cap > INT_MAX) fail("%s: %zu paths, more than this trainer takes", spec, cap);
    const char **paths = (const char **)mallocCheck(cap * sizeof *paths);
    for (char *p = strtok_r(copy, ",", &save); p; p = strtok_r(NULL, ",", &save)) paths[n++] = p;
    stream_open(s, paths, (int)n, 1);
    free(paths);
    free(copy);
}

static double machine_memory_bytes(void) { return (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGESIZE); }

static void open_data(const Options *o, Stream *train, Stream *val) {
    if (!o->train) {
        double need = 1.025 * (double)o->corpus_bytes, have = machine_memory_bytes();  // the text, val 1/40 more
        if (have > 0 && need > have)
            fail("--corpus-bytes %ld: the built-in corpus is made in memory, %.1f GB of it, and this machine has %.1f "
                 "GB (give a smaller --corpus-bytes, or prepared shards with --train)", o->corpus_bytes, need / 1e9,
                 have / 1e9);
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
// *interrupted when a signal asked to stop during the pass (checked before every batch).
static double evaluate(Model *md, const Loader *val, long steps, uint8_t *in, uint8_t *tg, uint8_t *rs,
                       int *interrupted) {
    long n = loader_steps_per_epoch(val);
    if (steps > 0 && steps < n) n = steps;
    double sum = 0, t0 = now_seconds(), shown = t0;
    int tenths = -1;  // the 10% step of the last line shown
    *interrupted = 0;
    for (long s = 0; s < n; s++) {
        if (stop_agreed()) {
            *interrupted = 1;
            return NAN;
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
static double validate(Model *md, Model *ev, const Loader *val, long steps, uint8_t *in, uint8_t *tg, uint8_t *rs,
                       int *interrupted) {
    if (ev != md) {
        const Mlstm *src = model_host(md);
        memcpy(model_host(ev)->params, src->params, sizeof(real) * src->nparams);
        model_loaded(ev);
    }
    return evaluate(ev, val, steps, in, tg, rs, interrupted);
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
                            uint64_t rng, const RunText *run) {
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
        checkpoint_save_run(path, m, &st, hall, call, (const uint8_t *)run->text, run->bytes);
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
static FILE *open_checkpoint(const char *flag, const char *path, CkptHeader *out) {
    check_input_file(flag, path);
    CkptHeader hd;
    FILE *f = checkpoint_open(path, &hd);
    if (hd.cfg.H > MAX_HIDDEN || hd.cfg.D > MAX_EMBED)
        fail("checkpoint %s: D=%d H=%d, beyond this build's limits (%d, %d)", path, hd.cfg.D, hd.cfg.H, MAX_EMBED,
             MAX_HIDDEN);
    if (hd.st.data_step > (uint64_t)MAX_STEPS)
        fail("checkpoint %s: data step %llu is beyond any run (at most %ld): a corrupt file", path,
             (unsigned long long)hd.st.data_step, MAX_STEPS);
    if (hd.st.step > hd.st.data_step)
        fail("checkpoint %s: %llu applied steps but only %llu batches read: a corrupt file", path,
             (unsigned long long)hd.st.step, (unsigned long long)hd.st.data_step);
    *out = hd;
    return f;
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
        fail("checkpoint %s carries the state of %d rows, which %d ranks cannot share: resume on a number of ranks "
             "that divides %d", path, G, world, G);
    o->B = G / world;
}

// No step recovers from inf or NaN weights, moments or state.
static void check_finite(const char *path, const char *what, const real *x, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i]))
            fail("checkpoint %s: %s[%zu] is %g (a diverged or corrupt model)", path, what, i, (double)x[i]);
}

// --resume: everything, the carried state of this rank's rows included.
static void load_checkpoint(FILE *f, const char *path, const CkptHeader *hd, Model *md, int B, LossScaler *ls,
                            long *applied, long *data_step, uint64_t *rng, int fp16) {
    Mlstm *m = model_host(md);
    real *h, *c;
    model_state(md, &h, &c);
    int H = m->cfg.H, G = world * B;
    TrainState st;
    real *hall = (real *)mallocCheck(sizeof(real) * G * H);
    real *call = (real *)mallocCheck(sizeof(real) * G * H);
    checkpoint_read(f, path, hd, m, &st, hall, call, G);
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
static void init_from_checkpoint(FILE *f, const char *path, const CkptHeader *hd, Model *md, int B) {
    Mlstm *m = model_host(md);
    real *h, *c;
    model_state(md, &h, &c);
    size_t n = (size_t)hd->st.G * m->cfg.H;
    TrainState st;
    real *hall = (real *)mallocCheck(sizeof(real) * n), *call = (real *)mallocCheck(sizeof(real) * n);
    checkpoint_read(f, path, hd, m, &st, hall, call, hd->st.G);
    check_finite(path, "params", m->params, m->nparams);
    free(hall);
    free(call);
    memset(m->adam_m, 0, sizeof(real) * m->nparams);
    memset(m->adam_v, 0, sizeof(real) * m->nparams);
    memset(h, 0, sizeof(real) * (size_t)B * m->cfg.H);
    memset(c, 0, sizeof(real) * (size_t)B * m->cfg.H);
    model_loaded(md);
}

// The host memory the parameters, their gradients and Adam's two moments take, against
// this machine's: a model that cannot fit is a flag to change, said before allocating.
static void check_memory(const MlstmConfig *c, double extra_bytes, const char *flags_named) {
    double need = 4.0 * param_count(c) * sizeof(real) + extra_bytes;
    double have = machine_memory_bytes();
    if (have > 0 && need > have)
        fail("%s too large: the model needs %.1f GB of memory, this machine has %.1f GB", flags_named, need / 1e9,
             have / 1e9);
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
    const char *val_name = o->val ? o->val : o->train ? o->train : "built-in corpus";
    const char *names[2] = {o->train ? o->train : "built-in corpus", val_name};
    const Stream *streams[2] = {train_s, val_s};
    for (int k = 0; k < 2; k++) {  // a long list of paths cut, so that the size shows
        int cut = strlen(names[k]) > 50;
        ROW(k ? "val data" : "train data", "%.*s%s, %lld bytes in %d shard%s", cut ? 40 : 50, names[k],
            cut ? "..." : "", (long long)streams[k]->size, streams[k]->n_shards, streams[k]->n_shards > 1 ? "s" : "");
    }
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

// Gradient clipping (doc/design.md, "The training step", 7): the factor that brings the
// global norm of the unscaled gradients down to `clip` (0: off), for both backends.
static double clip_factor(double norm, double clip) { return clip > 0 && norm > clip ? clip / norm : 1.0; }

// Skipped steps in a row that a smaller loss scale cannot cure (FP32, or FP16 at the
// scale's floor) before the run stops: the gradients are inf/NaN whatever S is, so the
// model has diverged and skipping would only read the rest of the data for nothing.
#define STUCK_SKIPS 10

// A mean loss above twice a uniform model's (ln 256 nats, 8 bits per character) is reached
// by no model that learns, at any step: the weights have been blown apart (a learning rate
// far too high). So is an inf or NaN loss. Either ends the run before it is saved.
#define DIVERGED_LOSS_FACTOR 2.0
static int loss_diverged(double loss, int V) { return !(loss <= DIVERGED_LOSS_FACTOR * log((double)V)); }
static void fail_diverged(long data_step, const char *what, double loss, const char *ckpt, long saved_step) {
    char kept[4300];
    if (saved_step >= 0) snprintf(kept, sizeof kept, "%s keeps step %ld", ckpt, saved_step);
    else snprintf(kept, sizeof kept, "no checkpoint written");
    fail("step %ld: %s is %g nats (%g bits per character; a uniform model's is 8): the model has diverged; stopping "
         "without saving it, %s (try a lower --lr)", data_step, what, loss, loss / M_LN2, kept);
}

// The loss of the current weights on the next training batch, from a zero state (forward
// only, the training state untouched): what a checkpoint about to be written is checked by
// when no validation just measured it. Weights sent to 1e30 by one update still give a
// finite gradient norm before it; their forward does not.
static double probe_loss(Model *md, const Loader *train, long data_step, uint8_t *in, uint8_t *tg, uint8_t *rs) {
    loader_batch(train, data_step, in, tg, rs);
    return dist_sum1(model_eval(md, in, tg, rs, 1)) / world;
}

#ifdef MODEL_MAX_LOSS_SCALE  // a backend whose storage bounds S defines it (train.cu: FP16's range)
static void loss_scaler_cap(LossScaler *ls) {  // S starts at most at the cap and never grows past it
    if (ls->ceiling > MODEL_MAX_LOSS_SCALE) ls->ceiling = MODEL_MAX_LOSS_SCALE;
    if (ls->scale > MODEL_MAX_LOSS_SCALE) ls->scale = MODEL_MAX_LOSS_SCALE;
}
#endif

static int train_main(int argc, char **argv) {
    std_fds_open();
    dist_init(&argc, &argv);
    stop_requested = 0;
    Options o;
    options_parse(&o, argc, argv);
    if (o.resume && !flag_given(&o, "ckpt")) o.ckpt = o.resume;  // continue writing the run's checkpoint
    // the model (and, resuming, the batch and the run's settings) from a checkpoint, checked
    // before any work; the file stays open until its weights are read from it
    CkptHeader from;
    FILE *from_file = NULL;
    char *from_run = NULL;  // the resumed run's record
    const char *from_path = o.resume ? o.resume : o.init_from;
    if (from_path) {
        from_file = open_checkpoint(o.resume ? "resume" : "init-from", from_path, &from);
        config_from_checkpoint(&o, from_path, &from);
        if (o.resume) from_run = (char *)checkpoint_read_run(from_file, from_path, &from);
        if (from_run) options_from_record(&o, from_path, from_run, from.run_bytes);
        else if (o.resume && rank == 0)
            fprintf(stderr, "note: checkpoint %s has no run record (format version 1, or written from Python): "
                            "the command line's flags define the rest of the run\n", from_path);
        if (o.resume && (long)from.st.data_step >= o.steps)
            fail("checkpoint %s is at step %llu and --steps is %ld: nothing to train (give a larger --steps)", o.resume,
                 (unsigned long long)from.st.data_step, o.steps);
    }
    options_check(&o);
    const char *precision;
    o.fp16 = model_precision(o.fp16, &precision);
#ifdef _OPENMP
    if (o.threads) omp_set_num_threads(o.threads);
#endif
    const char *run_steps = from_run ? run_text_find(from_run, from.run_bytes, "steps") : NULL;
    if (run_steps && atol(run_steps) != o.steps && !(o.lr.given & GIVEN_HORIZON) && rank == 0)
        printf("note: --steps %ld, the run had %s: the decay now ends at step %ld (a run started with --decay-steps "
               "keeps its end)\n", o.steps, run_steps, o.steps);
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
    ranks_agree(&o, train_s.size, val_s.size);
    RunText run = run_record(&o, RECORD_RUN);  // into every checkpoint of this run
    char what[2][4200];
    if (o.train) {
        snprintf(what[0], sizeof what[0], "the training data (--train %s)", o.train);
        snprintf(what[1], sizeof what[1], "the validation data (--val %s)", o.val ? o.val : o.train);
    } else {
        snprintf(what[0], sizeof what[0], "the built-in corpus's training split (--corpus-bytes %ld)", o.corpus_bytes);
        snprintf(what[1], sizeof what[1], "the built-in corpus's validation split (1/40 of --corpus-bytes %ld)",
                 o.corpus_bytes);
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
    if (o.resume) load_checkpoint(from_file, o.resume, &from, md, B, &scaler, &applied, &data_step, &rng, o.fp16);
#ifdef MODEL_MAX_LOSS_SCALE
    loss_scaler_cap(&scaler);  // a resumed scaler too (a checkpoint of the CPU trainer's --fp16 may hold 2^16)
#endif
    if (o.init_from) init_from_checkpoint(from_file, o.init_from, &from, md, B);
    if (from_file) fclose(from_file);
    // the output files last of what can fail at start-up, so a refused start leaves none
    // behind, and still before the first step, so a bad path costs no training. Every rank
    // gets here first: one whose host lacks a shard or the checkpoint has failed naming
    // its host and the path, and the job ends before rank 0 creates a file.
    dist_barrier();
    Outputs out = {NULL, o.log, -1};
    if (rank == 0) out = outputs_open(&o, data_step, &train_s, &val_s);
    if (rank == 0) print_settings(&o, md, precision, &train_s, &val_s, &train);

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);

    int interrupted;
    if (data_step == 0 && o.val_every) {  // the baseline the validation curve falls from
        double vl = validate(md, ev, &val, o.val_steps, in, tg, rs, &interrupted);
        if (rank == 0 && !interrupted) {
            log_printf(&out, "val 0 0 %.6f %.6f\n", vl, vl / M_LN2);
            printf("step %6d | val bpc %.4f\n", 0, vl / M_LN2);
        }
    }
    double fpc = flops_per_char(&o.model), t_start = now_seconds(), train_seconds = 0, loss_avg = 0;
    long start_step = data_step, n_avg = 0, stuck = 0;
    long saved_step = o.resume ? data_step : -1;  // the step of the checkpoint on disk, -1: none of this run
    int ckpt_due = 0;                             // a periodic checkpoint waits for a step that is not skipped
    // Whether every rank stops: agreed once here (a signal during start-up), then only at the
    // end of each step, where the checkpoint follows. A second check before each step would
    // catch a signal that came after the first and end the loop without a checkpoint.
    int stop = stop_agreed();
    while (data_step < o.steps && !stop) {
        // steps 1-3 of the README's step table (why: doc/design.md): read the batch, forward, backward with S
        double t0 = now_seconds();
        loader_batch(&train, data_step, in, tg, rs);
        double scale = scaler.scale;
        // --inject-overflow: rank 0 seeds this step's backward with S = inf, the way an FP16 overflow arrives
        int inject = data_step == o.inject_overflow && rank == 0;
        double loss = model_step(md, in, tg, rs, inject ? INFINITY : scale);
        // 4: all-reduce the gradients (mean over ranks)
        model_allreduce(md);
        loss = dist_sum1(loss) / world;
        // 5-7: overflow check on the reduced gradients, then skip, or unscale + clip + Adam
        GradientCheck check = model_check(md);
        StepDecision d = decide_step(&scaler, &o.lr, &applied, G, check.overflow);
        double gnorm = d.apply ? check.norm * d.inv_scale : 0;  // the unscaled norm before clipping, for the log
        if (d.apply) model_apply(md, d.inv_scale * clip_factor(gnorm, o.clip), d.lr, applied);
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
        if (loss_diverged(loss, o.model.V)) fail_diverged(data_step, "the training loss", loss, o.ckpt, saved_step);
        if (stuck >= STUCK_SKIPS)
            fail("step %ld: %d steps in a row skipped with inf/NaN gradients %s: the model has diverged; stopping "
                 "without a checkpoint (try a lower --lr)", data_step, STUCK_SKIPS,
                 o.fp16 ? "at the smallest loss scale" : "(FP32: no loss scale to lower)");
        int last = data_step == o.steps;
        double vl = NAN;  // this step's validation loss, if it ran to the end
        if ((o.val_every && data_step % o.val_every == 0) || last) {
            vl = validate(md, ev, &val, o.val_steps, in, tg, rs, &interrupted);
            if (!interrupted && loss_diverged(vl, o.model.V))
                fail_diverged(data_step, "the validation loss", vl, o.ckpt, saved_step);
            if (rank == 0 && !interrupted) {
                log_printf(&out, "val %ld %.4f %.6f %.6f\n", data_step, epoch, vl, vl / M_LN2);
                printf("step %6ld | val bpc %.4f\n", data_step, vl / M_LN2);
            }
        }
        if (rank == 0 && o.sample_len > 0 && ((o.sample_every && data_step % o.sample_every == 0) || last)) {
            sample(model_host(md), o.prompt, o.sample_len, o.temperature, train.reset_docs, &rng, stdout);
        }
        // SIGINT/SIGTERM on any rank stops every rank after this step
        // A checkpoint never replaces a better one with a diverged model: none is written
        // while steps are being skipped (unless the run ends), and the weights must score.
        stop = stop_agreed();
        ckpt_due |= o.ckpt_every && data_step % o.ckpt_every == 0;
        if ((ckpt_due && d.apply) || last || stop) {
            double check = isnan(vl) ? probe_loss(md, &train, data_step, in, tg, rs) : vl;
            if (loss_diverged(check, o.model.V))
                fail_diverged(data_step, "the loss of the weights to be saved", check, o.ckpt, saved_step);
            save_checkpoint(o.ckpt, md, B, &scaler, applied, data_step, rng, &run);
            saved_step = data_step;
            ckpt_due = 0;
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
    if (rank == 0 && stop && data_step == start_step)
        printf("stopped by a signal before the first step; nothing to save\n");
    if (rank == 0) outputs_close(&out);
    if (ev != md) model_free(ev);
    model_free(md);
    free(run.text);
    free(from_run);
    stream_free(&train_s);
    stream_free(&val_s);
    free(in);
    free(tg);
    free(rs);
    dist_finish();
    return 0;
}

// train.h: the training loop, shared by both trainers: Puri et al.'s step (doc/design.md,
// "The training step") one batch at a time, then validation, samples and checkpoints, in
// train_main. It knows nothing of how the model computes: a backend does that, behind the
// model_* functions of the contract below. train.c is the CPU backend (mlstm.h), train.cu
// the GPU backend (kernels, FP16 + FP32 master weights, NCCL); each includes this file,
// defines the contract's functions and its own main(). What keeps a run safe and is not in
// the papers (flags, the run record, the run directory and lock, checkpoint files, the
// ranks' agreement, signals, the guards) is the harness's: harness/run.h, harness/train_harness.h.
#pragma once
#include "harness/run.h"  // defines: Options, RunDir, and via it harness/checkpoint.h (CkptBestBy)
#include "mlstm.h"     // defines: MlstmConfig, Mlstm, mlstm_forward, real
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
// model_create builds the model the options describe (o->model, o->T, and the backend's own
// settings: the GPU trainer's --matmul) for B rows, with mlstm_init's weights for o->seed (the
// same on every backend) and a zero state. model_precision says what the backend computes in
// and what that limits, given the options (whether --fp16 was asked for): whether gradients are
// FP16 (dynamic loss scaling on), the largest loss scale S its FP16 tensors hold, where the loop
// caps its scaler (start, growth and resume; INFINITY: no cap), and a description for the
// settings table. model_backend says which trainer this is: the flags of harness/run.h's table it takes.

typedef struct Model Model;
typedef struct {
    int fp16;                 // 1: gradients are FP16, the loss scaler is dynamic
    double max_loss_scale;    // the scaler's cap (INFINITY: none)
    char description[192];    // (a row of the settings table)
} Precision;
static Model *model_create(const Options *o, int B);
static void model_free(Model *md);
static Precision model_precision(const Options *o);
static Backend model_backend(void);
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
static double dist_bcast1(double x) {  // rank 0's x on every rank
#ifdef USE_MPI
    if (world > 1) MPI_Bcast(&x, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
#endif
    return x;
}
static double dist_sum1(double x) {
#ifdef USE_MPI
    if (world > 1) MPI_Allreduce(MPI_IN_PLACE, &x, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
#endif
    return x;
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

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

// Stateful truncated BPTT: the state after the last step of a forward feeds the next one.
static void carry(Mlstm *m, real *h, real *c) {
    memcpy(h, mlstm_h_out(m), sizeof(real) * m->b * m->cfg.H);
    memcpy(c, mlstm_c_out(m), sizeof(real) * m->b * m->cfg.H);
}

// ----------------------------------------------------------------------------
// The best checkpoint. A run keeps best.ckpt beside latest.ckpt, and replaces it only
// with a checkpoint that scores strictly lower. The score is the validation loss when
// the run validates as it goes (--val-every > 0, chosen when the run starts and kept by
// its resumes), written whenever a validation improves on it; for a run that validates
// only at its end, the training loss's moving mean (an exponential mean of the last
// ~100 steps' losses, bias-corrected as Adam's moments are), judged at each checkpoint.

#define LOSS_EMA_DECAY 0.99
typedef struct {
    CkptBestBy by;
    double score;      // best.ckpt's score (nats), INFINITY: none yet
    long step;         // its step, -1: none
    double loss_ema;   // the moving mean's state: sum of (1-d) d^k loss over past steps
} Best;

static double loss_moving_mean(const Best *b, long data_step) {
    return data_step > 0 ? b->loss_ema / (1 - pow(LOSS_EMA_DECAY, (double)data_step)) : NAN;
}
static const char *best_by_name(CkptBestBy by) {
    return by == CKPT_BEST_BY_VAL ? "validation loss" : by == CKPT_BEST_BY_TRAIN ? "training loss, moving mean"
                                                                                 : "nothing";
}

// ----------------------------------------------------------------------------
// The run: everything the loop holds between its steps.

typedef struct {
    Options o;
    Precision precision;       // what the backend computes in (model_precision)
    int B, T, G, VB;           // rows per rank, steps, global rows, validation rows per rank
    Stream train_s, val_s;
    Loader train, val;
    char *identity[2];         // the data's identity, train and val (data_identity)
    RunText record;            // the run record, into every checkpoint of this run
    uint64_t run_id;           // in every checkpoint and on the log's first line (checkpoint.h, ckpt_run_identity)
    uint32_t ckpt_version;     // the format its checkpoints are written in (harness/run.h, run_id_continued)
    Model *md, *ev;            // the training model, the validation model (ev == md when VB == B)
    uint8_t *in, *tg, *rs;     // (rows,T) inputs, targets, state resets
    LossScaler scaler;
    long applied, data_step;   // Adam's step; batches read, skipped ones included
    uint64_t rng;              // sampling
    RunDir dir;                // rank 0's files
    char resumed_dir[4096];    // the run directory of the checkpoint resumed, "" if it is none's
    char *resumed_record;      // its run record, which the options' strings point into
    Best best;
    long saved_step;           // the step of latest.ckpt, -1: none in this run
    int ckpt_due;              // a periodic checkpoint waits for a step that is not skipped
    int stop;                  // every rank stops after this step
    int val_owed;              // a resume: the validation at its checkpoint's step was cut short (LOG_VAL_CUT)
    long start_step, stuck;    // where this invocation started; steps skipped in a row
    double t_start, train_seconds, loss_sum;  // progress: loss_sum over n_avg steps since the last line
    long n_avg;
} Run;

// What one training step did, for the log and the progress line.
typedef struct {
    double loss;      // the mean training loss over the ranks
    double scale;     // the loss scale S the backward was seeded with
    StepDecision d;   // applied or skipped, at which learning rate
    double gnorm;     // the unscaled gradient norm before clipping (0 when skipped)
    double seconds;
} StepResult;

// ----------------------------------------------------------------------------
// The harness: the start of a run, its checkpoint files, signals and guards. Not in the
// papers, and skippable on a first reading.
#include "harness/train_harness.h"

// ----------------------------------------------------------------------------
// Validation and samples.

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
// The loop: doc/design.md, "The training step", one step at a time (train_step), then
// progress, log, validation, samples and checkpoints (after_step).

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

// One training step: the seven steps of the README's step table (why in this order:
// doc/design.md, "The training step").
static StepResult train_step(Run *r) {
    StepResult s;
    double t0 = now_seconds();
    // 1-3: read the batch, forward, backward seeded with S
    loader_batch(&r->train, r->data_step, r->in, r->tg, r->rs);
    s.scale = r->scaler.scale;
    // --inject-overflow: rank 0 seeds this step's backward with S = inf, the way an FP16 overflow arrives
    int inject = r->data_step + 1 == r->o.inject_overflow && rank == 0;
    s.loss = model_step(r->md, r->in, r->tg, r->rs, inject ? INFINITY : s.scale);
    // 4: all-reduce the gradients (mean over ranks)
    model_allreduce(r->md);
    s.loss = dist_sum1(s.loss) / world;
    // 5-7: overflow check on the reduced gradients, then skip, or unscale + clip + Adam
    GradientCheck check = model_check(r->md);
    s.d = decide_step(&r->scaler, &r->o.lr, &r->applied, r->G, check.overflow);
    s.gnorm = s.d.apply ? check.norm * s.d.inv_scale : 0;
    if (s.d.apply) model_apply(r->md, s.d.inv_scale * clip_factor(s.gnorm, r->o.clip), s.d.lr, r->applied);
    r->data_step++;
    s.seconds = now_seconds() - t0;
    return s;
}

// Writes best.ckpt when `score` beats it.
static void best_offer(Run *r, double score) {
    if (!(score < r->best.score)) return;
    run_save(r, r->dir.best, score);
    r->best.score = score;
    r->best.step = r->data_step;
    if (rank == 0) {
        printf("step %6ld | best checkpoint %s (%s %.4f bits per character)\n", r->data_step, r->dir.best,
               best_by_name(r->best.by), score / M_LN2);
        fflush(stdout);
    }
}

// A validation pass at this step, its line in the log; NAN when a signal interrupted it.
static double validate_now(Run *r) {
    int interrupted;
    double vl = validate(r->md, r->ev, &r->val, r->o.val_steps, r->in, r->tg, r->rs, &interrupted);
    if (interrupted) return NAN;
    if (loss_diverged(vl, r->o.model.V)) fail_diverged(r, "the validation loss", vl);
    if (rank == 0) {
        double epoch = (double)r->data_step / loader_steps_per_epoch(&r->train);
        if (r->data_step == 0) log_printf(&r->dir, "val 0 0 %.6f %.6f\n", vl, vl / M_LN2);  // the baseline
        else log_printf(&r->dir, "val %ld %.4f %.6f %.6f\n", r->data_step, epoch, vl, vl / M_LN2);
        printf("step %6ld | val bpc %.4f\n", r->data_step, vl / M_LN2);
        fflush(stdout);
    }
    return vl;
}

// The sample due at this step (rank 0).
static void sample_if_due(Run *r) {
    const Options *o = &r->o;
    if (rank == 0 && o->sample_len > 0 && ((o->sample_every && r->data_step % o->sample_every == 0) ||
                                           r->data_step == o->steps))
        sample(model_host(r->md), o->prompt, o->sample_len, o->temperature, r->train.reset_docs, &r->rng, stdout);
}

// The validation due at this step, best.ckpt by it, then the sample due. A validation a signal
// cuts short (*val_cut) is owed to the run: the log says so (harness/run.h, LOG_VAL_CUT), ahead of the
// checkpoint the stop writes, and the resume runs it, and the sample, which waits for it so that
// the sampler's state in the checkpoint is the one it had at that point.
static double validate_and_sample(Run *r, int *val_cut) {
    double vl = validate_now(r);
    *val_cut = isnan(vl);
    if (*val_cut) {
        if (rank == 0) log_printf(&r->dir, LOG_VAL_CUT, r->data_step);
        return vl;
    }
    if (r->best.by == CKPT_BEST_BY_VAL) best_offer(r, vl);
    sample_if_due(r);
    return vl;
}

// What follows a step: progress and log, the divergence guards, validation (and best.ckpt
// by it), a sample, and latest.ckpt (and best.ckpt by the moving mean).
static void after_step(Run *r, const StepResult *s) {
    const Options *o = &r->o;
    report_step(r, s);
    r->best.loss_ema = LOSS_EMA_DECAY * r->best.loss_ema + (1 - LOSS_EMA_DECAY) * s->loss;
    r->stuck = s->d.apply ? 0 : r->stuck + (!r->precision.fp16 || s->scale <= r->scaler.floor);
    if (loss_diverged(s->loss, o->model.V)) fail_diverged(r, "the training loss", s->loss);
    if (r->stuck >= STUCK_SKIPS)
        fail("step %ld: %d steps in a row skipped with inf/NaN gradients %s: the model has diverged; stopping "
             "without a checkpoint (try a lower --lr)", r->data_step, STUCK_SKIPS,
             r->precision.fp16 ? "at the smallest loss scale" : "(FP32: no loss scale to lower)");
    int last = r->data_step == o->steps, val_cut = 0;
    double vl = NAN;  // this step's validation loss, if it ran to the end
    if ((o->val_every && r->data_step % o->val_every == 0) || last) vl = validate_and_sample(r, &val_cut);
    else sample_if_due(r);
    // a signal or a closed stdout on any rank stops every rank after this step
    stop_if_stdout_closed(r->data_step);
    r->stop = stop_agreed();
    // latest.ckpt never holds a diverged model: none is written while steps are being
    // skipped (unless the run ends), and the weights must score
    r->ckpt_due |= o->ckpt_every && r->data_step % o->ckpt_every == 0;
    if ((r->ckpt_due && s->d.apply) || last || r->stop) {
        double check = isnan(vl) ? probe_loss(r) : vl;
        if (loss_diverged(check, o->model.V)) fail_diverged(r, "the loss of the weights to be saved", check);
        double mean = loss_moving_mean(&r->best, r->data_step);
        run_save(r, r->dir.latest, r->best.by == CKPT_BEST_BY_VAL ? vl : mean);
        r->saved_step = r->data_step;
        r->ckpt_due = 0;
        if (rank == 0) {
            printf("step %6ld | checkpoint %s\n", r->data_step, r->dir.latest);
            fflush(stdout);
        }
        if (r->best.by == CKPT_BEST_BY_TRAIN) best_offer(r, mean);
    }
    if (r->stop && rank == 0 && (!last || val_cut))
        printf("stopped at step %ld; continue with --resume %s\n", r->data_step, o->out);
}

static void run_finish(Run *r) {
    if (rank == 0 && r->stop && r->data_step == r->start_step && !r->val_owed)
        printf("stopped by a signal before the first step; nothing to save\n");
    if (rank == 0) run_dir_close(&r->dir);
    if (r->ev != r->md) model_free(r->ev);
    model_free(r->md);
    free(r->record.text);
    free(r->resumed_record);
    free(r->identity[0]);
    free(r->identity[1]);
    stream_free(&r->train_s);
    stream_free(&r->val_s);
    free(r->in);
    free(r->tg);
    free(r->rs);
    dist_finish();
}

static int train_main(int argc, char **argv) {
    Run r;
    run_start(&r, argc, argv);
    if (r.data_step == 0 && r.o.val_every) validate_now(&r);  // the baseline the validation curve falls from
    r.stop = stop_agreed();  // a signal during start-up; after that, agreed at the end of each step
    if (r.val_owed) validation_made_up(&r);  // (a signal already here cuts it short again, and it stays owed)
    while (r.data_step < r.o.steps && !r.stop) {
        StepResult s = train_step(&r);
        after_step(&r, &s);
    }
    run_finish(&r);
    return 0;
}

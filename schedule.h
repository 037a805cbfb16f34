// schedule.h: the learning rate as a pure function of (settings, successful
// step, global batch), and the dynamic loss scaler of mixed-precision training.
// Used by the loop in train.h (doc/design.md, "The training step" and "Schedules";
// doc/schedules.md).
//
// Vocabulary. B is the global batch in sequences (all ranks together), B0 the
// batch at which base_lr was tuned (128 in the reference recipe), k = B / B0.
// An epoch is `epoch_sequences` sequences, so it lasts epoch_sequences / B steps
// at batch B. `step` counts *applied* optimizer steps: a step skipped for a
// loss-scale overflow does not advance the schedule (doc/design.md, "The training step", step 6).
//
// Every rule is the same three pieces, written once:
//   peak(B)      what the rule scales: the only per-rule code (lr_peak)
//   warmup W     linear per iteration: lr = peak * (step + 1) / W for step < W,
//                so the first applied step already moves (as in llm.c)
//   decay to H   from W to the horizon H (counted from step 0, warmup included):
//                lr = min_lr + (peak - min_lr) * f(p), p = (step - W) / (H - W),
//                f one of none, linear, cosine, exponential, polynomial; held
//                at f(1) past H. If H <= W the decay is already over at W.
#pragma once
#include "util.h"  // defines: fail (one-line errors, exit 2)
#include <float.h>

typedef enum { LR_PURI, LR_LEGW, LR_LINEAR, LR_SQRT, LR_CONSTANT, LR_NRULES } LrRule;
typedef enum { DECAY_NONE, DECAY_LINEAR, DECAY_COSINE, DECAY_EXPONENTIAL, DECAY_POLYNOMIAL, DECAY_NSHAPES } DecayShape;
static const char *const lr_rule_names[LR_NRULES] = {"puri", "legw", "linear", "sqrt", "constant"};
static const char *const lr_rule_papers[LR_NRULES] = {
    "Puri et al. 2018, reconstructed", "You et al. 2019", "Goyal et al. 2017", "sqrt(k) scaling", "no scaling"};
static const char *const decay_names[DECAY_NSHAPES] = {"none", "linear", "cosine", "exponential", "polynomial"};

// A table of names as one line: "a, b or c" for a message (sep ", ", last " or "), "a | b | c" for --help.
static inline const char *names_joined(char *out, size_t n, const char *const *names, int count, const char *sep,
                                       const char *last) {
    size_t used = 0;
    out[0] = 0;
    for (int i = 0; i < count && used < n; i++)
        used += (size_t)snprintf(out + used, n - used, "%s%s", i == 0 ? "" : i == count - 1 ? last : sep, names[i]);
    return out;
}

typedef struct {
    LrRule rule;
    double base_lr;          // tuned at base_batch (reference recipe: Adam 5e-4 at 128)
    long base_batch;         // B0, in sequences
    double warmup;           // length of the warmup, in epochs or in steps (warmup_in_epochs)
    int warmup_in_epochs;    // LEGW: epochs at B0 (w0); the rule multiplies them by k
    DecayShape decay;
    double horizon;          // end of the decay H, from step 0, in epochs or steps (horizon_in_epochs)
    int horizon_in_epochs;
    double decay_power;      // polynomial: f = (1 - p)^power
    double decay_rate;       // exponential: f = rate^p, the fraction of (peak - min_lr) left at H
    double min_lr;           // where every decay ends (exponential: its asymptote)
    double lr_cap;           // puri: the peak never exceeds this
    double epoch_sequences;  // sequences in one epoch of training data; set by the trainer from the data
    unsigned given;          // flags the user gave (bit per flag): a preset does not overwrite them
} LrSettings;

// ----------------------------------------------------------------------------
// Presets. Defaults are the reference recipe's (Radford et al. 2017: Adam 5e-4 at
// batch 128, decayed linearly to zero over the one epoch of training). The warmup
// of 0.001 epoch (LEGW: at B0) is our choice, not a published number: at the
// paper's scale (40 GB in 256-byte sequences, 1.2M steps per epoch at 128) it is
// 1221 steps, and LEGW's w0 * k epochs stays a quarter of an epoch at k = 256.

enum { GIVEN_LR = 1, GIVEN_BASE_BATCH = 2, GIVEN_WARMUP = 4, GIVEN_DECAY = 8, GIVEN_HORIZON = 16,
       GIVEN_DECAY_POWER = 32, GIVEN_DECAY_RATE = 64, GIVEN_MIN_LR = 128, GIVEN_LR_CAP = 256 };

// Sets the rule and every setting the user has not given to that rule's defaults.
static inline void lr_preset(LrSettings *s, LrRule rule) {
    s->rule = rule;
    unsigned g = s->given;
    if (!(g & GIVEN_LR)) s->base_lr = 5e-4;
    if (!(g & GIVEN_BASE_BATCH)) s->base_batch = 128;
    if (!(g & GIVEN_DECAY_POWER)) s->decay_power = 2.0;
    if (!(g & GIVEN_DECAY_RATE)) s->decay_rate = 0.01;
    if (!(g & GIVEN_MIN_LR)) s->min_lr = 0.0;
    if (!(g & GIVEN_LR_CAP)) s->lr_cap = 3e-3;
    if (!(g & GIVEN_WARMUP)) {
        s->warmup = (rule == LR_PURI || rule == LR_CONSTANT) ? 0.0 : 0.001;
        s->warmup_in_epochs = 1;
    }
    if (!(g & GIVEN_DECAY)) s->decay = rule == LR_CONSTANT ? DECAY_NONE : DECAY_LINEAR;
    if (!(g & GIVEN_HORIZON)) {
        // Puri: a fixed 100k-step horizon, whatever the batch; the others: one epoch
        s->horizon = rule == LR_PURI ? 100000.0 : 1.0;
        s->horizon_in_epochs = rule != LR_PURI;
    }
}

// schedule.h's own default, the paper this project reproduces (tools/schedule_table starts
// from it). The trainers start from LEGW at 2e-3 for batch 32 instead (options_defaults, harness/run.h).
static inline LrSettings lr_settings_default(void) {
    LrSettings s;
    memset(&s, 0, sizeof s);
    lr_preset(&s, LR_PURI);
    return s;
}

// ----------------------------------------------------------------------------
// The schedule.

// The one piece of each rule that differs: the peak learning rate at batch B.
static inline double lr_peak(const LrSettings *s, long global_batch) {
    double k = (double)global_batch / (double)s->base_batch;
    switch (s->rule) {
    case LR_CONSTANT: return s->base_lr;
    // Goyal et al. 2017, "Accurate, Large Minibatch SGD": scale the rate with the batch
    // (derived for SGD; applied here to Adam as the baseline Puri et al. report failing).
    case LR_LINEAR: return s->base_lr * k;
    // sqrt scaling (Krizhevsky 2014; Hoffer et al. 2017): keeps the gradient noise
    // variance constant; LEGW's peak without LEGW's warmup.
    case LR_SQRT: return s->base_lr * sqrt(k);
    // You et al. 2019, "Large-Batch Training for LSTM and Beyond" (LEGW), as published:
    // peak base_lr * sqrt(k); the warmup is handled in lr_warmup_steps.
    case LR_LEGW: return s->base_lr * sqrt(k);
    // Puri et al. 2018: linear scaling of Adam's rate diverged or converged worse at
    // large batch; the run used 3e-3 with a linear decay over a fixed horizon. The
    // formula below (linear scaling capped at lr_cap) is our RECONSTRUCTION from the
    // paper's text and the public sentiment-discovery notes, not a published equation.
    case LR_PURI: {
        double p = s->base_lr * k;
        return p < s->lr_cap ? p : s->lr_cap;
    }
    default:
        fail("schedule: unknown rule %d", (int)s->rule);
        return 0.0;
    }
}

// An amount in epochs or steps, as steps at batch B, to the nearest step.
static inline long lr_to_steps(const LrSettings *s, double amount, int in_epochs, long global_batch, const char *what) {
    if (amount == 0.0) return 0;  // no warmup needs no epoch size
    if (in_epochs && !(s->epoch_sequences > 0.0))
        fail("%s is in epochs but the epoch size is unknown (epoch_sequences = %g)", what, s->epoch_sequences);
    double steps = in_epochs ? amount * s->epoch_sequences / (double)global_batch : amount;
    return (long)llround(steps < 1e15 ? steps : 1e15);  // 1e15 steps: never, and no overflow
}

// W, the warmup length in applied steps at batch B (0: no warmup).
static inline long lr_warmup_steps(const LrSettings *s, long global_batch) {
    // LEGW: the warmup lasts w0 * k epochs, i.e. w0 * k * E / (k * B0) = w0 * E / B0
    // steps: the same number of iterations as at B0, for every batch. Computed at B0
    // so that the invariant holds exactly, not up to rounding.
    long b = s->rule == LR_LEGW ? s->base_batch : global_batch;
    return lr_to_steps(s, s->warmup, s->warmup_in_epochs, b, "the warmup");
}

// H, the step at which the decay ends (counted from step 0).
static inline long lr_horizon_steps(const LrSettings *s, long global_batch) {
    return lr_to_steps(s, s->horizon, s->horizon_in_epochs, global_batch, "the decay horizon");
}

// f(p) for p in [0, 1]: 1 at the start of the decay, f(1) at its end.
static inline double lr_decay_factor(const LrSettings *s, double p) {
    switch (s->decay) {
    case DECAY_NONE: return 1.0;
    case DECAY_LINEAR: return 1.0 - p;
    case DECAY_COSINE: return 0.5 * (1.0 + cos(3.14159265358979323846 * p));
    case DECAY_EXPONENTIAL: return pow(s->decay_rate, p);
    case DECAY_POLYNOMIAL: return pow(1.0 - p, s->decay_power);
    default:
        fail("schedule: unknown decay %d", (int)s->decay);
        return 0.0;
    }
}

// The learning rate for the optimizer step taken after `step` applied steps.
static inline double lr_at_step(const LrSettings *s, long step, long global_batch) {
    if (global_batch <= 0) fail("lr_at_step: the global batch must be positive, got %ld", global_batch);
    if (step < 0) fail("lr_at_step: the step must be zero or positive, got %ld", step);
    double peak = lr_peak(s, global_batch);
    long W = lr_warmup_steps(s, global_batch);
    if (step < W) return peak * (double)(step + 1) / (double)W;
    if (s->decay == DECAY_NONE) return peak;
    long H = lr_horizon_steps(s, global_batch);
    double p = H > W ? (double)(step - W) / (double)(H - W) : 1.0;
    if (p > 1.0) p = 1.0;
    return s->min_lr + (peak - s->min_lr) * lr_decay_factor(s, p);
}

// ----------------------------------------------------------------------------
// Command line: both trainers hand every flag here first.

// Whole numbers of steps and sequences: util.h's rule, up to 10^15 (beyond any run).
#define LR_MAX_WHOLE 1000000000000000LL

// Applies one flag. Returns 1 if it is a schedule flag, 0 if not (the caller tries
// its own flags); a bad value exits 2 with a message naming the flag.
static inline int lr_settings_set(LrSettings *s, const char *flag, const char *value) {
    if (strcmp(flag, "--lr-schedule") == 0) {
        for (int r = 0; r < LR_NRULES; r++)
            if (strcmp(value, lr_rule_names[r]) == 0) {
                lr_preset(s, (LrRule)r);
                return 1;
            }
        char names[128];
        fail("--lr-schedule: unknown schedule \"%s\" (expected %s)", value,
             names_joined(names, sizeof names, lr_rule_names, LR_NRULES, ", ", " or "));
    } else if (strcmp(flag, "--decay") == 0) {
        for (int d = 0; d < DECAY_NSHAPES; d++)
            if (strcmp(value, decay_names[d]) == 0) {
                s->decay = (DecayShape)d;
                s->given |= GIVEN_DECAY;
                return 1;
            }
        char names[128];
        fail("--decay: unknown decay \"%s\" (expected %s)", value,
             names_joined(names, sizeof names, decay_names, DECAY_NSHAPES, ", ", " or "));
    } else if (strcmp(flag, "--lr") == 0) {
        s->base_lr = parse_positive(flag, value);
        s->given |= GIVEN_LR;
    } else if (strcmp(flag, "--base-batch") == 0) {
        s->base_batch = (long)parse_whole(flag, value, 1, LR_MAX_WHOLE);
        s->given |= GIVEN_BASE_BATCH;
    } else if (strcmp(flag, "--warmup-epochs") == 0) {
        s->warmup = parse_real(flag, value, 0, DBL_MAX);
        s->warmup_in_epochs = 1;
        s->given |= GIVEN_WARMUP;
    } else if (strcmp(flag, "--warmup-steps") == 0) {
        s->warmup = (double)parse_whole(flag, value, 0, LR_MAX_WHOLE);
        s->warmup_in_epochs = 0;
        s->given |= GIVEN_WARMUP;
    } else if (strcmp(flag, "--decay-epochs") == 0) {
        s->horizon = parse_positive(flag, value);
        s->horizon_in_epochs = 1;
        s->given |= GIVEN_HORIZON;
    } else if (strcmp(flag, "--decay-steps") == 0) {
        s->horizon = (double)parse_whole(flag, value, 1, LR_MAX_WHOLE);
        s->horizon_in_epochs = 0;
        s->given |= GIVEN_HORIZON;
    } else if (strcmp(flag, "--decay-power") == 0) {
        s->decay_power = parse_positive(flag, value);
        s->given |= GIVEN_DECAY_POWER;
    } else if (strcmp(flag, "--decay-rate") == 0) {
        double x = parse_real(flag, value, -DBL_MAX, DBL_MAX);
        if (!(x > 0.0 && x < 1.0)) fail("%s: must be between 0 and 1 (exclusive), got %s", flag, value);
        s->decay_rate = x;
        s->given |= GIVEN_DECAY_RATE;
    } else if (strcmp(flag, "--min-lr") == 0) {
        s->min_lr = parse_real(flag, value, 0, DBL_MAX);
        s->given |= GIVEN_MIN_LR;
    } else if (strcmp(flag, "--lr-cap") == 0) {
        s->lr_cap = parse_positive(flag, value);
        s->given |= GIVEN_LR_CAP;
    } else {
        return 0;
    }
    return 1;
}

// The inverse of lr_settings_set: the value of `flag` that sets s's setting exactly
// (%.17g round-trips a double), or 0 when that flag does not describe s: --warmup-steps
// when the warmup is in epochs, and --decay-epochs and --decay-steps when no horizon
// was given (the trainer ends the decay at --steps). Setting --lr-schedule first, then
// every flag this returns, rebuilds s; the trainer's run record is made so.
static inline int lr_settings_value(const LrSettings *s, const char *flag, char *out, size_t n) {
    int given_horizon = (s->given & GIVEN_HORIZON) != 0;
    if (!strcmp(flag, "--lr-schedule")) snprintf(out, n, "%s", lr_rule_names[s->rule]);
    else if (!strcmp(flag, "--decay")) snprintf(out, n, "%s", decay_names[s->decay]);
    else if (!strcmp(flag, "--lr")) snprintf(out, n, "%.17g", s->base_lr);
    else if (!strcmp(flag, "--base-batch")) snprintf(out, n, "%ld", s->base_batch);
    else if (!strcmp(flag, "--warmup-epochs") && s->warmup_in_epochs) snprintf(out, n, "%.17g", s->warmup);
    else if (!strcmp(flag, "--warmup-steps") && !s->warmup_in_epochs) snprintf(out, n, "%.17g", s->warmup);
    else if (!strcmp(flag, "--decay-epochs") && given_horizon && s->horizon_in_epochs)
        snprintf(out, n, "%.17g", s->horizon);
    else if (!strcmp(flag, "--decay-steps") && given_horizon && !s->horizon_in_epochs)
        snprintf(out, n, "%.17g", s->horizon);
    else if (!strcmp(flag, "--decay-power")) snprintf(out, n, "%.17g", s->decay_power);
    else if (!strcmp(flag, "--decay-rate")) snprintf(out, n, "%.17g", s->decay_rate);
    else if (!strcmp(flag, "--min-lr")) snprintf(out, n, "%.17g", s->min_lr);
    else if (!strcmp(flag, "--lr-cap")) snprintf(out, n, "%.17g", s->lr_cap);
    else return 0;
    return 1;
}

// Checks the settings as a whole, once every flag is in and the trainer has set
// epoch_sequences from the data. Exits 2 naming the flag at fault.
static inline void lr_settings_check(const LrSettings *s) {
    if (s->min_lr >= s->base_lr) fail("--min-lr: must be below --lr (%g), got %g", s->base_lr, s->min_lr);
    if (s->rule == LR_PURI && s->min_lr >= s->lr_cap)
        fail("--min-lr: must be below --lr-cap (%g), got %g", s->lr_cap, s->min_lr);
    if (s->warmup > 0.0 && s->warmup_in_epochs && !(s->epoch_sequences > 0.0))
        fail("--warmup-epochs: the epoch size is unknown (no training data?); use --warmup-steps");
    if (s->decay != DECAY_NONE && s->horizon_in_epochs && !(s->epoch_sequences > 0.0))
        fail("--decay-epochs: the epoch size is unknown (no training data?); use --decay-steps");
}

// Help text for the flags above (the parser reads exactly these), with the defaults
// of `d`, the settings a program starts from. A program that ends the decay at a
// length of its own when neither --decay-epochs nor --decay-steps is given names it
// in `horizon_default` (the trainer: "--steps"); NULL prints d's horizon.
static inline void lr_settings_help_with(FILE *f, const LrSettings *d, const char *horizon_default) {
    LrSettings puri = lr_settings_default(), legw;
    memset(&legw, 0, sizeof legw);
    lr_preset(&legw, LR_LEGW);
    char warm[64], hor[64], rules[128], shapes[128];
    if (d->warmup == 0.0) snprintf(warm, sizeof warm, "none");
    else snprintf(warm, sizeof warm, "%g %s", d->warmup, d->warmup_in_epochs ? "epochs" : "steps");
    if (horizon_default) snprintf(hor, sizeof hor, "at %s", horizon_default);
    else snprintf(hor, sizeof hor, "%g %s", d->horizon, d->horizon_in_epochs ? "epochs" : "steps");
    fprintf(f, "learning-rate schedule (doc/schedules.md):\n");
    fprintf(f, "  --lr-schedule NAME   %s (default %s)\n",
            names_joined(rules, sizeof rules, lr_rule_names, LR_NRULES, " | ", " | "), lr_rule_names[d->rule]);
    fprintf(f, "  --lr X               base learning rate, tuned at --base-batch (default %g)\n", d->base_lr);
    fprintf(f, "  --base-batch N       B0, the batch in sequences --lr was tuned at (default %ld)\n", d->base_batch);
    fprintf(f, "  --warmup-epochs X    linear warmup, in epochs (legw: w0, at B0; default %s)\n", warm);
    fprintf(f, "  --warmup-steps N     linear warmup, in applied steps (same at every batch)\n");
    fprintf(f, "  --decay SHAPE        %s (default %s)\n",
            names_joined(shapes, sizeof shapes, decay_names, DECAY_NSHAPES, " | ", " | "), decay_names[d->decay]);
    fprintf(f, "  --decay-epochs X     the decay ends X epochs after step 0 (default %s)\n", hor);
    fprintf(f, "  --decay-steps N      the decay ends N steps after step 0\n");
    fprintf(f, "  --decay-power X      polynomial: (1 - p)^X (default %g)\n", d->decay_power);
    fprintf(f, "  --decay-rate X       exponential: X^p, in (0, 1) (default %g)\n", d->decay_rate);
    fprintf(f, "  --min-lr X           where the decay ends (default %g)\n", d->min_lr);
    fprintf(f, "  --lr-cap X           puri: the largest peak (default %g)\n", d->lr_cap);
    fprintf(f, "  a named --lr-schedule brings the reference recipe's values for what is not given: --lr %g\n"
               "  at --base-batch %ld, warmup %g epochs (puri, constant: none), linear decay (constant: none)",
            puri.base_lr, puri.base_batch, legw.warmup);
    if (horizon_default) fprintf(f, " ending %s", hor);
    fprintf(f, "\n");
}
static inline void lr_settings_help(FILE *f) {
    LrSettings d = lr_settings_default();
    lr_settings_help_with(f, &d, NULL);
}

// Rows of the start-up table: the settings and what they come to at batch B.
static inline void lr_settings_print(FILE *f, const LrSettings *s, long global_batch) {
    char v[128];
    fprintf(f, "| %-24s | %-40s |\n", "lr schedule", lr_rule_names[s->rule]);
    fprintf(f, "| %-24s | %-40s |\n", "lr rule from", lr_rule_papers[s->rule]);
    snprintf(v, sizeof v, "%g at batch %ld", s->base_lr, s->base_batch);
    fprintf(f, "| %-24s | %-40s |\n", "base lr", v);
    if (s->rule == LR_PURI) fprintf(f, "| %-24s | %-40g |\n", "lr cap", s->lr_cap);
    snprintf(v, sizeof v, "%g at batch %ld", lr_peak(s, global_batch), global_batch);
    fprintf(f, "| %-24s | %-40s |\n", "peak lr", v);
    if (s->warmup == 0.0) snprintf(v, sizeof v, "none");
    else if (!s->warmup_in_epochs) snprintf(v, sizeof v, "%ld steps", lr_warmup_steps(s, global_batch));
    else snprintf(v, sizeof v, "%ld steps (%g epochs%s)", lr_warmup_steps(s, global_batch), s->warmup,
                  s->rule == LR_LEGW ? " at B0" : "");
    fprintf(f, "| %-24s | %-40s |\n", "warmup", v);
    if (s->decay == DECAY_NONE) {
        snprintf(v, sizeof v, "none");
    } else {
        int n = snprintf(v, sizeof v, "%s to %g by step %ld", decay_names[s->decay], s->min_lr,
                         lr_horizon_steps(s, global_batch));
        if (s->horizon_in_epochs) n += snprintf(v + n, sizeof v - n, " (%g epochs)", s->horizon);
        if (s->decay == DECAY_POLYNOMIAL) snprintf(v + n, sizeof v - n, ", power %g", s->decay_power);
        if (s->decay == DECAY_EXPONENTIAL) snprintf(v + n, sizeof v - n, ", rate %g", s->decay_rate);
    }
    fprintf(f, "| %-24s | %-40s |\n", "decay", v);
}

// ----------------------------------------------------------------------------
// The dynamic loss scaler (doc/design.md, "The training step"; Micikevicius et al. 2018, with the
// skip semantics of NVIDIA's sentiment-discovery): the loss is multiplied by S
// before backward so small FP16 gradients do not flush to zero. An inf/NaN in the
// reduced gradients means S was too big: skip the step and halve S. After
// `window` clean steps in a row, try twice as big.

typedef struct {
    double scale;      // S, the factor the backward pass was seeded with
    long good_steps;   // clean steps since the last overflow or growth
    long window;       // N: clean steps before S grows
    double factor;     // growth and shrink factor
    double floor, ceiling;
} LossScaler;

// dynamic = 0 (FP32 training): S stays 1, but an overflow still skips the step. A trainer
// may cap S lower than the ceiling here: the FP16 GPU trainer's tensors hold S up to 2^15
// (train.cu, FP16_MAX_LOSS_SCALE; train.h, loss_scaler_cap).
static inline void loss_scaler_init(LossScaler *ls, int dynamic) {
    ls->scale = dynamic ? 65536.0 : 1.0;      // 2^16
    ls->good_steps = 0;
    ls->window = 1000;
    ls->factor = 2.0;
    ls->floor = 1.0;
    ls->ceiling = dynamic ? 16777216.0 : 1.0; // 2^24: larger scales only help FP16 gradients below 2^-48
}

// Call once per step after the overflow check. Returns 1: apply the step, 0: skip it.
// The caller unscales by the S it seeded backward with, i.e. read ls->scale before.
static inline int loss_scaler_update(LossScaler *ls, int overflow) {
    if (overflow) {
        ls->scale = ls->scale / ls->factor > ls->floor ? ls->scale / ls->factor : ls->floor;
        ls->good_steps = 0;
        return 0;
    }
    if (++ls->good_steps >= ls->window) {
        ls->scale = ls->scale * ls->factor < ls->ceiling ? ls->scale * ls->factor : ls->ceiling;
        ls->good_steps = 0;
    }
    return 1;
}

// Checkpoint form, 40 bytes little-endian: scale f64, good_steps u32, window u32,
// factor f64, floor f64, ceiling f64. The settings travel with the state so a
// resumed run behaves exactly as one that never stopped.
#define LOSS_SCALER_BYTES 40

static inline void loss_scaler_serialize(const LossScaler *ls, unsigned char out[LOSS_SCALER_BYTES]) {
    put64(out, f64_bits(ls->scale));
    put32(out + 8, (uint32_t)ls->good_steps);
    put32(out + 12, (uint32_t)ls->window);
    put64(out + 16, f64_bits(ls->factor));
    put64(out + 24, f64_bits(ls->floor));
    put64(out + 32, f64_bits(ls->ceiling));
}

// Returns 0 on success, -1 if the bytes do not describe a valid scaler (the caller
// reports the file); *ls is untouched then.
static inline int loss_scaler_deserialize(LossScaler *ls, const unsigned char in[LOSS_SCALER_BYTES]) {
    LossScaler t;
    t.scale = f64_from_bits(get64(in));
    t.good_steps = (long)get32(in + 8);
    t.window = (long)get32(in + 12);
    t.factor = f64_from_bits(get64(in + 16));
    t.floor = f64_from_bits(get64(in + 24));
    t.ceiling = f64_from_bits(get64(in + 32));
    if (!(t.floor > 0.0 && t.floor <= t.ceiling && isfinite(t.ceiling) && t.scale >= t.floor &&
          t.scale <= t.ceiling && t.factor > 1.0 && isfinite(t.factor) && t.window >= 1 &&
          t.good_steps < t.window)) return -1;
    *ls = t;
    return 0;
}

// ----------------------------------------------------------------------------
// The step decision, doc/design.md, "The training step", steps 5-7, in one place for both trainers:
// after the overflow check on the reduced gradients,
//   StepDecision d = decide_step(&scaler, &lr, &applied_steps, global_batch, overflow);
//   if (d.apply)  // unscale by the S backward used (and clip), then Adam at rate d.lr, as train.h does:
//       model_apply(model, d.inv_scale * clip_factor(norm * d.inv_scale, clip), d.lr, applied_steps);
// A skipped step leaves applied_steps, hence the learning rate, where it was.

typedef struct {
    int apply;         // 1: update the weights; 0: skip (overflow)
    double lr;         // lr_at_step(applied steps before this one): the rate for this update
    double inv_scale;  // 1 / S, S being the scale this step's backward was seeded with
    double scale;      // S after the update, for the next step and the log
} StepDecision;

static inline StepDecision decide_step(LossScaler *ls, const LrSettings *lr, long *applied_steps,
                                long global_batch, int overflow) {
    StepDecision d;
    d.inv_scale = 1.0 / ls->scale;
    d.lr = lr_at_step(lr, *applied_steps, global_batch);
    d.apply = loss_scaler_update(ls, overflow);
    if (d.apply) (*applied_steps)++;
    d.scale = ls->scale;
    return d;
}

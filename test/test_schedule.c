// test_schedule.c: the learning-rate rules at exact points, the LEGW invariant,
// the flags, the dynamic loss scaler and its checkpoint form, and the step
// decision the trainers call (a skipped step does not advance the schedule).
#include "schedule.h"
#include "test/test.h"

static int close_to(double a, double b) { return fabs(a - b) <= 1e-12 * fmax(fabs(a), fabs(b)) + 1e-18; }

// Settings from flags, as a trainer builds them: name value name value ... NULL.
// 128000 sequences per epoch: 1000 steps per epoch at B0 = 128, 250 at 512.
static LrSettings settings(const char *first, ...) {
    LrSettings s = lr_settings_default();
    s.epoch_sequences = 128000;
    va_list ap;
    va_start(ap, first);
    for (const char *flag = first; flag; flag = va_arg(ap, const char *)) {
        const char *value = va_arg(ap, const char *);
        if (!lr_settings_set(&s, flag, value)) { printf("not a schedule flag: %s\n", flag); exit(1); }
    }
    va_end(ap);
    lr_settings_check(&s);
    return s;
}

static void check_lr(const LrSettings *s, long step, long batch, double want, const char *what) {
    double got = lr_at_step(s, step, batch);
    CHECK(close_to(got, want), "%-9s %-28s step %7ld batch %5ld: lr %.12g (want %.12g)",
          lr_rule_names[s->rule], what, step, batch, got, want);
}

static void test_rules(void) {
    LrSettings s = settings("--lr-schedule", "constant", NULL);
    check_lr(&s, 0, 512, 5e-4, "step 0");
    check_lr(&s, 5000, 512, 5e-4, "any step");
    check_lr(&s, 100000000, 32768, 5e-4, "past any horizon");

    // Goyal: peak 5e-4 * 4; warmup 0.1 epoch = 25 steps at 512; decay ends at 0.9 epoch = 225
    s = settings("--lr-schedule", "linear", "--warmup-epochs", "0.1", "--decay-epochs", "0.9", NULL);
    CHECK(lr_warmup_steps(&s, 512) == 25 && lr_horizon_steps(&s, 512) == 225, "linear: W = %ld (want 25), H = %ld (want 225)",
          lr_warmup_steps(&s, 512), lr_horizon_steps(&s, 512));
    check_lr(&s, 0, 512, 2e-3 / 25, "step 0");
    check_lr(&s, 12, 512, 2e-3 * 13 / 25, "mid-warmup");
    check_lr(&s, 24, 512, 2e-3, "end of warmup");
    check_lr(&s, 25, 512, 2e-3, "start of decay");
    check_lr(&s, 125, 512, 1e-3, "mid-decay");
    check_lr(&s, 225, 512, 0.0, "end of horizon");
    check_lr(&s, 100000, 512, 0.0, "past the end");
    check_lr(&s, 0, 128, 5e-4 / 100, "step 0 at B0 (W = 100)");
    s = settings("--lr-schedule", "linear", "--warmup-epochs", "0.1", "--decay-epochs", "0.9", "--min-lr", "1e-4", NULL);
    check_lr(&s, 125, 512, 1e-4 + 1.9e-3 * 0.5, "mid-decay, min-lr 1e-4");
    check_lr(&s, 225, 512, 1e-4, "end of horizon, min-lr 1e-4");
    check_lr(&s, 9999, 512, 1e-4, "past the end, min-lr 1e-4");

    // sqrt: peak 5e-4 * 2; warmup 10 steps; cosine to step 110
    s = settings("--lr-schedule", "sqrt", "--warmup-steps", "10", "--decay", "cosine", "--decay-steps", "110", NULL);
    check_lr(&s, 0, 512, 1e-4, "step 0");
    check_lr(&s, 4, 512, 5e-4, "mid-warmup");
    check_lr(&s, 9, 512, 1e-3, "end of warmup");
    check_lr(&s, 35, 512, 1e-3 * 0.5 * (1 + sqrt(0.5)), "quarter of the decay");
    check_lr(&s, 60, 512, 5e-4, "mid-decay");
    check_lr(&s, 110, 512, 0.0, "end of horizon");
    check_lr(&s, 111, 512, 0.0, "past the end");

    // LEGW: w0 = 0.1 epoch at B0 = 100 steps at every batch; peak 5e-4 * 2 at 512;
    // polynomial (power 2) decay ending at 2 epochs = 500 steps at 512
    s = settings("--lr-schedule", "legw", "--warmup-epochs", "0.1", "--decay", "polynomial", "--decay-epochs", "2", NULL);
    CHECK(lr_warmup_steps(&s, 512) == 100, "legw: W at 512 = %ld (want 100: 0.4 epoch of 250 steps)", lr_warmup_steps(&s, 512));
    check_lr(&s, 0, 512, 1e-5, "step 0");
    check_lr(&s, 49, 512, 5e-4, "mid-warmup");
    check_lr(&s, 99, 512, 1e-3, "end of warmup");
    check_lr(&s, 300, 512, 1e-3 * 0.25, "mid-decay ((1 - 0.5)^2)");
    check_lr(&s, 500, 512, 0.0, "end of horizon");
    check_lr(&s, 1000000, 512, 0.0, "past the end");

    // Puri (reconstruction): 5e-4 * 32 capped at 3e-3, no warmup, linear over 100k steps
    s = settings("--lr-schedule", "puri", NULL);
    check_lr(&s, 0, 4096, 3e-3, "step 0 (capped)");
    check_lr(&s, 0, 256, 1e-3, "step 0 (under the cap)");
    check_lr(&s, 50000, 4096, 1.5e-3, "mid-decay");
    check_lr(&s, 100000, 4096, 0.0, "end of horizon");
    check_lr(&s, 250000, 4096, 0.0, "past the end");
    LrSettings no_data = lr_settings_default();  // steps only: needs no epoch size
    lr_settings_check(&no_data);
    check_lr(&no_data, 50000, 4096, 1.5e-3, "mid-decay, epoch size unset");
    s = settings("--lr-schedule", "puri", "--warmup-steps", "1000", NULL);
    check_lr(&s, 0, 32768, 3e-6, "step 0, warmup 1000");
    check_lr(&s, 499, 32768, 1.5e-3, "mid-warmup");
    check_lr(&s, 999, 32768, 3e-3, "end of warmup");
    check_lr(&s, 50500, 32768, 1.5e-3, "mid-decay after warmup");
    s = settings("--lr-schedule", "puri", "--decay", "exponential", "--decay-steps", "100", "--lr-cap", "2e-3", NULL);
    check_lr(&s, 0, 4096, 2e-3, "step 0, exponential, cap 2e-3");
    check_lr(&s, 50, 4096, 2e-4, "mid-decay (0.01^0.5)");
    check_lr(&s, 100, 4096, 2e-5, "end of horizon (0.01)");
    check_lr(&s, 5000, 4096, 2e-5, "past the end (held)");
    s = settings("--lr-schedule", "puri", "--decay", "none", NULL);
    check_lr(&s, 1000000, 4096, 3e-3, "decay none");

    // Warmup longer than the horizon (LEGW at a large k): the decay is over when it ends
    s = settings("--lr-schedule", "legw", "--warmup-steps", "100", "--decay-steps", "50", NULL);
    check_lr(&s, 99, 512, 1e-3, "end of a warmup past H");
    check_lr(&s, 100, 512, 0.0, "after a warmup past H");
}

// You et al. 2019: B = k * B0 keeps the warmup's iterations and multiplies the peak
// by sqrt(k). An epoch size that divides by nothing in particular, so rounding shows.
static void test_legw_invariant(void) {
    LrSettings s = settings("--lr-schedule", "legw", "--warmup-epochs", "0.05", "--decay-epochs", "100", NULL);
    s.epoch_sequences = 1000003;
    long W1 = lr_warmup_steps(&s, 128);
    int all_ok = 1, sqrt_shrinks = 1;
    for (int k = 2; k <= 64; k++) {
        long B = 128L * k;
        int ok = lr_warmup_steps(&s, B) == W1;
        for (long step = 0; step <= W1; step++)  // the warmup and the peak at W, where the decay starts
            ok &= close_to(lr_at_step(&s, step, B), sqrt((double)k) * lr_at_step(&s, step, 128));
        ok &= close_to(lr_at_step(&s, W1 - 1, B), 5e-4 * sqrt((double)k));   // peak reached at the same step
        ok &= lr_at_step(&s, W1 - 2, B) < 5e-4 * sqrt((double)k);
        if (!ok) printf("      legw invariant broken at k = %d\n", k);
        all_ok &= ok;
        // contrast: the sqrt rule's warmup in epochs gets k times shorter
        LrSettings q = s;
        q.rule = LR_SQRT;
        sqrt_shrinks &= labs(lr_warmup_steps(&q, B) - W1 / k) <= 1;
    }
    CHECK(W1 == 391, "legw: W at B0 = %ld (want 391 = round(0.05 * 1000003 / 128))", W1);
    CHECK(all_ok, "legw: for k = 2..64, same warmup iterations (%ld) and lr(k B0, step) = sqrt(k) lr(B0, step)", W1);
    CHECK(sqrt_shrinks, "sqrt rule, for contrast: warmup in epochs is k times fewer iterations");
}

// ----------------------------------------------------------------------------
// Flags

typedef struct { const char *flag, *value; } FlagCase;
static void set_one(void *arg) {
    const FlagCase *c = (const FlagCase *)arg;
    LrSettings s = lr_settings_default();
    lr_settings_set(&s, c->flag, c->value);
}
static void check_min_lr(void *arg) {
    (void)arg;
    LrSettings s = lr_settings_default();
    lr_settings_set(&s, "--min-lr", "5e-4");
    lr_settings_check(&s);
}
static void check_no_epoch(void *arg) {
    (void)arg;
    LrSettings s = lr_settings_default();
    lr_settings_set(&s, "--lr-schedule", "legw");   // warmup and decay in epochs, epoch size unset
    lr_settings_check(&s);
}
static void lr_batch_zero(void *arg) { (void)arg; LrSettings s = lr_settings_default(); lr_at_step(&s, 0, 0); }
static void lr_batch_negative(void *arg) { (void)arg; LrSettings s = lr_settings_default(); lr_at_step(&s, 0, -128); }
static void lr_step_negative(void *arg) { (void)arg; LrSettings s = lr_settings_default(); lr_at_step(&s, -1, 128); }

static void test_flags(void) {
    static const FlagCase bad[] = {
        {"--lr", "0"}, {"--lr", "-1e-3"}, {"--lr", "abc"}, {"--lr", ""}, {"--lr", "1e-3x"}, {"--lr", "nan"},
        {"--base-batch", "0"}, {"--base-batch", "-128"}, {"--base-batch", "12.5"},
        {"--warmup-epochs", "-1"}, {"--warmup-steps", "-5"}, {"--warmup-steps", "2.5"},
        {"--decay-epochs", "0"}, {"--decay-steps", "0"}, {"--decay-steps", "-100"},
        {"--decay-power", "0"}, {"--decay-rate", "1"}, {"--decay-rate", "0"}, {"--min-lr", "-1e-5"},
        {"--lr-cap", "0"}, {"--lr-cap", "-3e-3"},
        {"--decay-steps", "1e5"},  // the rule of every whole-number flag (util.h, parse_whole), as --steps 1e5
    };
    static const char *want[] = {
        "error: --lr: must be positive, got 0", "error: --lr: must be positive, got -1e-3",
        "error: --lr: expected a number, got \"abc\"", "error: --lr: expected a number, got \"\"",
        "error: --lr: expected a number, got \"1e-3x\"", "error: --lr: expected a number, got \"nan\"",
        "error: --base-batch: must be at least 1, got 0", "error: --base-batch: must be at least 1, got -128",
        "error: --base-batch: expected a whole number, got \"12.5\"",
        "error: --warmup-epochs: must be at least 0, got -1", "error: --warmup-steps: must be at least 0, got -5",
        "error: --warmup-steps: expected a whole number, got \"2.5\"",
        "error: --decay-epochs: must be positive, got 0", "error: --decay-steps: must be at least 1, got 0",
        "error: --decay-steps: must be at least 1, got -100",
        "error: --decay-power: must be positive, got 0", "error: --decay-rate: must be between 0 and 1 (exclusive), got 1",
        "error: --decay-rate: must be between 0 and 1 (exclusive), got 0", "error: --min-lr: must be at least 0, got -1e-5",
        "error: --lr-cap: must be positive, got 0", "error: --lr-cap: must be positive, got -3e-3",
        "error: --decay-steps: expected a whole number, got \"1e5\"",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        EXPECT_EXIT(set_one, (void *)&bad[i], 2, want[i], bad[i].flag);
    FlagCase rule = {"--lr-schedule", "goyal"}, decay = {"--decay", "step"};
    EXPECT_EXIT(set_one, &rule, 2, "error: --lr-schedule: unknown schedule \"goyal\" (expected puri, legw, linear, sqrt or constant)", "--lr-schedule goyal");
    EXPECT_EXIT(set_one, &decay, 2, "error: --decay: unknown decay \"step\" (expected none, linear, cosine, exponential or polynomial)", "--decay step");
    EXPECT_EXIT(check_min_lr, NULL, 2, "error: --min-lr: must be below --lr (0.0005), got 0.0005", "--min-lr equal to --lr");
    EXPECT_EXIT(check_no_epoch, NULL, 2, "error: --warmup-epochs: the epoch size is unknown", "epochs without an epoch size");
    EXPECT_EXIT(lr_batch_zero, NULL, 2, "error: lr_at_step: the global batch must be positive, got 0", "lr_at_step batch 0");
    EXPECT_EXIT(lr_batch_negative, NULL, 2, "error: lr_at_step: the global batch must be positive, got -128", "lr_at_step batch -128");
    EXPECT_EXIT(lr_step_negative, NULL, 2, "error: lr_at_step: the step must be zero or positive, got -1", "lr_at_step step -1");

    LrSettings s = lr_settings_default();
    CHECK(lr_settings_set(&s, "--batch", "64") == 0 && lr_settings_set(&s, "--lr-schedulex", "puri") == 0,
          "flags that are not the schedule's are left to the caller (return 0)");
    CHECK(s.rule == LR_PURI && s.base_lr == 5e-4 && s.base_batch == 128 && s.lr_cap == 3e-3 && s.horizon == 100000 &&
          !s.horizon_in_epochs && s.warmup == 0 && s.decay == DECAY_LINEAR && s.min_lr == 0,
          "default: puri, 5e-4 at 128, cap 3e-3, linear over 100000 steps, no warmup");
    s = settings("--lr-schedule", "legw", NULL);
    CHECK(s.warmup == 0.001 && s.warmup_in_epochs && s.horizon == 1 && s.horizon_in_epochs && s.decay == DECAY_LINEAR,
          "legw preset: warmup 0.001 epoch, linear decay over 1 epoch");
    CHECK(lr_settings_set(&s, "--decay-steps", "100000") && s.horizon == 100000 && !s.horizon_in_epochs, "--decay-steps 100000 reads as 100000 steps");

    // The preset does not overwrite what the user gave, in whichever order
    LrSettings a = settings("--lr", "1e-3", "--warmup-steps", "7", "--lr-schedule", "legw", NULL);
    LrSettings b = settings("--lr-schedule", "legw", "--warmup-steps", "7", "--lr", "1e-3", NULL);
    int same = a.rule == b.rule && a.base_lr == b.base_lr && a.base_batch == b.base_batch && a.warmup == b.warmup &&
               a.warmup_in_epochs == b.warmup_in_epochs && a.decay == b.decay && a.horizon == b.horizon &&
               a.horizon_in_epochs == b.horizon_in_epochs && a.decay_power == b.decay_power &&
               a.decay_rate == b.decay_rate && a.min_lr == b.min_lr && a.lr_cap == b.lr_cap;
    CHECK(a.rule == LR_LEGW && a.base_lr == 1e-3 && a.warmup == 7 && !a.warmup_in_epochs && same,
          "--lr and --warmup-steps survive a later --lr-schedule (order does not matter)");

    // Every flag the help text names is one the parser reads
    static const char *flags[][2] = {{"--lr-schedule", "sqrt"}, {"--lr", "1e-3"}, {"--base-batch", "256"},
        {"--warmup-epochs", "0.5"}, {"--warmup-steps", "10"}, {"--decay", "cosine"}, {"--decay-epochs", "3"},
        {"--decay-steps", "9"}, {"--decay-power", "1.5"}, {"--decay-rate", "0.1"}, {"--min-lr", "1e-6"}, {"--lr-cap", "1e-2"}};
    char *help = NULL; size_t help_len = 0;
    FILE *f = open_memstream(&help, &help_len);
    lr_settings_help(f);
    fclose(f);
    int nflags = (int)(sizeof flags / sizeof flags[0]), parsed = 0, in_help = 0, dashes = 0;
    for (int i = 0; i < nflags; i++) {
        parsed += lr_settings_set(&s, flags[i][0], flags[i][1]);
        char needle[64];
        snprintf(needle, sizeof needle, "  %s ", flags[i][0]);
        in_help += strstr(help, needle) != NULL;
    }
    for (const char *p = help; (p = strstr(p, "  --")); p++) dashes++;
    CHECK(parsed == nflags && in_help == nflags && dashes == nflags, "help lists %d flags, %d of %d in it, parser reads %d",
          dashes, in_help, nflags, parsed);
    free(help);

    // The start-up table states what the settings come to at this batch
    char *table = NULL; size_t table_len = 0;
    s = settings("--lr-schedule", "legw", "--warmup-epochs", "0.1", NULL);
    f = open_memstream(&table, &table_len);
    lr_settings_print(f, &s, 512);
    fclose(f);
    CHECK(strstr(table, "| peak lr                  | 0.001 at batch 512") && strstr(table, "100 steps (0.1 epochs at B0)") &&
          strstr(table, "linear to 0 by step 250 (1 epochs)"), "start-up table: peak, warmup and decay at batch 512");
    if (!strstr(table, "peak lr")) printf("%s", table);
    free(table);
}

// ----------------------------------------------------------------------------
// Loss scaler

static void test_loss_scaler(void) {
    LossScaler ls;
    loss_scaler_init(&ls, 1);
    CHECK(ls.scale == 65536 && ls.good_steps == 0 && ls.window == 1000 && ls.factor == 2 && ls.floor == 1 && ls.ceiling == 16777216,
          "init: S 2^16, window 1000, factor 2, floor 1, ceiling 2^24");
    int apply = loss_scaler_update(&ls, 1);
    CHECK(apply == 0 && ls.scale == 32768 && ls.good_steps == 0, "overflow: skip (%d), S halves to %g", apply, ls.scale);
    int applied = 0;
    for (int i = 0; i < 999; i++) applied += loss_scaler_update(&ls, 0);
    CHECK(applied == 999 && ls.scale == 32768 && ls.good_steps == 999, "999 clean steps: all applied, S still %g", ls.scale);
    applied = loss_scaler_update(&ls, 0);
    CHECK(applied == 1 && ls.scale == 65536 && ls.good_steps == 0, "1000th clean step: applied, S doubles to %g", ls.scale);

    for (int i = 0; i < 500; i++) loss_scaler_update(&ls, 0);
    loss_scaler_update(&ls, 1);
    CHECK(ls.good_steps == 0 && ls.scale == 32768, "overflow after 500 clean steps resets the counter");
    for (int i = 0; i < 999; i++) loss_scaler_update(&ls, 0);
    CHECK(ls.scale == 32768, "so 999 more clean steps do not grow S (%g)", ls.scale);
    loss_scaler_update(&ls, 0);
    CHECK(ls.scale == 65536, "the 1000th does (%g)", ls.scale);

    int skipped = 0;
    for (int i = 0; i < 40; i++) skipped += !loss_scaler_update(&ls, 1);
    CHECK(skipped == 40 && ls.scale == 1, "40 overflows: all skipped, S stops at the floor 1 (%g)", ls.scale);
    for (int i = 0; i < 1000 * 40; i++) loss_scaler_update(&ls, 0);
    CHECK(ls.scale == 16777216, "40000 clean steps: S stops at the ceiling 2^24 (%g)", ls.scale);

    loss_scaler_init(&ls, 0);
    int a = loss_scaler_update(&ls, 1);
    for (int i = 0; i < 5000; i++) loss_scaler_update(&ls, 0);
    CHECK(a == 0 && ls.scale == 1, "FP32 mode: S stays 1, an overflow still skips");

    // Checkpoint form
    unsigned char bytes[LOSS_SCALER_BYTES];
    loss_scaler_init(&ls, 1);
    for (int i = 0; i < 7; i++) loss_scaler_update(&ls, 0);
    loss_scaler_serialize(&ls, bytes);
    static const unsigned char want[16] = {0, 0, 0, 0, 0, 0, 0xf0, 0x40, 7, 0, 0, 0, 0xe8, 0x03, 0, 0};
    CHECK(LOSS_SCALER_BYTES == 40 && memcmp(bytes, want, 16) == 0,
          "serialised: 40 bytes, little-endian f64 2^16, u32 7 good steps, u32 window 1000");

    // A scaler restored mid-run behaves exactly like the one that kept running
    uint64_t rng = 42;
    loss_scaler_init(&ls, 1);
    for (int i = 0; i < 3000; i++) loss_scaler_update(&ls, rng_uniform(&rng) < 0.002);
    loss_scaler_serialize(&ls, bytes);
    LossScaler restored;
    memset(&restored, 0xff, sizeof restored);
    int rc = loss_scaler_deserialize(&restored, bytes);
    int same = rc == 0, growths = 0, overflows = 0;
    for (int i = 0; i < 20000; i++) {
        int overflow = rng_uniform(&rng) < 0.0004;
        double before = ls.scale;
        same &= loss_scaler_update(&ls, overflow) == loss_scaler_update(&restored, overflow);
        same &= ls.scale == restored.scale && ls.good_steps == restored.good_steps;
        growths += ls.scale > before; overflows += overflow;
    }
    CHECK(same && growths > 3 && overflows > 3, "restored scaler: same decisions and S for 20000 steps (%d growths, %d overflows)",
          growths, overflows);

    // Bytes that are not a scaler are refused and leave it untouched
    LossScaler keep = restored;
    unsigned char bad[LOSS_SCALER_BYTES];
    memcpy(bad, bytes, sizeof bad); put64(bad, f64_bits(0.0));
    int r1 = loss_scaler_deserialize(&restored, bad);
    memcpy(bad, bytes, sizeof bad); put32(bad + 8, 1000);
    int r2 = loss_scaler_deserialize(&restored, bad);
    memcpy(bad, bytes, sizeof bad); put64(bad + 16, f64_bits(1.0));
    int r3 = loss_scaler_deserialize(&restored, bad);
    memcpy(bad, bytes, sizeof bad); put64(bad, f64_bits(INFINITY));
    int r4 = loss_scaler_deserialize(&restored, bad);
    CHECK(r1 == -1 && r2 == -1 && r3 == -1 && r4 == -1 && memcmp(&keep, &restored, sizeof keep) == 0,
          "refused: S 0, counter = window, factor 1, S inf (%d %d %d %d)", r1, r2, r3, r4);
}

// ----------------------------------------------------------------------------
// The step decision: a skipped step does not advance the learning-rate schedule.

static void test_decide_step(void) {
    LrSettings s = settings("--lr-schedule", "linear", "--warmup-steps", "10", "--decay-steps", "50", NULL);
    LossScaler ls;
    loss_scaler_init(&ls, 1);
    long applied = 0;
    StepDecision d = decide_step(&ls, &s, &applied, 512, 1);
    CHECK(d.apply == 0 && applied == 0 && d.inv_scale == 1.0 / 65536 && d.scale == 32768 && close_to(d.lr, 2e-4),
          "overflow: skipped, applied steps stay 0, inv_scale 1/2^16, next S 2^15");
    d = decide_step(&ls, &s, &applied, 512, 0);
    CHECK(d.apply == 1 && applied == 1 && d.inv_scale == 1.0 / 32768 && close_to(d.lr, 2e-4),
          "next clean step: applied at the step-0 rate %g (the skipped step did not use it up)", d.lr);

    // 60 steps with overflows sprinkled in apply the same rates, in order, as 60 clean ones
    loss_scaler_init(&ls, 1);
    applied = 0;
    int k = 0, same = 1, skips = 0;
    for (int i = 0; i < 80 && applied < 60; i++) {
        int overflow = i % 7 == 3;
        d = decide_step(&ls, &s, &applied, 512, overflow);
        skips += !d.apply;
        if (d.apply) same &= d.lr == lr_at_step(&s, k++, 512);
    }
    CHECK(same && k == 60 && applied == 60 && skips > 5, "with %d skipped steps, the 60 applied steps get rates 0..59 in order", skips);
}

// The table tool, as a user runs it (it sits next to this test's binary)
static void test_tool(void) {
    const char *bin = test_bin_dir();
    int rc = test_system("%s/schedule_table --lr-schedule legw --batch 128,512 --epoch-sequences 128000 --warmup-epochs 0.1 "
                         "--steps 1000 --every 99 | grep -q '^99 .*0.0005 .*0.001$'", bin);
    CHECK(rc == 0, "schedule_table: step 99 row reads 0.0005 at 128 and 0.001 at 512 (rc %d)", rc);
    rc = test_system("%s/schedule_table --lr 0 2>&1 | grep -q 'error: --lr: must be positive, got 0'", bin);
    int rc2 = test_system("%s/schedule_table --batch 0 >/dev/null 2>&1", bin);
    int rc3 = test_system("%s/schedule_table --bogus 1 >/dev/null 2>&1", bin);
    CHECK(rc == 0 && rc2 == 2 && rc3 == 2, "schedule_table: bad flags exit 2 with the message (%d %d %d)", rc, rc2, rc3);
}

int main(void) {
    test_rules();
    test_legw_invariant();
    test_flags();
    test_loss_scaler();
    test_decide_step();
    test_tool();
    return test_summary("test_schedule");
}

// schedule_table: prints a learning-rate schedule as a table, one column per
// global batch, from the same flags the trainers take (schedule.h). Lines that
// start with '#' describe the settings, so gnuplot reads the table as it is
// (dev/plot_schedules.sh draws doc/schedules.png from it).
//
//   build/schedule_table --lr-schedule legw --batch 128,1024,8192 --steps 20000 --every 1000
//   build/schedule_table --lr-schedule puri --log          # log-spaced steps, for log-log plots
#include "schedule.h"

#define MAX_BATCHES 16

static void usage(FILE *f) {
    fprintf(f,
        "usage: schedule_table [flags]\n"
        "  --batch LIST         global batches in sequences, comma-separated (default 128,1024,8192,32768)\n"
        "  --epoch-sequences X  sequences in one epoch (default 1.5625e8: 40 GB in 256-byte sequences)\n"
        "  --steps N            last step shown (default: the largest decay horizon, or 10000)\n"
        "  --every N            a row every N steps (default: 20 rows)\n"
        "  --log                log-spaced rows (20 a decade), for log-scale plots\n");
    lr_settings_help(f);
}

int main(int argc, char **argv) {
    std_fds_open();
    file_size_limit_as_error();
    LrSettings s = lr_settings_default();
    s.epoch_sequences = 40e9 / 256;
    long batches[MAX_BATCHES] = {128, 1024, 8192, 32768};
    int nbatches = 4, log_rows = 0;
    long steps = 0, every = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) { usage(stdout); return 0; }
        if (strcmp(argv[i], "--log") == 0) { log_rows = 1; continue; }
        if (i + 1 >= argc) fail("%s: needs a value (see --help)", argv[i]);
        const char *flag = argv[i], *value = argv[++i];
        if (lr_settings_set(&s, flag, value)) continue;
        if (strcmp(flag, "--batch") == 0) {
            nbatches = 0;
            char buf[1024];
            snprintf(buf, sizeof buf, "%s", value);
            for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
                if (nbatches == MAX_BATCHES) fail("--batch: at most %d batches", MAX_BATCHES);
                batches[nbatches++] = (long)parse_whole(flag, tok, 1, LR_MAX_WHOLE);
            }
            if (nbatches == 0) fail("--batch: no batch given");
        } else if (strcmp(flag, "--epoch-sequences") == 0) {
            s.epoch_sequences = parse_positive(flag, value);
        } else if (strcmp(flag, "--steps") == 0) {
            steps = (long)parse_whole(flag, value, 1, LR_MAX_WHOLE);
        } else if (strcmp(flag, "--every") == 0) {
            every = (long)parse_whole(flag, value, 1, LR_MAX_WHOLE);
        } else {
            fail("unknown flag %s (see --help)", flag);
        }
    }
    lr_settings_check(&s);
    if (steps == 0) {  // long enough to see every batch's decay end
        steps = 10000;
        for (int b = 0; b < nbatches; b++) {
            long H = s.decay == DECAY_NONE ? 0 : lr_horizon_steps(&s, batches[b]);
            long W = lr_warmup_steps(&s, batches[b]);
            long end = (H > W ? H : W) + 1;
            if (end > steps) steps = end;
        }
    }
    if (every == 0) every = steps / 20 > 0 ? steps / 20 : 1;

    for (int b = 0; b < nbatches; b++) {
        printf("# batch %ld (k = %g)\n", batches[b], (double)batches[b] / (double)s.base_batch);
        char *rows = NULL; size_t len = 0;
        FILE *f = open_memstream(&rows, &len);
        lr_settings_print(f, &s, batches[b]);
        fclose(f);
        for (char *line = strtok(rows, "\n"); line; line = strtok(NULL, "\n")) printf("# %s\n", line);
        free(rows);
    }
    printf("# step");
    for (int b = 0; b < nbatches; b++) printf(" lr@%ld", batches[b]);
    printf("\n");
    long prev = -1;
    for (double x = 0.0; ; ) {
        long step = (long)x;
        if (step > steps) step = steps;
        if (step != prev) {
            printf("%ld", step);
            for (int b = 0; b < nbatches; b++) printf(" %.6g", lr_at_step(&s, step, batches[b]));
            printf("\n");
            prev = step;
        }
        if (step == steps) break;
        x = log_rows ? (x < 1.0 ? 1.0 : x * 1.122018454301963) : x + (double)every;  // 10^(1/20)
    }
    return 0;
}

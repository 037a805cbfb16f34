// harness/train_harness.h: what keeps a run of train.h's loop safe, and is not in the papers:
// MPI's start and the ranks' agreement, signals, opening the data, the progress and log lines,
// the checkpoint files of a run (latest, best, --resume, --init-from), the settings table, the
// start of a run (its settings, data, state and directory, all checked before the first step),
// the divergence guards and the validation a resume owes. train.h includes it after its Run;
// a first reading of the papers' algorithm can skip it.
#pragma once

// The loss scaler's state (schedule.h) travels in the checkpoint's scaler field (harness/checkpoint.h).
static_assert(LOSS_SCALER_BYTES == CKPT_SCALER_USED, "the loss scaler fills its checkpoint field's used bytes");

// ----------------------------------------------------------------------------
// Processes: MPI's start and end, and the ranks' agreement on the run.

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
            fail_where_set(rank, host);
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

#ifdef USE_MPI
// An error line that does not exit (the ranks exit together after it), in one write.
static void error_line(const char *fmt, ...) {
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "error: %s\n", msg);
    fflush(stderr);
}
#endif

// All ranks must run one configuration and read the same bytes: a rank with another
// --hidden would all-reduce buffers of another size (a crash or a hang), another --steps
// would leave collectives waiting, and another flag, other data under the same names (two
// hosts with different copies) or another checkpoint at the --resume path would train a
// different model in silence while only rank 0's is saved. Before any work, rank 0's flags
// (all of them, after a resume filled them in), its data's identity and its checkpoint's
// checksum go to every rank; the lowest rank that differs names the first difference, and
// every rank exits 2. `checks` holds the entries beyond the flags (name, value pairs).
static void ranks_agree(const Options *o, const RunText *checks) {
#ifdef USE_MPI
    if (world == 1) return;
    RunText mine = run_record(o, RECORD_ALL_FLAGS);
    for (size_t at = 0; at < checks->bytes;) {
        const char *name = checks->text + at, *value = name + strlen(name) + 1;
        run_text_add(&mine, name, value);
        at = (size_t)(value + strlen(value) + 1 - checks->text);
    }
    long long n = (long long)mine.bytes;
    MPI_Bcast(&n, 1, MPI_LONG_LONG, 0, MPI_COMM_WORLD);
    if (n < 1 || n > INT_MAX) fail("rank %d: rank 0's settings are %lld bytes long", rank, n);
    char *first = (char *)mallocCheck((size_t)n + 1);
    if (rank == 0) memcpy(first, mine.text, (size_t)n);
    MPI_Bcast(first, (int)n, MPI_CHAR, 0, MPI_COMM_WORLD);
    first[n] = 0;
    // the first entry (flag order, then the checks) whose presence or value differs
    int n_names = NFLAGS;
    const char *names[NFLAGS + 8];
    for (int i = 0; i < NFLAGS; i++) names[i] = flags[i].name;
    for (size_t at = 0; at < checks->bytes && n_names < NFLAGS + 8;) {
        names[n_names++] = checks->text + at;
        at += strlen(checks->text + at) + 1;
        at += strlen(checks->text + at) + 1;
    }
    int differ = n_names;
    const char *v0 = NULL, *v1 = NULL;
    for (int i = 0; i < n_names && differ == n_names; i++) {
        v0 = run_text_find(first, (size_t)n, names[i]);
        v1 = run_text_find(mine.text, mine.bytes, names[i]);
        if (!v0 != !v1 || (v0 && strcmp(v0, v1))) differ = i;
    }
    int report[2] = {differ, rank}, lowest[2];  // the smallest (entry, rank) pair reports
    MPI_Allreduce(report, lowest, 1, MPI_2INT, MPI_MINLOC, MPI_COMM_WORLD);
    if (lowest[0] < n_names) {
        if (rank == lowest[1]) {
            char shown[2][200], how[1200];
            if (differ < NFLAGS) {
                flag_shown(differ, v1, shown[0]);
                flag_shown(differ, v0, shown[1]);
            } else {  // a check's value: a path and checksum, a data identity
                snprintf(shown[0], 200, "%.180s", v1 ? v1 : "none");
                snprintf(shown[1], 200, "%.180s", v0 ? v0 : "none");
            }
            if (differ < NFLAGS)
                error_line("rank %d has --%s %s, rank 0 --%s %s: all ranks must be started with the same flags",
                          rank, names[differ], shown[0], names[differ], shown[1]);
            else if (strstr(names[differ], "data") && v0 && v1 && data_identity_differs(v0, v1, how, sizeof how))
                error_line("rank %d reads other %s than rank 0: %s. All ranks must read the same bytes (copy "
                          "rank 0's files to this host)", rank, names[differ], how);
            else
                error_line("rank %d's %s is not rank 0's (%s here, %s on rank 0): all ranks must read the same files",
                          rank, names[differ], shown[0], shown[1]);
        }
        MPI_Barrier(MPI_COMM_WORLD);  // the message is out before any rank exits
        MPI_Finalize();
        exit(EXIT_BAD_INPUT);
    }
    free(first);
    free(mine.text);
#else
    (void)o;
    (void)checks;
#endif
}

// ----------------------------------------------------------------------------
// Signals: the first SIGINT, SIGTERM or SIGHUP (a closed terminal, a dropped ssh) asks
// the loop to stop at its next check (after the step, or between two batches of a
// validation pass), write a checkpoint and exit 0; so does a closed stdout (`./train |
// head`: SIGPIPE is ignored, and the failed write is seen after the step). A second
// signal exits at once: the checkpoint on disk is whole, since each is written to a
// temporary file and renamed, and the next start removes that file. SA_RESTART: a write
// to a slow reader (a pipe, a terminal) that a signal interrupts goes on, not fails.

// A signal that comes again within SIGNAL_REPEAT_S of the first is the same request
// delivered twice, not a second one: timeout(1) signals its command and then the command's
// process group, a closing terminal reaches a job through the kernel and through its shell,
// and mpirun forwards the Ctrl-C the terminal also gives its ranks.
#define SIGNAL_REPEAT_S 0.1
static volatile sig_atomic_t stop_requested = 0;
static struct timespec first_signal_at;  // (clock_gettime is async-signal-safe)
static void on_signal(int sig) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    double since = (double)(now.tv_sec - first_signal_at.tv_sec) +
                   1e-9 * (double)(now.tv_nsec - first_signal_at.tv_nsec);
    int by_signal = first_signal_at.tv_sec || first_signal_at.tv_nsec;  // (not by a closed stdout)
    if (stop_requested && by_signal && since < SIGNAL_REPEAT_S) return;
    if (stop_requested) {
        static const char msg[] = "\nsecond signal: exiting now; the last checkpoint written is intact\n";
        ssize_t r = write(2, msg, sizeof msg - 1);
        (void)r;
        _exit(128 + sig);
    }
    first_signal_at = now;
    stop_requested = 1;
}
static void signals_catch(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_RESTART;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
}
// Rank 0's stdout failed under it: its reader exited (a pipe), or its file cannot grow (a
// full disk, a file-size limit). Said once on stderr, as what it is, then the run stops as
// for a signal. The error of the failed write is gone by now, so one more byte is written
// to learn it.
static void stop_if_stdout_closed(long data_step) {
    static int said = 0;
    if (rank != 0 || !ferror(stdout) || said) return;
    said = 1;
    int e = write(1, "\n", 1) < 0 ? errno : 0;
    if (e == EPIPE) fprintf(stderr, "stdout is closed (its reader exited): ");
    else fprintf(stderr, "stdout cannot be written (%s): ", e ? strerror(e) : "a write failed");
    fprintf(stderr, "stopping after step %ld with a checkpoint\n", data_step);
    stop_requested = 1;
}
// Every rank stops at the same check, so no collective is left waiting.
static int stop_agreed(void) { return dist_sum1(stop_requested) > 0; }

// ----------------------------------------------------------------------------
// Data: shards from --train/--val, or the built-in corpus generated in memory.

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
    if (!*o->train) fail("--train: empty path");
    if (o->val && !*o->val) fail("--val: empty path");
    stream_open_spec(train, "--train", o->train, "train", 1);
    struct stat sb;
    if (o->val) stream_open_spec(val, "--val", o->val, "val", 1);
    else if (stat(o->train, &sb) == 0 && S_ISDIR(sb.st_mode)) stream_open_spec(val, "--train", o->train, "val", 1);
    else fail("--train names shard files: give the validation shards with --val");
}

// ----------------------------------------------------------------------------
// Progress: a step's log line and progress line, and validation's.

// The progress line and the log line of a step (rank 0); throughput counts training time
// only, not validation or sampling.
static void report_step(Run *r, const StepResult *s) {
    const Options *o = &r->o;
    double cps = (double)r->G * r->T / s->seconds, epoch = (double)r->data_step / loader_steps_per_epoch(&r->train);
    r->train_seconds += s->seconds;
    r->loss_sum += s->loss;
    r->n_avg++;
    if (rank != 0) return;
    log_printf(&r->dir, "train %ld %.4f %.6e %.6f %.6f %g %d %.6e %.0f\n", r->data_step, epoch, s->d.lr, s->loss,
               s->loss / M_LN2, s->scale, !s->d.apply, s->gnorm, cps);
    if (r->data_step % o->print_every == 0 || r->data_step == o->steps || !s->d.apply) {
        double elapsed = now_seconds() - r->t_start;
        double eta = elapsed / (r->data_step - r->start_step) * (o->steps - r->data_step);
        double chars_per_s = (double)r->G * r->T * (r->data_step - r->start_step) / r->train_seconds;
        printf("step %6ld/%ld | epoch %.2f | bpc %.3f | lr %.2e | scale %g | ", r->data_step, o->steps, epoch,
               r->loss_sum / r->n_avg / M_LN2, s->d.lr, s->d.scale);
        printf("%s%.0f chars/s | %.1f GFLOP/s | ETA %02d:%02d\n", s->d.apply ? "" : "SKIPPED (overflow) | ",
               chars_per_s, 3 * flops_per_char(&o->model) * chars_per_s / 1e9, (int)(eta / 60), (int)eta % 60);
        fflush(stdout);
        r->loss_sum = 0;
        r->n_avg = 0;
    }
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

// ----------------------------------------------------------------------------
// Checkpoints: rank 0 gathers the carried state of all G rows and writes;
// every rank reads the whole file and keeps its own rows.

// A checkpoint to read (--resume, --init-from) is a regular file: open() on a FIFO
// would wait for a writer forever.
static void check_input_file(const char *flag, const char *path) {
    struct stat sb;
    if (!*path) fail("--%s: empty path", flag);
    if (stat(path, &sb) != 0) fail("--%s %s: %s", flag, path, strerror(errno));
    if (S_ISDIR(sb.st_mode)) fail("--%s %s: a directory, not a checkpoint file", flag, path);
    if (!S_ISREG(sb.st_mode)) fail("--%s %s: not a regular file", flag, path);
}

// The checkpoint a --resume or --init-from PATH names: PATH itself, or in a run directory
// its latest.ckpt (--resume: where the run continues) or best.ckpt (--init-from). out[4200].
static const char *checkpoint_named(const char *flag, const char *path, char *out) {
    struct stat sb;
    snprintf(out, 4200, "%s", path);
    char best[4200];
    if (strcmp(flag, "resume")) snprintf(out, 4200, "%s", checkpoint_file(path, best, sizeof best));  // its best.ckpt
    else if (*path && stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) {
        snprintf(out, 4200, "%s/%s", path, RUN_LATEST_CKPT);
        if (stat(out, &sb) != 0 && lstat(out, &sb) == 0)  // there, but a link that leads nowhere (or loops)
            fail("--resume %s: %s: %s", path, out, strerror(errno));
        if (stat(out, &sb) != 0)
            fail("--resume %s: no %s there (not a run directory, or a run that has not written one yet)", path,
                 RUN_LATEST_CKPT);
    }
    check_input_file(flag, out);
    return out;
}

// The run directory whose latest.ckpt `ckpt` is (dir[4096]), or "" when it is not one's.
static const char *run_dir_of(const char *ckpt, char *dir) {
    const char *slash = strrchr(ckpt, '/'), *base = slash ? slash + 1 : ckpt;
    dir[0] = 0;
    if (strcmp(base, RUN_LATEST_CKPT)) return dir;
    if (!slash) snprintf(dir, 4096, ".");
    else if (slash == ckpt) snprintf(dir, 4096, "/");
    else snprintf(dir, 4096, "%.*s", (int)(slash - ckpt), ckpt);
    return dir;
}

// checkpoint_header checks the magic, the sizes and the checksum; a checksum cannot
// vouch for what its writer put under it, so the fields the loop trusts are checked here.
static FILE *run_source_open(const char *path, CkptHeader *out) {
    CkptHeader hd;
    FILE *f = checkpoint_open(path, &hd);  // D and H within MAX_EMBED and MAX_HIDDEN, the sizes without overflow
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

// The host memory the parameters, their gradients and Adam's two moments take, against
// this machine's: a model that cannot fit is a flag to change, said before allocating.
static void check_memory(const MlstmConfig *c, double extra_bytes, const char *flags_named) {
    double need = 4.0 * param_count(c) * sizeof(real) + extra_bytes;
    double have = machine_memory_bytes();
    if (have > 0 && need > have)
        fail("%s too large: the model needs %.1f GB of memory, this machine has %.1f GB", flags_named, need / 1e9,
             have / 1e9);
}

// Writes the run's checkpoint of now into path (latest.ckpt or best.ckpt), scored `score`.
static void run_save(Run *r, const char *path, double score) {
    Mlstm *m = model_host(r->md);
    real *h, *c;
    model_state(r->md, &h, &c);
    int H = m->cfg.H;
    real *hall = (real *)mallocCheck(sizeof(real) * r->G * H);
    real *call = (real *)mallocCheck(sizeof(real) * r->G * H);
    dist_gather(h, hall, (size_t)r->B * H);
    dist_gather(c, call, (size_t)r->B * H);
    if (rank == 0) {
        TrainState st;
        memset(&st, 0, sizeof st);
        st.step = r->applied;
        st.data_step = r->data_step;
        st.rng = r->rng;
        st.G = r->G;
        st.run_id = r->run_id;
        st.best_by = r->best.by;
        st.score = score;
        st.loss_ema = r->best.loss_ema;
        loss_scaler_serialize(&r->scaler, st.scaler);
        run_dir_check_held(&r->dir);  // into the directory this trainer locked, or nowhere
        checkpoint_save_run(path, m, &st, hall, call, (const uint8_t *)r->record.text, r->record.bytes,
                            r->ckpt_version);
        run_dir_replaced(&r->dir, path);  // the first: an earlier run in the directory (--overwrite) goes now
    }
    free(hall);
    free(call);
}

// --resume: everything, the carried state of this rank's rows included.
static void run_resume(Run *r, FILE *f, const char *path, const CkptHeader *hd) {
    Mlstm *m = model_host(r->md);
    real *h, *c;
    model_state(r->md, &h, &c);
    int H = m->cfg.H, B = r->B, G = r->G;
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
    if (loss_scaler_deserialize(&r->scaler, st.scaler) != 0)
        fail("checkpoint %s: the loss scaler state is invalid", path);
    if ((r->scaler.ceiling > 1.0) != (r->precision.fp16 != 0))
        fail("checkpoint %s was written %s --fp16; resume with the same mode", path,
             r->precision.fp16 ? "without" : "with");
    r->applied = (long)st.step;
    r->data_step = (long)st.data_step;
    r->rng = st.rng;
    if (st.best_by != CKPT_BEST_BY_NONE) r->best.by = st.best_by;  // the run's own, whatever --val-every says now
    r->best.loss_ema = st.loss_ema;
    model_loaded(r->md);
}

// --init-from: the weights only. Adam's moments start at zero, the carried state too,
// and the step, schedule and loss scale start afresh: fine-tuning at any batch.
static void run_init_weights(Run *r, FILE *f, const char *path, const CkptHeader *hd) {
    Mlstm *m = model_host(r->md);
    real *h, *c;
    model_state(r->md, &h, &c);
    size_t n = (size_t)hd->st.G * m->cfg.H;
    TrainState st;
    real *hall = (real *)mallocCheck(sizeof(real) * n), *call = (real *)mallocCheck(sizeof(real) * n);
    checkpoint_read(f, path, hd, m, &st, hall, call, hd->st.G);
    check_finite(path, "params", m->params, m->nparams);
    free(hall);
    free(call);
    memset(m->adam_m, 0, sizeof(real) * m->nparams);
    memset(m->adam_v, 0, sizeof(real) * m->nparams);
    memset(h, 0, sizeof(real) * (size_t)r->B * m->cfg.H);
    memset(c, 0, sizeof(real) * (size_t)r->B * m->cfg.H);
    model_loaded(r->md);
}

// The score of the run's best.ckpt, continuing a run (rank 0 reads it, every rank gets it).
static void best_from_disk(Run *r, int continuing) {
    double score = INFINITY, step = -1;
    struct stat sb;
    if (rank == 0 && continuing && stat(r->dir.best, &sb) == 0) {
        CkptHeader hd;
        checkpoint_header(r->dir.best, &hd);
        if (hd.st.run_id != r->run_id)
            fail("%s belongs to run %016llx, the run in %s is %016llx: move it away to continue", r->dir.best,
                 (unsigned long long)hd.st.run_id, r->dir.latest, (unsigned long long)r->run_id);
        if (hd.st.best_by == r->best.by && isfinite(hd.st.score)) score = hd.st.score, step = (double)hd.st.data_step;
    }
    r->best.score = dist_bcast1(score);
    r->best.step = (long)dist_bcast1(step);
}

// ----------------------------------------------------------------------------
// The settings table, rank 0's, before the first step.

static void print_settings(const Run *r) {
    const Options *o = &r->o;
    printf("| %-24s | %-40s |\n", "setting", "value");
    printf("|%s|%s|\n", "--------------------------", "------------------------------------------");
#define ROW(name, ...)                                 \
    do {                                               \
        char v_[256];                                  \
        snprintf(v_, sizeof v_, __VA_ARGS__);          \
        printf("| %-24s | %-40s |\n", name, v_);       \
    } while (0)
    const MlstmConfig *c = &o->model;
    ROW("model", "mLSTM V=%d D=%d H=%d, weight norm %s", c->V, c->D, c->H, c->wnorm ? "on" : "off");
    ROW("parameters", "%zu", model_host(r->md)->nparams);
    ROW("FLOPs per char (fwd)", "%.3g (training ~3x)", flops_per_char(&o->model));
#ifdef _OPENMP
    ROW("ranks x threads", "%d x %d", world, omp_get_max_threads());
#else
    ROW("ranks x threads", "%d x 1", world);
#endif
    ROW("batch", "%d rows/rank x %d ranks = %d, T = %d", r->B, world, r->G, o->T);
    const char *val_name = o->val ? o->val : o->train ? o->train : "built-in corpus";
    const char *names[2] = {o->train ? o->train : "built-in corpus", val_name};
    const Stream *streams[2] = {&r->train_s, &r->val_s};
    for (int k = 0; k < 2; k++) {  // a long list of paths cut, so that the size shows
        int cut = strlen(names[k]) > 50;
        ROW(k ? "val data" : "train data", "%.*s%s, %lld bytes in %d shard%s", cut ? 40 : 50, names[k],
            cut ? "..." : "", (long long)streams[k]->size, streams[k]->n_shards, streams[k]->n_shards > 1 ? "s" : "");
    }
    if (o->val_batch) ROW("val batch", "%ld rows in all (--val-batch)", o->val_batch);
    ROW("steps per epoch", "%ld", loader_steps_per_epoch(&r->train));
    double epochs = (double)o->steps / loader_steps_per_epoch(&r->train);
    ROW("steps", "%ld (%.2f epochs)%s", o->steps, epochs, o->resume ? ", resuming" : "");
    ROW("state reset", "%s", r->train.reset_docs ? "at document, shard and epoch starts" : "at shard and epoch starts");
    lr_settings_print(stdout, &o->lr, r->G);
    ROW("optimizer", "Adam b1 0.9 b2 0.999 eps 1e-8, clip %g", o->clip);
    ROW("precision", "%s", r->precision.description);
    ROW("run directory", "%.40s", o->out);
    ROW("best checkpoint by", "%s", best_by_name(r->best.by));
    if (o->resume) ROW("resumed from", "%.40s", o->resume);
    if (o->init_from) ROW("initial weights", "%.40s", o->init_from);
#undef ROW
    fflush(stdout);
}

// ----------------------------------------------------------------------------
// The start of a run: the settings (a resume's from its checkpoint), the data, the
// models, the state, then the run directory, all checked before the first step.

// The backend's cap on S (model_precision): S starts at most at the cap and never grows past it.
static void loss_scaler_cap(LossScaler *ls, double max_loss_scale) {
    if (ls->ceiling > max_loss_scale) ls->ceiling = max_loss_scale;
    if (ls->scale > max_loss_scale) ls->scale = max_loss_scale;
}

// The checkpoint a run starts from (--resume, --init-from), open from its header check to
// its weights' read, so that what was verified is what is read.
typedef struct {
    char path[4200];            // "" when the run starts from mlstm_init's weights
    CkptHeader hd;
    FILE *f;
    char *record;               // its run record (--resume), NULL when it has none
    const char *identity[2];    // the data's identity in the record (train, val), NULL when not recorded
} Source;

// A resume at its run's last step has work left when that step's validation was cut short: the
// log in the run's own directory says so (harness/run.h, LOG_VAL_CUT). Rank 0's: the log is on its host.
static int resume_owes_validation(const Options *o, const Source *src) {
    char dir[4096], log_path[4200];
    run_dir_of(src->path, dir);
    if (!dir[0] || (long)src->hd.st.data_step != o->steps || (flag_given(o, "out") && !same_file(dir, o->out)))
        return 0;
    snprintf(log_path, sizeof log_path, "%s/%s", dir, RUN_LOG);
    return log_owes_validation(log_path, o->steps);
}

// The options, a resume's from its checkpoint's header and record.
static void run_options(Run *r, Source *src, int argc, char **argv) {
    Options *o = &r->o;
    options_parse(o, argc, argv, model_backend());
    if (o->resume || o->init_from) {
        const char *flag = o->resume ? "resume" : "init-from";
        checkpoint_named(flag, o->resume ? o->resume : o->init_from, src->path);
        src->f = run_source_open(src->path, &src->hd);
        config_from_checkpoint(o, src->path, &src->hd);
        if (o->resume) src->record = (char *)checkpoint_read_run(src->f, src->path, &src->hd);
        if (src->record)
            options_from_record(o, src->path, src->record, src->hd.run_bytes, src->identity,
                                src->hd.st.best_by == CKPT_BEST_BY_VAL);
        else if (o->resume) options_without_record(o, src->path);
        if (o->resume && rank == 0 && (long)src->hd.st.data_step >= o->steps && !resume_owes_validation(o, src))
            fail("checkpoint %s is at step %llu and --steps is %ld: nothing to train (give a larger --steps)",
                 src->path, (unsigned long long)src->hd.st.data_step, o->steps);
        if (o->resume && !src->record && rank == 0)
            printf("note: checkpoint %s has no run record: the command line's flags define the run\n", src->path);
    }
    options_check(o);
    r->precision = model_precision(o);
#ifdef _OPENMP
    if (o->threads) omp_set_num_threads(o->threads);
#endif
    const char *run_steps = src->record ? run_text_find(src->record, src->hd.run_bytes, "steps") : NULL;
    if (run_steps && atol(run_steps) != o->steps && !(o->lr.given & GIVEN_HORIZON) && rank == 0)
        printf("note: --steps %ld, the run had %s: the decay now ends at step %ld (a run started with --decay-steps "
               "keeps its end)\n", o->steps, run_steps, o->steps);
    // the decay ends at --steps unless a horizon was given (a run of any length decays to its end)
    if (!(o->lr.given & GIVEN_HORIZON)) {
        o->lr.horizon = (double)o->steps;
        o->lr.horizon_in_epochs = 0;
    }
    r->B = o->B, r->T = o->T, r->G = world * o->B;
    if ((long)world * r->B > INT_MAX / 2) fail("--batch %d x %d ranks: too many rows", r->B, world);
    if (o->val_batch % world) fail("--val-batch: %ld rows do not split evenly over %d ranks", o->val_batch, world);
    if (o->val_batch / world > INT_MAX / r->T)
        fail("--val-batch: %ld rows of %d steps are too many", o->val_batch, r->T);
    r->VB = o->val_batch && o->val_batch != r->G ? (int)(o->val_batch / world) : r->B;  // val rows per rank
}

// The data, checked against the run's (a resume) and across the ranks, and the run record.
static void run_data(Run *r, const Source *src) {
    Options *o = &r->o;
    const char *place[2] = {o->train, o->val}, *flag_of[2] = {"--train", "--val"};
    for (int k = 0; k < 2; k++) {  // the record's place, not the command line's: the data may have moved
        struct stat sb;
        if (o->resume && place[k] && !flag_given(o, flag_of[k] + 2) && !strchr(place[k], ',') && stat(place[k], &sb))
            fail("the run's %s data (%s %s) is not there: the run in %s read it from there; if it has moved, give "
                 "%s with its new place", k ? "validation" : "training", flag_of[k], place[k], src->path, flag_of[k]);
    }
    open_data(o, &r->train_s, &r->val_s);
    r->identity[0] = data_identity(&r->train_s);
    r->identity[1] = data_identity(&r->val_s);
    for (int k = 0; k < 2; k++) {
        const char *where = o->train ? (k && o->val ? o->val : o->train) : "(the built-in corpus)";
        if (src->identity[k]) data_identity_check(src->path, o->train ? flag_of[k] : "--corpus-bytes", where,
                                                  src->identity[k], r->identity[k]);
    }
    if (src->record && !src->identity[0] && rank == 0)
        printf("note: checkpoint %s records no identity of its data (an older file): the data is taken on trust\n",
               src->path);
    // every rank: the same flags, the same data, the same checkpoint
    RunText checks = {NULL, 0, 0};
    run_text_add(&checks, RECORD_TRAIN_DATA, r->identity[0]);
    run_text_add(&checks, RECORD_VAL_DATA, r->identity[1]);
    if (src->f) {
        char sum[4300];
        snprintf(sum, sizeof sum, "%s with checksum %016llx", src->path, (unsigned long long)src->hd.checksum);
        run_text_add(&checks, o->resume ? "checkpoint (--resume)" : "checkpoint (--init-from)", sum);
    }
    ranks_agree(o, &checks);
    free(checks.text);
    // the record: the data where it is (absolute), and what it holds; the precision the run has
    // (the FP16 GPU trainer scales without --fp16), so a resume on any trainer asks for that mode
    Options recorded = *o;
    recorded.fp16 = r->precision.fp16;
    char *paths[2] = {o->train ? absolute_paths(o->train) : NULL, o->val ? absolute_paths(o->val) : NULL};
    recorded.train = paths[0];
    recorded.val = paths[1];
    r->record = run_record(&recorded, RECORD_RUN);
    run_text_add(&r->record, RECORD_TRAIN_DATA, r->identity[0]);
    run_text_add(&r->record, RECORD_VAL_DATA, r->identity[1]);
    free(paths[0]);
    free(paths[1]);
    char what[2][4200];
    if (o->train) {
        snprintf(what[0], sizeof what[0], "the training data (--train %s)", o->train);
        snprintf(what[1], sizeof what[1], "the validation data (--val %s)", o->val ? o->val : o->train);
    } else {
        snprintf(what[0], sizeof what[0], "the built-in corpus's training split (--corpus-bytes %ld)", o->corpus_bytes);
        snprintf(what[1], sizeof what[1], "the built-in corpus's validation split (1/40 of --corpus-bytes %ld)",
                 o->corpus_bytes);
    }
    loader_init(&r->train, &r->train_s, world, rank, r->B, r->T, what[0]);
    loader_init(&r->val, &r->val_s, world, rank, r->VB, r->T, what[1]);
    r->train.reset_docs = r->val.reset_docs = r->train.reset_docs && o->reset_docs;
    o->lr.epoch_sequences = (double)loader_steps_per_epoch(&r->train) * r->G;  // sequences per epoch at this batch
    lr_settings_check(&o->lr);
}

// The models and the state: mlstm_init's for --seed, or the source checkpoint's. Returns
// whether this continues the run in its own directory (a resume of its latest.ckpt there).
static int run_state(Run *r, Source *src) {
    Options *o = &r->o;
    check_memory(&o->model, 0, "--hidden, --embed:");
    r->md = model_create(o, r->B);
    r->ev = r->VB != r->B ? model_create(o, r->VB) : r->md;
    size_t rows = r->B > r->VB ? r->B : r->VB;
    r->in = (uint8_t *)mallocCheck(rows * r->T);
    r->tg = (uint8_t *)mallocCheck(rows * r->T);
    r->rs = (uint8_t *)mallocCheck(rows * r->T);
    loss_scaler_init(&r->scaler, r->precision.fp16);
    r->rng = (uint64_t)o->seed ^ 0x5eed5eed5eed5eedULL;
    r->best = (Best){o->val_every > 0 ? CKPT_BEST_BY_VAL : CKPT_BEST_BY_TRAIN, INFINITY, -1, 0};
    r->run_id = ckpt_run_identity((const uint8_t *)r->record.text, r->record.bytes, &o->model, r->G);
    r->ckpt_version = CKPT_VERSION;
    int continuing = 0;
    if (o->resume) {
        run_resume(r, src->f, src->path, &src->hd);
        run_dir_of(src->path, r->resumed_dir);
        if (!flag_given(o, "out") && r->resumed_dir[0]) o->out = r->resumed_dir;  // continue in the run's own directory
        continuing = r->resumed_dir[0] && same_file(r->resumed_dir, o->out);
        if (continuing) run_id_continued(&r->run_id, &r->ckpt_version, src->path, &src->hd, src->record);
    }
    loss_scaler_cap(&r->scaler, r->precision.max_loss_scale);  // a resumed one too (the CPU trainer's may hold 2^16)
    if (o->init_from) run_init_weights(r, src->f, src->path, &src->hd);
    return continuing;
}

// libgomp ends a program whose threads cannot start with its one line ("libgomp: Thread
// creation failed: ...") and exit(1), as for a bug; it is a limit of the machine (ulimit -v,
// a process limit, OMP_STACKSIZE) for the user to change, exit 2 as util.h's errors are: this
// exit handler, armed while run_start starts the threads, changes the status.
static volatile sig_atomic_t threads_starting = 0;
static void threads_start_failed(void) {
    if (!threads_starting) return;
    fflush(stdout);
    _exit(EXIT_BAD_INPUT);
}

static void run_start(Run *r, int argc, char **argv) {
    memset(r, 0, sizeof *r);
    std_fds_open();
    file_size_limit_as_error();
    dist_init(&argc, &argv);
    stop_requested = 0;
    memset(&first_signal_at, 0, sizeof first_signal_at);
    Source src;
    memset(&src, 0, sizeof src);
    run_options(r, &src, argc, argv);
    run_data(r, &src);
    int continuing = run_state(r, &src);
    r->resumed_record = src.record;
    struct stat as_read;  // the checkpoint read, still open, so its inode cannot have become another file's
    if (src.f && fstat(fileno(src.f), &as_read) != 0) fail("%s: %s", src.path, strerror(errno));
    // the run directory last of what can fail at start-up, so a refused start leaves no
    // file behind, and still before the first step, so a bad --out costs no training.
    // Every rank gets here first: one whose host lacks a shard or the checkpoint has failed
    // naming its host and the path, and the job ends before rank 0 creates a file. The
    // signals are caught from here: a closed stdout or a signal while the settings print
    // stops the run after its first step, not before it with a directory that holds only a log.
    signals_catch();
    // The OpenMP threads are started here, while nothing is on disk: where they cannot be
    // (an OMP_STACKSIZE beyond the address space, a memory or process limit), libgomp ends
    // the program now, saying so, and not at the first step with a run directory half made.
    static int at_exit_set = 0;
    if (!at_exit_set++) atexit(threads_start_failed);
    volatile int threads_started = 0;  // (volatile: GCC drops an empty parallel region)
    threads_starting = 1;
    #pragma omp parallel
    threads_started = 1;
    threads_starting = 0;
    (void)threads_started;
    dist_barrier();
    if (rank == 0)
        run_dir_open(&r->dir, &r->o, continuing, r->run_id, r->data_step, r->o.resume ? src.path : NULL,
                     src.f ? &as_read : NULL, &r->train_s, &r->val_s);
    if (src.f) fclose(src.f);
    best_from_disk(r, continuing);
    r->val_owed = dist_bcast1(rank == 0 ? r->dir.val_owed : 0) != 0;
    if (rank == 0) print_settings(r);
    r->start_step = r->data_step;
    r->saved_step = r->o.resume ? r->data_step : -1;
    r->t_start = now_seconds();
}

// ----------------------------------------------------------------------------
// Guards: a diverged run stops unsaved, and a resume makes up the validation it owes.

// A diverged run's last line: the loss, and which checkpoints keep which step.
static void fail_diverged(const Run *r, const char *what, double loss) {
    char kept[9000], value[200];
    int n = 0;
    if (r->dir.replacing) snprintf(kept, sizeof kept, "no checkpoint written; the earlier run in %s stays", r->o.out);
    else snprintf(kept, sizeof kept, "no checkpoint written; %s keeps this run's log, which a new run there replaces "
                  "with --overwrite", r->o.out);
    if (r->saved_step >= 0) n = snprintf(kept, sizeof kept, "%s keeps step %ld", r->dir.latest, r->saved_step);
    if (r->best.step >= 0)
        snprintf(kept + n, sizeof kept - (size_t)n, "%s%s keeps step %ld (%s %.4f bits per character)", n ? ", " : "",
                 r->dir.best, r->best.step, best_by_name(r->best.by), r->best.score / M_LN2);
    // inf or NaN: weights already blown apart, whose loss has no number to show
    if (isfinite(loss))
        snprintf(value, sizeof value, "%g nats (%g bits per character; a uniform model's is 8)", loss, loss / M_LN2);
    else snprintf(value, sizeof value, "%s (the weights hold inf or NaN)", isnan(loss) ? "NaN" : "infinite");
    fail("step %ld: %s is %s: the model has diverged; stopping without saving it; %s (try a lower --lr)", r->data_step,
         what, value, kept);
}

// The loss of the current weights on the next training batch, from a zero state (forward
// only, the training state untouched): what a checkpoint about to be written is checked by
// when no validation just measured it. Weights sent to 1e30 by one update still give a
// finite gradient norm before it; their forward does not.
static double probe_loss(Run *r) {
    loader_batch(&r->train, r->data_step, r->in, r->tg, r->rs);
    return dist_sum1(model_eval(r->md, r->in, r->tg, r->rs, 1)) / world;
}

static double validate_and_sample(Run *r, int *val_cut);  // (train.h's loop)

// The validation a resume owes its run (Run.val_owed) and the sample after it, as after_step
// would have run them at the checkpoint's step, then latest.ckpt again, now with the score a
// validated step's checkpoint holds: an interrupted run ends as the uninterrupted one does.
static void validation_made_up(Run *r) {
    int val_cut;
    double vl = validate_and_sample(r, &val_cut);
    stop_if_stdout_closed(r->data_step);
    r->stop = stop_agreed();
    if (val_cut) {
        if (rank == 0) printf("stopped at step %ld; continue with --resume %s\n", r->data_step, r->o.out);
        return;
    }
    run_save(r, r->dir.latest, r->best.by == CKPT_BEST_BY_VAL ? vl : loss_moving_mean(&r->best, r->data_step));
    if (rank == 0) {
        printf("step %6ld | checkpoint %s\n", r->data_step, r->dir.latest);
        fflush(stdout);
    }
    if (r->stop && rank == 0 && r->data_step < r->o.steps)
        printf("stopped at step %ld; continue with --resume %s\n", r->data_step, r->o.out);
}

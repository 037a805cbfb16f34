// generate: text from a checkpoint, one byte at a time, streamed to stdout.
//
//   build/generate out --prompt "This movie" --length 300 --temperature 0.8 --top-p 0.95
//
// The checkpoint is a file, or a run directory (out/ above): its best model, DIR/best.ckpt.
// The prompt's bytes are echoed exactly and fed to the model, then --length bytes are
// drawn by mlstm.h's sample_byte and fed back. Generation runs one row from a zero
// state, and zeroes it again before each '\n' it reads, as the trainer does on framed
// data ('\n' starts a document; data.h, loader_batch): each review is read from a zero
// state. --no-reset-docs keeps the state instead, for a model trained that way. An
// empty prompt starts from '\n' (not echoed); --carried-state starts from row 0 of the
// state the checkpoint carries instead of zero. Any global batch G the checkpoint was
// trained at works; the Adam moments are not read.
//
// Speed. Weight norm is applied once at load, in place of the directions V (not needed
// after). A character is then five matrix-vector products and the cell, about
// 5H^2 + 5HD + 256H multiply-adds: at H = 4096, 86M of them over 345 MB of FP32 weights,
// which are too big for any cache, so the step is bound by memory bandwidth: every
// weight is read once per character, the rows split over the threads. Four rows at a
// time share each load of the input vector and keep four independent sums (the
// compiler vectorises each; no machine-specific code). The cell is fast.h's, the CPU
// trainer's (libm's exp and tanh cost a quarter of the time at H = 256). Each output is
// summed by one thread in a fixed order: the text does not depend on --threads, and each
// value equals mlstm_forward's up to the order of FP32 sums and the few ulp of fast.h's
// exp and tanh (test_generate checks both).
#include "fast.h"  // defines: fast_cell_forward and via it mlstm.h's MlstmConfig, weightnorm_forward, sample_byte
#include "harness/checkpoint.h"  // defines: checkpoint_header, checkpoint_open, checkpoint_read (the model to run)
#include <float.h>
#include <limits.h>
#include <time.h>

typedef struct {
    MlstmConfig cfg;
    real *params;   // (nparams,) as in the checkpoint, the four cell matrices as effective weights
    ParamTable p;   // p.t[P_WX] etc.: W_x, W_h, W_mx, W_mh hold g V / ||V|| after gen_load
    real *vecs;        // one buffer holding the vectors below
    real *h, *hn, *c;  // (H,) state in, state out (swapped after each step), cell (updated in place)
    real *z;           // (4H,) e W_x^T + b, then z, then the gates i, f, o, u
    real *mx, *mh, *mt;  // (H,) e W_mx^T, h W_mh^T, their product m
    real *logits;      // (V,) W_out h + b_out
    int reset_docs;    // zero h, c before reading '\n' (default 1)
} Gen;

// Reads the weights (and, with carried_state, row 0 of the carried h, c) from f, the
// checkpoint that checkpoint_open verified (its sizes within harness/checkpoint.h's MAX_HIDDEN and
// MAX_EMBED): the bytes checked are the bytes read, whatever is put at the path
// meanwhile. Any problem is one line naming the file, exit 2.
static void gen_read(Gen *g, FILE *f, const char *path, CkptHeader hd, int carried_state) {
    memset(g, 0, sizeof *g);
    g->cfg = hd.cfg;
    g->reset_docs = 1;
    int H = g->cfg.H;
    g->params = mlstm_alloc(hd.nparams);
    param_table(&g->p, &g->cfg, g->params);
    g->vecs = mlstm_alloc((size_t)11 * H + 256);
    g->h = g->vecs, g->hn = g->h + H, g->c = g->hn + H, g->z = g->c + H;
    g->mx = g->z + 4 * (size_t)H, g->mh = g->mx + H, g->mt = g->mh + H, g->logits = g->mt + H;
    if (fseeko(f, CKPT_HEADER_BYTES, SEEK_SET) != 0) fail("cannot read checkpoint %s", path);
    ckpt_read_f32(f, g->params, hd.nparams);
    if (carried_state) {  // after the weights and both Adam moments: h (G,H), then c (G,H)
        off_t at_h = CKPT_HEADER_BYTES + (off_t)12 * hd.nparams, at_c = at_h + (off_t)4 * hd.st.G * H;
        if (fseeko(f, at_h, SEEK_SET) != 0) fail("cannot read checkpoint %s", path);
        ckpt_read_f32(f, g->h, H);
        if (fseeko(f, at_c, SEEK_SET) != 0) fail("cannot read checkpoint %s", path);
        ckpt_read_f32(f, g->c, H);
    }
    // NaN/Inf weights (a diverged run) would only give NaN logits: refuse them here, by name
    for (int i = 0; i < NPARAM; i++)
        for (size_t k = 0; k < g->p.n[i]; k++)
            if (!(fabs(g->p.t[i][k]) <= FLT_MAX))
                fail("checkpoint %s: %s[%zu] is %g; the model diverged (use an earlier checkpoint)", path,
                     param_names[i], k, (double)g->p.t[i][k]);
    for (int k = 0; k < H && carried_state; k++)
        if (!(fabs(g->h[k]) <= FLT_MAX && fabs(g->c[k]) <= FLT_MAX))
            fail("checkpoint %s: the carried state of row 0 holds NaN or Inf", path);
    if (g->cfg.wnorm) {  // W = g V / ||V||, once, over V itself (each element is read, then written)
        WnMat wn[NWN];
        weightnorm_mats(&g->cfg, wn);
        real *norms = mlstm_alloc(weightnorm_rows(&g->cfg));
        for (int k = 0; k < NWN; k++) {
            real *W = g->p.t[wn[k].param];
            weightnorm_forward(W, norms + wn[k].norm_offset, W, g->p.t[wn[k].gain], (int)wn[k].rows, (int)wn[k].cols);
            for (size_t i = 0; i < wn[k].rows * wn[k].cols; i++)
                if (!(fabs(W[i]) <= FLT_MAX))
                    fail("checkpoint %s: row %zu of %s has norm 0 or overflows, so weight norm is undefined", path,
                         i / wn[k].cols, param_names[wn[k].param]);
        }
        free(norms);
    }
}
// path: a checkpoint file, or a run directory for its best.ckpt (checkpoint_file).
static void gen_load(Gen *g, const char *path_given, int carried_state) {
    char resolved[4200];
    const char *path = checkpoint_file(path_given, resolved, sizeof resolved);
    CkptHeader hd;
    FILE *f = checkpoint_open(path, &hd);  // a regular file; magic, version, sizes, length and checksum
    gen_read(g, f, path, hd, carried_state);
    fclose(f);
}
static void gen_free(Gen *g) {
    free(g->params);
    free(g->vecs);
    memset(g, 0, sizeof *g);
}

// out[0..3] = w[0..3] . x, each a dot product of length K. Four independent sums hide
// the latency of the multiply-adds, and each load of x serves four rows.
static inline void dot4(const real *const w[4], const real *x, int K, real out[4]) {
    const real *w0 = w[0], *w1 = w[1], *w2 = w[2], *w3 = w[3];
    real a0 = 0, a1 = 0, a2 = 0, a3 = 0;
    #pragma omp simd reduction(+ : a0, a1, a2, a3)
    for (int k = 0; k < K; k++) {
        a0 += w0[k] * x[k];
        a1 += w1[k] * x[k];
        a2 += w2[k] * x[k];
        a3 += w3[k] * x[k];
    }
    out[0] = a0, out[1] = a1, out[2] = a2, out[3] = a3;
}

// y (R,) = W (R,K) x (K,) [+ bias (R,)], the bias added after each sum as matmul_nt does.
// Rows in groups of four split over the threads of the enclosing parallel region; no
// barrier at the end (the caller places them).
static inline void gemv(real *y, const real *W, const real *x, const real *bias, int R, int K) {
    #pragma omp for schedule(static) nowait
    for (int r0 = 0; r0 < R; r0 += 4) {
        int n = R - r0 < 4 ? R - r0 : 4;
        const real *w[4];
        real a[4];
        for (int i = 0; i < 4; i++) w[i] = W + (size_t)(r0 + (i < n ? i : 0)) * K;  // a short last group repeats a row
        dot4(w, x, K, a);
        for (int i = 0; i < n; i++) y[r0 + i] = a[i] + (bias ? bias[r0 + i] : 0);
    }
}

// One character: the model's equations (mlstm.h, above mlstm_forward) for one row.
// Reads byte x and the state h, c; leaves the new state in h, c and the logits.
static void gen_step(Gen *g, int x) {
    const int D = g->cfg.D, H = g->cfg.H, V = g->cfg.V;
    if (g->reset_docs && x == '\n') {  // a document starts: mlstm_forward's reset
        memset(g->h, 0, sizeof(real) * H);
        memset(g->c, 0, sizeof(real) * H);
    }
    const real *e = g->p.t[P_E] + (size_t)x * D, *Wh = g->p.t[P_WH];
    #pragma omp parallel
    {
        gemv(g->z, g->p.t[P_WX], e, g->p.t[P_B], 4 * H, D);  // e W_x^T + b       (4H,)
        gemv(g->mx, g->p.t[P_WMX], e, NULL, H, D);            // e W_mx^T          (H,)
        gemv(g->mh, g->p.t[P_WMH], g->h, NULL, H, H);         // h_{t-1} W_mh^T    (H,)
        #pragma omp barrier
        #pragma omp for schedule(static)
        for (int j = 0; j < H; j++) g->mt[j] = g->mx[j] * g->mh[j];  // m_t
        // z = e W_x^T + b + m_t W_h^T and the cell, unit by unit: unit j needs the rows
        // j, H+j, 2H+j, 3H+j of W_h (its gates i, f, o, u) and nothing of other units
        #pragma omp for schedule(static)
        for (int j = 0; j < H; j++) {
            const real *w[4] = {Wh + (size_t)j * H, Wh + (size_t)(H + j) * H, Wh + (size_t)(2 * H + j) * H,
                                Wh + (size_t)(3 * H + j) * H};
            real a[4];
            dot4(w, g->mt, H, a);
            for (int q = 0; q < 4; q++) g->z[(size_t)q * H + j] += a[q];
            g->c[j] = fast_cell_forward(g->z + j, H, g->c[j], &g->hn[j]);  // inline exp, tanh: no libm calls
        }
        gemv(g->logits, g->p.t[P_WOUT], g->hn, g->p.t[P_BOUT], V, H);  // h_t W_out^T + b_out   (V,)
    }
    real *t = g->h;
    g->h = g->hn;
    g->hn = t;
}

#ifndef GENERATE_NO_MAIN  // test/test_generate.c includes this file and has its own main
static double gen_seconds(clockid_t clock) {  // CLOCK_MONOTONIC: wall; CLOCK_PROCESS_CPUTIME_ID: all threads' CPU
    struct timespec ts;
    clock_gettime(clock, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

typedef struct { const char *name, *arg, *help; } GenFlag;
static const GenFlag gen_flags[] = {
    {"prompt", "TEXT", "the text to continue, echoed exactly (default: none; the model starts from '\\n')"},
    {"length", "N", "bytes to generate after the prompt (default 500)"},
    {"temperature", "X", "softmax temperature, 0 = always the most likely byte (default 0.8)"},
    {"top-k", "N", "draw only among the N most likely bytes, 0 = all (default 0)"},
    {"top-p", "X", "then only among the fewest most likely bytes whose probability reaches X\n"
                   "                       (nucleus sampling), 1 = all (default 1)"},
    {"seed", "N", "seed of the draws: the same seed, the same text (default 1)"},
    {"carried-state", NULL, "start from row 0 of the state the checkpoint carries (default: zero, a document start)"},
    {"no-reset-docs", NULL, "keep the state at '\\n' (default: zero it, as train does at document starts)"},
    {"threads", "N", "OpenMP threads (default: all cores); the text does not depend on it"},
    {"help", NULL, "this text"},
};
enum { GEN_NFLAGS = sizeof gen_flags / sizeof gen_flags[0] };

static void gen_usage(FILE *f, const char *prog) {
    fprintf(f, "usage: %s CHECKPOINT [flags]\n\nCHECKPOINT: a checkpoint file, or a run directory (its best model, "
               "DIR/" RUN_BEST_CKPT ")\n\n", prog);
    for (int i = 0; i < GEN_NFLAGS; i++) {
        char lhs[64];
        snprintf(lhs, sizeof lhs, "--%s%s%s", gen_flags[i].name, gen_flags[i].arg ? " " : "",
                 gen_flags[i].arg ? gen_flags[i].arg : "");
        fprintf(f, "  %-20s %s\n", lhs, gen_flags[i].help);
    }
    fprintf(f, "\nThe prompt and the generated bytes go to stdout, nothing else (a newline is added\n"
               "at the end only when stdout is a terminal); the model and the speed go to stderr.\n");
}

int main(int argc, char **argv) {
    std_fds_open();
    file_size_limit_as_error();
    openmp_prefer_passive_wait(argv);  // util.h: spinning threads starve each other on shared cores
    const char *prompt = "", *path = NULL;
    long long length = 500, threads = 0;
    uint64_t seed = 1;
    int carried_state = 0, reset_docs = 1;
    SamplerConfig sc = {0.8, 0, 1.0};
    int k = 1, end_of_flags = 0;
    for (CliFlag c; k < argc; k++) {
        CliWord w = end_of_flags ? CLI_ARGUMENT : cli_word(argv[k], &c);
        if (w == CLI_END_OF_FLAGS) end_of_flags = 1;
        if (w == CLI_END_OF_FLAGS) continue;
        if (w == CLI_SINGLE_DASH) fail("unknown flag %s (flags start with two dashes; see --help)", argv[k]);
        if (w == CLI_ARGUMENT) {
            if (path) fail("unexpected argument \"%s\" after the checkpoint %s", argv[k], path);
            path = argv[k];
            continue;
        }
        int i = 0;
        while (i < GEN_NFLAGS && !cli_is(&c, gen_flags[i].name)) i++;
        if (i == GEN_NFLAGS) fail("unknown flag --%.*s (see --help)", (int)c.len, c.name);
        const char *name = gen_flags[i].name, *v = c.value;
        char dashed[64];
        snprintf(dashed, sizeof dashed, "--%s", name);
        if (gen_flags[i].arg && !v && k + 1 >= argc) fail("--%s needs a value (see --help)", name);
        if (gen_flags[i].arg && !v) v = argv[++k];
        if (!gen_flags[i].arg && v) fail("--%s takes no value, got \"%s\"", name, argv[k]);
        if (!strcmp(name, "help")) {
            gen_usage(stdout, argv[0]);
            return 0;
        }
        if (!strcmp(name, "prompt")) prompt = v;
        else if (!strcmp(name, "length")) length = parse_whole(dashed, v, 0, (long long)1 << 40);
        else if (!strcmp(name, "temperature")) sc.temperature = parse_real(dashed, v, 0, 1e30);
        else if (!strcmp(name, "top-k")) sc.top_k = (int)parse_whole(dashed, v, 0, 256);
        else if (!strcmp(name, "top-p")) {
            sc.top_p = parse_real(dashed, v, 0, 1);
            if (sc.top_p == 0) fail("--top-p: must be positive (1 = off), got %s", v);
        } else if (!strcmp(name, "seed")) seed = (uint64_t)parse_whole(dashed, v, 0, LLONG_MAX);
        else if (!strcmp(name, "carried-state")) carried_state = 1;
        else if (!strcmp(name, "no-reset-docs")) reset_docs = 0;
        else if (!strcmp(name, "threads")) threads = parse_whole(dashed, v, 1, MAX_THREADS);
    }
    if (!path) fail("no checkpoint given (usage: %s CHECKPOINT [flags]; see --help)", argv[0]);
    char resolved[4200];
    path = checkpoint_file(path, resolved, sizeof resolved);  // a run directory: its best.ckpt, named as such
#ifdef _OPENMP
    if (threads) omp_set_num_threads((int)threads);
    int nthreads = omp_get_max_threads();
#else
    int nthreads = 1;
#endif

    double t0 = gen_seconds(CLOCK_MONOTONIC);
    Gen g;
    gen_load(&g, path, carried_state);
    g.reset_docs = reset_docs;
    fprintf(stderr, "%s: mLSTM D=%d H=%d, weight norm %s; loaded in %.1f s\n", path, g.cfg.D, g.cfg.H,
            g.cfg.wnorm ? "on" : "off", gen_seconds(CLOCK_MONOTONIC) - t0);
    uint64_t rng = seed;
    size_t np = strlen(prompt);
    if (fwrite(prompt, 1, np, stdout) != np || fflush(stdout) != 0) fail("cannot write to stdout: %s", strerror(errno));
    int x = np ? (uint8_t)prompt[0] : '\n';
    double t1 = gen_seconds(CLOCK_MONOTONIC), cpu1 = gen_seconds(CLOCK_PROCESS_CPUTIME_ID);
    long long steps = 0;
    for (size_t i = 1; i < np; i++, steps++) {  // read the rest of the prompt
        gen_step(&g, x);
        x = (uint8_t)prompt[i];
    }
    for (long long n = 0; n < length; n++, steps++) {  // then draw each byte and feed it back
        gen_step(&g, x);
        x = sample_byte(g.logits, g.cfg.V, sc, &rng);
        if (x < 0)
            fail("checkpoint %s: the logits after %lld bytes are NaN or Inf (the weights overflow FP32)", path,
                 steps + 1);
        if (putchar(x) == EOF || fflush(stdout) != 0) fail("cannot write to stdout: %s", strerror(errno));
    }
    if (isatty(fileno(stdout))) putchar('\n');
    if (fflush(stdout) != 0) fail("cannot write to stdout: %s", strerror(errno));
    double dt = gen_seconds(CLOCK_MONOTONIC) - t1, cpu = gen_seconds(CLOCK_PROCESS_CPUTIME_ID) - cpu1;
    fprintf(stderr, "%lld characters (prompt and generated) in %.2f s, %.2f CPU-s: %.1f chars/s, %d threads\n", steps,
            dt, cpu, dt > 0 ? steps / dt : 0, nthreads);
    gen_free(&g);
    return 0;
}
#endif

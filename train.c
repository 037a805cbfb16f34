// train.c: the CPU trainer. The CPU backend of train.h's contract on the reference
// model of mlstm.h, and main; train.h holds the options, data, loop and files.
// Optionally data-parallel through MPI (mpirun -np N ./train).
//
//   ./train                                  built-in corpus, default small model
//   ./train --train data/ --hidden 1024      shards written by build/prepare
//   mpirun -np 2 ./train --batch 16          2 ranks x 16 rows = 32 rows
#include "train.h"  // defines: train_main, the model_* contract, Options, and via it mlstm.h, data.h, schedule.h
#include "fast.h"   // defines: fast_forward, fast_backward, FastPacks: the fast path this trainer runs

// ----------------------------------------------------------------------------
// The CPU backend: mlstm.h's model is both the computation and the host copy. The
// computation takes fast.h's path (gemm.h's matmuls, a vectorised cell); mlstm.h's
// plain mlstm_forward and mlstm_backward are the reference test_gemm checks it against.

struct Model {
    Mlstm m;                    // the model, its gradients and activations
    FastPacks packs;            // W_h and W_mh packed for fast.h's time loops
    int B, T;
    real *train_h, *train_c;    // (B,H) carried training state
    real *val_h, *val_c;        // (B,H) validation state
};

// The products' precision: FP32, or with --bf16 BF16 on AMX-BF16's tiles where the CPU and kernel
// allow them, else on AVX512-BF16, else in its emulation (AVX512-BF16's bits) on a CPU without
// either. AMX sums a product's terms in another order than AVX512-BF16 (gemm.h): the kernel is the
// machine's, as FP32's fused multiply-adds are, unless --bf16-kernel names one; the settings table
// says which one ran.
static GemmPrecision model_products(const Options *o) {
    if (!o->bf16) return GEMM_FP32;
    switch ((Bf16Kernel)o->bf16_kernel) {
    case BF16_AMX:
        if (!gemm_bf16_amx_supported())
            fail("--bf16-kernel amx: this CPU or kernel gives no AMX-BF16 tiles (amx-emulated gives their bits)");
        return GEMM_BF16_AMX;
    case BF16_AVX512:
        if (!gemm_bf16_native_supported())
            fail("--bf16-kernel avx512bf16: this CPU lacks AVX512-BF16 (avx512bf16-emulated gives its bits)");
        return GEMM_BF16_NATIVE;
    case BF16_AMX_EMULATED: return GEMM_BF16_AMX_EMULATED;
    case BF16_AVX512_EMULATED: return GEMM_BF16_EMULATED;
    case BF16_AUTO: break;
    }
    return gemm_bf16_amx_supported()     ? GEMM_BF16_AMX
           : gemm_bf16_native_supported() ? GEMM_BF16_NATIVE
                                          : GEMM_BF16_EMULATED;
}

static Model *model_create(const Options *o, int B) {
    const MlstmConfig cfg = o->model;
    const int T = o->T;
    // activations of mlstm_build (inputs, gates, products, states, probabilities and
    // their gradients: about 2D + 13H + V values per character) and the four states
    double bt = (double)B * T, acts = bt * (2.0 * cfg.D + 13.0 * cfg.H + cfg.V) + 6.0 * B * cfg.H;
    check_memory(&cfg, acts * sizeof(real) + bt * sizeof(double), "--hidden, --batch x --seq-len:");
    Model *md = (Model *)mallocCheck(sizeof(Model));
    mlstm_build(&md->m, cfg, B, T);
    fast_packs_build(&md->packs, &cfg, model_products(o));
    mlstm_init(&md->m, (uint64_t)o->seed);
    md->B = B;
    md->T = T;
    size_t n = (size_t)B * cfg.H * sizeof(real);
    md->train_h = (real *)mallocCheck(n);
    md->train_c = (real *)mallocCheck(n);
    md->val_h = (real *)mallocCheck(n);
    md->val_c = (real *)mallocCheck(n);
    return md;
}
static void model_free(Model *md) {
    mlstm_free(&md->m);
    fast_packs_free(&md->packs);
    free(md->train_h);
    free(md->train_c);
    free(md->val_h);
    free(md->val_c);
    free(md);
}
// FP32 throughout, but for the products with --bf16. --fp16 runs the FP16 trainer's loss-scaling protocol (seed with
// S, check, skip and halve, unscale, grow) in FP32, so its checkpoints, skips and
// resume can be tested without a GPU. It does not simulate FP16's range: what
// overflows on a GPU are FP16 activation gradients this trainer does not have, so
// here only inf/NaN gradients (or --inject-overflow's S = inf) skip a step, and S grows to
// its ceiling (no cap).
static Precision model_precision(const Options *o) {
    Precision p;
    p.fp16 = o->fp16;
    p.max_loss_scale = INFINITY;
    const GemmPrecision products = model_products(o);
    snprintf(p.description, sizeof p.description, "%s%s",
             products == GEMM_FP32 ? "FP32"
             : products == GEMM_BF16_AMX ? "BF16 products (AMX-BF16), FP32 sums, master weights and the rest"
             : products == GEMM_BF16_NATIVE
                 ? "BF16 products (AVX512-BF16), FP32 sums, master weights and the rest"
             : products == GEMM_BF16_AMX_EMULATED
                 ? "BF16 products (AMX-BF16's bits, emulated), FP32 sums, master weights and the rest"
             : o->bf16_kernel == BF16_AVX512_EMULATED
                 ? "BF16 products (AVX512-BF16's bits, emulated), FP32 sums, master weights and the rest"
                 : "BF16 products (emulated: this CPU lacks AVX512-BF16), FP32 sums, master weights and the rest",
             o->fp16 ? ", with the FP16 trainer's dynamic loss scaling (FP16's range not simulated)" : "");
    if (products == GEMM_BF16_EMULATED && o->bf16_kernel == BF16_AUTO && rank == 0)
        fprintf(stderr, "warning: --bf16: this CPU lacks AVX512-BF16; the products run in a scalar emulation of it "
                        "(the same bits, many times slower)\n");
    return p;
}
static Backend model_backend(void) { return BACKEND_CPU; }

// On the CPU the host views are the model itself.
static Mlstm *model_host(Model *md) { return &md->m; }
static void model_state(Model *md, real **h, real **c) {
    *h = md->train_h;
    *c = md->train_c;
}
static void model_loaded(Model *md) { (void)md; }

// Steps 2-3 of doc/design.md, "The training step": forward from the carried state,
// backward seeded with the loss scale S. Returns this rank's mean loss; the
// gradients stay in the model.
static double model_step(Model *md, const uint8_t *in, const uint8_t *tg, const uint8_t *rs, double scale) {
    double loss = fast_forward(&md->m, &md->packs, in, tg, rs, md->train_h, md->train_c, md->B, md->T);
    fast_backward(&md->m, &md->packs, (real)scale);
    carry(&md->m, md->train_h, md->train_c);
    return loss;
}

// Step 4: all-reduce, the mean over ranks.
static void model_allreduce(Model *md) {
    if (world == 1) return;
    dist_sum(md->m.grads, md->m.nparams);
    for (size_t i = 0; i < md->m.nparams; i++) md->m.grads[i] /= world;
}

// Step 5: inf/NaN in the reduced gradients (the GPU's rule too, train.cu), and their norm,
// in one pass: the norm's sum of squares is in double, where no square of a finite float
// (at most 1.2e77) nor a sum of fewer than 1e231 of them overflows, so the norm is finite
// exactly when every gradient is.
static GradientCheck model_check(Model *md) {
    double norm = grad_norm(md->m.grads, md->m.nparams);
    int overflow = !(norm <= DBL_MAX);  // true for inf and NaN alike
    GradientCheck c = {overflow, overflow ? 0 : norm};
    return c;
}

// Step 7: unscale and clip (grad_factor, in FP32), then Adam: one pass over the weights, as
// train.cu's adam_kernel.
static void model_apply(Model *md, double grad_factor, double lr, long applied) {
    Mlstm *m = &md->m;
    AdamConfig a = adam_defaults;
    a.lr = lr;
    adam_update(m->params, m->grads, (real)grad_factor, m->adam_m, m->adam_v, m->nparams, a, applied);
}

// Validation: forward only, on the validation state (first = 1 zeroes it).
static double model_eval(Model *md, const uint8_t *in, const uint8_t *tg, const uint8_t *rs, int first) {
    if (first) {
        memset(md->val_h, 0, sizeof(real) * md->B * md->m.cfg.H);
        memset(md->val_c, 0, sizeof(real) * md->B * md->m.cfg.H);
    }
    double loss = fast_forward(&md->m, &md->packs, in, tg, rs, md->val_h, md->val_c, md->B, md->T);
    carry(&md->m, md->val_h, md->val_c);
    return loss;
}

int main(int argc, char **argv) {
    openmp_prefer_passive_wait(argv);  // process-level, so here and not in train_main
    return train_main(argc, argv);
}

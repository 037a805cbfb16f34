#!/usr/bin/env python3
"""The CPU baselines for train.c's speed (dev/bench/bench_cpu.sh runs them beside it).

  bench_torch.py sgemm --threads N     the BLAS's large-SGEMM rate (2048x4096 . 4096x1024)
  bench_torch.py step --hidden H --threads N
                                       the same mLSTM training step in PyTorch, written as
                                       a performance-aware user writes it
  --bf16                               the step under torch.autocast("cpu", bfloat16), the one
                                       line such a user adds for mixed precision (train.c's
                                       --bf16 is its peer); sgemm: the GEMM in bfloat16
  --compile                            step: the forward through torch.compile (Inductor fuses the
                                       cell's elementwise work; its compile, paid in the warm-up
                                       steps, is not timed)

The step (loss_and_state, train_step): weight norm applied once per step (not once
per time step); the input projections of all T steps as one product each, whose
per-step rows are taken once with unbind (indexing zx[t] inside the loop would make
autograd write a full-size zero gradient for every t and add them up: O(T^2) memory
traffic); addmm for the recurrent product; one sigmoid over the three gates; the
output layer over all T steps as one product; autograd for the backward; clipping
and Adam (fused or foreach where this PyTorch has it) under no_grad.
dev/test/test_bench_torch.py checks it against tools/mlstm_torch.py's reference model.

Both modes print which PyTorch and BLAS run: PyPI's x86 wheels link Intel MKL
(statically: BLAS_INFO=mkl, one OpenMP pool for PyTorch and MKL), Debian's
python3-torch calls the system libblas.so.3 (OpenBLAS with libopenblas0-pthread,
its own thread pool). Any other BLAS (Debian's reference libblas3, say) would make
a slow baseline that flatters train.c: the script stops and names it. With two
pools, `step` tries each split of the cores between them, prints every setup, and
ends with the best one.

    /usr/bin/python3 dev/bench/bench_torch.py step --hidden 256 --threads 2      # Debian's
    build/torch-venv/bin/python dev/bench/bench_torch.py step --hidden 256       # PyPI's (bench_cpu.sh makes it)
"""
import argparse, ctypes, os, re, sys, time
if "--compile" in sys.argv: os.environ["TORCH_USE_RTLD_GLOBAL"] = "1"  # before torch loads: inductor_vectorises
import torch
import torch.nn.functional as F

NAMES = ("E", "W_x", "g_x", "W_h", "g_h", "W_mx", "g_mx", "W_mh", "g_mh", "b", "W_out", "b_out")  # mlstm.h's order


def weight(v, g):
    """W[j,:] = g[j] v[j,:] / ||v[j,:]|| (weight norm, Salimans and Kingma 2016), or v without gains."""
    return v if g is None else g.unsqueeze(1) * v / v.norm(dim=1, keepdim=True)


def loss_and_state(P, x, y, h, c):
    """The model of mlstm.h (tools/mlstm_torch.py writes it from the equations) written for speed.
    P: {name: tensor} (mlstm.h's names); x, y: (B, T) int64 inputs and targets; h, c: (B, H) state.
    Returns the mean cross-entropy in nats and h_T, c_T."""
    B, T = x.shape
    D, H = P["E"].shape[1], P["W_h"].shape[1]
    Wx, Wh = weight(P["W_x"], P.get("g_x")), weight(P["W_h"], P.get("g_h"))
    Wmx, Wmh = weight(P["W_mx"], P.get("g_mx")), weight(P["W_mh"], P.get("g_mh"))
    e = F.embedding(x.t(), P["E"]).view(T * B, D)                       # time-major rows
    zx = torch.addmm(P["b"], e, Wx.t()).view(T, B, 4 * H).unbind(0)     # W_x e_t + b, all t in one product
    mx = torch.mm(e, Wmx.t()).view(T, B, H).unbind(0)                   # W_mx e_t; unbind: one backward node
    WhT, WmhT = Wh.t(), Wmh.t()
    hs = []
    for t in range(T):
        m = mx[t] * torch.mm(h, WmhT)                                   # m = (W_mx e) * (W_mh h)
        z = torch.addmm(zx[t], m, WhT)                                  # z = W_x e + W_h m + b
        gates, zu = z.split((3 * H, H), 1)
        i, f, o = torch.sigmoid(gates).chunk(3, 1)
        c = torch.addcmul(f * c, i, torch.tanh(zu))                     # c = f c + i tanh(z_u)
        h = o * torch.tanh(c)
        hs.append(h)
    logits = torch.addmm(P["b_out"], torch.stack(hs).view(T * B, H), P["W_out"].t())
    return F.cross_entropy(logits, y.t().reshape(T * B)), h, c


def init_params(D, H, seed=0):
    """Weights as mlstm.h draws them in kind (uniform +-1/sqrt(fan-in), gains = the rows' norms)."""
    torch.manual_seed(seed)
    uniform = lambda rows, cols: torch.empty(rows, cols).uniform_(-cols ** -0.5, cols ** -0.5)
    P = {"E": torch.randn(256, D), "W_x": uniform(4 * H, D), "W_h": uniform(4 * H, H), "W_mx": uniform(H, D),
         "W_mh": uniform(H, H), "b": torch.zeros(4 * H), "W_out": uniform(256, H), "b_out": torch.zeros(256)}
    for g, v in (("g_x", "W_x"), ("g_h", "W_h"), ("g_mx", "W_mx"), ("g_mh", "W_mh")):
        P[g] = P[v].norm(dim=1)
    return {n: torch.nn.Parameter(P[n]) for n in NAMES}


def adam(params, lr):
    """Adam with the fastest update this PyTorch offers on the CPU: fused (2.4 on), else foreach."""
    try:
        return torch.optim.Adam(params, lr=lr, fused=True)
    except (RuntimeError, TypeError):
        return torch.optim.Adam(params, lr=lr, foreach=True)


def train_step(P, opt, x, y, h, c, clip, bf16=False, forward=loss_and_state):
    """One step: loss, backward, clip the global gradient norm to clip, Adam. Returns loss, h_T, c_T detached.
    bf16: the forward under autocast to bfloat16 (the backward follows its dtypes; Adam and the weights FP32).
    forward: loss_and_state, or its torch.compile'd version."""
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        loss, h, c = forward(P, x, y, h, c)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    with torch.no_grad():
        torch.nn.utils.clip_grad_norm_(list(P.values()), clip)
        opt.step()
    return loss.detach(), h.detach(), c.detach()


# ---- which BLAS PyTorch calls
# OpenBLAS built with DYNAMIC_ARCH (Debian's) picks its kernels by the CPU's model number, and on a model it does not
# know it falls back to generic SSE3 ones, a fifth of the speed (dev/bench/cpu-perf.md, "The PyTorch baseline"). A
# performance-aware user sets OPENBLAS_CORETYPE to the newest kernels the CPU's flags allow; so does this script.
OPENBLAS_CORES = [("Cooperlake", {"avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_bf16"}),
                  ("SkylakeX", {"avx512f", "avx512bw", "avx512vl", "avx512dq"}),
                  ("Haswell", {"avx2", "fma"})]  # newest first: name, the flags its kernels use
OPENBLAS_RANK = {"sapphirerapids": 3, "cooperlake": 3, "skylakex": 2, "haswell": 1, "zen": 1}  # older: 0


def cpu_flags():
    try:
        with open("/proc/cpuinfo") as f:
            return set(next((l for l in f if l.startswith("flags")), ":").split(":", 1)[1].split())
    except OSError:
        return set()


def openblas_core(config):
    """The kernels OpenBLAS runs, from openblas_get_config(): the word before MAX_THREADS=, or '?'."""
    m = re.search(r"(\w+) MAX_THREADS=", config)
    return m.group(1) if m else "?"


def openblas_core_wanted(config, flags):
    """The OPENBLAS_CORETYPE a CPU with these flags should run when the library's own pick is older, else None
    (also None where OpenBLAS was built for one core, without DYNAMIC_ARCH: nothing to choose)."""
    if "DYNAMIC_ARCH" not in config.split():
        return None
    core = openblas_core(config).lower()
    for name, needs in OPENBLAS_CORES:
        if needs <= flags:
            return None if OPENBLAS_RANK.get(core, 0) >= OPENBLAS_RANK[name.lower()] else name
    return None


class Blas:
    """name ("MKL" or "OpenBLAS"), what (version and library, for the log) and the thread control."""

    def __init__(self):
        torch.ones(64, 64) @ torch.ones(64, 64)  # loads a dynamically linked BLAS
        config = torch.__config__.show()
        info = re.search(r"BLAS_INFO=(\w+)", config)
        self.lib = None
        if info and info.group(1) == "mkl":
            ver = re.search(r"Math Kernel Library Version ([^\n]*)", config)
            self.name, self.what = "MKL", "Intel MKL %s (BLAS_INFO=mkl, linked into PyTorch)" % (
                ver.group(1).strip() if ver else "of unknown version")
            return
        # a shared BLAS: the libraries mapped into this process, less NumPy's own bundled one
        mapped = sorted({l.split()[-1] for l in open("/proc/self/maps")
                         if ".so" in l and "blas" in l.lower() and "numpy" not in l and "cublas" not in l})
        openblas = [p for p in mapped if "openblas" in p.lower()]
        if not openblas:
            sys.exit("error: PyTorch's BLAS is neither MKL nor OpenBLAS (BLAS_INFO=%s; BLAS libraries mapped: %s): "
                     "a baseline on it would flatter train.c; apt-get install libopenblas0-pthread"
                     % (info.group(1) if info else "?", ", ".join(mapped) or "none"))
        path = ([p for p in openblas if "libopenblas" in os.path.basename(p)] or openblas)[0]
        self.lib = ctypes.CDLL(path)
        self.lib.openblas_get_config.restype = ctypes.c_char_p
        config = self.lib.openblas_get_config().decode()
        self.name, self.what = "OpenBLAS", "OpenBLAS %s (%s)" % (config, path)
        want = openblas_core_wanted(config, cpu_flags())
        if want and not os.environ.get("OPENBLAS_CORETYPE"):  # read as the library loads: run this script again
            print("bench_torch: OpenBLAS picked its %s kernels on this CPU, whose flags allow its %s kernels: running"
                  " again with OPENBLAS_CORETYPE=%s" % (openblas_core(config), want, want), file=sys.stderr, flush=True)
            os.execve(sys.executable, [sys.executable] + sys.argv, dict(os.environ, OPENBLAS_CORETYPE=want))
        if want:
            sys.exit("error: OpenBLAS runs its %s kernels with OPENBLAS_CORETYPE=%s on a CPU that allows %s's: a "
                     "slow baseline that would flatter train.c" % (openblas_core(config),
                                                                   os.environ["OPENBLAS_CORETYPE"], want))
        if os.environ.get("OPENBLAS_CORETYPE"):
            self.what += " OPENBLAS_CORETYPE=%s" % os.environ["OPENBLAS_CORETYPE"]

    def setups(self, n):
        """(intra-op, BLAS) thread counts to try on n cores: one of the pools gets all of them. MKL runs
        on PyTorch's own OpenMP pool (torch.set_num_threads sets both), so it has one setup."""
        if self.lib is None:
            return [(n, n)]
        return [(i, j) for i in range(1, n + 1) for j in range(1, n + 1) if max(i, j) == n]

    def set_threads(self, intra, blas):
        torch.set_num_threads(intra)
        if self.lib is None:
            return torch.get_num_threads(), torch.get_num_threads()
        self.lib.openblas_set_num_threads(blas)
        return torch.get_num_threads(), self.lib.openblas_get_num_threads()


def sgemm(a, blas):
    blas.set_threads(a.threads, a.threads)
    M, N, K = 2048, 1024, 4096
    dtype = torch.bfloat16 if a.bf16 else torch.float32
    x, w = torch.randn(M, K, dtype=dtype), torch.randn(K, N, dtype=dtype)
    y = torch.empty(M, N, dtype=dtype)
    torch.mm(x, w, out=y)
    best = 0
    for _ in range(a.repeats):
        t0 = time.perf_counter()
        torch.mm(x, w, out=y)
        best = max(best, 2 * M * N * K / (time.perf_counter() - t0) / 1e9)
    print(f"{'bf16gemm' if a.bf16 else 'sgemm'} {M}x{K}.{K}x{N} {blas.name} threads={a.threads}: {best:.1f} GFLOP/s "
          f"(best of {a.repeats})")


def step_rate(a, H, forward):
    """chars/s of the training step: the median step after two warm-up steps."""
    B, T = a.batch, a.seq_len
    P = init_params(a.embed, H)
    opt = adam(list(P.values()), 5e-4)
    data = torch.randint(0, 256, (B, (T + 1) * (a.steps + 3)))
    h = c = torch.zeros(B, H)
    times = []
    for s in range(a.steps + 2):
        x, y = data[:, s * T:(s + 1) * T], data[:, s * T + 1:(s + 1) * T + 1]
        t0 = time.perf_counter()
        _, h, c = train_step(P, opt, x, y, h, c, clip=1.0, bf16=a.bf16, forward=forward)
        if s >= 2: times.append(time.perf_counter() - t0)
    times.sort()
    return B * T / times[len(times) // 2]


def inductor_vectorises():
    """torch.compile's C++ kernels on the CPU call SLEEF's vector functions in libtorch without linking it, and
    are vectorised only where Inductor's probe (a small such library, dlopened in a child Python) loads. PyPI's
    2.15 loads libtorch's symbols locally, so on some machines (the AMX kind, 2026-12-05) the probe failed, every
    kernel came out scalar, and the compiled step ran at a fifth of its speed, a third of eager's. With
    TORCH_USE_RTLD_GLOBAL set before torch loads (at the top of this file; the child inherits it) the symbols
    are global and the kernels vectorised; a fresh kernel cache keeps scalar kernels of an earlier run from
    being reused. Without an ISA the baseline would be a weak one: stop."""
    import atexit, shutil, tempfile
    try:
        from torch._inductor.cpu_vec_isa import pick_vec_isa
    except ImportError:  # PyTorch before 2.4
        from torch._inductor.codecache import pick_vec_isa
    cache = tempfile.mkdtemp(prefix="bench_torch_inductor_")
    atexit.register(shutil.rmtree, cache, ignore_errors=True)
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = cache
    if not pick_vec_isa():
        sys.exit("error: torch.compile's Inductor finds no vector ISA on this CPU (torch._inductor.cpu_vec_isa: "
                 "its probe cannot build or load its test library), so its kernels would be scalar: a weak baseline")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("mode", choices=["sgemm", "step"])
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--embed", type=int, default=64)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--seq-len", type=int, default=64)
    p.add_argument("--steps", type=int, default=5, help="timed steps (the median is reported)")
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--bf16", action="store_true", help="step: under bfloat16 autocast; sgemm: in bfloat16")
    p.add_argument("--compile", action="store_true", help="step: the forward through torch.compile")
    a = p.parse_args()
    for flag in ("threads", "hidden", "embed", "batch", "seq_len", "steps", "repeats"):
        if getattr(a, flag) < 1: sys.exit("error: --%s must be positive" % flag.replace("_", "-"))
    blas = Blas()
    print(f"torch {torch.__version__} ({sys.executable}) BLAS: {blas.what}")
    if a.mode == "sgemm":
        return sgemm(a, blas)
    H, D = a.hidden, a.embed
    flops = 3 * 2 * (5 * H * D + 5 * H * H + 256 * H)                          # per char, as mlstm.h's flops_per_char
    if a.compile: inductor_vectorises()
    forward = torch.compile(loss_and_state) if a.compile else loss_and_state  # compiled at its first call
    best = None
    for intra, nb in blas.setups(a.threads):
        got = blas.set_threads(intra, nb)
        cps = step_rate(a, H, forward)
        print(f"  setup intra-op {got[0]}, {blas.name} {got[1]}: {cps:.0f} chars/s")
        if best is None or cps > best[0]: best = (cps, got)
    cps, (intra, nb) = best
    print(f"torch H={H} D={D} B={a.batch} T={a.seq_len} threads={a.threads}{' bf16-autocast' if a.bf16 else ''}"
          f"{' compile' if a.compile else ''} "
          f"best intra-op {intra} {blas.name} {nb}: "
          f"{cps:.0f} chars/s, {cps * flops / 1e9:.1f} GFLOP/s")


if __name__ == "__main__":
    main()

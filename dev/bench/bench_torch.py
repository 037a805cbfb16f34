#!/usr/bin/env python3
"""The CPU baselines for train.c's speed (dev/bench/bench_cpu.sh runs them beside it).

  bench_torch.py sgemm --threads N     the BLAS's large-SGEMM rate (2048x4096 . 4096x1024)
  bench_torch.py step --hidden H --threads N
                                       the same mLSTM training step in PyTorch, written as
                                       a performance-aware user writes it

The step: weight norm applied once per step (not once per time step), the input
projections of all T steps as one product, addmm for the recurrent product,
autograd for the rest, gradient clipping and Adam. PyTorch has two thread pools,
its intra-op pool and the BLAS's; `step` tries each split of the cores between
them, prints every setup, and ends with the best one. Both modes check that the
BLAS PyTorch calls is OpenBLAS (the library mapped into the process), print it,
and stop if it is not (Debian: apt-get install python3-torch libopenblas0-pthread).

    /usr/bin/python3 dev/bench/bench_torch.py step --hidden 256 --threads 2
"""
import argparse, ctypes, os, sys, time
import torch

def openblas():
    """The OpenBLAS library in this process, after a product has loaded it."""
    torch.ones(64, 64) @ torch.ones(64, 64)
    paths = sorted({l.split()[-1] for l in open("/proc/self/maps") if "openblas" in l.lower() and ".so" in l})
    libs = [p for p in paths if "libopenblas" in os.path.basename(p)] or paths
    if not libs:
        blas = sorted({l.split()[-1] for l in open("/proc/self/maps") if "blas" in l.lower() and ".so" in l})
        sys.exit("error: PyTorch does not run on OpenBLAS here (BLAS libraries mapped: %s); "
                 "apt-get install libopenblas0-pthread" % (", ".join(blas) or "none"))
    lib = ctypes.CDLL(libs[0])
    lib.openblas_get_config.restype = ctypes.c_char_p
    return lib, libs[0]

def set_threads(lib, intra, blas):
    torch.set_num_threads(intra)
    lib.openblas_set_num_threads(blas)
    return torch.get_num_threads(), lib.openblas_get_num_threads()

def sgemm(a, lib):
    set_threads(lib, 1, a.threads)
    M, N, K = 2048, 1024, 4096
    x, w = torch.randn(M, K), torch.randn(K, N)
    y = torch.empty(M, N)
    torch.mm(x, w, out=y)
    best = 0
    for _ in range(a.repeats):
        t0 = time.perf_counter()
        torch.mm(x, w, out=y)
        best = max(best, 2 * M * N * K / (time.perf_counter() - t0) / 1e9)
    print(f"sgemm {M}x{K}.{K}x{N} threads={a.threads}: {best:.1f} GFLOP/s (best of {a.repeats})")

def step_rate(a, H):
    """chars/s of the training step: the median step after two warm-up steps."""
    torch.manual_seed(0)
    D, B, T, V = a.embed, a.batch, a.seq_len, 256
    P = torch.nn.Parameter
    def uniform(rows, cols):
        return P(torch.empty(rows, cols).uniform_(-cols ** -0.5, cols ** -0.5))
    E = P(torch.randn(V, D))
    Vx, Vh, Vmx, Vmh = uniform(4 * H, D), uniform(4 * H, H), uniform(H, D), uniform(H, H)
    gains = [P(v.detach().norm(dim=1)) for v in (Vx, Vh, Vmx, Vmh)]
    b, Wout, bout = P(torch.zeros(4 * H)), uniform(V, H), P(torch.zeros(V))
    params = [E, Vx, Vh, Vmx, Vmh, b, Wout, bout] + gains
    opt = torch.optim.Adam(params, lr=5e-4)
    data = torch.randint(0, V, (B, (T + 1) * (a.steps + 3)))
    h = torch.zeros(B, H); c = torch.zeros(B, H)

    def step(s):
        nonlocal h, c
        x = data[:, s * T:(s + 1) * T]; y = data[:, s * T + 1:(s + 1) * T + 1]
        Wx, Wh, Wmx, Wmh = (g[:, None] * v / v.norm(dim=1, keepdim=True)        # weight norm, once per step
                            for v, g in zip((Vx, Vh, Vmx, Vmh), gains))
        e = E[x.t()]                                                            # (T, B, D)
        zx = torch.addmm(b, e.reshape(T * B, D), Wx.t()).view(T, B, 4 * H)      # all T steps at once
        mx = (e.reshape(T * B, D) @ Wmx.t()).view(T, B, H)
        WhT, WmhT = Wh.t(), Wmh.t()
        hh, cc, hs = h.detach(), c.detach(), []
        for t in range(T):
            m = mx[t] * (hh @ WmhT)                                             # m = (W_mx e) * (W_mh h)
            z = torch.addmm(zx[t], m, WhT)
            i, f, o, u = z.chunk(4, 1)
            cc = torch.sigmoid(f) * cc + torch.sigmoid(i) * torch.tanh(u)
            hh = torch.sigmoid(o) * torch.tanh(cc)
            hs.append(hh)
        logits = torch.addmm(bout, torch.stack(hs).view(T * B, H), Wout.t())
        loss = torch.nn.functional.cross_entropy(logits, y.t().reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        h, c = hh, cc

    step(0); step(1)
    times = []
    for s in range(2, a.steps + 2):
        t0 = time.perf_counter(); step(s); times.append(time.perf_counter() - t0)
    times.sort()
    return B * T / times[len(times) // 2]

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
    a = p.parse_args()
    if a.threads < 1 or a.hidden < 1 or a.steps < 1: sys.exit("error: --threads, --hidden and --steps must be positive")
    lib, path = openblas()
    print(f"torch {torch.__version__} on {path} ({lib.openblas_get_config().decode()})")
    if a.mode == "sgemm":
        return sgemm(a, lib)
    H, D = a.hidden, a.embed
    flops = 3 * 2 * (5 * H * D + 5 * H * H + 256 * H)                          # per char, as mlstm.h's flops_per_char
    # the ways to give the cores to the intra-op pool and OpenBLAS's: one of them gets all
    setups = [(i, j) for i in range(1, a.threads + 1) for j in range(1, a.threads + 1) if max(i, j) == a.threads]
    best = None
    for intra, blas in setups:
        got = set_threads(lib, intra, blas)
        cps = step_rate(a, H)
        print(f"  setup intra-op {got[0]}, OpenBLAS {got[1]}: {cps:.0f} chars/s")
        if best is None or cps > best[0]: best = (cps, got)
    cps, (intra, blas) = best
    print(f"torch H={H} D={D} B={a.batch} T={a.seq_len} threads={a.threads} best intra-op {intra} OpenBLAS {blas}: "
          f"{cps:.0f} chars/s, {cps * flops / 1e9:.1f} GFLOP/s")

if __name__ == "__main__":
    main()

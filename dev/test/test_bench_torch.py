#!/usr/bin/env python3
"""test_bench_torch.py: dev/bench/bench_torch.py's PyTorch baseline is the model of mlstm.h and is written
as a performance-aware user writes it.

(a) its loss_and_state gives tools/mlstm_torch.py's loss, final state and gradients (float64 against
    float64, and its float32 run against the float64 reference), and train_step leaves the clipped
    gradients of the reference;
(b) its autograd graph has no per-time-step index or slice nodes on a tensor: indexing zx[t] inside
    the time loop gives T SelectBackward nodes on zx, whose backward writes a full-size zero gradient
    for every t and adds it (O(T^2) memory traffic), a slowdown that would flatter train.c.

Needs PyTorch (Debian's python3-torch is enough): with this interpreter, $PYTHON, or /usr/bin/python3.
Without it the test says SKIPPED loudly; with REQUIRE_TORCH set (CI) that is a failure.
Run from the repository root (make test and make test-lab do). Ends with 'test_bench_torch: N passed, N failed'."""
import os
import re
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "test"))  # (harness.py)
sys.path.insert(0, os.path.join(ROOT, "tools"))
sys.path.insert(0, os.path.join(ROOT, "dev", "bench"))

from harness import check, summary  # noqa: E402


def finish():
    summary("test_bench_torch")


try:
    import torch
except ImportError:
    # python3 may be another interpreter than the one that has python3-torch (a pyenv, say): try that one once
    other = os.environ.get("PYTHON") or "/usr/bin/python3"
    if not os.environ.get("TEST_BENCH_TORCH_REEXEC") and os.path.realpath(other) != os.path.realpath(sys.executable) \
            and os.access(other, os.X_OK):
        os.environ["TEST_BENCH_TORCH_REEXEC"] = "1"
        os.execv(other, [other, os.path.abspath(__file__)])
    print("\n**** SKIPPED: no PyTorch in %s or %s ****\n**** (apt-get install python3-numpy python3-torch; "
          "CI sets REQUIRE_TORCH=1 and fails here) ****\n" % (sys.executable, other))
    check(not os.environ.get("REQUIRE_TORCH"), "REQUIRE_TORCH is unset, so a missing PyTorch may skip the test")
    finish()

try:
    import bench_torch
    import mlstm_torch
    bench_loss = bench_torch.loss_and_state
except (ImportError, AttributeError) as e:  # e.g. a bench_torch.py whose step is not a function of its inputs
    check(False, "dev/bench/bench_torch.py exposes loss_and_state and tools/mlstm_torch.py imports (%s)" % e)
    finish()


def tiny_case(dtype, D=5, H=7, B=3, T=6, seed=1):
    """Parameters with gains away from the rows' norms (weight norm matters), a carried-in state, bytes."""
    g = torch.Generator().manual_seed(seed)
    P = {n: p.detach().to(dtype) for n, p in bench_torch.init_params(D, H, seed).items()}
    for n in ("g_x", "g_h", "g_mx", "g_mh"):
        P[n] = P[n] * (1 + torch.rand(P[n].shape, generator=g, dtype=dtype))
    for n in ("b", "b_out"):
        P[n] = 0.2 * torch.randn(P[n].shape, generator=g, dtype=dtype)
    P = {n: p.requires_grad_() for n, p in P.items()}
    x = torch.randint(0, 256, (B, T), generator=g)
    y = torch.randint(0, 256, (B, T), generator=g)
    h = (0.5 * torch.randn(B, H, generator=g)).to(dtype)
    c = (0.5 * torch.randn(B, H, generator=g)).to(dtype)
    return P, x, y, h, c


def run(fn, P, x, y, h, c):
    for p in P.values(): p.grad = None
    loss, hT, cT = fn(P, x, y, h, c)
    loss.backward()
    return loss.item(), hT.detach(), cT.detach(), {n: p.grad.detach().clone() for n, p in P.items()}


def rel(a, b):
    """Normwise relative difference of a tensor (or float) a from the reference b."""
    a, b = torch.as_tensor(a, dtype=torch.float64), torch.as_tensor(b, dtype=torch.float64)
    return ((a - b).norm() / b.norm()).item()


def compare(tag, got, want, tol_loss, tol_grad):
    (l, h, c, g), (lr, hr, cr, gr) = got, want
    e = rel(l, lr)
    check(e <= tol_loss, "%s: loss %.9f vs reference %.9f: rel %.1e (tolerance %.0e)" % (tag, l, lr, e, tol_loss))
    e = max(rel(h, hr), rel(c, cr))
    check(e <= tol_grad, "%s: h_T, c_T: rel %.1e (tolerance %.0e)" % (tag, e, tol_grad))
    worst = max(gr, key=lambda n: rel(g[n], gr[n]))
    e = rel(g[worst], gr[worst])
    check(len(g) == len(gr) == 12 and e <= tol_grad,
          "%s: all 12 gradients, normwise: worst %s rel %.1e (tolerance %.0e)" % (tag, worst, e, tol_grad))


# ---- (a) the same model as the reference
P64, x, y, h, c = tiny_case(torch.float64)
ref = run(mlstm_torch.loss, P64, x, y, h, c)
# Both in float64: the same function evaluated in different orders, a few hundred operations deep
# (T=6 steps of products of length <= 4H = 28, a 256-way log-sum-exp): rounding ~1e-14; 1e-10 is
# four orders of margin and far below any modelling difference (a wrong gate, gain or bias moves 1e-2).
compare("float64", run(bench_loss, P64, x, y, h, c), ref, 1e-10, 1e-10)
# bench_torch in float32 (as it runs) against the float64 reference: u = 6e-8, each product of length
# K <= 28 errs by <= K u relative, and T = 6 recurrent steps (sigmoid, tanh: derivatives <= 1) add
# them up; the loss (a mean of B*T log-softmax terms) to ~T K u = 1e-5 at worst. Gradients go back
# through the same T steps plus the weight norm's division and the mean, and a normwise measure
# keeps small elements from dominating: 1e-4 (about 1700 u).
P32 = {n: p.detach().float().requires_grad_() for n, p in P64.items()}
compare("float32 vs float64", run(bench_loss, P32, x, y, h.float(), c.float()), ref, 1e-5, 1e-4)

# train_step: the gradients it leaves are the reference's scaled to the clip norm (clipping active
# here: the clip is a tenth of the norm; clip_grad_norm_ divides by the norm + 1e-6, as documented),
# and Adam moved every parameter tensor
gnorm = torch.cat([g.flatten() for g in ref[3].values()]).norm().item()
scale = 0.1 * gnorm / (gnorm + 1e-6)
Pstep = {n: torch.nn.Parameter(p.detach().clone()) for n, p in P64.items()}
opt = bench_torch.adam(list(Pstep.values()), 1e-3)
loss, hT, _ = bench_torch.train_step(Pstep, opt, x, y, h, c, clip=0.1 * gnorm)
e = max(rel(Pstep[n].grad, scale * ref[3][n]) for n in ref[3])
check(abs(loss.item() - ref[0]) <= 1e-10 * ref[0] and e <= 1e-10 and not hT.requires_grad,
      "train_step: loss as the reference, gradients = reference x clip / norm (worst rel %.1e), state detached" % e)
check(all(not torch.equal(Pstep[n].detach(), P64[n].detach()) for n in P64), "train_step: Adam updated all 12 tensors")

# ---- (b) no per-time-step index or slice nodes on one tensor
INDEX_NODE = re.compile(r"^(Select|Slice|Index|IndexSelect|AsStrided|Narrow|Gather|UnsafeSelect)Backward")


def index_consumers(loss):
    """{node name: how many index/slice nodes take a piece of that node's output}, over loss's graph."""
    seen, todo, count = set(), [loss.grad_fn], {}
    while todo:
        node = todo.pop()
        if node is None or node in seen: continue
        seen.add(node)
        for nxt, _ in node.next_functions:
            if nxt is None: continue
            if INDEX_NODE.match(node.name()):
                key = "%s@%x" % (nxt.name(), id(nxt))
                count[key] = count.get(key, 0) + 1
            todo.append(nxt)
    return count


T = 16
P64, x, y, h, c = tiny_case(torch.float64, T=T)
# the walker must see the defect it looks for, in this PyTorch: a sequence indexed per step
seq = torch.randn(T, 3, 4, dtype=torch.float64, requires_grad=True) * 2
worst = max(index_consumers(sum(seq[t].sum() for t in range(T))).values())
check(worst == T, "the graph walker finds %d index nodes on a (T=%d, B, H) tensor indexed per step" % (worst, T))
loss, _, _ = bench_loss(P64, x, y, h, c)
count = index_consumers(loss)
worst = max(count, key=count.get) if count else "none"
# a per-step index makes T = 16 of them on one node; the cell's few pieces of z_t stay at 2 or fewer
check(max(count.values(), default=0) <= 2,
      "bench_torch's graph at T=%d: at most 2 index/slice nodes on any one tensor (most: %d on %s)"
      % (T, count.get(worst, 0), worst))

# (c) an OpenBLAS that picks older kernels than the CPU allows (0.3.21 on a CPU model it does not know falls back to
# Prescott's) is run again with OPENBLAS_CORETYPE set; one whose pick is as good is left alone
dyn = "OpenBLAS 0.3.21 NO_LAPACKE DYNAMIC_ARCH NO_AFFINITY %s MAX_THREADS=64"
spr = {"sse3", "avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_bf16"}
zen3 = {"sse3", "avx2", "fma"}
skx = spr - {"avx512_bf16"}
for config, flags, want in [(dyn % "Prescott", spr, "Cooperlake"), (dyn % "Cooperlake", spr, None),
                            (dyn % "SapphireRapids", spr, None), (dyn % "SkylakeX", spr, "Cooperlake"),
                            (dyn % "Zen", spr, "Cooperlake"), (dyn % "Prescott", skx, "SkylakeX"),
                            (dyn % "SkylakeX", skx, None), (dyn % "Zen", zen3, None),
                            (dyn % "Nehalem", zen3, "Haswell"), (dyn % "Prescott", {"sse3"}, None),
                            ("OpenBLAS 0.3.21 NO_LAPACKE NO_AFFINITY Prescott MAX_THREADS=64", spr, None)]:
    got = bench_torch.openblas_core_wanted(config, flags)
    check(got == want, "openblas_core_wanted(%r, %s flags) = %r (want %r)" % (config, len(flags), got, want))

finish()

#!/usr/bin/env python3
"""dev/scaling.py: data-parallel scaling of the paper's run (H=4096, T=256), from stated constants.

One step on p GPUs = the compute of one GPU at its batch (dev/perf_model.py, or
--step-ms) + the exposed part of the gradient all-reduce (alpha-beta model,
hierarchical: reduce-scatter over NVLink in the node, ring all-reduce of each GPU's
shard over InfiniBand between nodes, all-gather over NVLink) + the wait for the
slowest of p GPUs (each GPU's step time varies with coefficient of variation
`jitter`; the expected maximum of p normal deviates). dev/scaling.md prints its tables
from this tool.

  python3 dev/scaling.py                   # the paper check and the H200 predictions
  python3 dev/scaling.py --paper           # only the paper check
  python3 dev/scaling.py --predictions     # only the H200 predictions
  python3 dev/scaling.py --cluster h200 --nodes 8 --nodes 16 --nodes 64 --overlap
  python3 dev/scaling.py --set ib_gbs=25 --jitter 0 --grad-bytes 2
  python3 dev/scaling.py --paper --cluster dgx1v --set ib_gbs=0.28 --jitter 0
  python3 dev/scaling.py --constants
  python3 dev/scaling.py --discriminate    # where the wait and a fixed per-step cost predict apart

Python 3 standard library only.
"""
import argparse
import math
import os
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import perf_model  # noqa: E402  (the per-GPU compute time)

# ---------------------------------------------------------------------------
# The paper (Puri, Kirby, Yakovenko, Catanzaro 2018, "Large Scale Language Modeling:
# Converging on 40GB of Text in Four Hours"), as used here:
PAPER = dict(
    gpus=128,             # abstract: 128 Tesla V100 GPUs (16 DGX-1V nodes of 8)
    global_batch=32768,   # abstract: "a 32k batch size"; 32768 / 128 = 256 sequences per GPU
    seq_len=256,          # T (the authors' code trains 256-character windows)
    corpus_bytes=40e9,    # abstract: the 40 GB Amazon Reviews dataset; byte-level model: 1 byte = 1 char
    epochs=3,             # abstract: 3 epochs
    hours=4.0,            # abstract: "in four hours"
    speedup=109.0,        # 109x over one GPU at 128 GPUs (cited for the paper, its body unchecked: dev/scaling.md)
    grad_bytes=2,         # FP16 gradients all-reduced (the authors' code documentation)
)

PARAMS = perf_model.param_count()  # 86,319,360 at H=4096, D=64, V=256 with weight norm

# ---------------------------------------------------------------------------
# Clusters. Per-GPU bandwidths are one direction, as a ring uses them.
CLUSTERS = {
    "dgx1v": dict(
        name="DGX-1V (8 V100, NVLink 2 hybrid cube mesh, 4x EDR InfiniBand)",
        gpu="v100",
        gpus_per_node=8,
        nvlink_gbs=130.0,    # achievable ring bandwidth per GPU inside the node (6 NVLink 2 links x 25 GB/s = 150 peak)
        ib_gbs=6.25,         # per GPU: 4 EDR NICs x 100 Gb/s = 50 GB/s per node, shared by 8 GPUs
        alpha_nvlink_us=5.0, # per ring step inside a node (NCCL protocol overhead)
        alpha_ib_us=10.0,    # per ring step between nodes
    ),
    "h200": dict(
        name="DGX H200 (8 H200, NVLink 4 through NVSwitch, 8x NDR InfiniBand)",
        gpu="h200",
        gpus_per_node=8,
        nvlink_gbs=360.0,    # achievable per GPU (450 GB/s peak per direction)
        ib_gbs=45.0,         # per GPU: one 400 Gb/s NDR NIC each (50 GB/s), 90% achievable
        alpha_nvlink_us=3.0,
        alpha_ib_us=8.0,
    ),
}

# The one constant not from a data sheet or the performance model: how much one
# GPU's step time varies from step to step (data loading, host work, clocks). A
# synchronous all-reduce makes every step wait for the slowest GPU. Fitted: the
# value that reproduces the paper's 109x at 128 GPUs (dev/scaling.md says why the
# all-reduce alone cannot).
JITTER = 0.063

# The other explanation of the same number: a fixed cost per step on more than one GPU
# (host syncs, a data loader that does not overlap, the framework's own work), the same
# at every model size and GPU count. Fitted the same way, to the same 109x
# (fit_overhead_ms); one constant fitted to one number has no degree of freedom left, so
# the 109x cannot tell the two apart. `--discriminate` prints where they differ.


def allreduce_seconds(n_bytes, gpus_per_node, nodes, c):
    """Hierarchical ring all-reduce of n_bytes on nodes x gpus_per_node GPUs (alpha-beta)."""
    g, N = gpus_per_node, nodes
    if g * N <= 1:
        return 0.0
    a_nv, b_nv = c["alpha_nvlink_us"] * 1e-6, c["nvlink_gbs"] * 1e9
    a_ib, b_ib = c["alpha_ib_us"] * 1e-6, c["ib_gbs"] * 1e9
    intra = 2 * ((g - 1) * a_nv + (g - 1) / g * n_bytes / b_nv)  # reduce-scatter + all-gather in the node
    inter = 2 * (N - 1) * a_ib + 2 * (N - 1) / N * (n_bytes / g) / b_ib if N > 1 else 0.0
    return intra + inter


def expected_max_normal(p):
    """E[max of p independent standard normal deviates] (Simpson's rule)."""
    if p <= 1:
        return 0.0
    n, lo, hi = 4000, -9.0, 9.0
    h = (hi - lo) / n
    s = 0.0
    for i in range(n + 1):
        x = lo + i * h
        phi = math.exp(-x * x / 2) / math.sqrt(2 * math.pi)
        cdf = 0.5 * (1 + math.erf(x / math.sqrt(2)))
        f = x * p * phi * cdf ** (p - 1)
        s += f * (1 if i in (0, n) else 4 if i % 2 else 2)
    return s * h / 3


def compute_seconds(gpu, batch, seq_len, step_ms=None):
    """One GPU's step at this batch: measured (--step-ms) or from dev/perf_model.py.
    Also returns the weight-gradient phase (what an overlapped all-reduce can hide behind)."""
    g = perf_model.GPUS[gpu]
    ks = perf_model.step_kernels(g, batch, seq_len)
    t_model = sum(k["t"] * n for k, n in ks) * 1e-6
    t_wgrad = sum(k["t"] * n for k, n in ks if k["name"].startswith(("dW_", "dxe", "colsum b ", "embed_bwd",
                                                                     "weightnorm_bwd"))) * 1e-6
    t = step_ms / 1e3 if step_ms else t_model
    return t, t_wgrad * t / t_model


def step(cluster, nodes, batch, seq_len, grad_bytes, jitter, overlap, step_ms=None, overhead_ms=0.0, gpus=None,
         params=None):
    """One synchronous step; gpus (default: every GPU of the nodes) may be fewer than a node's."""
    c = CLUSTERS[cluster]
    p = gpus or nodes * c["gpus_per_node"]
    t_c, t_wgrad = compute_seconds(c["gpu"], batch, seq_len, step_ms)
    t_ar = allreduce_seconds((params or PARAMS) * grad_bytes, min(p, c["gpus_per_node"]), nodes, c)
    exposed = max(0.0, t_ar - t_wgrad) if overlap else t_ar
    t_wait = jitter * t_c * expected_max_normal(p) + (overhead_ms * 1e-3 if p > 1 else 0.0)
    t = t_c + exposed + t_wait
    chars = p * batch * seq_len
    return dict(p=p, batch=batch, global_batch=p * batch, t_c=t_c, t_ar=t_ar, exposed=exposed, t_wait=t_wait,
                t=t, chars_per_s=chars / t, speedup=p * t_c / t, efficiency=t_c / t)


def hours(run_chars, chars_per_s):
    return run_chars / chars_per_s / 3600


# ---------------------------------------------------------------------------
# Output

def paper_check(a):
    P = PAPER
    run_chars = P["corpus_bytes"] * P["epochs"]
    b = P["global_batch"] // P["gpus"]
    nodes = P["gpus"] // CLUSTERS["dgx1v"]["gpus_per_node"]
    print("Paper check: %d V100s (%d DGX-1V), %d sequences of %d per GPU, FP%d all-reduce of %s parameters "
          "(%.1f MB), %g epochs of %g GB\n" % (P["gpus"], nodes, b, P["seq_len"], 8 * a.grad_bytes_paper,
                                               format(PARAMS, ","), PARAMS * a.grad_bytes_paper / 1e6,
                                               P["epochs"], P["corpus_bytes"] / 1e9))
    print("| model | compute ms | all-reduce ms | exposed ms | slowest-GPU wait ms | step ms | speedup at 128 "
          "| vs paper 109x | hours for the run | vs paper 4 h |")
    print("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
    over = fit_overhead_ms(a)
    rows = [("bandwidth only (jitter 0, no overlap)", 0.0, False, 0.0),
            ("+ slowest-GPU wait (jitter %.3f), no overlap" % a.jitter, a.jitter, False, 0.0),
            ("+ slowest-GPU wait, all-reduce overlapped with the weight gradients", a.jitter, True, 0.0),
            ("or instead: + a fixed %.0f ms per step (jitter 0), no overlap" % over, 0.0, False, over)]
    out = []
    for what, jit, ov, oh in rows:
        s = step("dgx1v", nodes, b, P["seq_len"], a.grad_bytes_paper, jit, ov, a.step_ms_v100, overhead_ms=oh)
        h = hours(run_chars, s["chars_per_s"])
        out.append((what, s, h))
        print("| %s | %.0f | %.1f | %.1f | %.1f | %.0f | %.1fx | %+.1f%% | %.2f | %+.1f%% |" % (
            what, s["t_c"] * 1e3, s["t_ar"] * 1e3, s["exposed"] * 1e3, s["t_wait"] * 1e3, s["t"] * 1e3,
            s["speedup"], 100 * (s["speedup"] / P["speedup"] - 1), h, 100 * (h / P["hours"] - 1)))
    implied_1gpu = run_chars / (P["hours"] * 3600) / P["speedup"]
    print("\nThe paper's figures imply %.0f chars/s on one V100 (120e9 chars in %g h on 128 GPUs, over %gx);"
          " the model's one V100 at B=%d: %.0f chars/s." % (implied_1gpu, P["hours"], P["speedup"], b,
                                                          b * P["seq_len"] / out[0][1]["t_c"]))
    return out


def fit_overhead_ms(a):
    """The fixed per-step cost (ms) that, alone, brings the paper check to the paper's speedup."""
    P = PAPER
    b = P["global_batch"] // P["gpus"]
    nodes = P["gpus"] // CLUSTERS["dgx1v"]["gpus_per_node"]
    s = step("dgx1v", nodes, b, P["seq_len"], a.grad_bytes_paper, 0.0, False, a.step_ms_v100)
    return (P["gpus"] * s["t_c"] / P["speedup"] - s["t"]) * 1e3


class hidden_units:
    """perf_model at another H for the duration of a with block (its model is module-level)."""
    def __init__(self, h):
        self.h = h

    def __enter__(self):
        self.old, perf_model.H = perf_model.H, self.h
        return perf_model.param_count()

    def __exit__(self, *exc):
        perf_model.H = self.old


def discriminate(a):
    """Where the two fits of the 109x part: the paper's DGX-1V setting changed one thing at a time,
    each row with one GPU's step there (what a fixed cost is set against)."""
    P = PAPER
    b = P["global_batch"] // P["gpus"]
    over = fit_overhead_ms(a)
    g8 = CLUSTERS["dgx1v"]["gpus_per_node"]
    base = step("dgx1v", P["gpus"] // g8, b, P["seq_len"], a.grad_bytes_paper, 0.0, False, a.step_ms_v100)
    print("Two fits of the paper's 109x, each one constant fitted to that one number: the slowest-GPU wait "
          "(jitter %.3f) and a fixed %.0f ms per step. Speedup over one GPU at the same per-GPU batch (%d), "
          "DGX-1V nodes, FP16 all-reduce unless the row says otherwise.\n" % (a.jitter, over, b))
    print("| setting | GPUs | one GPU's step ms | jitter fit | overhead fit | overhead / jitter |")
    print("|---|--:|--:|--:|--:|--:|")

    def row(what, gpus, **kw):
        nodes = max(1, gpus // g8)
        sj = step("dgx1v", nodes, b, P["seq_len"], kw.get("grad_bytes", a.grad_bytes_paper), a.jitter, False,
                  kw.get("step_ms", a.step_ms_v100), gpus=gpus, params=kw.get("params"))
        so = step("dgx1v", nodes, b, P["seq_len"], kw.get("grad_bytes", a.grad_bytes_paper), 0.0, False,
                  kw.get("step_ms", a.step_ms_v100), overhead_ms=over, gpus=gpus, params=kw.get("params"))
        print("| %s | %d | %.1f | %.1fx | %.1fx | %.3f |" % (
            what, gpus, sj["t_c"] * 1e3, sj["speedup"], so["speedup"], so["speedup"] / sj["speedup"]))

    for gpus in (2, 8, 16, 32, 64, 128):
        row("the paper's run%s" % (" (the fit)" if gpus == P["gpus"] else ""), gpus)
    row("FP32 training: compute %.1fx longer, FP32 all-reduce" % a.fp16_speedup, P["gpus"],
        step_ms=base["t_c"] * 1e3 * a.fp16_speedup, grad_bytes=4)
    for h in (1024, 2048, 8192):
        with hidden_units(h) as params:
            row("a model of H = %d" % h, P["gpus"], params=params)
    saved = CLUSTERS["dgx1v"]["ib_gbs"]
    CLUSTERS["dgx1v"]["ib_gbs"] = 10.0 / 8 / g8  # 10 Gb/s Ethernet per node, shared by its 8 GPUs
    try:
        row("10 Gb/s Ethernet between nodes instead of 4x EDR InfiniBand", P["gpus"])
    finally:
        CLUSTERS["dgx1v"]["ib_gbs"] = saved


def cluster_table(a, cluster, nodes_list, policy):
    c = CLUSTERS[cluster]
    P = PAPER
    run_chars = P["corpus_bytes"] * P["epochs"]
    print("| nodes | GPUs | B per GPU | global B | compute ms | all-reduce ms | exposed ms | wait ms | step ms "
          "| M chars/s | speedup | efficiency | steps | hours |")
    print("|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
    for nodes in nodes_list:
        p = nodes * c["gpus_per_node"]
        if policy == "global":
            if P["global_batch"] % p:
                print("| %d | %d | (global batch %d does not divide by %d GPUs) |" % (nodes, p, P["global_batch"], p))
                continue
            b = P["global_batch"] // p
        else:
            b = a.per_gpu_batch
        s = step(cluster, nodes, b, P["seq_len"], a.grad_bytes, a.jitter, a.overlap,
                 a.step_ms_v100 if c["gpu"] == "v100" else a.step_ms_h200, overhead_ms=a.overhead_ms)
        steps = run_chars / (s["global_batch"] * P["seq_len"])
        print("| %d | %d | %d | %d | %.1f | %.2f | %.2f | %.1f | %.1f | %.2f | %.0fx | %.0f%% | %.0f | %.2f |" % (
            nodes, p, b, s["global_batch"], s["t_c"] * 1e3, s["t_ar"] * 1e3, s["exposed"] * 1e3,
            s["t_wait"] * 1e3, s["t"] * 1e3, s["chars_per_s"] / 1e6, s["speedup"], 100 * s["efficiency"], steps,
            hours(run_chars, s["chars_per_s"])))


def constants():
    print("| constant | " + " | ".join(CLUSTERS) + " |")
    print("|---|" + "--:|" * len(CLUSTERS))
    for k in CLUSTERS["h200"]:
        print("| %s | %s |" % (k, " | ".join(str(CLUSTERS[c][k]) for c in CLUSTERS)))
    print("\nparameters %s; jitter %.3f (fitted, see dev/scaling.md); paper: %s" % (
        format(PARAMS, ","), JITTER, ", ".join("%s=%g" % kv for kv in PAPER.items())))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--paper", action="store_true", help="only the paper check")
    ap.add_argument("--predictions", action="store_true", help="only the prediction tables (no paper check)")
    ap.add_argument("--constants", action="store_true", help="print every constant")
    ap.add_argument("--discriminate", action="store_true",
                    help="where the two fits of the 109x (slowest-GPU wait, fixed per-step cost) predict differently")
    ap.add_argument("--fp16-speedup", type=float, default=4.2,
                    help="--discriminate: how much longer one GPU's FP32 step is than its FP16 step (4.2)")
    ap.add_argument("--cluster", choices=sorted(CLUSTERS), default="h200",
                    help="for the prediction table (default h200)")
    ap.add_argument("--nodes", type=int, action="append", help="nodes of 8 GPUs (repeatable; default 8 16 64)")
    ap.add_argument("--batch-policy", choices=("global", "per-gpu"), action="append",
                    help="global: the paper's 32768 split over the GPUs; per-gpu: --per-gpu-batch each (default both)")
    ap.add_argument("--per-gpu-batch", type=int, default=256, help="sequences per GPU for --batch-policy per-gpu (256)")
    ap.add_argument("--grad-bytes", type=int, choices=(2, 4), default=4,
                    help="bytes per gradient in the all-reduce: 4 = FP32, as train.cu (default), 2 = FP16")
    ap.add_argument("--grad-bytes-paper", type=int, choices=(2, 4), default=PAPER["grad_bytes"],
                    help="the same for the paper check (default 2: the paper's FP16 all-reduce)")
    ap.add_argument("--jitter", type=float, default=JITTER, help="coefficient of variation of one GPU's step time")
    ap.add_argument("--overhead-ms", type=float, default=0.0,
                    help="a fixed cost per step on more than one GPU, in the prediction tables (default 0)")
    ap.add_argument("--overlap", action="store_true",
                    help="hide the all-reduce behind the weight-gradient phase (train.cu does not)")
    ap.add_argument("--step-ms-h200", type=float,
                    help="a measured H200 step at the batch in question, instead of the model")
    ap.add_argument("--step-ms-v100", type=float, help="a measured V100 step at B=256, instead of the model")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="override a constant of --cluster, e.g. ib_gbs=25 (--cluster dgx1v: the paper check's)")
    a = ap.parse_args(argv)
    if not (0 <= a.jitter < 1):
        ap.error("--jitter %g: must be in [0, 1)" % a.jitter)
    for name in ("step_ms_h200", "step_ms_v100"):
        v = getattr(a, name)
        if v is not None and not (math.isfinite(v) and v > 0):
            ap.error("--%s %g: must be a positive number of milliseconds" % (name.replace("_", "-"), v))
    if not 1 <= a.per_gpu_batch <= 1 << 20:
        ap.error("--per-gpu-batch %d: must be in 1 .. 1048576" % a.per_gpu_batch)
    nodes = a.nodes or [8, 16, 64]
    for n in nodes:
        if not 1 <= n <= 1 << 16:
            ap.error("--nodes %d: must be in 1 .. 65536" % n)
    for kv in a.set:
        key, sep, val = kv.partition("=")
        if not sep or key not in CLUSTERS["h200"] or key in ("name", "gpu"):
            ap.error("--set %s: expected KEY=VALUE with KEY one of %s" % (
                kv, ", ".join(k for k in CLUSTERS["h200"] if k not in ("name", "gpu"))))
        try:
            v = float(val)
        except ValueError:
            ap.error("--set %s: not a number" % kv)
        if not (math.isfinite(v) and v > 0) or (key == "gpus_per_node" and v != int(v)):
            ap.error("--set %s: must be a positive number%s" % (kv, " (whole)" if key == "gpus_per_node" else ""))
        CLUSTERS[a.cluster][key] = int(v) if key == "gpus_per_node" else v
    if not (math.isfinite(a.overhead_ms) and a.overhead_ms >= 0):
        ap.error("--overhead-ms %g: must be zero or a positive number of milliseconds" % a.overhead_ms)
    if not (math.isfinite(a.fp16_speedup) and a.fp16_speedup > 0):
        ap.error("--fp16-speedup %g: must be a positive number" % a.fp16_speedup)
    if a.paper and a.predictions:
        ap.error("--paper and --predictions: each prints only its own tables; give one")
    if a.constants:
        constants()
        return 0
    if a.discriminate:
        discriminate(a)
        return 0
    if not a.predictions:
        paper_check(a)
    if a.paper:
        return 0
    c = CLUSTERS[a.cluster]
    for i, policy in enumerate(a.batch_policy or ["global", "per-gpu"]):
        print("%s%s: the paper's run (%g epochs of %g GB), %s, FP%d all-reduce, %s, jitter %.3f%s\n" % (
            "" if a.predictions and i == 0 else "\n", c["name"], PAPER["epochs"], PAPER["corpus_bytes"] / 1e9,
            "global batch %d split over the GPUs" % PAPER["global_batch"] if policy == "global"
            else "%d sequences per GPU" % a.per_gpu_batch, 8 * a.grad_bytes,
            "overlapped with the weight gradients" if a.overlap else "not overlapped", a.jitter,
            ", a fixed %g ms per step" % a.overhead_ms if a.overhead_ms else ""))
        cluster_table(a, a.cluster, nodes, policy)
    return 0


if __name__ == "__main__":
    sys.exit(main())

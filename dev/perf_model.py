#!/usr/bin/env python3
"""dev/perf_model.py: the predicted time of one training step of train.cu, kernel by kernel.

A roofline with three refinements, all stated as constants below: the achievable
fraction of the tensor-core peak of the hand-written WMMA matmul per tile size, the
bytes a matmul can keep in flight (Little's law: bandwidth <= bytes in flight /
memory latency), and a fixed gap between dependent kernel launches. Every kernel is
listed as train.cu launches it (forward, backward, overflow check, Adam; one GPU).
dev/gpu-perf.md prints its tables from this tool; dev/gpu_check.sh prints these
predictions next to what the benchmark measures.

  python3 dev/perf_model.py                          # summary: H200 and V100, B = 128, 256, 512
  python3 dev/perf_model.py --gpu h200 --batch 128 --kernels    # one step, kernel by kernel
  python3 dev/perf_model.py --gpu h200 --variants    # what each candidate change buys
  python3 dev/perf_model.py --gpu h200 --predict     # machine-readable lines for gpu_check.sh
  python3 dev/perf_model.py --gpu h200 --set eff64=0.4 --set lat_ns=800   # change a constant

Python 3 standard library only. Times are microseconds inside, milliseconds printed.
"""
import argparse
import math
import sys

# ---------------------------------------------------------------------------
# The model (mlstm.h): H hidden units, D embedding width, V bytes, T steps per batch.
H, D, V = 4096, 64, 256
T_DEFAULT = 256

# ---------------------------------------------------------------------------
# The GPUs. Data-sheet numbers first; below them the assumptions, each a guess to
# be replaced by a measurement (dev/gpu_check.sh prints predicted vs measured).
GPUS = {
    "h200": dict(
        name="H200 SXM",
        tc_tflops=989.0,    # dense FP16 tensor core, FP32 accumulate (data sheet; 1979 is with sparsity)
        fp32_tflops=67.0,   # FP32 on the CUDA cores (the FP32 build's SIMT matmul)
        hbm_gbs=4800.0,     # HBM3e (data sheet)
        l2_mb=50.0,         # L2 (the brief's figure; the W_h stream evicts everything between time steps anyway)
        sms=132, smem_kb=228, clock_ghz=1.98, mem_gb=141,
        cp_async=True,      # sm_80+: the WMMA kernel's slabs arrive by cp.async, STAGES-1 slabs in flight
        # --- assumptions
        mem_eff=0.90,       # achievable fraction of HBM bandwidth for streaming kernels (a device copy reaches ~4.3 TB/s)
        lat_ns=600.0,       # DRAM latency under load, for Little's law (unloaded ~ 500 ns; loaded is higher)
        l2_gbs=10000.0,     # L2 bandwidth, only for operands that stay in L2 (the matmul benchmark, variant l2wmh)
        l2_lat_ns=300.0,    # L2 hit latency under load
        eff64=0.30,         # WMMA 64x64 tile (4 warps of 32x32, mma.sync): fraction of tc_tflops when compute-bound
        eff128=0.45,        # WMMA 128x128 tile (8 warps of 64x32); Hopper's full rate needs wgmma, which WMMA is not
        eff_simt=0.50,      # SIMT FP32 matmul: fraction of fp32_tflops
        gap_us=2.0,         # GPU idle between two dependent kernels launched one by one into a stream
        graph_gap_us=1.0,   # the same inside a CUDA graph
        sync_us=10.0,       # a host round trip: a synchronous cudaMemcpy of a few bytes (2 per step + 3 uploads)
        pcie_gbs=10.0,      # pageable host-to-device copies (the batch upload)
        eff_wgmma=0.70,     # a wgmma (sm_90a) matmul, for the variant that assumes one
        l2_persist_mb=37.5, # L2 that cudaAccessPolicyWindow may set aside for persisting lines (75%)
    ),
    "v100": dict(
        name="V100 SXM2",
        tc_tflops=125.0, fp32_tflops=15.7, hbm_gbs=900.0, l2_mb=6.0,
        sms=80, smem_kb=96, clock_ghz=1.53, mem_gb=32,
        cp_async=False,     # sm_70: the same kernel copies each slab synchronously: one slab in flight
        mem_eff=0.85, lat_ns=500.0, l2_gbs=2500.0, l2_lat_ns=250.0,
        eff64=0.45, eff128=0.60, eff_simt=0.60,
        gap_us=3.0, graph_gap_us=1.5, sync_us=10.0, pcie_gbs=8.0,
        eff_wgmma=None, l2_persist_mb=0.0,  # no wgmma; no persisting-L2 control before sm_80
    ),
}

VARIANTS = {
    "as-is": "train.cu as it is (the T-step loops as CUDA graphs, the 128x128 tile at >= 90% of a wave)",
    "direct": "the T-step loops launched one by one (MLSTM_NO_GRAPH=1): gap {gap_us:g} us instead of {graph_gap_us:g}",
    "inflight4": "4x the bytes in flight in the per-step products (split-K by 4, or a 4x deeper cp.async pipeline)",
    "l2wmh": "W_mh pinned in L2 (cudaAccessPolicyWindow), read from L2 every time step",
    "wgmma": "a wgmma (sm_90a) matmul at {eff_wgmma} of peak instead of WMMA",
    "all": "all of the above",
    "floor": "bound of the sequential algorithm: every matmul at 80% of peak or at full bandwidth, no gaps",
}


def variant_flags(variant):
    names = ("direct", "inflight4", "l2wmh", "wgmma")
    if variant == "all":
        return set(names) - {"direct"}
    if variant in names:
        return {variant}
    return set()


# ---------------------------------------------------------------------------
# One matmul of train.cu: C (M,N) = A . B, K deep, through matmul_plan()'s tile choice.

def tile_plan(M, N, K, g, fp16):
    """train.cu's matmul_plan(): 128x128 if its blocks fill >= 90% of a wave, else 64x64, else SIMT."""
    if not fp16 or K % 32:
        return "simt"
    if M % 128 == 0 and N % 128 == 0 and (M // 128) * (N // 128) * 10 >= g["sms"] * 9:
        return "wmma128"
    if M % 64 == 0 and N % 64 == 0:
        return "wmma64"
    return "simt"


TILES = {  # BM, BN, BK, stages, threads, shared memory bytes per block (train.cu's WmmaTile, matmul_simt_kernel)
    "wmma128": (128, 128, 32, 3, 256, 3 * (128 * 40 + 128 * 40) * 2),
    "wmma64": (64, 64, 32, 3, 128, 3 * (64 * 40 + 64 * 40) * 2),
    "simt": (64, 64, 16, 1, 256, 2 * 16 * 68 * 4),
}


def matmul(name, M, N, K, g, fp16, flags, *, extra_read=0, extra_write=0, out_bytes=4, weight=None,
           weight_in_l2=False, bench=False):
    """One launch. weight: 'A' or 'B', the operand that is a weight matrix (read from DRAM
    every time step in the time loops). Returns a kernel record (times in us)."""
    es = 2 if fp16 else 4  # storage bytes per element of the operands
    plan = tile_plan(M, N, K, g, fp16)
    BM, BN, BK, stages, threads, smem = TILES[plan]
    blocks = math.ceil(M / BM) * math.ceil(N / BN)
    flops = 2.0 * M * N * K
    a_bytes, b_bytes, c_bytes = M * K * es, K * N * es, M * N * out_bytes
    read = a_bytes + b_bytes + extra_read
    write = c_bytes + extra_write
    # compute: the tile's achievable fraction of peak, on the SMs the grid covers
    if plan == "simt":
        peak, eff = g["fp32_tflops"], g["eff_simt"]
    else:
        peak = g["tc_tflops"]
        eff = g["eff128"] if plan == "wmma128" else g["eff64"]
        if "wgmma" in flags and g["eff_wgmma"]:
            eff = g["eff_wgmma"]
    waves = math.ceil(blocks / g["sms"])
    util = blocks / (waves * g["sms"])  # the last wave's idle SMs (wave quantization)
    t_compute = flops / (peak * 1e12 * eff * util) * 1e6
    # memory, two limits. Bandwidth: every operand read once from DRAM (L2 absorbs the
    # tiles' re-reads), the output and epilogue tensors written once. Latency (Little's
    # law): a block walks K in K/BK slabs and keeps (stages - 1) of them in flight with
    # cp.async (one without), so it needs (K/BK) x latency / in-flight slabs, per wave of
    # resident blocks. The latency is DRAM's when the slabs stream a weight that does not
    # stay in L2 (the per-step products: W_h's 134 MB stream evicts W_mh between steps).
    per_sm = min(g["smem_kb"] * 1024 // smem, 2048 // threads, 32)
    resident = min(blocks, per_sm * g["sms"])
    in_flight = (stages - 1) if (g["cp_async"] and plan != "simt") else 1
    if "inflight4" in flags and weight:
        in_flight *= 4
    from_l2 = (bench and read <= 0.8 * g["l2_mb"] * 1e6) or (weight_in_l2 and weight)
    lat = g["l2_lat_ns"] if from_l2 else g["lat_ns"]
    bw = g["hbm_gbs"] * g["mem_eff"]
    t_latency = math.ceil(blocks / resident) * math.ceil(K / BK) * lat * 1e-3 / in_flight
    dram = read + write
    if weight_in_l2 and weight:
        dram -= a_bytes if weight == "A" else b_bytes
    t_memory = max(t_latency, dram / (bw * 1e9) * 1e6)
    if "inflight4" in flags and weight and plan != "simt":  # split-K partial sums: write and read back (M,N) FP32 x 4
        t_memory += 2 * 4 * M * N * 4 / (bw * 1e9) * 1e6
    if g["cp_async"] or plan == "simt":
        t = max(t_compute, t_memory)
    else:  # synchronous slab copies: a block waits, then computes; co-resident blocks hide part of it
        t = max(t_compute, t_memory) + min(t_compute, t_memory) / math.ceil(resident / g["sms"])
    bound = "compute" if t_compute >= t_memory else ("latency" if t_latency * 1e-6 * bw * 1e9 > dram else "memory")
    return dict(name=name, kind="matmul", plan=plan, blocks=blocks, flops=flops, bytes=dram,
                t_compute=t_compute, t_memory=t_memory, t=t, bound=bound, launches=1)


def stream(name, read, write, g, flops=0.0, launches=1):
    """An element-wise or reduction kernel: bandwidth-bound (its FLOPs are a few per byte)."""
    bw = g["hbm_gbs"] * g["mem_eff"]
    t = (read + write) / (bw * 1e9) * 1e6
    return dict(name=name, kind="stream", plan="", blocks=0, flops=flops, bytes=read + write, t_compute=0.0,
                t_memory=t, t=t, bound="memory", launches=launches)


def host(name, t, n=1):
    return dict(name=name, kind="host", plan="", blocks=0, flops=0.0, bytes=0, t_compute=0.0, t_memory=0.0,
                t=t, bound="host", launches=0, syncs=n)


# ---------------------------------------------------------------------------
# One training step of train.cu (model_step, model_overflow, model_apply), world = 1.

def step_kernels(g, B, T=T_DEFAULT, fp16=True, variant="as-is"):
    """[(kernel record, count per step)], in launch order."""
    flags = variant_flags(variant)
    N = B * T
    X = 2 if fp16 else 4  # floatX
    F = 4
    BH = B * H
    np_ = param_count()
    l2wmh = "l2wmh" in flags and g["l2_persist_mb"] * 1e6 >= H * H * X
    ks = []
    add = lambda k, n=1: ks.append((k, n))
    # ---- forward
    add(host("upload batch (3 pageable H2D copies)", 3 * (g["sync_us"] + N / (g["pcie_gbs"] * 1e3))))
    add(stream("weightnorm_fwd W_x, W_h, W_mx, W_mh; to_x W_out",
               F * (5 * H * D + 5 * H * H) + F * 10 * H + F * V * H,
               X * (5 * H * D + 5 * H * H + V * H) + F * 10 * H, g, launches=5))
    add(stream("embed_fwd", N * 1 + V * D * F, N * D * X, g))
    add(matmul("zx = e W_x^T + b", N, 4 * H, D, g, fp16, flags, out_bytes=X, extra_read=4 * H * F))
    add(matmul("mx = e W_mx^T", N, H, D, g, fp16, flags, out_bytes=X))
    add(stream("to_x h0; copy c0", BH * F + BH * F, BH * X + BH * F, g, launches=2))
    add(matmul("mh = h W_mh^T; m = mx*mh  [per t]", B, H, H, g, fp16, flags, out_bytes=X,
               extra_read=BH * X + B, extra_write=BH * X, weight="B", weight_in_l2=l2wmh), T)
    add(matmul("z = zx + m W_h^T  [per t]", B, 4 * H, H, g, fp16, flags, out_bytes=F,
               extra_read=4 * BH * X, weight="B"), T)
    add(stream("cell_fwd  [per t]", 4 * BH * F + BH * F + B, 4 * BH * X + BH * X + BH * F, g), T)
    add(matmul("logits = h W_out^T + b", N, V, H, g, fp16, flags, out_bytes=F, extra_read=V * F))
    add(stream("softmax_xent", N * V * F + N, N * V * X + N * F, g))
    add(stream("reduce loss", N * F, 0, g))
    add(host("loss to host (2 D2H copies, a sync)", 2 * g["sync_us"], 1))
    add(stream("to_f32 h; copy c", BH * X + BH * F, 2 * BH * F, g, launches=2))
    # ---- backward
    add(stream("memset grads", 0, np_ * F, g))
    add(matmul("dW_out = dlogits^T h", V, H, N, g, fp16, flags))
    add(stream("colsum b_out (2 kernels)", N * V * X, 64 * V * F, g, launches=2))
    add(matmul("dhs = dlogits W_out", N, H, V, g, fp16, flags, out_bytes=X))
    add(stream("memset dh, dc", 0, 2 * BH * F, g, launches=2))
    add(stream("cell_bwd  [per t]", 4 * BH * X + 4 * BH * F + BH * X + B, 4 * BH * X + BH * F, g), T)
    add(matmul("dm = dz W_h; dmx, dmh  [per t]", B, H, 4 * H, g, fp16, flags, out_bytes=X,
               extra_read=2 * BH * X + B, extra_write=BH * X, weight="B"), T)
    add(matmul("dh = dmh W_mh  [per t]", B, H, H, g, fp16, flags, out_bytes=F, weight="B",
               weight_in_l2=l2wmh), T)
    add(matmul("dW_h = dz^T m", 4 * H, H, N, g, fp16, flags))
    add(matmul("dW_x = dz^T e", 4 * H, D, N, g, fp16, flags))
    add(matmul("dW_mx = dmx^T e", H, D, N, g, fp16, flags))
    add(matmul("dW_mh = dmh^T h", H, H, N, g, fp16, flags))
    add(stream("colsum b (2 kernels)", N * 4 * H * X, 64 * 4 * H * F, g, launches=2))
    add(matmul("dxe = dz W_x", N, D, 4 * H, g, fp16, flags))
    add(matmul("dxe += dmx W_mx", N, D, H, g, fp16, flags, extra_read=N * D * F))
    # embed_bwd: V blocks of 32x32 threads scan all N positions, D/32 times: instruction-bound
    warp_iters = V * (D // 32) * N
    t_emb = warp_iters * 12 / (g["sms"] * 4 * g["clock_ghz"] * 1e3)  # ~12 instructions an iteration, 4 warps issue a cycle
    add(dict(name="embed_bwd (V blocks scan N positions)", kind="other", plan="", blocks=V, flops=0.0,
             bytes=N * D * F, t_compute=t_emb, t_memory=0.0, t=t_emb, bound="issue", launches=1))
    add(stream("weightnorm_bwd x4", 3 * F * (5 * H * D + 5 * H * H), F * (5 * H * D + 5 * H * H), g, launches=4))
    # ---- overflow check and Adam
    add(stream("reduce grads (sumsq, overflow)", np_ * F, 0, g))
    add(host("sumsq to host (2 D2H copies, a sync)", 2 * g["sync_us"], 1))
    add(stream("adam", 4 * np_ * F, 3 * np_ * F, g))
    # launch gaps: the kernels of the two T-step loops are nodes of CUDA graphs (graph_gap_us
    # between dependent nodes), the rest is launched one by one (gap_us)
    in_loops = sum(k["launches"] * n for k, n in ks if n == T)
    others = sum(k["launches"] * n for k, n in ks if n != T)
    gap_t = g["gap_us"] if "direct" in flags else g["graph_gap_us"]
    add(dict(name="launch gaps (%d in graphs x %.1f us, %d launches x %.1f us)" % (in_loops, gap_t, others, g["gap_us"]),
             kind="gap", plan="", blocks=0, flops=0.0, bytes=0, t_compute=0.0, t_memory=0.0,
             t=in_loops * gap_t + others * g["gap_us"], bound="launch", launches=0))
    if variant == "floor":
        ks = floor_kernels(ks, g)
    return ks


def floor_kernels(ks, g):
    """Every matmul at 80% of peak or at full bandwidth, nothing else in the way."""
    out = []
    bw = g["hbm_gbs"] * g["mem_eff"]
    for k, n in ks:
        k = dict(k)
        if k["kind"] == "matmul":
            k["t_compute"] = k["flops"] / (g["tc_tflops"] * 1e12 * 0.8) * 1e6
            k["t_memory"] = k["bytes"] / (bw * 1e9) * 1e6
            k["t"] = max(k["t_compute"], k["t_memory"])
            k["bound"] = "compute" if k["t_compute"] >= k["t_memory"] else "memory"
        elif k["kind"] in ("gap", "host"):
            k["t"] = 0.0
        out.append((k, n))
    return out


def param_count():
    return V * D + 4 * H * D + 4 * H + 4 * H * H + 4 * H + H * D + H + H * H + H + 4 * H + V * H + V


def flops_per_char():
    """mlstm.h's flops_per_char(): forward FLOPs per character; training is 3x."""
    return 2.0 * (5 * H * D + 5 * H * H + V * H)


def device_bytes(B, T=T_DEFAULT, fp16=True):
    """train.cu's model_create(): parameters + Adam (FP32), weights and activations."""
    X, F, N, np_ = (2 if fp16 else 4), 4, B * T, param_count()
    nW = 5 * H * D + 5 * H * H
    act = (nW + V * H) * X + nW * F + N * D * X + N * 4 * H * X + B * 4 * H * F + 3 * N * H * X \
        + (N + B) * H * (X + F) + N * V * (F + X) + N * 4 * H * X + 3 * N * H * X + N * D * F
    return 4 * np_ * F + act


def summarize(ks, B, T, g):
    t = sum(k["t"] * n for k, n in ks)
    chars = B * T
    model_flops = 3 * flops_per_char() * chars
    return dict(t_ms=t / 1e3, chars_per_s=chars / (t * 1e-6), tflops=model_flops / (t * 1e-6) / 1e12,
                mfu=model_flops / (t * 1e-6) / (g["tc_tflops"] * 1e12))


# ---------------------------------------------------------------------------
# Output

def fmt_bytes(b):
    return "%.1f GB" % (b / 1e9) if b >= 1e9 else "%.1f MB" % (b / 1e6) if b >= 1e6 else "%.0f kB" % (b / 1e3)


def kernel_table(g, B, T, fp16, variant):
    ks = step_kernels(g, B, T, fp16, variant)
    total = sum(k["t"] * n for k, n in ks)
    print("| kernel | x | tile | GFLOP | DRAM bytes | compute us | memory us | bound | us each | ms/step | share |")
    print("|---|--:|---|--:|--:|--:|--:|---|--:|--:|--:|")
    for k, n in ks:
        print("| %s | %d | %s | %.2f | %s | %.1f | %.1f | %s | %.1f | %.2f | %.1f%% |" % (
            k["name"], n, k["plan"] or "-", k["flops"] / 1e9, fmt_bytes(k["bytes"]) if k["bytes"] else "-",
            k["t_compute"], k["t_memory"], k["bound"], k["t"], k["t"] * n / 1e3, 100 * k["t"] * n / total))
    s = summarize(ks, B, T, g)
    per_t = sum(k["t"] for k, n in ks if n == T and T > 1)
    wbytes = sum(k["bytes"] for k, n in ks if n == T and k["kind"] == "matmul")
    print("\nstep %.1f ms, %.0f chars/s, %.1f TFLOP/s (model FLOPs 3 x 2(5HD+5H^2+VH) per char), MFU %.1f%%;"
          " the time loops: %.0f us per time step, %s of DRAM traffic per time step in their matmuls"
          % (s["t_ms"], s["chars_per_s"], s["tflops"], 100 * s["mfu"], per_t, fmt_bytes(wbytes)))


def compact_table(g, batches, T, fp16, variant):
    """One row per kernel, one column per batch size: tile, GFLOP, DRAM bytes, time each, bound."""
    per_b = [step_kernels(g, B, T, fp16, variant) for B in batches]
    letter = dict(compute="C", memory="M", latency="L", host="H", launch="-", issue="I")
    print("| kernel | x | " + " | ".join("B=%d: tile, GFLOP, DRAM, us each, bound" % B for B in batches) + " |")
    print("|---|--:|" + "---|" * len(batches))
    for i, (k0, n) in enumerate(per_b[0]):
        cells = []
        for ks in per_b:
            k = ks[i][0]
            cells.append("%s%s, %s, %.1f %s" % (
                k["plan"] + ", " if k["plan"] else "", "%.1f" % (k["flops"] / 1e9) if k["flops"] else "-",
                fmt_bytes(k["bytes"]) if k["bytes"] else "-", k["t"], letter[k["bound"]]))
        print("| %s | %s | %s |" % (k0["name"].replace("  [per t]", ""), "T" if n == T and T > 1 else n,
                                     " | ".join(cells)))
    print("| **step** | | " + " | ".join("**%.1f ms, MFU %.1f%%**" % (s["t_ms"], 100 * s["mfu"]) for s in
                                          (summarize(ks, B, T, g) for ks, B in zip(per_b, batches))) + " |")


def summary_table(gpus, batches, T, fp16, variant):
    print("| GPU | B | chars/step | step ms | chars/s | TFLOP/s | MFU | per-step matmuls | weight-gradient matmuls | rest | GPU memory |")
    print("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
    for gk in gpus:
        g = GPUS[gk]
        for B in batches:
            ks = step_kernels(g, B, T, fp16, variant)
            s = summarize(ks, B, T, g)
            tot = s["t_ms"] * 1e3
            loop = sum(k["t"] * n for k, n in ks if n == T and T > 1)
            wg = sum(k["t"] * n for k, n in ks if k["name"].startswith("dW_"))
            mem = device_bytes(B, T, fp16)
            print("| %s | %d | %d | %.1f | %.0f | %.1f | %.1f%% | %.0f%% | %.0f%% | %.0f%% | %.1f GB%s |" % (
                g["name"], B, B * T, s["t_ms"], s["chars_per_s"], s["tflops"], 100 * s["mfu"], 100 * loop / tot,
                100 * wg / tot, 100 * (tot - loop - wg) / tot, mem / 1e9,
                "" if mem <= g["mem_gb"] * 1e9 else " (exceeds %d GB)" % g["mem_gb"]))


def variants_table(gk, batches, T, fp16):
    g = GPUS[gk]
    print("| change | " + " | ".join("B=%d ms (MFU)" % b for b in batches) + " |")
    print("|---|" + "--:|" * len(batches))
    for v, what in VARIANTS.items():
        if v == "wgmma" and not g["eff_wgmma"] or v == "l2wmh" and g["l2_persist_mb"] * 1e6 < H * H * 2:
            continue
        cells = []
        for B in batches:
            s = summarize(step_kernels(g, B, T, fp16, v), B, T, g)
            cells.append("%.1f (%.0f%%)" % (s["t_ms"], 100 * s["mfu"]))
        print("| %s: %s | %s |" % (v, what.format(**g), " | ".join(cells)))


def bench_shapes(B, T):
    """train.cu's step_shapes(): the matmul benchmark's shapes (FP32 output, no epilogue)."""
    N = B * T
    return [("zx", N, 4 * H, D), ("mx", N, H, D), ("mh", B, H, H), ("z", B, 4 * H, H), ("logits", N, V, H),
            ("dW_out", V, H, N), ("dhs", N, H, V), ("dm", B, H, 4 * H), ("dh", B, H, H), ("dW_h", 4 * H, H, N),
            ("dW_x", 4 * H, D, N), ("dW_mx", H, D, N), ("dW_mh", H, H, N), ("dxe", N, D, 4 * H), ("dxe2", N, D, H)]


def predict_lines(gk, batches, T):
    """What dev/gpu_check.sh compares with the benchmark's bench_step and bench_matmul lines."""
    g = GPUS[gk]
    for fp16 in (True, False):
        for B in batches:
            s = summarize(step_kernels(g, B, T, fp16), B, T, g)
            print("predict_step gpu=%s precision=%s B=%d step_ms=%.2f chars_per_s=%.0f tflops=%.2f mfu=%.4f" % (
                gk, "FP16" if fp16 else "FP32", B, s["t_ms"], s["chars_per_s"], s["tflops"], s["mfu"]))
    for B in batches:
        for name, M, N, K in bench_shapes(B, T):
            k = matmul(name, M, N, K, g, True, set(), bench=True)
            print("predict_matmul gpu=%s B=%d what=%s M=%d N=%d K=%d plan=%s ms=%.4f bound=%s" % (
                gk, B, name, M, N, K, k["plan"], k["t"] / 1e3, k["bound"]))


def constants_table(gpus):
    keys = list(GPUS[gpus[0]].keys())
    print("| constant | " + " | ".join(GPUS[k]["name"] for k in gpus) + " |")
    print("|---|" + "--:|" * len(gpus))
    for key in keys:
        if key == "name":
            continue
        print("| %s | %s |" % (key, " | ".join(str(GPUS[k][key]) for k in gpus)))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--gpu", choices=sorted(GPUS), action="append", help="h200 or v100 (repeatable; default both)")
    ap.add_argument("--batch", type=int, action="append", help="sequences per step (repeatable; default 128 256 512)")
    ap.add_argument("--seq-len", type=int, default=T_DEFAULT, help="T, time steps per batch (default 256)")
    ap.add_argument("--fp32", action="store_true", help="the FP32 build (train_gpu_fp32: SIMT matmul, FP32 storage)")
    ap.add_argument("--variant", choices=list(VARIANTS), default="as-is", help="a candidate change (default as-is)")
    ap.add_argument("--kernels", action="store_true", help="kernel-by-kernel table of one step")
    ap.add_argument("--compact", action="store_true", help="every kernel, one column per batch size")
    ap.add_argument("--variants", action="store_true", help="step time under each candidate change")
    ap.add_argument("--predict", action="store_true", help="machine-readable predictions for dev/gpu_check.sh")
    ap.add_argument("--constants", action="store_true", help="print every constant")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="override a constant of the chosen GPU(s), e.g. eff64=0.4")
    a = ap.parse_args(argv)
    gpus = a.gpu or ["h200", "v100"]
    batches = a.batch or [128, 256, 512]
    for b in batches:
        if b <= 0 or b > 1 << 20:
            ap.error("--batch %d: must be in 1 .. 1048576" % b)
    if not 1 <= a.seq_len <= 1 << 16:
        ap.error("--seq-len %d: must be in 1 .. 65536" % a.seq_len)
    for kv in a.set:
        key, sep, val = kv.partition("=")
        if not sep or key not in GPUS[gpus[0]] or key == "name":
            ap.error("--set %s: expected KEY=VALUE with KEY one of %s" % (kv, ", ".join(k for k in GPUS["h200"] if k != "name")))
        for gk in gpus:
            old = GPUS[gk][key]
            try:
                GPUS[gk][key] = (val.lower() in ("1", "true", "yes")) if isinstance(old, bool) else float(val)
            except ValueError:
                ap.error("--set %s: not a number" % kv)
            if isinstance(GPUS[gk][key], float) and not (math.isfinite(GPUS[gk][key]) and GPUS[gk][key] > 0):
                ap.error("--set %s: must be a positive number" % kv)
    fp16 = not a.fp32
    if a.constants:
        constants_table(gpus)
    elif a.predict:
        for gk in gpus:
            predict_lines(gk, batches, a.seq_len)
    elif a.kernels:
        for gk in gpus:
            for B in batches:
                print("\n%s, B=%d, T=%d, H=%d, %s, %s\n" % (GPUS[gk]["name"], B, a.seq_len, H,
                                                          "FP16" if fp16 else "FP32", a.variant))
                kernel_table(GPUS[gk], B, a.seq_len, fp16, a.variant)
    elif a.compact:
        for gk in gpus:
            print("\n%s, T=%d, H=%d, %s, %s (bound: C compute, M memory bandwidth, L memory latency, I issue, H host)\n"
                  % (GPUS[gk]["name"], a.seq_len, H, "FP16" if fp16 else "FP32", a.variant))
            compact_table(GPUS[gk], batches, a.seq_len, fp16, a.variant)
    elif a.variants:
        for gk in gpus:
            print("\n%s, %s\n" % (GPUS[gk]["name"], "FP16" if fp16 else "FP32"))
            variants_table(gk, batches, a.seq_len, fp16)
    else:
        summary_table(gpus, batches, a.seq_len, fp16, a.variant)
    return 0


if __name__ == "__main__":
    sys.exit(main())

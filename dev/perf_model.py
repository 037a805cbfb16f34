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

Python 3 standard library only. Times are microseconds inside, milliseconds printed. The
constants of train.cu's decisions (tiles, split-K, overlap, colsum) are read from train.cu.
"""
import argparse
import math
import os
import re
import sys

# ---------------------------------------------------------------------------
# train.cu's constants, from the #define lines of train.cu and of the switches' file it includes: the
# trainer is the one place they are written, and a change there moves the model with it. The rules
# that use them are written out below, each naming the train.cu function it follows.
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRAIN_CU = (os.path.join(ROOT, "train.cu"), os.path.join(ROOT, "train_switches.cu"))
TRAIN_CU_NAMES = ("TILE_BIG", "TILE_SMALL", "TILE_BIG_MIN_FILL", "WMMA_K_MULTIPLE", "SPLIT_MAX", "SPLIT_MIN_K",
                  "OVERLAP_CHUNKS", "OVERLAP_LT_SM_DIVISOR", "BLOCK_THREADS", "COLSUM_MIN_CHUNKS", "COLSUM_THREADS")


def train_cu_constants(paths=TRAIN_CU, names=TRAIN_CU_NAMES):
    """{name: int} of `#define NAME value` in the sources at paths, value a whole number or an expression
    of them (digits, + - * << ( )); exits with one line naming the files and the constant when one is
    missing or not such a number."""
    text = ""
    for path in paths:
        try:
            text += open(path).read() + "\n"
        except OSError as e:
            sys.exit("error: %s: %s (perf_model.py reads train.cu's constants from it)" % (path, e.strerror))
    out = {}
    for name in names:
        m = re.search(r"^#define %s +([^/\n]+?)\s*(//.*)?$" % name, text, re.M)
        value = m.group(1) if m else None
        if value and re.fullmatch(r"[0-9 ()+*<-]+", value):
            out[name] = int(eval(value, {"__builtins__": {}}))
        else:
            sys.exit("error: %s: no `#define %s N` with N a whole number (perf_model.py models it)%s"
                     % (", ".join(paths), name, " (it says: %s)" % value if value else ""))
    return out


CU = train_cu_constants()

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
        l2_mb=60.0,         # L2: what PyTorch read on this workplace's H200 (.library/device/KINDS.md, 2026-10-28)
        sms=132, mem_gb=141,
        tc_flop_clk=4096,   # dense FP16 FLOP per SM per clock (wgmma): 989 TFLOP/s = 132 SMs x 4096 x 1.83 GHz
        clock_ghz=1.83,     # the clock of the data sheet's tensor peak
        smem_b_clk=128,     # shared-memory bandwidth per SM per clock (32 banks x 4 bytes)
        smem_kb=228, regs_sm=65536, threads_sm=2048, blocks_sm=32,  # per SM (sm_90); 1 KB of shared memory a block reserved
        regs128=122, regs64=69, regs_simt=64,  # make gpu-regs, sm_90 (the most of the three layouts)
        regs128w64=168,     # the 128x128 tile as 4 warps of 64x64 (switch warp64), make gpu-regs, sm_90, 3 stages
        cp_async=True,      # sm_80+: the WMMA kernel's slabs arrive by cp.async, STAGES-1 slabs in flight
        frag_bytes=512,     # shared-memory bytes a warp reads per 16x16 fragment load (LDSM.x4: 32 lanes x 16 B)
        # --- assumptions
        mma_sync_frac=0.5,  # mma.sync's rate on sm_90 as a fraction of the dense (wgmma) peak: half, as third-party
                            # microbenchmarks of WMMA loops report; the compute-bound bench_matmul shapes measure it
        pipe_overlap=0.5,   # the share of the shorter of the tensor and shared-memory pipes' work hidden under the
                            # longer one (1: perfect overlap): one warp's LDSMs feed its own HMMAs, 2-7 warps per scheduler
        bar_clk=100.0,      # clocks a block stalls per slab at its barrier (wait_group, __syncthreads, the first LDSM's
                            # latency), hidden by the other blocks on the SM: the SM loses bar_clk / blocks per SM
        epi_instr=24,       # instructions per output element in the epilogue (epilogue_store, its branches and loads)
        mem_eff=0.90,       # achievable fraction of HBM bandwidth for streaming kernels: a device-to-device copy moved
                            # 4.3 TB/s on this workplace's H200s (KINDS.md, 2026-10-28, 11-04); gpu_check.sh measures it
        lat_ns=600.0,       # DRAM latency under load, for Little's law (unloaded ~ 500 ns; loaded is higher)
        l2_gbs=7500.0,      # L2 -> SM bandwidth: every matmul's tile reads cross it (M N K es (1/BM + 1/BN) bytes).
                            # Assumed, the middle of the range the review of the model gave (5.5-10 TB/s; l2_range);
                            # gpu_check.sh measures it (test_gpu --bench-copy: copies that stay in L2)
        l2_range=(10000.0, 5500.0),  # l2_gbs at the fast and the slow corner of the range
        l2_lat_ns=300.0,    # L2 hit latency under load
        eff_simt=0.50,      # SIMT FP32 matmul: fraction of fp32_tflops
        gap_us=2.0,         # GPU idle between two dependent kernels launched one by one into a stream
        graph_gap_us=1.0,   # the same inside a CUDA graph
        sync_us=10.0,       # a host round trip: a synchronous cudaMemcpy of a few bytes (2 per step + 3 uploads)
        pcie_gbs=10.0,      # pageable host-to-device copies (the batch upload)
        eff_lt=0.70,        # cuBLASLt's sm_90 (wgmma, TMA) kernels on a busy SM: fraction of tc_tflops (an 8192^3 bf16
                            # product through PyTorch ran at 769-798 TFLOP/s, 0.78-0.81, on this workplace's H200s:
                            # KINDS.md; the model's products are smaller, with an epilogue, hence less)
        lt_tile=128,        # cuBLASLt's tile edge for its L2 traffic (assumed: 128 x 128; a larger tile reads less)
        lt_in_flight=4,     # k-slabs of 64 a cuBLASLt block keeps in flight (a 5-stage TMA pipeline)
        l2_persist_mb=45.0, # L2 that cudaAccessPolicyWindow may set aside for persisting lines (assumed: 75% of
                            # l2_mb, as the CUDA guide's A100 example, 30 of 40 MB; the device says its own)
    ),
    "v100": dict(
        name="V100 SXM2",
        tc_tflops=125.0, fp32_tflops=15.7, hbm_gbs=900.0, l2_mb=6.0,
        sms=80, mem_gb=32,
        tc_flop_clk=1024,   # 125 TFLOP/s = 80 SMs x 1024 x 1.53 GHz
        clock_ghz=1.53, smem_b_clk=128,
        smem_kb=96, regs_sm=65536, threads_sm=2048, blocks_sm=32,
        regs128=120, regs64=72, regs_simt=64,  # make gpu-regs has no sm_70 with CUDA 13: sm_75's numbers
        regs128w64=214,
        cp_async=False,     # sm_70: the same kernel copies each slab synchronously: one slab in flight
        frag_bytes=1024,    # assumed: sm_70 has no LDSM; HMMA.884 takes its operands replicated in both quad pairs
        mma_sync_frac=1.0,  # Volta's HMMA is its full tensor rate
        pipe_overlap=0.25,  # fewer warps to hide one pipe under the other than on the H200: synchronous slab copies,
                            # 1 block of 8 warps (128x128) or 3 of 4 (64x64) an SM; at 0.5 the hand-written kernel
                            # would run the paper's model at 83k chars/s, faster than the 76k of the paper's cuBLAS
                            # (dev/scaling.md); at 0.25 the paper check gives 109x and 4.0 h, as the paper
        bar_clk=100.0, epi_instr=24,
        mem_eff=0.85, lat_ns=500.0, l2_lat_ns=250.0,
        l2_gbs=2150.0,      # measured 2.16 TB/s: Jia et al. 2018, "Dissecting the NVIDIA Volta GPU architecture via
                            # microbenchmarking"
        l2_range=(2500.0, 1800.0),
        eff_simt=0.60,
        gap_us=3.0, graph_gap_us=1.5, sync_us=10.0, pcie_gbs=8.0,
        eff_lt=None, lt_in_flight=None, lt_tile=None, l2_persist_mb=0.0,  # no wgmma; no persisting L2 before sm_80
    ),
}

# The range of the step time: each corner moves every uncertain constant of the WMMA kernel and
# the memory system the same way (dev/perf_model.py --range).
RANGE = dict(fast=dict(pipe_overlap=0.75, bar_clk=50.0, lat_ns=500.0, eff_lt=0.8),
             slow=dict(pipe_overlap=0.25, bar_clk=200.0, lat_ns=700.0, eff_lt=0.6))

# The run-time switches of train.cu (doc/gpu.md), each a change gpu_check.sh measures on and off.
VARIANTS = {
    "as-is": "train.cu's default (the T-step loops as CUDA graphs, the 128x128 tile at >= 90% of a wave)",
    "direct": "the T-step loops launched one by one (MLSTM_NO_GRAPH=1): gap {gap_us:g} us instead of {graph_gap_us:g}",
    "splitk": "deterministic split-K (MLSTM_SPLITK=1): products with few blocks split K, partials added in a fixed order",
    "overlap": "the dW_h, dW_mh products of finished chunks of time steps on a second stream (MLSTM_OVERLAP=1)",
    "l2": "W_mh pinned in L2 for the time loops, the loss read after backward (MLSTM_L2=1)",
    "warp64": "the 128x128 tile as 4 warps of 64x64, a third fewer fragment reads per mma (MLSTM_WARP64=1)",
    "cublaslt": "cuBLASLt's matmuls (--matmul cublaslt; the mLSTM epilogues as pointwise kernels)",
    "all-wmma": "splitk + overlap + l2 + warp64, the hand-written matmul",
    "all": "splitk + overlap + l2 + cublaslt (warp64 then has no tile to change)",
    "floor": "bound of the sequential algorithm: every matmul at 80% of peak or at full bandwidth, no gaps",
}
SWITCHES = ("splitk", "overlap", "l2", "warp64", "cublaslt")


def variant_flags(variant):
    if variant == "all":
        return set(SWITCHES)
    if variant == "all-wmma":
        return set(SWITCHES) - {"cublaslt"}
    if variant in SWITCHES or variant == "direct":
        return {variant}
    return set()


# ---------------------------------------------------------------------------
# One matmul of train.cu: C (M,N) = A . B, K deep, through matmul_plan()'s tile choice.

SPLIT_MAX, SPLIT_MIN_K = CU["SPLIT_MAX"], CU["SPLIT_MIN_K"]  # split_factor(): at most 8 splits of at least 512


def split_factor(blocks, K, cap):
    """train.cu's split_factor(): double the splits while the blocks fit in `cap` and each split keeps 16 slabs."""
    s, k_slab = 1, CU["WMMA_K_MULTIPLE"]
    while s < SPLIT_MAX and blocks * 2 * s <= cap and K % (k_slab * 2 * s) == 0 and K // (2 * s) >= SPLIT_MIN_K:
        s *= 2
    return s


def tile_plan(M, N, K, g, fp16, splitk=False):
    """train.cu's matmul_plan(): 128x128 if its blocks (x splits) fill >= 90% of a wave, else 64x64, else SIMT.
    Returns (plan, splits)."""
    big, small = CU["TILE_BIG"], CU["TILE_SMALL"]
    if not fp16 or K % CU["WMMA_K_MULTIPLE"]:
        return "simt", 1
    if M % big == 0 and N % big == 0:
        b = (M // big) * (N // big)
        s = split_factor(b, K, 2 * g["sms"]) if splitk else 1
        if b * s * 100 >= g["sms"] * CU["TILE_BIG_MIN_FILL"]:
            return "wmma128", s
    if M % small == 0 and N % small == 0:
        b = (M // small) * (N // small)
        return "wmma64", split_factor(b, K, 4 * g["sms"]) if splitk else 1
    return "simt", 1


def colsum_chunks(rows, cols):
    """train.cu's colsum_chunks: the chunks of rows a column sum is split in."""
    per_block = CU["BLOCK_THREADS"]
    chunks = max(CU["COLSUM_THREADS"] // (-(-cols // per_block) * per_block), CU["COLSUM_MIN_CHUNKS"])
    return chunks if chunks < rows else max(rows, 1)


TILES = {  # BM, BN, WM, WN (a warp's tile), threads; train.cu's WmmaTile and matmul_simt_kernel
    "wmma128": (128, 128, 64, 32, 256),
    "wmma128w64": (128, 128, 64, 64, 128),  # switch warp64
    "wmma64": (64, 64, 32, 32, 128),
    "simt": (64, 64, None, None, 256),
}
BK = 32
# Counted in the sm_90 SASS of train.cu by dev/sass_mix.py (the most of the three layouts; the same
# counts are assumed for sm_70), per warp: the slab loop's instructions besides HMMA, LDSM, LDGSTS
# and the barrier (addresses, stage offsets, loop, commit), per slab; and a split-K block's
# epilogue, its partial sums stored straight from the fragments (STG.64 and their addresses)
SASS_OTHER = {"wmma128": 95, "wmma128w64": 193, "wmma64": 99}
SASS_SPLIT_STORE = {"wmma128": 98, "wmma128w64": 170, "wmma64": 55}


def smem_bytes(plan, stages=3):
    BM, BN = TILES[plan][:2]
    if plan == "simt":
        return 2 * 16 * 68 * 4
    return stages * (BM * (BK + 8) + BN * (BK + 8)) * 2  # 8 halves of padding per row (the NT layout's)


def tile_mix(plan, frag_bytes=512):
    """The WMMA kernel's instructions per warp per 32-deep slab, from its tile: a wmma 16x16x16 is
    2 HMMA.16816, a fragment load one LDSM.x4 (16x16 halves, 512 bytes a warp), a 16-byte cp.async
    one LDGSTS.128; one barrier. The 128x128 tile: 32 HMMA, 12 LDSM, 4 LDGSTS (make gpu-mix counts
    the wmma operations in the PTX: 16 mma and 12 fragment loads per slab). smem: the bytes read by
    the fragment loads plus the slab's fill."""
    BM, BN, WM, WN, threads = TILES[plan]
    warps, FM, FN, kk = threads // 32, WM // 16, WN // 16, BK // 16
    return dict(warps=warps, hmma=kk * FM * FN * 2, ldsm=kk * (FM + FN), ldgsts=(BM + BN) * BK * 2 // 16 // threads,
                smem=warps * kk * (FM + FN) * frag_bytes + (BM + BN) * BK * 2, flops=2 * BM * BN * BK)


def blocks_per_sm(plan, g, stages=3):
    """Resident blocks per SM: registers (allocated per warp in units of 256), shared memory, threads."""
    threads = TILES[plan][4]
    regs = g[{"wmma128": "regs128", "wmma128w64": "regs128w64", "wmma64": "regs64"}.get(plan, "regs_simt")]
    per_warp = math.ceil(regs * 32 / 256) * 256
    by_regs = g["regs_sm"] // (per_warp * threads // 32)
    by_smem = g["smem_kb"] * 1024 // (smem_bytes(plan, stages) + 1024)
    return max(1, min(by_regs, by_smem, g["threads_sm"] // threads, g["blocks_sm"]))


def wmma_slab(plan, g, r):
    """Clocks of the SM per slab of one block, with r blocks resident: the tensor pipe (mma.sync at its
    rate), the shared-memory pipe (LDSM reads + cp.async fill at smem_b_clk), the issue slots (4
    schedulers); the shorter pipe hides pipe_overlap of its work under the longer; the barrier
    stall, shared by the r blocks."""
    m = tile_mix(plan, g["frag_bytes"])
    t_tc = m["flops"] / (g["tc_flop_clk"] * g["mma_sync_frac"])
    t_smem = m["smem"] / g["smem_b_clk"]
    t_issue = m["warps"] * (m["hmma"] + m["ldsm"] + m["ldgsts"] + 1 + SASS_OTHER[plan]) / 4
    hi, lo = max(t_tc, t_smem), min(t_tc, t_smem)
    t_pipe = max(hi + (1 - g["pipe_overlap"]) * lo, t_issue)
    return dict(t_tc=t_tc, t_smem=t_smem, t_issue=t_issue, t_pipe=t_pipe, t_slab=t_pipe + g["bar_clk"] / r,
                t_peak=m["flops"] / g["tc_flop_clk"])


def wmma_eff(plan, K, g, r, split=False):
    """The WMMA kernel's fraction of the dense peak when compute-bound, for a K-deep product: K/32
    slabs, then the epilogue: each accumulator staged through shared memory (written and read) and
    epi_instr instructions per element, or a split-K block's partial sums stored from the fragments."""
    BM, BN, threads = TILES[plan][0], TILES[plan][1], TILES[plan][4]
    s = wmma_slab(plan, g, r)
    slabs = K / BK
    if split:
        t_epi = threads // 32 * SASS_SPLIT_STORE[plan] / 4
    else:
        t_epi = 2 * BM * BN * 4 / g["smem_b_clk"] + BM * BN * g["epi_instr"] / (32 * 4)
    return slabs * s["t_peak"] / (slabs * s["t_slab"] + t_epi)


def matmul(name, M, N, K, g, fp16, flags, *, extra_read=0, extra_write=0, out_bytes=4, weight=None,
           weight_in_l2=False, bench=False, stages=3, mlstm_epilogue=False, grid_sms=0):
    """One product. weight: 'A' or 'B', the operand that is a weight matrix (read from DRAM
    every time step in the time loops). mlstm_epilogue: an epilogue cuBLASLt cannot finish itself
    (mh, z, dm: train.cu's EpilogueKind other than EPI_PLAIN). Returns a kernel record (times in us);
    with split-K or cuBLASLt's separate epilogue, the record includes the second kernel (launches = 2).
    grid_sms: a bounded grid (train.cu's grid_bound) on that many SMs, one block each."""
    es = 2 if fp16 else 4  # storage bytes per element of the operands
    lt = "cublaslt" in flags and fp16 and g["eff_lt"]
    plan, splits = tile_plan(M, N, K, g, fp16, splitk="splitk" in flags and not lt)
    if plan == "wmma128" and "warp64" in flags:
        plan = "wmma128w64"
    if lt:
        plan = "cublaslt"
        splits = tile_plan(M, N, K, g, fp16, splitk=True)[1]  # assumed: cuBLASLt splits K as our rule would
    flops = 2.0 * M * N * K
    a_bytes, b_bytes, c_bytes = M * K * es, K * N * es, M * N * out_bytes
    bw = g["hbm_gbs"] * g["mem_eff"]
    # compute: the achievable fraction of peak, on the SMs the grid covers (the last wave's idle SMs)
    if plan == "simt":
        BM, BN, threads, peak, eff, r, bk, in_flight = 64, 64, 256, g["fp32_tflops"], g["eff_simt"], 1, 16, 1
        r = blocks_per_sm("simt", g)
    elif plan == "cublaslt":
        BM = BN = g["lt_tile"]
        peak, eff, r, bk, in_flight = g["tc_tflops"], g["eff_lt"], 1, 64, g["lt_in_flight"]
    else:
        BM, BN = TILES[plan][:2]
        r = blocks_per_sm(plan, g, stages)
        # a small grid leaves fewer blocks on an SM than fit (mh, dm, dh at B <= 256: 256 blocks of the
        # 64x64 tile on 132 SMs, 2 an SM, not 7): the barrier stall is shared by those, and a bounded grid
        # (switch overlap's weight gradients beside the loop) runs one block an SM
        resident_per_sm = 1 if grid_sms else min(r, math.ceil(math.ceil(M / BM) * math.ceil(N / BN) * splits
                                                               / g["sms"]))
        peak, eff, bk = g["tc_tflops"], wmma_eff(plan, K / splits, g, resident_per_sm, split=splits > 1), BK
        in_flight = (stages - 1) if g["cp_async"] else 1
    blocks = math.ceil(M / BM) * math.ceil(N / BN) * splits
    sms = grid_sms or g["sms"]  # a bounded grid: the SMs it may hold
    waves = math.ceil(blocks / sms)
    util = blocks / (waves * sms) * sms / g["sms"]
    t_compute = flops / (peak * 1e12 * eff * util) * 1e6
    # L2 -> SM: each block reads its BM x K and K x BN slabs through L2, M N K es (1/BM + 1/BN) bytes in all
    # (twice the DRAM bytes of a weight for every 64 rows of the batch at the 64x64 tile)
    l2_bytes = flops / 2 * es * (1 / BM + 1 / BN)
    t_l2 = l2_bytes / (g["l2_gbs"] * 1e9) * 1e6
    # memory, two limits. Bandwidth: every operand read once from DRAM (L2 absorbs the tiles'
    # re-reads), the output and epilogue tensors written once. Latency (Little's law): a block
    # walks its K in slabs and keeps in_flight of them in flight, so it needs slabs x latency /
    # in_flight, per wave of resident blocks. The latency is DRAM's when the slabs stream a weight
    # that does not stay in L2 (the per-step products: W_h's 134 MB stream evicts W_mh between
    # steps), L2's for the matmul benchmark's repeated small operands and a pinned W_mh.
    resident = min(blocks, sms if grid_sms else r * g["sms"])
    from_l2 = (bench and a_bytes + b_bytes <= 0.8 * g["l2_mb"] * 1e6) or (weight_in_l2 and weight)
    lat = g["l2_lat_ns"] if from_l2 else g["lat_ns"]
    t_latency = math.ceil(blocks / resident) * math.ceil(K / splits / bk) * lat * 1e-3 / in_flight
    dram = a_bytes + b_bytes
    if weight_in_l2 and weight:
        dram -= a_bytes if weight == "A" else b_bytes
    epi = extra_read + extra_write  # the epilogue's own tensors
    # a second, bandwidth-bound kernel: split-K's fixed-order sum of the FP32 partials, or the mLSTM
    # epilogue cuBLASLt cannot fuse (the product in an FP32 scratch, then epilogue_kernel). The product
    # writes mid bytes, the second kernel reads them back and writes the outputs; it starts when the
    # product has finished (same stream), so its time adds to the product's.
    mid = splits * M * N * 4 if splits > 1 else 0
    if plan == "cublaslt" and mlstm_epilogue:
        mid = max(mid, M * N * 4)
    second = mid + epi + c_bytes if mid else 0
    dram += mid if mid else c_bytes + epi
    t_memory = max(t_latency, dram / (bw * 1e9) * 1e6)
    t_second = second / (bw * 1e9) * 1e6
    if g["cp_async"] or plan == "simt":
        t = max(t_compute, t_memory, t_l2)
    else:  # synchronous slab copies: a block waits, then computes; co-resident blocks hide part of it
        t = max(t_compute, t_memory, t_l2) + min(t_compute, t_memory) / math.ceil(resident / g["sms"])
    bound = ("l2" if t_l2 > max(t_compute, t_memory) else "compute" if t_compute >= t_memory
             else "latency" if t_latency * 1e-6 * bw * 1e9 > dram else "memory")
    t += t_second
    t_memory += t_second
    dram += second
    launches = 2 if mid else 1
    return dict(name=name, kind="matmul", plan=plan + ("/%d" % splits if splits > 1 else ""), blocks=blocks,
                flops=flops, bytes=dram, t_compute=t_compute, t_memory=t_memory, t_l2=t_l2, l2_bytes=l2_bytes, t=t,
                bound=bound, launches=launches, eff=eff, per_sm=r)


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
# One training step of train.cu (model_step, model_check, model_apply), world = 1.

OVERLAP_CHUNKS = CU["OVERLAP_CHUNKS"]  # the backward loop in 4 chunks of T/4 steps; dW_h, dW_mh of each on stream 2
OVERLAP_LT_SM_DIVISOR = CU["OVERLAP_LT_SM_DIVISOR"]  # beside the loop: ours 1 block an SM, cuBLASLt 1/2 the SMs


def step_kernels(g, B, T=T_DEFAULT, fp16=True, variant="as-is"):
    """[(kernel record, count per step)], in launch order."""
    flags = variant_flags(variant)
    N = B * T
    X = 2 if fp16 else 4  # floatX
    F = 4
    BH = B * H
    np_ = param_count()
    l2 = "l2" in flags and g["l2_persist_mb"] * 1e6 >= H * H * X
    ks = []
    add = lambda k, n=1: ks.append((k, n))
    mm = lambda *a, **kw: matmul(*a, **kw)
    # ---- forward
    add(host("upload batch (3 pageable H2D copies)", 3 * (g["sync_us"] + N / (g["pcie_gbs"] * 1e3))))
    add(stream("weightnorm_fwd W_x, W_h, W_mx, W_mh; to_x W_out",
               F * (5 * H * D + 5 * H * H) + F * 10 * H + F * V * H,
               X * (5 * H * D + 5 * H * H + V * H) + F * 10 * H, g, launches=5))
    add(stream("embed_fwd", N * 1 + V * D * F, N * D * X, g))
    add(mm("zx = e W_x^T + b", N, 4 * H, D, g, fp16, flags, out_bytes=F, extra_read=4 * H * F))
    add(mm("mx = e W_mx^T", N, H, D, g, fp16, flags, out_bytes=X))
    add(stream("to_x h0; copy c0", BH * F + BH * F, BH * X + BH * F, g, launches=2))
    add(mm("mh = h W_mh^T; m = mx*mh  [per t]", B, H, H, g, fp16, flags, out_bytes=X,
           extra_read=BH * X + B, extra_write=BH * X, weight="B", weight_in_l2=l2, mlstm_epilogue=True), T)
    # z_t += m_t W_h^T in place (FP32, kept for backward): a plain accumulating epilogue, cuBLASLt's beta = 1
    add(mm("z = zx + m W_h^T  [per t]", B, 4 * H, H, g, fp16, flags, out_bytes=F, extra_read=4 * BH * F,
           weight="B"), T)
    add(stream("cell_fwd  [per t]", 4 * BH * F + BH * F + B, BH * X + BH * F, g), T)
    add(mm("logits = h W_out^T + b", N, V, H, g, fp16, flags, out_bytes=F, extra_read=V * F))
    add(stream("softmax_xent", N * V * F + N, N * V * X + N * F, g))
    add(stream("reduce loss", N * F, 0, g))
    # with l2 on, the loss is read after backward, with the gradients' overflow flag: one host round trip fewer
    add(host("loss to host (2 D2H copies, a sync)", 0.0 if l2 else 2 * g["sync_us"], 0 if l2 else 1))
    add(stream("to_f32 h; copy c", BH * X + BH * F, 2 * BH * F, g, launches=2))
    # ---- backward
    add(stream("memset grads", 0, np_ * F, g))
    add(mm("dW_out = dlogits^T h", V, H, N, g, fp16, flags))
    chunks = colsum_chunks(N, V)
    add(stream("colsum b_out (2 kernels)", N * V * X + chunks * V * F, chunks * V * F + V * F, g, launches=2))
    add(mm("dhs = dlogits W_out", N, H, V, g, fp16, flags, out_bytes=X))
    add(stream("memset dh, dc", 0, 2 * BH * F, g, launches=2))
    # the gates recomputed from the FP32 z_t (4 BH F), with dh, dc, c_prev, c, dhs
    add(stream("cell_bwd  [per t]", 4 * BH * F + 4 * BH * F + BH * X + B, 4 * BH * X + BH * F, g), T)
    add(mm("dm = dz W_h; dmx, dmh  [per t]", B, H, 4 * H, g, fp16, flags, out_bytes=X,
           extra_read=2 * BH * X + B, extra_write=BH * X, weight="B", mlstm_epilogue=True), T)
    add(mm("dh = dmh W_mh  [per t]", B, H, H, g, fp16, flags, out_bytes=F, weight="B", weight_in_l2=l2), T)
    loop_end = len(ks)
    add(mm("dW_h = dz^T m", 4 * H, H, N, g, fp16, flags))
    add(mm("dW_x = dz^T e", 4 * H, D, N, g, fp16, flags))
    add(mm("dW_mx = dmx^T e", H, D, N, g, fp16, flags))
    add(mm("dW_mh = dmh^T h", H, H, N, g, fp16, flags))
    add(stream("colsum b (2 kernels)", N * 4 * H * X, colsum_chunks(N, 4 * H) * 4 * H * F, g, launches=2))
    add(mm("dxe = dz W_x", N, D, 4 * H, g, fp16, flags))
    add(mm("dxe += dmx W_mx", N, D, H, g, fp16, flags, extra_read=N * D * F))
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
    if "overlap" in flags and T % OVERLAP_CHUNKS == 0:
        ks = overlap_wgrad(ks, loop_end, g, B, T, fp16, flags)
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


def overlap_wgrad(ks, loop_end, g, B, T, fp16, flags):
    """dW_h and dW_mh in OVERLAP_CHUNKS chunks of T/4 time steps (K = B T/4 rows each), on a second
    stream at the lowest priority as the backward loop finishes each chunk's steps, accumulated in a
    fixed order (train.cu's wgrad_chunk). The first chunks-1 run beside the loop on a bounded grid: the
    hand-written kernel one block an SM (alone on its SM while the loop's products wait on memory),
    cuBLASLt planned for sms / OVERLAP_LT_SM_DIVISOR SMs (its blocks take a whole SM each). They use
    what the loop's products leave idle of the pipes (1 - the share of the loop's time those products
    compute); beyond that they take it from the loop, whose compute-bound products share those SMs, and
    the loop is that much longer. What they have not done when the loop ends runs after it, still
    bounded; then the last chunk, on the whole GPU."""
    C = OVERLAP_CHUNKS
    loop = [(k, n) for k, n in ks[:loop_end] if n == T and k["name"].startswith(("cell_bwd", "dm =", "dh ="))]
    t_loop = sum(k["t"] * n for k, n in loop)
    busy = sum(min(k["t_compute"], k["t"]) * n for k, n in loop if k["kind"] == "matmul")
    avail = t_loop * (C - 1) / C  # the loop's time after its first chunk
    spare = max(0.0, t_loop - busy) * (C - 1) / C  # of it, the pipes' idle time (whole-GPU time)
    lt = "cublaslt" in flags and fp16 and g["eff_lt"]
    bound = max(1, g["sms"] // OVERLAP_LT_SM_DIVISOR) if lt else g["sms"]
    share = bound / g["sms"]  # the share of the GPU the bounded grid holds
    out = []
    for k, n in ks:
        if k["name"] in ("dW_h = dz^T m", "dW_mh = dmh^T h"):
            M, Nn = (4 * H, H) if k["name"].startswith("dW_h") else (H, H)
            beside = matmul(k["name"], M, Nn, B * T // C, g, fp16, flags, grid_sms=bound)
            last = matmul(k["name"], M, Nn, B * T // C, g, fp16, flags)
            work = beside["t"] * (C - 1)
            hidden = min(work, avail)
            avail -= hidden
            taken = share * hidden  # whole-GPU pipe time the bounded grid used beside the loop
            stolen = max(0.0, taken - spare)
            spare = max(0.0, spare - taken)
            name = k["name"] + " (%d of %d chunks beside the loop on %d SMs, %.0f%% of them hidden; the last after)" % (
                C - 1, C, bound, 100 * hidden / work)
            k = dict(last, name=name, t=stolen + (work - hidden) + last["t"],
                     launches=(C - 1) * beside["launches"] + last["launches"] + 2,
                     bytes=beside["bytes"] * (C - 1) + last["bytes"], flops=last["flops"] * C)
        out.append((k, n))
    return out


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
    act = (nW + V * H) * X + nW * F + N * D * X + N * 4 * H * F + 3 * N * H * X \
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
    letter = dict(compute="C", memory="M", latency="L", host="H", launch="-", issue="I", l2="L2")
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


def variant_applies(v, g):
    """A change the GPU can take: no cuBLASLt wgmma before sm_90 here, no persisting L2 before sm_80."""
    if v in ("cublaslt", "all") and not g["eff_lt"]:
        return False
    if v == "l2" and g["l2_persist_mb"] * 1e6 < H * H * 2:
        return False
    return True


def variants_table(gk, batches, T, fp16):
    g = GPUS[gk]
    print("| change | " + " | ".join("B=%d ms (MFU)" % b for b in batches) + " |")
    print("|---|" + "--:|" * len(batches))
    for v, what in VARIANTS.items():
        if not variant_applies(v, g):
            continue
        cells = []
        for B in batches:
            s = summarize(step_kernels(g, B, T, fp16, v), B, T, g)
            cells.append("%.1f (%.0f%%)" % (s["t_ms"], 100 * s["mfu"]))
        print("| %s: %s | %s |" % (v, what.format(**g), " | ".join(cells)))


def with_constants(g, changes):
    """A copy of GPU g with some constants changed (the range's corners; none the GPU lacks)."""
    c = dict(g)
    c.update({k: v for k, v in changes.items() if g.get(k) is not None})
    return c


def corner(g, which):
    """GPU g at the range's fast or slow corner: RANGE's constants, and its own l2_range."""
    return with_constants(g, dict(RANGE[which], l2_gbs=g["l2_range"][0 if which == "fast" else 1]))


def step_range(g, B, T, fp16=True, variant="as-is"):
    """(nominal, fast corner, slow corner) summaries of one step."""
    return [summarize(step_kernels(gg, B, T, fp16, variant), B, T, gg) for gg in (g, corner(g, "fast"),
                                                                                  corner(g, "slow"))]


def range_table(gk, batches, T, fp16):
    g = GPUS[gk]
    print("| change | " + " | ".join("B=%d: ms (range), MFU (range)" % b for b in batches) + " |")
    print("|---|" + "---|" * len(batches))
    for v in VARIANTS:
        if v in ("direct", "floor") or not variant_applies(v, g):
            continue
        cells = []
        for B in batches:
            n, f, sl = step_range(g, B, T, fp16, v)
            cells.append("%.0f (%.0f-%.0f), %.0f%% (%.0f-%.0f%%)" % (n["t_ms"], f["t_ms"], sl["t_ms"], 100 * n["mfu"],
                                                                   100 * sl["mfu"], 100 * f["mfu"]))
        print("| %s | %s |" % (v, " | ".join(cells)))


def mix_table(gpus):
    """The WMMA tiles' instruction mix and what it allows, per GPU."""
    print("| GPU | tile | HMMA.16816 | LDSM.x4 | LDGSTS.128 | smem bytes | tensor clk | smem clk | issue clk |"
          " pipes clk | blocks/SM | slab clk | eff, K=4096 | eff, K=131072 |")
    print("|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
    for gk in gpus:
        g = GPUS[gk]
        for plan in ("wmma128", "wmma128w64", "wmma64"):
            m, r = tile_mix(plan, g["frag_bytes"]), blocks_per_sm(plan, g)
            sl = wmma_slab(plan, g, r)
            print("| %s | %s | %d | %d | %d | %d | %.0f | %.0f | %.0f | %.0f | %d | %.0f | %.3f | %.3f |" % (
                g["name"], plan, m["hmma"], m["ldsm"], m["ldgsts"], m["smem"], sl["t_tc"], sl["t_smem"], sl["t_issue"],
                sl["t_pipe"], r, sl["t_slab"], wmma_eff(plan, 4096, g, r), wmma_eff(plan, 131072, g, r)))


def bench_shapes(B, T):
    """step_shapes() (harness/gpu_harness.cu): the matmul benchmark's shapes (FP32 output, no epilogue)."""
    N = B * T
    return [("zx", N, 4 * H, D), ("mx", N, H, D), ("mh", B, H, H), ("z", B, 4 * H, H), ("logits", N, V, H),
            ("dW_out", V, H, N), ("dhs", N, H, V), ("dm", B, H, 4 * H), ("dh", B, H, H), ("dW_h", 4 * H, H, N),
            ("dW_x", 4 * H, D, N), ("dW_mx", H, D, N), ("dW_mh", H, H, N), ("dxe", N, D, 4 * H), ("dxe2", N, D, H)]


PER_STEP = ("mh", "z", "dm", "dh")  # the products of the time loops (B rows), benchmarked at 2, 3 and 4 stages
KERNELS = (("mh", "mh = h W_mh^T"), ("z", "z = zx + m W_h^T"), ("cell_fwd", "cell_fwd"), ("cell_bwd", "cell_bwd"),
           ("dm", "dm = dz W_h"), ("dh", "dh = dmh W_mh"))  # test_gpu --bench-kernels's names, and the model's


def predict_lines(gk, batches, T):
    """What dev/gpu_check.sh compares with the benchmark's bench_step, bench_kernel and bench_matmul lines."""
    g = GPUS[gk]
    print("predict_bandwidth gpu=%s dram_gbs=%.0f l2_gbs=%.0f l2_fast=%.0f l2_slow=%.0f" % (
        gk, g["hbm_gbs"] * g["mem_eff"], g["l2_gbs"], g["l2_range"][0], g["l2_range"][1]))
    for fp16 in (True, False):
        for B in batches:
            n, f, sl = step_range(g, B, T, fp16)
            print("predict_step gpu=%s precision=%s B=%d step_ms=%.2f chars_per_s=%.0f tflops=%.2f mfu=%.4f"
                  " fast_ms=%.2f slow_ms=%.2f" % (gk, "FP16" if fp16 else "FP32", B, n["t_ms"], n["chars_per_s"],
                                                  n["tflops"], n["mfu"], f["t_ms"], sl["t_ms"]))
    for B in batches:
        for v in ("direct",) + SWITCHES + ("all-wmma", "all"):
            if not variant_applies(v, g):
                continue
            s = summarize(step_kernels(g, B, T, True, v), B, T, g)
            print("predict_variant gpu=%s precision=FP16 B=%d variant=%s step_ms=%.2f mfu=%.4f" % (gk, B, v, s["t_ms"],
                                                                                                  s["mfu"]))
    for B in batches:
        ks = step_kernels(g, B, T, True)
        for short, prefix in KERNELS:
            k = next(k for k, n in ks if k["name"].startswith(prefix))
            print("predict_kernel gpu=%s B=%d what=%s plan=%s us=%.2f bound=%s" % (gk, B, short, k["plan"] or "cell",
                                                                                  k["t"], k["bound"]))
        print("predict_kernel gpu=%s B=%d what=time_step plan=- us=%.2f bound=-" % (
            gk, B, sum(k["t"] for k, n in ks if n == T and k["kind"] != "gap") + 6 * g["graph_gap_us"]))
    for B in batches:
        for name, M, N, K in bench_shapes(B, T):
            for stages in ((2, 3, 4) if name in PER_STEP else (3,)):
                k = matmul(name, M, N, K, g, True, set(), bench=True, stages=stages)
                print("predict_matmul gpu=%s B=%d what=%s M=%d N=%d K=%d plan=%s stages=%d ms=%.4f bound=%s" % (
                    gk, B, name, M, N, K, k["plan"], stages, k["t"] / 1e3, k["bound"]))


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
    ap.add_argument("--range", action="store_true", help="expected step time and MFU with their range, per change")
    ap.add_argument("--mix", action="store_true", help="the WMMA tiles' instruction mix and the efficiency it gives")
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
        settable = [k for k, v in GPUS["h200"].items() if k != "name" and not isinstance(v, tuple)]  # (l2_range: a pair)
        if not sep or key not in settable:
            ap.error("--set %s: expected KEY=VALUE with KEY one of %s" % (kv, ", ".join(settable)))
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
    elif a.range:
        for gk in gpus:
            print("\n%s, %s; nominal constants (fast corner - slow corner: %s)\n" % (
                GPUS[gk]["name"], "FP16" if fp16 else "FP32",
                "; ".join(["%s %s - %s" % (k, RANGE["fast"][k], RANGE["slow"][k]) for k in RANGE["fast"]]
                          + ["l2_gbs %s - %s" % GPUS[gk]["l2_range"]])))
            range_table(gk, batches, a.seq_len, fp16)
    elif a.mix:
        mix_table(gpus)
    elif a.variants:
        for gk in gpus:
            print("\n%s, %s\n" % (GPUS[gk]["name"], "FP16" if fp16 else "FP32"))
            variants_table(gk, batches, a.seq_len, fp16)
    else:
        summary_table(gpus, batches, a.seq_len, fp16, a.variant)
    return 0


if __name__ == "__main__":
    sys.exit(main())

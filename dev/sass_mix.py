#!/usr/bin/env python3
"""dev/sass_mix.py: the WMMA kernels' instruction mix as the GPU runs it (sm_90 SASS), for
dev/perf_model.py's SASS_OTHER and SASS_SPLIT_STORE.

    python3 dev/sass_mix.py [CUOBJDUMP]

Compiles train.cu (FP16 build) for sm_90 to a cubin, disassembles it with cuobjdump (the CUDA
toolkit's, or the one in PyPI's nvidia-cuda-cuobjdump wheel: pip install nvidia-cuda-cuobjdump,
then give its bin/cuobjdump) and prints, for each matmul_wmma_kernel at the training depth (3
stages), per warp per 32-deep slab: the slab loop's instructions (the backward branch whose body
holds the HMMAs), HMMA, LDSM, LDGSTS, BAR and the rest; and a split-K block's epilogue, the
instructions from the end of the slab loop to the first EXIT (its partial sums stored from the
fragments), with their STG count. Static counts are the dynamic ones here: neither the slab loop's
body nor that epilogue has a branch inside."""
import collections
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TILE = {"128ELi128ELi64ELi32": "wmma128", "128ELi128ELi64ELi64": "wmma128w64", "64ELi64ELi32ELi32": "wmma64"}
LAYOUT = {"Lb0ELb1": "NT", "Lb0ELb0": "NN", "Lb1ELb0": "TN"}


def instructions(body):
    """[(address, opcode)] of one function's SASS."""
    out = []
    for line in body.split("\n"):
        m = re.match(r"\s*/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;", line)
        if m:
            words = m.group(2).split()
            op = words[1] if words[0].startswith("@") and len(words) > 1 else words[0]
            out.append((int(m.group(1), 16), op, m.group(2)))
    return out


def slab_loop(ins):
    """The instructions of the loop whose body holds the most HMMAs."""
    best = []
    for i, (addr, op, text) in enumerate(ins):
        m = re.search(r"\bBRA (0x[0-9a-f]+)", text)
        if op == "BRA" and m and int(m.group(1), 16) < addr:
            body = [x for x in ins[: i + 1] if x[0] >= int(m.group(1), 16)]
            if sum(x[1].startswith("HMMA") for x in body) > sum(x[1].startswith("HMMA") for x in best):
                best = body
    return best


def main():
    cuobjdump = sys.argv[1] if len(sys.argv) > 1 else shutil.which("cuobjdump") or "/usr/local/cuda/bin/cuobjdump"
    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    for tool in (cuobjdump, nvcc):
        if not os.access(tool, os.X_OK):
            sys.exit("sass_mix: %s not found or not executable (see the usage in this file)" % tool)
    with tempfile.TemporaryDirectory() as tmp:
        cubin = os.path.join(tmp, "train.cubin")
        subprocess.run([nvcc, "-O3", "-std=c++17", "-I" + ROOT, "-D_GNU_SOURCE", "-arch=sm_90", "-cubin",
                        os.path.join(ROOT, "train.cu"), "-o", cubin], check=True)
        sass = subprocess.run([cuobjdump, "-sass", cubin], check=True, capture_output=True, text=True).stdout
    print("| kernel | layout | slab loop | HMMA | LDSM | LDGSTS | BAR | other | split-K epilogue | its STG |")
    print("|---|---|--:|--:|--:|--:|--:|--:|--:|--:|")
    for part in re.split(r"\n\s*Function : ", sass)[1:]:
        name, body = part.split("\n", 1)
        if "matmul_wmma_kernel" not in name or "Li3ELb0EE" not in name:  # 3 stages, not the bounded grid's
            continue
        tile = next((t for k, t in TILE.items() if "ILi" + k in name), "?")
        layout = next((v for k, v in LAYOUT.items() if k in name), "?")
        ins = instructions(body)
        loop = slab_loop(ins)
        c = collections.Counter(op.split(".")[0] for _, op, _ in loop)
        known = c["HMMA"] + c["LDSM"] + c["LDGSTS"] + c["BAR"]
        epilogue = []
        for x in ins[ins.index(loop[-1]) + 1:]:
            epilogue.append(x)
            if x[1] == "EXIT":
                break
        stg = sum(op.startswith("STG") for _, op, _ in epilogue)
        print("| %s | %s | %d | %d | %d | %d | %d | %d | %d | %d |" % (tile, layout, len(loop), c["HMMA"], c["LDSM"],
              c["LDGSTS"], c["BAR"], len(loop) - known, len(epilogue), stg))


if __name__ == "__main__":
    main()

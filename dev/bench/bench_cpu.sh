#!/usr/bin/env bash
# The CPU trainer's speed in one run, as ratios measured side by side (dev/bench/cpu-perf.md):
#  - ./train's training step (forward, backward, clip, Adam) at H = 256, 1024 (B = 32, 128) and 4096 (B = 64):
#    chars/s (the median step after the first), GFLOP/s (3 x mlstm.h's flops_per_char per char) and its fraction
#    of the machine's large-SGEMM rate (2048x4096.4096x1024) on the same threads, with both BLASes: Intel MKL
#    (through PyPI's PyTorch) and OpenBLAS (through Debian's), each measured just before and just after each row;
#    "best" is the highest of the four, the OpenBLAS ratio the higher of its two (a machine whose speed moves, as
#    shared VMs' does, cannot flatter the step);
#  - the same step in PyTorch (dev/bench/bench_torch.py, its best thread setup) at H = 256, 1024, in both: PyPI's
#    torch (MKL), eager and through torch.compile (each compile about 2 minutes on 2 cores, not timed), and
#    Debian's python3-torch (OpenBLAS); the ratio is against the better of PyPI's two;
#  - the BF16 columns: ./train --bf16's step (gemm.h's AMX-BF16 or vdpbf16ps kernel, or its much slower emulation
#    where the CPU has neither: the trainer warns), against ./train's FP32 step, PyPI's PyTorch under bf16 autocast
#    (the one line a user adds), eager and compiled, at H <= 1024, and the machine's BF16 GEMM rate through PyPI's
#    torch (oneDNN/MKL);
#  - the peak RSS of ./train and ./train --bf16 at H=4096, B=128, T=256 (one step);
#  - for each row at H <= 1024, dev/bench/step_vs_sgemm.c: where the step's time goes, phase by phase (the
#    recurrent products, the input projections, the weight gradients, the cell, softmax, the output layer, weight
#    norm, packing, the gradient check, clip and Adam, the threads' waiting), each with its FLOPs or bytes and its
#    rate against its bound (the row's best SGEMM for the products, a streaming triad's bandwidth for the rest),
#    and the whole step against SGEMM in CPU time (with OpenBLAS's sgemm too where libopenblas-dev is installed).
# PyPI's PyTorch lives in the virtual environment $TORCH_VENV (default build/torch-venv), which the first run
# makes: python3 -m venv, then pip install torch numpy (about 5 GB: the x86 wheel brings CUDA libraries, unused
# here). Debian's: apt-get install python3-torch libopenblas0-pthread (run on OpenBLAS whatever libblas.so.3
# the system selects).
#   dev/bench/bench_cpu.sh            (33 minutes on 2 cores shared with other work, 2026-12-01)
#   dev/bench/bench_cpu.sh --quick    (H = 256 and 1024 only: no H=4096 rows, no peak RSS; with the breakdowns,
#                                      34 minutes on 2 cores shared with other work and a test suite, 2026-12-01)
set -euo pipefail
cd "$(dirname "$0")/../.."
main() {  # all of it in one function: bash reads it whole, so editing the file mid-run is harmless
quick=0
case "${1:-}" in
    --quick) quick=1 ;;
    "") ;;
    *) echo "bench_cpu: unknown flag $1 (usage: dev/bench/bench_cpu.sh [--quick])" >&2; exit 2 ;;
esac
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

# the two PyTorches: Debian's on OpenBLAS, PyPI's (MKL) in a virtual environment made here on first use
obdir=/usr/lib/x86_64-linux-gnu/openblas-pthread
deb=(/usr/bin/python3)
[ -d "$obdir" ] && deb=(env "LD_LIBRARY_PATH=$obdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" /usr/bin/python3)
"${deb[@]}" -c 'import torch' 2>/dev/null ||
    { echo "bench_cpu: /usr/bin/python3 cannot import torch: apt-get install python3-torch libopenblas0-pthread" >&2
      exit 2; }
venv=${TORCH_VENV:-build/torch-venv}
if ! "$venv/bin/python" -c 'import torch' 2>/dev/null; then
    echo "bench_cpu: making $venv with PyPI's PyTorch (python3 -m venv; pip install torch numpy: about 5 GB) ..." >&2
    { /usr/bin/python3 -m venv "$venv" && "$venv/bin/pip" install -q torch numpy >&2 &&
      "$venv/bin/python" -c 'import torch'; } ||
        { echo "bench_cpu: cannot make the virtual environment $venv with PyPI's torch (see pip's message above;" \
               "apt-get install python3-venv, or set TORCH_VENV to a venv that has torch)" >&2; exit 2; }
fi
pypi=("$venv/bin/python")

make -s build/train >/dev/null
# the breakdown's program: train.c's step with fast.h's phases timed; OpenBLAS's sgemm beside gemm.h's where it links
svs_flags=(-O3 -march=native -ffp-contract=fast -fno-math-errno -std=c11 -D_GNU_SOURCE -fopenmp -I.
           dev/bench/step_vs_sgemm.c -o "$tmp/svs")
${CC:-cc} "${svs_flags[@]}" -DUSE_CBLAS -lopenblas -lm 2>/dev/null || ${CC:-cc} "${svs_flags[@]}" -lm
for py in pypi deb; do  # which PyTorch and BLAS each is; bench_torch.py stops on a BLAS that is neither
    declare -n cmd=$py
    "${cmd[@]}" dev/bench/bench_torch.py sgemm --threads 1 --repeats 1 > "$tmp/$py.txt" || exit 2
    head -n 1 "$tmp/$py.txt"
done
# Debian's OpenBLAS on the newest kernels the CPU's flags allow, for step_vs_sgemm's sgemm too: where the library's own
# pick is older (a CPU model it does not know), bench_torch.py runs it with OPENBLAS_CORETYPE and says so in its line
coretype=$(sed -n '1s/.* OPENBLAS_CORETYPE=\([A-Za-z0-9]*\).*/\1/p' "$tmp/deb.txt")
[ -z "$coretype" ] || export OPENBLAS_CORETYPE=$coretype
# "PyPI torch 2.15.0 + MKL": the version less its +cu..., the BLAS as bench_torch.py's sgemm line names it
label() { awk 'NR == 1 { v = $2; sub(/\+.*/, "", v) } /^sgemm/ { print v " + " $3 }' "$tmp/$1.txt"; }
pypi_label="PyPI torch $(label pypi)"; deb_label="Debian torch $(label deb)"
pypi_blas=${pypi_label##* }; deb_blas=${deb_label##* }
sgemm_pypi() { "${pypi[@]}" dev/bench/bench_torch.py sgemm --threads "$1" | awk '/^sgemm/ { print $(NF-4) }'; }
sgemm_deb() { "${deb[@]}" dev/bench/bench_torch.py sgemm --threads "$1" | awk '/^sgemm/ { print $(NF-4) }'; }
bf16gemm_pypi() { "${pypi[@]}" dev/bench/bench_torch.py sgemm --bf16 --threads "$1" | awk '/^bf16gemm/ { print $(NF-4) }'; }
torch_cps() {  # python H B T threads steps [--bf16] [--compile]: chars/s of the best thread setup
    declare -n cmd=$1
    "${cmd[@]}" dev/bench/bench_torch.py step --hidden "$2" --batch "$3" --seq-len "$4" --threads "$5" --steps "$6" \
        "${@:7}" |
        tee -a "$tmp/torch.txt" | awk '/^torch H=/ { print $(NF-3) }'
}

# ./train's median chars/s over the steps after the first (the first touches every buffer)
train_cps() {  # H B T steps threads [--bf16]
    ./build/train --hidden "$1" --embed 64 --batch "$2" --seq-len "$3" --steps "$4" --threads "$5" --print-every 1000 \
        --val-every 0 --val-steps 1 --sample-len 0 --corpus-bytes 4000000 --out "$tmp/b" --overwrite ${6:+"$6"} \
        >/dev/null ||
        { echo "bench_cpu: ./build/train failed at H=$1 B=$2 T=$3 on $5 threads" >&2; kill $$; }
    awk '$1 == "train" && $2 > 1 { print $NF }' "$tmp/b/train.log" | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'
}
fpc() { echo "3 * 2 * (5 * $1 * 64 + 5 * $1 * $1 + 256 * $1)" | bc; }  # training FLOPs per char
max() { printf '%s\n' "$@" | sort -g | tail -n 1; }
rows=()
configs="256 32 64 12|256 128 64 6|1024 32 64 5|1024 128 64 3"
[ $quick = 1 ] || configs="$configs|4096 64 64 2"
IFS='|' read -ra cfgs <<< "$configs"
for cfg in "${cfgs[@]}"; do
    read -r H B T steps <<< "$cfg"
    for th in 1 2; do
        echo "measuring H=$H B=$B T=$T on $th thread(s) ..." >&2
        mb=$(sgemm_pypi "$th"); ob=$(sgemm_deb "$th")
        cps=$(train_cps "$H" "$B" "$T" "$steps" "$th")
        bcps=$(train_cps "$H" "$B" "$T" "$steps" "$th" --bf16)
        ma=$(sgemm_pypi "$th"); oa=$(sgemm_deb "$th"); bgemm=$(bf16gemm_pypi "$th")
        best=$(max "$mb" "$ma" "$ob" "$oa"); obest=$(max "$ob" "$oa")
        gf=$(echo "$cps * $(fpc "$H") / 10^9" | bc -l)
        bgf=$(echo "$bcps * $(fpc "$H") / 10^9" | bc -l)
        mcps=-; mccps=-; mvs=-; dcps=-; dvs=-; abcps=-; abccps=-; abvs=-
        if [ "$H" -le 1024 ]; then
            tsteps=$([ "$H" -le 256 ] && echo 6 || echo 3)
            # PyPI's torch eager and through torch.compile (the better of the two is the peer), FP32 and bf16 autocast
            mcps=$(torch_cps pypi "$H" "$B" "$T" "$th" "$tsteps")
            mccps=$(torch_cps pypi "$H" "$B" "$T" "$th" "$tsteps" --compile)
            dcps=$(torch_cps deb "$H" "$B" "$T" "$th" "$tsteps")
            mvs=$(printf '%.2fx' "$(echo "$cps / $(max "$mcps" "$mccps")" | bc -l)")
            dvs=$(printf '%.2fx' "$(echo "$cps / $dcps" | bc -l)")
            abcps=$(torch_cps pypi "$H" "$B" "$T" "$th" "$tsteps" --bf16)
            abccps=$(torch_cps pypi "$H" "$B" "$T" "$th" "$tsteps" --bf16 --compile)
            abvs=$(printf '%.2fx' "$(echo "$bcps / $(max "$abcps" "$abccps")" | bc -l)")
        fi
        fmt='| %s | %s | %s | %s | %.0f | %.1f | %.1f / %.1f | %.1f / %.1f | %.2f | %.2f | %s / %s | %s | %s | %s |'
        fmt+=' %.0f | %.2fx | %.1f | %.2f | %s / %s | %s |'
        if [ "$H" -le 1024 ]; then  # the breakdown, against this row's best SGEMM
            echo "measuring the phases of H=$H B=$B T=$T on $th thread(s) ..." >&2
            { echo; "$tmp/svs" "$H" "$B" "$T" "$((steps > 4 ? 4 : steps))" "$th" "$best"; } >> "$tmp/phases.txt"
        fi
        rows+=("$(printf "$fmt" \
                  "$H" "$B" "$T" "$th" "$cps" "$gf" "$mb" "$ma" "$ob" "$oa" "$(echo "$gf / $best" | bc -l)" \
                  "$(echo "$gf / $obest" | bc -l)" "$mcps" "$mccps" "$mvs" "$dcps" "$dvs" \
                  "$bcps" "$(echo "$bcps / $cps" | bc -l)" "$bgemm" "$(echo "$bgf / $bgemm" | bc -l)" \
                  "$abcps" "$abccps" "$abvs")")
    done
done

echo
echo "| H | B | T | threads | train.c chars/s | GFLOP/s | SGEMM $pypi_blas GFLOP/s before / after" \
     "| SGEMM $deb_blas before / after | step / best SGEMM | step / $deb_blas SGEMM" \
     "| $pypi_label chars/s eager / compiled | train.c / the better | $deb_label chars/s | train.c / it" \
     "| train.c --bf16 chars/s | --bf16 / FP32 | BF16 GEMM $pypi_blas GFLOP/s | --bf16 step / BF16 GEMM" \
     "| $pypi_label bf16 autocast chars/s eager / compiled | --bf16 / the better |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
printf '%s\n' "${rows[@]}"
echo
echo "PyTorch thread setups tried:"
grep -E '^  setup|^torch H=' "$tmp/torch.txt" | sed 's/^/  /'
echo
echo "Where the step's time goes (dev/bench/step_vs_sgemm.c, after each row above; the SGEMM bound is the row's best):"
cat "$tmp/phases.txt"
if [ $quick = 0 ]; then
    for precision in "" --bf16; do
        echo "measuring the peak RSS: one step at H=4096 B=128 T=256, 2 threads${precision:+, $precision} (minutes)" >&2
        rss=$( { /usr/bin/time -f 'RSS %M' ./build/train --hidden 4096 --embed 64 --batch 128 --seq-len 256 --steps 1 \
                 --threads 2 --val-every 0 --val-steps 1 --sample-len 0 --corpus-bytes 4000000 --out "$tmp/r" \
                 --overwrite ${precision:+"$precision"} >/dev/null; } 2>&1 | awk '/^RSS/ { print $2 }')
        printf 'peak RSS of ./build/train%s at H=4096 B=128 T=256: %.2f GiB\n' "${precision:+ $precision}" \
            "$(echo "$rss / 1024 / 1024" | bc -l)"
    done
fi
}
main "$@"

#!/usr/bin/env bash
# transfer_eval.sh: the whole sentiment transfer evaluation in one command
# (doc/transfer.md): featurise train/val/test with the model, sweep the L1 logistic
# regression's C on val, report on test, and draw the chosen unit's heat map.
#
#   tools/transfer_eval.sh [-o OUTDIR] [--] CKPT DATA [featurize options]
#
# CKPT: a checkpoint of train/train.cu, or one written by build/import_npy, or a run
#              directory (its best model, DIR/best.ckpt).
# DATA:
#   builtin      the built-in corpus's labelled documents (2000 per split; --docs N)
#   DIR          a directory with train, val and test, each as NAME.csv (the SST binary
#                files: label,sentence), NAME.jsonl (add --threshold X for ratings) or
#                NAME/ (the IMDB layout: NAME/pos/*.txt, NAME/neg/*.txt)
# Writes OUTDIR (default out/transfer): train.feat val.feat test.feat, report.txt (the
# classifier's table and result), summary.txt (key=value), heatmap.html, heatmap.png.
# The programs are taken from build/ next to this script, built first if needed (BUILD=dir: from
# there, as they are). Every name is passed as a name, even one that starts with '-'.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=${BUILD:-$here/../build}
usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; }  # the comment above
out=out/transfer
if [ "${1:-}" = "-h" ] || [ "${1:-}" = "--help" ]; then usage; exit 0; fi
if [ "${1:-}" = "-o" ]; then
    [ $# -ge 2 ] || { usage >&2; echo "error: -o needs a value (the output directory)" >&2; exit 2; }
    out=$2; shift 2
fi
if [ "${1:-}" = "--" ]; then shift; fi
if [ $# -lt 2 ]; then usage >&2; echo "error: need CKPT and DATA" >&2; exit 2; fi
ckpt=$1; data=$2; shift 2
if [ -z "${BUILD:-}" ]; then  # build/transfer made or brought up to date here, so a fresh clone runs this as it is
    make -s -C "$here/.." build/transfer > /dev/null ||
        { echo "error: cannot build build/transfer (HINT: apt-get install libjansson-dev liblinear-dev)" >&2; exit 2; }
fi
for p in transfer; do
    [ -x "$bin/$p" ] || { echo "error: $bin/$p not found (HINT: run make)" >&2; exit 2; }
done
[ -e "$ckpt" ] || { echo "error: cannot open checkpoint $ckpt" >&2; exit 2; }  # a file or a run directory

declare -A input
for s in train val test; do
    if [ "$data" = builtin ]; then input[$s]="builtin:$s"
    elif [ -f "$data/$s.csv" ]; then input[$s]="$data/$s.csv"
    elif [ -f "$data/$s.jsonl" ]; then input[$s]="$data/$s.jsonl"
    elif [ -f "$data/$s.json" ]; then input[$s]="$data/$s.json"
    elif [ -d "$data/$s/pos" ]; then input[$s]="$data/$s"
    else
        echo "error: $data has no $s split ($s.csv, $s.jsonl or $s/pos + $s/neg)" \
             "(HINT: DATA is builtin or such a directory)" >&2
        exit 2
    fi
done
mkdir -p -- "$out"
start=$(date +%s)
for s in train val test; do
    "$bin/transfer" featurize -m "$ckpt" -o "$out/$s.feat" "$@" -- "${input[$s]}"
done
"$bin/transfer" classify --summary "$out/summary.txt" -- "$out/train.feat" "$out/val.feat" "$out/test.feat" |
    tee -- "$out/report.txt"
get() { sed -n "s/^$1=//p" -- "$out/summary.txt"; }
"$bin/transfer" heatmap -m "$ckpt" --unit "$(get unit)" --sign "$(get sign)" --center "$(get unit_threshold)" \
    -o "$out/heatmap" "$@" -- "${input[test]}"
echo "transfer_eval: $ckpt on $data: test accuracy $(get test_acc), unit $(get unit) alone $(get unit_test_acc);" \
     "$(( $(date +%s) - start )) s; results in $out/" | tee -a -- "$out/report.txt"

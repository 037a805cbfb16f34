#!/usr/bin/env bash
# Plots a training log (doc/formats.md, "Training log") into a PNG with gnuplot:
# train and validation bits per character against step, and the learning rate.
#   tools/plot_log.sh out/train.log [out/train.png]
set -euo pipefail
log=${1:?usage: tools/plot_log.sh LOG [PNG]}
png=${2:-${log%.log}.png}
[ -r "$log" ] || { echo "error: cannot read log $log" >&2; exit 2; }
grep -q '^train ' "$log" || { echo "error: $log has no 'train' lines" >&2; exit 2; }
command -v gnuplot > /dev/null || { echo "error: gnuplot not found (apt-get install gnuplot-nox)" >&2; exit 2; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
grep '^train ' "$log" > "$tmp/train"
grep '^val ' "$log" > "$tmp/val" || true
gnuplot <<GP
set terminal pngcairo size 900,600 font "sans,10"
set output "$png.tmp"
set multiplot layout 2,1 title "$(basename "$log")"
set grid
set ylabel "bits per character"
set key top right
plot "$tmp/train" using 2:6 with lines lw 1 lc rgb "#9ecae1" title "train (each step)", \
     "$tmp/train" using 2:6 smooth bezier lw 2 lc rgb "#08519c" title "train (smoothed)", \
     $( [ -s "$tmp/val" ] && echo "\"$tmp/val\" using 2:5 with linespoints pt 7 lw 2 lc rgb \"#d62728\" title \"validation\"" || echo "1/0 notitle" )
set ylabel "learning rate"
set xlabel "step"
set format y "%.1e"
set yrange [0:*]
plot "$tmp/train" using 2:4 with lines lw 2 lc rgb "#2ca02c" title "lr"
unset multiplot
GP
mv "$png.tmp" "$png"
echo "wrote $png"

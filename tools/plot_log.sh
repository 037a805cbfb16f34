#!/usr/bin/env bash
# Plots a training log (doc/formats.md, "Training log") into a PNG with gnuplot:
# train and validation bits per character against step, and the learning rate.
#   tools/plot_log.sh out/train.log [out/train.png]
# The file names reach gnuplot as ARG1..ARG4 of `gnuplot -c` (no shell, no gnuplot
# parsing), so any character in them is just a character. The PNG appears whole.
set -euo pipefail
log=${1:?usage: tools/plot_log.sh LOG [PNG]}
png=${2:-${log%.log}.png}
[ -r "$log" ] || { echo "error: cannot read log $log" >&2; exit 2; }
grep -q '^train ' "$log" || { echo "error: $log has no 'train' lines" >&2; exit 2; }
command -v gnuplot > /dev/null || { echo "error: gnuplot not found (apt-get install gnuplot-nox)" >&2; exit 2; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"; rm -f "$png.tmp.$$"' EXIT
grep '^train ' "$log" > "$tmp/train"
grep '^val ' "$log" > "$tmp/val" || true
cat > "$tmp/plot.gp" <<'GP'
# ARG1: the PNG, ARG2: train lines, ARG3: val lines ("" for none), ARG4: the title
set terminal pngcairo size 900,600 font "sans,10" noenhanced
set output ARG1
set multiplot layout 2,1 title ARG4
set grid
set ylabel "bits per character"
set key top right
if (strlen(ARG3) > 0) {
    plot ARG2 using 2:6 with lines lw 1 lc rgb "#9ecae1" title "train (each step)", \
         ARG2 using 2:6 smooth bezier lw 2 lc rgb "#08519c" title "train (smoothed)", \
         ARG3 using 2:5 with linespoints pt 7 lw 2 lc rgb "#d62728" title "validation"
} else {
    plot ARG2 using 2:6 with lines lw 1 lc rgb "#9ecae1" title "train (each step)", \
         ARG2 using 2:6 smooth bezier lw 2 lc rgb "#08519c" title "train (smoothed)"
}
set ylabel "learning rate"
set xlabel "step"
set format y "%.1e"
set yrange [0:*]
plot ARG2 using 2:4 with lines lw 2 lc rgb "#2ca02c" title "lr"
unset multiplot
GP
val="$tmp/val"; [ -s "$val" ] || val=""
gnuplot -c "$tmp/plot.gp" "$png.tmp.$$" "$tmp/train" "$val" "$(basename -- "$log")"
mv -f -- "$png.tmp.$$" "$png"
echo "wrote $png"

#!/usr/bin/env bash
# Draws the learning-rate rules side by side for a few global batches into a PNG,
# from the tables of build/schedule_table (so the picture is the code's own
# numbers, not a re-implementation). Needs gnuplot (Debian: apt-get install gnuplot-nox).
#
#   make build/schedule_table && dev/plot_schedules.sh [out.png]     (default doc/schedules.png)
#
# Settings: each preset's defaults; one epoch = 40 GB in 256-byte sequences (the
# paper's corpus), so the step axis is that of a run on the paper's data.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-doc/schedules.png}
table=${BUILD:-build}/schedule_table
command -v gnuplot >/dev/null || { echo "error: gnuplot not found (apt-get install gnuplot-nox)" >&2; exit 2; }
[ -x "$table" ] || { echo "error: $table not found; run make first" >&2; exit 2; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
batches=128,1024,8192,32768
for rule in puri legw linear sqrt constant; do
    "$table" --lr-schedule "$rule" --batch "$batches" --steps 2000000 --log > "$tmp/$rule.dat"
done

# the temporary directory's name reaches gnuplot as ARG1 of `gnuplot -c`, never parsed
cat > "$tmp/plot.gp" <<'GP'
set terminal pngcairo size 1500,900 font "DejaVu Sans,10"
set output ARG1."/out.png"
set multiplot layout 2,3 title "learning rate vs applied step, presets' defaults (base 5e-4 at B0 = 128; 1 epoch = 40 GB / 256 B = 1.5625e8 sequences)"
set logscale xy
set format x "10^{%L}"
set format y "10^{%L}"
set xrange [1:2e6]
set yrange [1e-6:0.3]
set grid
set key bottom center
set xlabel "applied step"
set ylabel "learning rate"
batch(i) = word("128 1024 8192 32768", i)
do for [rule in "puri legw linear sqrt constant"] {
    name = rule eq "puri" ? "puri (Puri et al. 2018, reconstructed)" : \
           rule eq "legw" ? "legw (You et al. 2019)" : \
           rule eq "linear" ? "linear (Goyal et al. 2017)" : rule eq "sqrt" ? "sqrt scaling" : "constant"
    set title name
    plot for [i=1:4] ARG1."/".rule.".dat" using 1:(column(i+1) > 0 ? column(i+1) : NaN) \
         with lines lw 2 title "B = ".batch(i)
}
set title "all rules at B = 8192 (k = 64)"
plot for [rule in "puri legw linear sqrt constant"] ARG1."/".rule.".dat" \
     using 1:(column(4) > 0 ? column(4) : NaN) with lines lw 2 title rule
unset multiplot
GP
gnuplot -c "$tmp/plot.gp" "$tmp"
mkdir -p -- "$(dirname -- "$out")"
mv -f -- "$tmp/out.png" "$out.tmp.$$" && mv -f -- "$out.tmp.$$" "$out"   # whole or nothing, also across file systems
echo "wrote $out"

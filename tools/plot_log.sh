#!/usr/bin/env bash
# Plots a training log (doc/formats.md, "Training log") into a PNG with gnuplot:
# train and validation bits per character against step, and the learning rate.
#   tools/plot_log.sh [--] out/train.log [out/train.png]
# The file names reach gnuplot as ARG1..ARG4 of `gnuplot -c` (no shell, no gnuplot
# parsing), so any character in them is just a character, and a name that starts with
# '-' is a name. The PNG appears whole, as the project's programs write their outputs
# (util.h, AtomicFile): through a symbolic link, keeping the replaced file's mode, and
# never over the log itself or anything but a regular file.
set -euo pipefail
[ "${1:-}" = "--" ] && shift
log=${1:?usage: tools/plot_log.sh [--] LOG [PNG]}
png=${2:-${log%.log}.png}
[ -r "$log" ] || { echo "error: cannot read log $log" >&2; exit 2; }
[ "$png" -ef "$log" ] && { echo "error: PNG $png is the log $log itself (the plot would overwrite it)" >&2; exit 2; }
grep -q -e '^train ' -- "$log" || { echo "error: $log has no 'train' lines" >&2; exit 2; }
command -v gnuplot > /dev/null || { echo "error: gnuplot not found (apt-get install gnuplot-nox)" >&2; exit 2; }
target=$png  # the file the PNG replaces: followed through symbolic links, link by link
for _ in $(seq 40); do
    [ -L "$target" ] || break
    link=$(readlink -- "$target")
    case $link in /*) target=$link ;; *) target=$(dirname -- "$target")/$link ;; esac
done
[ -L "$target" ] && { echo "error: cannot write $png: too many levels of symbolic links" >&2; exit 2; }
if [ -e "$target" ] && [ ! -f "$target" ]; then
    echo "error: cannot write $png: it is not a regular file; an output replaces only a regular file" >&2; exit 2
fi
tmp=$(mktemp -d); trap 'rm -rf "$tmp"; rm -f -- "$target.tmp.$$"' EXIT
grep -e '^train ' -- "$log" > "$tmp/train"
grep -e '^val ' -- "$log" > "$tmp/val" || true
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
gnuplot -c "$tmp/plot.gp" "$target.tmp.$$" "$tmp/train" "$val" "$(basename -- "$log")"
[ -f "$target" ] && chmod --reference="$target" -- "$target.tmp.$$"
mv -f -- "$target.tmp.$$" "$target"
echo "wrote $png"

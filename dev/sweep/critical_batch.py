#!/usr/bin/python3
"""The critical batch of a set of sweep runs, from their logs alone (dev/sweep/README.md,
"The critical batch"): how many steps each batch needs to reach a train loss, with the
fit S = S_min (1 + B_n / B) of McCandlish et al. 2018, and the simple gradient noise
scale B_simple = tr(Sigma) / |G|^2 from the logged gradient norms, against the loss.

    dev/sweep/critical_batch.py --out PREFIX [--rule legw] [--targets 1.5,1.2] DIR...

DIR are sweep directories (runs/<rule>_k<k>.log[.gz] and .out). Writes PREFIX.md and,
with gnuplot, PREFIX.png (steps to target against B, log-log, with the fit and the
perfect-scaling line) and PREFIX-noise.png (B_simple against train bpc). Standard
library only.

Both measurements read the train loss in blocks of the same number of characters at
every batch (sweep_report.blocks, 8192): one step's loss is one batch's, 32 characters
at B0 = 4 sequences of 8. A run's log or its thinned log (dev/sweep/thin_logs.py) give
the same blocks.
"""
import argparse
import math
import os
import re
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sweep_report as rep  # noqa: E402  (log reading, the t table, gnuplot)

def die(msg):
    print("error: " + msg, file=sys.stderr)
    sys.exit(2)


def read_runs(dirs, rule):
    """Every finished run of `rule` in the sweep directories, as blocks (sweep_report.blocks:
    from the log, or the thinned log); the same k and seed twice is refused."""
    runs, seen = [], {}
    for d in dirs:
        runs_dir = os.path.join(d, "runs")
        if not os.path.isdir(runs_dir):
            die("%s has no runs/ directory (is it a sweep directory?)" % d)
        for name in rep.run_names(runs_dir):
            r = rep.read_run_blocks(runs_dir, name)
            if r["rule"] != rule or r["status"] != "done":
                continue
            r["seed"] = r["seed"] if r["seed"] is not None else 1
            key = (r["k"], r["seed"])
            if key in seen:
                die("%s and %s are the same run (k %d, seed %d): a run counts once" % (seen[key], d, key[0], key[1]))
            seen[key] = d
            runs.append(r)
    if not runs:
        die("no finished %s run in %s" % (rule, ", ".join(dirs)))
    return runs


def steps_to(blocks, target):
    """The step at which the train bpc first reaches target: between the middle steps of the
    first block whose mean is at or below it and the block before, interpolated linearly in
    bpc (a block is 256 steps at B0: the interpolation gives the crossing within one). None if
    no block reaches it."""
    mid = lambda b: b[0] - (b[6] - 1) / 2.0
    for i, b in enumerate(blocks):
        if b[4] <= target:
            if i == 0:
                return mid(b)
            a = blocks[i - 1]
            return mid(a) + (mid(b) - mid(a)) * (a[4] - target) / (a[4] - b[4])
    return None


def fit_critical(points):
    """Least squares in log S of S = S_min (1 + B_n / B) over (B, S) points: for each B_n
    on a fine log grid, log S_min is the mean of log S - log(1 + B_n / B); the B_n with
    the smallest residual wins. Returns (S_min, B_n, rms of log residual)."""
    best = None
    for i in range(-400, 801):
        bn = 10 ** (i / 100.0)
        res = [math.log(s) - math.log(1 + bn / b) for b, s in points]
        ls = sum(res) / len(res)
        err = math.sqrt(sum((x - ls) ** 2 for x in res) / len(res))
        if best is None or err < best[2]:
            best = (math.exp(ls), bn, err)
    return best


def noise_scale(pts):
    """B_simple from (B, mean |G_B|^2) points: E|G_B|^2 = |G|^2 + tr(Sigma) / B, fitted by
    least squares in 1/B; B_simple = tr(Sigma) / |G|^2 in the units of B. None where the
    fit is not positive (too few batches, or the norms do not fall with B)."""
    if len({b for b, _ in pts}) < 3:  # two batches fit any line exactly: no check of the form
        return None
    xs, ys = [1.0 / b for b, _ in pts], [y for _, y in pts]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    g2 = my - slope * mx
    if slope <= 0 or g2 <= 0:
        return None
    return slope / g2


def bin_means(run, centre, half):
    """Mean |G_B|^2 over the steps of the blocks whose mean bpc is within half of centre (None if none)."""
    g = [(b[5] * b[5], b[6]) for b in run["blocks"] if abs(b[4] - centre) <= half and math.isfinite(b[5])]
    n = sum(w for _, w in g)
    return sum(x * w for x, w in g) / n if n else None


def fmt_ci(xs, digits=0):
    m, ci = rep.mean_ci(xs)
    f = "%%.%df" % digits
    return (f % m) + ((" ± " + f % ci) if ci is not None else "") + " (%d)" % len(xs)


def main(argv):
    p = argparse.ArgumentParser(prog="dev/sweep/critical_batch.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="PREFIX: writes PREFIX.md and the PNGs")
    p.add_argument("--rule", default="legw", help="the rule whose runs are measured")
    p.add_argument("--targets", default="1.5,1.2", help="train bpc targets for steps-to-target, comma-separated")
    p.add_argument("--bins", default="2.0,1.8,1.6,1.5,1.4,1.3,1.2,1.1,1.0,0.9,0.8,0.7,0.6",
                   help="train bpc at which the noise scale is measured (each +-0.05)")
    p.add_argument("dirs", nargs="+", help="sweep directories")
    o = p.parse_args(argv)
    try:
        targets = [float(x) for x in o.targets.split(",") if x]
        bins = [float(x) for x in o.bins.split(",") if x]
    except ValueError:
        die("--targets and --bins take comma-separated numbers")
    with rep.unpacked([o.out] + o.dirs) as paths:  # a packed experiment: its pages from its archive
        o.out, o.dirs = paths[0], paths[1:]
        return page(o, targets, bins)


def page(o, targets, bins):
    """Writes o.out.md and its plots from the runs of o.dirs."""
    runs = read_runs(o.dirs, o.rule)
    T = runs[0]["T"]
    if any(r["T"] != T for r in runs):
        die("the runs differ in T (sequence length): batches in sequences are not comparable")
    ks = sorted({r["k"] for r in runs})
    seeds = sorted({r["seed"] for r in runs})
    B_of = {r["k"]: r["B"] for r in runs}
    lines = ["# The critical batch of the %s runs" % o.rule, "",
             "Regenerated by `dev/sweep/critical_batch.py --out %s %s` from the run logs alone (dev/sweep/README.md, "
             "\"The critical batch\"). %d runs: k = %s, seeds %s, T = %d. The train loss is read in blocks of %d "
             "characters (the block's mean; a step is placed at its block's middle)." % (
                 o.out, " ".join(o.dirs), len(runs), ",".join(map(str, ks)), ",".join(map(str, seeds)), T,
                 rep.BLOCK_CHARS), ""]
    # 1. steps to target, and the fit
    lines += ["## Steps to a train loss", "",
              "Steps until a block's mean train bpc first reaches the target: mean over seeds, with the 95% interval "
              "where 2 or more. The fit is S = S_min (1 + B_n / B) to every run's S by least squares in log S "
              "(McCandlish et al. 2018); perfect scaling is S(B0) B0 / B. With B_n in sequences, B_n T is the same "
              "in characters. A batch well below B_n buys k times fewer steps for k times the batch; well above it, "
              "almost nothing.", "",
              "| target bpc | " + " | ".join("B=%d (k=%d)" % (B_of[k], k) for k in ks)
              + " | S_min | B_n (sequences) | B_n (characters) | rms log error |",
              "|---|" + "---|" * (len(ks) + 4)]
    fits = {}
    for tgt in targets:
        cells, pts = [], []
        for k in ks:
            ss = [steps_to(r["blocks"], tgt) for r in runs if r["k"] == k]
            got = [s for s in ss if s is not None]
            pts += [(B_of[k], s) for s in got]
            cells.append(fmt_ci(got) if got and len(got) == len(ss) else
                         ("not reached (%d of %d)" % (len(ss) - len(got), len(ss)) if len(got) < len(ss) else "-"))
        if len({b for b, _ in pts}) < 2:
            lines.append("| %g | %s | - | - | - | - |" % (tgt, " | ".join(cells)))
            continue
        smin, bn, err = fit_critical(pts)
        fits[tgt] = (smin, bn, pts)
        lines.append("| %g | %s | %.0f | %.0f | %.0f | %.3f |" % (tgt, " | ".join(cells), smin, bn, bn * T, err))
    # 2. the noise scale against the loss, per seed and pooled
    half = 0.05
    lines += ["", "## The gradient noise scale against the loss", "",
              "B_simple = tr(Sigma) / |G|^2 (McCandlish et al. 2018, their B_simple), from the logged gradient norm "
              "before clipping: at a given train bpc (blocks whose mean is within ±%g), each run's mean |G_B|^2 over "
              "those steps "
              "against 1/B, fitted by E|G_B|^2 = |G|^2 + tr(Sigma)/B (least squares over the runs' points). Runs at "
              "different B pass the same loss at different parameters and learning rates, so this is an estimate "
              "of the scale, not a measurement at one point. Per seed: each seed's batches alone (their spread shows "
              "how uncertain one fit is); pooled: every run's point in one fit. '-': fewer than three batches reach "
              "the loss, or the fit is not positive." % half, "",
              "| train bpc | batches with a point | B_simple per seed (sequences) | pooled (sequences) | pooled "
              "(characters) |", "|---|---|---|---|---|"]
    noise = []
    for c in bins:
        per_seed = []
        pooled = []
        for s in seeds:
            pts = [(r["B"], bin_means(r, c, half)) for r in runs if r["seed"] == s]
            pts = [(b, y) for b, y in pts if y is not None]
            pooled += pts
            ns = noise_scale(pts)
            if ns is not None:
                per_seed.append(ns)
        ns = noise_scale(pooled)
        have = sorted({b for b, _ in pooled})
        lines.append("| %g | %s | %s | %s | %s |" % (
            c, ",".join(str(b) for b in have) or "-", ", ".join("%.0f" % x for x in per_seed) or "-",
            "%.0f" % ns if ns else "-", "%.0f" % (ns * T) if ns else "-"))
        if ns:
            noise.append((c, ns, per_seed))
    pngs = plots(o.out, fits, noise, runs, ks, B_of, T)
    if pngs:
        lines += [""] + ["![%s](%s)" % (alt, os.path.basename(f)) for f, alt in pngs]
    tmp = o.out + ".md.tmp"
    with open(tmp, "w") as fh:
        fh.write("\n".join(lines) + "\n")
    os.replace(tmp, o.out + ".md")
    print("wrote %s.md%s" % (o.out, "".join(", " + f for f, _ in pngs)))
    return 0


def plots(prefix, fits, noise, runs, ks, B_of, T):
    if not shutil.which("gnuplot"):
        print("note: gnuplot not found (apt-get install gnuplot-nox): wrote the table, no plots", file=sys.stderr)
        return []
    made = []
    outdir = os.path.dirname(prefix) or "."
    base = os.path.basename(prefix)
    head = ['set terminal pngcairo size 900,560 font "sans,11"', 'set grid', 'set key outside right']
    with tempfile.TemporaryDirectory() as tmp:
        cmds = []
        colors = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#7f7f7f"]
        for i, (tgt, (smin, bn, pts)) in enumerate(sorted(fits.items(), reverse=True)):
            fn = os.path.join(tmp, "s%d" % i)
            with open(fn, "w") as fh:
                fh.writelines("%d %g\n" % p for p in pts)
            c = colors[i % len(colors)]
            s1 = [s for b, s in pts if b == B_of[ks[0]]]
            s1 = sum(s1) / len(s1)
            cmds += ['"%s" using 1:2 with points pt 7 ps 1.2 lc rgb "%s" title "bpc %g: each run"' % (fn, c, tgt),
                     '%g * (1 + %g / x) with lines lw 2 lc rgb "%s" title "fit: S_{min} %.0f, B_n %.0f"'
                     % (smin, bn, c, smin, bn),
                     '%g * %d / x with lines dt 2 lw 1.5 lc rgb "%s" title "perfect scaling from B0"'
                     % (s1, B_of[ks[0]], c)]
        if cmds:
            rep.gnuplot(head + ['set output "%s/%s.png.tmp"' % (outdir, base), 'set logscale xy',
                                'set xrange [%g:%g]' % (B_of[ks[0]] / 1.3, B_of[ks[-1]] * 1.3),
                                'set xlabel "global batch B (sequences of %d characters)"' % T,
                                'set ylabel "steps to the target train bpc"',
                                'set title "Steps to a train loss against the batch"', "plot " + ", ".join(cmds)],
                        outdir, base + ".png")
            made.append((prefix + ".png", "steps to the target train bpc against the batch, log-log, with the fit "
                         "S = S_min (1 + B_n / B) and the perfect-scaling line"))
        if noise:
            fn, fs = os.path.join(tmp, "noise"), os.path.join(tmp, "noise_seeds")
            with open(fn, "w") as fh:
                fh.writelines("%g %g\n" % (c, ns) for c, ns, _ in noise)
            with open(fs, "w") as fh:
                fh.writelines("%g %g\n" % (c, x) for c, _, per_seed in noise for x in per_seed)
            lo = min([ns for _, ns, _ in noise] + [x for _, _, p in noise for x in p])
            hi = max(ns for _, ns, _ in noise)
            rep.gnuplot(head + ['set output "%s/%s-noise.png.tmp"' % (outdir, base),
                                'set xlabel "train bits per character (mean of a block)"', 'set xrange [*:*] reverse',
                                'set ylabel "B_{simple} (sequences of %d characters)"' % T, 'set logscale y',
                                'set yrange [%g:%g]' % (lo / 1.5, hi * 10),  # a per-seed fit can be far off: clipped
                                'set title "The gradient noise scale as the loss falls"',
                                'plot "%s" using 1:2 with linespoints lw 2 pt 7 lc rgb "#1f77b4" title "pooled fit", '
                                '"%s" using 1:2 with points pt 6 ps 1.2 lc rgb "#d62728" title "each seed\'s fit"'
                                % (fn, fs)], outdir, base + "-noise.png")
            made.append((prefix + "-noise.png", "the gradient noise scale B_simple against the train bpc, "
                         "log scale"))
    return made


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

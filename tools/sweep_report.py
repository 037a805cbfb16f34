#!/usr/bin/python3
"""Regenerates a sweep's results from its run logs alone: results.md (final
validation bits per character per rule x batch size, 'diverged' where a run
diverged) and, with gnuplot, three PNGs: final val bpc against batch size, the
loss curves at the largest batch, and the learning-rate schedules at the
largest batch (doc/sweep.md).

    tools/sweep_report.py DIR            # DIR holds runs/<rule>_k<k>.log and .out
    tools/sweep_report.py --check LOG    # the divergence test on one log: prints
                                         # "diverged STEP REASON" or "ok", exit 0

Everything comes from the trainer's own files: the log (doc/formats.md,
"Training log") and its stdout (.out: the start-up table, for the batch, the
planned steps and the peak lr). The divergence rule lives here, and
tools/sweep.py imports it, so the sweep stops a run on exactly the test this
report applies afterwards. Standard library only.
"""
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile

RULES = ["linear", "sqrt", "legw", "puri", "constant"]
WINDOW = 20     # train steps averaged by the divergence rule
MARGIN = 1.02   # ... and how far above the first step's loss their mean must be
RUN_RE = re.compile(r"^(?P<rule>[a-z]+)_k(?P<k>\d+)\.log$")


def die(msg):
    print("error: " + msg, file=sys.stderr)
    sys.exit(2)


def parse_float(s):
    try:
        return float(s)  # accepts nan, -nan, inf as C's printf writes them
    except ValueError:
        return float("nan")


def parse_log_lines(lines, train, val):
    """Appends (step, epoch, lr, loss, bpc) to train and (step, epoch, loss, bpc)
    to val. A resumed run appends to its log; if it resumed from a checkpoint older
    than the last line written (a hard kill), steps repeat: a step at or below the
    last one seen rewinds the record to it, so each step is counted once."""
    for line in lines:
        f = line.split()
        if len(f) >= 6 and f[0] == "train":
            step = int(f[1])
            while train and train[-1][0] >= step:
                train.pop()
            while val and val[-1][0] >= step:
                val.pop()
            train.append((step, parse_float(f[2]), parse_float(f[3]), parse_float(f[4]), parse_float(f[5])))
        elif len(f) >= 5 and f[0] == "val":
            step = int(f[1])
            while val and val[-1][0] >= step:
                val.pop()
            val.append((step, parse_float(f[2]), parse_float(f[3]), parse_float(f[4])))


def read_log(path):
    train, val = [], []
    with open(path, errors="replace") as fh:
        parse_log_lines(fh, train, val)
    return train, val


def divergence(train, val, planned_steps=None, window=WINDOW):
    """The rule: a run has diverged at the first step where its train loss (or a
    validation loss) is not finite, or where the mean train loss over the last
    `window` steps is above the first step's loss (the loss went up from where it
    started, for long enough not to be a single bad batch; "above" means by more
    than 2%, so that a run still sitting at the uniform-prediction loss of its
    first steps, give or take batch noise, is not called diverged). The window is
    shortened to the run's length for runs of fewer steps. Returns (step, reason)
    or None."""
    if planned_steps:
        window = max(1, min(window, planned_steps))
    first = None
    total = 0.0
    losses = []
    vi = 0
    for step, _epoch, _lr, loss, _bpc in train:
        while vi < len(val) and val[vi][0] <= step:
            if not math.isfinite(val[vi][2]):
                return val[vi][0], "validation loss %s" % val[vi][2]
            vi += 1
        if not math.isfinite(loss):
            return step, "train loss %s" % loss
        if first is None:
            first = loss
        losses.append(loss)
        total += loss
        if len(losses) > window:
            total -= losses[-window - 1]
        if len(losses) >= window and total / window > MARGIN * first:
            return step, "mean train loss of the last %d steps %.3f > 1.02 x first step's %.3f" % (window, total / window, first)
    for v in val[vi:]:
        if not math.isfinite(v[2]):
            return v[0], "validation loss %s" % v[2]
    return None


def table_value(text, name):
    """A value from the trainer's start-up table (`| name | value |`)."""
    m = re.search(r"^\| %s\s*\| (.*?)\s*\|$" % re.escape(name), text, re.M)
    return m.group(1) if m else None


def read_run(runs_dir, fname):
    m = RUN_RE.match(fname)
    rule, k = m.group("rule"), int(m.group("k"))
    log = os.path.join(runs_dir, fname)
    out = log[:-4] + ".out"
    text = open(out, errors="replace").read() if os.path.exists(out) else ""
    train, val = read_log(log)
    r = {"rule": rule, "k": k, "name": fname[:-4], "train": train, "val": val}
    steps = table_value(text, "steps")
    r["planned"] = int(steps.split()[0]) if steps else None
    batch = table_value(text, "batch")  # "8 rows/rank x 1 ranks = 8, T = 32"
    bm = re.search(r"= (\d+), T = (\d+)", batch or "")
    r["B"] = int(bm.group(1)) if bm else None
    r["T"] = int(bm.group(2)) if bm else None
    spe = table_value(text, "steps per epoch")
    r["steps_per_epoch"] = int(spe) if spe else None
    r["peak"] = table_value(text, "peak lr")
    r["warmup"] = table_value(text, "warmup")
    r["last_step"] = train[-1][0] if train else 0
    d = divergence(train, val, r["planned"])
    final = [v for v in val if v[0] == r["planned"]] if r["planned"] else []
    if d:
        r["status"], r["div_step"], r["div_reason"] = "diverged", d[0], d[1]
    elif final:
        r["status"], r["bpc"] = "done", final[-1][3]
    else:
        r["status"] = "incomplete"
    return r


def fmt_k(r):
    return "B=%d (k=%d)" % (r["B"], r["k"]) if r.get("B") else "k=%d" % r["k"]


def cell(r):
    if r is None:
        return "-"
    if r["status"] == "done":
        return "%.3f" % r["bpc"]
    if r["status"] == "diverged":
        return "diverged (step %d of %s)" % (r["div_step"], r["planned"])
    return "incomplete (step %d of %s)" % (r["last_step"], r["planned"])


def write_table(runs, path, png_names):
    ks = sorted({r["k"] for r in runs})
    rules = [x for x in RULES if any(r["rule"] == x for r in runs)]
    rules += sorted({r["rule"] for r in runs} - set(rules))
    by = {(r["rule"], r["k"]): r for r in runs}
    B0 = None
    for r in runs:
        if r.get("B"):
            B0 = r["B"] // r["k"]
    hdr = ["rule"] + [("B=%d (k=%d)" % (B0 * k, k)) if B0 else "k=%d" % k for k in ks]
    lines = ["# Sweep results", "",
             "Regenerated by `tools/sweep_report.py` from the run logs in `runs/`. "
             "Final validation bits per character (lower is better) after the same number of epochs "
             "at every batch; 'diverged' marks a run stopped by the divergence rule (a non-finite loss, or "
             "the mean train loss of the last %d steps more than 2%% above the first step's loss); '-' was not run." % WINDOW,
             "",
             "| " + " | ".join(hdr) + " |",
             "|" + "|".join(["---"] * len(hdr)) + "|"]
    for rule in rules:
        lines.append("| " + " | ".join([rule] + [cell(by.get((rule, k))) for k in ks]) + " |")
    lines += ["", "Per run: steps, peak learning rate and warmup (from the trainer's start-up table), "
              "the last train loss in bpc (mean of the last %d steps), and why a diverged run was stopped." % WINDOW, "",
              "| run | batch | steps | peak lr | warmup | last train bpc | status |",
              "|---|---|---|---|---|---|---|"]
    for rule in rules:
        for k in ks:
            r = by.get((rule, k))
            if not r:
                continue
            tail = [t[4] for t in r["train"][-WINDOW:]]
            last = ("%.3f" % (sum(tail) / len(tail))) if tail else "-"
            status = r["status"]
            if status == "diverged":
                status = "diverged at step %d: %s" % (r["div_step"], r["div_reason"])
            elif status == "done":
                status = "done: val bpc %.3f" % r["bpc"]
            lines.append("| %s | %s | %s of %s | %s | %s | %s | %s |" % (
                r["name"], r.get("B") or "?", r["last_step"], r["planned"],
                (r["peak"] or "?").split(" at ")[0], r["warmup"] or "?", last, status))
    if png_names:
        lines += [""] + ["![%s](%s)" % (alt, name) for name, alt in png_names]
    tmp = path + ".tmp"
    with open(tmp, "w") as fh:
        fh.write("\n".join(lines) + "\n")
    os.replace(tmp, path)


COLORS = {"linear": "#d62728", "sqrt": "#1f77b4", "legw": "#2ca02c", "puri": "#9467bd", "constant": "#7f7f7f"}


def plots(runs, outdir):
    """Three PNGs with gnuplot; returns [(file name, alt text)]."""
    if not shutil.which("gnuplot"):
        print("note: gnuplot not found (apt-get install gnuplot-nox): wrote the table, no plots", file=sys.stderr)
        return []
    rules = [x for x in RULES if any(r["rule"] == x for r in runs)]
    kmax = max(r["k"] for r in runs)
    largest = [r for r in runs if r["k"] == kmax]
    made = []
    with tempfile.TemporaryDirectory() as tmp:
        # 1. final val bpc against batch size; diverged runs as crosses along the top
        done = [r for r in runs if r["status"] == "done"]
        ymax = max([r["bpc"] for r in done] + [1.0]) * 1.15
        cmds = []
        for rule in rules:
            pts = sorted((r["B"] or r["k"], r["bpc"]) for r in done if r["rule"] == rule)
            fn = os.path.join(tmp, "bpc_%s" % rule)
            with open(fn, "w") as fh:
                fh.writelines("%d %.6f\n" % p for p in pts)
            if pts:
                cmds.append('"%s" using 1:2 with linespoints lw 2 pt 7 lc rgb "%s" title "%s"' % (fn, COLORS.get(rule, "black"), rule))
        div = [r for r in runs if r["status"] == "diverged"]
        if div:
            fn = os.path.join(tmp, "div")
            with open(fn, "w") as fh:
                for r in div:
                    off = 1.0 + 0.04 * rules.index(r["rule"])  # spread rules that diverge at one batch
                    fh.write("%f %f\n" % ((r["B"] or r["k"]) * off, ymax * 0.97))
            cmds.append('"%s" using 1:2 with points pt 2 ps 2.5 lw 3 lc rgb "black" title "diverged (stopped)"' % fn)
        if cmds:
            gp = ['set terminal pngcairo size 900,560 font "sans,11"',
                  'set output "%s/bpc_vs_batch.png.tmp"' % outdir,
                  'set logscale x 2', 'set grid', 'set key outside right',
                  'set xlabel "global batch B (sequences)"', 'set ylabel "final validation bits per character"',
                  'set yrange [0:%f]' % ymax,
                  'set title "Final validation bpc after the same number of epochs"',
                  "plot " + ", ".join(cmds)]
            gnuplot(gp, outdir, "bpc_vs_batch.png")
            made.append(("bpc_vs_batch.png", "final validation bpc against batch size, one line per rule"))
        # 2 and 3. train loss and learning rate against epoch at the largest batch
        B = largest[0].get("B")
        curves, scheds = [], []
        for r in sorted(largest, key=lambda r: rules.index(r["rule"])):
            fn = os.path.join(tmp, "curve_%s" % r["rule"])
            with open(fn, "w") as fh:
                fh.writelines("%g %g %g\n" % (t[1], t[4], t[2]) for t in r["train"] if math.isfinite(t[4]))
            vn = os.path.join(tmp, "val_%s" % r["rule"])
            with open(vn, "w") as fh:
                fh.writelines("%g %g\n" % (v[1], v[3]) for v in r["val"] if math.isfinite(v[3]))
            c = COLORS.get(r["rule"], "black")
            t = r["rule"] + (" (diverged%s)" % (", off the top" if any(x[4] > 10 for x in r["train"]) else "")
                             if r["status"] == "diverged" else "")
            curves.append('"%s" using 1:2 with lines lw 2 lc rgb "%s" title "%s train"' % (fn, c, t))
            if os.path.getsize(vn):
                curves.append('"%s" using 1:2 with points pt 7 ps 1.3 lc rgb "%s" title "%s val"' % (vn, c, r["rule"]))
            scheds.append('"%s" using 1:3 with lines lw 2 lc rgb "%s" title "%s"' % (fn, c, r["rule"]))
        head = ['set terminal pngcairo size 900,560 font "sans,11"', 'set grid', 'set key outside right',
                'set xlabel "epoch"']
        gnuplot(head + ['set output "%s/curves_largest.png.tmp"' % outdir, 'set ylabel "bits per character"',
                        'set key inside top right',
                        'set yrange [0:10]',  # 8 bpc is a uniform guess; a diverged run goes far above
                        'set title "Loss against epochs at the largest batch, B=%s (k=%d)"' % (B, kmax),
                        "plot " + ", ".join(curves)], outdir, "curves_largest.png")
        made.append(("curves_largest.png", "train (lines) and validation (points) bpc against epoch at the largest batch"))
        gnuplot(head + ['set output "%s/schedules_largest.png.tmp"' % outdir, 'set ylabel "learning rate"',
                        'set logscale y', 'set format y "%.0e"',
                        'set title "The learning rate each run used at the largest batch, B=%s (k=%d)"' % (B, kmax),
                        "plot " + ", ".join(scheds)], outdir, "schedules_largest.png")
        made.append(("schedules_largest.png", "learning rate against epoch at the largest batch, one line per rule"))
    return made


def gnuplot(cmds, outdir, name):
    p = subprocess.run(["gnuplot"], input="\n".join(cmds) + "\n", text=True, capture_output=True)
    if p.returncode != 0:
        die("gnuplot failed on %s: %s" % (name, p.stderr.strip()))
    os.replace(os.path.join(outdir, name + ".tmp"), os.path.join(outdir, name))


def report(d):
    runs_dir = os.path.join(d, "runs")
    if not os.path.isdir(runs_dir):
        die("%s has no runs/ directory (is it a sweep directory? see tools/sweep.py)" % d)
    names = sorted(f for f in os.listdir(runs_dir) if RUN_RE.match(f))
    if not names:
        die("%s holds no run logs (<rule>_k<k>.log)" % runs_dir)
    runs = [read_run(runs_dir, f) for f in names]
    runs = [r for r in runs if r["train"]]
    if not runs:
        die("no run log in %s has a 'train' line" % runs_dir)
    pngs = plots(runs, d)
    write_table(runs, os.path.join(d, "results.md"), pngs)
    print("wrote %s%s" % (os.path.join(d, "results.md"), "".join(", " + os.path.join(d, p) for p, _ in pngs)))


def main(argv):
    if len(argv) == 2 and argv[0] == "--check":
        if not os.path.exists(argv[1]):
            die("cannot read log %s" % argv[1])
        train, val = read_log(argv[1])
        d = divergence(train, val)
        print("diverged %d %s" % d if d else "ok")
        return 0
    if len(argv) != 1 or argv[0].startswith("-"):
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        die("usage: tools/sweep_report.py DIR  |  tools/sweep_report.py --check LOG")
    report(argv[0])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

#!/usr/bin/python3
"""The tuned frontier's results and verdicts, from the run logs alone (dev/sweep/README.md,
"The tuned frontier").

    dev/sweep/frontier_report.py ROOT [--legw DIR]

ROOT is the experiment's directory as dev/sweep/frontier.py lays it out (BUDGET/grid/lrX/
seedS, BUDGET/main/seedS, BUDGET/w0/seedS, BUDGET/clip1/seedS, BUDGET/range/xM/seedS,
BUDGET/peak/xM-wW/seedS, BUDGET/peak/puri/seedS). If
ROOT holds the plan (ROOT/plan.json whose root is ROOT), a budget whose planned grid is not
finished gets a page that says so and nothing else.
Every run is read from its log or its thinned log and its .out (sweep_report.read_run_blocks).
Writes ROOT/BUDGET/frontier.md and its plots for each budget, and ROOT/frontier.md: the
verdicts side by side and the k = 64 gap against the budget (with the one-epoch LEGW test
of --legw, default dev/sweep/legw, as a point of its own). Standard library; gnuplot for
the plots.

The definitions (fixed before the runs; dev/sweep/README.md):
- baseline: LEGW at k = 1 at the base lr chosen from the grid (the lowest mean final val
  bpc over the grid's seeds, the seeds every grid lr has); margin: 2% of its mean.
- a rule at k keeps the small batch's accuracy if the 95% interval of its paired
  difference from the baseline (seed by seed) lies below the margin; it is outside if the
  whole interval lies above it; otherwise undecided.
- frontier at k: the alpha (peak = base lr k^alpha, LEGW's warmup and decay) with the
  lowest mean final bpc at k, over the alphas every seed of k finished.
- verdict at a budget (k = 64): 'not testable' if the frontier is outside the margin;
  else 'LEGW confirmed' if LEGW (alpha 0.5) keeps the accuracy; else 'LEGW refuted' if
  the frontier keeps it and LEGW is outside, or if the best alpha is clearly not 0.5
  (the paired interval of LEGW minus the frontier lies above 0); else 'undecided'.
- Puri's claim at Puri's k: confirmed if linear scaling (the range's x k point)
  diverges in 2 or more of its 3 seeds while puri-run finishes within 2% of the frontier
  at that k (the best mean over every schedule run there); the need for a schedule of
  one's own is refuted if sqrt (the range's x sqrt(k) point) or LEGW ends within 2% of
  puri-run's mean or below it.
- At Puri's k, peaks {6, sqrt(k)} x base lr crossed with warmups {0, LEGW's} (the peak group:
  linear decay to 0 over the run in every cell; the corner (6, 0) is puri-run's schedule,
  (sqrt(k), LEGW's warmup) LEGW's), beside the puri rule (NVIDIA's code: the cap 6 x base, no
  warmup, a linear decay over a fixed 100,000 steps), every cell at the same seeds, every
  comparison a paired interval over those seeds:
  - a schedule of one's own is needed if, for puri-run or for the puri rule (the schedules
    of one's own), LEGW minus it lies wholly above the margin; it is not needed if LEGW minus
    each of them lies wholly below the margin; otherwise undecided.
  - the warmup's effect: with minus without warmup, averaged seed by seed over the two peaks;
    the peak's: sqrt(k) minus 6, averaged over the two warmups; their interaction: the
    warmup's effect at sqrt(k) minus at 6. Warmup is what matters if its effect's interval
    excludes 0 and the peak's covers 0; the peak is what matters if the reverse; both
    matter if both exclude 0; neither is resolved if both cover 0.
"""
import math
import os
import re
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sweep_report as rep  # noqa: E402
import critical_batch as crit  # noqa: E402
import frontier as driver  # noqa: E402  (the plan's grid: is it finished?)

MARGIN = rep.CLAIM_MARGIN


def die(msg):
    print("error: " + msg, file=sys.stderr)
    sys.exit(2)


def alpha(rule):
    return 0.5 if rule == "legw" else rep.alpha_of(rule)


def read_budget(d):
    """Every run under one budget's directory: a list of dicts with group, lr (the grid's and
    the range's directory name), seed, rule, k and read_run_blocks' fields."""
    out = []
    for top, subdirs, files in os.walk(d):
        subdirs.sort()
        if os.path.basename(top) != "runs":
            continue
        rel = os.path.relpath(os.path.dirname(top), d).split(os.sep)
        group = rel[0]
        for name in rep.run_names(top):
            r = rep.read_run_blocks(top, name)
            r["group"], r["sub"] = group, rel[1] if len(rel) > 2 else None
            sm = re.match(r"^seed(\d+)$", rel[-1])
            if not sm or (r["seed"] is not None and r["seed"] != int(sm.group(1))):
                die("%s: the run's seed (%s) is not its directory's (%s)" %
                    (os.path.join(top, name), r["seed"], rel[-1]))
            wm = re.search(r"\(([0-9.e-]+) epochs at B0\)", r.get("warmup") or "")
            r["w0"] = float(wm.group(1)) if wm else None
            out.append(r)
    return out


BLOWUP_BPC = 1.0  # a blow-up: a block's mean train bpc this far above the lowest block before it


def blew_up(r):
    """Whether the run's train loss rose far above where it had been: some block's mean bpc more than
    BLOWUP_BPC above the lowest block mean before it. Descriptive, added after the first runs: a run can
    jump from 2.3 to 5 bpc and settle at the unigram level (about 4.3 bpc) without ever going above its
    first loss, which is all the sweep's divergence rule looks for."""
    low = math.inf
    for b in r.get("blocks") or []:
        if b[4] > low + BLOWUP_BPC:
            return True
        low = min(low, b[4])
    return False


def blowups(runs, **want):
    return sum(1 for r in runs if all(r.get(k) == v for k, v in want.items()) and blew_up(r))


def failures(runs, **want):
    """Runs the divergence rule stopped or that blew up (each counted once)."""
    return sum(1 for r in runs if all(r.get(k) == v for k, v in want.items())
               and (r["status"] == "diverged" or blew_up(r)))


def by_seed(runs, **want):
    """{seed: final bpc} of the finished runs matching want; and how many diverged."""
    sel = [r for r in runs if all(r.get(k) == v for k, v in want.items())]
    return ({r["seed"]: r["bpc"] for r in sel if r["status"] == "done"},
            sum(1 for r in sel if r["status"] == "diverged"), len(sel))


def fmt(m, ci, n, signed=False):
    if m is None:
        return "-"
    f = "%+.4f" if signed else "%.4f"
    return (f % m) + (" ± %.4f" % ci if ci is not None else "") + " (%d)" % n


def judge(m, ci, margin):
    """'keeps' / 'outside' / 'undecided' for a paired difference against the margin."""
    if m is None or ci is None:
        return "undecided"
    if m + ci <= margin:
        return "keeps"
    if m - ci > margin:
        return "outside"
    return "undecided"


class GridUnfinished(Exception):
    """The grid has no seed every lr has finished: no base lr yet, so nothing else can be said."""


class Budget:
    def __init__(self, root, name, plan=None):
        self.name, self.dir = name, os.path.join(root, name)
        if plan and name in plan["budgets"]:  # the plan knows the grid's lrs and seeds; the logs only what ran
            lrs, best = driver.grid_lrs(plan, name)
            if best is None:
                raise GridUnfinished("the plan's grid is %s at seeds %s" % (
                    ", ".join(driver.lr_name(x) for x in lrs),
                    ",".join(map(str, plan["budgets"][name]["grid_seeds"]))))
        self.runs = read_budget(self.dir)
        self.grid = {}  # lr -> {seed: bpc}
        for r in self.runs:
            if r["group"] == "grid" and r["rule"] == "legw" and r["k"] == 1:
                lr = float(r["sub"][2:])
                self.grid.setdefault(lr, {})
                if r["status"] == "done":
                    self.grid[lr][r["seed"]] = r["bpc"]
                elif r["status"] == "diverged":
                    self.grid[lr][r["seed"]] = math.inf
        if not self.grid:
            die("%s: no grid runs (grid/lrX/seedS, legw at k = 1)" % self.dir)
        common = set.intersection(*(set(v) for v in self.grid.values()))
        if not common:
            raise GridUnfinished("no seed every grid lr has finished: " + "; ".join(
                "lr %g: seeds %s" % (lr, ",".join(map(str, sorted(v))) or "none")
                for lr, v in sorted(self.grid.items())))
        self.grid_seeds = sorted(common)
        self.grid_mean = {lr: sum(v[s] for s in self.grid_seeds) / len(self.grid_seeds) for lr, v in self.grid.items()}
        self.base = min(self.grid_mean, key=lambda lr: self.grid_mean[lr])
        self.baseline = {s: x for s, x in self.grid[self.base].items() if math.isfinite(x)}
        bm = sum(self.baseline.values()) / len(self.baseline)
        self.bm, self.margin = bm, MARGIN * bm
        used = {rep.parse_float((r.get("base_lr") or "nan").split()[0]) for r in self.runs if r["group"] == "main"
                and r["rule"] == "legw"}
        if used and any(abs(u - self.base) > 1e-5 * self.base for u in used):  # the table prints 6 digits
            die("%s: the main runs used base lr %s, but the grid's best is %g: the grid changed after they ran"
                % (self.dir, ", ".join("%g" % u for u in sorted(used)), self.base))
        main = [r for r in self.runs if r["group"] == "main" and alpha(r["rule"]) is not None]
        self.alphas = sorted({alpha(r["rule"]) for r in main})
        # the ks of the alphas: every k with alpha runs but Puri's k (the range's: legw and puri-run there have
        # a section of their own); the full ks ran every alpha, the others some (alphas_at)
        puri_k = {r["k"] for r in self.runs if r["group"] == "range"}
        self.ks = sorted({1} | {r["k"] for r in main} - puri_k)
        self.full_ks = [k for k in self.ks if k == 1 or self.alphas_at(k) == self.alphas]

    def alphas_at(self, k):
        """The alphas with main runs at k."""
        return sorted({alpha(r["rule"]) for r in self.runs if r["group"] == "main" and r["k"] == k
                       and alpha(r["rule"]) is not None})

    def cell(self, a, k):
        """{seed: bpc}, diverged count, runs of alpha a at k (k = 1: the baseline, every alpha)."""
        if k == 1:
            return dict(self.baseline), 0, len(self.grid[self.base])
        rule = "legw" if a == 0.5 else "alpha%g" % a
        return by_seed(self.runs, group="main", rule=rule, k=k)

    def frontier(self, k):
        """(alpha, {seed: bpc}) with the lowest mean at k among the alphas with every run finished."""
        best = None
        for a in self.alphas:
            v, ndiv, n = self.cell(a, k)
            if not v or ndiv or len(v) < n:
                continue
            m = sum(v.values()) / len(v)
            if best is None or m < best[2]:
                best = (a, v, m)
        return (best[0], best[1]) if best else (None, {})

    def verdict(self, k=64):
        a_f, f = self.frontier(k)
        legw, ndiv, n = self.cell(0.5, k)
        fm, fci, fp = rep.paired_ci(f, self.baseline)
        lm, lci, lp = rep.paired_ci(legw, self.baseline)
        dm, dci, dp = rep.paired_ci(legw, f) if a_f is not None and a_f != 0.5 else (0.0, 0.0, [])
        fj, lj = judge(fm, fci, self.margin), judge(lm, lci, self.margin) if not ndiv else "outside"
        if a_f is None or lm is None:
            v = "not run"
        elif k not in self.full_ks:  # no frontier: the rules need every alpha at k
            v = "no verdict (alphas %s alone)" % ", ".join("%g" % a for a in self.alphas_at(k))
        elif fj == "outside":
            v = "not testable at this budget"
        elif lj == "keeps":
            v = "LEGW confirmed"
        elif (fj == "keeps" and lj == "outside") or (dci is not None and dm - dci > 0):
            v = "LEGW refuted"
        else:
            v = "undecided"
        return {"k": k, "alphas": self.alphas_at(k), "frontier_alpha": a_f, "frontier": (fm, fci, len(fp)),
                "frontier_judge": fj,
                "legw": (lm, lci, len(lp)), "legw_judge": lj, "legw_minus_frontier": (dm, dci, len(dp)),
                "verdict": v}


def grid_section(b):
    lines = ["## The base learning rate at k = 1", "",
             "LEGW at k = 1, final validation bpc: the mean over the grid's seeds (%s), its 95%% interval, and each "
             "lr's paired difference from the best (negative: better). The best is the base lr of every other run "
             "here; its runs are the baseline." % ",".join(map(str, b.grid_seeds)), "",
             "| base lr | mean final bpc | - best (paired) |", "|---|---|---|"]
    for lr in sorted(b.grid):
        xs = [b.grid[lr][s] for s in b.grid_seeds]
        m, ci = rep.mean_ci(xs) if all(map(math.isfinite, xs)) else (math.inf, None)
        dm, dci, dp = rep.paired_ci({s: b.grid[lr][s] for s in b.grid_seeds},
                                    {s: b.grid[b.base][s] for s in b.grid_seeds})
        lines.append("| %g%s | %s | %s |" % (lr, " (chosen)" if lr == b.base else "", fmt(m, ci, len(xs)),
                                            fmt(dm, dci, len(dp), signed=True) if lr != b.base else "-"))
    bm, bci = rep.mean_ci(list(b.baseline.values()))
    lines += ["", "Baseline: %s over seeds %s; the margin is 2%% of it, %.4f bpc." % (
        fmt(bm, bci, len(b.baseline)), ",".join(map(str, sorted(b.baseline))), b.margin)]
    return lines


def main_section(b):
    ks = b.ks
    lines = ["", "## Final bpc against k, every alpha", "",
             "peak = base lr x k^alpha with LEGW's warmup (w0 k epochs at B0 x k: the same steps at every k) and "
             "linear decay to 0 at the end of the one pass; alpha 0.5 is LEGW. Mean final validation bpc (n seeds); "
             "at k = 1 every alpha is the baseline. 'div': runs the divergence rule stopped; 'blew up': runs whose "
             "train bpc rose more than %g above its lowest so far (they finished, and count with their final bpc)."
             % BLOWUP_BPC, "",
             "| alpha | " + " | ".join("k=%d" % k for k in ks) + " |", "|---|" + "---|" * len(ks)]
    for a in b.alphas:
        cells = []
        for k in ks:
            v, ndiv, n = b.cell(a, k)
            if not n:
                cells.append("-")
                continue
            m, ci = rep.mean_ci(list(v.values())) if v else (None, None)
            c = fmt(m, ci, len(v)) if v else ""
            unfinished = n - ndiv - len(v)
            nb = blowups(b.runs, group="main", rule="legw" if a == 0.5 else "alpha%g" % a, k=k) if k > 1 else 0
            c += (", %d div" % ndiv if ndiv else "") + (", %d unfinished" % unfinished if unfinished else "")
            c += ", %d blew up" % nb if nb else ""
            cells.append(c.strip(", "))
        lines.append("| %g%s | %s |" % (a, " (legw)" if a == 0.5 else "", " | ".join(cells)))
    lines += ["", "## Against the baseline, seed by seed", "",
              "Final bpc minus the baseline's at the same seed: the mean, its 95%% interval, (n) pairs. Within the "
              "margin (+%.4f) means the whole interval lies below it ('keeps'); outside, the whole interval above it."
              % b.margin, "",
              "| alpha | " + " | ".join("k=%d" % k for k in ks[1:]) + " |", "|---|" + "---|" * (len(ks) - 1)]
    for a in b.alphas:
        cells = []
        for k in ks[1:]:
            v, ndiv, n = b.cell(a, k)
            m, ci, p = rep.paired_ci(v, b.baseline)
            cells.append(fmt(m, ci, len(p), signed=True) + (" %s" % judge(m, ci, b.margin) if m is not None else "")
                         + (", %d div" % ndiv if ndiv else ""))
        lines.append("| %g%s | %s |" % (a, " (legw)" if a == 0.5 else "", " | ".join(cells)))
    lines += ["", "## The frontier", "",
              "At each k the alpha with the lowest mean (among those with every run finished), its paired difference "
              "from the baseline, and LEGW's paired difference from it (positive: LEGW is worse). Where only some "
              "alphas ran, the best of those: not the frontier, and no verdict.", "",
              "| k | best alpha | its mean | - baseline (paired) | legw - best (paired) |", "|---|---|---|---|---|"]
    for k in ks[1:]:
        a, f = b.frontier(k)
        if a is None:
            lines.append("| %d | - | - | - | - |" % k)
            continue
        m, ci = rep.mean_ci(list(f.values()))
        fm, fci, fp = rep.paired_ci(f, b.baseline)
        lv, _, _ = b.cell(0.5, k)
        dm, dci, dp = rep.paired_ci(lv, f)
        lines.append("| %d | %s | %s | %s | %s |" % (
            k, best_label(b, k, a), fmt(m, ci, len(f)), fmt(fm, fci, len(fp), signed=True),
            fmt(dm, dci, len(dp), signed=True) if a != 0.5 else "0 (legw is best)"))
    return lines


def best_label(b, k, a):
    """The best alpha at k, and of which alphas where not every alpha ran there."""
    return "%g" % a if k in b.full_ks else "%g (of %s)" % (a, ", ".join("%g" % x for x in b.alphas_at(k)))


def verdict_lines(b, v):
    fm, fci, fn = v["frontier"]
    lm, lci, ln = v["legw"]
    dm, dci, dn = v["legw_minus_frontier"]
    if v["k"] not in b.full_ks:
        return ["**At k = %d only alphas %s ran: no frontier, so no verdict by the rules.** The better of them "
                "(alpha %s) ends %s bpc from the baseline (%s); LEGW %s (%s); LEGW minus it %s; the margin is "
                "+%.4f." % (v["k"], ", ".join("%g" % a for a in v["alphas"]), "%g" % v["frontier_alpha"],
                            fmt(fm, fci, fn, signed=True), v["frontier_judge"], fmt(lm, lci, ln, signed=True),
                            v["legw_judge"], fmt(dm, dci, dn, signed=True) if dn else "0 (LEGW is the better)",
                            b.margin)]
    return ["**Verdict at k = %d: %s.** The frontier (alpha %s) ends %s bpc from the baseline (%s); LEGW %s (%s); "
            "LEGW minus the frontier %s; the margin is +%.4f." % (
                v["k"], v["verdict"], "%g" % v["frontier_alpha"] if v["frontier_alpha"] is not None else "-",
                fmt(fm, fci, fn, signed=True), v["frontier_judge"], fmt(lm, lci, ln, signed=True), v["legw_judge"],
                fmt(dm, dci, dn, signed=True) if dn else "0 (LEGW is the frontier)", b.margin)]


def checks_section(b):
    lines = []
    w0 = [r for r in b.runs if r["group"] == "w0"]
    if w0:
        w0_main = sorted({r["w0"] for r in b.runs if r["group"] == "main" and r["rule"] == "legw"})
        lines += ["", "## The warmup's sensitivity", "",
                  "LEGW with w0 = %s epochs at B0 (the main runs: %s) minus LEGW with the main w0, same seeds; and "
                  "against the baseline." % (sorted({r["w0"] for r in w0}), w0_main), "",
                  "| k | w0 check - main (paired) | w0 check - baseline (paired) |", "|---|---|---|"]
        for k in sorted({r["k"] for r in w0}):
            v, ndiv, _ = by_seed(b.runs, group="w0", rule="legw", k=k)
            main, _, _ = b.cell(0.5, k)
            m1, c1, p1 = rep.paired_ci(v, main)
            m2, c2, p2 = rep.paired_ci(v, b.baseline)
            lines.append("| %d | %s | %s %s%s |" % (k, fmt(m1, c1, len(p1), signed=True),
                                                  fmt(m2, c2, len(p2), signed=True), judge(m2, c2, b.margin),
                                                  ", %d div" % ndiv if ndiv else ""))
    clip = [r for r in b.runs if r["group"] == "clip1"]
    if clip:
        lines += ["", "## Clipping", "",
                  "LEGW with the gradient clipped to norm 1 (as the first sweeps and the LEGW test) minus LEGW "
                  "unclipped (every other run here), same seeds.", "",
                  "| k | clip 1 - no clip (paired) |", "|---|---|"]
        for k in sorted({r["k"] for r in clip}):
            v, _, _ = by_seed(b.runs, group="clip1", rule="legw", k=k)
            m, ci, p = rep.paired_ci(v, b.cell(0.5, k)[0])
            lines.append("| %d | %s |" % (k, fmt(m, ci, len(p), signed=True)))
    return lines


def puri_section(b):
    """Puri's claim at Puri's k: the range (the linear rule's schedule at peaks M x base lr),
    LEGW and puri-run at that k."""
    rng = [r for r in b.runs if r["group"] == "range"]
    if not rng:
        return [], None
    k = rng[0]["k"]
    lines = ["", "## Puri's claim at k = %d (B = %d)" % (k, rng[0]["B"]), "",
             "The range: the linear rule's schedule (warmup 0.05 epoch at every batch, linear decay to 0) with peak "
             "M x base lr; M = k is linear scaling, M = sqrt(k) sqrt scaling. Then LEGW (alpha 0.5: LEGW's warmup) "
             "and puri-run (peak min(base x k, 6 x base), no warmup, linear decay to 0 over the run, as "
             "sentiment-discovery decays below a global batch of 2048). Mean final bpc (n), diverged runs.", "",
             "| schedule | peak lr | mean final bpc | diverged | blew up |", "|---|---|---|---|---|"]
    rows = []
    for m in sorted({float(r["sub"][1:]) for r in rng}):
        v, ndiv, n = by_seed(b.runs, group="range", sub="x%g" % m, k=k)
        label = "M = %g%s" % (m, " (linear)" if m == k else " (sqrt)" if m * m == k else "")
        rows.append((label, m * b.base, v, ndiv, n, blowups(b.runs, group="range", sub="x%g" % m, k=k),
                     failures(b.runs, group="range", sub="x%g" % m, k=k)))
    for rule, label in (("legw", "legw"), ("puri-run", "puri-run")):
        v, ndiv, n = by_seed(b.runs, group="main", rule=rule, k=k)
        if n:
            pk = next((r["peak"] for r in b.runs if r["group"] == "main" and r["rule"] == rule and r["k"] == k), "?")
            rows.append((label, rep.parse_float(pk.split()[0]), v, ndiv, n,
                         blowups(b.runs, group="main", rule=rule, k=k), failures(b.runs, group="main", rule=rule, k=k)))
    for label, peak, v, ndiv, n, nb, _ in rows:
        m, ci = rep.mean_ci(list(v.values())) if v else (None, None)
        lines.append("| %s | %.4g | %s | %d of %d | %d of %d |" % (label, peak, fmt(m, ci, len(v)) if v else "-",
                                                                  ndiv, n, nb, n))
    done = [(label, sum(v.values()) / len(v)) for label, _, v, ndiv, n, _, _ in rows if v and not ndiv and len(v) == n]
    if not done:
        return lines, None
    best_label, best = min(done, key=lambda t: t[1])
    get = {label: (v, ndiv, n, nb, nf) for label, _, v, ndiv, n, nb, nf in rows}
    lin = next((get[x] for x in get if x.endswith("(linear)")), None)
    sq = next((get[x] for x in get if x.endswith("(sqrt)")), None)
    pr = get.get("puri-run")
    lg = get.get("legw")
    res = {"k": k, "frontier": best, "frontier_label": best_label}
    if lin and pr and pr[0]:
        pm = sum(pr[0].values()) / len(pr[0])
        near = not pr[1] and len(pr[0]) == pr[2] and pm <= best * (1 + MARGIN)
        confirmed = lin[1] >= 2 and near
        matched = [name for name, c in (("sqrt", sq), ("legw", lg)) if c and c[0] and not c[1] and len(c[0]) == c[2]
                   and sum(c[0].values()) / len(c[0]) <= pm * (1 + MARGIN)]
        failed = lin[4]  # stopped by the rule, or blew up
        res.update({"linear_div": lin[1], "linear_n": lin[2], "linear_failed": failed, "puri": pm, "puri_near": near,
                    "confirmed": confirmed, "matched": matched, "confirmed_blowups": failed >= 2 and near})
        need = ("refuted (%s ends within 2%% of puri-run or below it)" % " and ".join(matched) if matched
                else "not refuted (neither sqrt nor LEGW ends within 2% of puri-run)")
        lines += ["", "The frontier at k = %d (the best mean of every schedule above with every run finished): %s, "
                  "%.4f. **Puri et al.'s claim: %s.** Linear scaling diverged in %d of %d seeds; puri-run ends at "
                  "%.4f, %s 2%% of the frontier. **The need for a schedule of one's own: %s.**" % (
                      k, best_label, best, "confirmed" if confirmed else "not confirmed", lin[1], lin[2], pm,
                      "within" if near else "not within", need),
                  "", "Counting a blow-up as divergence (a descriptive test chosen after the first runs, not the rule "
                  "fixed before them): linear scaling failed in %d of %d seeds, and the claim would be %s." % (
                      failed, lin[2], "confirmed" if failed >= 2 and near else "not confirmed")]
    return lines, res


PEAK_RE = re.compile(r"^x([0-9.]+)-w(\d+)$")


def peak_cells(b):
    """The peak group at Puri's k: (k, {(M, W): runs}, [puri runs]); None if it did not run."""
    runs = [r for r in b.runs if r["group"] == "peak"]
    if not runs:
        return None
    cells, puri = {}, []
    for r in runs:
        m = PEAK_RE.match(r["sub"] or "")
        if r["sub"] == "puri" and r["rule"] == "puri":
            puri.append(r)
        elif m and r["rule"] == "puri-run":
            cells.setdefault((float(m.group(1)), int(m.group(2))), []).append(r)
        else:
            die("%s: peak/%s holds %s: expected peak/xM-wW (puri-run) or peak/puri (puri)" % (b.dir, r["sub"],
                                                                                              r["name"]))
    ks = {r["k"] for r in runs}
    peaks, warms = sorted({m for m, _ in cells}), sorted({w for _, w in cells})
    if len(ks) != 1 or len(peaks) != 2 or len(warms) != 2 or len(cells) != 4 or not puri or warms[0] != 0:
        die("%s: the peak group is two peaks x two warmups (one of them 0) and the puri rule at one k; it holds %s"
            % (b.dir, ", ".join(sorted("x%g-w%d" % c for c in cells)) + (", puri" if puri else "")))
    return ks.pop(), cells, puri


def peak_section(b):
    """The peak group at Puri's k (the docstring's rules): every cell's mean, its paired difference from
    the baseline, the effects of the warmup and the peak, and the two verdicts. (lines, results)."""
    pc = peak_cells(b)
    if pc is None:
        return [], None
    k, cells, puri = pc
    (lo, hi), (_, w) = sorted({m for m, _ in cells}), sorted({x for _, x in cells})
    named = {(lo, 0): "puri-run's", (hi, w): "LEGW's"} if lo == 6 and hi * hi == k else {}
    rows = [((m, x), "peak %g x base, %s%s" % (m, "warmup %d steps" % x if x else "no warmup",
                                               " (%s schedule)" % named[m, x] if (m, x) in named else ""), cells[m, x])
            for m, x in sorted(cells)] + [("puri", "the puri rule (NVIDIA's code's schedule)", puri)]
    seeds = {key: sorted(r["seed"] for r in rs) for key, rs in ((key, rs) for key, _, rs in rows)}
    if len({tuple(v) for v in seeds.values()}) != 1 or any(r["status"] == "incomplete" for _, _, rs in rows
                                                           for r in rs):
        return (["", "## Peaks and warmups at k = %d" % k, "", "Not complete: the cells' finished seeds differ (%s); "
                 "`dev/sweep/frontier.py status` says what is left." % "; ".join(
                     "%s: %s" % (label, ",".join(map(str, seeds[key]))) for key, label, _ in rows)], None)
    v = {key: {r["seed"]: r["bpc"] for r in rs if r["status"] == "done"} for key, _, rs in rows}
    ndiv = {key: sum(r["status"] == "diverged" for r in rs) for key, _, rs in rows}
    if any(ndiv.values()):  # a diverged run has no final bpc to pair: the verdicts need every cell whole
        return (["", "## Peaks and warmups at k = %d" % k, "", "Runs diverged (%s): no paired verdicts." % "; ".join(
            "%s: %d" % (label, ndiv[key]) for key, label, _ in rows if ndiv[key])], None)
    n = len(seeds["puri"])
    lines = ["", "## Peaks and warmups at k = %d (B = %d)" % (k, puri[0]["B"]), "",
             "Peak %g or %g x base lr, crossed with no warmup or LEGW's %d steps, each with a linear decay to 0 over "
             "the run (the trainer's puri rule with its cap at the peak, plus the warmup), and the puri rule as "
             "NVIDIA's code for the paper runs it (the cap at %g x base, as 3e-3 is 6 x its 5e-4; no warmup; a linear "
             "decay over a fixed horizon: \"%s\" against a run of %d steps), %d seeds each (%s). Every difference is "
             "paired by seed (mean ± 95%% t interval, df = n - 1, n in parentheses); \"keeps\", \"outside\", "
             "\"undecided\" against the margin (%.4f) as for the frontier." % (
                 lo, hi, w, rep.parse_float(puri[0]["cap"] or "nan") / b.base, puri[0]["decay"], puri[0]["planned"],
                 n, ",".join(map(str, seeds["puri"])), b.margin), "",
             "| schedule | peak lr | warmup | mean final bpc | - baseline (paired) | blew up |",
             "|---|---|---|---|---|---|"]
    for key, label, rs in rows:
        m, ci = rep.mean_ci(list(v[key].values()))
        d = rep.paired_ci(v[key], b.baseline)
        lines.append("| %s | %s | %s | %s | %s %s | %d of %d |" % (
            label, rs[0]["peak"].split()[0], rs[0]["warmup"], fmt(m, ci, len(v[key])),
            fmt(d[0], d[1], len(d[2]), signed=True), judge(d[0], d[1], b.margin),
            sum(map(blew_up, rs)), len(rs)))

    def mix(pairs):  # {seed: the mean over pairs (a, b) of a - b}
        return {s: sum(v[a][s] - v[c][s] for a, c in pairs) / len(pairs) for s in v["puri"]}

    zero = {s: 0.0 for s in v["puri"]}
    eff = {"warmup": rep.paired_ci(mix([((lo, w), (lo, 0)), ((hi, w), (hi, 0))]), zero),
           "warmup at %g" % lo: rep.paired_ci(v[lo, w], v[lo, 0]),
           "warmup at %g" % hi: rep.paired_ci(v[hi, w], v[hi, 0]),
           "peak": rep.paired_ci(mix([((hi, 0), (lo, 0)), ((hi, w), (lo, w))]), zero),
           "peak without warmup": rep.paired_ci(v[hi, 0], v[lo, 0]),
           "peak with warmup": rep.paired_ci(v[hi, w], v[lo, w]),
           "interaction": rep.paired_ci(mix([((hi, w), (hi, 0))]), mix([((lo, w), (lo, 0))])),
           "legw-puri-run": rep.paired_ci(v[hi, w], v[lo, 0]),
           "legw-puri": rep.paired_ci(v[hi, w], v["puri"]),
           "sqrt-puri": rep.paired_ci(v[hi, 0], v["puri"]),
           "puri-run-puri": rep.paired_ci(v[lo, 0], v["puri"])}
    res = {"k": k, "n": n, "lo": lo, "hi": hi, "w": w, "margin": b.margin,
           "cells": {key: rep.mean_ci(list(v[key].values())) + (n,) for key in v},
           "minus_base": {key: rep.paired_ci(v[key], b.baseline) for key in v},
           "eff": {name: (m, ci, len(p)) for name, (m, ci, p) in eff.items()}}
    legw_own = [res["eff"]["legw-puri-run"], res["eff"]["legw-puri"]]
    res["own"] = ("needed" if any(judge(m, ci, b.margin) == "outside" for m, ci, _ in legw_own) else
                  "not needed" if all(judge(m, ci, b.margin) == "keeps" for m, ci, _ in legw_own) else "undecided")
    resolved = {x: not covers0(res["eff"][x]) for x in ("warmup", "peak")}
    res["warmup"] = {(True, False): "warmup is what matters", (False, True): "the peak is what matters",
                     (True, True): "both matter", (False, False): "neither is resolved"}[
                         resolved["warmup"], resolved["peak"]]
    res["interaction_resolved"] = not covers0(res["eff"]["interaction"])
    e = res["eff"]
    lines += ["", "| paired difference, k = %d | mean ± 95%% (n) |" % k, "|---|---|"]
    for name, label in (("warmup", "warmup %d - none, averaged over the two peaks" % w),
                        ("warmup at %g" % lo, "warmup %d - none at peak %g" % (w, lo)),
                        ("warmup at %g" % hi, "warmup %d - none at peak %g" % (w, hi)),
                        ("peak", "peak %g - %g, averaged over the two warmups" % (hi, lo)),
                        ("peak without warmup", "peak %g - %g without warmup" % (hi, lo)),
                        ("peak with warmup", "peak %g - %g with warmup %d" % (hi, lo, w)),
                        ("interaction", "interaction: the warmup's effect at %g minus at %g" % (hi, lo)),
                        ("legw-puri-run", "LEGW's schedule - puri-run's"),
                        ("legw-puri", "LEGW's schedule - the puri rule (NVIDIA's code)"),
                        ("sqrt-puri", "peak %g without warmup - the puri rule" % hi),
                        ("puri-run-puri", "puri-run - the puri rule (decay over the run - over a fixed horizon)")):
        lines.append("| %s | %s |" % (label, fmt(*e[name], signed=True)))
    lines += ["", "By the rules fixed before these runs (this program's docstring): **a schedule of one's own is %s** "
              "at k = %d (LEGW minus puri-run %s, minus the puri rule %s, against the margin %.4f); **%s** (warmup "
              "%s, peak %s)%s." % (
                  res["own"], k, fmt(*e["legw-puri-run"], signed=True), fmt(*e["legw-puri"], signed=True), b.margin,
                  res["warmup"], fmt(*e["warmup"], signed=True), fmt(*e["peak"], signed=True),
                  "; the interaction is resolved, so each effect depends on the other factor" if
                  res["interaction_resolved"] else "; their interaction is not resolved")]
    same = []  # the corners that repeat committed runs (the same command): do they end the same?
    for key, rule in (((lo, 0), "puri-run"), ((hi, w), "legw")):
        old = by_seed(b.runs, group="main", rule=rule, k=k)[0]
        common = sorted(set(old) & set(v[key]))
        if common:
            same.append("%s's (seeds %s): %s" % (rule, ",".join(map(str, common)), "the same final bpc" if all(
                old[s] == v[key][s] for s in common) else "final bpc differing by up to %.6f" % max(
                    abs(old[s] - v[key][s]) for s in common)))
    if same:
        lines += ["", "The corners repeat committed runs at Puri's k with the same trainer and data: %s." %
                  "; ".join(same)]
    return lines, res


def covers0(d):
    m, ci, _ = d
    return ci is None or m - ci <= 0 <= m + ci


def peak_plot(b, res, tmp):
    """The peak group's cells: final bpc minus the baseline, paired 95% intervals, and the margin."""
    fn = os.path.join(tmp, "peakcells")
    keys = sorted((x for x in res["cells"] if x != "puri"), key=lambda t: (t[1], t[0])) + ["puri"]
    with open(fn, "w") as fh:
        for i, key in enumerate(keys):
            m, ci, _ = res["minus_base"][key]
            label = "puri (NVIDIA)" if key == "puri" else "%gx, w %d" % key
            fh.write('%d %.6f %.6f "%s"\n' % (i, m, ci or 0, label))
    gnuplot(['set terminal pngcairo size 900,560 font "sans,11"', 'set grid', 'set key top left',
             'set output "%s/k%d_schedules.png.tmp"' % (b.dir, res["k"]), 'set xrange [-0.6:%g]' % (len(keys) - 0.4),
             'set yrange [0:*]', 'set xlabel "peak x base lr, warmup steps"',
             'set ylabel "final bpc minus the baseline (paired, 95%)"',
             'set title "%s bytes, k = %d: peaks x warmups and NVIDIA\'s schedule (%d seeds)"' % (
                 b.name, res["k"], res["n"]),
             'plot "%s" using 1:2:3:xticlabels(4) with yerrorbars pt 7 ps 1.5 lw 2 lc rgb "#1f77b4" '
             'title "mean - baseline", %f with lines dt 2 lw 2 lc rgb "black" title "the margin (2%% of the baseline)"'
             % (fn, res["margin"])], b.dir, "k%d_schedules.png" % res["k"])
    return "k%d_schedules.png" % res["k"]


def peak_curves(b, res, tmp):
    """The peak group's train bpc against the epoch, each cell's mean over its seeds block by block (a block is
    the same text at every seed), and the lr each used."""
    pc = peak_cells(b)
    k, cells, puri = pc
    groups = [(key, cells[key]) for key in sorted(cells, key=lambda t: (t[1], t[0]))] + [("puri", puri)]
    pal = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#000000"]
    cmds, lrs = [], []
    for i, (key, rs) in enumerate(groups):
        n = min(len(r["blocks"]) for r in rs)
        fn = os.path.join(tmp, "curve%d" % i)
        with open(fn, "w") as fh:
            for j in range(n):
                fh.write("%.6f %.6f %.6g\n" % (rs[0]["blocks"][j][1], sum(r["blocks"][j][4] for r in rs) / len(rs),
                                              rs[0]["blocks"][j][2]))
        label = "NVIDIA's code (puri)" if key == "puri" else "peak %gx, %s" % (
            key[0], "warmup %d" % key[1] if key[1] else "no warmup")
        cmds.append('"%s" using 1:2 with lines lw 2 lc rgb "%s" title "%s"' % (fn, pal[i % len(pal)], label))
        lrs.append('"%s" using 1:3 axes x1y2 with lines dt 2 lw 1 lc rgb "%s" notitle' % (fn, pal[i % len(pal)]))
    gnuplot(['set terminal pngcairo size 900,560 font "sans,11"', 'set grid', 'set key top right',
             'set output "%s/k%d_curves.png.tmp"' % (b.dir, k), 'set yrange [%f:%f]' % (b.bm * 0.95, b.bm * 1.6),
             'set y2range [0:*]', 'set y2tics', 'set xlabel "epoch"',
             'set ylabel "train bpc (mean over %d seeds, blocks of 8192 characters)"' % res["n"],
             'set y2label "learning rate (dashed)"',
             'set title "%s bytes, k = %d: train bpc and lr of each schedule"' % (b.name, k),
             "plot " + ", ".join(cmds + lrs)], b.dir, "k%d_curves.png" % k)
    return "k%d_curves.png" % k


def budget_report(root, name, plan):
    b = Budget(root, name, plan)
    lines = ["# The tuned frontier at %s bytes, one pass" % name, "",
             "Regenerated by `dev/sweep/frontier_report.py %s` from the run logs alone (dev/sweep/README.md, "
             "\"The tuned frontier\"). %d runs." % (root, len(b.runs)), ""]
    lines += grid_section(b) + main_section(b)
    verdicts = [b.verdict(k) for k in b.ks if k >= 16]
    lines += ["", "## The verdict", ""]
    for v in verdicts:
        lines += verdict_lines(b, v) + [""]
    lines += checks_section(b)
    pl, pres = puri_section(b)
    lines += pl
    kl, kres = peak_section(b)
    lines += kl
    b.peak = kres
    crit_lines, crit_pts = critical_section(b)
    lines += crit_lines
    pngs = budget_plots(b, crit_pts)
    if kres and shutil.which("gnuplot"):
        with tempfile.TemporaryDirectory() as tmp:
            pngs.append((peak_plot(b, kres, tmp), "k = %d: each schedule's final bpc minus the baseline, paired "
                         "intervals, and the margin" % kres["k"]))
            pngs.append((peak_curves(b, kres, tmp), "k = %d: each schedule's train bpc and learning rate against "
                         "the epoch" % kres["k"]))
    lines += [""] + ["![%s](%s)" % (alt, f) for f, alt in pngs]
    write(os.path.join(b.dir, "frontier.md"), lines)
    return b, verdicts, pres


def critical_section(b):
    """Steps to a train loss against B for LEGW (the baseline and the main runs), with McCandlish
    et al.'s fit (critical_batch.py), at targets down to what the largest k reaches."""
    runs = [r for r in b.runs if r["rule"] == "legw" and r["status"] == "done" and
            ((r["group"] == "grid" and r["k"] == 1 and float(r["sub"][2:]) == b.base) or r["group"] == "main")]
    ks = sorted({r["k"] for r in runs})
    if len(ks) < 3:
        return [], None
    kmax = max(k for k in ks if k <= 64)
    if 1 not in ks:
        return [], None
    reach = min(min(x[4] for x in r["blocks"]) for r in runs if r["k"] == kmax)
    targets = [t for t in (1.5, 1.2, 1.0, 0.9, 0.8, 0.7, 0.65, 0.6, 0.55, 0.5) if t >= reach + 0.02]
    lines = ["", "## The critical batch of these runs", "",
             "Steps until a block's mean train bpc (8192 characters) first reaches a target, LEGW, mean over seeds; "
             "the fit S = S_min (1 + B_n / B) over every run (dev/sweep/critical_batch.py); targets down to the "
             "lowest that k = %d reaches. B0 x 64 = %d sequences." % (kmax, 64 * (runs[0]["B"] // runs[0]["k"])), "",
             "| target bpc | " + " | ".join("k=%d" % k for k in ks) + " | B_n (sequences) | k=64 / k=1 characters |",
             "|---|" + "---|" * (len(ks) + 2)]
    fits = {}
    B_of = {r["k"]: r["B"] for r in runs}
    for t in targets:
        cells, pts = [], []
        for k in ks:
            ss = [crit.steps_to(r["blocks"], t) for r in runs if r["k"] == k]
            got = [s for s in ss if s is not None]
            pts += [(B_of[k], s) for s in got]
            cells.append("%.0f (%d)" % (sum(got) / len(got), len(got)) if got and len(got) == len(ss) else "not all")
        if len({x for x, _ in pts}) < 3:
            continue
        smin, bn, _ = crit.fit_critical(pts)
        s1 = [s for x, s in pts if x == B_of[1]]
        s64 = [s for x, s in pts if 64 in B_of and x == B_of[64]]
        ratio = (sum(s64) / len(s64) * B_of[64]) / (sum(s1) / len(s1) * B_of[1]) if s1 and s64 else None
        fits[t] = (smin, bn, pts)
        lines.append("| %g | %s | %.0f | %s |" % (t, " | ".join(cells), bn, "%.2f" % ratio if ratio else "-"))
    return lines, (fits, B_of, ks)


COLORS = rep.color


def budget_plots(b, crit_pts):
    if not shutil.which("gnuplot"):
        print("note: gnuplot not found: tables only", file=sys.stderr)
        return []
    made = []
    head = ['set terminal pngcairo size 900,560 font "sans,11"', 'set grid', 'set key outside right']
    with tempfile.TemporaryDirectory() as tmp:
        # 1. final bpc against k per alpha, paired intervals, the frontier and the margin
        cmds = []
        for i, a in enumerate(b.alphas):
            fn = os.path.join(tmp, "a%d" % i)
            with open(fn, "w") as fh:
                for k in b.ks:
                    v, ndiv, n = b.cell(a, k)
                    if not v or ndiv:
                        continue
                    m = sum(v.values()) / len(v)
                    _, ci, _ = rep.paired_ci(v, b.baseline) if k > 1 else (0, 0, [])
                    fh.write("%g %.6f %.6f\n" % (k * (1 + 0.04 * (i - 1.5)), m, ci or 0))
            rule = "legw" if a == 0.5 else "alpha%g" % a
            cmds.append('"%s" using 1:2:3 with yerrorlines lw 2 pt 7 lc rgb "%s" title "alpha %g%s"'
                        % (fn, COLORS(rule), a, " (legw)" if a == 0.5 else ""))
        fn = os.path.join(tmp, "front")
        with open(fn, "w") as fh:
            for k in b.full_ks:  # the frontier needs every alpha at k
                a, f = b.frontier(k) if k > 1 else (None, b.baseline)
                if f:
                    fh.write("%g %.6f\n" % (k, sum(f.values()) / len(f)))
        cmds.append('"%s" using 1:2 with lines lw 6 lc rgb "#60000000" title "frontier (best alpha)"' % fn)
        cmds.append('%f with lines dt 2 lw 2 lc rgb "black" title "baseline + 2%%"' % (b.bm + b.margin))
        cells = [b.cell(a, k) for a in b.alphas for k in b.ks]
        means = [sum(v.values()) / len(v) for v, ndiv, _ in cells if v and not ndiv]
        top = min(max([b.bm * 1.1] + means), b.bm * 1.5)  # a run that blew up (4 bpc) would flatten the rest
        off = ['set label "points above %.2f are off the scale (frontier.md)" at graph 0.02, graph 0.95' % top] \
            if max(means + [0]) > top else []
        gnuplot(head + off + ['set output "%s/bpc_vs_k.png.tmp"' % b.dir, 'set logscale x 2',
                        'set xrange [0.8:%g]' % (max(b.ks) * 1.3), 'set yrange [%f:%f]' % (b.bm * 0.97, top * 1.02),
                        'set xlabel "k = B / B0 (one pass at every k)"',
                        'set ylabel "final validation bpc (mean over seeds)"',
                        'set title "%s bytes: final bpc against k (bars: paired 95%% interval)"' % b.name,
                        "plot " + ", ".join(cmds)], b.dir, "bpc_vs_k.png")
        made.append(("bpc_vs_k.png", "final bpc against k per alpha, paired intervals, the frontier and the margin"))
        # 2. final bpc against the peak lr, one line per k
        cmds = []
        pal = ["#000000", "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd"]
        for i, k in enumerate(b.ks):
            fn = os.path.join(tmp, "peak%d" % k)
            pts = []
            if k == 1:
                pts = [(lr, sum(b.grid[lr][s] for s in b.grid_seeds) / len(b.grid_seeds)) for lr in sorted(b.grid)
                       if all(math.isfinite(b.grid[lr][s]) for s in b.grid_seeds)]
            else:
                for a in b.alphas:
                    v, ndiv, n = b.cell(a, k)
                    if v and not ndiv:
                        pts.append((b.base * k ** a, sum(v.values()) / len(v)))
            with open(fn, "w") as fh:
                fh.writelines("%g %.6f\n" % p for p in sorted(pts))
            if pts:
                cmds.append('"%s" using 1:2 with linespoints lw 2 pt 7 lc rgb "%s" title "k = %d%s"'
                            % (fn, pal[i % len(pal)], k, " (the grid)" if k == 1 else ""))
        gnuplot(head + off + ['set output "%s/bpc_vs_peak.png.tmp"' % b.dir, 'set logscale x', 'set format x "%.0e"',
                        'set yrange [%f:%f]' % (b.bm * 0.97, top * 1.02),
                        'set xlabel "peak learning rate"', 'set ylabel "final validation bpc (mean over seeds)"',
                        'set title "%s bytes: final bpc against the peak lr at each k"' % b.name,
                        "plot " + ", ".join(cmds)], b.dir, "bpc_vs_peak.png")
        made.append(("bpc_vs_peak.png", "final bpc against the peak learning rate, one line per k"))
        # 3. steps to a train loss against B, log-log
        if crit_pts and crit_pts[0]:
            fits, B_of, ks = crit_pts
            cmds = []
            shown = sorted(fits.items(), reverse=True)
            shown = [shown[j] for j in sorted({round(i * (len(shown) - 1) / 3) for i in range(4)})]  # 4 at most
            for i, (t, (smin, bn, pts)) in enumerate(shown):
                fn = os.path.join(tmp, "s%d" % i)
                with open(fn, "w") as fh:
                    fh.writelines("%d %g\n" % p for p in pts)
                c = pal[(i + 1) % len(pal)]
                s1 = [s for x, s in pts if x == B_of[1]]
                cmds += ['"%s" using 1:2 with points pt 7 lc rgb "%s" title "bpc %g"' % (fn, c, t),
                         '%g * (1 + %g / x) with lines lw 2 lc rgb "%s" title "fit: B_n %.0f"' % (smin, bn, c, bn)]
                if s1:
                    cmds.append('%g * %d / x with lines dt 2 lc rgb "%s" notitle' % (sum(s1) / len(s1), B_of[1], c))
            gnuplot(head + ['set output "%s/steps_vs_batch.png.tmp"' % b.dir, 'set logscale xy',
                            'set xrange [%g:%g]' % (B_of[ks[0]] / 1.3, B_of[ks[-1]] * 1.3),
                            'set xlabel "global batch B (sequences of 8 characters)"',
                            'set ylabel "steps to the target train bpc"',
                            'set title "%s bytes: steps to a train loss (LEGW); dashed: perfect scaling from B0"'
                            % b.name, 'set key title "(all targets: frontier.md)"',
                            "plot " + ", ".join(cmds)], b.dir, "steps_vs_batch.png")
            made.append(("steps_vs_batch.png", "steps to a train loss against the batch, log-log, with the fits"))
    return made


def gnuplot(cmds, outdir, name):
    rep.gnuplot(cmds, outdir, name)


def write(path, lines):
    with open(path + ".tmp", "w") as fh:
        fh.write("\n".join(lines) + "\n")
    os.replace(path + ".tmp", path)


def legw_test_gap(legw_dir):
    """The one-epoch LEGW test (dev/sweep/legw): LEGW at k = 64 minus LEGW at k = 1, paired by seed,
    and its baseline's mean; None if it is not there."""
    if not legw_dir or not os.path.isdir(legw_dir):
        return None
    vals = {}
    for sd in sorted(os.listdir(legw_dir)):
        if not re.match(r"^seed\d+", sd):
            continue
        runs_dir = os.path.join(legw_dir, sd, "runs")
        for name in rep.run_names(runs_dir):
            r = rep.read_run_blocks(runs_dir, name)
            if r["rule"] == "legw" and r["status"] == "done" and r["k"] in (1, 64):
                vals.setdefault(r["k"], {})[r["seed"]] = r["bpc"]
    if 1 not in vals or 64 not in vals:
        return None
    m, ci, p = rep.paired_ci(vals[64], vals[1])
    return {"gap": (m, ci, len(p)), "base": sum(vals[1].values()) / len(vals[1]), "chars": 504188}


def main(argv):
    legw = os.path.join(os.path.dirname(os.path.abspath(__file__)), "legw")
    if "--legw" in argv:
        i = argv.index("--legw")
        if i + 1 >= len(argv):
            die("--legw needs a directory")
        legw = argv[i + 1]
        argv = argv[:i] + argv[i + 2:]
    if len(argv) != 1 or argv[0].startswith("-"):
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        die("usage: dev/sweep/frontier_report.py ROOT [--legw DIR]")
    with rep.unpacked([argv[0], legw]) as (root, legw):  # a packed experiment: its pages from its archive
        return report(root, legw)


def report(root, legw):
    """Writes every budget's page and the verdicts' page of the experiment at root."""
    if not os.path.isdir(root):
        die("%s is not a directory" % root)
    budgets = sorted((x for x in os.listdir(root) if x.isdigit() and os.path.isdir(os.path.join(root, x))), key=int)
    plan = None
    if os.path.exists(os.path.join(root, "plan.json")):  # the experiment's plan, when it is in ROOT
        plan = driver.load_plan(os.path.join(root, "plan.json"))
        if os.path.normpath(plan["root"]) != os.path.normpath(root):
            plan = None  # a copy of the experiment elsewhere: its logs alone
    if not budgets:
        die("%s holds no budget directories (BUDGET/grid/..., see dev/sweep/frontier.py)" % root)
    results = []
    for name in budgets:
        try:
            b, verdicts, pres = budget_report(root, name, plan)
        except GridUnfinished as e:
            write(os.path.join(root, name, "frontier.md"),
                  ["# The tuned frontier at %s bytes, one pass" % name, "",
                   "The base-lr grid is not finished (%s), so there is no base lr and no baseline yet; "
                   "`dev/sweep/frontier.py status` says what is left." % e])
            print("wrote %s (the grid is not finished)" % os.path.join(root, name, "frontier.md"))
            continue
        results.append((b, verdicts, pres))
        print("wrote %s" % os.path.join(b.dir, "frontier.md"))
    summary(root, results, legw_test_gap(legw))
    return 0


def summary(root, results, old):
    lines = ["# The tuned frontier: the verdicts", "",
             "Regenerated by `dev/sweep/frontier_report.py %s` from the run logs alone; each budget's page has the "
             "tables (dev/sweep/README.md, \"The tuned frontier\")." % root, "",
             "| budget | baseline (k = 1) | margin | k | frontier alpha | frontier - baseline | legw - baseline | "
             "legw - frontier | verdict |", "|---|---|---|---|---|---|---|---|---|"]
    for b, verdicts, _ in results:
        for v in verdicts:
            dm, dci, dn = v["legw_minus_frontier"]
            lines.append("| [%s bytes](%s/frontier.md) | %.4f | %.4f | %d | %s | %s %s | %s %s | %s | %s |" % (
                b.name, b.name, b.bm, b.margin, v["k"],
                best_label(b, v["k"], v["frontier_alpha"]) if v["frontier_alpha"] is not None else "-",
                fmt(*v["frontier"], signed=True), v["frontier_judge"], fmt(*v["legw"], signed=True), v["legw_judge"],
                fmt(dm, dci, dn, signed=True) if dn else "0", v["verdict"]))
    puri = [(b, p) for b, _, p in results if p and "confirmed" in p]
    if puri:
        lines += ["", "| budget | k | linear diverged | linear diverged or blew up | puri-run | frontier at k | "
                  "Puri's claim | sqrt or LEGW match puri-run |", "|---|---|---|---|---|---|---|---|"]
        for b, p in puri:
            lines.append("| %s | %d | %d of %d | %d of %d | %.4f | %.4f (%s) | %s | %s |" % (
                b.name, p["k"], p["linear_div"], p["linear_n"], p["linear_failed"], p["linear_n"], p["puri"],
                p["frontier"], p["frontier_label"], "confirmed" if p["confirmed"] else "not confirmed",
                ", ".join(p["matched"]) or "neither"))
    peaks = [(b, b.peak) for b, _, _ in results if getattr(b, "peak", None)]
    if peaks:
        lines += ["", "| budget | k | seeds | LEGW's schedule - puri-run | - the puri rule (NVIDIA's code) | "
                  "a schedule of one's own | warmup - none | peak sqrt(k) - 6 x | interaction | warmup or peak |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
        for b, p in peaks:
            e = p["eff"]
            lines.append("| [%s bytes](%s/frontier.md) | %d | %d | %s | %s | %s | %s | %s | %s | %s |" % (
                b.name, b.name, p["k"], p["n"], fmt(*e["legw-puri-run"], signed=True),
                fmt(*e["legw-puri"], signed=True), p["own"], fmt(*e["warmup"], signed=True),
                fmt(*e["peak"], signed=True), fmt(*e["interaction"], signed=True), p["warmup"]))
    png = gap_plot(root, results, old)
    if png:
        lines += ["", "![the k = 64 gap against the budget](%s)" % png]
    write(os.path.join(root, "frontier.md"), lines)
    print("wrote %s" % os.path.join(root, "frontier.md"))


def gap_plot(root, results, old):
    if not shutil.which("gnuplot"):
        return None
    with tempfile.TemporaryDirectory() as tmp:
        fl, fm, fg = (os.path.join(tmp, x) for x in ("legw", "margin", "front"))
        with open(fl, "w") as a, open(fm, "w") as m, open(fg, "w") as f:
            for b, verdicts, _ in results:
                v = next((v for v in verdicts if v["k"] == 64), None)
                if not v or v["legw"][0] is None:
                    continue
                chars = int(b.name)
                a.write("%d %.6f %.6f\n" % (chars, v["legw"][0], v["legw"][1] or 0))
                m.write("%d %.6f\n" % (chars, b.margin))
                if v["frontier"][0] is not None:
                    f.write("%d %.6f %.6f\n" % (chars * 1.06, v["frontier"][0], v["frontier"][1] or 0))
        cmds = ['"%s" using 1:2:3 with yerrorlines lw 2 pt 7 lc rgb "#2ca02c" title "legw (k = 64) - baseline"' % fl,
                '"%s" using 1:2:3 with yerrorlines lw 2 pt 5 lc rgb "black" title "frontier (k = 64) - baseline"' % fg,
                '"%s" using 1:2 with lines dt 2 lw 2 lc rgb "#d62728" title "the margin (2%% of the baseline)"' % fm,
                '0 with lines lw 1 lc rgb "gray" notitle']
        if old:
            fo = os.path.join(tmp, "old")
            with open(fo, "w") as fh:
                fh.write("%d %.6f %.6f\n" % (old["chars"], old["gap"][0], old["gap"][1] or 0))
            cmds.append('"%s" using 1:2:3 with yerrorbars pt 6 ps 1.5 lc rgb "#2ca02c" title '
                        '"legw, the one-epoch LEGW test (clip 1, w0 1/128, untuned base)"' % fo)
        rep.gnuplot(['set terminal pngcairo size 900,560 font "sans,11"', 'set grid', 'set key top right',
                     'set output "%s/gap_vs_budget.png.tmp"' % root, 'set logscale x', 'set xrange [3e5:1.5e7]',
                     'set xlabel "training characters (one pass)"',
                     'set ylabel "final bpc at k = 64 minus the baseline (paired, 95%)"',
                     'set title "The k = 64 gap against the budget"', "plot " + ", ".join(cmds)],
                    root, "gap_vs_budget.png")
    return "gap_vs_budget.png"


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

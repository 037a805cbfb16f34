#!/usr/bin/python3
"""The frontier experiment (dev/sweep/README.md, "The tuned frontier"): runs a plan of
sweeps (dev/sweep/sweep.py) with a few workers, decisive cells first, and resumes.

    dev/sweep/frontier.py run PLAN.json          # start, or resume after an interruption
    dev/sweep/frontier.py status PLAN.json       # what is done, what is left (runs nothing)

A plan names the trainer, the data (dev/sweep/make_data.py), the model, the alphas, and per
budget (bytes of training text, one pass): the base-lr grid at k = 1, the seeds of each k (a
list of seeds runs every alpha at that k; {"seeds": [...], "alphas": [...]} runs those alphas
alone), the warmup, and the checks (doc in dev/sweep/README.md). Everything it runs lands in
one sweep directory per (budget, group, base lr, seed) under the plan's "root":

    ROOT/BUDGET/grid/lrX/seedS      legw at k = 1, base lr X        (the grid; the baseline)
    ROOT/BUDGET/main/seedS          legw and alphaA at each k, the chosen base lr; puri-run at Puri's k
    ROOT/BUDGET/w0/seedS            legw with the warmup of the sensitivity check
    ROOT/BUDGET/clip1/seedS         legw with --clip 1 (the clipping check)
    ROOT/BUDGET/range/xM/seedS      the linear rule's schedule at Puri's k with peak M x base lr
    ROOT/BUDGET/peak/xM-wW/seedS    at Puri's k: peak M x base lr, W warmup steps, linear decay to 0 over the run
    ROOT/BUDGET/peak/puri/seedS     at Puri's k: the puri rule (NVIDIA's code: cap, no warmup, a fixed horizon)

The base lr of a budget is chosen from its grid once every grid run is finished:
the lr with the lowest mean final validation bpc over the grid's seeds (a diverged run
counts as infinitely bad). If that lr is at an edge of the grid, the grid grows by a factor
sqrt(2) on that side and its runs come first. Only then do the runs that need the base
start. Every run is a fixed number of steps; nothing here depends on the wall clock, so
the processes may be paused (SIGSTOP/SIGCONT) at any time.

SIGTERM or SIGINT: the running sweeps are told to stop (each trainer checkpoints), and the
driver exits 143 (130) once they have; `run` again resumes them. Standard library only.
"""
import fcntl
import json
import math
import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sweep_report as rep  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
MAX_GRID_GROWTH = 3  # extra grid points on one side before the choice is made at the edge anyway
stop_signal = None


def die(msg):
    print("error: " + msg, file=sys.stderr)
    sys.exit(2)


def on_signal(signum, _frame):
    global stop_signal
    stop_signal = signum


def log(msg):
    print("%s %s" % (time.strftime("%H:%M:%S"), msg), flush=True)


def load_plan(path):
    try:
        with open(path) as fh:
            plan = json.load(fh)
    except (OSError, ValueError) as e:
        die("%s: %s" % (path, e))
    need = ("root", "train_bin", "data", "model", "trainer", "w0", "alphas", "budgets")
    missing = [k for k in need if k not in plan]
    if missing:
        die("%s: missing %s" % (path, ", ".join(missing)))
    for b, bp in plan["budgets"].items():
        for k in ("grid", "grid_seeds", "ks"):
            if k not in bp:
                die("%s: budget %s: missing \"%s\"" % (path, b, k))
        if not bp["grid"] or not bp["grid_seeds"] or not bp["ks"]:
            die("%s: budget %s: empty grid, grid_seeds or ks" % (path, b))
        for k, spec in bp["ks"].items():
            if isinstance(spec, dict) and (set(spec) != {"seeds", "alphas"} or not spec["alphas"]
                                           or any(a not in plan["alphas"] for a in spec["alphas"])):
                die("%s: budget %s: ks[\"%s\"] is a list of seeds or {\"seeds\": [...], \"alphas\": [...]} "
                    "with alphas from the plan's %s" % (path, b, k, plan["alphas"]))
        pw = bp.get("peak_warmup")
        if pw is not None and (set(pw) != {"k", "seeds", "peaks", "warmup_steps"} or not pw["seeds"]
                               or any(not (m > 0) for m in pw["peaks"]) or any(m > pw["k"] for m in pw["peaks"])
                               or any(w != int(w) or w < 0 for w in pw["warmup_steps"])):
            die("%s: budget %s: peak_warmup is {\"k\": K, \"seeds\": [...], \"peaks\": [M, ...] (0 < M <= K), "
                "\"warmup_steps\": [W, ...] (whole, >= 0)}" % (path, b))
    return plan


def lr_name(lr):
    return "%.3g" % lr


# ----------------------------------------------------------------------------
# Jobs: one sweep.py invocation each (one directory, some rules at some k)

def job(plan, budget, group, d, seed, lr, rules, ks, cls, w0=None, trainer=None, needs_base=True, lr_cap=None):
    return {"budget": budget, "group": group, "dir": os.path.join(plan["root"], budget, d), "seed": seed, "lr": lr,
            "rules": rules, "ks": ks, "class": cls, "w0": plan["w0"] if w0 is None else w0,
            "trainer": plan["trainer"] if trainer is None else trainer, "needs_base": needs_base, "lr_cap": lr_cap}


def job_done(j):
    return all(os.path.exists(os.path.join(j["dir"], "runs", "%s_k%d.status" % (r, k))) for r in j["rules"]
               for k in j["ks"])


def finals(d, rule="legw", k=1):
    """The final val bpc of one run in sweep directory d (inf if it diverged), or None."""
    st = os.path.join(d, "runs", "%s_k%d.status" % (rule, k))
    if not os.path.exists(st):
        return None
    with open(st) as fh:
        s = json.load(fh)
    return s["bpc"] if s["status"] == "done" else math.inf


def grid_lrs(plan, budget):
    """The grid of a budget as it stands: the plan's points, grown where the best was at an edge."""
    bp = plan["budgets"][budget]
    lrs = sorted(float(x) for x in bp["grid"])
    for _ in range(2 * MAX_GRID_GROWTH + 1):
        means = grid_means(plan, budget, lrs)
        if means is None:
            return lrs, None
        best = min(lrs, key=lambda lr: means[lr])
        grown = sum(1 for lr in lrs if lr not in [float(x) for x in bp["grid"]])
        if best == lrs[0] and grown < MAX_GRID_GROWTH and len(lrs) > 1:
            lrs.insert(0, float(lr_name(lrs[0] / math.sqrt(2))))
        elif best == lrs[-1] and grown < MAX_GRID_GROWTH and len(lrs) > 1:
            lrs.append(float(lr_name(lrs[-1] * math.sqrt(2))))
        else:
            return lrs, best
    return lrs, None


def grid_means(plan, budget, lrs):
    """Mean final bpc per grid lr over the grid's seeds; None until every grid run is finished."""
    bp = plan["budgets"][budget]
    means = {}
    for lr in lrs:
        xs = [finals(os.path.join(plan["root"], budget, "grid", "lr" + lr_name(lr), "seed%d" % s))
              for s in bp["grid_seeds"]]
        if any(x is None for x in xs):
            return None
        means[lr] = sum(xs) / len(xs)
    return means


def jobs_for(plan, budget, base):
    """Every job of a budget, in order; those needing the base lr only once it is known."""
    bp = plan["budgets"][budget]
    lrs, _ = grid_lrs(plan, budget)
    out = [job(plan, budget, "grid", os.path.join("grid", "lr" + lr_name(lr), "seed%d" % s), s, lr, ["legw"], [1], 0,
               needs_base=False) for lr in lrs for s in bp["grid_seeds"]]
    if base is None:
        return out
    decisive = [int(k) for k in bp.get("decisive", [])]
    for k, spec in bp["ks"].items():
        k = int(k)
        seeds, alphas = (spec["seeds"], spec["alphas"]) if isinstance(spec, dict) else (spec, plan["alphas"])
        alpha_rules = (["legw"] if 0.5 in alphas else []) + ["alpha%g" % a for a in alphas if a != 0.5]
        cls = 1 if k in decisive else 2
        if k == 1:  # the baseline: the grid's best lr at more seeds
            out += [job(plan, budget, "grid", os.path.join("grid", "lr" + lr_name(base), "seed%d" % s), s, base,
                        ["legw"], [1], cls) for s in seeds if s not in bp["grid_seeds"]]
        else:
            out += [job(plan, budget, "main", os.path.join("main", "seed%d" % s), s, base, alpha_rules, [k], cls)
                    for s in seeds]
    wc = bp.get("w0_check")
    if wc:
        out += [job(plan, budget, "w0", os.path.join("w0", "seed%d" % s), s, base, ["legw"], [int(k)], 3,
                    w0=plan["w0_check"]) for k in wc["ks"] for s in wc["seeds"]]
    cc = bp.get("clip_check")
    if cc:
        tr = [x for x in plan["trainer"]]
        i = tr.index("--clip") if "--clip" in tr else -1
        tr = tr[:i] + tr[i + 2:] if i >= 0 else tr
        out += [job(plan, budget, "clip1", os.path.join("clip1", "seed%d" % s), s, base, ["legw"],
                    [int(k) for k in cc["ks"]], 3, trainer=tr + ["--clip", "1"]) for s in cc["seeds"]]
    pk = bp.get("puri")
    if pk:
        k = int(pk["k"])
        out += [job(plan, budget, "main", os.path.join("main", "seed%d" % s), s, base, ["legw", "puri-run"], [k], 4)
                for s in pk["seeds"]]
        out += [job(plan, budget, "range", os.path.join("range", "x%g" % m, "seed%d" % s), s, base * m / k,
                    ["linear"], [k], 4) for m in pk["range"] for s in pk["seeds"]]
    pw = bp.get("peak_warmup")
    if pw:
        # puri-run's schedule (no warmup, linear decay to 0 over the run) with its cap at M x base, so the peak is
        # M x base, and W warmup steps added: the four corners at peaks {6, 16} x warmups {0, LEGW's} are puri-run
        # and LEGW at k = 256 and their two crossings. The puri rule beside them is NVIDIA's code's schedule.
        # Seed by seed, so that the cells stopped part way are whole seeds.
        k = int(pw["k"])
        for s in pw["seeds"]:
            out += [job(plan, budget, "peak", os.path.join("peak", "x%g-w%d" % (m, w), "seed%d" % s), s, base,
                        ["puri-run"], [k], 5, lr_cap=base * m,
                        trainer=plan["trainer"] + (["--warmup-steps", "%d" % w] if w else []))
                    for m in pw["peaks"] for w in pw["warmup_steps"]]
            out.append(job(plan, budget, "peak", os.path.join("peak", "puri", "seed%d" % s), s, base, ["puri"], [k], 5))
    return out


def sweep_cmd(plan, j, budget):
    data = plan["data"]
    return (["nice", "-n", str(plan.get("nice", 19)), sys.executable, os.path.join(HERE, "sweep.py"),
             "--out", j["dir"], "--train-bin", plan["train_bin"], "--budget", "1e9", "--epochs", "1",
             "--train", os.path.join(data, budget, "seed%d" % j["seed"]),
             "--val", os.path.join(data, "base", "val_000.bin"), "--lr", "%.17g" % j["lr"],
             "--legw-w0", "%.17g" % j["w0"], "--seed", str(j["seed"]), "--rules", ",".join(j["rules"]),
             "--ks", ",".join(map(str, j["ks"])), "--no-report"]
            + (["--lr-cap", "%.17g" % j["lr_cap"]] if j["lr_cap"] is not None else [])
            + plan["model"] + ["--"] + j["trainer"])


# ----------------------------------------------------------------------------

def all_jobs(plan):
    """(jobs, bases): every job known now, in the order the workers take them (the plan's
    "stages", "BUDGET:CLASS" in order, by default every budget's class 0, then class 1, ...;
    within a stage, the plan's order), and each budget's base lr (None until its grid is done).
    Classes: 0 the grid, 1 the decisive ks, 2 the other ks, 3 the checks, 4 Puri's k, 5 its peaks and warmups."""
    jobs, bases = [], {}
    for budget in plan["budgets"]:
        _, bases[budget] = grid_lrs(plan, budget)
        jobs += jobs_for(plan, budget, bases[budget])
    stages = plan.get("stages") or ["%s:%d" % (b, c) for c in range(6) for b in plan["budgets"]]
    rank = {st: i for i, st in enumerate(stages)}
    jobs = [(rank.get("%s:%d" % (j["budget"], j["class"]), len(stages)), i, j) for i, j in enumerate(jobs)]
    return [j for *_, j in sorted(jobs, key=lambda t: t[:2])], bases


def status(plan):
    jobs, bases = all_jobs(plan)
    for b in plan["budgets"]:
        lrs, best = grid_lrs(plan, b)
        means = grid_means(plan, b, lrs)
        print("budget %s: grid %s; %s" % (b, ", ".join(lr_name(x) for x in lrs),
                                         "base lr %s (%s)" % (lr_name(best), ", ".join(
                                             "%s: %.4f" % (lr_name(x), means[x]) for x in lrs))
                                         if best is not None else "base lr not chosen yet"))
    left = [j for j in jobs if not job_done(j)]
    for j in left:
        print("left: %s %s k=%s (%s)" % (j["dir"], ",".join(j["rules"]), ",".join(map(str, j["ks"])), j["group"]))
    print("%d of %d jobs done%s" % (len(jobs) - len(left), len(jobs),
                                    "" if all(v is not None for v in bases.values())
                                    else "; more follow once every grid is done"))
    return 0


def run(plan, plan_path):
    os.makedirs(plan["root"], exist_ok=True)
    lock = open(os.path.join(plan["root"], "frontier.lock"), "w")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        die("another frontier.py is running on %s" % plan["root"])
    if not os.access(plan["train_bin"], os.X_OK):
        die("train_bin: %s is not an executable trainer (copy ./train there: dev/sweep/README.md)" % plan["train_bin"])
    for b in plan["budgets"]:
        if not os.path.isdir(os.path.join(plan["data"], b)):
            die("no data for budget %s in %s (dev/sweep/make_data.py)" % (b, plan["data"]))
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    workers = int(plan.get("workers", 2))
    logdir = plan.get("logs", os.path.join("out", "frontier-logs"))
    os.makedirs(logdir, exist_ok=True)
    running = {}  # dir -> (Popen, job, log file)
    failed = []
    log("frontier: %s, %d workers, job output in %s/" % (plan_path, workers, logdir))
    schedule = True  # the jobs are looked at again only when a sweep has ended (or at the start)
    while True:
        for d, (p, j, fh) in list(running.items()):
            rc = p.poll()
            if rc is None:
                continue
            fh.close()
            del running[d]
            schedule = True
            if rc == 0:
                log("done %s k=%s" % (d, ",".join(map(str, j["ks"]))))
            elif stop_signal is None:
                failed.append(d)
                log("FAILED (exit %d) %s k=%s: see %s" % (rc, d, ",".join(map(str, j["ks"])), fh.name))
        if stop_signal is not None:
            for p, _, _ in running.values():
                p.send_signal(signal.SIGTERM)
            for p, _, fh in running.values():
                p.wait()
                fh.close()
            log("stopped by signal %d; run the same command to resume" % stop_signal)
            return 128 + stop_signal
        if schedule:
            schedule = False
            jobs, _ = all_jobs(plan)
            todo = [j for j in jobs if not job_done(j) and j["dir"] not in failed and j["dir"] not in running]
            if not todo and not running:
                break  # all done, or nothing can run (a failed grid run leaves its budget's base unknown)
            for j in todo:
                if len(running) >= workers:
                    break
                if j["dir"] in running:
                    continue
                fh = open(os.path.join(logdir, j["dir"].replace("/", "_") + ".txt"), "a")
                cmd = sweep_cmd(plan, j, j["budget"])
                fh.write("$ %s\n" % " ".join(cmd))
                fh.flush()
                running[j["dir"]] = (subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT), j, fh)
                log("start %s %s k=%s (lr %s)" % (j["dir"], ",".join(j["rules"]), ",".join(map(str, j["ks"])),
                                                  lr_name(j["lr"])))
        time.sleep(0.1)
    for b in plan["budgets"]:
        lrs, best = grid_lrs(plan, b)
        log("budget %s: base lr %s (grid %s)" % (b, lr_name(best) if best else "not chosen",
                                                 ", ".join(lr_name(x) for x in lrs)))
    if failed:
        log("finished with %d failed jobs: %s" % (len(failed), ", ".join(failed)))
        return 1
    log("finished: every job of the plan is done")
    return 0


def main(argv):
    if len(argv) != 2 or argv[0] not in ("run", "status"):
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        die("usage: dev/sweep/frontier.py run|status PLAN.json")
    plan = load_plan(argv[1])
    return run(plan, argv[1]) if argv[0] == "run" else status(plan)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

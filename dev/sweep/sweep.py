#!/usr/bin/python3
"""The large-batch sweep (dev/sweep/README.md): trains the same model for the same number
of epochs at batch sizes B0*k, k = 1, 2, 4, ... up to --max-k or what fits the time
budget, under each learning-rate rule, with the trainer itself; stops diverged
runs early; resumes; then writes the results table and plots
(dev/sweep/sweep_report.py). Standard library only.

    nice -n 19 dev/sweep/sweep.py --out doc/sweep --budget 1380
    dev/sweep/sweep.py --out /tmp/s --max-k 8 --rules legw,linear -- --clip 0

Flags after `--` go to every trainer run unchanged. Running it again on the same
--out resumes: finished runs are skipped, a stopped run resumes from its checkpoint.
"""
import argparse
import fcntl
import json
import math
import os
import re
import signal
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sweep_report as rep  # noqa: E402  (the divergence rule and the report)

RULES = rep.RULES
DEFAULT_RULES = ["linear", "sqrt", "legw", "puri", "constant"]
stop_signal = None  # set by SIGINT/SIGTERM: finish (checkpoint) the current run, then exit


def die(msg):
    print("error: " + msg, file=sys.stderr)
    sys.exit(2)


def on_signal(signum, _frame):
    global stop_signal
    stop_signal = signum


def positive(kind):
    def parse(s):
        try:
            x = kind(s)
        except ValueError:
            raise argparse.ArgumentTypeError("\"%s\" is not a%s number" % (s, "" if kind is float else " whole"))
        if not (x > 0) or (kind is float and not math.isfinite(x)):
            raise argparse.ArgumentTypeError("must be positive, got %s" % s)
        return x
    return parse


def nonneg_int(s):
    try:
        x = int(s)
    except ValueError:
        raise argparse.ArgumentTypeError("\"%s\" is not a whole number" % s)
    if x < 0:
        raise argparse.ArgumentTypeError("must be zero or positive, got %s" % s)
    return x


def k_list(s):
    try:
        ks = sorted({int(x) for x in s.split(",") if x})
    except ValueError:
        raise argparse.ArgumentTypeError("\"%s\" is not a comma-separated list of whole numbers" % s)
    if not ks or ks[0] < 1:
        raise argparse.ArgumentTypeError("expected k values of 1 or more, got \"%s\"" % s)
    return ks


def rule_list(s):
    rules = [r for r in s.split(",") if r]
    bad = [r for r in rules if r not in RULES and rep.alpha_of(r) is None]
    if bad or not rules:
        raise argparse.ArgumentTypeError("unknown rule \"%s\" (expected a comma-separated list of %s, or alphaA "
                                         "for peak = lr x k^A with LEGW's warmup, A in [0, 2])"
                                         % (",".join(bad) or s, ", ".join(RULES)))
    return rules


def parse_args(argv):
    extra = []
    if "--" in argv:
        i = argv.index("--")
        argv, extra = argv[:i], argv[i + 1:]
    p = argparse.ArgumentParser(
        prog="dev/sweep/sweep.py", description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    a = p.add_argument
    a("--out", default="out/sweep", help="sweep directory: runs/, results.md, PNGs (resumes if it exists)")
    a("--budget", type=positive(float), default=1380.0, help="seconds for the whole sweep, probes included")
    a("--train-bin", default="./train", help="the trainer")
    a("--np", type=positive(int), default=1,
      help="MPI ranks per run (mpirun -np N); the global batch is split over them")
    a("--threads", type=nonneg_int, default=0, help="OpenMP threads per rank, 0 = the trainer's default")
    a("--epochs", type=positive(float), default=1.0, help="epochs every run trains for")
    a("--base-batch", type=positive(int), default=8, help="B0, the global batch the base lr is tuned at")
    a("--max-k", type=positive(int), default=64, help="largest k: batches B0, 2 B0, 4 B0, ... up to max-k B0")
    a("--k-step", type=positive(int), default=2,
      help="k grows by this factor: 2 gives k = 1, 2, 4, ...; 4 gives 1, 4, 16, ...")
    a("--ks", type=k_list, default=None,
      help="exactly these k, comma-separated (e.g. 1,32,64 for extra seeds at the decisive batches); "
           "overrides --max-k and --k-step")
    a("--rules", type=rule_list, default=DEFAULT_RULES, help="comma-separated rules")
    a("--lr", type=positive(float), default=2e-3, help="base learning rate at B0, the same for every rule")
    a("--warmup-epochs", type=float, default=None,
      help="linear and sqrt: warmup in epochs at every batch (default 0.05 x --epochs, Goyal et al.'s share)")
    a("--legw-w0", type=float, default=None,
      help="legw: warmup w0 in epochs at B0, w0 x k at B0 x k (default --epochs / 128: half the run at k = 64)")
    a("--lr-cap", type=float, default=None,
      help="puri: the largest peak (default 6 x --lr: the reference recipe's 3e-3 cap over its 5e-4 base)")
    a("--hidden", type=positive(int), default=128, help="hidden units")
    a("--seq-len", type=positive(int), default=32, help="T, characters per sequence")
    a("--corpus-bytes", type=positive(int), default=1000000, help="built-in corpus size (without --train)")
    a("--train", default=None, help="training shards (directory or files), passed to the trainer")
    a("--val", default=None, help="validation shards, passed to the trainer")
    a("--vals", type=nonneg_int, default=0, help="validations during each run besides the final one")
    a("--seed", type=nonneg_int, default=1, help="trainer seed (weights, built-in corpus)")
    a("--no-report", action="store_true", help="do not write results.md and the PNGs at the end")
    o = p.parse_args(argv)
    o.extra = extra
    if o.k_step < 2:
        p.error("argument --k-step: must be 2 or more, got %d" % o.k_step)
    if o.warmup_epochs is None:
        o.warmup_epochs = 0.05 * o.epochs
    if o.legw_w0 is None:
        o.legw_w0 = o.epochs / 128.0
    if o.lr_cap is None:
        o.lr_cap = 6.0 * o.lr
    for name in ("warmup_epochs", "legw_w0"):
        if not (getattr(o, name) >= 0 and math.isfinite(getattr(o, name))):
            p.error("argument --%s: must be zero or positive" % name.replace("_", "-"))
    if not (o.lr_cap > 0 and math.isfinite(o.lr_cap)):
        p.error("argument --lr-cap: must be positive")
    if o.base_batch % o.np:
        p.error("argument --base-batch: %d is not divisible by --np %d" % (o.base_batch, o.np))
    if o.val and not o.train:
        p.error("argument --val: given without --train")
    if not os.access(o.train_bin, os.X_OK):
        die("--train-bin: %s is not an executable trainer (run make)" % o.train_bin)
    o.takes_run_dir = takes_run_dir(o.train_bin)
    return o


def takes_run_dir(train_bin):
    """Whether the trainer takes a run directory (--out DIR, as ./train does) or, as an experiment's
    own earlier build kept so that its new runs pair with its committed ones (dev/sweep/README.md,
    "The tuned frontier"), a checkpoint and a log by path (--ckpt PATH, --log PATH): its --help says."""
    p = subprocess.run([train_bin, "--help"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if re.search(r"^\s+--out\s", p.stdout, re.M):
        return True
    if re.search(r"^\s+--ckpt\s", p.stdout, re.M) and re.search(r"^\s+--log\s", p.stdout, re.M):
        return False
    die("--train-bin: %s --help lists neither --out nor --ckpt and --log: not a trainer this tool can run"
        % train_bin)


def trainer_cmd(o, G, extra_flags):
    cmd = [o.train_bin]
    if o.np > 1:
        cmd = ["mpirun", "-np", str(o.np), "--oversubscribe"] + cmd
    cmd += ["--hidden", str(o.hidden), "--seq-len", str(o.seq_len), "--batch", str(G // o.np),
            "--seed", str(o.seed), "--sample-len", "0"]
    if o.threads:
        cmd += ["--threads", str(o.threads)]
    if o.train:
        cmd += ["--train", o.train] + (["--val", o.val] if o.val else [])
    else:
        cmd += ["--corpus-bytes", str(o.corpus_bytes)]
    return cmd + extra_flags + o.extra


def env():
    e = dict(os.environ)
    if os.geteuid() == 0:
        e.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
        e.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    return e


def schedule_flags(o, rule, k):
    """The trainer's schedule flags for one rule at batch B0 k (doc/schedules.md)."""
    alpha = rep.alpha_of(rule)
    if alpha is not None:
        # peak = lr k^alpha with LEGW's warmup (w0 k epochs, the same steps at every k) and decay:
        # the trainer's legw rule (peak lr sqrt(k)) at the base rate lr k^(alpha - 1/2)
        return ["--lr-schedule", "legw", "--lr", "%.17g" % (o.lr * k ** (alpha - 0.5)), "--base-batch",
                str(o.base_batch), "--warmup-epochs", "%g" % o.legw_w0, "--decay", "linear", "--decay-epochs",
                "%g" % o.epochs]
    f = ["--lr-schedule", "puri" if rule == "puri-run" else rule, "--lr", "%g" % o.lr,
         "--base-batch", str(o.base_batch)]
    if rule in ("linear", "sqrt"):
        f += ["--warmup-epochs", "%g" % o.warmup_epochs, "--decay", "linear", "--decay-epochs", "%g" % o.epochs]
    elif rule == "legw":
        f += ["--warmup-epochs", "%g" % o.legw_w0, "--decay", "linear", "--decay-epochs", "%g" % o.epochs]
    elif rule == "puri":  # the reconstruction's fixed horizon, given: the trainer's default ends at --steps
        f += ["--lr-cap", "%g" % o.lr_cap, "--decay", "linear", "--decay-steps", "100000"]
    elif rule == "puri-run":  # as sentiment-discovery decays below a global batch of 2048: to 0 over the run
        f += ["--lr-cap", "%g" % o.lr_cap, "--decay", "linear", "--decay-epochs", "%g" % o.epochs]
    return f  # puri and constant: their presets (doc/schedules.md)


def output_flags(o, run_dir, resume):
    """Where a run writes: its run directory (the trainer's --out: checkpoints, log, lock),
    continued or started afresh. Every trainer invocation's output flags are built here (and
    nowhere else), so a change of the trainer's output flags is a change of this function.
    A trainer without --out (takes_run_dir) gets the same two files by path, in a directory
    made here: run_dir/latest.ckpt and run_dir/train.log."""
    if o.takes_run_dir:
        return ["--resume", run_dir] if resume else ["--out", run_dir, "--overwrite"]
    os.makedirs(run_dir, exist_ok=True)
    ckpt, log = os.path.join(run_dir, "latest.ckpt"), os.path.join(run_dir, "train.log")
    return ["--ckpt", ckpt, "--log", log] + (["--resume", ckpt] if resume else ["--overwrite"])


def settings_key(o):
    keys = ("epochs", "base_batch", "lr", "lr_cap", "warmup_epochs", "legw_w0", "hidden", "seq_len", "corpus_bytes",
            "train", "val", "vals", "seed", "np", "extra")
    return {k: getattr(o, k) for k in keys}


def probe(o, G, d):
    """A 5-step run at global batch G: steps per epoch and val size from the start-up
    table (the trainer's own numbers), chars/s from the log, the wall time."""
    run_dir, out = os.path.join(d, "probe"), os.path.join(d, "probe.out")
    log = os.path.join(run_dir, "train.log")
    cmd = trainer_cmd(o, G, ["--steps", "5", "--val-every", "0", "--val-steps", "1", "--print-every", "1"]
                      + output_flags(o, run_dir, resume=False))
    t0 = time.time()
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env())
    wall = time.time() - t0
    if p.returncode != 0:
        die("the trainer failed at batch %d (%s):\n%s" % (G, " ".join(cmd), p.stdout.strip()[-2000:]))
    spe = rep.table_value(p.stdout, "steps per epoch")
    vd = rep.table_value(p.stdout, "val data")
    if not spe:
        die("no 'steps per epoch' in the trainer's start-up table:\n" + p.stdout[-2000:])
    vm = re.search(r"(\d+) bytes", vd or "")
    train, _ = rep.read_log(log)
    # chars/s of steps 2-5 (the first step pays for warming caches and threads)
    cps = sorted(float(line.split()[-1]) for line in open(log) if line.startswith("train ") and line.split()[1] != "1")
    shutil.rmtree(run_dir, ignore_errors=True)
    if os.path.exists(out):
        os.remove(out)
    if int(spe) < 1:
        die("batch %d: the data is too small for one step (steps per epoch 0); use more --corpus-bytes" % G)
    return {"steps_per_epoch": int(spe), "val_bytes": int(vm.group(1)) if vm else 0,
            "cps": cps[len(cps) // 2] if cps else 1e4, "wall": wall, "train_steps": len(train)}


def estimate(o, run):
    """Seconds: start-up (the probe's wall time less its 5 steps) + training + validations
    (forward only: counted at 2x the training speed)."""
    chars = run["steps"] * run["G"] * o.seq_len
    startup = max(0.2, run["probe_wall"] - 5 * run["G"] * o.seq_len / run["cps"])
    return startup + chars / run["cps"] + (o.vals + 1) * run["val_bytes"] / (2.0 * run["cps"])


def fmt_t(s):
    s = max(0, int(round(s)))
    return "%d:%02d" % (s // 60, s % 60)


def plan(o, d, t0):
    """Probes each batch not yet planned, orders the runs (k ascending, then rule) and
    adds the ks whose runs all fit in what is left of the budget (after the runs
    already planned and not yet finished). Stored in sweep.json: running the same
    command again resumes the same plan; a larger --max-k, another --k-step or more
    --rules (same settings otherwise) add their runs to it."""
    path = os.path.join(d, "sweep.json")
    runs = []
    if os.path.exists(path):
        with open(path) as fh:
            saved = json.load(fh)
        if saved["settings"] != json.loads(json.dumps(settings_key(o))):
            die("%s holds a sweep run with other settings (there: %s); use another --out or the same flags"
                % (d, ", ".join("%s %s" % (k, v) for k, v in sorted(saved["settings"].items())
                                if settings_key(o).get(k) != v)))
        runs = saved["runs"]
        print("resuming the sweep in %s (%d runs planned)" % (d, len(runs)))
    have = {(r["rule"], r["k"]) for r in runs}
    ks, k = [], 1
    while k <= o.max_k:
        ks.append(k)
        k *= o.k_step
    if o.ks:
        ks = o.ks
    new_ks = [k for k in ks if any((rule, k) not in have for rule in o.rules)]
    dropped = []
    if new_ks:
        print("probing %d batch sizes (5 steps each) ..." % len(new_ks), flush=True)
        cost = sum(r["estimate"] for r in runs if not os.path.exists(names(d, r)[3]))
        added = []
        for k in new_ks:
            G = o.base_batch * k
            pr = probe(o, G, d)
            steps = max(1, int(round(o.epochs * pr["steps_per_epoch"])))
            kr = []
            for rule in o.rules:
                if (rule, k) in have:
                    continue
                r = {"rule": rule, "k": k, "G": G, "steps": steps, "steps_per_epoch": pr["steps_per_epoch"],
                     "cps": pr["cps"], "val_bytes": pr["val_bytes"], "probe_wall": pr["wall"]}
                r["estimate"] = estimate(o, r)
                kr.append(r)
            kcost = sum(r["estimate"] for r in kr)
            left = o.budget - (time.time() - t0)
            print("  B=%-5d k=%-3d %6d steps (%.3g epochs), %6.0f chars/s: %s for %d rules"
                  % (G, k, steps, steps / pr["steps_per_epoch"], pr["cps"], fmt_t(kcost), len(kr)), flush=True)
            if dropped or cost + kcost > left:
                dropped.append(k)
                continue
            added += kr
            cost += kcost
        if dropped:
            print("dropped k = %s (B = %s): they do not fit in the budget of %s (estimated %s for the rest)"
                  % (", ".join(map(str, dropped)), ", ".join(str(o.base_batch * k) for k in dropped),
                     fmt_t(o.budget), fmt_t(cost)), flush=True)
        if not runs and not added:
            die("not even k = 1 fits in --budget %s (it needs about %s); give more time or less data"
                % (fmt_t(o.budget), fmt_t(kcost)))
        runs = sorted(runs + added, key=lambda r: (r["k"], rep.rule_order(r["rule"])))
        print("plan: %d runs, k = %s, estimated %s for those not finished, of the budget's %s"
              % (len(runs), ",".join(str(k) for k in sorted({r["k"] for r in runs})), fmt_t(cost),
                 fmt_t(o.budget - (time.time() - t0))), flush=True)
        with open(path + ".tmp", "w") as fh:
            json.dump({"settings": settings_key(o), "runs": runs}, fh, indent=1)
        os.replace(path + ".tmp", path)
    return runs, dropped


def names(d, r):
    """A run's files: its log as committed (a copy of the run directory's train.log, made when
    the run ends), its console output, its status, and the trainer's run directory (--out)."""
    base = "%s_k%d" % (r["rule"], r["k"])
    return (base, os.path.join(d, "runs", base + ".log"), os.path.join(d, "runs", base + ".out"),
            os.path.join(d, "runs", base + ".status"), os.path.join(d, "ckpt", base))


def resumable(run_dir):
    return os.path.exists(os.path.join(run_dir, "latest.ckpt")) and os.path.exists(os.path.join(run_dir, "train.log"))


def run_one(o, d, r):
    """One trainer run, watched: its log is read as it grows and the run is stopped
    (SIGTERM: the trainer checkpoints and exits 0) as soon as the divergence rule
    fires. Returns 'done', 'diverged' or 'stopped' (the sweep was interrupted)."""
    base, final_log, out, status, run_dir = names(d, r)
    log = os.path.join(run_dir, "train.log")  # read as it grows
    resume = resumable(run_dir)
    if not resume:
        for f in (final_log, out):
            if os.path.exists(f):
                os.remove(f)
    flags = schedule_flags(o, r["rule"], r["k"]) + [
        "--steps", str(r["steps"]), "--val-every", str(max(1, r["steps"] // (o.vals + 1)) if o.vals else 0),
        "--print-every", str(max(1, r["steps"] // 10)), "--ckpt-every", str(max(1, r["steps"] // 4))]
    flags += output_flags(o, run_dir, resume)  # a stale run directory without its log: start again
    cmd = trainer_cmd(o, r["G"], flags)
    with open(out, "a") as fo:
        fo.write("$ %s\n" % " ".join(cmd))
        fo.flush()
        t0 = time.time()
        proc = subprocess.Popen(cmd, stdout=fo, stderr=subprocess.STDOUT, env=env())
        train, val, pos, buf, why, sent = [], [], 0, "", None, False
        checked = 0  # train[:checked] passed the divergence test
        while True:
            rc = proc.poll()
            if os.path.exists(log):  # read what the trainer has written since the last look
                with open(log, errors="replace") as fh:
                    fh.seek(pos)
                    chunk = fh.read()
                    pos = fh.tell()
                buf += chunk
                lines = buf.split("\n")
                buf = lines.pop()
                checked = min(checked, rep.parse_log_lines(lines, train, val))  # a rewind makes entries new
                if why is None and lines:
                    why = rep.divergence(train, val, r["steps"], start=checked)
                    checked = len(train)
            if rc is not None:
                break
            if (why is not None or stop_signal is not None) and not sent:
                proc.send_signal(signal.SIGTERM)
                sent = True
            time.sleep(0.05)
        wall = time.time() - t0
    if rc == 2 and why is None:  # the trainer's own divergence stop (train.h, loss_diverged) is a result
        with open(out, errors="replace") as fh:
            m = re.search(r"^error: step (\d+): (.*?): the model has diverged", fh.read(), re.M)
        if m:
            why, rc = (int(m.group(1)), "the trainer stopped: " + m.group(2)), 0
    if rc != 0 and not (rc == 2 and why is not None):  # (a run stopped for divergence may exit 2 as well)
        die("%s: the trainer exited %d; its output is in %s" % (base, rc, out))
    if why is not None:
        res = {"status": "diverged", "step": why[0], "reason": why[1]}
    elif train and train[-1][0] >= r["steps"] and val and val[-1][0] == r["steps"]:
        res = {"status": "done", "bpc": val[-1][3]}
    elif stop_signal is not None:
        return "stopped", wall
    else:
        die("%s: the trainer exited 0 before its last step (%s); see %s"
            % (base, train[-1][0] if train else 0, out))
    res.update({"wall_s": round(wall, 1), "estimate_s": round(r["estimate"], 1)})
    shutil.copyfile(log, final_log + ".tmp")
    os.replace(final_log + ".tmp", final_log)
    with open(status + ".tmp", "w") as fh:
        json.dump(res, fh)
    os.replace(status + ".tmp", status)
    shutil.rmtree(run_dir, ignore_errors=True)
    return res["status"], wall


def main(argv):
    o = parse_args(argv)
    t0 = time.time()
    d = o.out
    for sub in ("runs", "ckpt"):
        os.makedirs(os.path.join(d, sub), exist_ok=True)
    lock = open(os.path.join(d, "sweep.lock"), "w")  # held until this process ends, however it ends
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        die("another sweep is running in %s (it holds %s); two sweeps must not share a directory"
            % (d, os.path.join(d, "sweep.lock")))
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    runs, dropped = plan(o, d, t0)
    speed = 1.0  # measured wall / estimate of this invocation's runs so far
    skipped = []
    n = len(runs)
    for i, r in enumerate(runs):
        base, log, out, status, run_dir = names(d, r)
        tag = "[%d/%d] %-8s k=%-3d B=%-5d" % (i + 1, n, r["rule"], r["k"], r["G"])
        if stop_signal is not None:
            break
        if os.path.exists(status):
            with open(status) as fh:
                s = json.load(fh)
            print("%s already %s, skipped" % (tag, s["status"]), flush=True)
            continue
        left = o.budget - (time.time() - t0)
        est = r["estimate"] * speed
        if est > left:
            skipped.append(base)
            print("%s skipped: needs about %s, %s of the budget left" % (tag, fmt_t(est), fmt_t(left)), flush=True)
            continue
        print("%s %d steps%s, about %s (elapsed %s, budget left %s)" % (
            tag, r["steps"], ", resuming" if resumable(run_dir) else "", fmt_t(est),
            fmt_t(time.time() - t0), fmt_t(left)), flush=True)
        st, wall = run_one(o, d, r)
        if st == "stopped":
            print("%s interrupted after %s: checkpoint kept, run the same command to resume" % (tag, fmt_t(wall)))
            break
        speed = max(speed * 0.5 + 0.5 * wall / r["estimate"], 0.5) if st == "done" else speed
        with open(status) as fh:
            s = json.load(fh)
        print("%s %s in %s: %s" % (tag, st, fmt_t(wall), "val bpc %.4f" % s["bpc"] if st == "done"
                                   else "stopped at step %d (%s)" % (s["step"], s["reason"])), flush=True)
    if stop_signal is not None:
        print("sweep interrupted by signal %d after %s; run the same command to resume"
              % (stop_signal, fmt_t(time.time() - t0)))
        return 128 + stop_signal
    if dropped:
        print("not run (did not fit the budget when planned): k = %s" % ", ".join(map(str, dropped)))
    if skipped:
        print("not run (the budget ran out): %s; run the same command again to add them" % ", ".join(skipped))
    try:
        os.rmdir(os.path.join(d, "ckpt"))  # only if empty: every run finished or diverged
    except OSError:
        pass
    print("sweep finished in %s" % fmt_t(time.time() - t0), flush=True)
    if not o.no_report:
        rep.report(d)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

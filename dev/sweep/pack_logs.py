#!/usr/bin/python3
"""Packs an experiment's run trees for committing (dev/sweep/README.md, "What is committed"), and
unpacks them to add runs.

    dev/sweep/pack_logs.py [--thin] EXP     # writes EXP/runs.csv and EXP/logs.tar.xz, then removes
                                            # every file it packed from EXP
    dev/sweep/pack_logs.py --unpack EXP     # puts the run trees back (then frontier.py or sweep.py
                                            # skips what is done and runs the rest); removes the archive
    dev/sweep/pack_logs.py --csv EXP        # prints the runs table of EXP (packed or not)

The archive holds every file under EXP but the pages and plots (.md, .png: the reports write them),
checkpoints, locks and probes: each run's .out and .status, each sweep's sweep.json, a plan, and
the logs, decompressed so that xz compresses across them. With --thin, a finished run's per-step
log is replaced by its thinned log (thin_logs.py: one line per 8192 training characters; every
page reads the same figures from either); without it, per-step logs are kept whole. The archive is
a pure function of the files (sorted, no time stamps or owners), so packing the same tree again
gives the same bytes. The report scripts read a packed experiment directly (sweep_report.unpacked).

runs.csv, one row per run: run (its path under EXP without the extension), rule, k, seed (from its
command line; empty: the trainer's default), lr (the base lr), peak_lr, steps (the last one
logged) and planned_steps, final_val_bpc (empty unless done), best_val_bpc (the lowest validation
bpc logged), status (done, diverged, incomplete). Standard library only.
"""
import csv
import gzip
import io
import math
import os
import sys
import tarfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sweep_report as rep  # noqa: E402
import thin_logs  # noqa: E402

CSV = "runs.csv"
SKIP_DIRS = {"ckpt"}
SKIP_FILES = ("sweep.lock", "frontier.lock")


def packable(rel):
    """Whether the file at rel (under the experiment) belongs in the archive."""
    parts = rel.split(os.sep)
    name = parts[-1]
    return not (SKIP_DIRS & set(parts[:-1]) or name in SKIP_FILES or name.startswith("probe.") or
                name.endswith(rep.PAGE_SUFFIXES) or name.endswith(".tmp") or rel in (rep.ARCHIVE, CSV))


def raw_log(runs_dir, f):
    """The run name if f is a per-step log of a finished run in runs_dir, else None."""
    name = f[:-7] if f.endswith(".log.gz") else f[:-4] if f.endswith(".log") else None
    return name if name and os.path.exists(os.path.join(runs_dir, name + ".status")) else None


def members(exp, thin):
    """([(name in the archive, bytes, [files it packs])], [files to remove unpacked]) for exp, sorted;
    a .gz is stored decompressed under its name without .gz. With thin, every finished run's
    per-step log is thinned first and stands in the archive as its thinned log."""
    dropped = []
    if thin:
        for d, subdirs, files in os.walk(exp):
            if os.path.basename(d) == "runs":
                for name in sorted({raw_log(d, f) for f in files} - {None}):
                    thin_logs.thin_one(d, name)
    out = {}
    for d, subdirs, files in os.walk(exp):
        subdirs.sort()
        for f in sorted(files):
            path = os.path.join(d, f)
            rel = os.path.relpath(path, exp)
            if not packable(rel):
                continue
            if thin and os.path.basename(d) == "runs" and raw_log(d, f):
                dropped.append(path)
                continue
            with open(path, "rb") as fh:
                data = fh.read()
            name = rel
            if f.endswith(".gz"):
                data, name = gzip.decompress(data), rel[:-3]
            if name in out:
                rep.die("%s: both %s and %s.gz" % (exp, name, name))
            out[name] = (data, path)
    return [(n, data, path) for n, (data, path) in sorted(out.items())], dropped


def write_archive(exp, entries):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:xz", preset=9, format=tarfile.USTAR_FORMAT) as tf:
        for name, data, _ in entries:
            ti = tarfile.TarInfo(name)
            ti.size, ti.mtime, ti.mode, ti.uid, ti.gid, ti.uname, ti.gname = len(data), 0, 0o644, 0, 0, "", ""
            tf.addfile(ti, io.BytesIO(data))
    path = os.path.join(exp, rep.ARCHIVE)
    with open(path + ".tmp", "wb") as fh:
        fh.write(buf.getvalue())
    os.replace(path + ".tmp", path)


def runs_table(exp):
    """runs.csv's text for the experiment's run trees (unpacked at exp)."""
    rows = []
    for d, subdirs, files in os.walk(exp):
        subdirs.sort()
        if os.path.basename(d) != "runs":
            continue
        for name in rep.run_names(d):
            r = rep.read_run_blocks(d, name)
            vals = [v[3] for v in r["val"] if math.isfinite(v[3])]
            rows.append([os.path.relpath(os.path.join(d, name), exp).replace(os.sep, "/"), r["rule"], r["k"],
                         "" if r["seed"] is None else r["seed"], (r["base_lr"] or "").split(" ")[0],
                         (r["peak"] or "").split(" ")[0], r["last_step"], r["planned"] or "",
                         "%.6f" % r["bpc"] if r["status"] == "done" else "", "%.6f" % min(vals) if vals else "",
                         r["status"]])
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow(["run", "rule", "k", "seed", "lr", "peak_lr", "steps", "planned_steps", "final_val_bpc",
                "best_val_bpc", "status"])
    w.writerows(rows)
    return out.getvalue()


def main(argv):
    ops = [a for a in argv if a.startswith("-")]
    args = [a for a in argv if not a.startswith("-")]
    if len(args) != 1 or len(ops) > 1 or (ops and ops[0] not in ("--thin", "--unpack", "--csv")):
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        rep.die("usage: dev/sweep/pack_logs.py [--thin | --unpack | --csv] EXP")
    exp = args[0]
    if not os.path.isdir(exp):
        rep.die("%s is not a directory" % exp)
    packed = os.path.exists(os.path.join(exp, rep.ARCHIVE))
    if ops == ["--csv"]:
        with rep.unpacked([exp]) as (d,):
            sys.stdout.write(runs_table(d))
        return 0
    if ops == ["--unpack"]:
        if not packed:
            rep.die("%s holds no %s" % (exp, rep.ARCHIVE))
        rep.unpack_archive(exp, exp)
        os.remove(os.path.join(exp, rep.ARCHIVE))
        print("unpacked %s" % exp)
        return 0
    if packed:
        rep.die("%s is packed already (%s): --unpack it first to add runs" % (exp, rep.ARCHIVE))
    entries, thinned_away = members(exp, thin=ops == ["--thin"])
    if not entries:
        rep.die("%s holds no run files" % exp)
    table = runs_table(exp)
    write_archive(exp, entries)
    with open(os.path.join(exp, CSV), "w") as fh:
        fh.write(table)
    packed_files = [p for _, _, p in entries] + thinned_away
    for p in packed_files:
        os.remove(p)
    for d, subdirs, files in sorted(os.walk(exp), key=lambda t: -len(t[0])):  # empty directories left behind
        if d != exp and not os.listdir(d):
            os.rmdir(d)
    print("packed %d files of %s into %s (%d bytes) and %s (%d runs)" % (
        len(packed_files), exp, rep.ARCHIVE, os.path.getsize(os.path.join(exp, rep.ARCHIVE)), CSV,
        table.count("\n") - 1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

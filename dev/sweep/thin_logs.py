#!/usr/bin/python3
"""Thins the logs of finished runs for committing (dev/sweep/README.md, "What is committed"):
for every runs/<rule>_k<k>.log under the given directories whose run is finished (its
.status exists), writes runs/<rule>_k<k>.thin.gz: one line per BLOCK_CHARS (8192) training
characters with the block's mean loss and bpc, its root mean square gradient norm, the lr and
epoch at its last step, its steps and how many of them the clip changed, and the validation
lines as the trainer wrote them (sweep_report.blocks). The trainer logs every step: a one-pass run at B0 = 4 sequences of 8
characters over 8 MB has 250,000 lines, 6 MB gzipped; its thinned log has 977.

    dev/sweep/thin_logs.py DIR...

The output is a pure function of the log (gzip without a time stamp), so running it again
changes nothing. Standard library only.
"""
import gzip
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sweep_report as rep  # noqa: E402


def thin_one(runs_dir, name):
    """Writes runs_dir/name.thin.gz from the run's per-step log (name.log or name.log.gz); returns
    whether it wrote."""
    r = rep.read_run_blocks(runs_dir, name)
    val = r["val"]
    lines = [rep.THIN_HEADER]
    lines += ["block %d %.6g %.6e %.6f %.6f %.6e %d %d\n" % b for b in r["blocks"]]
    lines += ["val %d %.6g %.6f %.6f\n" % v for v in val]
    data = "".join(lines).encode()
    out = os.path.join(runs_dir, name + ".thin.gz")
    if os.path.exists(out):
        with gzip.open(out, "rb") as fh:
            if fh.read() == data:
                return False
    with open(out + ".tmp", "wb") as raw:
        with gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as fh:
            fh.write(data)
    os.replace(out + ".tmp", out)
    return True


def main(argv):
    if not argv or any(a.startswith("-") for a in argv):
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        rep.die("usage: dev/sweep/thin_logs.py DIR...")
    wrote = seen = 0
    for top in argv:
        if not os.path.isdir(top):
            rep.die("%s is not a directory" % top)
        for d, subdirs, files in os.walk(top):
            subdirs.sort()
            if os.path.basename(d) != "runs":
                continue
            for f in sorted(files):
                name = f[:-4]
                if f.endswith(".log") and rep.RUN_RE.match(f) and os.path.exists(os.path.join(d, name + ".status")):
                    seen += 1
                    wrote += thin_one(d, name)
    print("thinned %d finished runs' logs (%d written, %d already up to date)" % (seen, wrote, seen - wrote))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

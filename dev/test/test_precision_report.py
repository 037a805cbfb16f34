#!/usr/bin/env python3
"""test_precision_report.py: dev/RESULTS.md's BF16-against-FP32 table and README.md's line are what the logs give
(dev/precision/report.py --check), a page with one figure changed is caught, each row's final bpc is the last
"val" line of its log read here independently, and packing the logs again gives the archive byte for byte.
Run from the repository root (make test and make test-lab do). Ends with 'test_precision_report: N passed, N failed'."""
import os
import subprocess
import sys
import tarfile
import tempfile

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "test"))  # (harness.py)
sys.path.insert(0, os.path.join(ROOT, "dev", "precision"))
from harness import check, summary  # noqa: E402
import report  # noqa: E402

p = subprocess.run([sys.executable, "-B", os.path.join(ROOT, "dev", "precision", "report.py"), "--check"],
                   capture_output=True, text=True, cwd=ROOT)
check(p.returncode == 0,
      "report.py --check: RESULTS.md's block is what the logs give (%s)" % (p.stdout + p.stderr).strip())

with tempfile.TemporaryDirectory() as tmp:
    # the final bpc of every run, read without report.py: the last "val" line's fifth field
    finals = {}
    with tarfile.open(report.ARCHIVE, "r:xz") as tar:
        tar.extractall(tmp, filter="data")
        for member in tar.getmembers():
            lines = [l for l in tar.extractfile(member).read().decode().splitlines() if l.startswith("val ")]
            finals[member.name.split("/")[0]] = float(lines[-1].split()[4])
    seeds = sorted({int(name.split("seed")[1]) for name in finals})
    check(len(seeds) >= 4 and len(finals) == 2 * len(seeds),
          "FP32 and BF16 runs of 4 or more seeds in the archive: %s" % sorted(finals))
    with open(report.PAGES["bf16-convergence"]) as fh:
        page = fh.read()
    for seed in seeds:
        f, b = finals.get("fp32_seed%d" % seed), finals.get("bf16_seed%d" % seed)
        row = "| %d | %.4f | %.4f |" % (seed, f or 0, b or 0)
        check(row in page, "RESULTS.md has seed %d's row %s" % (seed, row))
        check(f is not None and b is not None and abs(b - f) / f < 0.01,
              "seed %d: BF16's final bpc within 1%% of FP32's (%s, %s)" % (seed, f, b))

    # a changed figure on a copy of each page is caught, and named
    for name, seed_row in (("bf16-convergence", ("| 1 | 0.", "| 1 | 9.")), ("readme-bf16", (" within ", " within 9"))):
        with open(report.PAGES[name]) as fh:
            page = fh.read()
        i, j = report.page_block(page, name)
        changed = page[:i] + page[i:j].replace(*seed_row, 1) + page[j:]
        copy = os.path.join(tmp, name + ".md")
        with open(copy, "w") as fh:
            fh.write(changed)
        kept, report.PAGES[name] = report.PAGES[name], copy
        check(changed != page and report.main(["report.py", "--check"]) == 1, "a changed figure in %s fails --check"
              % name)
        report.PAGES[name] = kept

    # packing the same logs gives the same bytes (sorted, no time stamps or owners)
    report.ARCHIVE = os.path.join(tmp, "again.tar.xz")
    report.pack(tmp)
    with open(report.ARCHIVE, "rb") as a, open(os.path.join(ROOT, "dev", "precision", "logs.tar.xz"), "rb") as b:
        check(a.read() == b.read(), "the archive packs again byte for byte")
summary("test_precision_report")

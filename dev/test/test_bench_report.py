#!/usr/bin/env python3
"""test_bench_report.py: dev/RESULTS.md's tables of the BF16 mode's speed, its breakdown and README.md's line are what
the committed logs give (dev/bench/bench_report.py --check), a page with one figure changed is caught, and each row's
ratios on the page agree with the ones bench_cpu.sh itself printed in its log (its "--bf16 / FP32" and "--bf16 / the
better" columns, computed there from the same runs), as does the count of configurations that meet the goal.
Run from the repository root (make test and make test-lab do). Ends with 'test_bench_report: N passed, N failed'."""
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "test"))  # (harness.py)
sys.path.insert(0, os.path.join(ROOT, "dev", "bench"))
from harness import check, summary  # noqa: E402
import bench_report  # noqa: E402

p = subprocess.run([sys.executable, "-B", os.path.join(ROOT, "dev", "bench", "bench_report.py"), "--check"],
                   capture_output=True, text=True, cwd=ROOT)
check(p.returncode == 0, "bench_report.py --check: the pages' blocks are what the logs give (%s)"
      % (p.stdout + p.stderr).strip())

# the logs' own ratios, read here by column name without bench_report.py
logged = {}  # (run, H, B, threads): (--bf16 / FP32, --bf16 / the better torch bf16 or None)
for run, (path, _, _) in enumerate(bench_report.LOGS, 1):
    with open(path) as fh:
        lines = fh.read().splitlines()
    head = next(i for i, ln in enumerate(lines) if ln.startswith("| H | B | T | threads |"))
    names = [c.strip() for c in lines[head].strip("|").split("|")]
    for ln in lines[head + 2:]:
        if not ln.startswith("|"):
            break
        cells = dict(zip(names, (c.strip() for c in ln.strip("|").split("|"))))
        better = cells["--bf16 / the better"]
        logged[(run, int(cells["H"]), int(cells["B"]), int(cells["threads"]))] = (
            float(cells["--bf16 / FP32"].rstrip("x")), None if better == "-" else float(better.rstrip("x")))

with open(bench_report.PAGES["bf16-speed"]) as fh:
    page = fh.read()
i, j = bench_report.pages.page_block(page, bench_report.GENERATOR, "bf16-speed", bench_report.PAGES["bf16-speed"])
block = page[i:j]
shown = {}
for ln in block.splitlines():
    m = re.fullmatch(r"\| (\d+) \| (\d+) \| (\d+) \| (\d+) \|(.*)\|", ln)
    if m:
        cells = [c.strip() for c in m.group(5).split("|")]
        shown[tuple(int(m.group(k)) for k in (4, 1, 2, 3))] = (
            float(cells[2].rstrip("x")), None if cells[6] == "-" else float(cells[6].rstrip("x")))
check(len(logged) >= 10 * len(bench_report.LOGS) and sorted(shown) == sorted(logged),  # 10 configurations a run
      "the page's table has the logs' %d rows (run, H, B, threads)" % len(logged))
# bench_cpu.sh printed its ratios from unrounded chars/s, the page's come from the rounded ones: 0.01 apart at most
off = [k for k in logged if k in shown and (abs(shown[k][0] - logged[k][0]) > 0.0101 or
                                          (shown[k][1] is None) != (logged[k][1] is None) or
                                          (shown[k][1] is not None and abs(shown[k][1] - logged[k][1]) > 0.0101))]
check(not off, "each row's --bf16 / FP32 and --bf16 / torch bf16 are the ratios bench_cpu.sh printed (off: %s)" % off)
lower = {}
for (run, *config), (_, better) in logged.items():
    if better is not None:
        lower[tuple(config)] = min(better, lower.get(tuple(config), better))
# the logs print two decimals: a ratio within 0.005 of 1.5 may count either way
surely, maybe = sum(x >= 1.505 for x in lower.values()), sum(x >= 1.495 for x in lower.values())
said = re.search(r"1\.5x or more in (\d+) of (\d+) rows", block.replace("\n", " "))
check(said is not None and surely <= int(said.group(1)) <= maybe and int(said.group(2)) == len(lower),
      "the verdict counts %s configurations at 1.5x PyTorch's bf16 autocast or more in every run, as the logs' own"
      " ratios do (%d - %d of %d)" % (said.group(1) if said else "no", surely, maybe, len(lower)))

# the breakdown's share of the products at H = 1024, read here from step_vs_sgemm's log: the rows whose work is
# in GFLOP, their shares summed per table
shares, table = {}, None
with open(bench_report.PHASES_LOG) as fh:
    for ln in fh:
        m = re.match(r"\| phase \(H=(\d+) B=\d+, (\d+) thread", ln)
        if m:
            table = (int(m.group(1)), int(m.group(2)))
        elif table and ln.startswith("| ") and " GFLOP |" in ln and not ln.startswith("| all |"):
            shares[table] = shares.get(table, 0) + float(ln.split("|")[3].strip().rstrip("%"))
i2, j2 = bench_report.pages.page_block(page, bench_report.GENERATOR, "bf16-breakdown", bench_report.RESULTS)
# a span, or one figure where both round to it
said = re.search(r"At H = 1024 the products are (\d+)(?: – (\d+))?% of the step", " ".join(page[i2:j2].split()))
wide = [v for k, v in shares.items() if k[0] == 1024]
check(said is not None and len(wide) == 2 and (int(said.group(1)), int(said.group(2) or said.group(1))) == (
          round(min(wide)), round(max(wide))),
      "the breakdown's products' share at H = 1024 is the log's (%s)" % wide)

# the sentence on the 0.7 goal follows the phases: with the FP32 phases a hundredth as long (their ms cells scaled in
# a copy of the log), every product at the GEMM rate would pass 0.7, and the products alone are said to stand in the way
tmp = tempfile.mkdtemp()
try:
    fast = os.path.join(tmp, "phases.txt")
    with open(bench_report.PHASES_LOG) as fh, open(fast, "w") as out:
        for ln in fh:
            cells = ln.split("|")
            if ln.startswith("| ") and len(cells) == 8 and cells[4].strip().endswith(" MB"):
                cells[2] = " %.4f " % (float(cells[2]) / 100)
                ln = "|".join(cells)
            out.write(ln)
    normal = " ".join(bench_report.breakdown_block(bench_report.read_runs()).split())
    saved, bench_report.PHASES_LOG = bench_report.PHASES_LOG, fast
    try:
        quick = " ".join(bench_report.breakdown_block(bench_report.read_runs()).split())
    finally:
        bench_report.PHASES_LOG = saved
    check("needs the FP32 phases shortened" in normal and "the products alone stand between" in quick
          and "needs the FP32 phases shortened" not in quick,
          "the breakdown's sentence on the 0.7 goal follows the phases' times (FP32 phases a hundredth as long)")
finally:
    shutil.rmtree(tmp)

# a page with one figure changed fails --check: a cell of the table, a figure of the breakdown
for name, old, new in (("bf16-speed", None, None), ("bf16-breakdown", "would be at 0.", "would be at 9.")):
    tmp = tempfile.mkdtemp()
    try:
        copy = os.path.join(tmp, "RESULTS.md")
        if old is None:
            row = next(ln for ln in block.splitlines() if ln.startswith("| 1024 | 128 | 1 | 1 |"))
            cells = row.split("|")
            cells[6] = " %s " % ("9" + cells[6].strip())  # the --bf16 chars/s, one digit more
            old, new = row, "|".join(cells)
        with open(copy, "w") as fh:
            fh.write(page.replace(old, new, 1))
        out = subprocess.run([sys.executable, "-B", "-c", "import sys; sys.path.insert(0, %r); "
                              "import bench_report as b; b.PAGES[%r] = %r; "
                              "sys.exit(b.main(['bench_report.py', '--check']))"
                              % (os.path.join(ROOT, "dev", "bench"), name, copy)], capture_output=True, text=True,
                             cwd=ROOT)
        check(old in page and out.returncode == 1 and "%s differs" % name in out.stdout,
              "a RESULTS.md with one figure of %s changed fails --check (exit %d)" % (name, out.returncode))
    finally:
        shutil.rmtree(tmp)
summary("test_bench_report")

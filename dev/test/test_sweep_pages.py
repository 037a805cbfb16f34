#!/usr/bin/env python3
"""test_sweep_pages.py: every figure the pages state about the large-batch sweep is what the
committed logs give. dev/sweep/sweep_pages.py --check regenerates the blocks of README.md,
dev/RESULTS.md and dev/sweep/README.md from the logs and must find them unchanged; on a copy
of the pages with one figure changed it must fail and name the block. And the evidence is
compact and whole: in a copy of dev/sweep with every page and plot removed, sweep_pages.py
--reports makes each page again from the experiments' archives alone, byte for byte, and
pack_logs.py --csv gives each committed runs.csv.
Run from the repository root (make test and make test-lab do). Ends with 'test_sweep_pages: N passed, N failed'."""
import os
import shutil
import subprocess
import sys
import tempfile

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "test"))  # (harness.py)
from harness import check, summary  # noqa: E402

PAGES_PY = os.path.join(ROOT, "dev", "sweep", "sweep_pages.py")
PAGES = ("README.md", "dev/RESULTS.md", "dev/sweep/README.md")
EXPERIMENTS = ("1epoch", "4epochs", "legw", "frontier")


def run(*args):
    p = subprocess.run([sys.executable, "-B", PAGES_PY] + list(args), capture_output=True, text=True, cwd=ROOT)
    return p.returncode, p.stdout + p.stderr


def copy_pages(tmp):
    for page in PAGES:
        os.makedirs(os.path.join(tmp, os.path.dirname(page)), exist_ok=True)
        shutil.copy(os.path.join(ROOT, page), os.path.join(tmp, page))


def regenerate(tmp):
    """Every experiment's pages and runs.csv from its archive alone, in a copy of dev/sweep whose pages and plots
    are removed first: byte for byte what is committed (the plots: made again, where gnuplot is here)."""
    shutil.copytree(os.path.join(ROOT, "dev", "sweep"), os.path.join(tmp, "dev", "sweep"),
                    ignore=shutil.ignore_patterns("__pycache__"))
    copy_pages(tmp)
    made = []
    for e in EXPERIMENTS:
        for d, _, files in os.walk(os.path.join(tmp, "dev", "sweep", e)):
            for f in files:
                if f.endswith((".md", ".png")):
                    os.remove(os.path.join(d, f))
                    made.append(os.path.relpath(os.path.join(d, f), tmp))
    check(any(f.endswith(".md") for f in made) and any(f.endswith(".png") for f in made),
          "the copy's pages and plots removed (%d files)" % len(made))
    p = subprocess.run([sys.executable, "-B", os.path.join(tmp, "dev", "sweep", "sweep_pages.py"), "--reports"],
                       capture_output=True, text=True, cwd=tmp)
    check(p.returncode == 0, "sweep_pages.py --reports in the copy: exit %d %s" % (p.returncode, p.stderr.strip()))
    differ = [f for f in made if f.endswith(".md") and not same(os.path.join(tmp, f), os.path.join(ROOT, f))]
    check(not differ, "every page regenerates from the archives byte for byte (differ: %s)" % differ)
    missing = [f for f in made if f.endswith(".png") and not os.path.exists(os.path.join(tmp, f))]
    check(not shutil.which("gnuplot") or not missing, "every plot is made again (missing: %s)" % missing)
    differ = [p for p in PAGES if not same(os.path.join(tmp, p), os.path.join(ROOT, p))]
    check(not differ, "the figures on the pages come out the same (differ: %s)" % differ)
    for e in EXPERIMENTS:
        p = subprocess.run([sys.executable, "-B", os.path.join(tmp, "dev", "sweep", "pack_logs.py"), "--csv",
                            os.path.join("dev", "sweep", e)], capture_output=True, text=True, cwd=tmp)
        with open(os.path.join(ROOT, "dev", "sweep", e, "runs.csv")) as fh:
            check(p.returncode == 0 and p.stdout == fh.read(), "%s/runs.csv is what its archive gives" % e)
    left = [f for e in EXPERIMENTS for f in os.listdir(os.path.join(ROOT, "dev", "sweep", e))
            if f == "runs" or f.endswith((".log", ".gz"))]
    check(not left, "no loose run logs beside the archives (%s)" % left)


def premises_checked():
    """The prose's statements hold on the logs, and one the logs contradict is caught."""
    sys.path.insert(0, os.path.join(ROOT, "dev", "sweep"))
    import sweep_pages  # noqa: E402
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        with sweep_pages.rep.unpacked(["dev/sweep/frontier"]) as (frontier,):
            fs = [sweep_pages.budget_facts(frontier, name) for name in ("2000000", "8000000")]
    finally:
        os.chdir(cwd)
    got = sweep_pages.premises(fs)
    check(got and all(holds for _, holds in got), "every statement of the prose holds on the logs: %s" %
          [what for what, holds in got if not holds])
    fs[1]["legw", 4] = (0.05, 0.01, 5)  # as if LEGW at k = 4 were far outside the margin at 8 MB
    fs[0]["legw-puri"] = (0.2, 0.1, 3)  # ... and puri-run clearly better than LEGW at 2 MB
    fs[1]["peak"] = dict(fs[1]["peak"], own="needed")  # ... and a schedule of one's own needed at 8 MB, 8 seeds
    false = [what for what, holds in sweep_pages.premises(fs) if not holds]
    check(len(false) == 3 and "k = 4" in false[0] and "schedule of one's own" in false[1] and "8 seeds" in false[2],
          "statements the changed figures contradict are caught: %s" % false)


def same(a, b):
    if not os.path.exists(a) or not os.path.exists(b):
        return False
    with open(a, "rb") as x, open(b, "rb") as y:
        return x.read() == y.read()


def main():
    rc, out = run("--check")
    check(rc == 0, "the committed pages state what the logs give: %s" % out.strip())
    with tempfile.TemporaryDirectory() as tmp:
        copy_pages(tmp)
        rc, out = run("--check", "--root", tmp)
        check(rc == 0, "a copy of the pages checks the same: %s" % out.strip())
        # one figure changed in each page: the check fails and names each page and block
        changes = (("dev/sweep/README.md", "+0.0811 ± 0.0110 (8) outside", "+0.0810 ± 0.0110 (8) outside",
                    "frontier-facts"),
                   ("README.md", "+0.0173 ± 0.0014", "+0.017 ± 0.0014", "readme-bullet"),
                   ("dev/RESULTS.md", "| 0.5198 |", "| 0.5199 |", "frontier-results"))
        texts = {}
        for page, old, new, block in changes:
            path = os.path.join(tmp, page)
            texts[page] = open(path).read()
            check(old in texts[page], "%s states %r" % (page, old))
            with open(path, "w") as fh:
                fh.write(texts[page].replace(old, new, 1))
        rc, out = run("--check", "--root", tmp)
        check(rc == 1 and all(page in out and block in out for page, _, _, block in changes),
              "a changed figure fails the check, naming its page and block: %s" % out.strip())
        rc, out = run("--write", "--root", tmp)
        check(rc == 0 and all(open(os.path.join(tmp, p)).read() == t for p, t in texts.items()),
              "--write puts the logs' figures back")
        # a block the program does not make is refused
        with open(os.path.join(tmp, "README.md"), "a") as fh:
            fh.write("<!-- generated by dev/sweep/sweep_pages.py: nosuch -->\n<!-- end of nosuch -->\n")
        rc, out = run("--check", "--root", tmp)
        check(rc == 2 and "nosuch" in out, "an unknown block is refused with exit 2: %s" % out.strip())
    premises_checked()
    with tempfile.TemporaryDirectory() as tmp:
        regenerate(tmp)
    return summary("test_sweep_pages")


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""test_precision_report.py: dev/RESULTS.md's BF16-against-FP32 and FP16-against-FP32 tables (on the CUDA-on-CPU
layer and on a GPU) and README.md's line
are what the logs give (dev/precision/report.py --check), a page with one figure changed is caught, each row's
figures (final bpc, the FP16 runs' skipped steps and last loss scale) and each paired mean and interval are read
from the logs here independently, and packing the logs again gives each archive byte for byte.
Run from the repository root (make test and make test-lab do). Ends with 'test_precision_report: N passed, N failed'."""
import os
import statistics
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

# Student t's 0.975 quantile by degrees of freedom (tables), for the intervals read here without report.py
T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228,
        11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131}

p = subprocess.run([sys.executable, "-B", os.path.join(ROOT, "dev", "precision", "report.py"), "--check"],
                   capture_output=True, text=True, cwd=ROOT)
check(p.returncode == 0,
      "report.py --check: the pages' blocks are what the logs give (%s)" % (p.stdout + p.stderr).strip())


def read_archive(path, into):
    """{run name: (final val bpc, skipped steps, last loss scale)}, read without report.py: the last "val" line's
    fifth field; the "train" lines' eighth field (1 = skipped) and the last one's seventh. The logs go into INTO."""
    runs = {}
    with tarfile.open(path, "r:xz") as tar:
        tar.extractall(into, filter="data")
        for member in tar.getmembers():
            lines = tar.extractfile(member).read().decode().splitlines()
            vals = [l.split() for l in lines if l.startswith("val ")]
            trains = [l.split() for l in lines if l.startswith("train ")]
            runs[member.name.split("/")[0]] = (float(vals[-1][4]), sum(f[7] == "1" for f in trains), trains[-1][6])
    return runs


def paired_text(name, a, b):
    """'NAME - FP32 over n paired seeds: +m ± h' from the finals {seed: bpc} of NAME (a) and FP32 (b)."""
    d = [a[s] - b[s] for s in sorted(a)]
    half = T975[len(d) - 1] * statistics.stdev(d) / len(d) ** 0.5
    return "%s - FP32 over %d paired seeds: %+.4f ± %.4f" % (name, len(d), round(statistics.mean(d), 4) or 0.0, half)


with open(report.PAGES["bf16-convergence"]) as fh:
    results_page = fh.read()
with open(report.PAGES["readme-precision"]) as fh:
    readme = fh.read()

with tempfile.TemporaryDirectory() as tmp:
    # BF16 against FP32 on make run's configuration
    bf16_dir = os.path.join(tmp, "bf16")
    finals = {name: run[0] for name, run in read_archive(report.ARCHIVES["bf16"], bf16_dir).items()}
    seeds = sorted({int(name.split("seed")[1]) for name in finals})
    check(len(seeds) >= 4 and len(finals) == 2 * len(seeds),
          "FP32 and BF16 runs of 4 or more seeds in the BF16 archive: %s" % sorted(finals))
    for seed in seeds:
        f, b = finals.get("fp32_seed%d" % seed), finals.get("bf16_seed%d" % seed)
        row = "| %d | %.4f | %.4f |" % (seed, f or 0, b or 0)
        check(row in results_page, "RESULTS.md has seed %d's BF16 row %s" % (seed, row))
        check(f is not None and b is not None and abs(b - f) / f < 0.01,
              "seed %d: BF16's final bpc within 1%% of FP32's (%s, %s)" % (seed, f, b))

    # FP16 (and BF16) against FP32 on the small configuration
    fp16_dir = os.path.join(tmp, "fp16")
    runs = read_archive(report.ARCHIVES["fp16"], fp16_dir)
    seeds = sorted({int(name.split("seed")[1]) for name in runs})
    check(len(seeds) >= 4 and len(runs) == 3 * len(seeds),
          "FP32, FP16 and BF16 runs of 4 or more seeds in the FP16 archive: %s" % sorted(runs))
    final = {p: {s: runs["%s_seed%d" % (p, s)][0] for s in seeds} for p in ("fp32", "fp16", "bf16")}
    for seed in seeds:
        f, h, b = (final[p][seed] for p in ("fp32", "fp16", "bf16"))
        _, skipped, scale = runs["fp16_seed%d" % seed]
        row = "| %d | %.4f | %.4f | %+.4f | %.4f | %+.4f | %d | %s |" % (seed, f, h, h - f, b, b - f, skipped, scale)
        check(row in results_page, "RESULTS.md has seed %d's FP16 row %s" % (seed, row))
    for name in ("fp16", "bf16"):
        said = paired_text(name.upper(), final[name], final["fp32"])
        check(said in results_page, "RESULTS.md says %s" % said)
    said = "(H = 64, %d steps): %s over %d seeds" % (
        max(int(l.split()[1]) for l in open(os.path.join(fp16_dir, "fp16_seed1", "train.log")) if l.startswith("val ")),
        paired_text("FP16", final["fp16"], final["fp32"]).split(": ")[1], len(seeds))
    check(said in readme.replace("\n  ", " "), "README.md says %s" % said)
    total = sum(runs["fp16_seed%d" % s][1] for s in seeds)
    check("skipped %d of the FP16 runs' " % total in results_page,
          "RESULTS.md says the scaler skipped %d steps" % total)
    worst = "of a pair %.2f%%; BF16" % max(100 * abs(final["fp16"][s] - final["fp32"][s]) / final["fp32"][s]
                                          for s in seeds)
    check(worst in results_page, "RESULTS.md says FP16's largest relative difference %s" % worst)

    fp16_scale1 = runs["fp16_seed1"][2]

    # FP16 against FP32 on a GPU, make run's configuration; its FP32 against ./train's (the BF16 archive's)
    gpu_dir = os.path.join(tmp, "gpu")
    runs = read_archive(report.ARCHIVES["gpu"], gpu_dir)
    seeds = sorted({int(name.split("seed")[1]) for name in runs})
    check(len(seeds) >= 4 and len(runs) == 2 * len(seeds),
          "FP32 and FP16 runs of 4 or more seeds in the GPU archive: %s" % sorted(runs))
    gpu = {p: {s: runs["%s_seed%d" % (p, s)][0] for s in seeds} for p in ("fp32", "fp16")}
    for seed in seeds:
        f, h = gpu["fp32"][seed], gpu["fp16"][seed]
        cpu = finals.get("fp32_seed%d" % seed)
        _, skipped, scale = runs["fp16_seed%d" % seed]
        row = "| %d | %.4f | %.4f | %+.4f | %+.2f%% | %s | %s | %d | %s |" % (
            seed, f, h, round(h - f, 4) or 0.0, round(100 * (h - f) / f, 2) or 0.0,
            "%.4f" % cpu if cpu else "-", "%+.4f" % (f - cpu) if cpu else "-", skipped, scale)
        check(row in results_page, "RESULTS.md has seed %d's GPU row %s" % (seed, row))
        check(cpu is None or abs(f - cpu) < 1e-3,
              "seed %d: the GPU's FP32 ends within 0.001 of ./train's (%s, %s)" % (seed, f, cpu))
    said = paired_text("FP16", gpu["fp16"], gpu["fp32"])
    check(said in results_page, "RESULTS.md says %s" % said)
    said = "FP16 - FP32 %s over %d seeds" % (said.split(": ")[1], len(seeds))
    check(said in readme.replace("\n  ", " "), "README.md says %s" % said)
    total = sum(runs["fp16_seed%d" % s][1] for s in seeds)
    check("skipped %d of the FP16 runs' %d steps" % (total, 800 * len(seeds)) in results_page,
          "RESULTS.md says the GPU's scaler skipped %d steps" % total)

    # the verdict's other branches, which the committed logs do not take
    check(report.fp16_verdict((0.01, 0.005, [(1, 0.01)] * 4), " at this size")
          == "FP16's interval lies above 0: FP16 ends worse than FP32 at this size."
          and report.fp16_verdict((-0.01, 0.005, [(1, -0.01)] * 4))
          == "FP16's interval lies below 0: FP16 ends better than FP32.",
          "an interval clear of 0 is said as FP16 worse (above) or better (below)")

    # a changed figure on a copy of each page is caught, and named
    for name, change in (("bf16-convergence", ("| 1 | 0.", "| 1 | 9.")),
                         ("readme-precision", (" within ", " within 9")),
                         ("fp16-convergence", ("| 1 | ", "| 1 | 9")),
                         ("fp16-convergence", (" | %s |\n" % fp16_scale1, " | 1 |\n")),
                         ("gpu-convergence", ("| 1 | ", "| 1 | 9")),
                         ("gpu-convergence", (" | %s |\n" % runs["fp16_seed1"][2], " | 1 |\n"))):
        with open(report.PAGES[name]) as fh:
            page = fh.read()
        i, j = report.pages.page_block(page, report.GENERATOR, name, report.PAGES[name])
        changed = page[:i] + page[i:j].replace(*change, 1) + page[j:]
        copy = os.path.join(tmp, name + ".md")
        with open(copy, "w") as fh:
            fh.write(changed)
        kept, report.PAGES[name] = report.PAGES[name], copy
        check(changed != page and report.main(["report.py", "--check"]) == 1,
              "a changed figure in %s (%r) fails --check" % (name, change[0]))
        report.PAGES[name] = kept

    # packing the same logs gives the same bytes (sorted, no time stamps or owners)
    for experiment, work in (("bf16", bf16_dir), ("fp16", fp16_dir), ("gpu", gpu_dir)):
        committed, report.ARCHIVES[experiment] = report.ARCHIVES[experiment], os.path.join(tmp, experiment + ".tar.xz")
        report.pack(experiment, work)
        with open(report.ARCHIVES[experiment], "rb") as a, open(committed, "rb") as b:
            check(a.read() == b.read(), "the %s archive packs again byte for byte" % experiment)
summary("test_precision_report")

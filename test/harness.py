"""The Python tests' harness, as test/test.h is the C tests': one line per check, "ok" or "FAIL"
with what was compared, and the summary line "name: N passed, N failed" that test/run.sh adds up.
The system's tests run as `python3 test/NAME.py`, so this directory is on their import path; the
lab's (dev/test/) put it there."""
import sys

counts = {"passed": 0, "failed": 0}


def check(ok, what):
    counts["passed" if ok else "failed"] += 1
    print(("ok    %s" if ok else "FAIL  %s") % what)


def summary(name):
    """Prints the summary line and exits: 1 if any check failed."""
    print("%s: %d passed, %d failed" % (name, counts["passed"], counts["failed"]))
    sys.exit(1 if counts["failed"] else 0)

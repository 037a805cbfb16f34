#!/usr/bin/env python3
"""test_nvcc_mpi.py: the GPU build takes the flags of an MPI wrapper that emits -pthread and
-Wl,... (Open MPI built from source, HPC-X; Debian's wrapper emits neither). nvcc refuses both
("nvcc fatal: Unknown option '-pthread'"), so the Makefile passes them through -Xcompiler and
-Xlinker (the Makefile's nvcc_host_flags). A stand-in mpicc in a scratch folder answers -showme:compile and
-showme:link with such flags and builds the Makefile's MPI probe against a stand-in libmpi (so
no MPI installation is needed). Then:
  1. `make -n -B` prints the nvcc lines of train_gpu, train_gpu_fp32 and build/test_gpu: each has
     every wrapper flag in its nvcc form and none bare;
  2. with nvcc present, train_gpu's own line, with a small MPI program in place of train.cu and one
     architecture, compiles and links, and the -Wl,-rpath reached the linker (the binary's RUNPATH).
Runs from the repository root (make test does), about 15 s. Ends with
'test_nvcc_mpi: N passed, N failed'."""
import os
import shlex
import shutil
import stat
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
from harness import check, summary  # noqa: E402  (test/harness.py)


def write(path, text, executable=False):
    with open(path, "w") as f:
        f.write(text)
    if executable:
        os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


def find_nvcc():
    return shutil.which("nvcc") or ("/usr/local/cuda/bin/nvcc" if os.access("/usr/local/cuda/bin/nvcc", os.X_OK) else None)


with tempfile.TemporaryDirectory() as d:
    inc, lib = os.path.join(d, "include"), os.path.join(d, "lib")
    os.makedirs(inc)
    os.makedirs(lib)
    write(os.path.join(inc, "mpi.h"), "#ifdef __cplusplus\nextern \"C\" {\n#endif\nint MPI_Init(int *, char ***);\n"
          "int MPI_Finalize(void);\nint MPI_Initialized(int *);\n#ifdef __cplusplus\n}\n#endif\n")
    write(os.path.join(d, "fakempi.c"), "#include <mpi.h>\nint MPI_Init(int *c, char ***v) { (void)c; (void)v; return 0; }\n"
          "int MPI_Finalize(void) { return 0; }\nint MPI_Initialized(int *f) { *f = 0; return 0; }\n")
    cc = os.environ.get("CC", "cc")
    r = subprocess.run([cc, "-c", "-I", inc, os.path.join(d, "fakempi.c"), "-o", os.path.join(d, "fakempi.o")],
                       capture_output=True, text=True)
    r2 = subprocess.run(["ar", "rcs", os.path.join(lib, "libfakempi.a"), os.path.join(d, "fakempi.o")],
                        capture_output=True, text=True) if r.returncode == 0 else r
    err = (r.stderr + r2.stderr).strip()[:200]
    check(r.returncode == 0 and r2.returncode == 0, "the stand-in libmpi builds" + (": " + err if err else ""))
    # what an Open MPI built from source (or HPC-X) prints; the flags train.cu's build must carry over
    compile_flags = "-I%s -pthread" % inc
    link_flags = "-pthread -L%s -Wl,-rpath -Wl,%s -Wl,--enable-new-dtags -lfakempi" % (lib, lib)
    mpicc = os.path.join(d, "mpicc")
    write(mpicc, "#!/bin/sh\ncase \"$1\" in\n  -showme:compile) echo '%s' ;;\n  -showme:link) echo '%s' ;;\n"
          "  *) exec \"${OMPI_CC:-cc}\" -pthread -I'%s' \"$@\" -L'%s' -lfakempi ;;\nesac\n"
          % (compile_flags, link_flags, inc, lib), executable=True)

    nvcc = find_nvcc()
    one_arch = "-gencode arch=compute_80,code=sm_80"
    r = subprocess.run(["make", "-n", "-B", "MPICC=" + mpicc, "NVCC=" + (nvcc or "nvcc"), "GPU_ARCHS=" + one_arch,
                        "BUILD=" + os.path.join(d, "build"), "train_gpu", "train_gpu_fp32",
                        os.path.join(d, "build", "test_gpu")], cwd=ROOT, capture_output=True, text=True)
    # (the trainers' lines end by keeping ptxas's report: "2> FILE; ..." is the shell's, not nvcc's)
    lines = [ln.split(" 2> ")[0] for ln in r.stdout.splitlines() if "nvcc" in ln.split(" ")[0]]
    check(r.returncode == 0 and len(lines) == 3, "make -n prints the three nvcc lines (%d; exit %d %s)"
          % (len(lines), r.returncode, r.stderr.strip()[-200:]))
    for ln in lines:
        w = shlex.split(ln)
        target = w[w.index("-o") + 1] if "-o" in w else "?"
        bare = [a for i, a in enumerate(w) if (a == "-pthread" and w[i - 1] != "-Xcompiler")
                or (a.startswith("-Wl,") and w[i - 1] != "-Xcompiler")]
        want = ["-Xcompiler -pthread", "-Xlinker -rpath -Xlinker %s" % lib, "-Xlinker --enable-new-dtags", "-I%s" % inc,
                "-L%s" % lib, "-lfakempi", "-DUSE_MPI"]
        missing = [x for x in want if x not in " ".join(w)]
        check(not bare and not missing, "%s: the wrapper's flags in nvcc's form (bare: %s, missing: %s)"
              % (os.path.basename(target), bare or "none", missing or "none"))

    # 2. train_gpu's own line, compiled and linked, with a small MPI program for train.cu
    if not nvcc:
        print("skip  the real nvcc build: no nvcc here (check 1 ran)")
    elif lines:
        probe = os.path.join(d, "probe.cu")
        write(probe, "#include <mpi.h>\n__global__ void k() {}\n"
              "int main(void) { int f = 1; MPI_Initialized(&f); k<<<1, 1>>>(); return f; }\n")
        w = shlex.split(lines[0])
        out = os.path.join(d, "probe")
        w = [probe if a == "train.cu" else a for a in w]
        w[w.index("-o") + 1] = out
        r = subprocess.run(w, cwd=ROOT, capture_output=True, text=True)
        check(r.returncode == 0, "train_gpu's nvcc line builds an MPI program against the wrapper (exit %d%s)"
              % (r.returncode, ": " + r.stderr.strip()[-300:] if r.returncode else ""))
        dyn = subprocess.run(["readelf", "-d", out], capture_output=True, text=True).stdout if r.returncode == 0 else ""
        check(lib in dyn and ("RUNPATH" in dyn or "RPATH" in dyn), "-Wl,-rpath reached the linker: the binary's run path "
              "is the wrapper's library folder")

summary("test_nvcc_mpi")

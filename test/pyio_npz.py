"""Damaged .npz files for `tools/mlstm_ckpt.py import`, for test/test_pyio.c (the checks are on the C side).

    python3 test/pyio_npz.py import IN.npz DIR CASE...     named damages (spoil, below), imported
    python3 test/pyio_npz.py fuzz IN.npz CKPT DIR N SEED   N random ones, imported

IN.npz is an `export` of checkpoint CKPT. Each damaged copy is imported as the command
line does it, mlstm_ckpt.main(["import", damaged, out]), in this one process (a Python
start per case would cost more than the cases). import writes DIR/dmg_CASE.npz for each
CASE and prints `CASE rc=R lines=L written=W stderr=FIRST LINE` (R: the exit status, or
-1 for an exception that escaped main, a traceback on the command line; L: lines on
stderr; W: 1 if DIR/dmg_CASE.ckpt exists after). fuzz damages IN.npz N times
(truncations, flipped bytes in the zip's and the .npy headers' structure and anywhere,
members replaced by well-formed arrays of another dtype or shape): each must be refused
(exit 2, one stderr line `error: ` naming the damaged file, no output file, no
temporary file left) or accepted (exit 0, an output that load() reads; the same bytes
as CKPT when no value changed); it prints how many of each and of neither ("bad"),
describing the first few bad ones on stderr. NumPy only.
"""
import contextlib
import io
import os
import random
import sys
import traceback
import zipfile

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
import mlstm_ckpt  # noqa: E402


def members(path):
    with np.load(path) as z:
        return {k: z[k] for k in z.files}


def raw_zip(path, entries):
    """A zip of (name, bytes) as they are, stored: the members np.savez would never write."""
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in entries:
            zf.writestr(name, data)


def npy_bytes(a):
    f = io.BytesIO()
    np.lib.format.write_array(f, a, allow_pickle=True)
    return f.getvalue()


def lying_npy(descr, shape, data=b"\0" * 64):
    """An .npy member whose header asks for `shape` over a few bytes of data."""
    f = io.BytesIO()
    np.lib.format.write_array_header_1_0(f, {"descr": descr, "fortran_order": False, "shape": shape})
    return f.getvalue() + data


def spoil(case, src, dst):
    z = members(src)
    raw = open(src, "rb").read()
    entries = lambda: [(k + ".npy", npy_bytes(v)) for k, v in z.items()]  # noqa: E731
    if case == "truncated_half":
        open(dst, "wb").write(raw[:len(raw) // 2])
    elif case == "truncated_end":  # the end of central directory record cut
        open(dst, "wb").write(raw[:-10])
    elif case == "empty":
        open(dst, "wb").write(b"")
    elif case == "npy_not_npz":  # one array saved with np.save, not an archive
        with open(dst, "wb") as f:
            np.save(f, z["h"])
    elif case == "member_not_npy":
        raw_zip(dst, entries() + [("notes.txt", b"hello")])
    elif case == "member_garbage":  # a well-formed zip whose W_h member is no .npy
        raw_zip(dst, [(n, b"not an array" if n == "params/W_h.npy" else d) for n, d in entries()])
    elif case == "member_lying_shape":  # a header that asks for 4 TB of h over 64 bytes
        raw_zip(dst, [(n, lying_npy("<f4", (1 << 40, 32)) if n == "h.npy" else d) for n, d in entries()])
    elif case == "member_negative_shape":
        raw_zip(dst, [(n, lying_npy("<f4", (-4, 32)) if n == "h.npy" else d) for n, d in entries()])
    elif case == "member_object":  # a pickled object array in place of E
        pickled = npy_bytes(np.array([None, 1], dtype=object))
        raw_zip(dst, [(n, pickled if n == "params/E.npy" else d) for n, d in entries()])
    else:
        changes = {
            "D_float": ("D", np.float64(z["D"])),
            "step_float": ("step", np.float64(z["step"])),
            "rng_string": ("rng", np.str_("0x5eed")),
            "D_1d": ("D", np.array([z["D"]])),
            "wnorm_2d": ("wnorm", np.array([[z["wnorm"]]])),
            "step_negative": ("step", np.int64(-1)),
            "D_huge": ("D", np.int64(1 << 40)),
            "wnorm_2": ("wnorm", np.int64(2)),
            "scaler_float64": ("scaler", z["scaler"].view(np.float64)),  # the same 48 bytes as 6 doubles
            "scaler_short": ("scaler", z["scaler"][:40]),
            "run_int32": ("run", z["run"].astype(np.int32)),
            "run_odd": ("run", np.frombuffer(b"seq-len\0" b"16\0" b"steps\0", np.uint8)),
            "h_1d": ("h", z["h"].reshape(-1)),
            "c_rows": ("c", z["c"][:-1]),
            "b_complex": ("params/b", z["params/b"].astype(np.complex64)),
            "b_out_bool": ("params/b_out", z["params/b_out"] > 0),
            "W_h_transposed": ("params/W_h", z["params/W_h"].T),
            "adam_v_W_x_transposed": ("adam_v/W_x", z["adam_v/W_x"].T),
            "extra_key": ("junk", np.zeros(3, np.float32)),
            "extra_param": ("params/W_extra", np.zeros(3, np.float32)),
            "missing_rng": ("rng", None),
            "missing_W_h": ("params/W_h", None),
            "missing_adam_m_b": ("adam_m/b", None),
            # accepted: the same values in a form np.load reads alike
            "ok_fortran_W_h": ("params/W_h", np.asfortranarray(z["params/W_h"])),
            "ok_float64_h": ("h", z["h"].astype(np.float64)),
            "ok_int32_D": ("D", np.int32(z["D"])),
            "ok_no_run": ("run", None),  # an .npz exported before the run record: none
        }
        if case not in changes and case != "ok_compressed":
            raise SystemExit(f"pyio_npz.py: unknown case {case}")
        if case in changes:
            key, value = changes[case]
            if value is None:
                del z[key]
            else:
                z[key] = value
        with open(dst, "wb") as f:
            (np.savez_compressed if case == "ok_compressed" else np.savez)(f, **z)


def run_import(inp, out):
    """mlstm_ckpt.main(["import", inp, out]): (exit status or None for an escaped exception, stderr, traceback)."""
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            return mlstm_ckpt.main(["import", inp, out]), err.getvalue(), None
    except BaseException:  # what the command line would show as a traceback
        return None, err.getvalue(), traceback.format_exc().strip().replace("\n", " | ")


def import_cases(src, tmp, cases):
    for case in cases:
        inp, out = os.path.join(tmp, f"dmg_{case}.npz"), os.path.join(tmp, f"dmg_{case}.ckpt")
        spoil(case, src, inp)
        rc, msg, tb = run_import(inp, out)
        first = tb or (msg.splitlines() or [""])[0]
        print(f"{case} rc={-1 if rc is None else rc} lines={msg.count(chr(10))} written={int(os.path.exists(out))} "
              f"stderr={first}")


def mutations(raw, z, rng):
    """Damaged versions of the .npz bytes `raw` (whose arrays are z), forever."""
    with zipfile.ZipFile(io.BytesIO(raw)) as zf:
        infos, directory = zf.infolist(), getattr(zf, "start_dir", len(raw) - 2048)
    # the zip's own structure: each local header with its name and the .npy header after it; the central directory
    structure = [(i.header_offset, i.header_offset + 30 + len(i.filename) + 160) for i in infos]
    structure.append((max(0, directory), len(raw)))
    dtypes = (np.float32, np.float64, np.float16, np.int64, np.int8, np.uint64, np.uint8, np.bool_, np.complex64, "U3")
    while True:
        kind = rng.randrange(4)
        if kind == 0:
            yield "truncated", raw[:rng.randrange(len(raw))]
        elif kind in (1, 2):
            b = bytearray(raw)
            for _ in range(rng.randint(1, 4)):
                if kind == 1:
                    at = rng.randrange(len(b))
                else:
                    lo, hi = rng.choice(structure)
                    at = rng.randrange(lo, min(hi, len(b)))
                b[at] ^= rng.randrange(1, 256)
            yield "flipped", bytes(b)
        else:  # a well-formed archive, one member another dtype or shape
            key = rng.choice(sorted(z))
            a = z[key]
            shape = rng.choice([a.shape, a.shape[::-1], (), (1,), a.shape + (1,), (a.size + 1,)])
            try:
                with np.errstate(all="ignore"):  # wrapping casts are fine: any values, well-formed
                    v = np.resize(a, shape).astype(rng.choice(dtypes))
            except (ValueError, TypeError, OverflowError):
                continue
            f = io.BytesIO()
            np.savez(f, **{**z, key: v})
            yield f"member {key} as {v.dtype} {list(v.shape)}", f.getvalue()


def fuzz(src, ckpt, tmp, n, seed):
    raw, want = open(src, "rb").read(), open(ckpt, "rb").read()
    rng = random.Random(seed)
    counts = {"refused": 0, "accepted": 0, "same": 0, "bad": 0}
    bad_shown = 0
    gen = mutations(raw, members(src), rng)
    for i in range(n):
        what, data = next(gen)
        inp, out = os.path.join(tmp, f"fuzz{i}.npz"), os.path.join(tmp, f"fuzz{i}.ckpt")
        open(inp, "wb").write(data)
        rc, msg, tb = run_import(inp, out)
        problem = tb and "a traceback: " + tb
        left = [f for f in os.listdir(tmp) if f.startswith(f"fuzz{i}.ckpt.tmp")]
        if problem is None and rc == 2:
            if msg.count("\n") != 1 or not msg.startswith("error: ") or inp not in msg or os.path.exists(out) or left:
                problem = f"refused, but: stderr {msg!r}, output written {os.path.exists(out)}, temporaries {left}"
            else:
                counts["refused"] += 1
        elif problem is None and rc == 0:
            try:
                mlstm_ckpt.load(out)
                counts["accepted"] += 1
                counts["same"] += open(out, "rb").read() == want
            except mlstm_ckpt.CheckpointError as e:
                problem = f"accepted, and wrote a checkpoint load() refuses: {e}"
        elif problem is None:
            problem = f"exit {rc}, stderr {msg!r}"
        if problem:
            counts["bad"] += 1
            if bad_shown < 5:
                print(f"pyio_npz.py fuzz case {i} ({what}): {problem}", file=sys.stderr)
                bad_shown += 1
            open(os.path.join(tmp, f"fuzz_bad{i}.npz"), "wb").write(data)  # kept for a look
        for f in (inp, out):
            if os.path.exists(f):
                os.unlink(f)
    print(f"cases {n} " + " ".join(f"{k} {v}" for k, v in counts.items()))


if __name__ == "__main__":
    if sys.argv[1:2] == ["import"] and len(sys.argv) >= 5:
        import_cases(sys.argv[2], sys.argv[3], sys.argv[4:])
    elif sys.argv[1:2] == ["fuzz"] and len(sys.argv) == 7:
        fuzz(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]), int(sys.argv[6]))
    else:
        raise SystemExit(__doc__)

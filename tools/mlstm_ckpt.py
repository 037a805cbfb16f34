#!/usr/bin/python3
"""Checkpoints of mlstm.c in Python: read one into NumPy arrays or a PyTorch
state_dict, write one back that ./train --resume, train_gpu and tools/transfer load.
The byte layout is the "Checkpoint format" section of doc/formats.md; harness/checkpoint.h
(checkpoint_save_run, checkpoint_open) is the C side. Format versions 1 to 4 are
read, version 4 is written (3 for a run whose identity a version 3 file holds), with
the run record the trainer wrote kept as bytes (Checkpoint.run) and the run's
identity and score (run_id, best_by, score, loss_ema). NumPy only: torch is imported
when a torch function is called, not before.

    import sys; sys.path.insert(0, "tools")
    import mlstm_ckpt
    ck = mlstm_ckpt.load("out/latest.ckpt")       # ck.params["W_h"]: (4H, H) float32
    model = mlstm_ckpt.torch_model(ck)            # tools/mlstm_torch.py's MLSTM, weights loaded
    ck.params = mlstm_ckpt.from_state_dict(model.state_dict(), ck.wnorm)
    mlstm_ckpt.save("out/edited.ckpt", ck)

A checkpoint to read may be given as a run directory: its best model, DIR/best.ckpt
(checkpoint_file). Command line (exit 2 with a one-line error naming the file on bad
input, a damaged .npz included; nothing half-written):

    tools/mlstm_ckpt.py info CKPT               header, run record and tensors
    tools/mlstm_ckpt.py export CKPT OUT.npz     every array and header field into one .npz
    tools/mlstm_ckpt.py import IN.npz OUT.ckpt  back (export then import gives the same
                                                bytes; a version 1 or 2 file comes back as 4)
"""
import math
import os
import re
import shlex
import stat
import struct
import sys
import zipfile
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

MAGIC, VERSION, HEADER_BYTES, SCALER_BYTES, V = b"MLSTMCKP", 4, 256, 48, 256
SCALER_USED = 40  # harness/checkpoint.h's CKPT_SCALER_USED: the scaler's bytes after these are 0
MAX_RUN_BYTES = 1 << 30  # harness/checkpoint.h's CKPT_MAX_RUN_BYTES
# the run record's data identity (harness/checkpoint.h)
RECORD_DATA, RECORD_NAME_MAX = (b"train data", b"val data"), 200
# The record's settings a resume may change, which the run's identity leaves out
# (harness/checkpoint.h's CKPT_NOT_IDENTITY)
NOT_IDENTITY = (b"train", b"val", b"steps", b"val-steps", b"val-batch")
MAX_HIDDEN, MAX_EMBED = 65536, 65536  # harness/checkpoint.h's limits: every reader refuses the same files
RUN_BEST_CKPT, RUN_LATEST_CKPT = "best.ckpt", "latest.ckpt"  # a run directory's checkpoints (harness/checkpoint.h)
# The parameters in the order of mlstm.h's single buffer (param_names there).
NAMES = ("E", "W_x", "g_x", "W_h", "g_h", "W_mx", "g_mx", "W_mh", "g_mh", "b", "W_out", "b_out")
GAINS = ("g_x", "g_h", "g_mx", "g_mh")  # weight norm's per-row gains: absent when it is off
# The FP32 run's loss scaler (schedule.h, loss_scaler_init(.., 0)): f64 scale 1, u32 good
# steps 0, u32 window 1000, f64 factor 2, f64 floor 1, f64 ceiling 1; 8 unused bytes.
SCALER_FP32 = struct.pack("<dIIddd", 1.0, 0, 1000, 2.0, 1.0, 1.0) + bytes(8)


class CheckpointError(ValueError):
    """A file or array that is not a valid checkpoint; the message names it."""


def param_shapes(D, H, wnorm):
    """[(name, shape)] in buffer order; row-major [out, in] matrices, y = x W^T."""
    s = {"E": (V, D), "W_x": (4 * H, D), "g_x": (4 * H,), "W_h": (4 * H, H), "g_h": (4 * H,),
         "W_mx": (H, D), "g_mx": (H,), "W_mh": (H, H), "g_mh": (H,), "b": (4 * H,),
         "W_out": (V, H), "b_out": (V,)}
    return [(n, s[n]) for n in NAMES if wnorm or n not in GAINS]


def param_count(D, H, wnorm):
    return sum(math.prod(s) for _, s in param_shapes(D, H, wnorm))  # Python ints: no overflow from a bad header


# Which axis of which tensor says D or H, and in what multiple (param_shapes): each one votes.
_SIZE_AXES = (("E", 1, "D", 1), ("W_x", 1, "D", 1), ("W_mx", 1, "D", 1),
              ("W_x", 0, "H", 4), ("g_x", 0, "H", 4), ("W_h", 1, "H", 1), ("g_h", 0, "H", 4), ("W_mx", 0, "H", 1),
              ("g_mx", 0, "H", 1), ("W_mh", 0, "H", 1), ("g_mh", 0, "H", 1), ("b", 0, "H", 4), ("W_out", 1, "H", 1))
_NDIM = {n: len(s) for n, s in param_shapes(1, 1, 1)}


def _model_size(params, where):
    """D and H of weights {name: array}: the values most of the tensors' shapes say. One
    tensor of the wrong shape is then the one blamed: read from W_h alone, a transposed
    W_h made H four times too large and the error named W_x, the first tensor checked."""
    votes = {"D": Counter(), "H": Counter()}
    for n, axis, what, k in _SIZE_AXES:
        s = tuple(np.shape(params[n])) if n in params else ()
        if len(s) == _NDIM[n] and s[axis] > 0 and s[axis] % k == 0:
            votes[what][s[axis] // k] += 1
    if not votes["D"] or not votes["H"]:
        raise CheckpointError(f"{where}: no tensor says the model's D and H (E [256, D], W_h [4H, H], ...)")
    return votes["D"].most_common(1)[0][0], votes["H"].most_common(1)[0][0]


@dataclass
class Checkpoint:
    """Everything a checkpoint holds. params, adam_m, adam_v: {name: float32 array} in
    buffer order; h, c: (G, H) carried state of global batch row g; step: applied Adam
    steps; data_step: batches read; rng: the sampler's splitmix64 state; scaler: the
    loss scaler's 48 bytes (schedule.h); run: the run record, NUL-terminated name,
    value pairs as the trainer wrote them (doc/formats.md), b"" for none (a version 1
    file, or weights from new()). run_settings(ck.run) decodes it. run_id: the run's
    identity (0: unknown); best_by: what the run scores checkpoints by (0 nothing, 1 the
    validation loss, 2 the training loss's moving mean); score: this checkpoint's under
    best_by (NaN: not scored; meaningless when best_by is 0); loss_ema: the moving mean's
    state (train.h); version: the format version of the file it came from (a version 3
    run_id was made by an older rule than run_identity's, and save keeps it version 3)."""
    D: int
    H: int
    wnorm: int
    params: dict
    adam_m: dict = None
    adam_v: dict = None
    h: np.ndarray = None
    c: np.ndarray = None
    step: int = 0
    data_step: int = 0
    rng: int = 0
    scaler: bytes = field(default=SCALER_FP32)
    run: bytes = b""
    run_id: int = 0
    best_by: int = 0
    score: float = 0.0
    loss_ema: float = 0.0
    version: int = VERSION

    @property
    def G(self):
        return self.h.shape[0]


def new(params, wnorm=None, G=1):
    """A checkpoint from weights alone ({name: array}), as tools/import_npy writes one:
    Adam moments zero, step 0, G rows of zero state, the FP32 loss scaler, no run
    record (./train --resume then takes the run's settings from its flags). D and H are
    what most tensors' shapes say (a tensor that disagrees is named); weight norm is on
    when the gains are there (or as `wnorm` says)."""
    if wnorm is None:
        wnorm = int(all(n in params for n in GAINS))
    if isinstance(G, bool) or not isinstance(G, (int, np.integer)) or G < 1:
        raise CheckpointError(f"params: G={G!r}, want a whole number of rows >= 1")
    D, H = _model_size(params, "params")
    ck = Checkpoint(D, H, int(wnorm), params)
    G = int(G)
    _check(ck, "params")  # shapes, before anything is allocated from them
    ck.adam_m = {n: np.zeros(s, np.float32) for n, s in param_shapes(D, H, wnorm)}
    ck.adam_v = {n: np.zeros(s, np.float32) for n, s in param_shapes(D, H, wnorm)}
    ck.h, ck.c = np.zeros((G, H), np.float32), np.zeros((G, H), np.float32)
    return ck


# ---- checksum

def _checksum_words(h, mv):
    """h after the 8-byte words of mv (a byte view, a multiple of 8 long)."""
    words = mv.cast("Q") if sys.byteorder == "little" else np.frombuffer(mv, "<u8").tolist()
    for w in words:  # the words are little-endian on any host
        h = ((h ^ w) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return h


def checksum(chunks, progress=None):
    """The checkpoint and shard checksum of the concatenated chunks (bytes-like or
    contiguous arrays of any length): FNV-1a's multiply-xor over 64-bit little-endian
    words, murmur3's finaliser (doc/formats.md). Sequential by nature: about 40 s per GB."""
    h, tail, done = 0xcbf29ce484222325, b"", 0
    for c in chunks:
        mv = memoryview(c)
        mv = mv.cast("B") if mv.nbytes else memoryview(b"")
        if tail:  # complete the word the previous chunk left open
            k = 8 - len(tail)
            tail, mv = tail + bytes(mv[:k]), mv[k:]
            if len(tail) < 8:
                continue
            h, tail = _checksum_words(h, memoryview(tail)), b""
        step = 1 << 24  # progress every 16 MB
        for i in range(0, len(mv) // 8 * 8, step):
            part = mv[i:min(i + step, len(mv) // 8 * 8)]
            h = _checksum_words(h, part)
            done += len(part)
            if progress:
                progress(done)
        tail = bytes(mv[len(mv) // 8 * 8:])
    if tail:
        w = int.from_bytes(tail, "little")
        h = ((h ^ w ^ (len(tail) << 56)) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    M = 0xFFFFFFFFFFFFFFFF  # murmur3's finaliser
    h ^= h >> 33; h = (h * 0xff51afd7ed558ccd) & M
    h ^= h >> 33; h = (h * 0xc4ceb9fe1a85ec53) & M
    return h ^ (h >> 33)


def _progress(path, total):
    """Prints how far a long checksum is on stderr (files over 256 MB); None otherwise."""
    if total < 1 << 28:
        return None
    def show(n):
        print(f"\r{path}: checksum {min(100, 100 * n // total)}%", end="\n" if n >= total else "", file=sys.stderr,
              flush=True)
    return show


# ---- reading

# The header's fields: (name, offset, struct format, the version that added it), the rows of
# harness/checkpoint.h's ckpt_fields and doc/formats.md's table (test_pyio checks the three agree). A field
# newer than a file's version reads as 0; every byte not in a field is 0.
_FIELDS = (("magic", 0, "8s", 1), ("version", 8, "I", 1), ("header size", 12, "I", 1), ("V", 16, "I", 1),
           ("D", 20, "I", 1), ("H", 24, "I", 1), ("weight norm", 28, "I", 1), ("nparams", 32, "Q", 1),
           ("G", 40, "I", 1), ("step", 48, "Q", 1), ("data step", 56, "Q", 1), ("rng", 64, "Q", 1),
           ("loss scaler", 72, "48s", 1), ("payload bytes", 120, "Q", 1), ("checksum", 128, "Q", 1),
           ("run record bytes", 136, "Q", 2), ("run", 144, "Q", 3), ("best by", 152, "I", 3), ("score", 160, "d", 3),
           ("loss mean state", 168, "d", 3))


def _header_unpack(hd):
    """The header's fields as {name: value}, those its version predates as 0."""
    version = struct.unpack_from("<I", hd, 8)[0]
    return {name: struct.unpack_from("<" + fmt, hd, at)[0] if version >= since else
            (b"" if fmt.endswith("s") else 0) for name, at, fmt, since in _FIELDS}


def _header_unused_zero(hd, version):
    """Whether every header byte outside the fields of its version is 0 (harness/checkpoint.h's
    ckpt_header_unused_zero)."""
    used = bytearray(HEADER_BYTES)
    for _, at, fmt, since in _FIELDS:
        if version >= since:
            used[at:at + struct.calcsize("<" + fmt)] = b"\1" * struct.calcsize("<" + fmt)
    return all(u or not b for u, b in zip(used, hd))


def _header_pack(values):
    hd = bytearray(HEADER_BYTES)
    for name, at, fmt, _ in _FIELDS:
        struct.pack_into("<" + fmt, hd, at, values[name])
    return hd


def checkpoint_file(path):
    """The file a checkpoint argument names (harness/checkpoint.h's checkpoint_file): path itself, or for a
    run directory its best model, DIR/best.ckpt; a directory without one is an error naming it
    and saying whether DIR/latest.ckpt is there to be given instead."""
    path = os.fspath(path)
    if not os.path.isdir(path):
        return path
    best, latest = os.path.join(path, RUN_BEST_CKPT), os.path.join(path, RUN_LATEST_CKPT)
    if os.path.lexists(best):
        return best
    if os.path.lexists(latest):
        raise CheckpointError(f"{path} is a run directory without {RUN_BEST_CKPT} (its best model); it has "
                              f"{RUN_LATEST_CKPT}: give {latest} to read that")
    raise CheckpointError(f"{path} is a directory without {RUN_BEST_CKPT} or {RUN_LATEST_CKPT}: not a run directory "
                          "(give a checkpoint file)")


def _open_regular(path, what):
    """A file opened for reading that is a regular file: O_NONBLOCK, so that a FIFO cannot hang
    the open (it would wait for a writer forever), then refused, as a directory or a device is."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise CheckpointError(f"{what} {path} is not a regular file ({_file_kind(mode)})")
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def _file_kind(mode):
    kinds = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
             (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))
    return next((name for test, name in kinds if test(mode)), "not a regular file")


def load(path, verify=True):
    """Reads and validates a checkpoint of format version 1 to 4 (what harness/checkpoint.h's
    checkpoint_open rejects, this rejects with the same reason), or a run directory's best
    one (checkpoint_file); verify=False skips the checksum (about 40 s per GB)."""
    path = checkpoint_file(path)
    try:
        with _open_regular(path, "checkpoint") as f:
            hd = f.read(HEADER_BYTES)
            if len(hd) >= 8 and hd[:8] != MAGIC:
                raise CheckpointError(f"{path} is not an mlstm checkpoint (bad magic)")
            if len(hd) < HEADER_BYTES:
                raise CheckpointError(f"checkpoint {path} is truncated: {len(hd)} bytes, "
                                      f"the header alone is {HEADER_BYTES}")
            h = _header_unpack(hd)
            version, v, D, H, wnorm, nparams, G = (h[k] for k in ("version", "V", "D", "H", "weight norm", "nparams",
                                                                  "G"))
            step, data_step, rng, scaler, payload, want, run_bytes = (
                h[k] for k in ("step", "data step", "rng", "loss scaler", "payload bytes", "checksum",
                               "run record bytes"))
            run_id, best_by, score, loss_ema = (h[k] for k in ("run", "best by", "score", "loss mean state"))
            if not 1 <= version <= VERSION:
                raise CheckpointError(f"checkpoint {path} has format version {version}; "
                                      f"this build reads versions 1 to {VERSION}")
            if D > MAX_EMBED or H > MAX_HIDDEN:
                raise CheckpointError(f"checkpoint {path}: D={D} H={H}, beyond this build's limits "
                                      f"(D at most {MAX_EMBED}, H at most {MAX_HIDDEN})")
            G = G if G < 1 << 31 else 0  # the C reader's int: a larger count is no count of rows
            if v != V or D < 1 or H < 1 or G < 1 or wnorm not in (0, 1) or nparams != param_count(D, H, wnorm) \
                    or best_by > 2 or not math.isfinite(loss_ema) or loss_ema < 0 or score < 0 \
                    or payload != 4 * (3 * nparams + 2 * G * H) or run_bytes > MAX_RUN_BYTES \
                    or not _header_unused_zero(hd, version) or h["header size"] != HEADER_BYTES \
                    or any(scaler[SCALER_USED:]):
                raise CheckpointError(f"checkpoint {path} has an inconsistent header (corrupt file)")
            size = os.fstat(f.fileno()).st_size - HEADER_BYTES  # checked before allocating from the header
            total = payload + run_bytes
            if size < total:
                raise CheckpointError(f"checkpoint {path} is truncated: {size} bytes after the header, "
                                      f"the header says {total}")
            if size > total:
                raise CheckpointError(f"checkpoint {path} has {size - total} bytes after the payload and run record "
                                      "(corrupt file)")
            buf = bytearray(total)
            if f.readinto(buf) != total:
                raise CheckpointError(f"checkpoint {path} changed while being read")
    except OSError as e:
        raise CheckpointError(f"cannot read checkpoint {path}: {e.strerror or e}") from None
    if verify and checksum([hd[:128] + bytes(8) + hd[136:], buf], _progress(path, len(buf))) != want:
        raise CheckpointError(f"checkpoint {path} fails its checksum (corrupt file)")
    run = bytes(buf[payload:])
    try:
        run_settings(run)
    except CheckpointError as e:
        raise CheckpointError(f"checkpoint {path}: {e} (corrupt file)") from None
    identity = run_identity(run, D, H, wnorm, G) if version >= 4 and run_id and run else run_id
    if identity != run_id:  # version 4 on: the run's identity is its record's and header's
        raise CheckpointError(f"checkpoint {path}: its run {run_id:016x} is not the identity of its run record and "
                              f"model ({identity:016x}): an edited or corrupt file")
    flat = np.frombuffer(buf, "<f4", count=payload // 4)  # views into one writable buffer, no copies

    def tensors(off):
        out = {}
        for n, s in param_shapes(D, H, wnorm):
            k = math.prod(s)
            out[n] = flat[off:off + k].reshape(s)
            off += k
        return out
    GH = G * H
    return Checkpoint(D, H, wnorm, tensors(0), tensors(nparams), tensors(2 * nparams),
                      flat[3 * nparams:3 * nparams + GH].reshape(G, H), flat[3 * nparams + GH:].reshape(G, H),
                      step, data_step, rng, scaler, run, run_id, best_by, score, loss_ema, version)


# A data identity line of the run record (harness/checkpoint.h's ckpt_identity_line): the size, the
# checksum, the shard's file name, as run.h's data_identity writes them.
_IDENTITY_LINE = re.compile(rb"(0|[1-9][0-9]{0,18}) [0-9a-f]{16} [^\n]{1,%d}\n" % RECORD_NAME_MAX)


def run_settings(run):
    """The run record's (name, value) pairs as str (bytes that are not UTF-8 as \\x escapes);
    raises CheckpointError if it is not whole NUL-terminated pairs with no name empty, or a
    data identity (RECORD_DATA) is not identity lines (harness/checkpoint.h's ckpt_record_invalid)."""
    run = bytes(run)
    if not run:
        return []
    strings = run.split(b"\0")
    if strings[-1] != b"" or len(strings) % 2 != 1 or not all(strings[0:-1:2]):
        raise CheckpointError(f"the run record ({len(run)} bytes) is not a list of NUL-terminated name, value pairs"
                              + ("" if strings[-1] != b"" or len(strings) % 2 != 1 else " (an empty name)"))
    for name, value in zip(strings[0:-1:2], strings[1:-1:2]):
        if name not in RECORD_DATA:
            continue
        at, line = 0, 1
        while True:
            m = _IDENTITY_LINE.match(value, at)
            if not m or int(m.group(1)) >= 1 << 63:
                raise CheckpointError(f"the run record's \"{name.decode()}\" line {line} is not \"<bytes> <checksum: "
                                      "16 hex digits> <file name>\" as the trainer writes it")
            at, line = m.end(), line + 1
            if at == len(value):
                break
    text = [s.decode("utf-8", "backslashreplace") for s in strings[:-1]]
    return list(zip(text[0::2], text[1::2]))


def run_identity(run, D, H, wnorm, G):
    """The run's identity (the header's `run`, format version 4 on; harness/checkpoint.h's ckpt_run_identity,
    doc/formats.md's "Run identity"): the checksum of the record's pairs less NOT_IDENTITY, each
    data identity line cut to its size and checksum, then D, H, wnorm, G as u32; never 0.
    `run` must be a record run_settings accepts."""
    strings = bytes(run).split(b"\0")[:-1]
    canon = bytearray()
    for name, value in zip(strings[0::2], strings[1::2]):
        if name in NOT_IDENTITY:
            continue
        if name in RECORD_DATA:  # "<bytes> <checksum> <name>\n" lines: the name left out
            value = b"".join(b" ".join(line.split(b" ", 2)[:2]) + b"\n" for line in value.split(b"\n")[:-1])
        canon += name + b"\0" + value + b"\0"
    canon += struct.pack("<4I", D, H, wnorm, G)
    return checksum([canon]) or 1


# ---- writing

def _f32(a, what, shape):
    a = np.asarray(a)
    if a.dtype.kind not in "fiu":
        raise CheckpointError(f"{what}: expected numbers, got dtype {a.dtype}")
    if a.shape != tuple(shape):
        raise CheckpointError(f"{what}: shape {list(a.shape)}, the model needs {list(shape)}")
    a = np.ascontiguousarray(a, dtype="<f4")  # float64 rounds to nearest, as C's (float)
    if not np.isfinite(a).all():
        raise CheckpointError(f"{what}: contains inf or NaN")
    return a


def _check(ck, where):
    """Validates a Checkpoint's fields; returns the header and what follows it in file order
    (the payload arrays, then the run record)."""
    D, H, wnorm = int(ck.D), int(ck.H), int(ck.wnorm)
    if not (1 <= D < 1 << 31 and 1 <= H < 1 << 31) or wnorm not in (0, 1):  # the C reader's ints
        raise CheckpointError(f"{where}: bad model size D={D} H={H} weight norm={wnorm}")
    shapes = param_shapes(D, H, wnorm)
    arrays = []
    for group in ("params", "adam_m", "adam_v"):
        d = getattr(ck, group)
        if d is None:
            if group == "params":
                raise CheckpointError(f"{where}: no params")
            continue
        extra = sorted(set(d) - {n for n, _ in shapes})
        if extra:
            raise CheckpointError(f"{where}: {group} has {extra}, not tensors of a model with weight norm "
                                  f"{'on' if wnorm else 'off'}")
        for n, s in shapes:
            if n not in d:
                raise CheckpointError(f"{where}: {group} lacks {n} {list(s)}")
            arrays.append(_f32(d[n], f"{where}: {group}[{n!r}]", s))
    if ck.h is None or ck.adam_m is None or ck.adam_v is None:
        return None
    G = np.shape(ck.h)[0] if np.ndim(ck.h) == 2 else 0
    if not 1 <= G < 1 << 31:
        raise CheckpointError(f"{where}: h must be (G, H) with G >= 1, got shape {list(np.shape(ck.h))}")
    arrays += [_f32(ck.h, f"{where}: h", (G, H)), _f32(ck.c, f"{where}: c", (G, H))]
    scaler = bytes(ck.scaler)
    if len(scaler) != SCALER_BYTES or any(scaler[SCALER_USED:]):
        raise CheckpointError(f"{where}: scaler must be {SCALER_BYTES} bytes, the last {SCALER_BYTES - SCALER_USED} of "
                              f"them 0 (got {len(scaler)} bytes, ending {scaler[SCALER_USED:].hex()})")
    for name in ("step", "data_step", "rng", "run_id"):
        if not 0 <= int(getattr(ck, name)) < 1 << 64:
            raise CheckpointError(f"{where}: {name} {getattr(ck, name)} is not a u64")
    if int(ck.best_by) not in (0, 1, 2) or not math.isfinite(float(ck.loss_ema)) or float(ck.loss_ema) < 0 \
            or float(ck.score) < 0:
        raise CheckpointError(f"{where}: best_by {ck.best_by} (0, 1 or 2), loss_ema {ck.loss_ema} (finite, >= 0) or "
                              f"score {ck.score} (>= 0 or NaN) is bad")
    run = bytes(ck.run)
    if len(run) > MAX_RUN_BYTES:
        raise CheckpointError(f"{where}: a run record of {len(run)} bytes, the format's limit is {MAX_RUN_BYTES}")
    try:
        run_settings(run)
    except CheckpointError as e:
        raise CheckpointError(f"{where}: {e}") from None
    version = 3 if int(ck.version) == 3 else VERSION  # a version 3 identity stays one; 1 and 2 have none
    identity = run_identity(run, D, H, wnorm, G) if version >= 4 and int(ck.run_id) and run else int(ck.run_id)
    if identity != int(ck.run_id):
        raise CheckpointError(f"{where}: run_id {int(ck.run_id):016x} is not the identity of the run record and model "
                              f"({identity:016x}): a record edited in a setting that defines the run is another run "
                              "(set run_id to 0, or to mlstm_ckpt.run_identity(ck.run, ck.D, ck.H, ck.wnorm, ck.G))")
    nparams = param_count(D, H, wnorm)
    hd = _header_pack({"magic": MAGIC, "version": version, "header size": HEADER_BYTES, "V": V, "D": D, "H": H,
                       "weight norm": wnorm, "nparams": nparams, "G": G, "step": int(ck.step),
                       "data step": int(ck.data_step), "rng": int(ck.rng), "loss scaler": scaler,
                       "payload bytes": 4 * (3 * nparams + 2 * G * H), "checksum": 0, "run record bytes": len(run),
                       "run": int(ck.run_id), "best by": int(ck.best_by), "score": float(ck.score),
                       "loss mean state": float(ck.loss_ema)})
    return hd, arrays + [run]


def save(path, ck):
    """Writes ck as a checkpoint of format version 4 (3 when ck.version is 3: its run_id was
    made by an older rule, which no reader checks), with ck.run as its run record, whole or
    not at all (_write_whole: through a symbolic link, keeping the replaced file's mode), so a
    failure leaves the previous file or the new one, never a torn one. Arrays are converted
    to float32 (round to nearest); a wrong shape is an error naming it."""
    checked = _check(ck, path)
    if checked is None:
        raise CheckpointError(f"{path}: a checkpoint needs adam_m, adam_v, h and c (mlstm_ckpt.new makes them)")
    hd, arrays = checked
    hd[128:136] = struct.pack("<Q", checksum([hd] + arrays, _progress(path, sum(memoryview(a).nbytes for a in arrays))))

    def write(f):
        f.write(hd)
        for a in arrays:
            f.write(a)
    _write_whole(path, write)


def _output_target(path):
    """The file writing `path` replaces (util.h's output_target): path itself, or the file its
    symbolic links name, followed link by link (it need not exist yet), so that the link stays a
    link and the file it names is the one replaced. An existing target must be a regular file: a
    directory, a FIFO or a device is refused. Returns (target, its lstat or None)."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        mode = None
    if mode is not None and not stat.S_ISREG(mode):
        raise CheckpointError(f"cannot write {path}: it is {_file_kind(mode)}; an output replaces only a regular file")
    target = os.fspath(path)
    for _ in range(41):
        try:
            st = os.lstat(target)
        except FileNotFoundError:
            return target, None
        except OSError as e:
            raise CheckpointError(f"cannot write {path}: {e.strerror or e}") from None
        if not stat.S_ISLNK(st.st_mode):
            if not stat.S_ISREG(st.st_mode):
                raise CheckpointError(f"cannot write {path}: it is {_file_kind(st.st_mode)}; an output replaces only "
                                      "a regular file")
            return target, st
        target = os.path.join(os.path.dirname(target), os.readlink(target))  # an absolute link replaces the whole
    raise CheckpointError(f"cannot write {path}: too many levels of symbolic links")


def _write_whole(path, write):
    """write(f) into <target>.tmp.<pid> beside the file `path` names (_output_target), flushed
    and synced, then renamed over it, keeping the replaced file's owner and group where allowed
    and its permission bits: a failure leaves no temporary file and the previous file (if any)
    as it was, and raises CheckpointError naming path."""
    target, old = _output_target(path)
    tmp = f"{target}.tmp.{os.getpid()}"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)  # never through a link put there
    made = False
    try:
        try:
            fd = os.open(tmp, flags, 0o666)
        except FileExistsError:  # a stale one of a process that had this pid
            os.unlink(tmp)
            fd = os.open(tmp, flags, 0o666)
        made = True
        with os.fdopen(fd, "wb") as f:
            if old is not None:
                for uid, gid in ((old.st_uid, -1), (-1, old.st_gid)):
                    try:
                        os.fchown(f.fileno(), uid, gid)
                    except OSError:
                        pass  # not allowed to: the writer's own
                os.fchmod(f.fileno(), old.st_mode & 0o777)
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except OSError as e:
        if made:
            try:
                os.unlink(tmp)
            except OSError:
                pass
        raise CheckpointError(f"cannot write {path}: {e.strerror or e}") from None


# ---- PyTorch (imported here, so the NumPy part runs without torch)

def state_dict(ck, dtype=None):
    """The weights as a state_dict of tools/mlstm_torch.py's MLSTM: {name: tensor},
    float32 copies (or dtype)."""
    import torch
    return {n: torch.tensor(np.asarray(a), dtype=dtype or torch.float32) for n, a in ck.params.items()}


def from_state_dict(sd, wnorm):
    """{name: float32 array} from a state_dict of tools/mlstm_torch.py's MLSTM (tensors on
    any device, any real floating-point dtype). Refused, naming the key: a name the model
    does not have, a missing tensor, a dtype that is not real floating point (bool,
    integer, complex: a cast would change the values), a shape that disagrees with what
    the other tensors say D and H are, and weight norm's gains with `wnorm` false (the
    matrices without them are not the model's: fold g V/||V|| into V first)."""
    wnorm = int(bool(wnorm))
    gains = [n for n in GAINS if n in sd]
    if gains and not wnorm:
        raise CheckpointError(f"state_dict has weight norm's gains {gains}, which wnorm=False would drop: pass "
                              "wnorm=True (or fold g V/||V|| into each V and delete the gains first)")
    extra = [k for k in sd if k not in NAMES]
    if extra:
        raise CheckpointError(f"state_dict has {extra}, not tensors of tools/mlstm_torch.py's MLSTM "
                              f"({', '.join(NAMES)})")
    names = [n for n in NAMES if wnorm or n not in GAINS]
    missing = [n for n in names if n not in sd]
    if missing:
        raise CheckpointError(f"state_dict lacks {missing} (weight norm {'on' if wnorm else 'off'})")
    out = {}
    for n in names:
        t = sd[n]
        dtype = getattr(t, "dtype", None)
        real_float = dtype.is_floating_point if hasattr(dtype, "is_floating_point") else np.asarray(t).dtype.kind == "f"
        if not real_float:
            raise CheckpointError(f"state_dict[{n!r}]: dtype {dtype}, the model's tensors are real floating point")
        out[n] = t.detach().cpu().float().numpy() if hasattr(t, "detach") else np.asarray(t, np.float32)
    D, H = _model_size(out, "state_dict")
    for n, shape in param_shapes(D, H, wnorm):
        if out[n].shape != shape:
            raise CheckpointError(f"state_dict[{n!r}]: shape {list(out[n].shape)}, the model needs {list(shape)} "
                                  f"(D={D} H={H}, as the other tensors say)")
    return out


def torch_model(ck, dtype=None):
    """tools/mlstm_torch.py's MLSTM with the checkpoint's weights (float32, or dtype)."""
    import torch
    from mlstm_torch import MLSTM
    model = MLSTM(ck.D, ck.H, ck.wnorm, dtype=dtype or torch.float32)
    model.load_state_dict(state_dict(ck, dtype))
    return model


# ---- command line

def _export(ck, path):
    out = {f"{g}/{n}": a for g in ("params", "adam_m", "adam_v") for n, a in getattr(ck, g).items()}
    out.update(h=ck.h, c=ck.c, D=np.int64(ck.D), H=np.int64(ck.H), wnorm=np.int64(ck.wnorm), step=np.uint64(ck.step),
               data_step=np.uint64(ck.data_step), rng=np.uint64(ck.rng), scaler=np.frombuffer(ck.scaler, np.uint8),
               run=np.frombuffer(bytes(ck.run), np.uint8), run_id=np.uint64(ck.run_id), best_by=np.int64(ck.best_by),
               score=np.float64(ck.score), loss_ema=np.float64(ck.loss_ema), version=np.int64(ck.version))
    _write_whole(path, lambda f: np.savez(f, **out))


class _Npz:
    """The arrays of an .npz, read member by member: each .npy header's dtype and shape
    are checked (against what the checkpoint needs, and against the member's size)
    before its data is read, so a damaged file is an error naming it and the member,
    never an allocation a header makes up or a traceback. np.load checks neither."""

    def __init__(self, path):
        self.path = path
        try:
            self.file = _open_regular(path, "input")
        except OSError as e:
            raise CheckpointError(f"cannot read {path}: {e.strerror or e}") from None
        try:
            self.zip = zipfile.ZipFile(self.file)
            infos = self.zip.infolist()
        except Exception as e:  # zipfile on a damaged archive: BadZipFile, but also ValueError, EOFError, OSError, ...
            self.file.close()
            raise CheckpointError(f"{path} is not an .npz file ({type(e).__name__}: {e})") from None
        self.members = {}
        for info in infos:
            if not info.filename.endswith(".npy"):
                self.close()
                raise CheckpointError(f"{path}: member {info.filename!r} is not an array (.npy)")
            if info.filename[:-4] in self.members:
                self.close()
                raise CheckpointError(f"{path}: member {info.filename!r} appears twice")
            self.members[info.filename[:-4]] = info

    def close(self):
        self.zip.close()
        self.file.close()

    def read(self, key, check):
        """The array `key`; check(shape, dtype) says what is wrong with a header, or None."""
        info = self.members[key]
        damaged = lambda why: CheckpointError(f"{self.path}: member {info.filename!r} is damaged ({why})")  # noqa: E731
        # zipfile and numpy.lib.format parse what the file says with zlib, tokenize and
        # ast: a damaged member raises whatever they raise (BadZipFile for a CRC,
        # ValueError, EOFError, tokenize.TokenError, ... found by test/pyio_npz.py's fuzzing)
        try:
            fp = self.zip.open(info)
        except Exception as e:
            raise damaged(f"{type(e).__name__}: {e}") from None
        with fp:
            try:
                version = np.lib.format.read_magic(fp)
                if version not in ((1, 0), (2, 0)):
                    raise ValueError(f".npy format version {version}, np.savez writes 1.0 or 2.0")
                fmt = np.lib.format
                read_header = fmt.read_array_header_1_0 if version == (1, 0) else fmt.read_array_header_2_0
                shape, fortran, dtype = read_header(fp)
                at = fp.tell()
            except Exception as e:
                raise damaged(f"{type(e).__name__}: {e}") from None
            wrong = check(shape, dtype)
            if wrong:
                raise CheckpointError(f"{self.path}: {wrong}")
            n, left = math.prod(shape) * dtype.itemsize, info.file_size - at
            if min(shape, default=0) < 0 or n != left:  # before anything is allocated from the header
                raise damaged(f"its header says {list(shape)} {dtype}, {n} bytes, and {left} bytes follow it")
            try:
                data, more = fp.read(n), fp.read(1)  # reading to the end is what checks the CRC
            except Exception as e:
                raise damaged(f"{type(e).__name__}: {e}") from None
            if len(data) != n or more:
                raise damaged(f"{len(data) + len(more)} bytes of data, its header says {n}")
        a = np.frombuffer(data, dtype)
        return a.reshape(shape[::-1]).T if fortran else a.reshape(shape)


def _number_array(what, want):
    """check() for a tensor of shape `want` (None in a place: any size >= 1 there)."""
    def check(shape, dtype):
        if dtype.hasobject or dtype.kind not in "fiu":
            return f"{what}: dtype {dtype}, a checkpoint's tensors are real numbers (export writes float32)"
        if len(shape) != len(want) or any(w is not None and s != w or s < 1 for s, w in zip(shape, want)):
            needs = ", ".join("G" if w is None else str(w) for w in want)
            return f"{what}: shape {list(shape)}, the model needs [{needs}]"
        return None
    return check


def _integer_scalar(what):
    return lambda shape, dtype: None if shape == () and dtype.kind in "iu" else \
        f"{what}: {dtype} of shape {list(shape)}, want an integer of shape [] (export writes them so)"


def _real_scalar(what):
    return lambda shape, dtype: None if shape == () and dtype.kind == "f" else \
        f"{what}: {dtype} of shape {list(shape)}, want a real number of shape [] (export writes them so)"


def _byte_array(what, size=None, most=None):
    """check() for bytes as a uint8 array: `size` of them, or at most `most`."""
    def check(shape, dtype):
        if dtype != np.uint8 or len(shape) != 1 or shape[0] != (size or shape[0]):
            return f"{what}: {dtype} of shape {list(shape)}, want uint8 of shape [{size or 'n'}] (export writes it so)"
        if most is not None and shape[0] > most:
            return f"{what}: {shape[0]} bytes, the format's limit is {most}"
        return None
    return check


# An .npz `export` writes: the header fields, the state, and each tensor under its group.
_NPZ_FIELDS = {"D": (1, (1 << 31) - 1), "H": (1, (1 << 31) - 1), "wnorm": (0, 1), "step": (0, (1 << 64) - 1),
               "data_step": (0, (1 << 64) - 1), "rng": (0, (1 << 64) - 1)}
_GROUPS = ("params", "adam_m", "adam_v")


def _import(path):
    """The Checkpoint an .npz from `export` holds, every member checked (see _Npz)."""
    z = _Npz(path)
    try:
        need = list(_NPZ_FIELDS) + ["h", "c", "scaler"]
        missing = [k for k in need if k not in z.members]
        if missing:
            raise CheckpointError(f"{path} lacks {missing} (write it with `mlstm_ckpt.py export`)")
        f = {}
        for k, (lo, hi) in _NPZ_FIELDS.items():
            f[k] = int(z.read(k, _integer_scalar(k))[()])
            if not lo <= f[k] <= hi:
                raise CheckpointError(f"{path}: {k} {f[k]} is out of range ({lo} to {hi})")
        shapes = param_shapes(f["D"], f["H"], f["wnorm"])
        tensors = [f"{g}/{n}" for g in _GROUPS for n, _ in shapes]
        # none in an .npz of a version 1 or 2 file; no version in one an older export wrote
        optional = {"run", "run_id", "best_by", "score", "loss_ema", "version"}
        extra = sorted(set(z.members) - set(need) - set(tensors) - optional)
        if extra:
            gains = " (weight norm is off: no gains)" if any(k.split("/")[-1] in GAINS for k in extra) else ""
            raise CheckpointError(f"{path} has {extra}, which `mlstm_ckpt.py export` does not write{gains}")
        missing = [k for k in tensors if k not in z.members]
        if missing:
            raise CheckpointError(f"{path} lacks {missing} (write it with `mlstm_ckpt.py export`)")
        groups = {g: {n: z.read(f"{g}/{n}", _number_array(f"{g}[{n!r}]", s)) for n, s in shapes} for g in _GROUPS}
        h = z.read("h", _number_array("h", (None, f["H"])))
        c = z.read("c", _number_array("c", h.shape))
        scaler = z.read("scaler", _byte_array("scaler", size=SCALER_BYTES)).tobytes()
        run = z.read("run", _byte_array("run", most=MAX_RUN_BYTES)).tobytes() if "run" in z.members else b""  # none: v1
        run_fields = {k: z.read(k, _integer_scalar(k))[()] if k in z.members else 0 for k in ("run_id", "best_by")}
        # an .npz without `version` was exported from a file of version 3 or earlier
        version = int(z.read("version", _integer_scalar("version"))[()]) if "version" in z.members else 3
        if not 1 <= version <= VERSION:
            raise CheckpointError(f"{path}: version {version} is out of range (1 to {VERSION})")
        real_fields = {k: z.read(k, _real_scalar(k))[()] if k in z.members else 0.0 for k in ("score", "loss_ema")}
    finally:
        z.close()
    ck = Checkpoint(f["D"], f["H"], f["wnorm"], groups["params"], groups["adam_m"], groups["adam_v"], h, c, f["step"],
                    f["data_step"], f["rng"], scaler, run, int(run_fields["run_id"]), int(run_fields["best_by"]),
                    float(real_fields["score"]), float(real_fields["loss_ema"]), version)
    _check(ck, path)  # values (inf, NaN) and the run record, blamed on the .npz rather than the output
    return ck


def _info(ck, path):
    scale, good, window, factor, floor, ceiling = struct.unpack_from("<dIIddd", ck.scaler)
    print(f"{path}: format version {ck.version}, mLSTM V={V} D={ck.D} H={ck.H} weight norm "
          f"{'on' if ck.wnorm else 'off'}, {param_count(ck.D, ck.H, ck.wnorm)} parameters")
    print(f"step {ck.step}, data step {ck.data_step}, carried state G={ck.G} rows, rng {ck.rng:#018x}")
    by = {0: "nothing", 1: "the validation loss", 2: "the training loss's moving mean"}[ck.best_by]
    print(f"run {ck.run_id:016x}, scored by {by}: this checkpoint {ck.score / math.log(2):.4f} bits per character"
          if ck.best_by and math.isfinite(ck.score) else f"run {ck.run_id:016x}, scored by {by}")
    print(f"loss scaler: scale {scale:g}, good steps {good}/{window}, factor {factor:g}, "
          f"range [{floor:g}, {ceiling:g}]")
    try:
        pairs = run_settings(ck.run)
        shown = " ".join(f"{n}={shlex.quote(v)}" for n, v in pairs) if pairs else \
            "none (format version 1, or weights alone: ./train --resume takes the run's settings from its flags)"
    except CheckpointError as e:
        shown = f"unreadable: {e}"
    print(f"run record ({len(ck.run)} bytes): {shown}")
    for n, a in ck.params.items():
        rms = np.sqrt(np.mean(np.square(a, dtype=np.float64)))
        print(f"  {n:6s} {str(list(a.shape)):12s} |x| max {np.abs(a).max():.4g}  rms {rms:.4g}")


def _same_file(a, b):
    """Whether two paths name one file: the same inode where both exist, else the same resolved path."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.realpath(a) == os.path.realpath(b)


def main(argv):
    usage = ("usage: mlstm_ckpt.py info CKPT | export CKPT OUT.npz | import IN.npz OUT.ckpt "
             f"(CKPT: a checkpoint file, or a run directory for its {RUN_BEST_CKPT})")
    cmds = {"info": 1, "export": 2, "import": 2}
    if len(argv) < 1 or argv[0] not in cmds or len(argv) != 1 + cmds[argv[0]]:
        print(usage, file=sys.stderr)
        return 2
    try:
        if argv[0] != "import":
            argv[1] = checkpoint_file(argv[1])  # a run directory: its best model, by that name
        if argv[0] != "info" and _same_file(argv[1], argv[2]):
            raise CheckpointError(f"{argv[1]} and {argv[2]} are the same file: the output must not overwrite the input")
        if argv[0] == "info":
            _info(load(argv[1]), argv[1])
        elif argv[0] == "export":
            _export(load(argv[1]), argv[2])
        else:
            save(argv[2], _import(argv[1]))
    except CheckpointError as e:
        print("error: " + " ".join(str(e).splitlines()), file=sys.stderr)  # one line, whatever a message quotes
        return 2
    except BrokenPipeError:  # `info CKPT | head`: the reader stopped; no traceback, SIGPIPE's status as other tools
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # and no second error when Python flushes
        return 128 + 13
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

#!/usr/bin/python3
"""The data of the frontier experiment (dev/sweep/README.md): one validation set, and
training sets of given sizes whose documents are the same for every seed and whose
order is shuffled by the seed, so that a seed changes the data order as well as the
initial weights (the trainer reads its data in file order). Standard library only;
the shards are written by build/prepare.

    dev/sweep/make_data.py --out out/frontier-data --sizes 2000000,8000000 --seeds 1-8

Writes OUT/base/ (the built-in corpus, build/prepare --builtin, seed 1: the documents
and OUT/base/val_000.bin, the validation set of every run), OUT/docs-SIZE.txt (the
first documents of the base training set, one a line, until SIZE bytes), and for each
size and seed OUT/SIZE/seedS/train_000.bin (build/prepare --seed S of that file:
the same documents in the seed's order). Each seed's set is checked to hold exactly
the documents of docs-SIZE.txt. Running it again rewrites nothing that is there.
"""
import argparse
import os
import struct
import subprocess
import sys

HEADER = 32  # doc/formats.md, "Shard format"


def die(msg):
    print("error: " + msg, file=sys.stderr)
    sys.exit(2)


def payload(path):
    with open(path, "rb") as fh:
        head = fh.read(HEADER)
        if len(head) < HEADER or head[:8] != b"MLSTMSHD":
            die("%s is not a shard (doc/formats.md)" % path)
        (length,) = struct.unpack("<Q", head[16:24])
        data = fh.read()
    if len(data) != length:
        die("%s: the payload is %d bytes, the header says %d" % (path, len(data), length))
    return data


def documents(data, path):
    """The texts of framed documents ("\\n " + text + " ", doc/formats.md)."""
    if not data.startswith(b"\n "):
        die("%s does not start with a framed document" % path)
    docs = data.split(b"\n")[1:]
    for d in docs:
        if len(d) < 3 or d[:1] != b" " or d[-1:] != b" ":
            die("%s: a document not framed as \"\\n \" + text + \" \"" % path)
    return [d[1:-1] for d in docs]


def seeds_arg(s):
    try:
        if "-" in s:
            a, b = s.split("-")
            out = list(range(int(a), int(b) + 1))
        else:
            out = [int(x) for x in s.split(",") if x]
    except ValueError:
        raise argparse.ArgumentTypeError("\"%s\" is not a list (1,2,5) or range (1-8) of seeds" % s)
    if not out or min(out) < 0:
        raise argparse.ArgumentTypeError("\"%s\": expected seeds of 0 or more" % s)
    return out


def sizes_arg(s):
    try:
        out = sorted({int(x) for x in s.split(",") if x})
    except ValueError:
        raise argparse.ArgumentTypeError("\"%s\" is not a comma-separated list of byte counts" % s)
    if not out or out[0] < 1:
        raise argparse.ArgumentTypeError("\"%s\": expected positive byte counts" % s)
    return out


def prepare(binary, args):
    p = subprocess.run([binary] + args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if p.returncode != 0:
        die("%s %s failed:\n%s" % (binary, " ".join(args), p.stdout.strip()))


def main(argv):
    p = argparse.ArgumentParser(prog="dev/sweep/make_data.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="output directory")
    p.add_argument("--sizes", type=sizes_arg, required=True, help="training set sizes in bytes, comma-separated")
    p.add_argument("--seeds", type=seeds_arg, required=True, help="seeds: 1,2,3 or 1-8")
    p.add_argument("--val-bytes", type=int, default=100000, help="about this many bytes of validation text")
    p.add_argument("--prepare", default="build/prepare", help="the prepare tool (make build/prepare)")
    o = p.parse_args(argv)
    if not os.access(o.prepare, os.X_OK):
        die("--prepare: %s is not executable (make build/prepare)" % o.prepare)
    if o.val_bytes < 1:
        die("--val-bytes: must be positive")
    base = os.path.join(o.out, "base")
    total = int((o.sizes[-1] + o.val_bytes) * 1.02)  # framing and the last document's overshoot
    if not os.path.exists(os.path.join(base, "val_000.bin")):
        prepare(o.prepare, ["--builtin", str(total), "--val-fraction", "%.6f" % (o.val_bytes / total),
                            "--seed", "1", "-o", base])
    train = os.path.join(base, "train_000.bin")
    if os.path.exists(os.path.join(base, "train_001.bin")):
        die("%s holds more than one training shard; this script reads one" % base)
    docs = documents(payload(train), train)
    for size in o.sizes:
        n, acc = 0, 0
        while acc < size and n < len(docs):
            acc += len(docs[n]) + 3
            n += 1
        if acc < size:
            die("the base set has %d bytes of training text, fewer than --sizes %d" % (acc, size))
        txt = os.path.join(o.out, "docs-%d.txt" % size)
        want = b"\n".join(docs[:n]) + b"\n"
        if not os.path.exists(txt) or open(txt, "rb").read() != want:
            with open(txt + ".tmp", "wb") as fh:
                fh.write(want)
            os.replace(txt + ".tmp", txt)
        expect = sorted(docs[:n])
        for seed in o.seeds:
            d = os.path.join(o.out, str(size), "seed%d" % seed)
            shard = os.path.join(d, "train_000.bin")
            if not os.path.exists(shard):
                prepare(o.prepare, ["--val-fraction", "0", "--seed", str(seed), "-o", d, txt])
            got = documents(payload(shard), shard)
            if sorted(got) != expect:
                die("%s does not hold exactly the documents of %s" % (shard, txt))
        print("%d bytes (%d documents), seeds %s: %s/%d/seed*/" % (acc, n, ",".join(map(str, o.seeds)), o.out, size))
    val = os.path.join(base, "val_000.bin")
    print("validation: %s (%d bytes)" % (val, len(payload(val))))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

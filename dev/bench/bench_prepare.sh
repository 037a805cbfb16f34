#!/usr/bin/env bash
# build/prepare's read speed on one synthetic Amazon-style input (dev/RESULTS.md):
# about 150 MB of JSON lines ({"reviewerID", "asin", "reviewText", "overall", "summary"},
# review text of random words from a fixed vocabulary, seed 1), the same text as plain
# lines, and the JSON lines gzipped. Each is prepared once into a scratch directory and
# prepare's own summary line (read time, MB/s on disk and uncompressed) is printed.
#
#   dev/bench/bench_prepare.sh [DIR]      scratch files in DIR (default a fresh temporary directory, ~400 MB)
set -euo pipefail
cd "$(dirname "$0")/../.."
dir=${1:-$(mktemp -d)}
mkdir -p "$dir"
make -s build/prepare >&2
py=$(command -v python3)
if [ ! -s "$dir/reviews.json" ]; then
    echo "writing $dir/reviews.json (150 MB) ..." >&2
    "$py" - "$dir" <<'EOF'
import json, os, random, sys
d = sys.argv[1]
rng = random.Random(1)
words = ("the this product works great love it but battery died after two weeks would not buy again "
         "quality is fine for the price shipping was fast and the seller answered my questions stars "
         "easy to use sturdy cheap broke returned recommend perfect size color smaller than expected").split()
target, n = 150_000_000, 0
with open(os.path.join(d, "reviews.json"), "w") as js, open(os.path.join(d, "reviews.txt"), "w") as tx:
    while n < target:
        text = " ".join(rng.choice(words) for _ in range(rng.randint(20, 300))) + "."
        rec = {"reviewerID": "A%013d" % rng.randrange(10**13), "asin": "B%09d" % rng.randrange(10**9),
               "reviewText": text, "overall": float(rng.randint(1, 5)), "summary": " ".join(rng.sample(words, 4))}
        line = json.dumps(rec) + "\n"
        js.write(line)
        tx.write(text + "\n")
        n += len(line)
EOF
    gzip -1 -k -f "$dir/reviews.json"
fi
for f in reviews.txt reviews.json reviews.json.gz; do
    echo "== build/prepare -o OUT $f ($(du -m "$dir/$f" | cut -f1) MB)"
    build/prepare --val-fraction 0.01 -o "$dir/out_${f//./_}" "$dir/$f" | grep '^prepare: read'
    rm -rf "$dir/out_${f//./_}"
done

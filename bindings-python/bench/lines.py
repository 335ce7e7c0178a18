"""Cache lines per call, counted by valgrind's cache simulator in
bench.py's configuration (100,000 resident str keys, heap twice the item
bytes, the table grown to the keys, two untimed fills, one shared value).

instructions.py counts the work of a call with 1,000 hot keys, which
stay in L1. This counts what a call misses when the keys are as many as
the timing bench's: L1 read and write misses, and last-level misses for
a last level of `--ll` MiB. The host has 32 MiB of L3, which other
processes also fill; 8 MiB shows which lines come from far away.

For each cache and operation, a child Python runs the operation's pass
over every key once and three times under callgrind. It reports (long -
short) / (2 x keys), so the start, the fills and the interpreter cancel
out. For delete, a pass is a delete of every key and a re-insert, so
its row is the mean of the two.

    python bench/lines.py                         # ~5 minutes, needs valgrind
    python bench/lines.py --value 1024 --ll 32 --caches segcache

With `--by-file`, it also splits each segcache row by source file. That
needs a build with line tables: point `--so` at one, e.g.
`target/profiling/lib_segcache.so` from
`cargo build --profile profiling -p segcache-python`.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import shutil
import subprocess
import sys
import tempfile

# bench.py, beside this file.
from bench import require_optimised

CHILD = r"""
import sys
name, op, passes, vlen, n = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
keys = [f"key:{i}" for i in range(n)]
value = b"v" * vlen
if name == "cachebox":
    import cachebox
    c = cachebox.LRUCache(n)
else:
    import segcache
    c = segcache.Cache(heap_size=max(16 << 20, n * (vlen + 40) * 2))
def run(c=c, keys=keys, value=value):
    for _ in range(2):
        for k in keys:
            c[k] = value
    get = c.get
    for _ in range(passes):
        if op == "get hit":
            for k in keys:
                get(k)
        elif op == "set":
            for k in keys:
                c[k] = value
        else:
            for k in keys:
                del c[k]
            for k in keys:
                c[k] = value
run()
"""

EVENTS = ["Ir", "D1mr", "D1mw", "DLmr", "DLmw"]


def callgrind(env: dict, args: list[str], ll_bytes: int, tmp: str) -> str:
    """Runs the child under callgrind's cache simulator; the output file."""
    out = os.path.join(tmp, f"cg.{len(os.listdir(tmp))}.out")
    subprocess.run(
        ["valgrind", "--tool=callgrind", "--cache-sim=yes", "--D1=32768,8,64", "--I1=32768,8,64",
         f"--LL={ll_bytes},16,64", f"--callgrind-out-file={out}", sys.executable, "-c", CHILD, *args],
        check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    return out


def annotate(path: str, by_file: bool) -> tuple[list[int], dict]:
    """Program totals and, with by_file, totals per source file of segcache's code."""
    text = subprocess.run(
        ["callgrind_annotate", "--inclusive=no", "--auto=no", "--threshold=100", f"--show={','.join(EVENTS)}", path],
        check=True, capture_output=True, text=True,
    ).stdout
    totals, files = None, collections.defaultdict(lambda: [0] * len(EVENTS))
    for line in text.splitlines():
        fields = re.sub(r"\(\s*[\d.]+%\)", "", line).split()
        if len(fields) <= len(EVENTS) or not all(re.fullmatch(r"[\d,]+|\.", f) for f in fields[: len(EVENTS)]):
            continue
        nums = [0 if f == "." else int(f.replace(",", "")) for f in fields[: len(EVENTS)]]
        where = " ".join(fields[len(EVENTS):])
        if where == "PROGRAM TOTALS":
            totals = nums
        elif by_file and ".rs:" in where and "segcache::" in where:
            # The last three parts of the path: the core's src/cache/read.rs and
            # bindings-python/src/cache.rs stay apart.
            src = "/".join(where.split(":", 1)[0].split("/")[-3:])
            files[src] = [a + b for a, b in zip(files[src], nums)]
    if totals is None:
        raise SystemExit(f"no totals in {path}")
    return totals, files


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--caches", default="segcache,cachebox")
    ap.add_argument("--ops", default="get hit,set,delete")
    ap.add_argument("--value", type=int, default=64)
    ap.add_argument("--keys", type=int, default=100_000)
    ap.add_argument("--ll", type=int, default=8, help="last-level size in MiB")
    ap.add_argument("--so", help="a _segcache shared object to use instead of the installed one")
    ap.add_argument("--by-file", action="store_true", help="split segcache's rows by source file (needs line tables)")
    args = ap.parse_args()
    unknown = set(args.caches.split(",")) - {"segcache", "cachebox"}
    if unknown:
        raise SystemExit(f"unknown caches {sorted(unknown)}: segcache, cachebox")
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind not found")
    tmp = tempfile.mkdtemp(prefix="segcache-lines-")
    env = dict(os.environ)
    if args.so:
        import segcache

        pkg = os.path.join(tmp, "pkg", "segcache")
        shutil.copytree(os.path.dirname(segcache.__file__), pkg, ignore=shutil.ignore_patterns("*.so", "__pycache__"))
        shutil.copy(args.so, os.path.join(pkg, "_segcache.abi3.so"))
        env["PYTHONPATH"] = os.path.dirname(pkg)
    else:
        import segcache

        require_optimised(segcache)
    try:
        print(
            f"Per call (callgrind cache simulator: 32 KiB 8-way L1, {args.ll} MiB 16-way last level), "
            f"{args.keys:,} resident str keys, {args.value}-byte values, bench.py's sizing; "
            "delete: the mean of a delete and the re-insert after it.\n"
        )
        print("| cache | operation | instructions | L1 read misses | L1 write misses | LL read misses | LL write misses |")
        print("|---|---|---:|---:|---:|---:|---:|")
        split = []
        for name in args.caches.split(","):
            for op in args.ops.split(","):
                runs = []
                for passes in (1, 3):
                    child = [name, op, str(passes), str(args.value), str(args.keys)]
                    runs.append(annotate(callgrind(env, child, args.ll << 20, tmp), args.by_file and name == "segcache"))
                per = 2 * args.keys * (2 if op == "delete" else 1)
                row = [(b - a) / per for a, b in zip(runs[0][0], runs[1][0])]
                print(f"| {name} | {op} | {row[0]:.0f} | " + " | ".join(f"{x:.2f}" for x in row[1:]) + " |")
                if args.by_file and name == "segcache":
                    files = {f: [(b - a) / per for a, b in zip(runs[0][1].get(f, [0] * len(EVENTS)), v)] for f, v in runs[1][1].items()}
                    split.append((op, files))
        for op, files in split:
            print(f"\nsegcache {op}, by source file (instructions inlined from std count where they were inlined):\n")
            print("| file | instructions | L1 read misses | L1 write misses | LL read misses | LL write misses |")
            print("|---|---:|---:|---:|---:|---:|")
            for f, v in sorted(files.items(), key=lambda kv: -kv[1][0]):
                if max(abs(x) for x in v) >= 0.05:
                    print(f"| {f} | {v[0]:.1f} | " + " | ".join(f"{x:.2f}" for x in v[1:]) + " |")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()

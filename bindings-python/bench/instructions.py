"""CPU instructions per operation, counted by valgrind's callgrind: a cost
measure that other processes on the machine cannot disturb (unlike time),
so it compares caches fairly on a loaded machine. It does not see memory
stalls (cache and TLB misses): read it beside bench.py's times.

For each cache and operation, runs a child Python twice under callgrind,
doing the operation over KEYS hot keys (default 1,000) once and REPS + 1
times, and reports (instructions of the long run - the short run) / (REPS
x KEYS): setup and interpreter start cancel out; the Python loop's own
instructions (`for k in keys: f(k)`) are included, and printed alone as
"loop".

    python bench/instructions.py              # needs valgrind; ~15 minutes
    python bench/instructions.py --keys 1000 --reps 30
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile

# bench.py, beside this file.
from bench import require_optimised

CHILD = r"""
import functools, sys
name, op, n, reps, vlen = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
keys = [f"key:{i}" for i in range(n)]
missing = [f"nokey:{i}" for i in range(n)]
v = b"v" * vlen
def square(x):
    return x * x
if op == "decorator hit":
    if name == "segcache":
        import segcache
        f = segcache.cached(segcache.Cache(heap_size=16 << 20))(square)
    elif name == "cachebox":
        import cachebox
        f = cachebox.cached(cachebox.LRUCache(n))(square)
    elif name == "moka_py":
        import moka_py
        f = moka_py.cached(maxsize=n)(square)
    elif name == "cachetools":
        import cachetools
        f = cachetools.cached(cachetools.LRUCache(maxsize=n))(square)
    elif name == "functools":
        f = functools.lru_cache(maxsize=n)(square)
    else:
        f = square
    def run(f=f, args=list(range(n))):
        for a in args:
            f(a)
        for _ in range(reps):
            for a in args:
                f(a)
    run()
    sys.exit(0)
if name == "segcache":
    import segcache
    c = segcache.Cache(heap_size=16 << 20); get, put, delete = c.get, c.__setitem__, c.__delitem__
elif name == "cachebox":
    import cachebox
    c = cachebox.LRUCache(n); get, put, delete = c.get, c.__setitem__, c.__delitem__
elif name == "moka_py":
    import moka_py
    c = moka_py.Moka(n); get, put, delete = c.get, c.set, c.remove
elif name == "cachetools":
    import cachetools
    c = cachetools.LRUCache(maxsize=n); get, put, delete = c.get, c.__setitem__, c.__delitem__
elif name == "dict":
    c = {}; get, put, delete = c.get, c.__setitem__, c.__delitem__
else:
    c = None; get = delete = lambda k: None; put = lambda k, v: None
# Mappings are written to as users write: c[k] = v and del c[k] (moka-py,
# not a mapping, and the bare loop through put/delete).
mapping = name in ("segcache", "cachebox", "cachetools", "dict")
def run(c=c if mapping else None, obj=c, get=get, put=put, delete=delete, keys=keys, missing=missing, v=v):
    # Locals, not globals: the loop costs what it would in a function.
    for k in keys:
        put(k, v)
    for _ in range(reps):
        if op == "get hit":
            for k in keys:
                get(k)
        elif op == "get hit, c.get(k)" and obj is not None:
            # The method looked up and called in the loop, as code
            # usually writes it (CPython specialises the call).
            for k in keys:
                obj.get(k)
        elif op == "get hit, c.get(k)":
            for k in keys:
                get(k)
        elif op == "get miss":
            for k in missing:
                get(k)
        elif op == "set" and mapping:
            for k in keys:
                c[k] = v
        elif op == "set":
            for k in keys:
                put(k, v)
        elif op == "delete" and mapping:
            for k in keys:
                del c[k]
            for k in keys:
                c[k] = v
        elif op == "delete":
            for k in keys:
                delete(k)
            for k in keys:
                put(k, v)
run()
"""

CACHES = ["segcache", "cachebox", "moka_py", "cachetools", "dict", "loop"]
DECORATED = ["segcache", "cachebox", "moka_py", "cachetools", "functools", "loop"]
OPS = ["get hit", "get hit, c.get(k)", "get miss", "set", "delete"]


def instructions(script: str, args: list) -> int:
    """Instructions callgrind counts for `python -c script *args`."""
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "cg.out")
        # A fixed str hash seed: with a random one, dict layouts (and when
        # they resize) differ between the short and the long run, which
        # moved results by up to ~100 instructions per operation.
        # The child runs in an empty directory of its own and, where
        # Python has -P (3.11+), without it on sys.path: with -c, Python
        # puts the working directory first on sys.path, and the import
        # system lists it again whenever its modification time changes; a
        # busy working directory (/tmp, a repository other programs write
        # to) moved results by up to ~250 instructions per operation.
        cwd = os.path.join(d, "cwd")
        os.mkdir(cwd)
        safe_path = ["-P"] if sys.version_info >= (3, 11) else []
        proc = subprocess.run(
            # The child's code by -c, not from a temporary file: a random
            # file name is a different str in every run (code objects and
            # module globals hold it), which moved dict layouts and the
            # result by up to ~500 instructions per operation.
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
             sys.executable, *safe_path, "-c", script, *args],
            capture_output=True,
            text=True,
            cwd=cwd,
            env={**os.environ, "PYTHONHASHSEED": "0"},
        )
        if proc.returncode != 0:
            raise RuntimeError(proc.stderr[-2000:])
        m = re.search(r"Collected : (\d+)", proc.stderr)
        return int(m.group(1))


def per_op(script: str, name: str, op: str, keys: int, reps: int, vlen: int) -> float:
    short = instructions(script, [name, op, str(keys), "0", str(vlen)])
    long = instructions(script, [name, op, str(keys), str(reps), str(vlen)])
    work = keys * reps * (2 if op == "delete" else 1)  # delete also puts back
    return (long - short) / work


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keys", type=int, default=1000)
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--value", type=int, default=64, help="value bytes")
    ap.add_argument("--caches", default=",".join(CACHES), help="comma-separated subset of " + ",".join(CACHES))
    args = ap.parse_args()
    import segcache

    require_optimised(segcache)
    script = CHILD
    print(f"Instructions per operation (callgrind), {args.keys} hot str keys, {args.value}-byte values; "
          "delete is the mean of a delete and the re-insert after it.\n")
    chosen = args.caches.split(",")
    maps = [c for c in CACHES if c in chosen]
    # functools stands in for dict among the decorators.
    decorated = [c for c in DECORATED if c in chosen or (c == "functools" and "dict" in chosen)]
    print("| operation | " + " | ".join(maps) + " |")
    print("|---|" + "---:|" * len(maps))
    for op in OPS:
        cells = [f"{per_op(script, c, op, args.keys, args.reps, args.value):.0f}" for c in maps]
        print(f"| {op} | " + " | ".join(cells) + " |", flush=True)
    print("\n| decorator hit | " + " | ".join(decorated) + " |")
    print("|---|" + "---:|" * len(decorated))
    cells = [f"{per_op(script, c, 'decorator hit', args.keys, args.reps, args.value):.0f}" for c in decorated]
    print("| int argument | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()

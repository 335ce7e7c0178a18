"""Throughput of one shared cache used from several threads at once:
get hits and overwriting sets, 64 B values, in one process against
cachebox's LRUCache, moka-py and a plain dict, rounds interleaved.

Each thread works on its own slice of the resident keys (no two threads
write one key) with a value object of its own, calling the cache's
methods through its type (no bound-method object shared between
threads); all start at a barrier, and a case's time is the wall time
until the last thread is done: ops per second over all threads.
With a GIL only one thread runs Python at a time, so the rate can at best
hold; on a free-threaded CPython (3.14t, see cpython314.sh) it can grow
with the threads up to the machine's cores.

    python bench/threads.py --threads 1,2 --rounds 7

Prints, per operation and thread count, each cache's median rate
(millions of operations per second) with its range, and the ratio of
each peer's rate to ours (median of per-round ratios, min-max): below 1,
the peer is slower.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import sysconfig
import threading
import time

# bench.py, beside this file.
from bench import make_map, require_optimised, version

VALUE = b"v" * 64


def make(name: str, n: int):
    """(cache, get, set) for cache `name` of bench.py's `MAPS`, built and
    sized by its `make_map`; `get` and `set` are the type's functions,
    taking the cache first."""
    get, put, _ = make_map(name, n, len(VALUE))
    cache = get.__self__
    return cache, getattr(type(cache), get.__name__), getattr(type(cache), put.__name__)


def run(threads: int, work) -> float:
    """Wall seconds for `threads` threads running work(t) from one barrier."""
    start = threading.Barrier(threads + 1)
    done = []

    def body(t):
        start.wait()
        work(t)
        done.append(time.perf_counter())

    pool = [threading.Thread(target=body, args=(t,)) for t in range(threads)]
    for th in pool:
        th.start()
    start.wait()
    began = time.perf_counter()
    for th in pool:
        th.join()
    return max(done) - began


def case(name: str, op: str, threads: int, keys: list, passes: int) -> float:
    """Millions of `op`s per second over all threads."""
    c, get, put = make(name, len(keys))
    slices = [keys[t::threads] for t in range(threads)]
    # A value object per thread: with a shared one, every cache that
    # stores references would make the threads contend on its reference
    # count (a free-threaded CPython counts other threads' references
    # with atomic operations on one word).
    values = [bytes(bytearray(VALUE)) for _ in range(threads)]
    for t in range(threads):
        for k in slices[t]:
            put(c, k, values[t])

    if op == "get hit":

        def work(t):
            mine, cache, read = slices[t], c, get
            for _ in range(passes):
                for k in mine:
                    read(cache, k)

    else:

        def work(t):
            mine, cache, write, value = slices[t], c, put, values[t]
            for _ in range(passes):
                for k in mine:
                    write(cache, k, value)

    seconds = run(threads, work)
    assert get(c, keys[0]) == VALUE and get(c, keys[-1]) == VALUE, f"{name} lost keys"
    return len(keys) * passes / seconds / 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", default="1,2", help="thread counts, comma separated")
    ap.add_argument("--rounds", type=int, default=7, help="interleaved rounds")
    ap.add_argument("--keys", type=int, default=100_000, help="resident keys")
    ap.add_argument("--passes", type=int, default=5, help="passes over the keys per case")
    ap.add_argument("--caches", default="segcache,cachebox.LRUCache,moka_py.Moka,dict", help="names as in bench.py")
    args = ap.parse_args()

    import segcache

    require_optimised(segcache)
    names = args.caches.split(",")
    counts = [int(t) for t in args.threads.split(",")]
    ops = ["get hit", "set"]
    keys = [f"key:{i:08d}" for i in range(args.keys)]
    rates: dict = {}
    for r in range(args.rounds):
        for op in ops:
            for t in counts:
                for name in names:
                    rates.setdefault((op, t, name), []).append(case(name, op, t, keys, args.passes))
        print(f"  round {r + 1}/{args.rounds} done", file=sys.stderr)

    free = bool(sysconfig.get_config_var("Py_GIL_DISABLED"))
    gil = getattr(sys, "_is_gil_enabled", lambda: True)()
    print(
        f"CPython {sys.version.split()[0]}{'t' if free else ''} (GIL {'on' if gil else 'off'}), "
        f"{args.keys:,} resident str keys, 64 B values, {args.passes} passes per case, "
        f"{args.rounds} interleaved rounds, wall time; "
        + ", ".join(f"{n} {version(n)}" for n in names if n != "dict")
    )
    print()
    peers = [n for n in names if n != "segcache"]
    print("| operation | threads | " + " | ".join(f"{n} Mops/s" for n in names) + " | "
          + " | ".join(f"{n} / segcache" for n in peers) + " |")
    print("|---|---:|" + "---:|" * (len(names) + len(peers)))
    for op in ops:
        for t in counts:
            cells = []
            for n in names:
                v = rates[(op, t, n)]
                cells.append(f"{statistics.median(v):.2f} ({min(v):.2f}-{max(v):.2f})")
            ours = rates[(op, t, "segcache")]
            for n in peers:
                q = [p / o for p, o in zip(rates[(op, t, n)], ours)]
                cells.append(f"{statistics.median(q):.2f} ({min(q):.2f}-{max(q):.2f})")
            print(f"| {op} | {t} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()

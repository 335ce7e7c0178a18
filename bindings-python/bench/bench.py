"""Benchmark: segcache.Cache against cachetools (TTLCache, LRUCache),
cachebox (TTLCache) and a plain dict, in one run, from Python.

Measures, for each cache:
- ns per op of get (hit), get (miss) and set (overwriting a present key),
  from a Python loop over pre-built keys (the loop's own cost, printed
  separately, is included in every number);
- memory per entry after inserting N entries (default 1,000,000) of a
  ~10-byte str key and a 100-byte bytes value, each cache in a fresh
  subprocess: the RSS growth (all memory, native included) and what
  tracemalloc saw (Python's allocator only: it cannot see memory that
  Rust allocates, so it shows what Python objects the cache keeps alive).

Every cache gets room for all N entries (a max size of N, or for segcache a
heap that holds them) and TTL caches a one-hour TTL, so nothing is evicted
or expires during the run. Prints a markdown table.

    python bench/bench.py                 # defaults
    python bench/bench.py --ops 200000 --entries 1000000 --repeat 5
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import subprocess
import sys
import time

TTL = 3600
VALUE_LEN = 100


def make_cache(name: str, n: int):
    """A cache that holds n entries without evicting, its get, its set, and
    whether that set takes the TTL as a third argument (per-item TTL)."""
    if name == "segcache":
        import segcache

        # Items take ~115 bytes (5-byte header, key, value), but with more
        # than one shard the core starts evicting at about half of the heap
        # (reported as a core issue; one shard holds n in n * 160), so the
        # heap is sized at twice that. Untouched segments cost no RSS.
        heap = max(32 << 20, n * 320)
        c = segcache.Cache(heap_size=heap)
        return c, c.get, c.set, True
    if name == "cachetools.TTLCache":
        import cachetools

        c = cachetools.TTLCache(maxsize=n, ttl=TTL)
    elif name == "cachetools.LRUCache":
        import cachetools

        c = cachetools.LRUCache(maxsize=n)
    elif name == "cachebox.TTLCache":
        import cachebox

        c = cachebox.TTLCache(n, TTL)
    elif name == "dict":
        c = {}
    else:
        raise ValueError(name)
    return c, c.get, c.__setitem__, False


NAMES = ["segcache", "cachebox.TTLCache", "cachetools.TTLCache", "cachetools.LRUCache", "dict"]


def key(i: int) -> str:
    return f"key:{i}"


def value(i: int) -> bytes:
    return b"%0*d" % (VALUE_LEN, i)


def best_ns_per_op(fn, args, repeat: int) -> float:
    """Best of `repeat` timings of `for a in args: fn(a)`, in ns per call."""
    best = float("inf")
    for _ in range(repeat):
        gc.collect()
        t0 = time.perf_counter_ns()
        for a in args:
            fn(a)
        best = min(best, (time.perf_counter_ns() - t0) / len(args))
    return best


def best_ns_per_set(fn, with_ttl: bool, keys, vals, repeat: int) -> float:
    """Best of `repeat` timings of `for k, v in ...: fn(k, v[, TTL])`."""
    best = float("inf")
    for _ in range(repeat):
        gc.collect()
        t0 = time.perf_counter_ns()
        if with_ttl:
            for k, v in zip(keys, vals):
                fn(k, v, TTL)
        else:
            for k, v in zip(keys, vals):
                fn(k, v)
        best = min(best, (time.perf_counter_ns() - t0) / len(keys))
    return best


def time_one(name: str, ops: int, repeat: int) -> dict:
    cache, get, put, with_ttl = make_cache(name, ops)
    keys = [key(i) for i in range(ops)]
    vals = [value(i) for i in range(ops)]
    for k, v in zip(keys, vals):
        put(k, v, TTL) if with_ttl else put(k, v)
    missing = [f"nokey:{i}" for i in range(ops)]
    # Sanity: every key hits, every other misses, values come back whole.
    assert get(keys[0]) == vals[0] and get(keys[-1]) == vals[-1], name
    assert get(missing[0]) is None, name
    return {
        "get_hit": best_ns_per_op(get, keys, repeat),
        "get_miss": best_ns_per_op(get, missing, repeat),
        "set": best_ns_per_set(put, with_ttl, keys, vals, repeat),
    }


def loop_cost(ops: int, repeat: int) -> float:
    noop = lambda k: None  # noqa: E731
    return best_ns_per_op(noop, [key(i) for i in range(ops)], repeat)


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def memory_child(name: str, n: int) -> dict:
    """Runs in a fresh interpreter: memory growth from inserting n entries."""
    import tracemalloc

    # The baseline is taken before the cache is built: segcache allocates
    # its hash table up front, the others grow as they fill.
    gc.collect()
    tracemalloc.start()
    rss0 = rss_bytes()
    cache, get, put, with_ttl = make_cache(name, n)
    if with_ttl:
        for i in range(n):
            put(key(i), value(i), TTL)
    else:
        for i in range(n):
            put(key(i), value(i))
    gc.collect()
    traced, _peak = tracemalloc.get_traced_memory()
    rss1 = rss_bytes()
    tracemalloc.stop()
    assert get(key(n - 1)) == value(n - 1)
    out = {"rss_per_entry": (rss1 - rss0) / n, "traced_per_entry": traced / n}
    if name == "segcache":
        s = cache.stats()
        assert s["evictions"] == 0 and s["items"] == n, s
        out["live_per_entry"] = s["live_bytes"] / n
        out["table_per_entry"] = s["hash_table_bytes"] / n
    return out


def memory_one(name: str, n: int) -> dict:
    proc = subprocess.run(
        [sys.executable, __file__, "--memory-child", name, "--entries", str(n)],
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(proc.stdout.strip().splitlines()[-1])


def version(name: str) -> str:
    mod = name.split(".")[0]
    if mod == "dict":
        return platform.python_version()
    from importlib.metadata import version as v

    return v(mod)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ops", type=int, default=200_000, help="keys per timing loop")
    ap.add_argument("--entries", type=int, default=1_000_000, help="entries for the memory test")
    ap.add_argument("--repeat", type=int, default=5, help="timing repeats (best is kept)")
    ap.add_argument("--only", nargs="*", default=NAMES, help="caches to run")
    ap.add_argument("--memory-child", help=argparse.SUPPRESS)
    args = ap.parse_args()

    if args.memory_child:
        print(json.dumps(memory_child(args.memory_child, args.entries)))
        return

    print(
        f"Python {platform.python_version()} on {platform.machine()}, {os.cpu_count()} CPUs; "
        f"{args.ops:,} keys per timing loop, best of {args.repeat}; "
        f"memory for {args.entries:,} entries of a ~10-byte str key and {VALUE_LEN}-byte bytes value.\n"
    )
    rows = []
    for name in args.only:
        t = time_one(name, args.ops, args.repeat)
        m = memory_one(name, args.entries)
        rows.append((name, version(name), t, m))
        print(f"  done: {name}", file=sys.stderr)

    print("| cache | version | get hit (ns/op) | get miss (ns/op) | set (ns/op) | RSS per entry (B) | tracemalloc per entry (B) |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for name, ver, t, m in rows:
        print(
            f"| {name} | {ver} | {t['get_hit']:.0f} | {t['get_miss']:.0f} | {t['set']:.0f} "
            f"| {m['rss_per_entry']:.0f} | {m['traced_per_entry']:.0f} |"
        )
    print(f"\nThe bare Python loop (`for k in keys: f(k)` with a no-op f) costs {loop_cost(args.ops, args.repeat):.0f} ns/op, included above.")
    seg = next((m for name, _, _, m in rows if name == "segcache"), None)
    if seg:
        print(
            f"segcache's own accounting: {seg['live_per_entry']:.0f} B of segment data per entry "
            f"(header + key + value) and {seg['table_per_entry']:.0f} B of hash table per entry."
        )


if __name__ == "__main__":
    main()

"""Benchmark: segcache.Cache against cachebox, moka-py, cachetools, functools
and a plain dict, in one process, interleaved.

Per operation (ns per call from a Python loop over pre-built keys; the loop's
own cost is included in every number and printed separately):
- get hit, get miss (`get(k)`, `get = c.get` fetched once; the hit also
  as `c.get(k)`, the method looked up in the loop), set (`c[k] = v`, overwriting a present
  key), delete (`del c[k]` of a present key), for 64-byte and 1 KiB bytes
  values over RESIDENT str keys (default 100,000), in a cache filled and
  then overwritten once before timing (the steady state of a cache that has
  been running); moka-py, not a mapping, by `set(k, v)` and `remove(k)`;
  segcache also by its methods `c.set(k, v)`, `c.set(k, v, ttl=3600)` and
  `c.delete(k)`;
- decorator hit: a one-argument function called with a cached int argument
  (segcache.cached, cachebox.cached, moka_py.cached, cachetools.cached,
  functools.lru_cache).

Times are the thread's CPU time (time.thread_time_ns: time spent waiting
for a core on a loaded machine is left out, cache misses are not), or wall
time with --clock wall. Timings are taken in ROUNDS rounds; each round times every cache once for
every operation, the caches in a different (rotated) order each round, so
load changes on a shared machine hit every cache alike. Reported: the median
over rounds of each cache's ns/op, and for every peer the ratio peer/segcache
(median of the per-round ratios, with their min and max: above 1 means
segcache is faster).

Memory: ENTRIES entries (default 1,000,000) of a ~10-byte str key and a
100-byte bytes value inserted into each cache in a fresh subprocess; RSS
growth from before the cache was built (all memory, native included), per
entry. Every cache has room for all entries.

With --values fresh, every write passes a new value object and the caches
hold the only references to their values (an application caching computed
values): see FRESH.

    python bench/bench.py                       # defaults, ~5 minutes
    python bench/bench.py --rounds 3 --resident 20000 --entries 200000
    python bench/bench.py --values fresh --no-memory
"""

from __future__ import annotations

import argparse
import functools
import gc
import json
import os
import platform
import statistics
import subprocess
import sys
import time

MEMORY_VALUE_LEN = 100


# --- the build timed ----------------------------------------------------------


def require_optimised(package, label: str = "segcache") -> None:
    """Stops the run if `package` (segcache, or a copy of it holding
    another build) runs an extension built with debug assertions on:
    cargo's dev profile, as `memcheck.sh` builds it. Such a build is an
    order of magnitude slower (a 64 B get hit took 1,420 ns instead of
    ~90), so every figure taken from it would be wrong."""
    ext = package._segcache
    if getattr(ext, "_DEBUG_ASSERTIONS", False):
        raise SystemExit(
            f"{label}: {ext.__file__} is a debug build (debug assertions on, cargo's dev profile); "
            "timing it would measure that. Time a release build (bash bindings-python/test.sh installs "
            "the wheel) or a profiling one (cargo build --profile profiling -p segcache-python)"
        )


# --- caches ------------------------------------------------------------------


def make_map(name: str, n: int, value_len: int = 1024):
    """(get, set, delete) of an empty cache with room for n entries of
    values up to value_len bytes."""
    if name == "segcache":
        import segcache

        # Twice the item bytes (a shard's keys are not spread perfectly
        # evenly, and eviction starts when one shard is full), and the
        # default hash table, as users build it: it starts sized for 1 KiB
        # items filling the heap and grows with the keys written.
        c = segcache.Cache(heap_size=max(16 << 20, n * (value_len + 40) * 2))
        return c.get, c.__setitem__, c.__delitem__
    if name == "cachebox.LRUCache":
        import cachebox

        c = cachebox.LRUCache(n)
        return c.get, c.__setitem__, c.__delitem__
    if name == "moka_py.Moka":
        import moka_py

        c = moka_py.Moka(n)
        return c.get, c.set, c.remove
    if name == "cachetools.LRUCache":
        import cachetools

        c = cachetools.LRUCache(maxsize=n)
        return c.get, c.__setitem__, c.__delitem__
    if name == "dict":
        c = {}
        return c.get, c.__setitem__, c.__delitem__
    raise ValueError(name)


MAPS = ["segcache", "cachebox.LRUCache", "moka_py.Moka", "cachetools.LRUCache", "dict"]


def make_decorated(name: str, n: int):
    """A cached one-argument function, by library."""

    def square(x):
        return x * x

    if name == "segcache":
        import segcache

        return segcache.cached(segcache.Cache(heap_size=64 << 20))(square)
    if name == "cachebox.LRUCache":
        import cachebox

        return cachebox.cached(cachebox.LRUCache(n))(square)
    if name == "moka_py.Moka":
        import moka_py

        return moka_py.cached(maxsize=n)(square)
    if name == "cachetools.LRUCache":
        import cachetools

        return cachetools.cached(cachetools.LRUCache(maxsize=n))(square)
    if name == "functools":
        return functools.lru_cache(maxsize=n)(square)
    raise ValueError(name)


DECORATORS = ["segcache", "cachebox.LRUCache", "moka_py.Moka", "cachetools.LRUCache", "functools"]


def version(name: str) -> str:
    mod = name.split(".")[0]
    if mod in ("dict", "functools"):
        return platform.python_version()
    from importlib.metadata import version as v

    return v(mod.replace("_", "-"))


# --- timing ------------------------------------------------------------------


# --values fresh: every write in a timed loop passes a new bytes object
# (made in the loop, for every cache alike), and the caches hold the only
# references to their values, as in an application that caches computed
# values: a cache that stores references frees the value it replaces or
# deletes inside the call, one that copies frees nothing there but its
# caller frees the argument. Default (shared): one bytes object for every
# key and write. Set by main().
FRESH = False

# The clock every timing reads: the thread's CPU time by default (time the
# thread spent descheduled on a loaded machine is left out, memory stalls
# are not), or wall time with --clock wall. Set by main().
now_ns = time.thread_time_ns


def per_call(fn, args) -> float:
    gc.collect()
    t0 = now_ns()
    for a in args:
        fn(a)
    return (now_ns() - t0) / len(args)


def per_method_get(obj, keys) -> float:
    """`obj.get(k)` with the method looked up in the loop, as code usually
    writes it (CPython specialises such a call only when `type(obj)` is
    the method's own type)."""
    gc.collect()
    t0 = now_ns()
    for k in keys:
        obj.get(k)
    return (now_ns() - t0) / len(keys)


def per_set(fn, keys, value) -> float:
    gc.collect()
    if FRESH:
        t = bytearray(value)
        t0 = now_ns()
        for k in keys:
            fn(k, bytes(t))
        return (now_ns() - t0) / len(keys)
    t0 = now_ns()
    for k in keys:
        fn(k, value)
    return (now_ns() - t0) / len(keys)


def per_set_ttl(fn, keys, value) -> float:
    """`fn(k, v, ttl=3600)` (keywords spelled out: `**kw` would make every
    call build a dict)."""
    gc.collect()
    if FRESH:
        t = bytearray(value)
        t0 = now_ns()
        for k in keys:
            fn(k, bytes(t), ttl=3600)
        return (now_ns() - t0) / len(keys)
    t0 = now_ns()
    for k in keys:
        fn(k, value, ttl=3600)
    return (now_ns() - t0) / len(keys)


def per_setitem(c, keys, value) -> float:
    gc.collect()
    if FRESH:
        t = bytearray(value)
        t0 = now_ns()
        for k in keys:
            c[k] = bytes(t)
        return (now_ns() - t0) / len(keys)
    t0 = now_ns()
    for k in keys:
        c[k] = value
    return (now_ns() - t0) / len(keys)


def fill(put, keys, value) -> None:
    """Writes every key (untimed): with --values fresh, each gets its own
    object, which the cache then holds the only reference to."""
    if FRESH:
        t = bytearray(value)
        for k in keys:
            put(k, bytes(t))
    else:
        for k in keys:
            put(k, value)


def per_delitem(c, keys) -> float:
    gc.collect()
    t0 = now_ns()
    for k in keys:
        del c[k]
    return (now_ns() - t0) / len(keys)


def time_map(name: str, keys, missing, value) -> dict:
    get, put, delete = make_map(name, len(keys), len(value))
    # The mapping itself, for the operators (moka-py has none).
    c = None if name == "moka_py.Moka" else get.__self__
    # Filled, then overwritten once, untimed: the steady state of a cache
    # that has run for a while. (segcache's heap is memory it has not
    # touched yet until then: the first writes into it pay page faults,
    # with huge pages a kernel compaction stall, not the cache's own work.)
    for _ in range(2):
        fill(put, keys, value)
    assert get(keys[0]) == value and get(keys[-1]) == value, name
    assert get(missing[0]) is None, name
    out = {
        "get hit": per_call(get, keys),
        "get hit, c.get(k)": per_method_get(get.__self__, keys),
        "get miss": per_call(get, missing),
        "set": per_set(put, keys, value) if c is None else per_setitem(c, keys, value),
    }
    if name == "segcache":
        # Its methods, and the same overwrite with a per-item TTL (the
        # peers here have none).
        out["set, c.set(k, v)"] = per_set(c.set, keys, value)
        out["set, ttl=3600"] = per_set_ttl(c.set, keys, value)
        out["delete, c.delete(k)"] = per_call(c.delete, keys)
        assert get(keys[0]) is None, name
        fill(put, keys, value)
    out["delete"] = per_call(delete, keys) if c is None else per_delitem(c, keys)
    assert get(keys[0]) is None, name
    return out


def time_decorator(name: str, n: int) -> float:
    f = make_decorated(name, n)
    args = list(range(n))
    for a in args:
        f(a)
    assert f(3) == 9
    return per_call(f, args)


def loop_cost(n: int) -> float:
    return per_call(lambda k: None, [f"key:{i}" for i in range(n)])


def make_cost(n: int, value: bytes) -> float:
    """ns per `bytes(template)` in a loop over n keys (the object dropped
    at once): what --values fresh adds to every write."""
    t = bytearray(value)
    keys = [f"key:{i}" for i in range(n)]
    gc.collect()
    t0 = now_ns()
    for k in keys:
        x = bytes(t)
    del x
    return (now_ns() - t0) / n


# --- memory ------------------------------------------------------------------


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def memory_child(name: str, n: int) -> dict:
    """Runs in a fresh interpreter: RSS growth from inserting n entries."""
    gc.collect()
    rss0 = rss_bytes()
    get, put, _ = make_map(name, n, MEMORY_VALUE_LEN)
    for i in range(n):
        put(f"key:{i}", b"%0*d" % (MEMORY_VALUE_LEN, i))
    gc.collect()
    rss1 = rss_bytes()
    assert get(f"key:{n - 1}") == b"%0*d" % (MEMORY_VALUE_LEN, n - 1)
    assert get("key:0") is not None, "evicted: the cache was given too little room"
    return {"rss_per_entry": (rss1 - rss0) / n}


def memory_one(name: str, n: int) -> float:
    proc = subprocess.run(
        [sys.executable, __file__, "--memory-child", name, "--entries", str(n)],
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(proc.stdout.strip().splitlines()[-1])["rss_per_entry"]


# --- report ------------------------------------------------------------------


def ratio_cell(peer: list, ours: list) -> str:
    ratios = [p / o for p, o in zip(peer, ours)]
    return f"{statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=7, help="interleaved rounds")
    ap.add_argument("--resident", type=int, default=100_000, help="keys in each cache while timing")
    ap.add_argument("--entries", type=int, default=1_000_000, help="entries for the memory test")
    ap.add_argument(
        "--clock",
        choices=["cpu", "wall"],
        default="cpu",
        help="cpu: the thread's CPU time (default; steadier on a shared machine); wall: perf_counter",
    )
    ap.add_argument(
        "--values",
        choices=["shared", "fresh"],
        default="shared",
        help="shared: one bytes object for every write (default); fresh: a new object per write, "
        "the cache holding the only reference (see FRESH)",
    )
    ap.add_argument("--no-memory", action="store_true", help="skip the memory test")
    ap.add_argument("--memory-child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    global now_ns, FRESH
    now_ns = time.thread_time_ns if args.clock == "cpu" else time.perf_counter_ns
    FRESH = args.values == "fresh"

    if args.memory_child:
        print(json.dumps(memory_child(args.memory_child, args.entries)))
        return
    import segcache

    require_optimised(segcache)

    n = args.resident
    keys = [f"key:{i}" for i in range(n)]
    missing = [f"nokey:{i}" for i in range(n)]
    sizes = {"64 B": b"v" * 64, "1 KiB": b"v" * 1024}
    # samples[(size, op)][cache] = [ns per round]
    samples: dict = {}
    for r in range(args.rounds):
        order = MAPS[r % len(MAPS):] + MAPS[: r % len(MAPS)]
        for size, value in sizes.items():
            for name in order:
                for op, ns in time_map(name, keys, missing, value).items():
                    samples.setdefault((size, op), {}).setdefault(name, []).append(ns)
        dorder = DECORATORS[r % len(DECORATORS):] + DECORATORS[: r % len(DECORATORS)]
        for name in dorder:
            samples.setdefault(("-", "decorator hit"), {}).setdefault(name, []).append(time_decorator(name, n))
        print(f"  round {r + 1}/{args.rounds} done", file=sys.stderr)
    loop = loop_cost(n)
    making = {size: make_cost(n, value) for size, value in sizes.items()} if FRESH else {}
    memory = {} if args.no_memory else {name: memory_one(name, args.entries) for name in MAPS}

    load = os.getloadavg()
    print(
        f"Python {platform.python_version()} on {platform.machine()}, {os.cpu_count()} CPUs, "
        f"load average {load[0]:.1f}/{load[1]:.1f}/{load[2]:.1f} at the end; "
        f"{n:,} resident str keys, {args.rounds} interleaved rounds, "
        f"{'thread CPU time' if args.clock == 'cpu' else 'wall time'}, "
        f"{'a fresh value object per write' if FRESH else 'one shared value object'}.\n"
    )
    names = sorted({c for per in samples.values() for c in per}, key=lambda c: (c != "segcache", c))
    print("Median ns per call (the Python loop's own cost included):\n")
    print("| value | operation | " + " | ".join(f"{c} {version(c)}" for c in names) + " |")
    print("|---|---|" + "---:|" * len(names))
    for (size, op), per in samples.items():
        cells = [f"{statistics.median(per[c]):.0f}" if c in per else "" for c in names]
        print(f"| {size} | {op} | " + " | ".join(cells) + " |")
    print("\nPeer time / segcache time (median of per-round ratios, min-max; above 1: segcache faster):\n")
    peers = [c for c in names if c != "segcache"]
    print("| value | operation | " + " | ".join(peers) + " |")
    print("|---|---|" + "---:|" * len(peers))
    for (size, op), per in samples.items():
        cells = [ratio_cell(per[c], per["segcache"]) if c in per else "" for c in peers]
        print(f"| {size} | {op} | " + " | ".join(cells) + " |")
    print(f"\nThe bare loop (`for k in keys: f(k)`, f a no-op lambda) costs {loop:.0f} ns per call.\n")
    for size, ns in making.items():
        print(f"Making a fresh {size} value (`bytes(template)`, in every write loop above) costs {ns:.0f} ns.\n")
    if not memory:
        return
    print(f"Memory: RSS growth per entry for {args.entries:,} entries (~10-byte str key, {MEMORY_VALUE_LEN}-byte bytes value):\n")
    print("| cache | bytes per entry | vs segcache |")
    print("|---|---:|---:|")
    for name in MAPS:
        print(f"| {name} | {memory[name]:.0f} | {memory[name] / memory['segcache']:.2f}x |")


if __name__ == "__main__":
    main()

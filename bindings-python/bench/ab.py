"""Same-process A/B of builds of the extension: two or more `_segcache`
shared objects (and cachebox for scale) timed in one process, in
bench.py's configuration, rounds interleaved.

Each build is loaded as a copy of the installed `segcache` package under
its own name, holding that build's shared object. The module's init
function (`PyInit__segcache`) depends only on the last part of the
module name, so the copies load side by side. Times taken in one process
share its heap, interpreter and machine state. On a loaded machine a
ratio from here is steadier than two bench.py runs.

    # keep the base build aside, then build the variant
    cargo build --profile profiling -p segcache-python
    cp target/profiling/lib_segcache.so /tmp/base.so
    ... change the code ...
    cargo build --profile profiling -p segcache-python
    bindings-python/.venv/bin/python bindings-python/bench/ab.py \
        base=/tmp/base.so new=target/profiling/lib_segcache.so --rounds 15

The first build named is the base. For each other build, the last
columns give base time / build time (median of per-round ratios,
min-max): above 1, that build is faster. `--keys` changes the number of
resident keys (bench.py: 100,000), `--value` the value size. The
`set, ttl=3600` row (builds only: cachebox's LRUCache has no per-key
TTL) writes over items that already have that TTL.
"""

from __future__ import annotations

import argparse
import atexit
import gc
import importlib
import os
import shutil
import statistics
import sys
import tempfile
import time

# bench.py, beside this file.
from bench import require_optimised


def load_builds(specs: list[str]) -> dict:
    """{label: package module} for `label=path/to/_segcache.so` specs."""
    import segcache

    installed = os.path.dirname(segcache.__file__)
    root = tempfile.mkdtemp(prefix="segcache-ab-")
    atexit.register(shutil.rmtree, root, ignore_errors=True)
    sys.path.insert(0, root)
    builds = {}
    for spec in specs:
        label, _, so = spec.partition("=")
        if not label.isidentifier() or not os.path.isfile(so):
            raise SystemExit(f"bad build {spec!r}: want label=path/to/_segcache.so")
        name = f"segcache_ab_{label}"
        pkg = os.path.join(root, name)
        shutil.copytree(installed, pkg, ignore=shutil.ignore_patterns("*.so", "__pycache__"))
        shutil.copy(so, os.path.join(pkg, "_segcache.abi3.so"))
        builds[label] = importlib.import_module(name)
        require_optimised(builds[label], label)
    return builds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("builds", nargs="+", help="label=path/to/_segcache.so (the first is the base)")
    ap.add_argument("--rounds", type=int, default=11)
    ap.add_argument("--keys", type=int, default=100_000, help="resident keys")
    ap.add_argument("--value", type=int, default=64, help="value size in bytes")
    ap.add_argument("--fresh", action="store_true", help="a new bytes object per write (bench.py --values fresh)")
    ap.add_argument("--no-cachebox", action="store_true")
    args = ap.parse_args()
    builds = load_builds(args.builds)
    caches = list(builds)
    if not args.no_cachebox:
        import cachebox

        caches.append("cachebox")
    now = time.thread_time_ns
    n = args.keys
    keys = [f"key:{i}" for i in range(n)]
    value = b"v" * args.value

    def make(name: str):
        if name == "cachebox":
            return cachebox.LRUCache(n)
        # bench.py's sizing: heap twice the item bytes, the default table.
        return builds[name].Cache(heap_size=max(16 << 20, n * (args.value + 40) * 2))

    def fill(c) -> None:
        if args.fresh:
            t = bytearray(value)
            for k in keys:
                c[k] = bytes(t)
        else:
            for k in keys:
                c[k] = value

    def run(name: str) -> dict:
        c = make(name)
        fill(c)
        fill(c)
        get = c.get
        out = {}
        gc.collect()
        t0 = now()
        for k in keys:
            get(k)
        out["get hit"] = (now() - t0) / n
        gc.collect()
        if args.fresh:
            t = bytearray(value)
            t0 = now()
            for k in keys:
                c[k] = bytes(t)
        else:
            t0 = now()
            for k in keys:
                c[k] = value
        out["set"] = (now() - t0) / n
        if name != "cachebox":
            # Over the items the plain sets just wrote (no TTL): the first
            # pass goes to the log, the timed one over items with a TTL.
            put = c.set
            for k in keys:
                put(k, value, ttl=3600)
            gc.collect()
            t0 = now()
            for k in keys:
                put(k, value, ttl=3600)
            out["set, ttl=3600"] = (now() - t0) / n
        gc.collect()
        t0 = now()
        for k in keys:
            del c[k]
        out["delete"] = (now() - t0) / n
        return out

    ops = ["get hit", "set", "set, ttl=3600", "delete"]
    samples = {c: {op: [] for op in ops} for c in caches}
    for r in range(args.rounds):
        order = caches[r % len(caches):] + caches[: r % len(caches)]
        if r % 2:
            order.reverse()
        for name in order:
            for op, ns in run(name).items():
                samples[name][op].append(ns)
        print(f"  round {r + 1}/{args.rounds} done", file=sys.stderr)
    base = caches[0]
    load = os.getloadavg()
    print(
        f"{n:,} resident str keys, {args.value} B values ({'fresh' if args.fresh else 'shared'}), "
        f"{args.rounds} interleaved rounds, thread CPU time, load average {load[0]:.1f} at the end.\n"
    )
    print("| operation | " + " | ".join([f"{c} ns" for c in caches] + [f"{base} / {c}" for c in caches[1:]]) + " |")
    print("|---|" + "---:|" * (2 * len(caches) - 1))
    for op in ops:
        cells = [f"{statistics.median(samples[c][op]):.1f}" if samples[c][op] else "" for c in caches]
        for c in caches[1:]:
            if not samples[c][op]:
                cells.append("")
                continue
            ratios = [b / x for b, x in zip(samples[base][op], samples[c][op])]
            cells.append(f"{statistics.median(ratios):.3f} ({min(ratios):.2f}-{max(ratios):.2f})")
        print(f"| {op} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()

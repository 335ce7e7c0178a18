"""Get-hit time of a cache built the way users build it.

`segcache.Cache(heap_size=...)` with nothing else given (the default hash
table, segment size and shard count) against `cachebox.LRUCache(n)`, both
built by `bench.py`'s `make_map`, one process, interleaved rounds.
`bench.py` times every operation; this one times only the get hit, for
value sizes where the default table's size matters (a table sized for
far more keys than the heap holds misses the CPU's caches on every
lookup).

    python bench/defaults.py --values 64,1024 --rounds 5
"""

from __future__ import annotations

import argparse
import statistics
import time

# bench.py, beside this file: the same caches, built the same way.
from bench import make_map, require_optimised


def get_hit_ns(cache, keys, repeats: int) -> float:
    """Best of `repeats` passes over every key, ns per `cache.get`."""
    get = cache.get
    best = float("inf")
    for _ in range(repeats):
        t0 = time.thread_time_ns()
        for k in keys:
            get(k)
        best = min(best, (time.thread_time_ns() - t0) / len(keys))
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keys", type=int, default=100_000, help="resident keys")
    ap.add_argument("--values", default="64,1024", help="value sizes in bytes")
    ap.add_argument("--rounds", type=int, default=5, help="interleaved rounds")
    args = ap.parse_args()
    import segcache

    require_optimised(segcache)
    keys = [f"key:{i}" for i in range(args.keys)]
    print("| value | segcache ns | cachebox ns | cachebox / segcache (median, min-max) | table bytes per key |")
    print("|---|---:|---:|---|---:|")
    for size in (int(v) for v in args.values.split(",")):
        value = b"v" * size
        caches = [make_map(name, args.keys, size) for name in ("segcache", "cachebox.LRUCache")]
        for _ in range(2):
            for _, put, _ in caches:
                for k in keys:
                    put(k, value)
        ours, peer = (get.__self__ for get, _, _ in caches)
        assert ours.get(keys[-1]) == value and len(ours) == args.keys
        samples = []
        for _ in range(args.rounds):
            samples.append((get_hit_ns(ours, keys, 3), get_hit_ns(peer, keys, 3)))
        ratios = [p / o for o, p in samples]
        table = ours.stats()["hash_table_bytes"] / len(ours)
        print(
            f"| {size} B | {statistics.median(o for o, _ in samples):.0f} "
            f"| {statistics.median(p for _, p in samples):.0f} "
            f"| {statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f}) "
            f"| {table:.1f} |"
        )


if __name__ == "__main__":
    main()

"""Threads hammering one Cache: every thread reads its own writes, shared
counters never lose their numeric form, and the cache stays consistent
(len matches stats, the heap bound holds) while large writes release the GIL."""

import os
import subprocess
import sys
import sysconfig
import threading

import pytest

import segcache

THREADS = 8
ROUNDS = 3_000


def run_threads(target):
    errors = []

    def guarded(t):
        try:
            target(t)
        except BaseException as e:  # surfaced in the main thread below
            errors.append(e)

    threads = [threading.Thread(target=guarded, args=(t,)) for t in range(THREADS)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    if errors:
        raise errors[0]


def test_threads_read_their_own_writes():
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible
    try:
        c = segcache.Cache(heap_size=16 << 20, segment_size=64 << 10, shards=4)
        c.set("shared", b"0")

        def work(t):
            for i in range(ROUNDS):
                key = f"{t}:{i % 200}"
                value = f"{t}-{i}".encode()
                c.set(key, value)
                assert c.get(key) == value
                if i % 7 == 0:
                    assert c.delete(key)
                    assert key not in c
                c.incr("shared")
                assert c.get("shared").isdigit()

        run_threads(work)
    finally:
        sys.setswitchinterval(old)
    assert c.get("shared") == str(THREADS * ROUNDS).encode(), "no increment lost"
    assert len(c) == c.stats()["items"]


def test_large_writes_release_the_gil_without_losing_data():
    # bytearrays are copied (a bytes this long would be held by
    # reference, test_held.py), and from DETACH_AT on the copy runs with
    # the GIL released.
    c = segcache.Cache(heap_size=8 << 20, segment_size=256 << 10, shards=2)

    def big(t, i):
        # Three sizes in turn: an overwrite of another size goes to the
        # log (one of the same size would be made in place), so the heap
        # churns and segments are reclaimed while the threads write.
        return bytes([t]) * (segcache.DETACH_AT + 1000 * t + i % 3)

    def whole(got, t):
        return got == bytes([t]) * len(got) and len(got) - segcache.DETACH_AT - 1000 * t in (0, 1, 2)

    def work(t):
        for i in range(200):
            key = f"big:{t}:{i % 10}"
            c.set(key, bytearray(big(t, i)))
            got = c.get(key)
            # Another thread never writes this key; eviction may drop it.
            assert got is None or got == big(t, i)
            c.set_many({f"many:{t}:{i % 5}": bytearray(big(t, i + 1))})

    run_threads(work)
    s = c.stats()
    assert s["live_bytes"] <= s["heap_bytes"]
    # ~8 x 300 writes of 16-23 KiB went through an 8 MiB heap: segments were
    # reclaimed (compacted or merged), and whatever survived is intact.
    assert s["evicted_segments"] > 0 and s["merges"] > 0
    for t in range(THREADS):
        for i in range(10):
            got = c.get(f"big:{t}:{i}")
            assert got is None or whole(got, t)


def test_cas_under_contention_admits_one_winner_per_version():
    c = segcache.Cache(heap_size=8 << 20, segment_size=64 << 10, shards=1)
    c.set("n", b"0")
    wins = [0] * THREADS

    def work(t):
        for _ in range(500):
            while True:
                value, token = c.gets("n")
                if c.cas("n", str(int(value) + 1), token):
                    wins[t] += 1
                    break

    run_threads(work)
    assert c.get("n") == str(THREADS * 500)
    assert sum(wins) == THREADS * 500


def test_get_or_set_under_contention_computes_each_key_once():
    c = segcache.Cache(heap_size=16 << 20, shards=4)
    calls = {}
    lock = threading.Lock()

    def factory_for(key):
        def factory():
            with lock:
                calls[key] = calls.get(key, 0) + 1
            return {"key": key}

        return factory

    def work(t):
        for i in range(2_000):
            key = ("k", i % 50)
            assert c.get_or_set(key, factory_for(key)) == {"key": key}

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        run_threads(work)
    finally:
        sys.setswitchinterval(old)
    assert calls == {("k", i): 1 for i in range(50)}, "no item was evicted, so one call per key"
    assert c._in_flight == 0


def test_iteration_while_other_threads_write():
    c = segcache.Cache(heap_size=16 << 20, shards=4)
    for i in range(1_000):
        c[i] = i
    stop = threading.Event()

    def writer():
        n = 0
        while not stop.is_set() and n < 200_000:
            c[1_000 + n % 500] = n
            c.pop(n % 1_000 + 5_000, None)
            n += 1

    threads = [threading.Thread(target=writer) for _ in range(2)]
    for t in threads:
        t.start()
    try:
        for _ in range(20):
            seen = list(c.items())
            keys = [k for k, _ in seen]
            assert len(keys) == len(set(keys)), "no key twice"
            assert all(k == v for k, v in seen if k < 1_000), "the untouched keys are intact"
            assert set(range(1_000)) <= set(keys)
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=30)


@pytest.mark.skipif(
    not sysconfig.get_config_var("Py_GIL_DISABLED"), reason="needs a free-threaded CPython"
)
def test_importing_segcache_leaves_the_gil_off():
    # A module that does not declare that it runs without the GIL makes a
    # free-threaded CPython turn the GIL back on at import (with a
    # warning): every test here would then run serialised.
    env = {k: v for k, v in os.environ.items() if k != "PYTHON_GIL"}
    code = "import sys, segcache; c = segcache.Cache(); c['k'] = 1; print(sys._is_gil_enabled())"
    out = subprocess.run(
        [sys.executable, "-W", "error", "-c", code],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"

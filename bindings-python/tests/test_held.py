"""Values held by reference: a ``bytes``, an ASCII ``str`` or a
serializer's output of ``HELD_AT`` bytes or more is not copied. The cache
keeps a reference to the object, a read returns the object itself, and
the heap is charged the object's memory.

What must hold: a held value reads back as the object stored; the
cache's reference goes exactly once, whichever way the item leaves
(overwrite, delete, pop, expiry, eviction, clear, flush, the cache's
end), including from threads that left the interpreter; and the heap
bounds the segments in use and the held objects together."""

import gc
import pickle
import sys
import threading

import pytest

import segcache

N = segcache.HELD_AT


def small(**kwargs):
    """4 MiB of 64 KiB segments, one shard, unless overridden."""
    kwargs.setdefault("heap_size", 4 << 20)
    kwargs.setdefault("segment_size", 64 << 10)
    kwargs.setdefault("shards", 1)
    return segcache.Cache(**kwargs)


def fresh(n, fill=b"v"):
    """A new bytes object of n bytes (not shared with anything)."""
    return bytes(bytearray(fill * n))


def counts(objs):
    """Each object's reference count, every one counted the same way (a
    loop variable or a zip's tuple would add a reference of its own)."""
    return [sys.getrefcount(objs[i]) for i in range(len(objs))]


def held_refs(objs, base):
    """References beyond `base` (from `counts`): the cache's."""
    return sum(now - then for now, then in zip(counts(objs), base))


def test_held_at_is_one_kib():
    assert N == 1024


def test_a_large_bytes_or_ascii_str_comes_back_as_itself():
    c = small()
    b, s = fresh(N), "s" * (N + 7)
    before = sys.getrefcount(b), sys.getrefcount(s)
    c["b"] = b
    c.set("s", s, ttl=60)
    assert c["b"] is b and c.get("s") is s
    assert (sys.getrefcount(b), sys.getrefcount(s)) == (before[0] + 1, before[1] + 1)
    stats = c.stats()
    assert stats["held_items"] == 2
    assert 2 * N < stats["held_bytes"] < 2 * N + 300
    # Reads take their own reference: dropping what a read returned
    # leaves the cache's.
    got = c["b"]
    del got
    assert sys.getrefcount(b) == before[0] + 1


class Subclass(bytes):
    """A bytes subclass: pickled, as every type but the exact ones."""


@pytest.mark.parametrize(
    "value",
    [
        b"x" * (N - 1),  # under the threshold
        bytearray(b"x" * N),  # mutable: copied
        "\u00e9" * N,  # not ASCII
    ],
    ids=["short", "bytearray", "non-ascii"],
)
def test_other_values_are_copied(value):
    c = small()
    c["k"] = value
    got = c["k"]
    assert got == value and got is not value
    assert c.stats()["held_items"] == 0


def test_a_subclass_is_pickled_and_its_pickle_held():
    c = small()
    value = Subclass(b"x" * N)
    c["k"] = value
    got = c["k"]
    assert type(got) is Subclass and got == value and got is not value
    assert c.stats()["held_items"] == 1


def test_every_way_out_drops_the_cache_reference():
    clock = segcache.ManualClock()
    c = small(_clock=clock)
    objs = [fresh(N + i) for i in range(12)]
    base = counts(objs)

    def held(i):
        return counts(objs)[i] - base[i]

    for i in range(len(objs)):
        c[f"k{i}"] = objs[i]
    assert [held(i) for i in range(12)] == [1] * 12
    c["k0"] = b"inline"  # overwritten by a copy
    c["k1"] = objs[11]  # overwritten by another held value
    del c["k2"]
    assert c.delete("k3")
    assert c.pop("k4") is objs[4]
    c.set("k5", objs[5], ttl=5)  # rewritten with a TTL: still one reference
    assert held(5) == 1
    clock.advance(6)
    assert c.get("k5") is None  # expired on the read
    c.set("k6", objs[6], ttl=5)
    clock.advance(6)
    c.expire()
    assert c.replace("k7", b"copy") is True
    assert [held(i) for i in range(8)] == [0] * 8
    assert held(11) == 2  # under k1 and k11
    assert c.touch("k8", 100) is True  # a touch moves the item, keeps it
    assert held(8) == 1 and c["k8"] is objs[8]
    c.flush()
    assert all(held(i) == 0 for i in range(12))
    c["k9"] = objs[9]
    c.clear()
    assert held(9) == 0
    c["k10"] = objs[10]
    c.popitem()
    assert held(10) == 0
    c["k10"] = objs[10]
    del c
    gc.collect()
    assert held(10) == 0
    assert segcache._segcache._held_waiting() == 0


def test_eviction_drops_the_reference_and_the_heap_bounds_the_weight():
    c = small(heap_size=1 << 20, segment_size=32 << 10)
    objs = [fresh(N) for _ in range(3000)]
    base = counts(objs)
    for i in range(len(objs)):
        c[f"k{i}"] = objs[i]
        if i % 500 == 0:
            s = c.stats()
            seg = 32 << 10
            # Segments in use (or free) plus the held objects' memory
            # stay within the heap: segments were given up for them.
            in_heap = (s["segments_used"] + s["segments_free"]) * seg
            assert in_heap + s["held_bytes"] <= s["heap_bytes"] + seg, s
    s = c.stats()
    assert s["evictions"] > 0 and s["segments_withheld"] > 0
    assert held_refs(objs, base) == s["held_items"] == len(c)
    # ~3 MB of values were written into a 1 MiB cache.
    assert s["held_bytes"] < 1 << 20
    for i in range(len(objs)):
        got = c.get(f"k{i}")
        assert got is None or got is objs[i]
    del got
    c.clear()
    assert counts(objs) == base


def test_pickled_large_values_are_held_and_unpickled_on_every_read():
    c = small()
    value = list(range(1000))
    assert len(pickle.dumps(value, pickle.HIGHEST_PROTOCOL)) >= N
    c["p"] = value
    assert c.stats()["held_items"] == 1
    a, b = c["p"], c["p"]
    assert a == b == value and a is not b and a is not value
    c["small"] = [1, 2]
    assert c.stats()["held_items"] == 1


def test_append_and_prepend_rebuild_a_held_value_and_keep_its_ttl():
    clock = segcache.ManualClock()
    c = small(_clock=clock)
    b, s = fresh(N, b"b"), "s" * N
    c.set("b", b, ttl=100)
    c.set("s", s, ttl=100)
    assert c.append("b", b"+") is True
    assert c.prepend("b", "-") is True
    assert c["b"] == b"-" + b + b"+"
    assert c.append("s", "!") is True
    assert c["s"] == s + "!"
    c.append("s", b"\xff")  # no longer UTF-8: reads back as bytes
    assert c["s"] == s.encode() + b"!\xff"
    assert c.ttl("b") == 100 and c.ttl("s") == 100
    alone = fresh(N, b"o")  # a local nothing else refers to
    assert sys.getrefcount(b) == sys.getrefcount(alone)  # the original went with its item
    assert c.append("missing", b"x") is False


def test_arithmetic_on_a_held_value_is_refused_and_changes_nothing():
    c = small()
    b = fresh(N, b"1")
    c["n"] = b
    with pytest.raises(ValueError):
        c.incr("n")
    assert c["n"] is b


def test_set_many_get_or_set_and_the_decorator_hold_large_values():
    c = small()
    objs = [fresh(N + i) for i in range(4)]
    c.set_many({"a": objs[0], "b": objs[1]})
    assert c["a"] is objs[0] and c["b"] is objs[1]
    assert c.get_or_set("c", lambda: objs[2]) is objs[2]
    assert c.get_or_set("c", lambda: 1 / 0) is objs[2]

    @segcache.cached(c)
    def page(n):
        return objs[3]

    assert page(1) is objs[3] and page(1) is objs[3]
    # A batch that fails part-way keeps what it wrote before, and holds
    # nothing it did not write.
    late = fresh(N + 9)
    before = sys.getrefcount(late)
    with pytest.raises(ValueError, match="too large"):
        c.set_many({"x": fresh(N), "y": b"z" * (c.max_value_len(1) + 1), "z": late})
    assert "x" in c and "y" not in c and "z" not in c
    assert sys.getrefcount(late) == before


def test_iteration_copy_and_pickle_carry_held_values():
    c = small()
    b, s = fresh(N), "t" * N
    c.update({"b": b, "s": s})
    assert dict(c.items()) == {"b": b, "s": s}
    assert all(v is b or v is s for v in c.values())
    twin = pickle.loads(pickle.dumps(c))
    assert twin["b"] == b and twin["s"] == s


def test_a_datapool_cache_copies_its_values(tmp_path):
    c = segcache.Cache(heap_size=4 << 20, datapool=str(tmp_path / "pool"))
    b = fresh(N)
    c["k"] = b
    got = c["k"]
    assert got == b and got is not b
    assert c.stats()["held_items"] == 0


def test_releases_made_while_detached_are_dropped_when_it_returns():
    # clear(), flush() and expire() run with the GIL released: the
    # references they release wait until the call is back.
    clock = segcache.ManualClock()
    c = small(_clock=clock)
    objs = [fresh(N) for _ in range(50)]
    base = counts(objs)
    for how in ("clear", "flush", "expire"):
        for i in range(len(objs)):
            c.set(f"k{i}", objs[i], ttl=10)
        assert held_refs(objs, base) == 50
        if how == "expire":
            clock.advance(11)
            assert c.expire() == 50
        else:
            getattr(c, how)()
        assert segcache._segcache._held_waiting() == 0
        assert counts(objs) == base, how


def test_threads_writing_and_reading_held_values_lose_no_reference():
    c = small(heap_size=2 << 20, segment_size=32 << 10, shards=2)
    objs = [fresh(N + 8 * i) for i in range(64)]
    base = counts(objs)
    errors = []

    def work(t):
        try:
            for i in range(3000):
                k = f"k{(i * 7 + t) % 97}"
                o = objs[(i + t) % 64]
                op = i % 5
                if op < 2:
                    c[k] = o
                elif op == 2:
                    got = c.get(k)
                    assert got is None or any(got is x for x in objs)
                elif op == 3:
                    c.pop(k, None)
                else:
                    c.set(k, o, ttl=1)
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert held_refs(objs, base) == c.stats()["held_items"]
    c.clear()
    assert counts(objs) == base


def test_attached_calls_beside_detached_ones_keep_the_cache_whole():
    """Calls that hold the GIL reach the shards without their locks only
    while no thread runs the cache detached; here one thread keeps
    running detached calls (len, stats, iteration snapshots, copied
    writes of DETACH_AT bytes, expire) while others write, read and
    delete copied and held values."""
    c = small(heap_size=2 << 20, segment_size=64 << 10, shards=2)
    objs = [fresh(N + 8 * i) for i in range(32)]
    base = counts(objs)
    big = bytearray(b"B" * segcache.DETACH_AT)
    stop = threading.Event()
    errors = []

    def detached():
        try:
            while not stop.is_set():
                len(c)
                c.stats()
                list(c.keys())
                c["big"] = big
                c.expire()
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    def attached(t):
        try:
            for i in range(4000):
                k = f"k{(i * 5 + t) % 61}"
                if i % 4 == 0:
                    c[k] = objs[(i + t) % 32]
                elif i % 4 == 1:
                    c[k] = b"small" * (i % 7)
                elif i % 4 == 2:
                    got = c.get(k)
                    assert got is None or type(got) is bytes
                else:
                    c.pop(k, None)
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # switch threads as often as CPython will
    try:
        side = threading.Thread(target=detached)
        side.start()
        workers = [threading.Thread(target=attached, args=(t,)) for t in range(3)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        stop.set()
        side.join()
    finally:
        sys.setswitchinterval(old)
    assert errors == []
    assert c.get("big") in (None, bytes(big))
    assert held_refs(objs, base) == c.stats()["held_items"]
    c.clear()
    assert counts(objs) == base

"""Reads refill a `bytes` object they returned earlier once its reader has
let go of it (reference count back to the cache's own one), instead of
allocating a new one (src/recycle.rs). These tests pin that it happens
where it should, and above all that a value anyone still holds (a
variable, a list, a dict key, a memoryview, another thread) never changes:
every kept result is compared with an independent copy after many more
reads of other values of the same and nearby lengths."""

import gc
import random
import sys
import threading

import pytest

import segcache
from segcache import _segcache

FREE_THREADED = not getattr(sys, "_is_gil_enabled", lambda: True)()
ON = _segcache._direct_reads()[1] and not FREE_THREADED


def value(i, n):
    """A distinct `bytes` of length n for index i (made at run time)."""
    seed = f"{i}:".encode()
    return (seed * (n // len(seed) + 1))[:n]


def copy(b):
    """An independent copy (never the same object)."""
    return bytes(bytearray(b))


@pytest.fixture
def cache():
    return segcache.Cache(heap_size=8 << 20, segment_size=1 << 20)


@pytest.mark.skipif(
    FREE_THREADED or sys.implementation.name != "cpython" or not ((3, 10) <= sys.version_info[:2] <= (3, 14)),
    reason="recycling needs the bytes layout the probe knows (CPython 3.10-3.14 with a GIL)",
)
def test_recycling_is_on_where_the_layout_is_known(cache):
    assert _segcache._recycling(cache) is True


@pytest.mark.skipif(not ON, reason="recycling is off here")
@pytest.mark.parametrize("get", ["get", "subscript"])
def test_a_dropped_result_is_refilled(cache, get):
    """The object a reader dropped comes back (refilled) from the next
    read; while the cache keeps it, its count is one higher than a fresh
    object's."""
    read = cache.get if get == "get" else cache.__getitem__
    cache["a"] = value(1, 100)
    cache["b"] = value(2, 100)
    first = read("a")
    first_id = id(first)
    # The cache's reference and ours, against ours alone.
    fresh = copy(first)
    assert sys.getrefcount(first) == sys.getrefcount(fresh) + 1
    del fresh
    del first
    second = read("b")
    assert id(second) == first_id
    assert second == value(2, 100)


@pytest.mark.skipif(not ON, reason="recycling is off here")
def test_held_results_never_change(cache):
    """Results kept in a variable, a list, a dict (hashed) and a
    memoryview stay as they were across many reads of same-length and
    nearby-length values, some dropped at once (and refilled)."""
    lengths = [2, 3, 16, 64, 100, 112, 113, 500, 1024, 1100, 4096, 16 << 10, (16 << 10) + 1]
    for i, n in enumerate(lengths):
        for j in range(6):
            cache[f"{n}:{j}"] = value(i * 10 + j, n)
    rng = random.Random(7)
    kept = []  # (object, independent copy)
    as_keys = {}
    views = []
    for step in range(3000):
        n = rng.choice(lengths)
        j = rng.randrange(6)
        got = cache[f"{n}:{j}"]
        assert got == value(lengths.index(n) * 10 + j, n)
        assert len(got) == n
        assert hash(got) == hash(copy(got))
        what = rng.randrange(10)
        if what == 0:
            kept.append((got, copy(got)))
        elif what == 1:
            as_keys[got] = copy(got)
        elif what == 2:
            views.append((memoryview(got), copy(got)))
        del got
    for obj, original in kept:
        assert obj == original
        assert hash(obj) == hash(original)
    for obj, original in as_keys.items():
        assert obj == original
        assert as_keys[copy(original)] == original  # still found by its hash
    for view, original in views:
        assert view.tobytes() == original


@pytest.mark.skipif(not ON, reason="recycling is off here")
def test_every_short_length_refills_byte_for_byte():
    """A refill copies values of up to 64 bytes inline (two overlapping
    word moves of 4, 8, 16 or 32 bytes, or three single bytes) and longer
    ones with memcpy: every length from 2 to 80, into an object of the
    same length and into one up to 1/8 longer, reads back byte for byte
    (each byte distinct from its neighbours, so a misplaced word shows),
    with the NUL after it."""
    def pattern(n, salt):
        return bytes((salt * 31 + i * 7 + 1) % 251 + 1 for i in range(n))

    for n in range(2, 81):
        for room in sorted({n, n + n // 8}):
            # A cache of its own: nothing kept but the object read below.
            cache = segcache.Cache(heap_size=1 << 20)
            cache["room"] = pattern(room, 1)
            cache["v"] = pattern(n, 2)
            got = cache["room"]
            room_id = id(got)
            del got
            got = cache["v"]
            assert id(got) == room_id  # refilled, not a new object
            assert got == pattern(n, 2) and len(got) == n
            assert got + b"" == pattern(n, 2)
            assert bytes(bytearray(got)) == pattern(n, 2)
            assert hash(got) == hash(pattern(n, 2))
            del got


@pytest.mark.skipif(not ON, reason="recycling is off here")
def test_long_values_refill_byte_for_byte_around_the_prefetch():
    """Values over 64 bytes are copied by memcpy, those of 256 B to 4 KiB
    after a prefetch of their cache lines: lengths on either side of
    both bounds, from items at eight different offsets within a cache
    line (keys of 1 to 8 bytes shift them), refill an object of the same
    length and read back byte for byte, with the NUL after them."""
    def pattern(n, salt):
        return bytes((salt * 31 + i * 7 + 1) % 251 + 1 for i in range(n))

    for n in (65, 255, 256, 257, 1000, 1024, 4095, 4096, 4097, 8 << 10):
        # A cache of its own, one key length: nothing kept but the
        # objects read below. Stored from bytearrays, which are copied
        # (a bytes of HELD_AT bytes or more would be held by reference).
        cache = segcache.Cache(heap_size=1 << 20)
        for shift in range(1, 9):
            key = "k" * shift
            cache["room"] = bytearray(pattern(n, shift))
            cache[key] = bytearray(pattern(n, shift + 1))
            got = cache["room"]
            room_id = id(got)
            del got
            got = cache[key]
            assert id(got) == room_id  # refilled, not a new object
            assert got == pattern(n, shift + 1)
            assert bytes(bytearray(got)) == pattern(n, shift + 1)
            assert hash(got) == hash(pattern(n, shift + 1))
            del got


@pytest.mark.skipif(not ON, reason="recycling is off here")
def test_a_refilled_object_is_complete(cache):
    """Shorter values refilled into a longer object (up to 1/8 of room
    left) read back with their own length, hash, NUL end and size."""
    cache["long"] = b"x" * 1000
    cache["short"] = b"y" * 900
    got = cache["long"]
    size_long = sys.getsizeof(got)
    del got
    got = cache["short"]
    assert got == b"y" * 900
    assert len(got) == 900
    assert sys.getsizeof(got) == size_long - 100
    assert hash(got) == hash(b"y" * 900)
    assert got.endswith(b"y") and got + b"!" == b"y" * 900 + b"!"
    assert got.decode() == "y" * 900
    # Too short to fit (more than 1/8 left unused): a new object.
    cache["tiny"] = b"z" * 700
    keep = got
    del got
    got = cache["tiny"]
    assert got == b"z" * 700 and keep == b"y" * 900


@pytest.mark.skipif(not ON, reason="recycling is off here")
def test_a_hashed_result_is_hashed_again(cache):
    """A dropped result's cached hash does not survive its refill."""
    cache["a"] = b"a" * 50
    cache["b"] = b"b" * 50
    h = hash(cache["a"])
    got = cache["b"]
    assert hash(got) == hash(b"b" * 50) != h
    assert {got: 1}[b"b" * 50] == 1


def test_short_and_long_values_are_not_kept(cache):
    """Values of 0 and 1 byte (CPython's shared objects) and over 16 KiB
    come back as ordinary objects, whether recycling is on or not."""
    cache["e"] = b""
    cache["o"] = b"o"
    # (Copied from a bytearray: a bytes this long is held by reference.)
    cache["big"] = bytearray(b"g" * ((16 << 10) + 1))
    assert cache["e"] == b""
    assert cache["o"] == b"o"
    big = cache["big"]
    fresh = copy(big)
    assert sys.getrefcount(big) == sys.getrefcount(fresh)
    del big
    assert cache["big"] == b"g" * ((16 << 10) + 1)


def test_other_value_types_are_not_affected(cache):
    cache["s"] = "text" * 10
    cache["i"] = 12345
    cache["p"] = {"a": [1, 2]}
    cache["b"] = b"bytes" * 10
    for _ in range(3):
        assert cache["s"] == "text" * 10
        assert cache["i"] == 12345
        assert cache["p"] == {"a": [1, 2]}
        assert cache["b"] == b"bytes" * 10


@pytest.mark.skipif(not ON, reason="recycling is off here")
def test_kept_objects_go_with_the_cache():
    """A result the reader still holds loses the cache's reference when
    the cache goes (nothing leaks)."""
    c = segcache.Cache(heap_size=8 << 20, segment_size=1 << 20)
    c["k"] = b"v" * 100
    got = c["k"]
    before = sys.getrefcount(got)
    del c
    gc.collect()
    assert sys.getrefcount(got) == before - 1
    assert got == b"v" * 100


def test_threads_never_see_each_others_values(cache):
    """Threads reading, keeping some results and dropping the rest: every
    kept result still equals its value at the end (on a GIL build the
    count check and the refill happen under the GIL)."""
    n = 200
    for i in range(n):
        cache[f"k{i}"] = value(i, 64 + (i % 3) * 4)
    errors = []

    def reader(seed):
        rng = random.Random(seed)
        kept = []
        try:
            for _ in range(5000):
                i = rng.randrange(n)
                got = cache[f"k{i}"]
                if got != value(i, 64 + (i % 3) * 4):
                    errors.append((i, got))
                if rng.randrange(8) == 0:
                    kept.append((i, got))
                del got
            for i, got in kept:
                if got != value(i, 64 + (i % 3) * 4):
                    errors.append((i, got))
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=reader, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads)
    assert errors == []


@pytest.mark.skipif(not ON, reason="recycling is off here")
def test_recycling_resumes_after_readers_kept_their_values(cache):
    """Readers keeping every value pause recycling (nothing to refill);
    once they drop values again, reads refill objects again, and the kept
    values are intact."""
    for i in range(300):
        cache[f"k{i}"] = value(i, 80)
    kept = [cache[f"k{i}"] for i in range(300)]
    refilled = 0
    for _ in range(3):
        for i in range(100):
            got = cache[f"k{i}"]
            assert got == value(i, 80)
            # Kept by the cache: one reference more than a fresh object.
            fresh = copy(got)
            refilled += sys.getrefcount(got) == sys.getrefcount(fresh) + 1
            del got, fresh
    # Only the rest of a pause (at most 64 reads) goes without.
    assert 300 - 64 <= refilled < 300
    assert all(kept[i] == value(i, 80) for i in range(300))


@pytest.mark.skipif(not ON, reason="recycling is off here")
@pytest.mark.parametrize("read", ["int key", "get with default", "non-ASCII key"])
def test_the_general_read_path_recycles_too(cache, read):
    """Reads that do not take the hot path (other key types, a default
    argument, a non-ASCII str key) refill objects the same way, and a held
    result stays intact."""
    keys = {"int key": (1, 2), "get with default": ("a", "b"), "non-ASCII key": ("é1", "é2")}[read]
    get = (lambda k: cache.get(k, None)) if read == "get with default" else cache.__getitem__
    cache[keys[0]] = value(1, 200)
    cache[keys[1]] = value(2, 200)
    first = get(keys[0])
    first_id = id(first)
    held = get(keys[1])
    assert held == value(2, 200)
    del first
    again = get(keys[0])
    assert id(again) == first_id and again == value(1, 200)
    assert held == value(2, 200)

"""Tests of segcache.Cache: every method, the mapping protocol, argument
checking and errors, TTLs (moved by a ManualClock, never by sleeping) and
the heap bound under a large fill."""

import copy
import datetime
import math
import sys

import pytest

import segcache


def small_cache(**kwargs):
    """A small cache: 8 MiB of 64 KiB segments, unless overridden."""
    kwargs.setdefault("heap_size", 8 << 20)
    kwargs.setdefault("segment_size", 64 << 10)
    return segcache.Cache(**kwargs)


@pytest.fixture
def clock():
    return segcache.ManualClock()


@pytest.fixture
def cache(clock):
    return small_cache(_clock=clock)


# --- construction -----------------------------------------------------------


def test_defaults():
    c = segcache.Cache()
    s = c.stats()
    assert s["heap_bytes"] == 64 << 20
    assert s["items"] == 0
    assert c.eviction == "merge"
    assert c.shards >= 1 and c.shards & (c.shards - 1) == 0
    assert s["shards"] == c.shards
    assert s["total_bytes"] == (
        s["heap_bytes"] + s["hash_table_bytes"] + s["segment_header_bytes"] + s["admission_bytes"]
    )
    assert "Cache(items=0" in repr(c)


def test_explicit_settings():
    c = segcache.Cache(heap_size=16 << 20, segment_size=128 << 10, hash_power=16, eviction="fifo", shards=4)
    assert c.shards == 4
    assert c.eviction == "fifo"
    # hash_power is the table's starting size (2^16 buckets of 64 B over
    # all shards, plus a few bytes of bookkeeping); it grows only when full.
    table = c.stats()["hash_table_bytes"]
    assert (1 << 16) * 64 <= table <= (1 << 16) * 64 + 4096
    assert segcache.Cache(eviction="RANDOM-FIFO").eviction == "random_fifo"


@pytest.mark.parametrize(
    "kwargs, exc, name",
    [
        ({"heap_size": -1}, ValueError, "heap_size"),
        ({"heap_size": 2 << 10}, ValueError, "heap_size"),  # fewer than 3 segments
        ({"heap_size": "big"}, TypeError, "heap_size"),
        ({"heap_size": 1.5e6}, TypeError, "heap_size"),
        ({"heap_size": True}, TypeError, "heap_size"),
        ({"segment_size": 1000}, ValueError, "segment_size"),
        ({"segment_size": 4 << 20}, ValueError, "segment_size"),
        ({"hash_power": 2}, ValueError, "hash_power"),
        ({"hash_power": 300}, ValueError, "hash_power"),
        ({"eviction": "lru"}, ValueError, "eviction"),
        ({"eviction": 3}, TypeError, "eviction"),
        ({"shards": 3}, ValueError, "shards"),
        ({"shards": 0}, ValueError, "shards"),
        ({"shards": 4096}, ValueError, "shards"),
        ({"_clock": object()}, TypeError, "_clock"),
        ({"serializer": object()}, TypeError, "serializer"),
    ],
)
def test_bad_arguments_name_the_argument(kwargs, exc, name):
    with pytest.raises(exc, match=name):
        segcache.Cache(**kwargs)


def test_unknown_keyword_is_a_type_error():
    with pytest.raises(TypeError):
        segcache.Cache(heap_sise=1 << 20)


def test_default_shards_keep_enough_segments_per_shard():
    # 8 segments in all: one shard, whatever the machine.
    assert segcache.Cache(heap_size=8 << 10, segment_size=1 << 10).shards == 1
    # Without a segment size, 256 or more segments of the heap's default
    # size per shard (fewer cost hits): one shard under 512 MiB.
    for heap in (1 << 20, 8 << 20, 64 << 20):
        c = segcache.Cache(heap_size=heap)
        assert c.shards == 1
        assert c.stats()["segments_free"] >= 256 or heap < 4 << 20
    # The largest value does not depend on the shard count (nor on the
    # machine's CPU count, which picks the default count).
    one = segcache.Cache(heap_size=64 << 20, shards=1)
    four = segcache.Cache(heap_size=64 << 20, shards=4)
    assert one.max_value_len(8) == four.max_value_len(8) > 200 << 10


# --- get / set and key and value types -----------------------------------------------


def test_set_get_and_default(cache):
    assert cache.get("k") is None
    assert cache.get("k", b"dflt") == b"dflt"
    sentinel = object()
    assert cache.get("k", sentinel) is sentinel
    assert cache.set("k", b"v") is None
    assert cache.get("k") == b"v"
    cache.set("k", b"v2")
    assert cache.get("k", b"dflt") == b"v2"
    assert cache.stats()["hits"] == 2
    assert cache.stats()["misses"] == 3


def test_bytes_like_keys_are_one_key_and_not_the_str(cache):
    cache.set(b"key", b"value")
    for same in (b"key", bytearray(b"key"), memoryview(b"xkeyx")[1:4]):
        assert cache.get(same) == b"value"
    assert "key" not in cache, "str and bytes keys differ, as in a dict"
    cache["key"] = "text"
    assert cache[b"key"] == b"value" and cache["key"] == "text"


@pytest.mark.parametrize(
    "value",
    [b"v\x00al", "v\x00al ✓", "", b"", 0, -1, 2**63 - 1, -(2**63), 2**64 + 5, -(10**30), 1.5, None, True,
     False, [1, "a"], {"k": (1, 2)}, {1, 2}, ("t", 1), 10**40 * 1.0],
)
def test_values_come_back_as_they_went_in(cache, value):
    cache.set("k", value)
    out = cache.get("k")
    assert out == value
    assert type(out) is type(value)


@pytest.mark.parametrize("value, back", [(bytearray(b"ba"), b"ba"), (memoryview(b"mv"), b"mv")])
def test_bytes_like_values_come_back_as_bytes(cache, value, back):
    cache["k"] = value
    assert type(cache["k"]) is bytes and cache["k"] == back


def test_unicode_is_kept(cache):
    cache.set("clé", "värde ✓")
    assert cache.get("clé") == "värde ✓"
    assert cache.get("clé".encode()) is None


def test_empty_values_and_the_empty_str_key(cache):
    cache.set("k", b"")
    assert cache.get("k") == b""
    assert "k" in cache
    cache[""] = "empty key"
    assert cache[""] == "empty key" and "" in cache
    assert b"" not in cache


@pytest.mark.parametrize(
    "same",
    [
        (1, 1.0, True),
        (0, 0.0, -0.0, False),
        ((1, "a"), (1.0, "a"), (True, "a")),
        (2**70, float(2**70)),
        (-5, -5.0),
    ],
)
def test_numeric_keys_follow_python_equality(cache, same):
    cache[same[0]] = "v"
    for k in same:
        assert k in cache
        assert cache[k] == "v"
    assert len({k: 1 for k in same}) == 1, "a dict agrees"
    assert len(cache) == 1


def test_distinct_keys_stay_distinct(cache):
    keys = ["1", b"1", 1, 1.5, None, (), (1,), ((1,),), (1, 2), (2, 1), "None", 256, -256, 2**63, -(2**63) - 1,
            (None, None), ("a", b"a"), 10**30, float("inf"), float("-inf")]
    for i, k in enumerate(keys):
        cache[k] = i
    for i, k in enumerate(keys):
        assert cache[k] == i, k
    assert len(cache) == len(keys)


def test_nan_keys_are_one_key(cache):
    cache[float("nan")] = 1
    assert cache[float("nan")] == 1


@pytest.mark.parametrize("bad", [["k"], {"k": 1}, {1}, object(), (1, [2]), frozenset([1])])
def test_unsupported_key_types_are_type_errors(cache, bad):
    for call in (
        lambda: cache.get(bad),
        lambda: cache.set(bad, b"v"),
        lambda: cache.delete(bad),
        lambda: bad in cache,
        lambda: cache[bad],
        lambda: cache.pop(bad, None),
    ):
        with pytest.raises(TypeError, match="unsupported key type"):
            call()


def test_membership_never_raises_for_supported_types(cache):
    for k in (1, 1.0, True, None, "x", b"x", (1, "x"), "x" * 1000, b"x" * 1000, (1,) * 300, 2**5000):
        assert (k in cache) is False
        assert cache.get(k) is None


def test_unpicklable_values_raise_and_change_nothing(cache):
    cache.set("k", "old")
    with pytest.raises(Exception):
        cache.set("k", lambda: 1)
    assert cache.get("k") == "old"


def test_custom_serializer(clock):
    import json

    c = small_cache(serializer=json, _clock=clock)
    assert c.serializer is json
    c["k"] = {"a": [1, 2]}
    assert c["k"] == {"a": [1, 2]}
    c["t"] = (1, 2)
    assert c["t"] == [1, 2], "json has no tuples"
    c["b"], c["s"], c["i"] = b"raw", "text", 7
    assert (c["b"], c["s"], c["i"]) == (b"raw", "text", 7), "bytes, str and int skip the serializer"

    class Reversing:
        @staticmethod
        def dumps(obj):
            return repr(obj)[::-1]

        @staticmethod
        def loads(data):
            import ast

            return ast.literal_eval(data.decode()[::-1])

    c2 = small_cache(serializer=Reversing())
    c2["k"] = [1.5, None]
    assert c2["k"] == [1.5, None]


def test_small_heaps_just_work():
    c = segcache.Cache(heap_size=1 << 20)
    for i in range(2000):
        c[i] = "x" * 100
    s = c.stats()
    assert s["heap_bytes"] == 1 << 20
    assert s["live_bytes"] <= 1 << 20
    assert c[1999] == "x" * 100
    assert c.max_value_len() > 1000
    tiny = segcache.Cache(heap_size=64 << 10)
    tiny["k"] = "v"
    assert tiny["k"] == "v"


def _rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_prefault_makes_the_heap_resident_at_construction():
    heap = 96 << 20
    before = _rss_bytes()
    lazy = segcache.Cache(heap_size=heap, shards=4)
    assert _rss_bytes() - before < heap // 2
    before = _rss_bytes()
    eager = segcache.Cache(heap_size=heap, shards=4, prefault=True)
    assert _rss_bytes() - before >= heap
    eager["k"] = "v"
    assert eager["k"] == "v"
    assert copy.copy(eager)._config()["prefault"] is True
    assert lazy._config()["prefault"] is False
    with pytest.raises(TypeError, match="prefault"):
        segcache.Cache(heap_size=1 << 20, prefault="yes")


def test_oversized_value_is_a_value_error_and_the_old_value_stays(cache):
    cache.set("k", b"old")
    limit = cache.max_value_len(1)
    assert 60_000 < limit < 64 << 10
    with pytest.raises(ValueError, match="too large"):
        cache.set("k", b"x" * (limit + 1))
    assert cache.get("k") == b"old"
    cache.set("k", b"x" * limit)  # exactly the limit fits
    assert cache.get("k") == b"x" * limit


def test_oversized_keys(cache):
    cache.set("k" * segcache.MAX_KEY_LEN, b"fits")
    assert cache.get("k" * segcache.MAX_KEY_LEN) == b"fits"
    with pytest.raises(ValueError, match="longer than"):
        cache.set("k" * (segcache.MAX_KEY_LEN + 1), b"v")
    with pytest.raises(ValueError, match="longer than"):
        cache.set(b"k" * segcache.MAX_KEY_LEN, b"v")
    assert cache.get("k" * (segcache.MAX_KEY_LEN + 1)) is None
    assert "k" * (segcache.MAX_KEY_LEN + 1) not in cache
    assert cache.delete("k" * (segcache.MAX_KEY_LEN + 1)) is False
    assert len(cache) == 1


def test_large_values_round_trip(cache):
    # Above DETACH_AT the write runs with the GIL released.
    big = bytes(range(256)) * 200
    assert len(big) > segcache.DETACH_AT
    cache.set("big", big)
    assert cache.get("big") == big
    assert cache.add("big2", big)
    assert cache.replace("big2", big[::-1])
    assert cache.get("big2") == big[::-1]


# --- conditional writes ---------------------------------------------------------


def test_add(cache):
    assert cache.add("k", b"1") is True
    assert cache.add("k", b"2") is False
    assert cache.get("k") == b"1"


def test_replace(cache):
    assert cache.replace("k", b"1") is False
    assert "k" not in cache
    cache.set("k", b"1")
    assert cache.replace("k", b"2", ttl=5) is True
    assert cache.get("k") == b"2"
    assert cache.ttl("k") == 5


def test_gets_and_cas(cache):
    assert cache.gets("k") is None
    cache.set("k", b"1")
    value, token = cache.gets("k")
    assert value == b"1" and isinstance(token, int)
    assert cache.cas("k", b"2", token) is True
    assert cache.get("k") == b"2"
    assert cache.cas("k", b"3", token) is False, "stale token"
    assert cache.get("k") == b"2"
    _, token2 = cache.gets("k")
    assert token2 != token
    assert cache.cas("k", b"3", token2, ttl=9) is True
    assert cache.ttl("k") == 9
    assert cache.cas("missing", b"x", token2) is False
    assert "missing" not in cache
    with pytest.raises(ValueError, match="cas_token"):
        cache.cas("k", b"x", -1)
    with pytest.raises(TypeError, match="cas_token"):
        cache.cas("k", b"x", "1")


def test_append_prepend(cache):
    assert cache.append("k", b"x") is False
    assert cache.prepend("k", b"x") is False
    cache.set("k", b"mid", ttl=30)
    assert cache.append("k", "-end") is True
    assert cache.prepend("k", bytearray(b"start-")) is True
    assert cache.get("k") == b"start-mid-end"
    assert cache.ttl("k") == 30
    cache.set("s", "text")
    assert cache.append("s", " ✓") is True
    assert cache.get("s") == "text ✓"
    cache.set("obj", [1])
    with pytest.raises(TypeError, match="append"):
        cache.append("obj", b"x")
    assert cache.get("obj") == [1]


def test_str_value_made_invalid_by_append_comes_back_as_bytes(cache):
    # A str value is read back as str only while its bytes are UTF-8.
    cache.set("s", "caf")
    assert cache.append("s", b"\xc3\xa9") is True
    assert cache.get("s") == "café" and cache["s"] == "café"
    for i, bad in enumerate([b"\xff", b"\xc3", b"\xed\xa0\x80", b"\xf4\x90\x80\x80"]):
        key = f"bad{i}"
        cache.set(key, "ok")
        assert cache.append(key, bad) is True
        assert cache.get(key) == b"ok" + bad, bad
        assert cache.pop(key) == b"ok" + bad, bad
    cache.set("empty", "")
    assert cache.get("empty") == ""
    # The ASCII test reads 8 bytes at a time, then the rest one by one:
    # a non-ASCII or invalid byte in either part.
    for text in ["abcdefgh", "abcdefghé", "é" + "a" * 20, "a" * 17 + "€" + "b" * 5, "x" * 1000 + "✓"]:
        cache.set("t", text)
        assert cache.get("t") == text
    for at in [0, 7, 8, 9, 16, 23]:
        data = bytearray(b"a" * 24)
        data[at] = 0xFF
        cache.set("t", "")
        assert cache.append("t", bytes(data)) is True
        assert cache.get("t") == bytes(data), at


def test_incr_decr(cache):
    with pytest.raises(KeyError):
        cache.incr("n")
    with pytest.raises(KeyError):
        cache.decr("n")
    cache.set("n", b"41")
    assert cache.incr("n") == 42
    assert cache.incr("n", 8) == 50
    assert cache.decr("n", 7) == 43
    assert cache.decr("n", 100) == 0, "decr stops at zero"
    assert cache.get("n") == b"0", "a bytes value stays bytes"
    cache.set("i", 41)
    assert cache.incr("i") == 42
    assert cache.get("i") == 42, "an int value stays an int"
    cache.set("n", str(2**64 - 1))
    assert cache.incr("n") == 0, "incr wraps at 2**64"
    assert cache.get("n") == "0"
    cache.set("big", 2**64 - 2)
    assert cache.incr("big") == 2**64 - 1
    assert cache.get("big") == 2**64 - 1
    cache.set("s", b"abc")
    with pytest.raises(ValueError, match="not a decimal"):
        cache.incr("s")
    assert cache.get("s") == b"abc"
    with pytest.raises(ValueError, match="delta"):
        cache.incr("n", -1)
    with pytest.raises(TypeError, match="delta"):
        cache.incr("n", 1.5)


def test_delete(cache):
    assert cache.delete("k") is False
    cache.set("k", b"v")
    assert cache.delete("k") is True
    assert cache.delete("k") is False
    assert cache.get("k") is None


def test_get_many_set_many(cache):
    cache.set_many({"a": b"1", b"b": "2", "c": bytearray(b"3"), 4: [4]})
    keys = ["a", b"b", "c", "missing", 4.0]
    got = cache.get_many(keys)
    assert got == {"a": b"1", b"b": "2", "c": b"3", 4.0: [4]}
    assert cache.get_many(k for k in ["a"]) == {"a": b"1"}
    assert cache.get_many([]) == {}

    class Pairs:
        def items(self):
            return [("x", b"9")]

    cache.set_many(Pairs(), ttl=3)
    assert cache.ttl("x") == 3
    class BadPairs:
        def items(self):
            return [("y", 1), ((1, []), 2)]

    with pytest.raises(TypeError, match="unsupported key type"):
        cache.set_many(BadPairs())
    assert "y" not in cache, "keys are checked before anything is written"
    with pytest.raises(ValueError, match="too large"):
        cache.set_many({"p": b"1", "q": b"x" * (1 << 20)})
    assert cache.get("p") == b"1", "pairs before the failure stay written"
    with pytest.raises(TypeError, match="unsupported key type"):
        cache.get_many(["a", []])


def test_len_clear_and_expire_counts(cache, clock):
    for i in range(100):
        cache.set(f"k{i}", b"v", ttl=10 if i % 2 else None)
    assert len(cache) == 100
    assert cache.expire() == 0
    clock.advance(10)
    assert cache.expire() == 50
    assert len(cache) == 50
    assert cache.stats()["expirations"] == 50
    cache.clear()
    assert len(cache) == 0
    assert cache.stats()["live_bytes"] == 0


def test_stats_counts(cache):
    cache.set("a", b"12345")
    cache.get("a")
    cache.get("b")
    s = cache.stats()
    assert (s["items"], s["hits"], s["misses"]) == (1, 1, 1)
    assert s["live_bytes"] >= 6
    assert all(isinstance(v, int) for v in s.values())


# --- mapping protocol ------------------------------------------------------------


def test_mapping_protocol(cache):
    cache["k"] = b"v"
    assert cache["k"] == b"v"
    assert "k" in cache
    assert b"k" not in cache
    assert "other" not in cache
    with pytest.raises(KeyError) as e:
        cache["other"]
    assert e.value.args == ("other",)
    del cache["k"]
    assert "k" not in cache
    with pytest.raises(KeyError):
        del cache["k"]
    assert len(cache) == 0
    assert bool(cache) is True, "a cache is truthy even when empty"
    with pytest.raises(ValueError):
        cache["x"] = b"x" * (1 << 20)
    assert "x" not in cache


# --- TTLs -------------------------------------------------------------------------


def test_ttl_expiry_with_manual_clock(cache, clock):
    cache.set("short", b"1", ttl=5)
    cache.set("long", b"2", ttl=datetime.timedelta(minutes=1))
    cache.set("forever", b"3")
    cache.set("zero", b"4", ttl=0)
    assert cache.ttl("short") == 5
    assert cache.ttl("long") == 60
    assert cache.ttl("forever") is None
    assert cache.ttl("zero") is None
    clock.advance(4)
    assert cache.get("short") == b"1"
    assert cache.ttl("short") == 1
    clock.advance(1)
    assert cache.get("short") is None, "expires at its deadline"
    assert "short" not in cache
    with pytest.raises(KeyError):
        cache.ttl("short")
    assert cache.get("long") == b"2"
    clock.advance(datetime.timedelta(seconds=55))
    assert cache.get("long") is None
    clock.advance(10**6)
    assert cache.get("forever") == b"3"
    assert cache.get("zero") == b"4"
    assert clock.now == 5 + 55 + 10**6


def test_float_ttls_round_up_to_whole_seconds(clock):
    # Separate caches: items of nearby TTLs share segments, and a segment
    # expires at its earliest deadline, so one item's TTL can read lower.
    a, b = small_cache(_clock=clock), small_cache(_clock=clock)
    a.set("f", b"v", ttl=2.1)
    assert a.ttl("f") == 3, "fractions round up to a whole second"
    b.set("half", b"v", ttl=0.5)
    assert b.ttl("half") == 1, "a positive TTL under 1 s counts as 1 s"
    clock.advance(1)
    assert "half" not in b
    assert "f" in a
    clock.advance(2)
    assert "f" not in a


@pytest.mark.parametrize("bad", [-1, -0.5, datetime.timedelta(seconds=-1), math.nan])
def test_negative_ttl_is_a_value_error(cache, bad):
    cache.set("k", b"old")
    with pytest.raises(ValueError, match="ttl"):
        cache.set("k", b"new", ttl=bad)
    with pytest.raises(ValueError, match="ttl"):
        cache.touch("k", bad)
    assert cache.get("k") == b"old"
    assert cache.ttl("k") is None


def test_ttl_out_of_range_and_bad_types(cache):
    cache.set("k", b"v", ttl=segcache.MAX_TTL)
    assert cache.ttl("k") == segcache.MAX_TTL
    with pytest.raises(ValueError, match="ttl"):
        cache.set("k", b"v", ttl=segcache.MAX_TTL + 1)
    with pytest.raises(ValueError, match="ttl"):
        cache.set("k", b"v", ttl=math.inf)
    with pytest.raises(ValueError, match="ttl"):
        cache.set("k", b"v", ttl=10**40)
    for bad in ("10", True, [1]):
        with pytest.raises(TypeError, match="ttl"):
            cache.set("k", b"v", ttl=bad)


def test_touch(cache, clock):
    assert cache.touch("k", 10) is False
    cache.set("k", b"v", ttl=2)
    assert cache.touch("k", 10) is True
    clock.advance(5)
    assert cache.get("k") == b"v"
    assert cache.ttl("k") == 5
    assert cache.touch("k", None) is True
    assert cache.ttl("k") is None
    clock.advance(100)
    assert cache.get("k") == b"v"


def test_flush_now_and_delayed(cache, clock):
    cache.set("a", b"1")
    cache.flush()
    assert "a" not in cache and len(cache) == 0
    cache.set("b", b"2")
    cache.flush(delay=10)
    clock.advance(9)
    assert cache.get("b") == b"2"
    clock.advance(1)
    assert cache.get("b") is None
    cache.set("c", b"3")
    assert cache.get("c") == b"3", "items stored after the flush time stay"
    with pytest.raises(ValueError, match="delay"):
        cache.flush(-1)


def test_manual_clock_api():
    clock = segcache.ManualClock()
    assert clock.now == 0
    clock.advance(2.7)
    assert clock.now == 2, "fractions are dropped"
    clock.set(10)
    clock.set(3)
    assert clock.now == 10, "never goes backwards"
    with pytest.raises(ValueError):
        clock.advance(-1)
    with pytest.raises(TypeError):
        clock.advance("1")
    assert repr(clock) == "ManualClock(now=10)"


def test_a_shared_clock_moves_several_caches(clock):
    a, b = small_cache(_clock=clock), small_cache(_clock=clock)
    a.set("k", b"v", ttl=1)
    b.set("k", b"v", ttl=1)
    clock.advance(1)
    assert a.get("k") is None and b.get("k") is None


# --- memory bound and eviction -----------------------------------------------------


@pytest.mark.parametrize("eviction", ["merge", "fifo", "random", "util"])
def test_large_fill_stays_within_the_heap(eviction):
    heap = 4 << 20
    c = segcache.Cache(heap_size=heap, segment_size=64 << 10, eviction=eviction, shards=2)
    value = b"v" * 200
    written = 0
    for i in range(80_000):  # 16 MB of values into a 4 MiB heap
        c.set(f"key:{i}", value)
        written += len(value)
    s = c.stats()
    assert written > 3 * heap
    assert s["live_bytes"] <= s["heap_bytes"] == heap
    assert s["evictions"] > 0
    assert 0 < s["items"] < 80_000
    assert len(c) == s["items"]
    # The most recent writes are still readable.
    assert c.get("key:79999") == value


def test_no_eviction_raises_cache_full_and_keeps_old_values():
    c = segcache.Cache(heap_size=256 << 10, segment_size=64 << 10, eviction="none", shards=1)
    c.set("first", b"keep")
    with pytest.raises(segcache.CacheFullError) as e:
        for i in range(100_000):
            c.set(f"key:{i}", b"v" * 500)
    assert isinstance(e.value, MemoryError)
    assert c.get("first") == b"keep"
    assert c.stats()["live_bytes"] <= 256 << 10


def test_typing_files_are_installed():
    import importlib.resources

    files = importlib.resources.files("segcache")
    assert files.joinpath("py.typed").is_file()
    assert files.joinpath("_segcache.pyi").is_file()

"""The hot paths read a compact ASCII str key's characters and a bytes
value's contents straight from the object's memory once an import-time
probe has checked CPython's layout (segcache._segcache._direct_reads()),
and use the C API for every other str. These tests pin both: the direct
reads are on where the layout is known, and every kind of key and value
comes back right through get, c[k], in, del, iteration, set and delete,
whichever path it takes."""

import collections
import enum
import sys
import sysconfig

import pytest

import segcache
from segcache import _segcache


@pytest.fixture
def clock():
    return segcache.ManualClock()


@pytest.fixture
def cache(clock):
    return segcache.Cache(heap_size=8 << 20, segment_size=1 << 20, _clock=clock)


FREE_THREADED_BUILD = bool(sysconfig.get_config_var("Py_GIL_DISABLED"))
KNOWN = (3, 14) if FREE_THREADED_BUILD else (3, 10)


@pytest.mark.skipif(
    sys.implementation.name != "cpython" or not (KNOWN <= sys.version_info[:2] <= (3, 14)),
    reason="the layouts are verified here on CPython 3.10-3.14 and free-threaded 3.14t",
)
def test_direct_reads_are_on_where_the_layout_is_known():
    assert _segcache._direct_reads() == (True, True)


def made(s):
    """An equal str built at run time (not a literal: no interning)."""
    return "".join(list(s))


ASCII_KEYS = ["k", "key:1", "a" * 7, "b" * 8, "c" * 9, "d" * 63, "e" * 64, "f" * 250, "nul\x00in", "~" * 17]
OTHER_KEYS = ["é", "café", "€uro", "😀", "mixed ascii then ü", "ÿ" * 125, "\u0100" * 83]


@pytest.mark.parametrize("key", ASCII_KEYS + OTHER_KEYS)
def test_str_keys_round_trip_through_every_entry_point(cache, key):
    other = made(key)
    assert other == key
    cache[key] = b"v1"
    assert cache[other] == b"v1"
    assert cache.get(other) == b"v1"
    assert other in cache
    assert list(cache.keys()) == [key]
    cache.set(other, "v2")
    assert cache[key] == "v2"
    assert cache.delete(other) is True
    assert key not in cache
    assert cache.get(key, 5) == 5
    cache[other] = b"v3"
    del cache[key]
    with pytest.raises(KeyError):
        cache[other]
    with pytest.raises(KeyError):
        del cache[other]
    assert len(cache) == 0


def test_distinct_str_keys_stay_distinct(cache):
    keys = ASCII_KEYS + OTHER_KEYS + ["K", "key:2", "a" * 6, "f" * 249, "nul\x00im", "e", "cafe"]
    for i, k in enumerate(keys):
        cache[k] = str(i)
    for i, k in enumerate(keys):
        assert cache[made(k)] == str(i), k
    assert sorted(cache.keys()) == sorted(keys)


def test_a_str_key_is_not_its_utf8_bytes(cache):
    for key in ["abc", "café"]:
        cache[key] = b"str"
        cache[key.encode()] = b"bytes"
        assert cache[key] == b"str"
        assert cache[key.encode()] == b"bytes"


def test_the_longest_str_key_and_one_byte_more(cache):
    longest = "x" * segcache.MAX_KEY_LEN
    cache[longest] = b"v"
    assert cache[made(longest)] == b"v"
    too_long = longest + "x"
    assert cache.get(too_long) is None
    assert too_long not in cache
    with pytest.raises(ValueError):
        cache[too_long] = b"v"
    with pytest.raises(ValueError):
        cache.set(too_long, b"v")
    with pytest.raises(KeyError):
        del cache[too_long]
    assert cache.delete(too_long) is False
    # Non-ASCII: the limit is in UTF-8 bytes, not characters.
    two_byte = "é" * (segcache.MAX_KEY_LEN // 2)
    cache[two_byte] = b"w"
    assert cache[made(two_byte)] == b"w"
    with pytest.raises(ValueError):
        cache[two_byte + "é"] = b"w"


def test_str_keys_with_lone_surrogates_raise_and_change_nothing(cache):
    bad = "a\ud800"
    with pytest.raises(UnicodeEncodeError):
        cache[bad] = b"v"
    with pytest.raises(UnicodeEncodeError):
        cache.get(bad)
    assert len(cache) == 0


class Sub(str):
    pass


class Color(str, enum.Enum):
    RED = "red"


def test_str_subclass_keys_are_the_str_they_equal(cache):
    cache["abc"] = b"1"
    assert cache[Sub("abc")] == b"1"
    assert Sub("abc") in cache
    cache[Sub("xyz")] = b"2"
    assert cache["xyz"] == b"2"
    cache[Color.RED] = b"3"
    assert cache["red"] == b"3" and cache.get(Color.RED) == b"3"
    assert sorted(cache.keys()) == ["abc", "red", "xyz"]
    for k in list(cache.keys()):
        assert cache[k] is not None  # every key iteration yields is readable
    del cache[Sub("abc")]
    assert "abc" not in cache
    # bytes subclasses are the bytes they equal, as before.
    cache[b"raw"] = b"4"
    assert cache[B(b"raw")] == b"4"
    # Inside tuples too, as a dict sees them.
    cache[("a", 1)] = b"t"
    assert cache[(Sub("a"), 1)] == b"t"


class Level(enum.IntEnum):
    LOW = 1


class Real(float):
    pass


Point = collections.namedtuple("Point", "x y")


def test_other_subclass_keys_are_the_values_they_equal(cache):
    cache[1] = b"i"
    assert cache[Level.LOW] == b"i" and cache[Real(1.0)] == b"i"
    cache[Real(2.5)] = b"f"
    assert cache[2.5] == b"f"
    cache[(1, "a")] = b"t"
    assert cache[Point(1, "a")] == b"t"
    assert sorted(map(repr, cache.keys())) == ["(1, 'a')", "1", "2.5"]


@pytest.mark.parametrize("n", [0, 1, 7, 8, 63, 64, 65, 1024, 1033, segcache.DETACH_AT - 1, segcache.DETACH_AT, 300_000])
def test_bytes_values_of_every_size_round_trip(cache, n):
    value = bytes(range(256)) * (n // 256) + bytes(range(n % 256))
    assert len(value) == n
    cache["k"] = value
    got = cache["k"]
    assert type(got) is bytes and got == value
    cache.set("k2", value)
    assert cache.get("k2") == value


@pytest.mark.parametrize("value", ["", "a", "ascii text", "é", "café" * 100, "😀" * 10, "x" * 5000, "\x00"])
def test_str_values_come_back_as_str(cache, value):
    cache["k"] = value
    got = cache["k"]
    assert type(got) is str and got == value
    cache.set("k", made(value) if value else value)
    assert cache.get("k") == value


class B(bytes):
    pass


def test_subclass_values_keep_their_type(cache):
    cache["b"] = B(b"sub")
    cache["s"] = Sub("sub")
    assert type(cache["b"]) is B and cache["b"] == b"sub"
    assert type(cache["s"]) is Sub and cache["s"] == "sub"


def test_expired_items_are_misses_on_the_fast_paths(cache, clock):
    cache.set("k", b"v", ttl=5)
    cache.set("é", "v", ttl=5)
    clock.advance(5)
    assert cache.get("k") is None and cache.get("é") is None
    assert "k" not in cache
    with pytest.raises(KeyError):
        cache["k"]
    with pytest.raises(KeyError):
        del cache["é"]
    assert cache.delete("k") is False


def test_oversized_values_raise_and_keep_the_old_value(cache):
    cache["k"] = b"old"
    with pytest.raises(ValueError):
        cache["k"] = b"x" * (cache.max_value_len(1) + 1)
    with pytest.raises(ValueError):
        cache.set("k", "y" * (cache.max_value_len(1) + 1))
    assert cache["k"] == b"old"


def outcome(fn):
    try:
        return ("ok", fn())
    except Exception as e:  # noqa: BLE001 - the type is the outcome
        return ("raised", type(e))


@pytest.mark.parametrize("ttl", [None, 0, 1, 5, 3600, 2**31, 2**62, 2**63 - 1, 2**70, -1, -(2**70), True, 1.5, 0.0])
def test_set_ttls_on_the_shortcut_match_the_general_path(clock, ttl):
    # A plain str key takes the shortcut; a tuple key the general path:
    # every TTL must end the same way on both, by keyword and positionally.
    for call in ("keyword", "positional"):
        c = segcache.Cache(heap_size=8 << 20, segment_size=1 << 20, _clock=clock)
        results = []
        for key in ["plain", ("general",)]:
            c[key] = b"old"
            if call == "keyword":
                done = outcome(lambda: c.set(key, b"new", ttl=ttl))
            else:
                done = outcome(lambda: c.set(key, b"new", ttl))
            results.append((done, c[key], outcome(lambda: c.ttl(key))))
        assert results[0] == results[1], (call, ttl, results)


def test_a_plain_ttl_expires_on_time(cache, clock):
    cache.set("k", b"v", ttl=5)
    cache.set("p", b"v", 5)
    cache.set("never", b"v", ttl=0)
    clock.advance(4)
    assert cache.get("k") == b"v" and cache.get("p") == b"v"
    clock.advance(1)
    assert cache.get("k") is None and cache.get("p") is None
    assert cache.get("never") == b"v"

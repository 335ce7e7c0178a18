"""Tests of the @segcache.cached decorator: hits skip the call, TTLs expire
(via a ManualClock), bytes/str round-trip, serializers (pickle, json),
custom keys, and what it refuses."""

import datetime
import json
import pickle

import pytest

import segcache


@pytest.fixture
def clock():
    return segcache.ManualClock()


@pytest.fixture
def cache(clock):
    return segcache.Cache(heap_size=8 << 20, segment_size=64 << 10, _clock=clock)


def counting(fn):
    calls = []

    def wrapped(*args, **kwargs):
        calls.append((args, kwargs))
        return fn(*args, **kwargs)

    wrapped.__qualname__ = fn.__qualname__
    wrapped.__module__ = fn.__module__
    return wrapped, calls


def test_str_results_are_memoized_and_come_back_as_str(cache):
    fn, calls = counting(lambda name, punct="!": f"hello {name}{punct}")
    greet = segcache.cached(cache)(fn)
    assert greet("ada") == "hello ada!"
    assert greet("ada") == "hello ada!"
    assert greet("bob") == "hello bob!"
    assert greet("ada", punct="?") == "hello ada?"
    assert greet("ada", punct="?") == "hello ada?"
    assert len(calls) == 3
    assert type(greet("ada")) is str


def test_bytes_results(cache):
    fn, calls = counting(lambda n: bytes([n]) * n)
    f = segcache.cached(cache)(fn)
    assert f(3) == b"\x03\x03\x03"
    assert f(3) == b"\x03\x03\x03"
    assert len(calls) == 1
    g = segcache.cached(cache, key=lambda n: f"g{n}")(lambda n: bytearray(b"ba"))
    assert g(1) == bytearray(b"ba")
    assert g(1) == b"ba" and type(g(1)) is bytes


def test_ttl_expires_results(cache, clock):
    fn, calls = counting(lambda: "v")
    f = segcache.cached(cache, ttl=datetime.timedelta(seconds=30))(fn)
    f()
    clock.advance(29)
    f()
    assert len(calls) == 1
    clock.advance(1)
    f()
    assert len(calls) == 2


@pytest.mark.parametrize("serializer", [pickle, json])
def test_serializers_cache_any_object(cache, serializer):
    fn, calls = counting(lambda user: {"id": user, "tags": ["a", "b"]})
    f = segcache.cached(cache, ttl=60, serializer=serializer)(fn)
    assert f(7) == {"id": 7, "tags": ["a", "b"]}
    assert f(7) == {"id": 7, "tags": ["a", "b"]}
    assert len(calls) == 1
    none_fn, none_calls = counting(lambda: None)
    g = segcache.cached(cache, serializer=serializer)(none_fn)
    assert g() is None and g() is None
    assert len(none_calls) == 1, "None results are cached too"


def test_custom_key_and_cache_key_helper(cache):
    fn, calls = counting(lambda obj: f"user {obj['id']}")
    f = segcache.cached(cache, key=lambda obj: f"user:{obj['id']}")(fn)
    assert f({"id": 1}) == "user 1"
    assert f({"id": 1, "ignored": True}) == "user 1"
    assert len(calls) == 1
    assert f.cache is cache
    assert f.cache_key({"id": 5}) == "user:5"
    assert cache.get("user:1") == b"user 1"


def test_default_key_refuses_arguments_without_a_value_repr(cache):
    f = segcache.cached(cache)(lambda obj: "x")
    with pytest.raises(TypeError, match="key="):
        f(object())
    with pytest.raises(TypeError, match="key="):
        f([1, 2])
    assert f((1, "a", None)) == "x", "tuples of simple values are fine"


def test_long_default_keys_are_hashed(cache):
    fn, calls = counting(lambda s: s[:3])
    f = segcache.cached(cache)(fn)
    a, b = "a" * 1000, "a" * 999 + "b"
    assert len(f.cache_key(a).encode()) <= segcache.MAX_KEY_LEN
    assert f.cache_key(a) != f.cache_key(b)
    f(a), f(a), f(b)
    assert len(calls) == 2


def test_functions_with_the_same_arguments_do_not_share_entries(cache):
    @segcache.cached(cache)
    def one(x):
        return "one"

    @segcache.cached(cache)
    def two(x):
        return "two"

    assert (one(1), two(1), one(1), two(1)) == ("one", "two", "one", "two")


def test_unserializable_results_without_serializer_raise(cache):
    f = segcache.cached(cache)(lambda: 42)
    with pytest.raises(TypeError, match="serializer"):
        f()


def test_results_too_large_are_returned_uncached(cache):
    fn, calls = counting(lambda: b"x" * (1 << 20))
    f = segcache.cached(cache)(fn)
    assert len(f()) == 1 << 20
    assert len(f()) == 1 << 20
    assert len(calls) == 2


def test_bad_decorator_arguments(cache):
    with pytest.raises(TypeError):
        segcache.cached({})
    with pytest.raises(ValueError, match="ttl"):
        segcache.cached(cache, ttl=-5)
    with pytest.raises(TypeError, match="ttl"):
        segcache.cached(cache, ttl="5")
    with pytest.raises(TypeError, match="serializer"):
        segcache.cached(cache, serializer=object())
    with pytest.raises(TypeError, match="key"):
        segcache.cached(cache, key="k")
    f = segcache.cached(cache, key=lambda: "")(lambda: "x")
    with pytest.raises(ValueError, match="key"):
        f()


def test_functools_wraps_keeps_metadata(cache):
    @segcache.cached(cache)
    def documented(x):
        """Docs."""
        return "x"

    assert documented.__name__ == "documented"
    assert documented.__doc__ == "Docs."

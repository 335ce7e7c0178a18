"""Tests of the @segcache.cached decorator: hits skip the call, TTLs expire
(via a ManualClock), bytes/str round-trip, serializers (pickle, json),
custom keys, and what it refuses."""

import datetime
import json
import pickle
import sys

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


def test_any_result_type_round_trips(cache):
    results = {1: b"\x03", 2: 7, 3: {"a": [1]}, 4: None, 5: (1, "x")}
    fn, calls = counting(lambda n: results[n])
    f = segcache.cached(cache)(fn)
    for n, r in results.items():
        assert f(n) == r
        assert f(n) == r and type(f(n)) is type(r)
    assert len(calls) == len(results), "None results are cached too"


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


def test_cache_serializer_is_used(clock):
    c = segcache.Cache(heap_size=1 << 20, serializer=json, _clock=clock)
    fn, calls = counting(lambda user: {"id": user, "tags": ("a", "b")})
    f = segcache.cached(c, ttl=60)(fn)
    assert f(7) == {"id": 7, "tags": ("a", "b")}
    assert f(7) == {"id": 7, "tags": ["a", "b"]}, "came back through json"
    assert len(calls) == 1


def test_custom_key_and_cache_key_helper(cache):
    fn, calls = counting(lambda obj: f"user {obj['id']}")
    f = segcache.cached(cache, key=lambda obj: obj["id"])(fn)
    assert f({"id": 1}) == "user 1"
    assert f({"id": 1, "ignored": True}) == "user 1"
    assert len(calls) == 1
    assert f.cache is cache
    name = f"{fn.__module__}.{fn.__qualname__}"
    assert f.cache_key({"id": 5}) == (name, 5)
    assert cache.get((name, 1)) == "user 1"
    with pytest.raises(TypeError, match="cannot build a cache key"):
        segcache.cached(cache, key=lambda obj: obj)(fn)({"id": 1})


def test_default_key_is_a_tuple_of_the_arguments(cache):
    @segcache.cached(cache)
    def f(a, b=0, *, c=None):
        return [a, b, c]

    name = f"{f.__module__}.{f.__qualname__}"
    assert f.cache_key(1, 2) == (name, (1, 2))
    assert f.cache_key(1, c="x", b=2) == (name, (1,), (("b", 2), ("c", "x")))
    assert f(1, c="x", b=2) == [1, 2, "x"]
    assert cache[(name, (1,), (("b", 2), ("c", "x")))] == [1, 2, "x"]
    assert f(1, b=2, c="x") == [1, 2, "x"]
    assert f.cache_info().hits == 1, "keyword order does not matter"


def test_equal_arguments_share_an_entry_unless_typed(cache):
    fn, calls = counting(lambda x: repr(x))
    f = segcache.cached(cache)(fn)
    assert f(1) == "1" and f(1.0) == "1" and f(True) == "1"
    assert len(calls) == 1
    g_fn, g_calls = counting(lambda x: repr(x))
    g_fn.__qualname__ = "typed_g"
    g = segcache.cached(cache, typed=True)(g_fn)
    assert (g(1), g(1.0), g(True), g(1)) == ("1", "1.0", "True", "1")
    assert len(g_calls) == 3
    assert repr(g.cache_key(True)) != repr(g.cache_key(1))
    assert repr(f.cache_key(True)) == repr(f.cache_key(1))


def test_default_key_refuses_unsupported_arguments(cache):
    f = segcache.cached(cache)(lambda obj: "x")
    with pytest.raises(TypeError, match="key="):
        f(object())
    with pytest.raises(TypeError, match="key="):
        f([1, 2])
    with pytest.raises(TypeError, match="key="):
        f(x=[1, 2])
    assert f((1, "a", None)) == "x", "tuples of simple values are fine"


def test_long_keys_are_hashed(cache):
    fn, calls = counting(lambda s: s[:3])
    f = segcache.cached(cache)(fn)
    a, b = "a" * 1000, "a" * 999 + "b"
    ka, kb = f.cache_key(a), f.cache_key(b)
    assert ka[1][0] == "#blake2b" and ka != kb
    f(a), f(a), f(b)
    assert len(calls) == 2
    assert f(("x",) * 400) == ("x",) * 3


def test_functions_with_the_same_arguments_do_not_share_entries(cache):
    @segcache.cached(cache)
    def one(x):
        return "one"

    @segcache.cached(cache)
    def two(x):
        return "two"

    assert (one(1), two(1), one(1), two(1)) == ("one", "two", "one", "two")


def test_results_too_large_are_returned_uncached(cache):
    fn, calls = counting(lambda: b"x" * (1 << 20))
    f = segcache.cached(cache)(fn)
    assert len(f()) == 1 << 20
    assert len(f()) == 1 << 20
    assert len(calls) == 2


def test_exceptions_propagate_and_are_not_cached(cache):
    attempts = []

    @segcache.cached(cache)
    def flaky(x):
        attempts.append(x)
        if len(attempts) == 1:
            raise ValueError("first call fails")
        return x

    with pytest.raises(ValueError, match="first call"):
        flaky(1)
    assert flaky(1) == 1 and flaky(1) == 1
    assert attempts == [1, 1]


def test_bad_decorator_arguments(cache):
    with pytest.raises(TypeError):
        segcache.cached({})
    with pytest.raises(ValueError, match="ttl"):
        segcache.cached(cache, ttl=-5)
    with pytest.raises(TypeError, match="ttl"):
        segcache.cached(cache, ttl="5")
    with pytest.raises(TypeError, match="key"):
        segcache.cached(cache, key="k")
    with pytest.raises(TypeError, match="typed"):
        segcache.cached(cache, typed=1)
    with pytest.raises(TypeError, match="callable"):
        segcache.cached(cache)(5)


def test_functools_wraps_keeps_metadata(cache):
    @segcache.cached(cache)
    def documented(x):
        """Docs."""
        return "x"

    assert documented.__name__ == "documented"
    assert documented.__doc__ == "Docs."
    assert documented.__wrapped__(1) == "x"
    assert "documented" in repr(documented)


def test_methods_share_results_across_instances_without_self_in_the_key(cache):
    calls = []

    class Repo:
        def __init__(self, scale):
            self.scale = scale

        @segcache.cached(cache)
        def load(self, n):
            calls.append(n)
            return n * self.scale

        @segcache.cached(cache, key=lambda self, n: (self.scale, n))
        def per_instance(self, n):
            return n * self.scale

    a, b = Repo(2), Repo(3)
    assert a.load(5) == 10 and b.load(5) == 10, "self is not part of the key"
    assert calls == [5]
    assert a.per_instance(5) == 10 and b.per_instance(5) == 15
    assert a.load.__self__ is a
    assert Repo.load.cache_key(5) == a.load.cache_key(5)
    assert a.load.cache_info().hits == 1


def test_cache_info_and_cache_clear(cache):
    fn, calls = counting(lambda x: x * 2)
    f = segcache.cached(cache)(fn)
    cache["other"] = "stays"
    for x in (1, 2, 1, 1):
        f(x)
    info = f.cache_info()
    assert (info.hits, info.misses, info.maxsize, info.currsize) == (2, 2, None, 2)
    f.cache_clear()
    assert f.cache_info() == (0, 0, None, 0)
    assert cache["other"] == "stays"
    f(1)
    assert len(calls) == 3


def test_single_flight_across_threads(cache):
    import threading
    import time

    started = threading.Event()
    calls = []

    @segcache.cached(cache)
    def slow(x):
        calls.append(x)
        started.set()
        time.sleep(0.2)
        return x * 10

    results = []
    threads = [threading.Thread(target=lambda: results.append(slow(4))) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert results == [40] * 8
    assert calls == [4], "8 threads, one call"


def test_async_functions(cache):
    import asyncio

    calls = []

    @segcache.cached(cache, ttl=60)
    async def fetch(x):
        calls.append(x)
        await asyncio.sleep(0.05)
        return {"x": x}

    async def main():
        first = await asyncio.gather(*(fetch(1) for _ in range(10)))
        again = await fetch(1)
        other = await fetch(2)
        return first, again, other

    first, again, other = asyncio.run(main())
    assert first == [{"x": 1}] * 10 and again == {"x": 1} and other == {"x": 2}
    assert calls == [1, 2], "concurrent awaits of one key ran it once"
    import inspect

    assert inspect.iscoroutinefunction(fetch) or sys.version_info < (3, 12)
    info = fetch.cache_info()
    assert info.currsize == 2 and info.hits >= 1


def test_async_exceptions_let_the_next_call_retry(cache):
    import asyncio

    attempts = []

    @segcache.cached(cache)
    async def flaky():
        attempts.append(1)
        await asyncio.sleep(0.01)
        if len(attempts) == 1:
            raise KeyError("boom")
        return "ok"

    async def main():
        got = await asyncio.gather(flaky(), flaky(), return_exceptions=True)
        return got, await flaky()

    got, last = asyncio.run(main())
    assert isinstance(got[0], KeyError)
    assert last == "ok"


def test_async_methods(cache):
    import asyncio

    class Svc:
        @segcache.cached(cache)
        async def get(self, n):
            return n + 1

    assert asyncio.run(Svc().get(1)) == 2
    assert asyncio.run(Svc().get(1)) == 2
    assert Svc.get.cache_info().hits == 1


def test_async_cancelled_computation_lets_a_waiter_compute(cache):
    import asyncio

    attempts = []

    @segcache.cached(cache)
    async def slow(x):
        attempts.append(x)
        await asyncio.sleep(0.2 if len(attempts) == 1 else 0)
        return x

    async def main():
        leader = asyncio.ensure_future(slow(1))
        await asyncio.sleep(0.05)
        waiter = asyncio.ensure_future(slow(1))
        await asyncio.sleep(0.05)
        leader.cancel()
        with pytest.raises(asyncio.CancelledError):
            await leader
        return await waiter

    assert asyncio.run(main()) == 1
    assert attempts == [1, 1]

"""Cache.get_or_set: one factory call per missing key across threads
(single-flight), exceptions propagate to the caller that ran the factory and
let the next caller retry, recursion is an error instead of a deadlock."""

import threading
import time

import pytest

import segcache


@pytest.fixture
def cache():
    return segcache.Cache(heap_size=4 << 20, segment_size=64 << 10, shards=2)


def test_hit_skips_the_factory(cache):
    cache["k"] = "v"
    assert cache.get_or_set("k", lambda: pytest.fail("called")) == "v"


def test_miss_stores_the_result_with_a_ttl():
    clock = segcache.ManualClock()
    c = segcache.Cache(heap_size=1 << 20, _clock=clock)
    assert c.get_or_set(("user", 1), lambda: {"n": 1}, ttl=5) == {"n": 1}
    assert c[("user", 1)] == {"n": 1}
    assert c.ttl(("user", 1)) == 5
    clock.advance(5)
    assert c.get_or_set(("user", 1), lambda: "again") == "again"


def test_threads_run_the_factory_once(cache):
    calls = []
    barrier = threading.Barrier(8)

    def factory():
        calls.append(1)
        time.sleep(0.2)
        return ["computed"]

    results = []

    def worker():
        barrier.wait()
        results.append(cache.get_or_set("hot", factory))

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert len(calls) == 1
    assert results == [["computed"]] * 8
    assert cache._in_flight == 0


def test_a_failing_factory_raises_for_its_caller_and_the_next_retries(cache):
    leader_in = threading.Event()
    release = threading.Event()
    outcomes = {}

    def failing():
        leader_in.set()
        release.wait(10)
        raise RuntimeError("factory failed")

    def leader():
        try:
            cache.get_or_set("k", failing)
        except RuntimeError as e:
            outcomes["leader"] = str(e)

    def follower():
        outcomes["follower"] = cache.get_or_set("k", lambda: "second try")

    t1 = threading.Thread(target=leader)
    t1.start()
    assert leader_in.wait(10)
    t2 = threading.Thread(target=follower)
    t2.start()
    time.sleep(0.1)  # let the follower start waiting (correct either way)
    release.set()
    t1.join(10)
    t2.join(10)
    assert outcomes == {"leader": "factory failed", "follower": "second try"}
    assert cache["k"] == "second try"


def test_different_keys_do_not_wait_for_each_other(cache):
    inside = threading.Event()
    release = threading.Event()

    def slow():
        inside.set()
        release.wait(10)
        return "slow"

    t = threading.Thread(target=lambda: cache.get_or_set("a", slow))
    t.start()
    assert inside.wait(10)
    assert cache.get_or_set("b", lambda: "fast") == "fast"
    release.set()
    t.join(10)
    assert cache["a"] == "slow"


def test_recursion_on_the_same_key_is_an_error(cache):
    def factory():
        return cache.get_or_set("k", lambda: "inner")

    with pytest.raises(RuntimeError, match="recursion"):
        cache.get_or_set("k", factory)
    assert cache._in_flight == 0
    assert cache.get_or_set("k", lambda: "ok") == "ok"


def test_uncacheable_results_are_returned(cache):
    big = b"x" * (1 << 20)
    assert cache.get_or_set("big", lambda: big) == big
    assert "big" not in cache


def test_bad_arguments(cache):
    with pytest.raises(TypeError, match="factory"):
        cache.get_or_set("k", 5)
    with pytest.raises(TypeError, match="unsupported key type"):
        cache.get_or_set([], lambda: 1)
    with pytest.raises(ValueError, match="ttl"):
        cache.get_or_set("k", lambda: 1, ttl=-1)

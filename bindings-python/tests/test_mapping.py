"""segcache.Cache as a collections.abc.MutableMapping: iteration over live
items, views, pop/popitem/setdefault/update, copy and pickle, compared with
a plain dict driven through the same operations."""

import collections.abc
import copy
import pickle
import random

import pytest

import segcache


@pytest.fixture
def clock():
    return segcache.ManualClock()


@pytest.fixture
def cache(clock):
    return segcache.Cache(heap_size=4 << 20, segment_size=64 << 10, shards=4, _clock=clock)


def test_is_a_mutable_mapping(cache):
    assert isinstance(cache, collections.abc.MutableMapping)
    assert isinstance(cache, collections.abc.Mapping)
    assert issubclass(segcache.Cache, collections.abc.MutableMapping)


def test_iteration_and_views_match_a_dict(cache):
    ref = {}
    for i in range(500):
        k = (i, "k") if i % 3 == 0 else (f"s{i}" if i % 3 == 1 else i * 1.5)
        ref[k] = [i] if i % 2 else f"v{i}"
    cache.update(ref)
    assert len(cache) == len(ref)
    # Integral floats come back as the int they equal (one key, as in a
    # dict), so compare as sets and dicts, which use that equality.
    assert len(list(cache)) == len(ref) and set(cache) == set(ref)
    assert set(cache.keys()) == set(ref.keys())
    assert sorted(map(repr, cache.values())) == sorted(map(repr, ref.values()))
    assert dict(cache.items()) == ref and len(list(cache.items())) == len(ref)
    assert dict(cache) == ref
    keys = list(cache)
    assert 3 in keys and "3.0" not in map(repr, keys), "2 * 1.5 comes back as the int 3"
    assert 7.5 in keys, "5 * 1.5 stays a float"
    assert ("s1", "v1") not in cache.items() and ("s1", [1]) in cache.items()
    assert cache.keys() & {"s1", "nope"} == {"s1"}
    assert len(cache.keys()) == len(ref)


def test_iteration_skips_expired_and_deleted_items(cache, clock):
    for i in range(100):
        cache.set(i, i, ttl=10 if i % 2 else None)
    clock.advance(10)
    assert sorted(cache) == list(range(0, 100, 2))
    it = iter(cache)
    first = next(it)
    for k in range(0, 100, 2):
        if k != first:
            del cache[k]
    assert list(it) == [], "deleted while iterating: skipped"


def test_random_operations_against_a_dict(cache):
    rng = random.Random(7)
    ref = {}
    keys = [None, 0, 1, 2.5, "a", b"a", (1, "a"), ("x",), -3, "ü"]
    for _ in range(3000):
        k = rng.choice(keys)
        op = rng.randrange(7)
        if op == 0:
            v = rng.choice([b"x", "y", 5, [1], {"d": 1}, None])
            cache[k] = v
            ref[k] = v
        elif op == 1:
            assert cache.get(k, "dflt") == ref.get(k, "dflt")
        elif op == 2:
            assert cache.pop(k, "dflt") == ref.pop(k, "dflt")
        elif op == 3:
            assert cache.setdefault(k, "sd") == ref.setdefault(k, "sd")
        elif op == 4:
            assert (k in cache) == (k in ref)
        elif op == 5:
            if k in ref:
                del cache[k]
                del ref[k]
            else:
                with pytest.raises(KeyError):
                    del cache[k]
        else:
            assert len(cache) == len(ref)
    assert dict(cache.items()) == ref


def test_pop_popitem_setdefault_update(cache):
    with pytest.raises(KeyError):
        cache.pop("missing")
    assert cache.pop("missing", None) is None
    cache["a"] = 1
    assert cache.pop("a") == 1
    assert "a" not in cache
    with pytest.raises(TypeError):
        cache.pop("a", 1, 2)
    with pytest.raises(KeyError, match="empty"):
        cache.popitem()
    cache.update({"x": 1}, y=2)
    cache.update([("z", 3)])
    got = dict(cache.popitem() for _ in range(3))
    assert got == {"x": 1, "y": 2, "z": 3}
    assert len(cache) == 0
    assert cache.setdefault("d", [1]) == [1]
    assert cache.setdefault("d", [2]) == [1]
    assert cache.setdefault("n") is None
    assert "n" in cache and cache["n"] is None


def test_copy_and_pickle_keep_items_ttls_and_settings(cache, clock):
    cache.set("k", {"v": 1})
    cache.set("t", "soon", ttl=100)
    clock.advance(40)
    for clone in (copy.copy(cache), copy.deepcopy(cache), pickle.loads(pickle.dumps(cache))):
        assert type(clone) is segcache.Cache
        assert clone is not cache
        assert dict(clone) == dict(cache)
        assert 59 <= clone.ttl("t") <= 60
        assert clone.ttl("k") is None
        assert clone.shards == cache.shards and clone.eviction == cache.eviction
        assert clone.stats()["heap_bytes"] == cache.stats()["heap_bytes"]
        clone["new"] = 1
        assert "new" not in cache


def test_pickle_needs_a_picklable_serializer(clock):
    import json

    c = segcache.Cache(heap_size=1 << 20, serializer=json)
    c["k"] = [1]
    with pytest.raises(TypeError):
        pickle.dumps(c)


def test_equality_is_identity(cache):
    other = copy.copy(cache)
    assert cache == cache and cache != other
    assert len({cache, other}) == 2


def test_iterating_counts_no_hits_or_misses(cache):
    cache.update({i: str(i) for i in range(50)})
    before = cache.stats()
    assert len(list(cache.items())) == 50 and len(list(cache.values())) == 50 and len(list(cache)) == 50
    after = cache.stats()
    assert (after["hits"], after["misses"]) == (before["hits"], before["misses"])


def test_popitem_empties_a_large_cache(cache):
    n = 20_000
    cache.update({i: i for i in range(n)})
    got = {}
    while True:
        try:
            k, v = cache.popitem()
        except KeyError:
            break
        got[k] = v
        if len(got) == n // 2:
            cache["late"] = "added after the first snapshot"
    assert got == {**{i: i for i in range(n)}, "late": "added after the first snapshot"}
    assert len(cache) == 0

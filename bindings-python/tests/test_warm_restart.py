"""Warm restart: Cache(datapool=..., restore=True), save() and
restore_outcome. Fill, save, reopen: same values (of every type) and CAS tokens, TTLs
still counting (moved by a ManualClock); damaged metadata or no save starts
empty and says why; a saved cache is closed."""

import operator
import os
import threading
import time

import pytest

import segcache

SHARDS = 4


def open_cache(pool, clock, restore=True, **kwargs):
    kwargs.setdefault("heap_size", 8 << 20)
    kwargs.setdefault("segment_size", 64 << 10)
    kwargs.setdefault("hash_power", 16)
    kwargs.setdefault("shards", SHARDS)
    return segcache.Cache(datapool=pool, restore=restore, _clock=clock, **kwargs)


def fill(cache, n=5000):
    """Writes n varied items; returns {key: (value, cas_token)}."""
    for i in range(n):
        key = f"key:{i}"
        value = bytes([i % 251]) * (10 + i % 200)
        value = (value, value.hex(), i, {"i": i, "v": value})[i % 4]
        ttl = (None, 3600, 50)[i % 3]
        cache.set(key, value, ttl=ttl)
    for i in range(0, n, 5):
        del cache[f"key:{i}"]
    found = {}
    for i in range(n):
        key = f"key:{i}"
        hit = cache.gets(key)
        if hit is not None:
            found[key] = hit
    return found


@pytest.fixture
def clock():
    return segcache.ManualClock()


@pytest.fixture
def pool(tmp_path):
    return tmp_path / "pool"


def statuses(cache):
    return [o["status"] for o in cache.restore_outcome]


def test_save_and_restore_bring_back_every_item(pool, clock):
    cache = open_cache(pool, clock)
    # First start: nothing to restore, and the outcome says so per shard.
    assert len(cache.restore_outcome) == SHARDS
    for o in cache.restore_outcome:
        assert o["status"] == "fresh" and o["items"] == 0
        assert "no metadata" in o["reason"]
    assert cache.datapool == str(pool)
    before = fill(cache)
    assert len(before) == 4000
    assert len(cache) == 4000
    cache.save()
    assert cache.closed
    for i in range(SHARDS):
        assert (pool.parent / f"pool.shard{i}").is_file()
        assert (pool.parent / f"pool.shard{i}.meta").is_file()

    cache = open_cache(pool, clock)
    assert statuses(cache) == ["restored"] * SHARDS
    assert all(o["reason"] is None for o in cache.restore_outcome)
    assert sum(o["items"] for o in cache.restore_outcome) == 4000
    assert len(cache) == 4000
    for key, (value, token) in before.items():
        assert cache.gets(key) == (value, token), key
    for i in range(0, 5000, 5):
        assert f"key:{i}" not in cache, "deleted items stay deleted"
    # The metadata was consumed on start.
    assert not any((pool.parent / f"pool.shard{i}.meta").exists() for i in range(SHARDS))

    # CAS tokens from before the restart still work, once.
    key, (_, token) = next(iter(before.items()))
    assert cache.cas(key, b"new", token)
    assert not cache.cas(key, b"newer", token)
    # Writes after a restore survive the next restart too.
    cache.set("after", "restore")
    cache.save()
    cache = open_cache(pool, clock)
    assert cache.get("after") == "restore"
    assert cache.get(key) == b"new"
    assert len(cache) == 4001


def test_ttls_keep_counting_while_down(pool, clock):
    cache = open_cache(pool, clock)
    cache.set("long", "v", ttl=100)
    cache.set("short", "v", ttl=30)
    cache.set("forever", "v")
    clock.advance(10)
    cache.save()

    clock.advance(25)  # down 25 s: "short" has 0 s left, "long" 65 s
    cache = open_cache(pool, clock)
    assert statuses(cache) == ["restored"] * SHARDS
    assert cache.get("long") == "v"
    assert 60 <= cache.ttl("long") <= 65
    assert cache.ttl("forever") is None
    cache.save()

    clock.advance(40)  # down past "short"'s deadline and 40 s more
    cache = open_cache(pool, clock)
    assert "short" not in cache
    assert cache.ttl("long") <= 25
    clock.advance(30)
    assert "long" not in cache, "expires on the cache's own clock after a restore"
    assert cache.get("forever") == "v"


def test_tampered_metadata_starts_that_shard_empty_with_a_reason(pool, clock):
    cache = open_cache(pool, clock, shards=1)
    before = fill(cache, 2000)
    cache.save()
    meta = pool.parent / "pool.shard0.meta"
    data = bytearray(meta.read_bytes())
    data[len(data) // 2] ^= 0xFF
    meta.write_bytes(bytes(data))

    cache = open_cache(pool, clock, shards=1)
    (outcome,) = cache.restore_outcome
    assert outcome["status"] == "fresh"
    assert outcome["items"] == 0
    assert outcome["reason"]
    assert len(cache) == 0
    assert all(cache.get(k) is None for k in before)
    assert not meta.exists(), "the bad snapshot is removed"
    # The fresh cache works normally.
    cache.set("k", "v")
    assert cache["k"] == "v"


def test_one_damaged_shard_never_serves_wrong_data(pool, clock):
    cache = open_cache(pool, clock)
    before = fill(cache)
    cache.save()
    (pool.parent / "pool.shard2.meta").write_bytes(b"not metadata")

    cache = open_cache(pool, clock)
    outcomes = cache.restore_outcome
    assert [o["status"] for o in outcomes] == ["restored", "restored", "fresh", "restored"]
    assert outcomes[2]["reason"]
    restored = sum(o["items"] for o in outcomes)
    assert 0 < restored < len(before)
    assert len(cache) == restored
    hits = 0
    for key, (value, token) in before.items():
        got = cache.gets(key)
        if got is not None:
            hits += 1
            assert got == (value, token)
    assert hits == restored


def test_no_save_restarts_empty(pool, clock):
    cache = open_cache(pool, clock)
    fill(cache, 500)
    del cache  # dropped without save(): as after a crash, no metadata
    cache = open_cache(pool, clock)
    assert statuses(cache) == ["fresh"] * SHARDS
    assert len(cache) == 0


def test_changed_settings_start_empty(pool, clock):
    cache = open_cache(pool, clock)
    fill(cache, 500)
    cache.save()
    cache = open_cache(pool, clock, segment_size=128 << 10)
    assert statuses(cache) == ["fresh"] * SHARDS
    assert all(o["reason"] for o in cache.restore_outcome)
    assert len(cache) == 0


def test_restore_false_does_not_restore(pool, clock):
    cache = open_cache(pool, clock)
    cache.set("k", "v")
    cache.save()
    cache = open_cache(pool, clock, restore=False)
    assert statuses(cache) == ["not_requested"] * SHARDS
    assert all(o["items"] == 0 and o["reason"] is None for o in cache.restore_outcome)
    assert "k" not in cache
    # Without a datapool nothing is requested either.
    plain = segcache.Cache(heap_size=8 << 20, segment_size=64 << 10, shards=2)
    assert plain.datapool is None
    assert [o["status"] for o in plain.restore_outcome] == ["not_requested"] * 2


def test_methods_after_save_raise(pool, clock):
    cache = open_cache(pool, clock)
    cache.set("k", "v")
    assert not cache.closed
    cache.save()
    assert cache.closed
    calls = [
        lambda: cache.get("k"),
        lambda: cache.gets("k"),
        lambda: cache.get_or_set("k", lambda: 1),
        lambda: list(cache),
        lambda: cache.set("k", "v"),
        lambda: cache.add("k", "v"),
        lambda: cache.replace("k", "v"),
        lambda: cache.cas("k", "v", 1),
        lambda: cache.append("k", "v"),
        lambda: cache.prepend("k", "v"),
        lambda: cache.incr("k"),
        lambda: cache.decr("k"),
        lambda: cache.touch("k", 10),
        lambda: cache.delete("k"),
        lambda: cache.ttl("k"),
        lambda: cache.get_many(["k"]),
        lambda: cache.set_many({"k": "v"}),
        lambda: cache.set("big", b"x" * segcache.DETACH_AT),
        lambda: cache.flush(),
        lambda: cache.expire(),
        lambda: cache.clear(),
        lambda: cache.stats(),
        lambda: cache.max_value_len(),
        lambda: len(cache),
        lambda: "k" in cache,
        lambda: cache["k"],
        lambda: cache.__setitem__("k", "v"),
        lambda: cache.__delitem__("k"),
        lambda: cache.__contains__("k"),
        lambda: operator.setitem(cache, "k", "v"),
        lambda: operator.delitem(cache, "k"),
        lambda: cache.save(),
    ]
    for call in calls:
        with pytest.raises(RuntimeError, match="closed"):
            call()
    # Attributes that describe the cache still work.
    assert "closed" in repr(cache)
    assert cache.shards == SHARDS and cache.eviction == "merge"
    assert cache.datapool == str(pool)
    assert len(cache.restore_outcome) == SHARDS
    assert cache  # still truthy: "there is a cache object"
    # The save happened: a reopen finds the item.
    assert open_cache(pool, clock).get("k") == "v"


def test_decorator_on_a_saved_cache_raises(pool, clock):
    cache = open_cache(pool, clock)

    @segcache.cached(cache)
    def f(x):
        return str(x)

    assert f(1) == "1"
    cache.save()
    with pytest.raises(RuntimeError, match="closed"):
        f(1)


def test_save_while_other_threads_use_the_cache(pool, clock):
    # A heap the writers cannot fill before the save: with the default
    # 8 MiB, their 16 KiB overwrites could make the cache evict "shared"
    # (read on every loop, but eviction may still take it), and the reads
    # below would fail for a reason other than the one tested.
    big = {"heap_size": 64 << 20}
    cache = open_cache(pool, clock, **big)
    cache.set("shared", "v")
    errors, counts = [], []
    start = threading.Barrier(5)

    def worker(t):
        start.wait()
        n = 0
        try:
            while True:
                cache.set(f"t{t}:{n % 100}", b"x" * (100 if n % 2 else segcache.DETACH_AT))
                assert cache.get("shared") == "v"
                n += 1
        except RuntimeError as e:
            errors.append(str(e))
        counts.append(n)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    start.wait()
    while cache.stats()["items"] < 50:
        pass
    cache.save()
    for t in threads:
        t.join(timeout=30)
        assert not t.is_alive()
    assert len(errors) == 4 and all("closed" in e for e in errors)
    assert len(counts) == 4 and sum(counts) > 0
    reopened = open_cache(pool, clock, **big)
    assert statuses(reopened) == ["restored"] * SHARDS
    assert reopened.get("shared") == "v"


def test_save_while_other_threads_use_the_operators(pool, clock):
    # The operators and get/set/delete of small values take no lock against
    # save() (the GIL orders them): each thread's next call after the save
    # raises, and the saved items come back.
    cache = open_cache(pool, clock)
    cache["shared"] = "v"
    errors = []
    start = threading.Barrier(5)

    def worker(t):
        start.wait()
        n = 0
        try:
            while True:
                key = f"t{t}:{n % 100}"
                cache[key] = b"x" * 100
                assert cache[key] == b"x" * 100 and key in cache
                assert cache.get("shared") == "v"
                del cache[key]
                cache.set(key, n)
                assert cache.delete(key)
                n += 1
        except RuntimeError as e:
            errors.append(str(e))

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    start.wait()
    time.sleep(0.05)
    cache.save()
    for t in threads:
        t.join(timeout=30)
        assert not t.is_alive()
    assert len(errors) == 4 and all("closed" in e for e in errors)
    assert open_cache(pool, clock)["shared"] == "v"


def test_save_needs_a_datapool_and_keeps_the_cache_open():
    cache = segcache.Cache(heap_size=8 << 20, segment_size=64 << 10)
    cache.set("k", "v")
    with pytest.raises(ValueError, match="datapool"):
        cache.save()
    assert not cache.closed
    assert cache.get("k") == "v"


def test_bad_datapool_arguments(tmp_path):
    with pytest.raises(ValueError, match="restore"):
        segcache.Cache(heap_size=8 << 20, restore=True)
    with pytest.raises(TypeError, match="datapool"):
        segcache.Cache(heap_size=8 << 20, datapool=42)
    with pytest.raises(TypeError, match="restore"):
        segcache.Cache(heap_size=8 << 20, datapool=tmp_path / "p", restore="yes")
    with pytest.raises(OSError, match="datapool"):
        segcache.Cache(heap_size=8 << 20, datapool=tmp_path / "missing-dir" / "pool")
    # A str path works as well as a pathlib.Path.
    c = segcache.Cache(heap_size=8 << 20, segment_size=64 << 10, shards=2, datapool=os.fspath(tmp_path / "s"))
    c.set("k", "v")
    c.save()
    assert segcache.Cache(
        heap_size=8 << 20, segment_size=64 << 10, shards=2, datapool=str(tmp_path / "s"), restore=True
    ).get("k") == "v"


def test_save_failure_is_an_os_error_and_closes(tmp_path, clock):
    d = tmp_path / "d"
    d.mkdir()
    cache = open_cache(d / "pool", clock)
    cache.set("k", "v")
    # Metadata cannot be written where a directory stands in its way.
    (d / "pool.shard0.meta").mkdir()
    with pytest.raises(OSError):
        cache.save()
    assert cache.closed
    with pytest.raises(RuntimeError, match="closed"):
        cache.get("k")

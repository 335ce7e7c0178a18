"""The hot methods (get, set, delete) take every way of calling them that
their signatures allow, and refuse the rest with the usual TypeError: they
are plain fast-call C functions that hand anything unusual to the methods
pyo3 generated. The mapping operators of segcache.Cache (c[k], c[k] = v,
del c[k], k in c) are plain C slots of CacheSlots, a native subclass of
pyo3's Cache, and behave exactly as pyo3's slots do."""

import inspect
import threading

import pytest

import segcache
from segcache import _segcache


@pytest.fixture
def cache():
    return segcache.Cache(heap_size=4 << 20)


def test_get_positional_and_keyword(cache):
    cache["k"] = b"v"
    assert cache.get("k") == b"v"
    assert cache.get(key="k") == b"v"
    assert cache.get("missing", 7) == 7
    assert cache.get("missing", default=7) == 7
    assert cache.get(key="missing", default=7) == 7
    assert cache.get(default=7, key="missing") == 7
    assert cache.get("missing", None) is None


@pytest.mark.parametrize(
    "args, kwargs",
    [
        ((), {}),
        (("a", 1, 2), {}),
        (("a",), {"key": "b"}),
        ((), {"default": 1}),
        (("a",), {"nope": 1}),
        (("a",), {"default": 1, "deflt": 2}),
    ],
)
def test_get_bad_calls_raise_type_error(cache, args, kwargs):
    with pytest.raises(TypeError):
        cache.get(*args, **kwargs)


def test_set_positional_and_keyword(cache):
    cache.set("a", b"1")
    cache.set("b", b"2", 100)
    cache.set("c", b"3", ttl=100)
    cache.set(key="d", value=b"4", ttl=None)
    cache.set(value=b"5", key="e")
    assert [cache[k] for k in "abcde"] == [b"1", b"2", b"3", b"4", b"5"]
    assert cache.ttl("a") is None and cache.ttl("d") is None
    assert 90 <= cache.ttl("b") <= 100 and 90 <= cache.ttl("c") <= 100


@pytest.mark.parametrize(
    "args, kwargs",
    [
        (("a",), {}),
        (("a", b"v", 1, 2), {}),
        (("a", b"v"), {"value": b"w"}),
        (("a",), {"ttl": 1}),
        (("a", b"v"), {"tll": 1}),
    ],
)
def test_set_bad_calls_raise_type_error(cache, args, kwargs):
    with pytest.raises(TypeError):
        cache.set(*args, **kwargs)
    assert len(cache) == 0


def test_set_bad_ttl_raises_and_writes_nothing(cache):
    with pytest.raises(ValueError):
        cache.set("a", b"v", ttl=-1)
    with pytest.raises(TypeError):
        cache.set("a", b"v", ttl="soon")
    assert "a" not in cache


def test_delete_positional_and_keyword(cache):
    cache["a"] = b"1"
    cache["b"] = b"2"
    assert cache.delete("a") is True
    assert cache.delete(key="b") is True
    assert cache.delete("a") is False
    with pytest.raises(TypeError):
        cache.delete()
    with pytest.raises(TypeError):
        cache.delete("a", "b")


def test_dunders_as_operators_and_bound_methods(cache):
    cache["k"] = "text"
    cache.__setitem__("n", 5)
    assert cache["k"] == "text" and cache.__getitem__("n") == 5
    assert "k" in cache and cache.__contains__("n") and "x" not in cache
    del cache["k"]
    cache.__delitem__("n")
    assert len(cache) == 0
    with pytest.raises(KeyError):
        cache["k"]
    with pytest.raises(KeyError):
        del cache["k"]
    with pytest.raises(KeyError):
        cache.__delitem__("n")


def test_dunders_are_positional_only(cache):
    with pytest.raises(TypeError):
        cache.__getitem__(key="k")
    with pytest.raises(TypeError):
        cache.__setitem__("k")
    with pytest.raises(TypeError):
        cache.__setitem__(key="k", value=b"v")
    with pytest.raises(TypeError):
        cache.__contains__()
    assert len(cache) == 0


def test_unsupported_keys_raise_as_before(cache):
    with pytest.raises(TypeError, match="unsupported key type list"):
        cache[[1]] = b"v"
    with pytest.raises(TypeError, match="unsupported key type dict"):
        cache.get({})
    with pytest.raises(TypeError, match="unsupported key type"):
        [1] in cache
    with pytest.raises(ValueError):
        cache["x" * 300] = b"v"
    assert cache.get("x" * 300) is None and "x" * 300 not in cache


def test_methods_keep_their_docs_and_signatures():
    for name in ["get", "set", "delete"]:
        method = getattr(_segcache.Cache, name)
        assert method.__doc__ and method.__doc__.strip(), name
        assert list(inspect.signature(method).parameters)[0] == "self", name
    assert str(inspect.signature(_segcache.Cache.get)) == "(self, /, key, default=None)"
    assert str(inspect.signature(_segcache.Cache.set)) == "(self, /, key, value, ttl=None)"
    assert str(inspect.signature(_segcache.Cache.__getitem__)) == "(self, key, /)"


def test_called_on_the_wrong_type_raises():
    with pytest.raises(TypeError):
        _segcache.Cache.get({}, "k")
    with pytest.raises(TypeError):
        _segcache.Cache.__setitem__(object(), "k", b"v")


def test_the_mapping_has_the_fast_methods_as_its_own():
    # Defined on segcache.Cache itself (CPython specialises a method call
    # only when the instance's type is the method's own type), with the
    # same docs and signatures, and refusing instances of other types.
    for name in ["get", "set", "delete"]:
        own = segcache.Cache.__dict__[name]
        assert type(own) is type(_segcache.Cache.__dict__[name])
        assert own.__objclass__ is segcache.Cache
        assert own.__doc__ == getattr(_segcache.Cache, name).__doc__
        assert inspect.signature(own) == inspect.signature(getattr(_segcache.Cache, name))
    with pytest.raises(TypeError):
        segcache.Cache.get(_segcache.Cache(heap_size=4 << 20), "k")
    with pytest.raises(TypeError):
        segcache.Cache.set({}, "k", b"v")
    with pytest.raises(TypeError):
        _segcache._install_fast_methods(dict)
    with pytest.raises(TypeError):
        _segcache._install_fast_methods(_segcache.Cache)


def test_subclass_overrides_still_win():
    class Upper(segcache.Cache):
        def __getitem__(self, key):
            return super().__getitem__(key.upper())

    c = Upper(heap_size=4 << 20)
    c["K"] = b"v"
    assert c["k"] == b"v" and c.get("K") == b"v"


def test_refcounts_do_not_leak(cache):
    import sys

    value = b"x" * 100
    key = "key"
    cache[key] = value
    before = (sys.getrefcount(value), sys.getrefcount(key), sys.getrefcount(None))
    for _ in range(1000):
        cache.set(key, value)
        cache.set(key, value, ttl=None)
        cache.get(key)
        cache.get("missing")
        cache.get("missing", None)
        cache[key]
        key in cache
        cache.delete("missing")
    after = (sys.getrefcount(value), sys.getrefcount(key), sys.getrefcount(None))
    assert before[:2] == after[:2]
    # None is immortal from 3.12 (its count is fixed); before, a leak
    # would show as thousands.
    assert abs(after[2] - before[2]) < 100


def test_keywords_built_at_run_time_bind_too(cache):
    # Names from code are interned (bound by pointer); these are built at
    # run time, so they are compared by value.
    ttl, default = "".join(["t", "tl"]), "".join(["def", "ault"])
    cache.set("k", b"v", **{ttl: 100})
    assert 90 <= cache.ttl("k") <= 100
    assert cache.get("missing", **{default: 3}) == 3
    with pytest.raises(TypeError):
        cache.set("k", b"v", **{"".join(["t", "tx"]): 1})


def test_mapping_operators_are_the_native_slots():
    # segcache.Cache gets c[k], c[k] = v, del c[k] and k in c from
    # CacheSlots (plain C slots), not from pyo3's Cache beneath it.
    assert segcache.Cache.__mro__[1] is _segcache.CacheSlots
    assert _segcache.CacheSlots.__mro__[1] is _segcache.Cache
    for name in ["__getitem__", "__setitem__", "__delitem__", "__contains__"]:
        assert name in _segcache.CacheSlots.__dict__, name
        assert getattr(segcache.Cache, name) is _segcache.CacheSlots.__dict__[name], name
        assert getattr(segcache.Cache, name) is not getattr(_segcache.Cache, name), name


def outcome(f):
    try:
        return ("ok", f())
    except Exception as e:  # noqa: BLE001 - comparing what each raises
        return (type(e).__name__, str(e), e.args)


@pytest.mark.parametrize(
    "key",
    ["k", "", "é", b"k", 1, 1.0, True, None, (1, "a"), "x" * 300, [1], {}, 2**70, float("nan")],
    ids=repr,
)
def test_slots_behave_as_pyo3_slots(key):
    # The same operations through our slots (segcache.Cache) and through
    # pyo3's (a bare _segcache.Cache) give the same results and errors.
    ours, theirs = segcache.Cache(heap_size=4 << 20), _segcache.Cache(heap_size=4 << 20)
    for c in (ours, theirs):
        c["other"] = b"o"

    def run(c):
        def setitem():
            c[key] = b"v"
        def delitem():
            del c[key]
        return [
            outcome(lambda: key in c),
            outcome(lambda: c[key]),
            outcome(delitem),
            outcome(setitem),
            outcome(lambda: key in c),
            outcome(lambda: c[key]),
            outcome(delitem),
            outcome(lambda: key in c),
            outcome(lambda: len(c)),
        ]

    assert run(ours) == run(theirs)


def test_slots_on_subclasses_and_direct_instances():
    # A subclass that overrides one operator keeps our slot for the rest.
    class Shout(segcache.Cache):
        def __setitem__(self, key, value):
            super().__setitem__(key, value.upper())

    c = Shout(heap_size=4 << 20)
    c["k"] = b"v"
    assert c["k"] == b"V" and "k" in c
    del c["k"]
    assert "k" not in c
    d = _segcache.CacheSlots(heap_size=4 << 20)
    d["k"] = "v"
    assert d["k"] == "v" and "k" in d
    del d["k"]
    with pytest.raises(KeyError):
        d["k"]


def test_slot_operators_do_not_leak_references(cache):
    import sys

    value, key, missing = b"y" * 100, "key", "missing"
    cache[key] = value
    cls = type(cache)
    before = [sys.getrefcount(o) for o in (value, key, missing, cls, _segcache.CacheSlots)]
    for _ in range(1000):
        cache[key] = value
        cache[key]
        key in cache
        missing in cache
        del cache[key]
        cache[key] = value
        try:
            del cache[missing]
        except KeyError:
            pass
        try:
            cache[missing]
        except KeyError:
            pass
    # Instances hold a reference to their (heap) type: each one made and
    # dropped must give it back. Made on a thread of their own: a
    # free-threaded CPython counts a heap type's references from its
    # instances per thread (invisible to `getrefcount`) and adds them to the
    # type's count when the thread ends.
    def make_and_drop():
        for _ in range(200):
            segcache.Cache(heap_size=1 << 20)
            _segcache.CacheSlots(heap_size=1 << 20)

    maker = threading.Thread(target=make_and_drop)
    maker.start()
    maker.join()
    after = [sys.getrefcount(o) for o in (value, key, missing, cls, _segcache.CacheSlots)]
    assert before == after


def test_missing_keys_release_their_references_at_once(cache):
    # KeyError from c[k] and del c[k] must not park the key in pyo3's
    # deferred-decref pool (drained only by the next pyo3 entry point):
    # counted right after the loop, with no other call in between.
    import sys

    key = ("missing", 12345)
    before = sys.getrefcount(key)
    for _ in range(100):
        try:
            cache[key]
        except KeyError as e:
            assert e.args == (key,)
        try:
            del cache[key]
        except KeyError as e:
            assert e.args == (key,)
    after = sys.getrefcount(key)  # outside the assert (pytest's rewriting)
    assert after == before


@pytest.mark.parametrize("key", [None, (1, "a"), (), "k", 1, b"k"], ids=repr)
def test_key_error_carries_the_key_as_dict_does(cache, key):
    # KeyError(key) with the key as its one argument, as a dict raises it
    # (a tuple key is not spread into several arguments, None is kept).
    with pytest.raises(KeyError) as expected:
        {}[key]
    base = _segcache.Cache(heap_size=4 << 20)

    def delitem(c):
        del c[key]

    for call in [
        lambda: cache[key],
        lambda: delitem(cache),
        lambda: cache.pop(key),
        lambda: cache.ttl(key),
        lambda: cache.incr(key),
        lambda: base[key],
        lambda: delitem(base),
    ]:
        with pytest.raises(KeyError) as got:
            call()
        assert got.value.args == expected.value.args == (key,)


def test_big_int_keys_and_values_leave_no_exceptions_behind(cache):
    # Ints beyond 64 bits must not raise-and-drop an OverflowError on the
    # fast paths: a dropped error there waits in pyo3's pool (until the
    # next pyo3 entry point), so a loop would pile them up.
    import gc

    def overflow_errors():
        return sum(isinstance(o, OverflowError) for o in gc.get_objects())

    before = overflow_errors()
    for i in range(200):
        key = 2**70 + i
        cache[key] = 2**90 + i
        assert cache[key] == 2**90 + i and key in cache
        assert cache.get(key) == 2**90 + i
        cache.set(key, -(2**80))
        assert cache.get(key) == -(2**80)
        del cache[key]
        assert not cache.delete(key)
    assert overflow_errors() - before < 10
    # An int too long for str() (CPython's digit limit) is pickled; the
    # ValueError str() raised must not stay behind either.
    huge = 10**5000

    def value_errors():
        return sum(isinstance(o, ValueError) for o in gc.get_objects())

    before = value_errors()
    for _ in range(50):
        cache["huge"] = huge
        assert cache["huge"] == huge
    assert value_errors() - before < 10


def test_raised_errors_release_their_references_at_once():
    # Errors raised by the fast-call methods and the operator slots must
    # not leave references in pyo3's deferred-decref pool (drained only by
    # its next entry point). CacheFullError is a heap type on every
    # CPython (not immortal), so its count shows a parked reference; it
    # is read right after the loop, with no other call in between.
    import sys

    c = segcache.Cache(heap_size=1 << 20, segment_size=64 << 10, shards=1, eviction="none")
    full = False
    for i in range(10_000):
        try:
            c[f"fill:{i}"] = b"x" * 1000
        except segcache.CacheFullError:
            full = True
            break
    assert full
    # One failing call of each kind first (one-time caches), then count.
    for n in range(2):
        try:
            c[f"warm:{n}"] = b"x" * 1000
        except segcache.CacheFullError:
            pass
        try:
            c.set(f"warm:{n}", b"x" * 1000)
        except segcache.CacheFullError:
            pass
    before = sys.getrefcount(segcache.CacheFullError)
    raised = 0
    for n in range(100):
        try:
            c[f"more:{n}"] = b"x" * 1000
        except segcache.CacheFullError:
            raised += 1
        try:
            c.set(f"more:{n}", b"x" * 1000)
        except segcache.CacheFullError:
            raised += 1
    # Counted outside the assert: pytest's rewriting holds sub-expressions.
    after = sys.getrefcount(segcache.CacheFullError)
    assert after == before
    assert raised == 200


def test_a_failed_write_on_the_shortcut_raises_as_the_general_path_does():
    """A value too large for the segment but short enough for the shortcut
    (an exact `bytes` or ASCII `str` under 16 KiB) fails through the
    shortcut's error path (`hot::write_failed`) with the same ValueError
    as the general path gives a value of the same type and size that only
    it takes (a `bytearray`; a non-ASCII `str` of as many UTF-8 bytes),
    through every entry point, and changes nothing; the next write
    succeeds (no exception left behind)."""
    c = segcache.Cache(heap_size=1 << 20, segment_size=4096)
    c["k"] = b"old"
    big = c.max_value_len(1) + 1
    assert big < 16 << 10  # the shortcut's size, not the general path's
    writes = [
        lambda v: c.__setitem__("k", v),
        lambda v: c.set("k", v),
        lambda v: c.set("k", v, 60),
        lambda v: c.set("k", v, ttl=60),
    ]
    for hot_value, general_value in ((b"x" * big, bytearray(big)), ("x" * big, "x" * (big - 2) + "\u00e9")):
        with pytest.raises(ValueError, match="too large") as general:
            c["k"] = general_value
        for write in writes:
            with pytest.raises(ValueError) as hot:
                write(hot_value)
            assert str(hot.value) == str(general.value)
            assert c["k"] == b"old"
    for write in writes:
        assert write(b"new") is None
        assert c["k"] == b"new"

"""segcache.Cache against a plain dict, driven by Hypothesis through random
sequences of every mapping operation and the conditional writes, over the
whole key and value domain the package documents (nested tuples, ints of
any size, integral floats and bools that equal ints, -0.0, unicode and
bytes, values of every kind up to a few KiB). The heap is large enough that
nothing is evicted, so the cache must answer exactly as the dict does.

Where the two differ by design (README "Keys"), the model follows the
cache: an integral float or a bool key comes back as the int it equals
(compared with ==, as a dict compares keys), and a key whose encoding is
over MAX_KEY_LEN bytes cannot be written (ValueError, nothing changes).

A second machine runs the writes through a heap small enough that eviction
runs all the time: there the cache may forget a key, but whatever it
answers must be the key's latest value, never an older one or another
key's."""

import os
import pickle
import random

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, settings, strategies as st  # noqa: E402
from hypothesis.stateful import (  # noqa: E402
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

import segcache  # noqa: E402

# Text without lone surrogates (those raise, tested in test_layout.py).
text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)
atoms = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 3),
    st.integers(),
    st.floats(allow_nan=False),
    st.sampled_from([0.0, -0.0, 1.0, 2.0, -1.0, 1e300, float("inf")]),
    text,
    st.binary(max_size=12),
)
keys = st.one_of(
    atoms,
    st.recursive(atoms, lambda inner: st.tuples(inner) | st.tuples(inner, inner), max_leaves=4),
    # Around the length limit: 245-255 bytes of UTF-8.
    st.integers(245, 255).map(lambda n: "k" * n),
)
small_values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=False),
    text,
    st.binary(max_size=64),
)


def sized_bytes(low, high):
    """Bytes of low..high length made from two small draws (Hypothesis's
    own binary strategy spends a draw per byte and would exhaust an
    example's budget in a few kilobytes)."""
    return st.builds(
        lambda seed, n: random.Random(seed).randbytes(n),
        st.integers(0, 2**32 - 1),
        st.integers(low, high),
    )


values = st.one_of(
    small_values,
    sized_bytes(200, 3000),
    st.text(max_size=300),
    st.lists(small_values, max_size=4),
    st.dictionaries(text, small_values, max_size=3),
)


def encoded_too_long(key):
    """True where the write must be refused: a str key over MAX_KEY_LEN
    bytes of UTF-8."""
    return isinstance(key, str) and len(key.encode()) > segcache.MAX_KEY_LEN


def rough_len(key):
    """An estimate of a key's encoded size, within a few bytes per part:
    an integral float is stored as the int it equals, so 1e291 takes as
    many bytes as that int."""
    if isinstance(key, tuple):
        return sum(rough_len(k) + 1 for k in key)
    if isinstance(key, float) and key == key and abs(key) != float("inf") and key == int(key):
        key = int(key)
    if isinstance(key, int):
        return key.bit_length() // 8 + 2
    if isinstance(key, (str, bytes)):
        return len(key.encode() if isinstance(key, str) else key) + 1
    return 9


def near_limit(key):
    """A key other than a str whose estimated encoding is within 24 bytes
    of the limit: its write may be refused."""
    return not isinstance(key, str) and rough_len(key) > segcache.MAX_KEY_LEN - 24


def may_be_refused(key):
    return encoded_too_long(key) or near_limit(key)


def attempt(key, write):
    """`(True, write())`, or `(False, None)` where the key is too long to
    be written: a str over the limit must be refused (ValueError), a key
    near the limit may be, any other must not."""
    if encoded_too_long(key):
        with pytest.raises(ValueError):
            write()
        return False, None
    if near_limit(key):
        try:
            return True, write()
        except ValueError:
            return False, None
    return True, write()


def same(got, want):
    """Equal and, for the types stored as themselves, of the same type."""
    return got == want and (type(got) is type(want) or not isinstance(want, (bytes, str, int)))


# Examples per machine; memcheck.sh asks for a few (under valgrind one
# example takes minutes).
EXAMPLES = int(os.environ.get("SEGCACHE_MODEL_EXAMPLES", "0"))


class CacheMatchesDict(RuleBasedStateMachine):
    @initialize()
    def build(self):
        self.cache = segcache.Cache(heap_size=16 << 20, shards=2)
        self.model = {}

    @rule(key=keys, value=values)
    def setitem(self, key, value):
        done, _ = attempt(key, lambda: self.cache.__setitem__(key, value))
        if done:
            self.model[key] = value

    @rule(key=keys, value=values)
    def add(self, key, value):
        done, stored = attempt(key, lambda: self.cache.add(key, value))
        if not done:
            return
        assert stored == (key not in self.model)
        if stored:
            self.model[key] = value

    @rule(key=keys, value=values)
    def replace(self, key, value):
        # Refused before the key is looked for; the model never holds it.
        done, stored = attempt(key, lambda: self.cache.replace(key, value))
        if not done:
            return
        assert stored == (key in self.model)
        if stored:
            self.model[key] = value

    @rule(key=keys)
    def getitem(self, key):
        if key in self.model:
            assert same(self.cache[key], self.model[key])
        else:
            with pytest.raises(KeyError):
                self.cache[key]

    @rule(key=keys)
    def get_with_default(self, key):
        marker = object()
        got = self.cache.get(key, marker)
        if key in self.model:
            assert same(got, self.model[key])
        else:
            assert got is marker

    @rule(key=keys)
    def contains(self, key):
        assert (key in self.cache) == (key in self.model)

    @rule(key=keys)
    def delitem(self, key):
        if key in self.model:
            del self.cache[key]
            del self.model[key]
        else:
            with pytest.raises(KeyError):
                del self.cache[key]

    @rule(key=keys)
    def pop(self, key):
        marker = object()
        got = self.cache.pop(key, marker)
        want = self.model.pop(key, marker)
        assert got is marker if want is marker else same(got, want)

    @rule(key=keys, value=values)
    def setdefault(self, key, value):
        done, got = attempt(key, lambda: self.cache.setdefault(key, value))
        if done:
            assert same(got, self.model.setdefault(key, value))

    @rule(pairs=st.dictionaries(keys, values, max_size=4))
    def update(self, pairs):
        if any(may_be_refused(k) for k in pairs):
            return
        self.cache.update(pairs)
        self.model.update(pairs)

    @precondition(lambda self: self.model)
    @rule()
    def popitem(self):
        key, value = self.cache.popitem()
        assert key in self.model and same(value, self.model.pop(key))

    @rule()
    def pickle_round_trip(self):
        clone = pickle.loads(pickle.dumps(self.cache))
        assert dict(clone.items()) == self.model

    @invariant()
    def same_items(self):
        assert len(self.cache) == len(self.model)
        items = dict(self.cache.items())
        assert items == self.model
        for key, value in items.items():
            assert same(value, self.model[key])


class EvictingCacheIsNeverWrong(RuleBasedStateMachine):
    """The latest value written under each key (the model) against a cache
    of four 64 KiB segments; values of up to 20 KiB fill it in a few
    writes."""

    @initialize()
    def build(self):
        self.cache = segcache.Cache(heap_size=256 << 10, segment_size=64 << 10, shards=1)
        self.model = {}

    def check(self, key, got, missing):
        if got is missing:
            return
        assert key in self.model, "a key never written (or deleted) was answered"
        assert same(got, self.model[key]), "an answer that is not the latest value"

    @rule(key=keys, value=values | sized_bytes(4000, 20000))
    def setitem(self, key, value):
        if may_be_refused(key):
            return
        self.cache[key] = value
        self.model[key] = value

    @rule(key=keys, value=values)
    def add(self, key, value):
        if may_be_refused(key):
            return
        if self.cache.add(key, value):
            self.model[key] = value
        else:
            self.check(key, self.cache.get(key, None), None)

    @rule(key=keys, value=values)
    def replace(self, key, value):
        if may_be_refused(key):
            return
        if self.cache.replace(key, value):
            self.model[key] = value

    @rule(key=keys)
    def get(self, key):
        marker = object()
        self.check(key, self.cache.get(key, marker), marker)

    @rule(key=keys)
    def delitem(self, key):
        try:
            del self.cache[key]
        except KeyError:
            pass
        self.model.pop(key, None)
        assert key not in self.cache

    @rule(key=keys, value=values)
    def setdefault(self, key, value):
        if may_be_refused(key):
            return
        got = self.cache.setdefault(key, value)
        if same(got, value):
            self.model[key] = value
        self.check(key, got, object())

    @precondition(lambda self: self.model)
    @rule()
    def popitem(self):
        try:
            key, value = self.cache.popitem()
        except KeyError:
            return
        self.check(key, value, object())
        del self.model[key]

    @invariant()
    def answers_are_latest(self):
        assert len(self.cache) <= len(self.model)
        for key, value in self.cache.items():
            self.check(key, value, object())


def machine_settings(examples, steps):
    """Derandomized, no example database; `examples` unless
    SEGCACHE_MODEL_EXAMPLES asks for another count."""
    return settings(
        max_examples=EXAMPLES or examples,
        stateful_step_count=steps,
        deadline=None,
        derandomize=True,
        database=None,
        # Generation is not what is measured; a slow machine (or valgrind,
        # memcheck.sh) must not fail the test for it.
        suppress_health_check=[HealthCheck.too_slow],
    )


EvictingCacheIsNeverWrong.TestCase.settings = machine_settings(40, 60)
test_an_evicting_cache_is_never_wrong = EvictingCacheIsNeverWrong.TestCase

CacheMatchesDict.TestCase.settings = machine_settings(60, 40)
test_cache_matches_a_dict = CacheMatchesDict.TestCase

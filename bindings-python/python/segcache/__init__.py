"""segcache: a memory-bounded, thread-safe in-memory cache with TTLs.

The storage is the Rust ``segcache`` crate (the Segcache design: items packed
into fixed-size segments grouped by TTL, expired a whole segment at a time,
merge eviction when the heap is full). :class:`Cache` is a
:class:`collections.abc.MutableMapping` of Python keys to Python values;
:func:`cached` memoizes functions (sync or async) in one.

>>> import segcache
>>> cache = segcache.Cache(heap_size=1 << 20)
>>> cache.set("user:42", {"name": "Ada"}, ttl=300)
>>> cache.get("user:42")
{'name': 'Ada'}
>>> cache[1] = "one"
>>> cache[1.0], 1 in cache, cache.get("missing")
('one', True, None)

Keys: ``str``, ``bytes``, ``int``, ``float``, ``bool``, ``None`` and tuples
of these, with Python's equality (``1``, ``1.0`` and ``True`` are one key;
``"a"`` and ``b"a"`` are two). Values: ``bytes``, ``str`` and ``int`` are
stored as themselves, anything else through the serializer (``pickle``
unless ``Cache(serializer=...)`` says otherwise). TTLs are ``int``/``float``
seconds or ``datetime.timedelta``, counted in whole seconds; ``None`` or
``0`` means "never expires". See ``_segcache.pyi`` for every method.
"""

from __future__ import annotations

import asyncio
import collections.abc
import datetime
import functools
import inspect
from typing import Any, Callable, Iterator, Optional, TypeVar, Union

from . import _segcache
from ._segcache import (
    DETACH_AT,
    HELD_AT,
    MAX_KEY_LEN,
    MAX_TTL,
    BoundCachedMethod,
    CacheFullError,
    CachedFunction,
    ManualClock,
    __version__,
)

__all__ = [
    "Cache",
    "CacheFullError",
    "CachedFunction",
    "ManualClock",
    "cached",
    "MAX_KEY_LEN",
    "MAX_TTL",
    "DETACH_AT",
    "HELD_AT",
    "__version__",
]

F = TypeVar("F", bound=Callable[..., Any])


class _KeysView(collections.abc.KeysView):
    __slots__ = ()

    def __iter__(self) -> Iterator[Any]:
        return iter(self._mapping)


class _ValuesView(collections.abc.ValuesView):
    __slots__ = ()

    def __iter__(self) -> Iterator[Any]:
        return self._mapping._iter_values()


class _ItemsView(collections.abc.ItemsView):
    __slots__ = ()

    def __iter__(self) -> Iterator[Any]:
        return self._mapping._iter_items()


def _rebuild(cls: type, config: dict, items: list) -> "Cache":
    cache = cls(**config)
    for key, value, ttl in items:
        cache.set(key, value, ttl=ttl)
    return cache


class Cache(_segcache.CacheSlots, collections.abc.MutableMapping):
    """A memory-bounded, thread-safe cache of Python values with TTLs, and a
    ``collections.abc.MutableMapping``.

    ``Cache(heap_size=None, segment_size=None, hash_power=None,
    eviction=None, shards=None, datapool=None, restore=None,
    serializer=None, prefault=None)``

    ``heap_size``: bytes of item storage (default 64 MiB); item data never
    exceeds it (the hash table and segment headers come on top:
    ``stats()["total_bytes"]``). ``segment_size``: bytes per segment
    (default: the size that cuts the heap into 256 to 512 segments,
    16 KiB to 1 MiB; the largest item must fit in one). ``hash_power``: ``2**hash_power`` buckets of 7 slots
    (default: sized for 1 KiB items filling the heap, grown for smaller
    ones). ``eviction``:
    ``"merge"`` (default), ``"none"`` (full: ``CacheFullError``),
    ``"random"``, ``"random_fifo"``, ``"fifo"``, ``"cte"`` or ``"util"``.
    ``shards``: independently locked parts (a power of two; default from
    the CPU count). ``serializer``: an object with ``dumps``/``loads`` for
    values other than bytes, str and int (default ``pickle``).
    ``datapool``/``restore``: warm restart (see ``save()``).
    ``prefault=True``: make the heap resident now (no page faults on the
    first fill).

    Keys: ``str``, ``bytes``, ``int``, ``float``, ``bool``, ``None`` and
    tuples of these, with a dict's equality (``1 == 1.0 == True``: one
    key). Values: anything (``bytes``, ``str``, ``int`` stored as
    themselves, the rest through the serializer). TTLs: seconds or
    ``timedelta``, ``None``/``0`` for never.

    Mapping: ``c[k]``, ``c[k] = v``, ``del c[k]``, ``k in c``, ``len(c)``,
    iteration over live keys, ``keys()``/``values()``/``items()``,
    ``get``, ``pop``, ``popitem``, ``setdefault``, ``update``, ``clear``.
    Unlike a dict: always truthy, compared and hashed by identity, and
    items may go at any time (eviction, expiry). ``copy.copy``,
    ``copy.deepcopy`` and pickle make a new cache with the same settings
    and live items. Also: ``set(k, v, ttl=...)``, ``get_or_set``,
    memcache-style ``add``/``replace``/``cas``/``incr``/``touch``...,
    ``stats()``. See each method's docstring and ``_segcache.pyi``.
    """

    __slots__ = ()
    __module__ = "segcache"

    def keys(self) -> collections.abc.KeysView:
        """A view of the live keys (iterating walks the cache shard by
        shard; see ``__iter__``)."""
        return _KeysView(self)

    def values(self) -> collections.abc.ValuesView:
        """A view of the live values."""
        return _ValuesView(self)

    def items(self) -> collections.abc.ItemsView:
        """A view of the live ``(key, value)`` pairs."""
        return _ItemsView(self)

    def __eq__(self, other: object) -> bool:
        # Caches compare by identity (comparing contents would walk both
        # caches, and two caches are different objects to cache in).
        return self is other

    __hash__ = object.__hash__

    def __bool__(self) -> bool:
        # A cache is always truthy, so ``cache or default`` means "is there
        # a cache", not "is it empty" (use ``len(cache)`` for that).
        return True

    def __reduce__(self) -> tuple:
        # copy.copy, copy.deepcopy and pickle: a new cache with the same
        # settings (not the datapool) and the live items, with the TTL
        # they have left. Needs a picklable serializer (the default is).
        return (_rebuild, (type(self), self._config(), list(self._iter_dump())))

    def __copy__(self) -> "Cache":
        func, args = self.__reduce__()
        return func(*args)

    def __deepcopy__(self, memo: dict) -> "Cache":
        return self.__copy__()


# get, set and delete as Cache's own methods, not only inherited ones:
# CPython specialises a method call only when the instance's type is the
# method's own type (the inherited ones cost ~180 instructions more per
# c.get(k)).
_segcache._install_fast_methods(Cache)


async def _async_call(func: "CachedFunction", obj: Any, args: tuple, kwargs: Optional[dict]) -> Any:
    """The body of a cached coroutine function's call: one computation per
    key at a time per event loop (other callers await it)."""
    kwargs = kwargs or {}
    key, value = func._lookup(obj, args, kwargs, _MISS)
    if value is not _MISS:
        return value
    loop = asyncio.get_running_loop()
    pending = _PENDING.setdefault(loop, {})
    while True:
        running = pending.get(key)
        if running is None:
            break
        try:
            return await asyncio.shield(running)
        except asyncio.CancelledError:
            if not running.cancelled():
                raise  # this caller was cancelled, not the computation
        except Exception:
            pass
        # The computation failed or was cancelled for its own caller: the
        # value may still have been stored by then; else compute it here.
        value = func._peek(key, _MISS)
        if value is not _MISS:
            return value
    future: asyncio.Future = loop.create_future()
    pending[key] = future
    try:
        target = func.__wrapped__
        result = await (target(obj, *args, **kwargs) if obj is not None else target(*args, **kwargs))
        func._store(key, result)
        future.set_result(result)
        return result
    except asyncio.CancelledError:
        future.cancel()
        raise
    except BaseException as e:
        future.set_exception(e)
        # Nobody may be waiting: mark the exception as retrieved.
        future.exception()
        raise
    finally:
        if pending.get(key) is future:
            del pending[key]
        if not pending:
            _PENDING.pop(loop, None)


_MISS = object()
_PENDING: "dict[asyncio.AbstractEventLoop, dict[bytes, asyncio.Future]]" = {}


def _check_ttl(ttl: Any) -> None:
    """Rejects a bad decorator TTL at decoration time, as Cache.set would."""
    if ttl is None:
        return
    if isinstance(ttl, bool) or not isinstance(ttl, (int, float, datetime.timedelta)):
        raise TypeError(f"ttl must be int or float seconds or a datetime.timedelta, not {type(ttl).__name__}")
    secs = ttl.total_seconds() if isinstance(ttl, datetime.timedelta) else ttl
    if not secs >= 0:
        raise ValueError(f"ttl must not be negative, got {secs}")
    if secs > MAX_TTL:
        raise ValueError(f"ttl of {secs} s is out of range (at most {MAX_TTL} s)")


def cached(
    cache: Cache,
    ttl: Union[None, int, float, datetime.timedelta] = None,
    key: Optional[Callable[..., Any]] = None,
    typed: bool = False,
) -> Callable[[F], F]:
    """Memoize a function's results in ``cache``.

    ``ttl``: how long a result stays (seconds or ``timedelta``; ``None``
    means until evicted). The key of a call is built in Rust from the
    function's ``module.qualname`` and its arguments, which must be keys
    themselves (``str``, ``bytes``, ``int``, ``float``, ``bool``, ``None``
    or tuples of these; else ``TypeError``); ``key=`` replaces the
    arguments by ``key(*args, **kwargs)``'s result. ``typed=True`` keeps
    ``1``, ``1.0`` and ``True`` apart, as ``functools.lru_cache`` does.
    Results are stored as ``Cache`` values are (through the cache's
    serializer unless bytes, str or int); a result too large for the
    cache is returned uncached.

    Concurrent calls that miss on one key run the function once: the others
    wait for its result (threads) or await it (coroutine functions, per
    event loop). If it raises, the caller that ran it gets the exception
    and the next call tries again.

    Works on functions, coroutine functions and methods (``self`` is not
    part of the key: every instance shares the results, so a method whose
    result depends on the instance needs ``key=lambda self, *a: ...``).
    The wrapper has ``cache_info()``, ``cache_clear()`` (removes this
    function's entries), ``cache_key(*args, **kwargs)``, ``cache`` and
    ``__wrapped__``.

    >>> cache = Cache(heap_size=1 << 20)
    >>> @cached(cache, ttl=60)
    ... def square(n: int) -> int:
    ...     return n * n
    >>> square(4), square(4), square.cache_info()
    (16, 16, CacheInfo(hits=1, misses=1, maxsize=None, currsize=1))
    """
    if not isinstance(cache, _segcache.Cache):
        raise TypeError(f"cached() needs a segcache.Cache, not {type(cache).__name__}")
    if key is not None and not callable(key):
        raise TypeError("key must be a callable returning a cache key")
    if not isinstance(typed, bool):
        raise TypeError("typed must be a bool")
    _check_ttl(ttl)

    def decorate(fn: F) -> F:
        if not callable(fn):
            raise TypeError(f"cached() decorates a callable, not {type(fn).__name__}")
        name = f"{getattr(fn, '__module__', None)}.{getattr(fn, '__qualname__', repr(fn))}"
        is_async = inspect.iscoroutinefunction(fn)
        wrapper = CachedFunction(cache, fn, name, ttl, key, typed, is_async)
        functools.update_wrapper(wrapper, fn, updated=())
        if is_async and hasattr(inspect, "markcoroutinefunction"):
            inspect.markcoroutinefunction(wrapper)
        return wrapper  # type: ignore[return-value]

    return decorate

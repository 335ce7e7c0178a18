"""segcache: a memory-bounded, thread-safe in-memory cache with TTLs.

The storage is the Rust `segcache` crate (the Segcache design: items packed
into fixed-size segments grouped by TTL, expired a whole segment at a time,
merge eviction when the heap is full). This package re-exports the native
classes from :mod:`segcache._segcache` and adds the :func:`cached`
memoizing decorator.

>>> import segcache
>>> cache = segcache.Cache(heap_size=16 << 20)
>>> cache.set("user:42", b'{"name": "Ada"}', ttl=300)
>>> cache.get("user:42")
b'{"name": "Ada"}'
>>> cache["missing"]
Traceback (most recent call last):
    ...
KeyError: 'missing'

Keys and values are ``bytes``, ``bytearray``, ``memoryview`` or ``str``
(UTF-8; ``"a"`` and ``b"a"`` are the same key); values come back as
``bytes``. TTLs are ``int``/``float`` seconds or ``datetime.timedelta``,
counted in whole seconds; ``None`` or ``0`` means "never expires".
See ``_segcache.pyi`` for every method and what it raises or returns.
"""

from __future__ import annotations

import datetime
import functools
import hashlib
from typing import Any, Callable, Optional, TypeVar, Union

from ._segcache import (
    DETACH_AT,
    MAX_KEY_LEN,
    MAX_TTL,
    Cache,
    CacheFullError,
    ManualClock,
)

__all__ = [
    "Cache",
    "CacheFullError",
    "ManualClock",
    "cached",
    "MAX_KEY_LEN",
    "MAX_TTL",
    "DETACH_AT",
]

F = TypeVar("F", bound=Callable[..., Any])

# Stored-item flags the decorator uses to give back the type it was given.
_FLAG_BYTES = 0
_FLAG_STR = 1
_FLAG_SERIALIZED = 2

# Argument types whose repr() identifies their value, so the default key
# built from them can never make two different calls share an entry.
_KEYABLE = (str, bytes, int, float, bool, type(None))


def _key_part(value: Any, fn_name: str) -> str:
    if isinstance(value, _KEYABLE):
        return repr(value)
    if isinstance(value, tuple):
        return "(" + ",".join(_key_part(v, fn_name) for v in value) + ",)"
    if isinstance(value, frozenset):
        return "frozenset(" + ",".join(sorted(_key_part(v, fn_name) for v in value)) + ")"
    raise TypeError(
        f"@segcache.cached({fn_name}): cannot build a default cache key from an argument "
        f"of type {type(value).__name__}; pass key=lambda *args, **kwargs: ... to cached()"
    )


def _default_key(fn: Callable[..., Any], args: tuple, kwargs: dict) -> str:
    name = f"{fn.__module__}.{fn.__qualname__}"
    parts = [_key_part(a, name) for a in args]
    parts += [f"{k}={_key_part(v, name)}" for k, v in sorted(kwargs.items())]
    key = f"{name}({','.join(parts)})"
    if len(key.encode("utf-8")) <= MAX_KEY_LEN:
        return key
    digest = hashlib.blake2b(key.encode("utf-8"), digest_size=20).hexdigest()
    return f"{name[: MAX_KEY_LEN - 50]}#{digest}"


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
    ttl: Union[None, int, float, Any] = None,
    key: Optional[Callable[..., Union[str, bytes]]] = None,
    serializer: Any = None,
) -> Callable[[F], F]:
    """Memoize a function's results in ``cache``.

    ``ttl``: how long a result stays (seconds or ``timedelta``; ``None``
    means until evicted). ``key``: a function of the call's arguments
    returning the cache key (``str`` or ``bytes``); by default the key is
    the function's qualified name and the ``repr`` of its arguments, which
    must then be ``str``, ``bytes``, numbers, ``bool``, ``None`` or
    tuples/frozensets of those (anything else raises ``TypeError``: pass
    ``key=``). Keys longer than ``MAX_KEY_LEN`` bytes are hashed.

    Without ``serializer`` the function must return ``bytes``, ``str``,
    ``bytearray`` or ``memoryview``; a ``str`` comes back as ``str``, the
    others as ``bytes``, and any other result raises ``TypeError``. With a
    ``serializer`` (any object with ``dumps(obj) -> bytes | str`` and
    ``loads(bytes) -> obj``, such as :mod:`pickle` or :mod:`json`), any
    result the serializer accepts is cached. Only use :mod:`pickle` with a
    cache that untrusted code cannot write to.

    A result too large for the cache, or one the cache has no room for
    (``CacheFullError``), is returned but not cached.
    Concurrent calls that miss at once each run the function. The wrapper
    has ``.cache`` and ``.cache_key(*args, **kwargs)``.

    >>> cache = Cache(heap_size=8 << 20)
    >>> @cached(cache, ttl=60)
    ... def greet(name: str) -> str:
    ...     return f"hello {name}"
    >>> greet("ada"), greet("ada")
    ('hello ada', 'hello ada')
    """
    if not isinstance(cache, Cache):
        raise TypeError(f"cached() needs a segcache.Cache, not {type(cache).__name__}")
    if key is not None and not callable(key):
        raise TypeError("key must be a callable returning str or bytes")
    if serializer is not None and not (
        callable(getattr(serializer, "dumps", None)) and callable(getattr(serializer, "loads", None))
    ):
        raise TypeError("serializer must have dumps() and loads(), like pickle or json")
    _check_ttl(ttl)

    def decorate(fn: F) -> F:
        def cache_key(*args: Any, **kwargs: Any) -> Union[str, bytes]:
            if key is None:
                return _default_key(fn, args, kwargs)
            k = key(*args, **kwargs)
            raw = k.encode("utf-8") if isinstance(k, str) else k
            if not isinstance(raw, (bytes, bytearray, memoryview)):
                raise TypeError(f"key function returned {type(k).__name__}, not str or bytes")
            if not 1 <= len(raw) <= MAX_KEY_LEN:
                raise ValueError(f"key function returned a key of {len(raw)} bytes; keys are 1 to {MAX_KEY_LEN} bytes")
            return k

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            k = cache_key(*args, **kwargs)
            hit = cache._get_flagged(k)
            if hit is not None:
                raw, flags = hit
                if flags == _FLAG_SERIALIZED and serializer is not None:
                    return serializer.loads(raw)
                if flags == _FLAG_STR:
                    return raw.decode("utf-8")
                if flags == _FLAG_BYTES and serializer is None:
                    return raw
                # Written by another decorator configuration: recompute.
            result = fn(*args, **kwargs)
            if serializer is not None:
                data = serializer.dumps(result)
                if isinstance(data, str):
                    data = data.encode("utf-8")
                flags = _FLAG_SERIALIZED
            elif isinstance(result, str):
                data, flags = result, _FLAG_STR
            elif isinstance(result, (bytes, bytearray, memoryview)):
                data, flags = result, _FLAG_BYTES
            else:
                raise TypeError(
                    f"@segcache.cached({fn.__qualname__}) returned {type(result).__name__}; "
                    "without a serializer only bytes and str can be cached "
                    "(pass serializer=pickle, for example)"
                )
            try:
                cache.set(k, data, ttl=ttl, flags=flags)
            except (ValueError, CacheFullError):
                pass
            return result

        wrapper.cache = cache  # type: ignore[attr-defined]
        wrapper.cache_key = cache_key  # type: ignore[attr-defined]
        return wrapper  # type: ignore[return-value]

    return decorate

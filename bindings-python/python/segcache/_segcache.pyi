"""Type stubs for the native module ``segcache._segcache`` (see src/).

Conventions shared by every method:

* ``Key``: ``str``, ``bytes``, ``int``, ``float``, ``bool``, ``None`` or a
  tuple of these, compared as a dict compares them (``1``, ``1.0`` and
  ``True`` are one key, ``"a"`` and ``b"a"`` two); ``bytearray`` and
  ``memoryview`` are read as ``bytes``. Other types raise ``TypeError``,
  even for ``key in cache``. A key takes at most ``MAX_KEY_LEN`` bytes
  once encoded (a ``str``: its UTF-8; others a few bytes more); a write of
  a longer key raises ``ValueError``, a read of one simply misses.
* Values: ``bytes``, ``str`` and ``int`` are stored as themselves and come
  back with their type; ``bytearray``/``memoryview`` come back as
  ``bytes``; anything else goes through the cache's serializer (``pickle``
  by default) and comes back as its ``loads`` makes it.
* ``TTL`` is ``None`` or ``0`` (never expires), ``int``/``float`` seconds
  or a ``datetime.timedelta``. The cache counts whole seconds: a fraction
  rounds up (0.5 s counts as 1 s).
  Negative, NaN or above ``MAX_TTL`` raises ``ValueError``; ``bool`` and
  other types raise ``TypeError``.
* A write that fails (``ValueError`` for a value larger than
  ``max_value_len()``, ``CacheFullError``, a serializer error) changes
  nothing: the old value stays readable.
* Conditional writes return ``False`` instead of raising when their
  condition does not hold.
"""

import datetime
import os
from typing import (
    Any,
    Callable,
    Iterable,
    Iterator,
    Literal,
    Mapping,
    NamedTuple,
    Optional,
    Tuple,
    TypedDict,
    TypeVar,
    Union,
    overload,
)

Key = Union[str, bytes, bytearray, memoryview, int, float, bool, None, Tuple["Key", ...]]
TTL = Union[None, int, float, datetime.timedelta]
_T = TypeVar("_T")

MAX_KEY_LEN: int
"""Longest encoded key, in bytes (250)."""
MAX_TTL: int
"""Longest TTL, in seconds (about 97 days)."""
DETACH_AT: int
"""Writes of values at least this many bytes release the GIL (values the
cache holds by reference excepted: they are not copied)."""
HELD_AT: int
"""A ``bytes``, ASCII ``str`` or serialized value of at least this many
bytes (1024) is held by reference, not copied: a read returns the object
itself, and the heap is charged the object's memory."""
__version__: str
"""The package version."""

class CacheStats(TypedDict):
    """``Cache.stats()``: counters and memory summed over the shards. Only
    for type checkers: at run time it is a plain ``dict``."""

    items: int
    """Items stored (expired ones not yet freed included)."""
    live_bytes: int
    """Bytes of item data (headers, keys, values) in segments."""
    segments_used: int
    segments_free: int
    hits: int
    misses: int
    evictions: int
    """Items evicted to make room."""
    evicted_segments: int
    expirations: int
    """Items freed because their TTL ran out."""
    expired_segments: int
    merges: int
    heap_bytes: int
    """The item storage bound (``heap_size``)."""
    hash_table_bytes: int
    segment_header_bytes: int
    admission_bytes: int
    """Merge eviction's admission state (ghosts of keys evicted unread)."""
    total_bytes: int
    """All the memory the cache allocated: ``heap_bytes +
    hash_table_bytes + segment_header_bytes + admission_bytes``."""
    held_items: int
    """Values held by reference (see ``HELD_AT``)."""
    held_bytes: int
    """Their objects' memory, charged to the heap."""
    segments_withheld: int
    """Segments of the heap given up (their memory returned to the OS)
    for ``held_bytes``: ``heap_bytes`` bounds the segments in use and the
    held objects together."""
    shards: int

class ShardRestoreOutcome(TypedDict):
    """What ``Cache(datapool=..., restore=...)`` found for one shard (an
    item of ``Cache.restore_outcome``). Only for type checkers: at run time
    it is a plain ``dict``."""

    status: Literal["not_requested", "restored", "fresh"]
    """``"not_requested"``: ``restore`` was false, the shard started
    empty. ``"restored"``: the shard's items of the last ``save()`` came
    back. ``"fresh"``: a restore was asked for but the shard started empty
    (``reason`` says why)."""
    items: int
    """Items restored (those that expired while down are not counted);
    0 unless ``status`` is ``"restored"``."""
    reason: Optional[str]
    """Why the shard started fresh; ``None`` otherwise."""

class CacheInfo(NamedTuple):
    """``functools``-style counters of a cached function (the same type
    as ``functools.lru_cache``'s ``cache_info()``)."""

    hits: int
    misses: int
    maxsize: None
    currsize: int

class CacheFullError(MemoryError):
    """A write found no room: eviction is ``"none"`` and the heap, or the
    key's hash-table neighbourhood, is full."""

class ManualClock:
    """A clock moved by hand, **for tests**: ``Cache(_clock=clock)`` reads
    time from it instead of the system's monotonic clock, so TTL expiry can
    be tested without sleeping. Starts at 0; counts whole seconds; never
    goes backwards. Share one clock between caches to move them together."""

    def __init__(self) -> None: ...
    def advance(self, seconds: Union[int, float, datetime.timedelta]) -> None:
        """Moves forward by ``seconds`` (fractions of a second are dropped)."""
    def set(self, seconds: int) -> None:
        """Sets the reading; a value earlier than now is ignored."""
    @property
    def now(self) -> int:
        """The reading, in whole seconds."""

class Cache:
    """A memory-bounded, thread-safe cache of Python values with TTLs.

    ``heap_size``: bytes of item storage (default 64 MiB), split evenly
    over the shards; item data never exceeds it. The hash table and
    segment headers come on top (see ``stats()["total_bytes"]``).
    ``segment_size``: bytes per segment (a multiple of 8 from 1 KiB to
    2 MiB; default: the size that cuts the heap into 256 to 512
    segments, 16 KiB to 1 MiB, as more segments give more hits); the
    largest item must fit in one segment.
    ``hash_power``: the table has ``2**hash_power`` buckets of 7 slots
    (default: sized for 1 KiB items filling the heap, grown for smaller ones).
    ``eviction``: ``"merge"`` (default), ``"none"`` (writes fail with
    ``CacheFullError`` when full), ``"random"``, ``"random_fifo"``,
    ``"fifo"``, ``"cte"`` (closest to expiry) or ``"util"`` (least live
    bytes). ``shards``: independently locked parts, a power of two up to
    1024 (default: the CPU count rounded up to a power of two, at most 8,
    fewer if a shard would get under 8 segments of a given
    ``segment_size``, or without one under 256 of the default size: one
    shard for heaps under 512 MiB). ``serializer``: how
    values other than bytes, str and int are stored: any object with
    ``dumps(obj) -> bytes | str`` and ``loads(bytes) -> obj`` (``json``,
    ``orjson``, ``msgpack``...; default ``pickle``, highest protocol:
    only cache pickled data that untrusted code cannot write).
    ``prefault``: make the whole heap resident now (default ``False``),
    so the first fill pays no page faults and memory the machine cannot
    give fails here (``ValueError``) instead of slowing writes later.
    ``_clock``: a ``ManualClock``, for tests.

    Warm restart: ``datapool`` (a ``str`` or ``os.PathLike`` path) keeps
    shard ``i``'s heap in the file ``f"{datapool}.shard{i}"`` instead of
    anonymous memory. ``save()`` writes each shard's metadata beside its
    file and closes the cache; a later ``Cache(..., datapool=same,
    restore=True)`` with the same ``heap_size``, ``segment_size``,
    ``hash_power`` and ``shards`` brings every item back, TTLs included
    (time spent down counts against them). Pass ``shards`` explicitly: the
    default depends on the CPU count. If the files are missing, damaged or
    were made with other settings, or the last run did not ``save()``, the
    shard starts empty and ``restore_outcome`` says why.

    Bad arguments raise ``TypeError`` (wrong type) or ``ValueError`` (out
    of range), with the argument's name in the message.

    ``segcache.Cache`` (this class's Python subclass) is a
    ``collections.abc.MutableMapping``: ``c[k]``, ``c[k] = v`` (no TTL),
    ``del c[k]``, ``k in c``, ``len(c)``, iteration over live keys,
    ``keys()``/``values()``/``items()`` views, ``pop``, ``popitem``,
    ``setdefault``, ``update``, ``get``. It differs from a dict in that it
    is always truthy, compares and hashes by identity, and may drop items
    (eviction, expiry) at any time. ``copy.copy``/``deepcopy``/pickle make
    a new cache with the same settings and live items (not the datapool).
    """

    def __init__(
        self,
        heap_size: Optional[int] = None,
        segment_size: Optional[int] = None,
        hash_power: Optional[int] = None,
        eviction: Optional[str] = None,
        shards: Optional[int] = None,
        datapool: Union[None, str, "os.PathLike[str]"] = None,
        restore: Optional[bool] = None,
        serializer: Any = None,
        prefault: Optional[bool] = None,
        _clock: Optional[ManualClock] = None,
    ) -> None: ...
    @property
    def shards(self) -> int: ...
    @property
    def eviction(self) -> str: ...
    @property
    def serializer(self) -> Any:
        """The serializer given to the constructor, or ``None`` (pickle)."""
    @property
    def datapool(self) -> Optional[str]:
        """The datapool path given to the constructor, or ``None``."""
    @property
    def restore_outcome(self) -> Tuple[ShardRestoreOutcome, ...]:
        """What the constructor found in the datapool, one dict per shard."""
    @property
    def closed(self) -> bool:
        """``True`` once ``save()`` has closed the cache."""
    def save(self) -> None:
        """Saves the cache for a warm restart and closes it: waits for
        calls in progress on other threads, then writes each shard's
        metadata. Afterwards every method raises ``RuntimeError``.
        ``ValueError`` without a datapool (the cache stays open);
        ``OSError`` if a file cannot be written."""
    @overload
    def get(self, key: Key) -> Optional[Any]: ...
    @overload
    def get(self, key: Key, default: _T) -> Union[Any, _T]: ...
    def gets(self, key: Key) -> Optional[Tuple[Any, int]]:
        """``(value, cas_token)``, or ``None`` if ``key`` is missing."""
    def set(self, key: Key, value: Any, ttl: TTL = None) -> None:
        """Stores ``value``, replacing any old one."""
    def add(self, key: Key, value: Any, ttl: TTL = None) -> bool:
        """Stores only if ``key`` is missing; ``False`` if present."""
    def replace(self, key: Key, value: Any, ttl: TTL = None) -> bool:
        """Stores only if ``key`` is present; ``False`` if missing."""
    def cas(self, key: Key, value: Any, cas_token: int, ttl: TTL = None) -> bool:
        """Stores only if ``key`` is still at the version ``cas_token``
        (from ``gets``); ``False`` if it changed since or is missing."""
    def append(self, key: Key, data: Union[bytes, bytearray, memoryview, str]) -> bool:
        """Appends to a bytes or str value (TTL stays); ``False`` if
        missing, ``TypeError`` if the key holds another type."""
    def prepend(self, key: Key, data: Union[bytes, bytearray, memoryview, str]) -> bool:
        """Prepends to a bytes or str value; as ``append``."""
    def incr(self, key: Key, delta: int = 1) -> int:
        """Adds ``delta`` (0 to 2**64-1) to a non-negative int value (or
        decimal bytes/str), wrapping at 2**64; returns the new value and
        keeps the value's type. ``KeyError`` if missing, ``ValueError``
        if the value is not a decimal unsigned integer."""
    def decr(self, key: Key, delta: int = 1) -> int:
        """Subtracts ``delta``, stopping at 0; errors as ``incr``."""
    def touch(self, key: Key, ttl: TTL) -> bool:
        """Gives ``key`` a new TTL; ``False`` if it is missing."""
    def delete(self, key: Key) -> bool:
        """Removes ``key``; ``True`` if it was present."""
    def ttl(self, key: Key) -> Optional[int]:
        """Whole seconds until ``key`` expires (at least 1), or ``None`` if
        it never expires. ``KeyError`` if ``key`` is missing."""
    def get_many(self, keys: Iterable[Key]) -> "dict[Any, Any]":
        """``{key: value}`` for the keys present (the objects passed in);
        missing keys are left out."""
    def set_many(self, mapping: Mapping[Any, Any], ttl: TTL = None) -> None:
        """Stores every pair with one TTL, with the GIL released. Keys and
        values are encoded before anything is written; if a write fails
        (a value too large), the pairs before it stay written."""
    def get_or_set(self, key: Key, factory: Callable[[], _T], ttl: TTL = None) -> Union[Any, _T]:
        """The value of ``key``; if missing, stores and returns
        ``factory()``. Concurrent callers for one missing key run the
        factory once (the others wait for its result); if it raises, its
        caller gets the exception and the next caller retries. A factory
        asking for its own key raises ``RuntimeError``. A result too large
        for the cache is returned uncached."""
    @overload
    def pop(self, key: Key) -> Any: ...
    @overload
    def pop(self, key: Key, *default: _T) -> Union[Any, _T]: ...
    def popitem(self) -> Tuple[Any, Any]:
        """Removes and returns some ``(key, value)``; ``KeyError`` if empty."""
    def setdefault(self, key: Key, default: Any = None) -> Any:
        """The value of ``key``; if missing, stores ``default`` (no TTL)
        and returns it. Atomic."""
    def flush(self, delay: TTL = None) -> None:
        """Removes every item now; with ``delay`` seconds, removes every
        item stored before that moment once it comes."""
    def expire(self) -> int:
        """Frees expired items now; returns how many were freed."""
    def clear(self) -> None:
        """Drops every item; counters other than items and bytes stay."""
    def stats(self) -> CacheStats:
        """Counters and memory, summed over the shards."""
    def max_value_len(self, key_len: int = 1) -> int:
        """The largest value (encoded) storable under a key of ``key_len``
        bytes: copied into the heap, or (a ``bytes``, ASCII ``str`` or
        serialized value, without a datapool) held by reference, up to half
        a shard's heap."""
    def __len__(self) -> int: ...
    def __contains__(self, key: object) -> bool: ...
    def __iter__(self) -> Iterator[Any]:
        """The live keys: copied when iteration starts (one shard lock at
        a time); items removed meanwhile are skipped, items written after
        the start are missed; no key comes twice."""
    def __getitem__(self, key: Key) -> Any: ...
    def __setitem__(self, key: Key, value: Any) -> None: ...
    def __delitem__(self, key: Key) -> None: ...

class CacheSlots(Cache):
    """``Cache`` with the mapping operators (``c[k]``, ``c[k] = v``,
    ``del c[k]``, ``k in c``) as plain C slots, the same operations at a
    lower cost per call; ``segcache.Cache`` derives from it."""

class CachedFunction:
    """A function whose results are kept in a ``Cache`` (made by
    ``segcache.cached``; see there)."""

    cache: Cache
    __wrapped__: Callable[..., Any]
    def __init__(
        self,
        cache: Cache,
        func: Callable[..., Any],
        name: str,
        ttl: TTL = None,
        key: Optional[Callable[..., Any]] = None,
        typed: bool = False,
        is_async: bool = False,
    ) -> None: ...
    def __call__(self, *args: Any, **kwargs: Any) -> Any: ...
    def cache_key(self, *args: Any, **kwargs: Any) -> Tuple[Any, ...]:
        """The cache key a call with these arguments uses."""
    def cache_info(self) -> CacheInfo:
        """Hits, misses, ``maxsize=None`` and this function's entries now
        in the cache."""
    def cache_clear(self) -> None:
        """Removes this function's entries and zeroes the counters."""

class BoundCachedMethod:
    """A ``CachedFunction`` bound to an instance."""

    __self__: Any
    __func__: CachedFunction
    def __call__(self, *args: Any, **kwargs: Any) -> Any: ...
    def cache_key(self, *args: Any, **kwargs: Any) -> Tuple[Any, ...]: ...
    def cache_info(self) -> CacheInfo: ...
    def cache_clear(self) -> None: ...

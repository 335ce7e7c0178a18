"""Type stubs for the native module ``segcache._segcache`` (see src/lib.rs).

Conventions shared by every method:

* ``Key`` and ``Value`` arguments are ``bytes``, ``bytearray``,
  ``memoryview`` or ``str`` (encoded as UTF-8: ``"a"`` and ``b"a"`` are the
  same key); anything else raises ``TypeError``. Values come back as
  ``bytes``. Keys are 1 to ``MAX_KEY_LEN`` bytes; a longer or empty key
  given to a write raises ``ValueError`` (a read of one simply misses).
* ``TTL`` is ``None`` or ``0`` (never expires), ``int``/``float`` seconds
  or a ``datetime.timedelta``. The cache counts whole seconds: fractions
  are dropped and any positive TTL under one second counts as one second.
  Negative, NaN or above ``MAX_TTL`` raises ``ValueError``; ``bool`` and
  other types raise ``TypeError``.
* A write that fails (``ValueError`` for a value larger than
  ``max_value_len()``, ``CacheFullError``) changes nothing: the old value
  stays readable.
* Conditional writes return ``False`` instead of raising when their
  condition does not hold.
"""

import datetime
import os
from typing import Iterable, Literal, Mapping, Optional, Tuple, TypedDict, TypeVar, Union

Key = Union[bytes, bytearray, memoryview, str]
Value = Union[bytes, bytearray, memoryview, str]
TTL = Union[None, int, float, datetime.timedelta]
_T = TypeVar("_T")

MAX_KEY_LEN: int
"""Longest key, in bytes (250)."""
MAX_TTL: int
"""Longest TTL, in seconds (about 97 days)."""
DETACH_AT: int
"""Writes of values at least this many bytes release the GIL."""

class ShardRestoreOutcome(TypedDict):
    """What ``Cache(datapool=..., restore=...)`` found for one shard (an
    item of ``Cache.restore_outcome``). Only for type checkers: at run time
    it is a plain ``dict``, and this name exists only in the stub (import
    it from ``segcache._segcache`` under ``typing.TYPE_CHECKING``)."""

    status: Literal["not_requested", "restored", "fresh"]
    """``"not_requested"``: ``restore`` was false, the shard started
    empty. ``"restored"``: the shard's items of the last ``save()`` came
    back. ``"fresh"``: a restore was asked for but the shard started empty
    (``reason`` says why)."""
    items: int
    """Items restored (those that expired while down are not counted);
    0 unless ``status`` is ``"restored"``."""
    reason: Optional[str]
    """Why the shard started fresh (no metadata after a crash or on the
    first start, changed settings, a checksum mismatch...); ``None``
    otherwise."""

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
    """A memory-bounded, thread-safe cache of byte strings with TTLs.

    ``heap_size``: bytes of item storage (default 64 MiB), split evenly
    over the shards; item data never exceeds it. The hash table and
    segment headers come on top (see ``stats()["total_bytes"]``).
    ``segment_size``: bytes per segment (default 1 MiB; a multiple of 8
    from 1 KiB to 2 MiB); the largest item must fit in one segment.
    ``hash_power``: the table has ``2**hash_power`` buckets of 7 slots
    (default: sized for ~100-byte items filling the heap).
    ``eviction``: ``"merge"`` (default), ``"none"`` (writes fail with
    ``CacheFullError`` when full), ``"random"``, ``"random_fifo"``,
    ``"fifo"``, ``"cte"`` (closest to expiry) or ``"util"`` (least live
    bytes). ``shards``: independently locked parts, a power of two up to
    1024 (default: the CPU count rounded up to a power of two, at most 8,
    fewer if a shard would get under 8 segments). ``_clock``: a
    ``ManualClock``, for tests.

    Warm restart: ``datapool`` (a ``str`` or ``os.PathLike`` path) keeps
    shard ``i``'s heap in the file ``f"{datapool}.shard{i}"`` (created or
    resized; tmpfs, a DAX filesystem or a disk) instead of anonymous
    memory. ``save()`` writes each shard's metadata beside its file
    (``.meta``) and closes the cache; a later ``Cache(..., datapool=same,
    restore=True)`` with the same ``heap_size``, ``segment_size``,
    ``hash_power`` and ``shards`` brings every item back, values, flags,
    CAS tokens and TTLs included (time spent down counts against TTLs).
    Pass ``shards`` explicitly: the default depends on the CPU count. If
    the files are missing, damaged or were made with other settings, or
    the last run did not ``save()``, the shard starts empty and
    ``restore_outcome`` says why. The metadata is consumed on start, so a
    crash later restarts empty, never stale. ``restore=True`` without a
    datapool raises ``ValueError``; a datapool that cannot be opened,
    ``OSError``.

    Bad arguments raise ``TypeError`` (wrong type) or ``ValueError`` (out
    of range), with the argument's name in the message.

    Mapping protocol: ``c[k]`` (``KeyError`` if missing), ``c[k] = v``
    (no TTL), ``del c[k]`` (``KeyError`` if missing), ``k in c``,
    ``len(c)``. A cache is always truthy, even when empty, and is not
    iterable (``TypeError``).
    """

    def __init__(
        self,
        heap_size: Optional[int] = 64 << 20,
        segment_size: Optional[int] = 1 << 20,
        hash_power: Optional[int] = None,
        eviction: Optional[str] = "merge",
        shards: Optional[int] = None,
        datapool: Union[None, str, "os.PathLike[str]"] = None,
        restore: bool = False,
        _clock: Optional[ManualClock] = None,
    ) -> None: ...
    @property
    def shards(self) -> int: ...
    @property
    def eviction(self) -> str: ...
    @property
    def datapool(self) -> Optional[str]:
        """The datapool path given to the constructor, or ``None``."""
    @property
    def restore_outcome(self) -> Tuple[ShardRestoreOutcome, ...]:
        """What the constructor found in the datapool, one dict per shard
        (in shard order)::

            outcome = cache.restore_outcome
            if all(o["status"] == "restored" for o in outcome):
                print("restored", sum(o["items"] for o in outcome), "items")
            else:
                print("started (partly) empty:", [o["reason"] for o in outcome if o["reason"]])

        Still readable after ``save()``."""
    @property
    def closed(self) -> bool:
        """``True`` once ``save()`` has closed the cache."""
    def save(self) -> None:
        """Saves the cache for a warm restart and closes it: waits for
        calls in progress on other threads, then flushes each shard's
        datapool file and writes its metadata. Afterwards (even if the save
        failed) every method raises ``RuntimeError``; ``closed``,
        ``datapool``, ``restore_outcome``, ``shards``, ``eviction`` and
        ``repr`` still work. Without a datapool it raises ``ValueError``
        and the cache stays open; ``OSError`` if a file cannot be
        written."""
    def get(self, key: Key, default: _T = None) -> Union[bytes, _T]:  # type: ignore[assignment]
        """The value of ``key``, or ``default`` if it is missing or expired."""
    def gets(self, key: Key) -> Optional[Tuple[bytes, int]]:
        """``(value, cas_token)``, or ``None`` if ``key`` is missing."""
    def flags(self, key: Key) -> Optional[int]:
        """The flags stored with ``key`` (0 unless set), or ``None``."""
    def set(self, key: Key, value: Value, ttl: TTL = None, flags: int = 0) -> None:
        """Stores ``value``, replacing any old one. ``flags``: a 32-bit int
        kept with the item (memcache client flags)."""
    def add(self, key: Key, value: Value, ttl: TTL = None, flags: int = 0) -> bool:
        """Stores only if ``key`` is missing; ``False`` if present."""
    def replace(self, key: Key, value: Value, ttl: TTL = None, flags: int = 0) -> bool:
        """Stores only if ``key`` is present; ``False`` if missing."""
    def cas(self, key: Key, value: Value, cas_token: int, ttl: TTL = None, flags: int = 0) -> bool:
        """Stores only if ``key`` is still at the version ``cas_token``
        (from ``gets``); ``False`` if it changed since or is missing."""
    def append(self, key: Key, data: Value) -> bool:
        """Appends to the value (TTL and flags stay); ``False`` if missing."""
    def prepend(self, key: Key, data: Value) -> bool:
        """Prepends to the value (TTL and flags stay); ``False`` if missing."""
    def incr(self, key: Key, delta: int = 1) -> int:
        """Adds ``delta`` (0 to 2**64-1) to a decimal value, wrapping at
        2**64; returns the new value. ``KeyError`` if missing,
        ``ValueError`` if the value is not a decimal unsigned integer."""
    def decr(self, key: Key, delta: int = 1) -> int:
        """Subtracts ``delta``, stopping at 0; errors as ``incr``."""
    def touch(self, key: Key, ttl: TTL) -> bool:
        """Gives ``key`` a new TTL; ``False`` if it is missing."""
    def delete(self, key: Key) -> bool:
        """Removes ``key``; ``True`` if it was present."""
    def ttl(self, key: Key) -> Optional[int]:
        """Whole seconds until ``key`` expires (at least 1), or ``None`` if
        it never expires. ``KeyError`` if ``key`` is missing."""
    def get_many(self, keys: Iterable[Key]) -> dict:
        """``{key: value}`` for the keys present (the objects passed in);
        missing keys are left out."""
    def set_many(self, mapping: Mapping[Key, Value], ttl: TTL = None) -> None:
        """Stores every pair with one TTL, with the GIL released. Types are
        checked before anything is written; if a write fails (a value too
        large), the pairs before it stay written and the error is raised."""
    def flush(self, delay: TTL = None) -> None:
        """Removes every item now; with ``delay`` seconds, removes every
        item stored before that moment once it comes."""
    def expire(self) -> int:
        """Frees expired items now (they are freed as the cache goes
        anyway, and never returned); returns how many were freed."""
    def clear(self) -> None:
        """Drops every item; counters other than items and bytes stay."""
    def stats(self) -> dict:
        """Counters and memory as ints: items, live_bytes, segments_used,
        segments_free, hits, misses, evictions, evicted_segments,
        expirations, expired_segments, merges, heap_bytes,
        hash_table_bytes, segment_header_bytes, total_bytes, shards."""
    def max_value_len(self, key_len: int = 1) -> int:
        """The largest value storable under a key of ``key_len`` bytes."""
    def _get_flagged(self, key: Key) -> Optional[Tuple[bytes, int]]:
        """``(value, flags)`` or ``None``; used by ``cached``."""
    def __len__(self) -> int: ...
    def __bool__(self) -> bool: ...
    def __contains__(self, key: object) -> bool: ...
    def __getitem__(self, key: Key) -> bytes: ...
    def __setitem__(self, key: Key, value: Value) -> None: ...
    def __delitem__(self, key: Key) -> None: ...

//! The operation vocabulary: one spelling of every cache operation, shared
//! by the core, the storage thread, [`ShardedCache`](crate::ShardedCache),
//! the server and the bindings.
//!
//! A [`Request`] is one memcache command's worth of work (`get`, `gat`,
//! `cas`, `ms` with its flags, `ma` with auto-create...) and
//! [`Segcache::execute`](crate::Segcache::execute) runs it as **one step**:
//! the condition check and the change happen together, so a failed
//! conditional store never touches the item, and no other request can run
//! between the parts of a composite command. The semantics follow
//! memcached 1.6's; the places where they differ are documented on the
//! field concerned.
//!
//! This module owns the types and their documentation only; what each
//! request does lives in `cache/` ([`Segcache::execute`](crate::Segcache::execute)
//! and the read, write and remove paths it dispatches to).

use crate::cache::{Expired, OwnedItem, Stats};
use crate::Error;
use std::time::Duration;

/// How a store treats the item already under its key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StoreMode {
    /// Store whatever is there (memcache `set`).
    Set,
    /// Store only if the key is absent, else [`Error::NotStored`].
    Add,
    /// Store only if the key is present, else [`Error::NotStored`].
    Replace,
    /// Add the value after the present one, else [`Error::NotStored`]. The
    /// item keeps its flags and TTL: the store's own are ignored, as
    /// memcached does.
    Append,
    /// Put the value before the present one, else [`Error::NotStored`];
    /// flags and TTL as for [`StoreMode::Append`].
    Prepend,
}

impl StoreMode {
    /// The memcache command name (`set`, `add`, ...).
    pub fn name(self) -> &'static str {
        match self {
            StoreMode::Set => "set",
            StoreMode::Add => "add",
            StoreMode::Replace => "replace",
            StoreMode::Append => "append",
            StoreMode::Prepend => "prepend",
        }
    }
}

/// How long an item lives: given when storing, reported when reading.
///
/// TTLs are kept in whole seconds of a coarse clock: a TTL under a second
/// counts as one second and fractions are rounded **up**, so an item is
/// never dropped before the TTL asked for except by the precision bound
/// below. An item is never served after its deadline, and it may go up to
/// `max(1 s, TTL / 16)` **before** it (items that expire together share a
/// segment, and a segment goes with its earliest item). Deadlines are
/// kept on the cache's clock: unless a [`ManualClock`](crate::ManualClock)
/// is given, the kernel's coarse monotonic clock, up to one tick
/// (typically 1-4 ms) behind the precise one, so on a precise clock an
/// item can be served up to one tick past its deadline.
///
/// ```
/// use std::time::Duration;
/// use segcache::Ttl;
///
/// assert_eq!(Ttl::from(Duration::from_secs(30)), Ttl::After(Duration::from_secs(30)));
/// assert_eq!(Ttl::from(None), Ttl::Never);
/// // memcache's convention: an exptime of zero means "never".
/// assert_eq!(Ttl::from(Duration::ZERO), Ttl::Never);
/// assert_eq!(Ttl::secs(90), Ttl::After(Duration::from_secs(90)));
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Ttl {
    /// Never expires (it can still be evicted).
    #[default]
    Never,
    /// Expires after this long (at most [`MAX_TTL`](crate::MAX_TTL)
    /// seconds). `After(Duration::ZERO)` means [`Ttl::Never`].
    After(Duration),
    /// Already expired (memcache's negative or past exptime): a store with
    /// it leaves nothing readable but still checks its condition, so a
    /// failed `add`/`cas` keeps the old item and a successful `set` removes
    /// it; a touch with it removes the item.
    Expired,
}

impl Ttl {
    /// A TTL of `secs` seconds (zero means [`Ttl::Never`]).
    pub fn secs(secs: u64) -> Ttl {
        Ttl::from(Duration::from_secs(secs))
    }

    /// The time left, `None` for [`Ttl::Never`] (and `Some(ZERO)` for
    /// [`Ttl::Expired`]).
    pub fn duration(self) -> Option<Duration> {
        match self {
            Ttl::Never => None,
            Ttl::After(d) if d.is_zero() => None,
            Ttl::After(d) => Some(d),
            Ttl::Expired => Some(Duration::ZERO),
        }
    }

    /// Whole clock seconds: `Ok(None)` for never, `Ok(Some(0))` for
    /// already expired, otherwise the TTL rounded up to a whole second.
    pub(crate) fn to_secs(self) -> Result<Option<u32>, Error> {
        match self {
            Ttl::Never => Ok(None),
            Ttl::Expired => Ok(Some(0)),
            Ttl::After(d) if d.is_zero() => Ok(None),
            Ttl::After(d) => {
                let secs = d.as_secs() + u64::from(d.subsec_nanos() > 0);
                if secs > crate::MAX_TTL as u64 {
                    Err(Error::TtlOutOfRange { secs })
                } else {
                    Ok(Some(secs as u32))
                }
            }
        }
    }
}

impl From<Duration> for Ttl {
    #[inline]
    fn from(d: Duration) -> Ttl {
        if d.is_zero() {
            Ttl::Never
        } else {
            Ttl::After(d)
        }
    }
}

impl From<Option<Duration>> for Ttl {
    #[inline]
    fn from(d: Option<Duration>) -> Ttl {
        d.map_or(Ttl::Never, Ttl::from)
    }
}

/// One store: every memcache store command (`set`, `add`, `replace`,
/// `append`, `prepend`, `cas`, `ms`) is a `Store` with a mode and options.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Store<B = Vec<u8>> {
    /// How the store treats the present item.
    pub mode: StoreMode,
    /// The key (1 to [`MAX_KEY_LEN`](crate::MAX_KEY_LEN) bytes).
    pub key: B,
    /// The value (appended or prepended data for those modes).
    pub value: B,
    /// Memcache client flags (ignored by append and prepend).
    pub flags: u32,
    /// The item's TTL (ignored by append and prepend).
    pub ttl: Ttl,
    /// Compare-and-swap: store only if the present item's token is this
    /// ([`Error::Exists`] if it differs, [`Error::NotFound`] if absent).
    pub cas: Option<u64>,
    /// Meta `I` (invalidate): with a `cas` that does not match, store anyway
    /// and mark the new item stale. (memcached accepts only a token *older*
    /// than the item's; tokens here are not ordered, so any mismatch is.)
    pub invalidate: bool,
    /// The value is an [`External`](crate::External)'s encoding
    /// ([`External::encode`](crate::External::encode)), not bytes to
    /// copy: the item holds the handle and its weight is charged to the
    /// heap ([`Segcache::set_external`](crate::Segcache::set_external)
    /// says what is refused). Not for append or prepend.
    pub external: bool,
    /// Whether the answer carries the new item's CAS token (memcached's
    /// binary protocol and meta `c` return one; a text `set` does not).
    /// Without it the answer's token is 0. Ask only when it is used: a
    /// segment one of whose items' tokens was handed out appends the
    /// overwrites of its items ([`Segcache::set`](crate::Segcache::set)
    /// says why).
    pub token: bool,
}

impl<B> Store<B> {
    /// A plain store in `mode`: no flags, no TTL, no compare, no token
    /// asked for.
    pub fn new(mode: StoreMode, key: B, value: B) -> Self {
        Store {
            mode,
            key,
            value,
            flags: 0,
            ttl: Ttl::Never,
            cas: None,
            invalidate: false,
            external: false,
            token: false,
        }
    }

    /// A plain `set`: no compare, no external value, no token asked for
    /// ([`Segcache::set`](crate::Segcache::set) runs exactly this).
    #[inline(always)]
    pub(crate) fn is_plain_set(&self) -> bool {
        self.mode == StoreMode::Set && self.cas.is_none() && !self.external && !self.token
    }

    /// The same store with its key and value through `f`, key first (e.g.
    /// borrowed bytes copied into `Vec`s to travel to another thread).
    pub(crate) fn map_bytes<C>(&self, mut f: impl FnMut(&B) -> C) -> Store<C> {
        Store {
            mode: self.mode,
            key: f(&self.key),
            value: f(&self.value),
            flags: self.flags,
            ttl: self.ttl,
            cas: self.cas,
            invalidate: self.invalidate,
            external: self.external,
            token: self.token,
        }
    }
}

/// Options of a read (`get`, `gets`, `gat`, `mg`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GetOpts {
    /// `gat`/`gats`/`mg T`: give the item this TTL; its CAS token stays.
    /// [`Ttl::Expired`] returns the item and then removes it.
    pub touch: Option<Ttl>,
    /// `mg N`: on a miss, create an empty item with this TTL and hand the
    /// caller the win token ([`Found::win`]). As in memcached, that read
    /// counts as the new item's first fetch if it `bump`s (a later
    /// [`Found::hit_before`] is true).
    pub vivify: Option<Ttl>,
    /// `mg R`: hand out the win token if the item has less than this many
    /// seconds left.
    pub recache: Option<u32>,
    /// Hand out win tokens (memcache `mg`): a stale item, a `recache`
    /// hit or a `vivify` miss gives this caller the token ([`Found::win`]).
    /// Classic `get`/`gat` (false) neither give nor take one.
    pub win_tokens: bool,
    /// Judge `recache` on the TTL the touch leaves rather than the one the
    /// item had (memcached applies `T` and `R` in the order they came).
    pub recache_after_touch: bool,
    /// Count a hit or miss and an access for eviction (false: memcache
    /// `mg u`, a peek).
    pub bump: bool,
    /// Copy the item's CAS token into the answer (`gets`, `gats`, `mg c`,
    /// every binary read); without it [`OwnedItem::cas`] is 0. As with
    /// [`Store::token`], a token handed out makes its item's segment
    /// append overwrites instead of writing them in place.
    pub token: bool,
}

impl Default for GetOpts {
    fn default() -> Self {
        GetOpts {
            touch: None,
            vivify: None,
            recache: None,
            win_tokens: false,
            recache_after_touch: false,
            bump: true,
            token: false,
        }
    }
}

/// Options of a delete (`delete`, `md`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeleteOpts {
    /// Delete only if the item's token is this.
    pub cas: Option<u64>,
    /// `md I`: keep the item but mark it stale, with a new CAS token, so
    /// the next reader wins the right to recache it.
    pub invalidate: bool,
    /// `md I T`: the stale item's new TTL.
    pub ttl: Option<Ttl>,
}

/// Options of an arithmetic update (`incr`, `decr`, `ma`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ArithOpts {
    /// Add (true) or subtract (false, stopping at 0) the delta.
    pub incr: bool,
    /// The amount; adding wraps at 2^64.
    pub delta: u64,
    /// Update only if the item's token is this.
    pub cas: Option<u64>,
    /// `ma N`/`J`: on a miss, create the item with this value (the delta is
    /// not applied) and TTL.
    pub vivify: Option<(u64, Ttl)>,
    /// `ma T`: the updated item's new TTL (default: keep the remaining one).
    pub ttl: Option<Ttl>,
    /// Whether the answer carries the item's new CAS token (memcached's
    /// binary protocol and meta `c` return one; a text `incr` does not);
    /// without it the token is 0. As [`Store::token`]: ask only when used.
    pub token: bool,
}

impl ArithOpts {
    /// A plain `incr` (or `decr`) by `delta`.
    pub fn new(incr: bool, delta: u64) -> Self {
        ArithOpts {
            incr,
            delta,
            cas: None,
            vivify: None,
            ttl: None,
            token: false,
        }
    }
}

/// One operation, run as one atomic step by
/// [`Segcache::execute`](crate::Segcache::execute), the storage thread and
/// [`ShardedCache::execute`](crate::ShardedCache::execute).
///
/// `B` is the byte container of keys and values: `&[u8]` to run in place,
/// `Vec<u8>` (the default) to send to another thread.
///
/// ```
/// use segcache::{Request, Response, Segcache, Store, StoreMode, Ttl};
///
/// let mut cache = Segcache::builder().build()?;
/// cache.set("k", "v", 0, None)?;
/// // memcache `add k 0 -1 1`: the key exists, so nothing changes.
/// let add = Store { ttl: Ttl::Expired, ..Store::new(StoreMode::Add, &b"k"[..], &b"w"[..]) };
/// let r = cache.execute(&Request::Store(add));
/// assert!(matches!(r, Response::Stored(Err(segcache::Error::NotStored))));
/// assert_eq!(cache.get("k").unwrap().value(), b"v");
/// # Ok::<(), segcache::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Request<B = Vec<u8>> {
    /// Read (and maybe touch) an item: [`Response::Get`].
    Get {
        /// The key.
        key: B,
        /// Touch, vivify, recache and counting options.
        opts: GetOpts,
    },
    /// Store an item: [`Response::Stored`].
    Store(Store<B>),
    /// Remove (or invalidate) an item: [`Response::Deleted`].
    Delete {
        /// The key.
        key: B,
        /// Compare and invalidate options.
        opts: DeleteOpts,
    },
    /// Add to or subtract from a decimal value: [`Response::Number`].
    Arith {
        /// The key.
        key: B,
        /// Direction, delta and options.
        opts: ArithOpts,
    },
    /// Give an item a new TTL, keeping its CAS token: [`Response::Touched`].
    Touch {
        /// The key.
        key: B,
        /// The new TTL.
        ttl: Ttl,
    },
    /// Drop every item stored before `delay` from now, at that time (zero:
    /// now): [`Response::Done`].
    Flush {
        /// How long until the flush.
        delay: Duration,
    },
    /// Free expired segments: [`Response::Expired`].
    Expire,
    /// Drop everything now: [`Response::Done`].
    Clear,
    /// Counters: [`Response::Stats`].
    Stats,
    /// Items held: [`Response::Len`].
    Len,
    /// The live items of one segment, by index from 0 to the
    /// [`Walked::segments`] the response gives: [`Response::Walked`]. Walking
    /// every index visits every item that stays put meanwhile once, one
    /// segment at a time, so a large cache can be listed in steps with
    /// other requests in between (an item written or moved meanwhile may
    /// be seen twice or missed). Counts nothing.
    Walk {
        /// Which segment (of a sharded cache: the shards' segments
        /// interleaved).
        segment: u32,
    },
}

impl<B> Request<B> {
    /// The same request with its key and value through `f` (see
    /// [`Store::map_bytes`]).
    pub(crate) fn map_bytes<C>(&self, mut f: impl FnMut(&B) -> C) -> Request<C> {
        match self {
            Request::Get { key, opts } => Request::Get {
                key: f(key),
                opts: *opts,
            },
            Request::Store(store) => Request::Store(store.map_bytes(f)),
            Request::Delete { key, opts } => Request::Delete {
                key: f(key),
                opts: *opts,
            },
            Request::Arith { key, opts } => Request::Arith {
                key: f(key),
                opts: *opts,
            },
            Request::Touch { key, ttl } => Request::Touch {
                key: f(key),
                ttl: *ttl,
            },
            Request::Flush { delay } => Request::Flush { delay: *delay },
            Request::Expire => Request::Expire,
            Request::Clear => Request::Clear,
            Request::Stats => Request::Stats,
            Request::Len => Request::Len,
            Request::Walk { segment } => Request::Walk { segment: *segment },
        }
    }
}

/// One item as [`Request::Walk`] lists it: what an operator's key dump
/// shows, without the value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Listed {
    /// The key.
    pub key: Vec<u8>,
    /// Time left.
    pub ttl: Ttl,
    /// The item's CAS token.
    pub cas: u64,
    /// Read since it was written.
    pub fetched: bool,
    /// Bytes the item takes in its segment (header, key, value).
    pub size: u32,
}

/// [`Request::Walk`]'s answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Walked {
    /// The segment's live items.
    pub items: Vec<Listed>,
    /// How many segment indexes there are: walk `0..segments`.
    pub segments: u32,
}

/// A read's result: the item and what memcache's meta protocol reports
/// about it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Found {
    /// The item (an empty one if this read created it with `vivify`).
    pub item: OwnedItem,
    /// `W`: this caller won the right to recache the item.
    pub win: bool,
    /// `X`: the item was invalidated and is stale.
    pub stale: bool,
    /// `Z`: another caller already holds the win token.
    pub won_before: bool,
    /// `h`: the item had been read before this request.
    pub hit_before: bool,
    /// True if this read created the item (`vivify` on a miss).
    pub vivified: bool,
}

/// The answer to a [`Request`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Response {
    /// For [`Request::Get`]: `Ok(None)` on a miss; an error only for a
    /// bad touch or vivify TTL, or a failed vivify.
    Get(Result<Option<Found>, Error>),
    /// For [`Request::Store`]: the new item's CAS token (0 when the store
    /// used [`Ttl::Expired`] and left nothing readable).
    Stored(Result<u64, Error>),
    /// For [`Request::Delete`]: [`Error::NotFound`] or [`Error::Exists`].
    Deleted(Result<(), Error>),
    /// For [`Request::Arith`]: the new value and the item's new CAS token.
    Number(Result<(u64, u64), Error>),
    /// For [`Request::Touch`]: [`Error::NotFound`] if absent.
    Touched(Result<(), Error>),
    /// For [`Request::Expire`].
    Expired(Expired),
    /// For [`Request::Stats`].
    Stats(Box<Stats>),
    /// For [`Request::Len`].
    Len(usize),
    /// For [`Request::Walk`].
    Walked(Walked),
    /// For [`Request::Flush`] and [`Request::Clear`].
    Done,
}

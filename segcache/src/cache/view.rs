//! What reads hand out: [`Item`], a view borrowed from the cache's
//! memory, and [`OwnedItem`], its copy; and the CAS token's bit layout.
//!
//! Must never: copy on the borrowed path, or decode a field before its
//! accessor is called (but the value's place, which every read needs and
//! `get`'s key compare has already read).

use crate::hashtable::Location;
use crate::item::{self, RawItem};
use crate::ops::Ttl;
use crate::segments::Segments;
use crate::External;
use std::time::Duration;

/// An item read from the cache, borrowed from its memory: no copy.
///
/// [`Segcache::get`](crate::Segcache::get) returns one; [`ShardedCache::read_with`](crate::ShardedCache::read_with)
/// lends one to a closure while the shard is locked. [`OwnedItem`] is the
/// copied form the other handles return.
///
/// The value's place comes with the read (`get` takes it from its key
/// compare, which has read the header anyway); every other accessor decodes
/// its field from the item's bytes and its segment's header when called,
/// so a read pays only for what its caller looks at.
#[derive(Clone, Copy)]
pub struct Item<'a> {
    pub(super) raw: RawItem<'a>,
    /// The segments, for the item's header and deadline.
    pub(super) segs: &'a Segments,
    pub(super) loc: Location,
    /// Cache time of the read (for [`ttl`](Self::ttl)).
    pub(super) now: u32,
    /// The value's bytes, placed by the read (the header is decoded once,
    /// by the key compare on `get`'s short path).
    pub(super) value: &'a [u8],
}

impl<'a> Item<'a> {
    /// The item `raw` at `loc` in `segs`, read at `now`; its value found
    /// from its header.
    #[inline(always)]
    pub(super) fn new(raw: RawItem<'a>, segs: &'a Segments, loc: Location, now: u32) -> Item<'a> {
        Item {
            raw,
            segs,
            loc,
            now,
            value: raw.value(),
        }
    }

    /// The item's key.
    #[inline]
    pub fn key(&self) -> &'a [u8] {
        self.raw.key()
    }

    /// The item's value, without a copy (for an [`External`] value, its
    /// [encoding](External::encode): read it with
    /// [`external`](Self::external)).
    #[inline]
    pub fn value(&self) -> &'a [u8] {
        self.value
    }

    /// The item's value if it is [`External`] (stored with
    /// [`Segcache::set_external`](crate::Segcache::set_external)): its
    /// handle stays valid while the cache holds the item, so read it where
    /// the item is borrowed (in a [`ShardedCache`](crate::ShardedCache),
    /// inside `read_with`).
    #[inline]
    pub fn external(&self) -> Option<External> {
        if self.raw.is_external() {
            External::decode(self.value)
        } else {
            None
        }
    }

    /// Memcache client flags stored with the item (0 unless set).
    #[inline]
    pub fn flags(&self) -> u32 {
        self.raw.client_flags()
    }

    /// This version's compare-and-swap token: unique per item version,
    /// changed by every write to the key but kept by a touch (and, rarely,
    /// changed when eviction compacts the item's segment).
    #[inline]
    pub fn cas(&self) -> u64 {
        cas_token(self.raw, self.segs, self.loc)
    }

    /// Time left: [`Ttl::Never`] or [`Ttl::After`] (whole seconds).
    #[inline]
    pub fn ttl(&self) -> Ttl {
        match self.segs.deadline(self.loc) {
            0 => Ttl::Never,
            at => Ttl::After(Duration::from_secs(at.saturating_sub(self.now) as u64)),
        }
    }

    /// Copies the item out of the cache, its CAS token with it (which
    /// makes one: see [`cas`](Self::cas)).
    pub fn to_owned(&self) -> OwnedItem {
        OwnedItem::from(*self)
    }

    /// Copies the item out, with its token only if `token` (else the
    /// copy's [`OwnedItem::cas`] is 0 and no token is made).
    #[inline]
    pub(crate) fn copy_out(&self, token: bool) -> OwnedItem {
        OwnedItem {
            key: self.key().to_vec(),
            value: self.value().to_vec(),
            flags: self.flags(),
            cas: self.cas_if(token),
            ttl: self.ttl(),
        }
    }

    /// [`cas`](Self::cas) if `token`, else 0 (and no token made).
    #[inline(always)]
    fn cas_if(&self, token: bool) -> u64 {
        if token {
            self.cas()
        } else {
            0
        }
    }
}

/// Makes `buf` a copy of `bytes`, in place when the lengths agree (a
/// reply buffer refilled with an item of the same size: no call to
/// `memcpy` for short keys and values).
#[inline(always)]
fn refill_bytes(buf: &mut Vec<u8>, bytes: &[u8]) {
    if buf.len() == bytes.len() {
        item::copy_bytes(buf, bytes);
    } else {
        buf.clear();
        buf.extend_from_slice(bytes);
    }
}

/// An item copied out of the cache, for callers that cannot hold a borrow
/// (the storage thread's replies, [`ShardedCache::get`](crate::ShardedCache::get)).
/// Same accessors as [`Item`], but the CAS token is copied only when the
/// read asked for it ([`GetOpts::token`](crate::ops::GetOpts::token),
/// [`ShardedCache::gets`](crate::ShardedCache::gets), [`Item::to_owned`]):
/// a token, once made, turns overwrites in place off in the item's
/// segment, so a plain read does not make one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnedItem {
    pub(super) key: Vec<u8>,
    pub(super) value: Vec<u8>,
    pub(super) flags: u32,
    pub(super) cas: u64,
    pub(super) ttl: Ttl,
}

impl OwnedItem {
    /// Becomes a copy of `item`, in the buffers it already has, with its
    /// token only if `token` (else 0).
    #[inline]
    pub(crate) fn refill(&mut self, item: Item<'_>, token: bool) {
        refill_bytes(&mut self.key, item.key());
        refill_bytes(&mut self.value, item.value());
        (self.flags, self.cas, self.ttl) = (item.flags(), item.cas_if(token), item.ttl());
    }

    /// The item's key.
    pub fn key(&self) -> &[u8] {
        &self.key
    }

    /// The item's value.
    pub fn value(&self) -> &[u8] {
        &self.value
    }

    /// Takes the value out without copying it again.
    pub fn into_value(self) -> Vec<u8> {
        self.value
    }

    /// Memcache client flags.
    pub fn flags(&self) -> u32 {
        self.flags
    }

    /// The compare-and-swap token (see [`Item::cas`]) if the read asked
    /// for one, else 0.
    pub fn cas(&self) -> u64 {
        self.cas
    }

    /// Time left when the item was read.
    pub fn ttl(&self) -> Ttl {
        self.ttl
    }
}

impl std::fmt::Debug for Item<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Item")
            .field("key", &self.key())
            .field("value", &self.value())
            .field("flags", &self.flags())
            .field("cas", &self.cas())
            .field("ttl", &self.ttl())
            .finish()
    }
}

/// Items are equal when every accessor agrees.
impl PartialEq for Item<'_> {
    fn eq(&self, other: &Self) -> bool {
        (
            self.key(),
            self.value(),
            self.flags(),
            self.cas(),
            self.ttl(),
        ) == (
            other.key(),
            other.value(),
            other.flags(),
            other.cas(),
            other.ttl(),
        )
    }
}

impl Eq for Item<'_> {}

/// The CAS token of the item `raw` at `loc` in `segs`: the one it keeps,
/// or one made of its segment's generation and its location (`generation
/// 23 | segment 20 | offset 21` bits), unique per item version (across the
/// shards of a sharded cache too: each shard's generations are its own
/// residue modulo the shard count). The only maker of tokens: a token made
/// from a location turns overwrites in place off in its segment until the
/// segment's next generation ([`Segments::note_token`]), since one would
/// keep the location.
#[inline]
pub(super) fn cas_token(raw: RawItem<'_>, segs: &Segments, loc: Location) -> u64 {
    if let Some(kept) = raw.kept_cas() {
        return kept;
    }
    segs.note_token(loc.seg);
    let header = &segs.headers[loc.seg as usize];
    ((header.generation as u64 & 0x7f_ffff) << 41) | ((loc.seg as u64) << 21) | loc.offset as u64
}

impl From<Item<'_>> for OwnedItem {
    fn from(item: Item<'_>) -> Self {
        item.copy_out(true)
    }
}

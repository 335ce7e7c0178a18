//! The hash table: key -> (segment id, offset), grown incrementally as items
//! arrive.
//!
//! Two arrays of `u64`. The *control* array has one word per bucket: the
//! 8-bit tags of the bucket's seven slots (byte `s` for slot `s`, 0 when
//! the slot is empty) and, in byte 7, the bucket's *reach* as a home (how
//! many buckets past it hold items whose hash lands here, 0..=7). The
//! *slot* array has seven words of *item info* per bucket:
//!
//! ```text
//!  63   59 58      51 50    44 43  41 40          21 20            0
//! +-------+----------+--------+------+--------------+---------------+
//! |check 5| stamp (8)|freq (7)|disp 3| segment (20) | offset (21)   |
//! +-------+----------+--------+------+--------------+---------------+
//! ```
//!
//! An item lives in its home bucket or up to [`MAX_DISPLACEMENT`] buckets
//! after it (`disp` says how far); the array has that many spare buckets
//! past the last home, so windows never wrap. The home is `hash`'s low 32
//! bits scaled to the number of homes (any count, not only powers of two),
//! the tag is its top byte and `check` five more bits, so a lookup reads
//! one control word (the seven tags matched at once: SSE2 on x86-64, SWAR
//! elsewhere), then only the slots whose tag matches, then the item's key.
//! A miss whose tags say no touches nothing but the dense control array.
//! Counting an access writes the slot only when its value changes (the
//! counter or the second it was last counted, `stamp`). An insert whose
//! window is full first makes room hopscotch-style: the nearest free slot
//! up to [`HOP_SEARCH`] buckets further on is moved back, one item at a
//! time (each staying inside its own window), until it lies in the window;
//! only then does the window evict or the table grow.
//!
//! **Growth.** When an insert finds its window full and the caller says
//! the heap has room for more items than the table holds, a larger table
//! is allocated and the old one drained into it a few homes per operation
//! (`grow_step`), so no call pays in proportion to the table. During the
//! drain a key lives in exactly one of the two: homes before the drain
//! cursor only in the new table, the rest in the old one or (new keys) the
//! new one. Draining needs each item's hash again; the caller supplies it
//! from the key in the heap. Slot positions handed out (`lookup`,
//! `locate`) stay valid until the next insert or `grow_step`.
//!
//! The table never reads item bytes itself and never holds a pointer:
//! callers pass closures that compare keys or rehash a location.
//!
//! Files: this one has the entry layout and [`HashTable`], the table as
//! the cache sees it, growth included; `table.rs` one generation's
//! arrays and their probing; `key_hash.rs` the key hash.

mod key_hash;
mod table;
#[cfg(test)]
mod tests;

use table::Table;

use std::alloc::{alloc_zeroed, Layout};

/// Where an item lives: segment id and byte offset inside the segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Location {
    pub seg: u32,
    pub offset: u32,
}

/// Largest number of segments a 20-bit segment id can name.
pub(crate) const MAX_SEGMENTS: usize = 1 << 20;
/// Largest segment a 21-bit byte offset can address.
pub(crate) const MAX_SEGMENT_SIZE: usize = 1 << 21;
/// Farthest an item may live from its home bucket.
pub(crate) const MAX_DISPLACEMENT: usize = 7;
/// Smallest `hash_power` a builder accepts (eight buckets to start with).
pub const MIN_HASH_POWER: u8 = 3;
/// Most homes a table may grow to.
const MAX_HOMES: usize = 1 << 30;

/// Item slots per bucket.
pub(crate) const SLOTS: usize = 7;
const SEG_SHIFT: u32 = 21;
const SEG_MASK: u64 = (1 << 20) - 1;
const OFFSET_MASK: u64 = (1 << 21) - 1;
const DISP_SHIFT: u32 = 41;
const DISP_MASK: u64 = 0x7;
const FREQ_SHIFT: u32 = 44;
const FREQ_MAX: u64 = 0x7f;
const STAMP_SHIFT: u32 = 51;
const STAMP_MASK: u64 = 0xff;
const CHECK_SHIFT: u32 = 59;
/// Control word: byte 7 holds the reach.
const REACH_SHIFT: u32 = 56;
const REACH_MASK: u64 = 0x7 << REACH_SHIFT;
/// The seven tag bytes of a control word, as a slot bitmask.
const TAG_BITS: u32 = (1 << SLOTS) - 1;
/// Marks a bucket position in the table being drained (positions in the
/// current table are plain indices).
const OLD: usize = 1 << 31;
/// Homes drained per insert while growing (each op drains a few, so the
/// drain ends long before the new table can fill).
pub(crate) const GROW_STEP_WRITE: usize = 4;
/// Homes drained per lookup while growing.
pub(crate) const GROW_STEP_READ: usize = 1;
/// Buckets past a full window searched for a free slot to move back
/// into it.
const HOP_SEARCH: usize = 32;
/// Share of its slots a table is sized to fill with the items the heap is
/// expected to hold: when it grows, and at build for the default size
/// (`builder::default_buckets`), so a table grown to a full heap ends as
/// dense as one sized for it.
pub(crate) const TARGET_LOAD: f64 = 0.87;

pub(crate) use key_hash::hash_key;

/// First hash bit a sharded cache uses to pick a shard (up to 10 bits,
/// clear of the home's bits, the check bits and the tag).
pub(crate) const SHARD_SHIFT: u32 = 40;

/// The key's probe window is full and the caller did not allow evicting
/// from it (nor growing).
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct TableFull;

/// What an insert displaced (tests: the cache calls
/// [`HashTable::replace`] and [`HashTable::insert_absent`] itself).
#[cfg(test)]
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Inserted {
    /// The key's previous item info, if it was present.
    pub replaced: Option<u64>,
    /// The item info evicted to make room in a full window.
    pub evicted: Option<u64>,
}

/// A slot position handed out by [`HashTable::first_candidate`], valid
/// until the table next changes.
#[derive(Clone, Copy, Debug)]
pub(crate) struct FirstCandidate {
    bucket: usize,
    slot: usize,
}

/// One read of a key's home control word: the home, and in one word the
/// slots whose tag matches the key's (bits 0..SLOTS) and the home's reach
/// (the control word's reach bits), so that "no tag and no reach" is a
/// single test against zero.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct HomeProbe {
    home: usize,
    seen: u64,
}

impl HomeProbe {
    #[inline(always)]
    fn read(home: usize, head: u64, hash: u64) -> HomeProbe {
        const _: () = assert!(TAG_BITS as u64 & REACH_MASK == 0);
        HomeProbe {
            home,
            seen: match_byte(head, tag_of(hash)) as u64 | head & REACH_MASK,
        }
    }

    /// True when the tags alone prove the key absent: no slot of the home
    /// carries its tag and no entry of the home lives in a later bucket.
    #[inline(always)]
    pub(crate) fn proves_absent(&self) -> bool {
        self.seen == 0
    }
}

#[inline]
fn tag_of(hash: u64) -> u8 {
    let tag = (hash >> 56) as u8;
    tag | (tag == 0) as u8
}

#[inline]
fn check_of(hash: u64) -> u64 {
    (hash >> 51) & 0x1f
}

/// The bits of an entry that, with its tag, tell a key's entry in a
/// bucket apart before the key is compared: check bits and displacement.
const ID_MASK: u64 = (0x1f << CHECK_SHIFT) | (DISP_MASK << DISP_SHIFT);

/// The [`ID_MASK`] bits of an entry of `hash` at displacement `d`.
#[inline(always)]
fn entry_id(hash: u64, d: usize) -> u64 {
    check_of(hash) << CHECK_SHIFT | (d as u64) << DISP_SHIFT
}

#[inline]
fn pack(check: u64, freq: u64, disp: usize, loc: Location) -> u64 {
    debug_assert!((loc.seg as u64) <= SEG_MASK && (loc.offset as u64) <= OFFSET_MASK);
    debug_assert!(disp <= MAX_DISPLACEMENT && freq <= FREQ_MAX && check < 32);
    (check << CHECK_SHIFT)
        | (freq << FREQ_SHIFT)
        | ((disp as u64) << DISP_SHIFT)
        | ((loc.seg as u64) << SEG_SHIFT)
        | loc.offset as u64
}

/// Decodes the location part of an item info slot.
#[inline]
pub(crate) fn location(info: u64) -> Location {
    Location {
        seg: ((info >> SEG_SHIFT) & SEG_MASK) as u32,
        offset: (info & OFFSET_MASK) as u32,
    }
}

/// The saturating access counter (0..=127) of an item info slot.
#[inline]
pub(crate) fn frequency(info: u64) -> u8 {
    ((info >> FREQ_SHIFT) & FREQ_MAX) as u8
}

#[inline]
fn displacement(info: u64) -> usize {
    ((info >> DISP_SHIFT) & DISP_MASK) as usize
}

#[inline]
fn same_location(info: u64, loc: Location) -> bool {
    location(info) == loc
}

/// Bitmask of the slots (bits 0..7) of a control word whose tag is `byte`.
#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
#[inline]
fn match_byte(word: u64, byte: u8) -> u32 {
    use std::arch::x86_64::{_mm_cmpeq_epi8, _mm_cvtsi64_si128, _mm_movemask_epi8, _mm_set1_epi8};
    // SAFETY: these intrinsics only need SSE2, which the cfg above
    // guarantees is enabled for the whole build; they touch no memory.
    #[allow(unused_unsafe)]
    let mask = unsafe {
        let lanes = _mm_cvtsi64_si128(word as i64);
        _mm_movemask_epi8(_mm_cmpeq_epi8(lanes, _mm_set1_epi8(byte as i8))) as u32
    };
    mask & TAG_BITS
}

/// Bitmask of the slots (bits 0..7) of a control word whose tag is `byte`.
#[cfg(not(all(target_arch = "x86_64", target_feature = "sse2")))]
#[inline]
fn match_byte(word: u64, byte: u8) -> u32 {
    match_byte_swar(word, byte)
}

/// Portable [`match_byte`]: exact (no false positives), one bit per byte.
#[inline]
#[cfg_attr(all(target_arch = "x86_64", target_feature = "sse2"), allow(dead_code))]
fn match_byte_swar(word: u64, byte: u8) -> u32 {
    const LO7: u64 = 0x7f7f_7f7f_7f7f_7f7f;
    let x = word ^ (0x0101_0101_0101_0101u64 * byte as u64);
    // High bit of each byte set iff that byte of x is zero (no carries
    // cross bytes: each byte's low 7 bits plus 0x7f stay below 0x100).
    let zero = !(((x & LO7) + LO7) | x | LO7);
    // Gather the eight high bits into one byte.
    (((zero >> 7).wrapping_mul(0x0102_0408_1020_4080)) >> 56) as u32 & TAG_BITS
}

/// Hints the CPU to start loading the cache line at `ptr`.
#[inline]
pub(crate) fn prefetch<T>(ptr: *const T) {
    #[cfg(all(target_arch = "x86_64", target_feature = "sse"))]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        // SAFETY: a prefetch is only a hint: it never faults and never
        // changes memory, whatever the address.
        #[allow(unused_unsafe)]
        unsafe {
            _mm_prefetch(ptr as *const i8, _MM_HINT_T0)
        };
    }
    #[cfg(not(all(target_arch = "x86_64", target_feature = "sse")))]
    let _ = ptr;
}

/// An old table being drained into the current one.
struct Drain {
    old: Table,
    /// Homes of `old` below this are drained.
    cursor: usize,
}

pub(crate) struct HashTable {
    /// The table new keys go to.
    table: Table,
    drain: Option<Box<Drain>>,
    /// Item infos the drain had to drop (their new window was full); the
    /// cache accounts for them as evictions.
    dropped: Vec<u64>,
    rng: u64,
    /// Tests only: never grow (to reach the full-window paths of a cache).
    #[cfg(test)]
    pub(crate) growth_disabled: bool,
}

impl HashTable {
    /// A table of `homes` buckets (at least 1); an error if the memory
    /// cannot be had.
    pub(crate) fn try_new(homes: usize) -> Result<Self, String> {
        Ok(HashTable {
            table: Table::try_new(homes.clamp(1, MAX_HOMES))?,
            drain: None,
            dropped: Vec::new(),
            rng: 0x9e37_79b9_7f4a_7c15,
            #[cfg(test)]
            growth_disabled: false,
        })
    }

    #[cfg(test)]
    pub(crate) fn new(homes: usize) -> Self {
        Self::try_new(homes).unwrap()
    }

    /// Home buckets of the current table.
    pub(crate) fn homes(&self) -> usize {
        self.table.homes
    }

    /// What [`first_candidate`](Self::first_candidate) matches of `hash`
    /// before the key: its home bucket, tag and check bits (tests make
    /// keys whose entries look alike with it).
    #[cfg(test)]
    pub(crate) fn entry_look(&self, hash: u64) -> (usize, u8, u64) {
        (self.table.home(hash), tag_of(hash), check_of(hash))
    }

    /// Item slots of the current table (homes only).
    pub(crate) fn slots(&self) -> usize {
        self.table.homes * SLOTS
    }

    /// Bytes the table occupies (both tables while one drains into the
    /// other).
    pub(crate) fn bytes(&self) -> usize {
        self.table.bytes() + self.drain.as_ref().map_or(0, |d| d.old.bytes())
    }

    /// Hashes a key (see [`hash_key`]).
    #[inline]
    pub(crate) fn hash(&self, key: &[u8]) -> u64 {
        hash_key(key)
    }

    /// True while an old table is being drained.
    #[inline]
    pub(crate) fn is_growing(&self) -> bool {
        self.drain.is_some()
    }

    /// Empties the table (an unfinished drain is abandoned).
    pub(crate) fn clear(&mut self) {
        self.drain = None;
        self.dropped.clear();
        self.table.clear();
    }

    /// The item info of the first entry in `hash`'s home bucket whose tag
    /// matches: where the key's item most likely is (a hint to prefetch
    /// it, not an answer: the check bits and the key are not compared).
    /// `None` when no tag matches or while the table grows.
    #[inline]
    pub(crate) fn home_candidate(&self, hash: u64) -> Option<u64> {
        if self.drain.is_some() {
            return None;
        }
        let t = &self.table;
        let home = t.home(hash);
        debug_assert!(home < t.homes);
        // SAFETY: `home < homes <= buckets()` (`home` scales a 32-bit value
        // by homes / 2^32).
        let hits = match_byte(unsafe { t.ctrl_unchecked(home) }, tag_of(hash));
        if hits == 0 {
            return None;
        }
        // SAFETY: `home < buckets()` as above; `match_byte` only sets bits
        // 0..SLOTS.
        Some(unsafe { t.slot_unchecked(home, hits.trailing_zeros() as usize) })
    }

    /// Starts loading the lines a lookup of `hash` will read: its control
    /// word and its home's first slots.
    #[inline]
    pub(crate) fn prefetch(&self, hash: u64) {
        let home = self.table.home(hash);
        prefetch(self.table.ctrl.as_ptr().wrapping_add(home));
        self.table.prefetch(home);
    }

    /// True when the tags alone prove `hash`'s key absent: no table is
    /// draining, and its home's control word has no matching tag and no
    /// reach (one load, no slot read). False means "look properly".
    #[inline(always)]
    pub(crate) fn absent_by_tags(&self, hash: u64) -> bool {
        self.drain.is_none() && self.table.probe_home(hash).proves_absent()
    }

    /// The table and bucket a position names.
    #[inline]
    fn resolve(&self, bucket: usize) -> (&Table, usize) {
        if bucket & OLD != 0 {
            let drain = self.drain.as_ref().expect("old position without a drain");
            (&drain.old, bucket & !OLD)
        } else {
            (&self.table, bucket)
        }
    }

    #[inline]
    fn resolve_mut(&mut self, bucket: usize) -> (&mut Table, usize) {
        if bucket & OLD != 0 {
            let drain = self.drain.as_mut().expect("old position without a drain");
            (&mut drain.old, bucket & !OLD)
        } else {
            (&mut self.table, bucket)
        }
    }

    /// The position of the first slot, in whichever table holds `hash`'s
    /// key, whose info satisfies `pred`: (bucket, slot, item info).
    #[inline]
    fn find(&self, hash: u64, mut pred: impl FnMut(u64) -> bool) -> Option<(usize, usize, u64)> {
        if let Some(drain) = &self.drain {
            if let Some(found) = Self::find_old(drain, hash, &mut pred) {
                return Some(found);
            }
        }
        self.table.find(hash, &mut pred)
    }

    /// [`find`](Self::find) in the table being drained (kept out of line:
    /// a table grows rarely).
    #[cold]
    #[inline(never)]
    fn find_old(
        drain: &Drain,
        hash: u64,
        pred: &mut impl FnMut(u64) -> bool,
    ) -> Option<(usize, usize, u64)> {
        if drain.old.home(hash) < drain.cursor {
            return None;
        }
        let (b, s, info) = drain.old.find(hash, pred)?;
        Some((b | OLD, s, info))
    }

    #[inline]
    fn info(&self, bucket: usize, slot: usize) -> u64 {
        let (t, b) = self.resolve(bucket);
        t.slots[b * SLOTS + slot]
    }

    /// Finds the item info for a key. `matches` compares the key stored at
    /// a location with the wanted key. Returns (bucket, slot, info).
    #[inline]
    pub(crate) fn lookup(
        &self,
        hash: u64,
        mut matches: impl FnMut(Location) -> bool,
    ) -> Option<(usize, usize, u64)> {
        self.find(hash, |info| matches(location(info)))
    }

    /// Reads `hash`'s home control word once, for a read that first asks
    /// the tags ([`HomeProbe::proves_absent`]) and then, if they do not
    /// rule the key out, searches with [`lookup_probed`](Self::lookup_probed).
    /// Only when no table is draining (the caller checked
    /// [`is_growing`](Self::is_growing)).
    #[inline(always)]
    pub(crate) fn probe_home(&self, hash: u64) -> HomeProbe {
        debug_assert!(self.drain.is_none());
        self.table.probe_home(hash)
    }

    /// [`lookup`](Self::lookup) when no table is draining, from a
    /// [`probe_home`](Self::probe_home) of the same `hash` and an unchanged
    /// table: the read path's lookup, with no branch for the old table and
    /// no second read of the control word. `matches` says yes by answering
    /// `Some`: what the key compare learnt of the item (where its value
    /// lies, say), handed back with the entry.
    #[inline(always)]
    pub(crate) fn lookup_probed<T>(
        &self,
        hash: u64,
        probe: HomeProbe,
        mut matches: impl FnMut(Location) -> Option<T>,
    ) -> Option<(usize, usize, u64, T)> {
        debug_assert!(self.drain.is_none());
        debug_assert_eq!(probe, self.table.probe_home(hash));
        // Start the slot lines' load: on a hit the matching slot is most
        // likely in the home bucket.
        self.table.prefetch(probe.home);
        self.table.find_probed(
            hash,
            probe,
            #[inline(always)]
            move |info| matches(location(info)),
        )
    }

    /// The item info at a known location, if the table points there.
    #[cfg(any(test, fuzzing))]
    pub(crate) fn info_at(&self, hash: u64, loc: Location) -> Option<u64> {
        self.locate(hash, loc).map(|(.., info)| info)
    }

    /// Points the key at `loc`: [`replace`](Self::replace) if it is
    /// present, else [`insert_absent`](Self::insert_absent). (The cache
    /// calls the two halves itself, so that an overwrite pays for one
    /// probe and nothing else.)
    #[cfg(test)]
    pub(crate) fn insert(
        &mut self,
        hash: u64,
        loc: Location,
        may_evict: bool,
        rewrite_floor: u8,
        matches: impl FnMut(Location) -> bool,
        grow: impl FnOnce() -> Option<usize>,
    ) -> Result<Inserted, TableFull> {
        if let Some(old) = self.replace(hash, loc, rewrite_floor, matches) {
            return Ok(Inserted {
                replaced: Some(old),
                evicted: None,
            });
        }
        let evicted = self.insert_absent(hash, loc, may_evict, grow)?;
        Ok(Inserted {
            replaced: None,
            evicted,
        })
    }

    /// If the key is present (`matches` compares the key stored at a
    /// location with the wanted one), points its entry at `loc` where it
    /// sits and returns the entry's previous item info; else `None` and
    /// the table is unchanged. The entry keeps its access counter, raised
    /// to at least `rewrite_floor` (merge eviction counts a rewrite as
    /// accesses; 0 leaves it as it was), in the same store that moves it.
    #[inline(always)]
    pub(crate) fn replace(
        &mut self,
        hash: u64,
        loc: Location,
        rewrite_floor: u8,
        mut matches: impl FnMut(Location) -> bool,
    ) -> Option<u64> {
        if self.drain.is_some() {
            return self.replace_growing(hash, loc, rewrite_floor, matches);
        }
        let t = &mut self.table;
        let (b, s, old) = t.find(hash, &mut |info| matches(location(info)))?;
        let new = Self::moved_info(old, loc, rewrite_floor);
        debug_assert_eq!(t.slots[b * SLOTS + s], old);
        // SAFETY: `find` just returned (`b`, `s`) as a slot of `t` that it
        // read, so `b < t.buckets()` and `s < SLOTS`.
        unsafe { *t.slots.get_unchecked_mut(b * SLOTS + s) = new };
        Some(old)
    }

    /// The entry of `hash`'s key most likely to be its own: the first in
    /// its home bucket whose tag and check bits match, as (position for
    /// [`replace_first`](Self::replace_first), item info); `None` if there
    /// is none or while the table grows. The caller compares the key; a
    /// mismatch says nothing (another entry may hold it: search with
    /// [`replace`](Self::replace)). Lets the one-probe write compare the
    /// likeliest candidate inline.
    #[inline(always)]
    pub(crate) fn first_candidate(&self, hash: u64) -> Option<(FirstCandidate, u64)> {
        if self.drain.is_some() {
            return None;
        }
        let t = &self.table;
        let home = t.home(hash);
        debug_assert!(home < t.homes);
        // Start the slot line's load beside the control word's: which slot
        // is read depends on the tags, but its line (the home's first
        // slots) does not, so the two misses overlap instead of queueing.
        t.prefetch(home);
        // SAFETY: `home < homes <= buckets()` (`home` scales a 32-bit value
        // by homes / 2^32).
        let hits = match_byte(unsafe { t.ctrl_unchecked(home) }, tag_of(hash));
        if hits == 0 {
            return None;
        }
        let slot = hits.trailing_zeros() as usize;
        // SAFETY: `home < buckets()` as above; `match_byte` only sets bits
        // 0..SLOTS.
        let info = unsafe { t.slot_unchecked(home, slot) };
        // Displacement 0: an entry of this home, not a displaced one of
        // an earlier home.
        let at = FirstCandidate { bucket: home, slot };
        (info & ID_MASK == entry_id(hash, 0)).then_some((at, info))
    }

    /// [`replace`](Self::replace) of the entry `first_candidate` returned
    /// (`info` its item info), whose key the caller found to match, with
    /// the table unchanged since: no search.
    #[inline(always)]
    pub(crate) fn replace_first(
        &mut self,
        at: FirstCandidate,
        info: u64,
        loc: Location,
        rewrite_floor: u8,
    ) {
        debug_assert!(self.drain.is_none());
        let i = at.bucket * SLOTS + at.slot;
        debug_assert_eq!(self.table.slots[i], info);
        let new = Self::moved_info(info, loc, rewrite_floor);
        // SAFETY: `first_candidate` read slot `i` of this table (a home
        // bucket below `homes`, a slot below SLOTS), unchanged since.
        unsafe { *self.table.slots.get_unchecked_mut(i) = new };
    }

    /// [`remove`](Self::remove) of the entry `first_candidate` returned,
    /// whose key the caller found to match, with the table unchanged
    /// since: no search.
    #[inline(always)]
    pub(crate) fn remove_first(&mut self, at: FirstCandidate) {
        debug_assert!(self.drain.is_none());
        let t = &mut self.table;
        let (b, s) = (at.bucket, at.slot);
        debug_assert!(b < t.buckets() && s < SLOTS);
        // A first candidate sits in its home (displacement 0): no reach
        // to shrink, so the slot and its tag are simply cleared.
        debug_assert_eq!(displacement(t.slots[b * SLOTS + s]), 0);
        // SAFETY: `first_candidate` read slot `s` of bucket `b` of this
        // table (a home below `homes`, a slot below SLOTS), unchanged since.
        unsafe {
            *t.slots.get_unchecked_mut(b * SLOTS + s) = 0;
            *t.ctrl.get_unchecked_mut(b) &= !(0xff << (8 * s));
        }
    }

    /// [`replace`](Self::replace) while a table drains (the key may be in
    /// either).
    #[inline(never)]
    fn replace_growing(
        &mut self,
        hash: u64,
        loc: Location,
        rewrite_floor: u8,
        mut matches: impl FnMut(Location) -> bool,
    ) -> Option<u64> {
        let (bucket, s, old) = self.find(hash, |info| matches(location(info)))?;
        let (t, b) = self.resolve_mut(bucket);
        t.slots[b * SLOTS + s] = Self::moved_info(old, loc, rewrite_floor);
        Some(old)
    }

    /// Item info `old` pointed at `loc`, its access counter raised to at
    /// least `rewrite_floor`.
    #[inline(always)]
    fn moved_info(old: u64, loc: Location, rewrite_floor: u8) -> u64 {
        let freq = ((old >> FREQ_SHIFT) & FREQ_MAX).max(rewrite_floor as u64 & FREQ_MAX);
        (old & !(SEG_MASK << SEG_SHIFT | OFFSET_MASK | FREQ_MAX << FREQ_SHIFT))
            | freq << FREQ_SHIFT
            | ((loc.seg as u64) << SEG_SHIFT)
            | loc.offset as u64
    }

    /// Adds an entry pointing at `loc` for a key the caller knows is
    /// absent (a [`replace`](Self::replace) just said so, with the table
    /// unchanged since). When the key's window is full: if `grow` names
    /// how many items the heap could hold (more than the table holds
    /// well), a larger table is started and drained by later
    /// [`grow_step`](Self::grow_step)s; else the least-read item of the
    /// window is evicted to make room (its info returned) if `may_evict`,
    /// else the insert fails.
    pub(crate) fn insert_absent(
        &mut self,
        hash: u64,
        loc: Location,
        may_evict: bool,
        grow: impl FnOnce() -> Option<usize>,
    ) -> Result<Option<u64>, TableFull> {
        let info = pack(check_of(hash), 0, 0, loc);
        if self.table.insert_new(hash, info).is_some() {
            return Ok(None);
        }
        #[cfg(test)]
        let grow = || if self.growth_disabled { None } else { grow() };
        if self.drain.is_none() {
            if let Some(items) = grow() {
                if self.start_growth(items) && self.table.insert_new(hash, info).is_some() {
                    return Ok(None);
                }
            }
        }
        if !may_evict {
            return Err(TableFull);
        }
        let t = &mut self.table;
        let home = t.home(hash);
        let (b, s, d) = t.least_read(home);
        let evicted = t.clear_slot(b, s);
        t.place(home, b, s, tag_of(hash), pack(check_of(hash), 0, d, loc));
        Ok(Some(evicted))
    }

    /// Allocates a table sized for `items` at [`TARGET_LOAD`] (at least
    /// 1/8 and at most 2x larger than the current one) and starts draining
    /// the current one into it. False if the memory cannot be had.
    fn start_growth(&mut self, items: usize) -> bool {
        let now = self.table.homes;
        if now >= MAX_HOMES {
            return false;
        }
        let wanted = (items as f64 / (SLOTS as f64 * TARGET_LOAD)).ceil() as usize;
        let homes = wanted.clamp(now + now / 8 + 1, 2 * now).min(MAX_HOMES);
        let Ok(table) = Table::try_new(homes) else {
            return false;
        };
        let old = std::mem::replace(&mut self.table, table);
        self.drain = Some(Box::new(Drain { old, cursor: 0 }));
        true
    }

    /// Drains up to `homes` homes of the old table into the current one
    /// (nothing when not growing). `rehash` gives the key hash of the item
    /// at a location. Items whose new window is full are dropped; take
    /// them with [`take_dropped`](Self::take_dropped).
    pub(crate) fn grow_step(&mut self, homes: usize, mut rehash: impl FnMut(Location) -> u64) {
        let Some(drain) = self.drain.as_mut() else {
            return;
        };
        let end = (drain.cursor + homes).min(drain.old.homes);
        for home in drain.cursor..end {
            for d in 0..=drain.old.reach(home) {
                let b = home + d;
                let mut used = !match_byte(drain.old.ctrl[b], 0) & TAG_BITS;
                while used != 0 {
                    let s = used.trailing_zeros() as usize;
                    used &= used - 1;
                    let info = drain.old.slots[b * SLOTS + s];
                    if displacement(info) != d {
                        continue;
                    }
                    let hash = rehash(location(info));
                    debug_assert_eq!(drain.old.home(hash), home, "rehash disagrees");
                    drain.old.slots[b * SLOTS + s] = 0;
                    drain.old.ctrl[b] &= !(0xff << (8 * s));
                    if self.table.insert_new(hash, info).is_none() {
                        self.dropped.push(info);
                    }
                }
            }
        }
        drain.cursor = end;
        if end == drain.old.homes {
            self.drain = None;
        }
    }

    /// Finishes a drain in progress.
    #[cfg(test)]
    pub(crate) fn finish_growth(&mut self, rehash: impl FnMut(Location) -> u64) {
        self.grow_step(usize::MAX / 2, rehash);
    }

    /// Item infos the drain dropped since the last call.
    pub(crate) fn take_dropped(&mut self) -> Option<u64> {
        self.dropped.pop()
    }

    /// Removes the entry pointing at `loc` (no key comparison: a location
    /// names one item). Returns its item info if the table pointed there.
    pub(crate) fn remove_at(&mut self, hash: u64, loc: Location) -> Option<u64> {
        let (bucket, s, _) = self.find(hash, |info| same_location(info, loc))?;
        Some(self.clear_at(bucket, s))
    }

    /// Removes the entry of the key `matches` accepts (it compares the key
    /// stored at a location with the wanted one) where one probe finds
    /// it; returns its item info.
    #[inline(always)]
    pub(crate) fn remove(
        &mut self,
        hash: u64,
        mut matches: impl FnMut(Location) -> bool,
    ) -> Option<u64> {
        if self.drain.is_some() {
            return self.remove_growing(hash, matches);
        }
        let t = &mut self.table;
        let (b, s, _) = t.find(hash, &mut |info| matches(location(info)))?;
        Some(t.clear_slot(b, s))
    }

    /// [`remove`](Self::remove) while a table drains (the key may be in
    /// either).
    #[inline(never)]
    fn remove_growing(
        &mut self,
        hash: u64,
        mut matches: impl FnMut(Location) -> bool,
    ) -> Option<u64> {
        let (bucket, s, _) = self.find(hash, |info| matches(location(info)))?;
        Some(self.clear_at(bucket, s))
    }

    /// Where the entry pointing at `loc` sits: (bucket, slot, item info).
    /// Positions stay valid until that entry is moved or cleared, or the
    /// next insert or grow step.
    #[inline]
    pub(crate) fn locate(&self, hash: u64, loc: Location) -> Option<(usize, usize, u64)> {
        self.find(hash, |info| same_location(info, loc))
    }

    /// The item info of the occupied entry at (`bucket`, `slot`), a
    /// position from [`locate`](Self::locate).
    #[inline]
    pub(crate) fn info_at_slot(&self, bucket: usize, slot: usize) -> u64 {
        let (t, b) = self.resolve(bucket);
        debug_assert_ne!(t.ctrl[b] >> (8 * slot) & 0xff, 0, "an empty slot");
        t.slots[b * SLOTS + slot]
    }

    /// Points the entry at (`bucket`, `slot`) to `to`, halving its access
    /// counter (merge survivors start to age).
    pub(crate) fn move_slot(&mut self, bucket: usize, slot: usize, to: Location) {
        let (t, b) = self.resolve_mut(bucket);
        let old = t.slots[b * SLOTS + slot];
        debug_assert_ne!(t.ctrl[b] >> (8 * slot) & 0xff, 0, "moving an empty slot");
        let freq = ((old >> FREQ_SHIFT) & FREQ_MAX) / 2;
        t.slots[b * SLOTS + slot] = pack(old >> CHECK_SHIFT, freq, displacement(old), to)
            | (old & (STAMP_MASK << STAMP_SHIFT));
    }

    /// Points the entry at (`bucket`, `slot`) to `to`, keeping its access
    /// counter and everything else (a compaction that did not judge it).
    #[inline]
    pub(crate) fn relocate(&mut self, bucket: usize, slot: usize, to: Location) {
        let (t, b) = self.resolve_mut(bucket);
        let i = b * SLOTS + slot;
        debug_assert_ne!(t.ctrl[b] >> (8 * slot) & 0xff, 0, "moving an empty slot");
        t.slots[i] = (t.slots[i] & !(SEG_MASK << SEG_SHIFT | OFFSET_MASK))
            | ((to.seg as u64) << SEG_SHIFT)
            | to.offset as u64;
    }

    /// Empties the entry at (`bucket`, `slot`), returning its item info.
    pub(crate) fn clear_at(&mut self, bucket: usize, slot: usize) -> u64 {
        let (t, b) = self.resolve_mut(bucket);
        t.clear_slot(b, slot)
    }

    /// Sets the access counter of the item at (`bucket`, `slot`) (capped
    /// at 127), writing only if it changes (merge eviction's admission: a
    /// key back from the ghosts starts warm).
    pub(crate) fn set_frequency(&mut self, bucket: usize, slot: usize, freq: u8) {
        let (t, b) = self.resolve_mut(bucket);
        let i = b * SLOTS + slot;
        debug_assert_ne!(t.ctrl[b] >> (8 * slot) & 0xff, 0, "an empty slot");
        let info = t.slots[i];
        let freq = (freq as u64).min(FREQ_MAX);
        let new = (info & !(FREQ_MAX << FREQ_SHIFT)) | (freq << FREQ_SHIFT);
        if new != info {
            t.slots[i] = new;
        }
    }

    /// Counts an access to the item at (`bucket`, `slot`): at most once per
    /// second per item, probabilistically past 16. Writes the slot only
    /// when it changes, so repeated hits leave the line clean.
    #[inline]
    pub(crate) fn record_access(&mut self, bucket: usize, slot: usize, now: u32) {
        let info = self.info(bucket, slot);
        self.record_access_seen(bucket, slot, info, now);
    }

    /// [`record_access`](Self::record_access) with the slot's item info as
    /// the lookup just read it (no second read when nothing changes).
    #[inline]
    pub(crate) fn record_access_seen(&mut self, bucket: usize, slot: usize, info: u64, now: u32) {
        debug_assert_eq!(info, self.info(bucket, slot));
        if let Some(counted) = self.counted(info, now) {
            let (t, b) = self.resolve_mut(bucket);
            t.slots[b * SLOTS + slot] = counted;
        }
    }

    /// [`record_access_seen`](Self::record_access_seen) of a position
    /// [`lookup_probed`](Self::lookup_probed) handed out: in the current
    /// table, no table draining.
    #[inline(always)]
    pub(crate) fn record_access_probed(&mut self, bucket: usize, slot: usize, info: u64, now: u32) {
        debug_assert!(self.drain.is_none() && bucket & OLD == 0);
        debug_assert_eq!(info, self.info(bucket, slot));
        if let Some(counted) = self.counted(info, now) {
            debug_assert!(slot < SLOTS && bucket * SLOTS + slot < self.table.slots.len());
            // SAFETY: `lookup_probed` found this slot in the current table
            // (its info read back above), and nothing changed the table
            // since.
            unsafe { *self.table.slots.get_unchecked_mut(bucket * SLOTS + slot) = counted };
        }
    }

    /// An entry's item info after an access at `now`, if that changes it:
    /// a new stamp (at most one count per second), and the frequency
    /// counter raised (always below 16, then with probability 1/count).
    #[inline(always)]
    fn counted(&mut self, info: u64, now: u32) -> Option<u64> {
        let stamp = now as u64 & STAMP_MASK;
        // The stamp first, alone: a read of an item already counted this
        // second (the common case at any real rate) tests nothing else.
        if (info >> STAMP_SHIFT) & STAMP_MASK == stamp {
            return None;
        }
        let count = (info >> FREQ_SHIFT) & FREQ_MAX;
        if count == FREQ_MAX {
            return None;
        }
        let bump = count < 16 || {
            // xorshift64: cheap randomness for the probabilistic increment.
            self.rng ^= self.rng << 13;
            self.rng ^= self.rng >> 7;
            self.rng ^= self.rng << 17;
            self.rng % count == 0
        };
        let count = count + bump as u64;
        Some(
            (info & !((FREQ_MAX << FREQ_SHIFT) | (STAMP_MASK << STAMP_SHIFT)))
                | (count << FREQ_SHIFT)
                | (stamp << STAMP_SHIFT),
        )
    }

    /// Every word of the (fully drained) table for a snapshot: control
    /// words, then item infos.
    pub(crate) fn words(&self) -> impl Iterator<Item = u64> + '_ {
        debug_assert!(self.drain.is_none(), "snapshot of a table mid-growth");
        self.table
            .ctrl
            .iter()
            .chain(self.table.slots.iter())
            .copied()
    }

    /// Calls `f` with every entry's item info, in the table and, while it
    /// grows, in the table being drained (no particular order).
    pub(crate) fn for_each_entry(&self, mut f: impl FnMut(u64)) {
        let tables = std::iter::once(&self.table).chain(self.drain.as_ref().map(|d| &d.old));
        for t in tables {
            for (b, &ctrl) in t.ctrl.iter().enumerate() {
                for s in 0..SLOTS {
                    if (ctrl >> (8 * s)) & 0xff != 0 {
                        f(t.slots[b * SLOTS + s]);
                    }
                }
            }
        }
    }

    /// Words a snapshot of a table with `homes` homes holds.
    pub(crate) fn words_for(homes: usize) -> usize {
        (homes + MAX_DISPLACEMENT) * (SLOTS + 1)
    }

    /// Rebuilds a table of `homes` homes from a snapshot's words. Every
    /// entry must be well formed (tag and info both set or both clear,
    /// inside the table, pointing where `in_bounds` allows); reaches are
    /// recomputed, not trusted.
    pub(crate) fn from_words(
        homes: usize,
        words: &[u64],
        mut in_bounds: impl FnMut(Location) -> bool,
    ) -> Result<Self, String> {
        if homes == 0 || homes > MAX_HOMES || words.len() != Self::words_for(homes) {
            return Err("hash table size differs".into());
        }
        let mut table = Self::try_new(homes)?;
        let t = &mut table.table;
        let (ctrl, slots) = words.split_at(t.buckets());
        for (b, &word) in ctrl.iter().enumerate() {
            for s in 0..SLOTS {
                let tag = (word >> (8 * s)) & 0xff;
                let info = slots[b * SLOTS + s];
                if tag == 0 {
                    if info != 0 {
                        return Err(format!("hash table bucket {b}: an empty slot holds data"));
                    }
                    continue;
                }
                let disp = displacement(info);
                if disp > b || b - disp >= homes || !in_bounds(location(info)) {
                    return Err("hash table points outside the heap".into());
                }
                let home = b - disp;
                t.slots[b * SLOTS + s] = info;
                t.ctrl[b] |= tag << (8 * s);
                if disp > t.reach(home) {
                    t.ctrl[home] = (t.ctrl[home] & !REACH_MASK) | (disp as u64) << REACH_SHIFT;
                }
            }
        }
        Ok(table)
    }

    /// Number of items in the table (tests and the fuzzer), after checking that every
    /// item lies within its home's reach and tags agree with slots.
    #[cfg(any(test, fuzzing))]
    pub(crate) fn count_items(&mut self) -> usize {
        let mut n = 0;
        let tables = std::iter::once((&self.table, 0))
            .chain(self.drain.as_ref().map(|d| (&d.old, d.cursor)));
        for (t, cursor) in tables {
            for b in 0..t.buckets() {
                for s in 0..SLOTS {
                    let tag = (t.ctrl[b] >> (8 * s)) & 0xff;
                    let info = t.slots[b * SLOTS + s];
                    assert!(tag != 0 || info == 0, "an empty slot holds data");
                    if tag != 0 {
                        let home = b - displacement(info);
                        assert!(home < t.homes, "item homed in a spare bucket");
                        assert!(home >= cursor, "item left behind by the drain");
                        assert!(
                            displacement(info) <= t.reach(home),
                            "item beyond its home's reach"
                        );
                        n += 1;
                    }
                }
            }
        }
        n
    }
}

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

/// The one key hash of the crate, with fixed seeds so runs are repeatable:
/// aHash's portable algorithm (`ahash::RandomState::with_seeds` with
/// [`SEEDS`](key_hash::SEEDS), then `write(key)` and `finish()`, where aHash has no AES
/// hardware to use), written out for one byte string so that a key of 17
/// to 32 bytes, the common size, is two rounds with no loop to test; the
/// test `key_hash_is_ahash_fallback` checks it against the crate.
/// Homes use the low 32 bits, sharding [`SHARD_SHIFT`] and up (10 bits),
/// the check bits 51..56 and the tag the top byte. (Not every seed set is
/// sound: one tried earlier hashed every key to 0; the test
/// `key_hash_bits_are_balanced` guards these.)
mod key_hash {
    /// The seeds, as given to `ahash::RandomState::with_seeds`.
    pub(super) const SEEDS: [u64; 4] = [
        0x243f_6a88_85a3_08d3,
        0x1319_8a2e_0370_7344,
        0xa409_3822_299f_31d0,
        0x082e_fa98_ec4e_6c89,
    ];
    /// What aHash mixes each seed with (its `PI2`).
    const SEED_MASKS: [u64; 4] = [
        0x4528_21e6_38d0_1377,
        0xbe54_66cf_34e9_0c6c,
        0xc0ac_29b7_c97c_50dd,
        0x3f84_d5b5_b547_0917,
    ];
    /// aHash's multiplier for the length and its rotation per block.
    const MULTIPLE: u64 = 6_364_136_223_846_793_005;
    const ROT: u32 = 23;
    /// The hasher's starting state, its pad and its two block keys.
    const START: u64 = SEEDS[1] ^ SEED_MASKS[1];
    const PAD: u64 = SEEDS[0] ^ SEED_MASKS[0];
    const KEYS: [u64; 2] = [SEEDS[2] ^ SEED_MASKS[2], SEEDS[3] ^ SEED_MASKS[3]];

    /// The full 128-bit product of `a` and `b`, its halves xored.
    #[inline(always)]
    fn folded_multiply(a: u64, b: u64) -> u64 {
        let product = a as u128 * b as u128;
        product as u64 ^ (product >> 64) as u64
    }

    /// One 16-byte block (as two words) into the state.
    #[inline(always)]
    fn mix(state: u64, lo: u64, hi: u64) -> u64 {
        let combined = folded_multiply(lo ^ KEYS[0], hi ^ KEYS[1]);
        (state.wrapping_add(PAD) ^ combined).rotate_left(ROT)
    }

    /// Hashes `key` (always inline: the call would cost more than the
    /// two rounds of a common key).
    #[inline(always)]
    pub(crate) fn hash_key(key: &[u8]) -> u64 {
        let n = key.len();
        let word = |at: usize| u64::from_ne_bytes(key[at..at + 8].try_into().unwrap());
        let half = |at: usize| u32::from_ne_bytes(key[at..at + 4].try_into().unwrap()) as u64;
        let mut state = START.wrapping_add(n as u64).wrapping_mul(MULTIPLE);
        if n > 16 {
            // The last 16 bytes, then every 16 from the front while more
            // than 16 are left (one block up to 32 bytes).
            state = mix(state, word(n - 16), word(n - 8));
            state = mix(state, word(0), word(8));
            let mut at = 16;
            while n - at > 16 {
                state = mix(state, word(at), word(at + 8));
                at += 16;
            }
        } else if n > 8 {
            state = mix(state, word(0), word(n - 8));
        } else if n >= 4 {
            state = mix(state, half(0), half(n - 4));
        } else if n >= 2 {
            let first = u16::from_ne_bytes([key[0], key[1]]) as u64;
            state = mix(state, first, key[n - 1] as u64);
        } else if n == 1 {
            state = mix(state, key[0] as u64, key[0] as u64);
        } else {
            state = mix(state, 0, 0);
        }
        folded_multiply(state, PAD).rotate_left((state & 63) as u32)
    }
}

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

/// `n` zeroed words, or `None` if the allocator refuses. Large requests are
/// fresh mappings whose pages appear only when first touched.
fn zeroed_words(n: usize) -> Option<Box<[u64]>> {
    assert!(n > 0);
    let layout = Layout::array::<u64>(n).ok()?;
    // SAFETY: `layout` has nonzero size (n > 0) and u64's alignment. A null
    // result is handled; otherwise the zeroed allocation holds `n` valid
    // `u64`s, and `Box<[u64]>` frees it later with this same layout.
    let words = unsafe {
        let ptr = alloc_zeroed(layout) as *mut u64;
        if ptr.is_null() {
            return None;
        }
        Box::from_raw(std::ptr::slice_from_raw_parts_mut(ptr, n))
    };
    let bytes: &[u8] = words_as_bytes(&words);
    crate::memory::advise_huge_pages(bytes);
    Some(words)
}

/// Views words as bytes (for the huge-page advice).
fn words_as_bytes(words: &[u64]) -> &[u8] {
    // SAFETY: u64 has no padding and every byte of it is initialised; u8
    // has alignment 1; the byte view covers exactly the words' memory and
    // borrows it for the same lifetime.
    unsafe { std::slice::from_raw_parts(words.as_ptr() as *const u8, std::mem::size_of_val(words)) }
}

/// One table: `homes` home buckets plus [`MAX_DISPLACEMENT`] spare ones.
struct Table {
    /// One control word per bucket (`homes + MAX_DISPLACEMENT`).
    ctrl: Box<[u64]>,
    /// `SLOTS` item infos per bucket.
    slots: Box<[u64]>,
    homes: usize,
}

impl Table {
    fn try_new(homes: usize) -> Result<Table, String> {
        assert!(homes > 0);
        let buckets = homes + MAX_DISPLACEMENT;
        let err = || {
            format!(
                "cannot allocate {} bytes for a hash table of {homes} buckets",
                buckets * 8 * (SLOTS + 1)
            )
        };
        let ctrl = zeroed_words(buckets).ok_or_else(err)?;
        let slots = zeroed_words(buckets * SLOTS).ok_or_else(err)?;
        Ok(Table { ctrl, slots, homes })
    }

    fn bytes(&self) -> usize {
        std::mem::size_of_val(&*self.ctrl) + std::mem::size_of_val(&*self.slots)
    }

    fn buckets(&self) -> usize {
        self.ctrl.len()
    }

    /// The home bucket: the hash's low 32 bits scaled to `homes`.
    #[inline]
    fn home(&self, hash: u64) -> usize {
        ((hash as u32 as u64 * self.homes as u64) >> 32) as usize
    }

    /// The control word of bucket `b`.
    ///
    /// # Safety
    /// `b < self.buckets()`: a home (`< homes`) plus at most
    /// [`MAX_DISPLACEMENT`] is always in range.
    #[inline]
    unsafe fn ctrl_unchecked(&self, b: usize) -> u64 {
        debug_assert!(b < self.ctrl.len());
        // SAFETY: the caller guarantees `b` is in bounds.
        unsafe { *self.ctrl.get_unchecked(b) }
    }

    /// The item info of slot `s` of bucket `b`.
    ///
    /// # Safety
    /// `b < self.buckets()` and `s < SLOTS`.
    #[inline]
    unsafe fn slot_unchecked(&self, b: usize, s: usize) -> u64 {
        debug_assert!(b < self.ctrl.len() && s < SLOTS);
        // SAFETY: `slots` holds `SLOTS` words per bucket, and the caller
        // guarantees both indices are in range.
        unsafe { *self.slots.get_unchecked(b * SLOTS + s) }
    }

    #[inline]
    fn reach(&self, home: usize) -> usize {
        ((self.ctrl[home] & REACH_MASK) >> REACH_SHIFT) as usize
    }

    /// Starts loading the line of `home`'s first slots (slots fill from
    /// the first, so a hit is most often there).
    #[inline]
    fn prefetch(&self, home: usize) {
        debug_assert!(home < self.homes);
        prefetch(self.slots.as_ptr().wrapping_add(home * SLOTS));
    }

    /// The first slot in `hash`'s window (its home up to the home's reach)
    /// whose tag and check bits match and whose item info satisfies `pred`:
    /// (bucket, slot, item info).
    ///
    /// The home bucket is searched inline (most keys live there); the
    /// displaced buckets, only when the home has a reach, out of line.
    #[inline(always)]
    fn find(&self, hash: u64, pred: &mut impl FnMut(u64) -> bool) -> Option<(usize, usize, u64)> {
        let home = self.home(hash);
        debug_assert!(home < self.homes);
        // Start the slot lines' load while the control word arrives: on a
        // hit the matching slot is most likely in the home bucket.
        self.prefetch(home);
        // SAFETY: `home < homes` (`home` scales a 32-bit value by homes /
        // 2^32), within `ctrl_unchecked`'s bound.
        let head = unsafe { self.ctrl_unchecked(home) };
        if let Some(found) = self.find_in(home, 0, head, hash, pred) {
            return Some(found);
        }
        if head & REACH_MASK == 0 {
            return None;
        }
        self.find_displaced(home, head, hash, pred)
    }

    /// What one read of `hash`'s home control word says (the first half
    /// of [`find`](Self::find), for a read that rules keys out by tags).
    #[inline(always)]
    fn probe_home(&self, hash: u64) -> HomeProbe {
        let home = self.home(hash);
        debug_assert!(home < self.homes);
        // SAFETY: `home < homes` (`home` scales a 32-bit value by homes /
        // 2^32), within `ctrl_unchecked`'s bound.
        let head = unsafe { self.ctrl_unchecked(home) };
        HomeProbe::read(home, head, hash)
    }

    /// The second half of [`find`](Self::find): the home's matching slots
    /// as `probe` found them, then (out of line) the displaced buckets if
    /// the home has a reach.
    #[inline(always)]
    fn find_probed(
        &self,
        hash: u64,
        probe: HomeProbe,
        mut pred: impl FnMut(u64) -> bool,
    ) -> Option<(usize, usize, u64)> {
        debug_assert!(probe.home < self.homes);
        let hits = (probe.seen & TAG_BITS as u64) as u32;
        if let Some(found) = self.find_tagged(probe.home, 0, hits, hash, &mut pred) {
            return Some(found);
        }
        if probe.seen & REACH_MASK == 0 {
            return None;
        }
        // `pred` moves into the out-of-line search, so its captures are
        // laid out in memory only on this path, not on every probe.
        self.find_displaced(probe.home, probe.seen, hash, pred)
    }

    /// [`find`](Self::find) in the buckets past the home, up to its reach.
    #[inline(never)]
    fn find_displaced(
        &self,
        home: usize,
        head: u64,
        hash: u64,
        mut pred: impl FnMut(u64) -> bool,
    ) -> Option<(usize, usize, u64)> {
        let reach = ((head & REACH_MASK) >> REACH_SHIFT) as usize;
        (1..=reach).find_map(|d| {
            // SAFETY: `d <= reach <= MAX_DISPLACEMENT`, so `home + d < buckets()`.
            let word = unsafe { self.ctrl_unchecked(home + d) };
            self.find_in(home, d, word, hash, &mut pred)
        })
    }

    /// The slot of bucket `home + d` (control word `word`) holding an entry
    /// of `hash`'s key that satisfies `pred`.
    #[inline(always)]
    fn find_in(
        &self,
        home: usize,
        d: usize,
        word: u64,
        hash: u64,
        pred: &mut impl FnMut(u64) -> bool,
    ) -> Option<(usize, usize, u64)> {
        self.find_tagged(home, d, match_byte(word, tag_of(hash)), hash, pred)
    }

    /// [`find_in`](Self::find_in) with the bucket's matching tags already
    /// picked out (`hits`, one bit per slot).
    #[inline(always)]
    fn find_tagged(
        &self,
        home: usize,
        d: usize,
        mut hits: u32,
        hash: u64,
        pred: &mut impl FnMut(u64) -> bool,
    ) -> Option<(usize, usize, u64)> {
        // The check bits and the displacement an entry of this key has in
        // this bucket, compared in one masked test.
        let want = entry_id(hash, d);
        let b = home + d;
        debug_assert_eq!(hits & !TAG_BITS, 0);
        while hits != 0 {
            let s = hits.trailing_zeros() as usize;
            hits &= hits - 1;
            // SAFETY: `b < buckets()` (a home plus at most its reach, which
            // is at most MAX_DISPLACEMENT); `s < SLOTS` because
            // `match_byte` only sets bits 0..SLOTS.
            let info = unsafe { self.slot_unchecked(b, s) };
            if info & ID_MASK == want && pred(info) {
                return Some((b, s, info));
            }
        }
        None
    }

    /// A free slot in `home`'s window: (bucket, slot, displacement).
    fn free_slot(&self, home: usize) -> Option<(usize, usize, usize)> {
        (0..=MAX_DISPLACEMENT).find_map(|d| {
            let b = home + d;
            let free = match_byte(self.ctrl[b], 0);
            (free != 0).then(|| (b, free.trailing_zeros() as usize, d))
        })
    }

    /// Frees a slot in `home`'s full window (hopscotch): finds the nearest
    /// free slot within [`HOP_SEARCH`] buckets past the window and brings
    /// it back, one move at a time, each moving item staying inside its
    /// own window, until it lies in ours; returns the freed (bucket, slot,
    /// displacement).
    fn make_room(&mut self, home: usize) -> Option<(usize, usize, usize)> {
        let window_end = home + MAX_DISPLACEMENT;
        let last = (window_end + HOP_SEARCH).min(self.buckets() - 1);
        let mut free = (window_end + 1..=last).find(|&b| match_byte(self.ctrl[b], 0) != 0)?;
        while free > window_end {
            let free_slot = match_byte(self.ctrl[free], 0).trailing_zeros() as usize;
            // The earliest item that can move to `free`: its home is at
            // most MAX_DISPLACEMENT before it (the earlier it sits, the
            // further back the hole goes).
            let (b, s, their_home) = (free - MAX_DISPLACEMENT..free)
                .flat_map(|b| (0..SLOTS).map(move |s| (b, s)))
                .filter(|&(b, s)| (self.ctrl[b] >> (8 * s)) & 0xff != 0)
                .map(|(b, s)| (b, s, b - displacement(self.slots[b * SLOTS + s])))
                .find(|&(_, _, h)| free - h <= MAX_DISPLACEMENT)?;
            let tag = (self.ctrl[b] >> (8 * s)) as u8;
            let moved = self.clear_slot(b, s);
            let disp = free - their_home;
            let moved = (moved & !(DISP_MASK << DISP_SHIFT)) | (disp as u64) << DISP_SHIFT;
            self.place(their_home, free, free_slot, tag, moved);
            free = b;
        }
        let s = match_byte(self.ctrl[free], 0).trailing_zeros() as usize;
        debug_assert!(free >= home && s < SLOTS);
        Some((free, s, free - home))
    }

    /// The least-read slot of `home`'s (full) window.
    fn least_read(&self, home: usize) -> (usize, usize, usize) {
        let mut victim = (u8::MAX, home, 0, 0);
        for d in 0..=MAX_DISPLACEMENT {
            let b = home + d;
            for s in 0..SLOTS {
                let freq = frequency(self.slots[b * SLOTS + s]);
                if freq < victim.0 {
                    victim = (freq, b, s, d);
                }
            }
        }
        (victim.1, victim.2, victim.3)
    }

    fn place(&mut self, home: usize, b: usize, s: usize, tag: u8, info: u64) {
        debug_assert_eq!(match_byte(self.ctrl[b], 0) & (1 << s), 1 << s, "slot free");
        let disp = displacement(info);
        debug_assert_eq!(home + disp, b);
        self.slots[b * SLOTS + s] = info;
        self.ctrl[b] |= (tag as u64) << (8 * s);
        if disp > self.reach(home) {
            self.ctrl[home] = (self.ctrl[home] & !REACH_MASK) | (disp as u64) << REACH_SHIFT;
        }
    }

    /// Inserts an item info for a key known to be absent; `None` if its
    /// window is full.
    fn insert_new(&mut self, hash: u64, info: u64) -> Option<()> {
        let home = self.home(hash);
        let (b, s, d) = self.free_slot(home).or_else(|| self.make_room(home))?;
        let info = (info & !(DISP_MASK << DISP_SHIFT)) | (d as u64) << DISP_SHIFT;
        self.place(home, b, s, tag_of(hash), info);
        Some(())
    }

    /// True if bucket `b` holds an item whose home is `b - d`.
    fn holds_displaced(&self, b: usize, d: usize) -> bool {
        let mut used = !match_byte(self.ctrl[b], 0) & TAG_BITS;
        while used != 0 {
            let s = used.trailing_zeros() as usize;
            used &= used - 1;
            if displacement(self.slots[b * SLOTS + s]) == d {
                return true;
            }
        }
        false
    }

    /// Empties a slot and, if it held its home's farthest item, shrinks the
    /// home's reach to the farthest one left.
    #[inline(always)]
    fn clear_slot(&mut self, b: usize, s: usize) -> u64 {
        assert!(b < self.buckets() && s < SLOTS);
        debug_assert_ne!(self.ctrl[b] >> (8 * s) & 0xff, 0, "clearing an empty slot");
        // SAFETY: both indices were checked just above.
        let old = unsafe { std::mem::replace(self.slots.get_unchecked_mut(b * SLOTS + s), 0) };
        // SAFETY: as above.
        unsafe { *self.ctrl.get_unchecked_mut(b) &= !(0xff << (8 * s)) };
        if displacement(old) > 0 {
            self.shrink_reach(b, displacement(old));
        }
        old
    }

    /// After clearing a slot of bucket `b` that held an item `disp`
    /// buckets from its home: if that was the home's farthest item,
    /// shrinks the home's reach to the farthest one left.
    #[inline(never)]
    fn shrink_reach(&mut self, b: usize, disp: usize) {
        let home = b - disp;
        if disp == self.reach(home) {
            // Another item of the same home may sit at `disp` too.
            let farthest = (0..=disp)
                .rev()
                .find(|&d| self.holds_displaced(home + d, d))
                .unwrap_or(0);
            self.ctrl[home] = (self.ctrl[home] & !REACH_MASK) | (farthest as u64) << REACH_SHIFT;
        }
    }

    fn clear(&mut self) {
        self.ctrl.fill(0);
        self.slots.fill(0);
    }
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
    /// no second read of the control word.
    #[inline(always)]
    pub(crate) fn lookup_probed(
        &self,
        hash: u64,
        probe: HomeProbe,
        mut matches: impl FnMut(Location) -> bool,
    ) -> Option<(usize, usize, u64)> {
        debug_assert!(self.drain.is_none());
        debug_assert_eq!(probe, self.table.probe_home(hash));
        // Start the slot lines' load: on a hit the matching slot is most
        // likely in the home bucket.
        self.table.prefetch(probe.home);
        self.table
            .find_probed(hash, probe, move |info| matches(location(info)))
    }

    /// The item info at a known location, if the table points there.
    #[cfg(test)]
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
        let stamp = now as u64 & STAMP_MASK;
        let count = (info >> FREQ_SHIFT) & FREQ_MAX;
        if (info >> STAMP_SHIFT) & STAMP_MASK == stamp || count == FREQ_MAX {
            return;
        }
        let bump = count < 16 || {
            // xorshift64: cheap randomness for the probabilistic increment.
            self.rng ^= self.rng << 13;
            self.rng ^= self.rng >> 7;
            self.rng ^= self.rng << 17;
            self.rng % count == 0
        };
        let count = count + bump as u64;
        let (t, b) = self.resolve_mut(bucket);
        t.slots[b * SLOTS + slot] = (info
            & !((FREQ_MAX << FREQ_SHIFT) | (STAMP_MASK << STAMP_SHIFT)))
            | (count << FREQ_SHIFT)
            | (stamp << STAMP_SHIFT);
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

    /// Number of items in the table (tests only), after checking that every
    /// item lies within its home's reach and tags agree with slots.
    #[cfg(test)]
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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;

    fn loc(i: u32) -> Location {
        Location {
            seg: i % 1000,
            offset: i / 1000,
        }
    }

    const NO_GROWTH: fn() -> Option<usize> = || None;

    #[test]
    fn key_hash_is_ahash_fallback() {
        use std::hash::{BuildHasher, Hasher};
        // Where aHash uses AES hardware (a build with those target
        // features) it computes another function; ours is its portable one.
        if cfg!(any(
            all(
                any(target_arch = "x86", target_arch = "x86_64"),
                target_feature = "aes",
                not(miri)
            ),
            all(target_arch = "aarch64", target_feature = "aes", not(miri))
        )) {
            return;
        }
        let s = key_hash::SEEDS;
        let reference = ahash::RandomState::with_seeds(s[0], s[1], s[2], s[3]);
        let mut bytes = vec![0u8; 300];
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for (i, b) in bytes.iter_mut().enumerate() {
            x = x.rotate_left(7) ^ (i as u64).wrapping_mul(0x2545_f491_4f6c_dd1d);
            *b = x as u8;
        }
        for len in 0..=bytes.len() {
            for start in [0, 1, 7] {
                let key = &bytes[start..(start + len).min(bytes.len())];
                let mut h = reference.build_hasher();
                h.write(key);
                assert_eq!(hash_key(key), h.finish(), "len {}", key.len());
            }
        }
        // Every byte counts: one flipped bit changes the hash.
        for len in [1, 3, 8, 16, 17, 32, 33, 250] {
            let key = &bytes[..len];
            for at in 0..len {
                let mut other = key.to_vec();
                other[at] ^= 1;
                assert_ne!(hash_key(&other), hash_key(key), "len {len}, byte {at}");
            }
        }
    }

    #[test]
    fn key_hash_bits_are_balanced() {
        let n = 50_000u32;
        let mut ones = [0u32; 64];
        for i in 0..n {
            let h = hash_key(format!("key:{i:09}").as_bytes());
            for (bit, count) in ones.iter_mut().enumerate() {
                *count += ((h >> bit) & 1) as u32;
            }
        }
        for (bit, &count) in ones.iter().enumerate() {
            let share = count as f64 / n as f64;
            assert!(
                (0.48..0.52).contains(&share),
                "bit {bit} is set in {share:.3} of hashes"
            );
        }
    }

    #[test]
    fn item_info_round_trips() {
        let l = Location {
            seg: (1 << 20) - 1,
            offset: (1 << 21) - 1,
        };
        let info = pack(0x1f, 0x55, 7, l);
        assert_eq!(location(info), l);
        assert_eq!(frequency(info), 0x55);
        assert_eq!(displacement(info), 7);
        assert_eq!(info >> CHECK_SHIFT, 0x1f);
    }

    #[test]
    fn swar_and_sse2_tag_matching_agree() {
        // Every byte value against words with that byte in chosen lanes,
        // plus random words: the portable and the SSE2 version give the
        // same exact mask (and the mask is right).
        let mut rng = 0x1234_5678_9abc_def1u64;
        let mut next = || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        for _ in 0..20_000 {
            let r = next();
            let byte = (r >> 56) as u8;
            let lanes = next();
            let mut word = next();
            for lane in 0..8 {
                if lanes >> lane & 1 == 1 {
                    word = (word & !(0xff << (8 * lane))) | (byte as u64) << (8 * lane);
                }
            }
            let want = (0..7)
                .filter(|&i| (word >> (8 * i)) as u8 == byte)
                .fold(0u32, |m, i| m | 1 << i);
            assert_eq!(match_byte_swar(word, byte), want, "{word:#x} {byte:#x}");
            assert_eq!(match_byte(word, byte), want, "{word:#x} {byte:#x}");
        }
        // Borrow-prone patterns: a zero byte next to 0x01 and 0x80 bytes.
        for word in [0x0100u64, 0x0001, 0x8000_0100, 0x0101_0101_0101_0101, 0x80] {
            for byte in [0u8, 1, 0x80, 0xff] {
                assert_eq!(match_byte_swar(word, byte), match_byte(word, byte));
            }
        }
    }

    /// Inserts keys `{prefix}-0` .. `{prefix}-{n - 1}` at `loc(i)`, with
    /// neither eviction nor growth, checking the item count every `check`
    /// inserts. Returns the keys held, by location, and the first index
    /// refused (its window full).
    fn fill_without_eviction(
        table: &mut HashTable,
        prefix: &str,
        n: u32,
        check: u32,
    ) -> (HashMap<Location, Vec<u8>>, Option<u32>) {
        let mut keys: HashMap<Location, Vec<u8>> = HashMap::new();
        let mut first_full = None;
        for i in 0..n {
            let key = format!("{prefix}-{i}").into_bytes();
            let hash = hash_key(&key);
            match table.insert(
                hash,
                loc(i),
                false,
                0,
                |at| keys.get(&at) == Some(&key),
                NO_GROWTH,
            ) {
                Ok(ins) => {
                    assert_eq!(ins, Inserted::default());
                    keys.insert(loc(i), key);
                }
                Err(TableFull) => {
                    first_full.get_or_insert(i);
                }
            }
            if i % check == 0 {
                assert_eq!(table.count_items(), keys.len());
            }
        }
        (keys, first_full)
    }

    /// The table holds exactly `keys`, each found at its location.
    fn assert_every_key_found(table: &mut HashTable, keys: &HashMap<Location, Vec<u8>>) {
        assert_eq!(table.count_items(), keys.len());
        for (&at, key) in keys {
            let found = table.lookup(hash_key(key), |l| keys.get(&l) == Some(key));
            assert_eq!(location(found.unwrap().2), at);
        }
    }

    #[test]
    fn fills_most_slots_then_reports_full_or_evicts() {
        // 64 homes x 7 slots = 448 slots (plus 7 spare buckets).
        let mut table = HashTable::new(64);
        let (mut keys, first_full) = fill_without_eviction(&mut table, "key", 448, 448);
        let fill = keys.len() as f64 / 448.0;
        assert!(fill > 0.9, "neighbourhood probing fills {fill:.2} of slots");
        assert!(
            first_full.unwrap_or(448) > 300,
            "first full window at {first_full:?}"
        );
        assert_every_key_found(&mut table, &keys);
        // With eviction allowed, a full window gives up its least-read item.
        let key = b"newcomer".to_vec();
        let hash = hash_key(&key);
        let at = Location {
            seg: 999_999,
            offset: 5,
        };
        let ins = table
            .insert(hash, at, true, 0, |_| false, NO_GROWTH)
            .unwrap();
        if let Some(victim) = ins.evicted {
            assert!(keys.remove(&location(victim)).is_some());
        }
        keys.insert(at, key);
        assert_eq!(table.count_items(), keys.len());
        // Remove everything: every reach shrinks back to zero.
        for (&at, key) in &keys {
            assert!(table.remove_at(hash_key(key), at).is_some());
            assert!(table.remove_at(hash_key(key), at).is_none());
        }
        assert_eq!(table.count_items(), 0);
        assert!(table.table.ctrl.iter().all(|&w| w == 0));
    }

    #[test]
    fn a_rewrite_raises_the_count_to_the_floor_and_never_lowers_it() {
        let mut table = HashTable::new(8);
        let hash = hash_key(b"k");
        let locs = [1u32, 2, 3, 4].map(|seg| Location { seg, offset: 8 });
        table
            .insert(hash, locs[0], false, 0, |_| false, NO_GROWTH)
            .unwrap();
        assert_eq!(frequency(table.info_at(hash, locs[0]).unwrap()), 0);
        let ins = table.insert(hash, locs[1], false, 3, |l| l == locs[0], NO_GROWTH);
        assert_eq!(location(ins.unwrap().replaced.unwrap()), locs[0]);
        assert_eq!(
            frequency(table.info_at(hash, locs[1]).unwrap()),
            3,
            "raised"
        );
        table
            .insert(hash, locs[2], false, 1, |l| l == locs[1], NO_GROWTH)
            .unwrap();
        assert_eq!(frequency(table.info_at(hash, locs[2]).unwrap()), 3, "kept");
        table
            .insert(hash, locs[3], false, 255, |l| l == locs[2], NO_GROWTH)
            .unwrap();
        let info = table.info_at(hash, locs[3]).unwrap();
        assert_eq!(frequency(info) as u64, FREQ_MAX, "capped");
        assert_eq!(
            location(info),
            locs[3],
            "the count does not spill into the location"
        );
    }

    #[test]
    fn insert_replaces_and_keeps_frequency() {
        let mut table = HashTable::new(8);
        let hash = hash_key(b"k");
        let a = Location { seg: 1, offset: 8 };
        let b = Location { seg: 2, offset: 17 };
        assert_eq!(
            table.insert(hash, a, false, 0, |_| true, NO_GROWTH),
            Ok(Inserted::default())
        );
        let (bucket, slot, _) = table.lookup(hash, |l| l == a).unwrap();
        let before = table.table.slots.to_vec();
        table.record_access(bucket, slot, 1);
        let after_first = table.table.slots.to_vec();
        assert_ne!(before, after_first, "the first access of a second counts");
        table.record_access(bucket, slot, 1); // same second: no count, no write
        assert_eq!(table.table.slots.to_vec(), after_first);
        table.record_access(bucket, slot, 2);
        assert_eq!(frequency(table.info_at(hash, a).unwrap()), 2);
        let ins = table
            .insert(hash, b, false, 0, |l| l == a, NO_GROWTH)
            .unwrap();
        assert_eq!(location(ins.replaced.unwrap()), a);
        assert_eq!(frequency(table.info_at(hash, b).unwrap()), 2);
        assert!(table.info_at(hash, a).is_none());
        let (bucket, slot, _) = table.locate(hash, b).unwrap();
        table.move_slot(bucket, slot, a);
        assert_eq!(
            frequency(table.info_at(hash, a).unwrap()),
            1,
            "moving halves"
        );
        assert!(
            table.locate(hash, b).is_none(),
            "nothing points at b any more"
        );
        table.set_frequency(bucket, slot, 200);
        assert_eq!(frequency(table.info_at(hash, a).unwrap()), 127, "capped");
        let before = table.info_at(hash, a).unwrap();
        table.relocate(bucket, slot, b);
        let after = table.info_at(hash, b).unwrap();
        assert_eq!(location(after), b);
        assert_eq!(
            after & !(SEG_MASK << SEG_SHIFT | OFFSET_MASK),
            before & !(SEG_MASK << SEG_SHIFT | OFFSET_MASK),
            "relocating keeps the counter, stamp, check bits and displacement"
        );
        assert!(table.info_at(hash, a).is_none());
        table.relocate(bucket, slot, a);
        assert_eq!(location(table.clear_at(bucket, slot)), a);
        assert!(table.info_at(hash, a).is_none());
    }

    /// Multi-step hopscotch: a full window takes a free slot from well
    /// past it, moved back one hop at a time, so the table fills densely
    /// before any insert fails; every item stays findable and within its
    /// home's reach throughout.
    #[test]
    fn full_windows_borrow_free_slots_from_far_away() {
        let homes = 1024;
        let slots = homes * SLOTS;
        let mut table = HashTable::new(homes);
        let (keys, first_full) = fill_without_eviction(&mut table, "dense", slots as u32, 512);
        // One hop (the earlier rule) first failed at 78% of the slots and
        // held 96.8% in the end; hops from up to HOP_SEARCH buckets away
        // reach 88% and 97.9%.
        let first_full = first_full.map_or(slots, |i| i as usize);
        assert!(
            first_full * 100 > slots * 85,
            "first full window at {first_full} of {slots} slots"
        );
        assert!(
            keys.len() * 1000 > slots * 975,
            "held {} of {slots}",
            keys.len()
        );
        assert_every_key_found(&mut table, &keys);
    }

    /// The read path's two steps (`probe_home`, then `lookup_probed` unless
    /// the probe proves the key absent) answer as `lookup` does, in a table
    /// dense enough that many keys live in displaced buckets; the probe's
    /// "absent" is never wrong and rules out most absent keys without a
    /// slot read.
    #[test]
    fn a_home_probe_then_lookup_answers_as_lookup_does() {
        let homes = 256;
        let mut table = HashTable::new(homes);
        let (keys, _) = fill_without_eviction(&mut table, "probe", (homes * SLOTS) as u32, 512);
        let displaced = keys
            .iter()
            .filter(|(_, key)| {
                let found = table.lookup(hash_key(key), |l| keys.get(&l) == Some(*key));
                (found.unwrap().2 >> DISP_SHIFT) & DISP_MASK != 0
            })
            .count();
        assert!(
            displaced > keys.len() / 20,
            "only {displaced} displaced keys"
        );
        let probed = |key: &[u8]| {
            let hash = hash_key(key);
            let probe = table.probe_home(hash);
            assert_eq!(probe.proves_absent(), table.absent_by_tags(hash));
            if probe.proves_absent() {
                return None;
            }
            table
                .lookup_probed(hash, probe, |l| keys.get(&l).map(|k| &k[..]) == Some(key))
                .map(|(b, s, info)| (b, s, location(info)))
        };
        for (&at, key) in &keys {
            let want = table.lookup(hash_key(key), |l| keys.get(&l) == Some(key));
            assert_eq!(probed(key), want.map(|(b, s, info)| (b, s, location(info))));
            assert_eq!(probed(key).unwrap().2, at);
        }
        let mut ruled_out = 0;
        for i in 0..2000 {
            let key = format!("absent-{i}").into_bytes();
            assert_eq!(probed(&key), None);
            ruled_out += table.probe_home(hash_key(&key)).proves_absent() as usize;
        }
        assert!(ruled_out > 200, "tags ruled out only {ruled_out} of 2000");
    }

    #[test]
    fn eviction_from_a_full_window_takes_the_least_read() {
        // One home: every key lands in bucket 0, the window is buckets 0..8.
        let mut table = HashTable::new(1);
        let mut placed = vec![];
        for i in 0..56u32 {
            let hash = hash_key(&i.to_le_bytes());
            table
                .insert(hash, loc(i), false, 0, |_| false, NO_GROWTH)
                .unwrap();
            placed.push((hash, loc(i)));
        }
        // Read every item but #13 twice, in two different seconds.
        for now in [1, 2] {
            for (i, &(hash, at)) in placed.iter().enumerate() {
                if i != 13 {
                    let (b, s, _) = table.lookup(hash, |l| l == at).unwrap();
                    table.record_access(b, s, now);
                }
            }
        }
        let hash = hash_key(b"one more");
        assert_eq!(
            table.insert(hash, loc(99), false, 0, |_| false, NO_GROWTH),
            Err(TableFull)
        );
        let ins = table
            .insert(hash, loc(99), true, 0, |_| false, NO_GROWTH)
            .unwrap();
        assert_eq!(location(ins.evicted.unwrap()), loc(13));
        assert_eq!(table.count_items(), 56);
    }

    #[test]
    fn frequency_saturates() {
        let mut table = HashTable::new(8);
        let hash = hash_key(b"hot");
        let l = Location { seg: 0, offset: 0 };
        table
            .insert(hash, l, false, 0, |_| false, NO_GROWTH)
            .unwrap();
        for now in 0..100_000u32 {
            let (b, s, _) = table.lookup(hash, |x| x == l).unwrap();
            table.record_access(b, s, now);
        }
        let f = frequency(table.info_at(hash, l).unwrap());
        assert!(f > 16 && f <= 127, "got {f}");
    }

    #[test]
    fn grows_when_windows_fill_and_drains_incrementally() {
        // Keys are their index; the "heap" maps a location to its key.
        let mut table = HashTable::new(16);
        let mut heap: HashMap<Location, u32> = HashMap::new();
        let hash_of = |i: u32| hash_key(&i.to_le_bytes());
        let n = 5_000u32;
        let mut growths = 0;
        for i in 0..n {
            let was = table.homes();
            let ins = table
                .insert(hash_of(i), loc(i), false, 0, |_| false, || Some(n as usize))
                .expect("growth makes room");
            assert_eq!(ins, Inserted::default());
            heap.insert(loc(i), i);
            growths += (table.homes() != was) as u32;
            // A bounded drain per insert: never the whole table at once.
            table.grow_step(GROW_STEP_WRITE, |at| hash_of(heap[&at]));
            assert!(table.take_dropped().is_none());
            if i % 97 == 0 {
                assert_eq!(table.count_items(), heap.len());
            }
        }
        assert!(growths >= 2, "grew {growths} times");
        assert!(table.slots() >= n as usize);
        table.finish_growth(|at| hash_of(heap[&at]));
        assert!(!table.is_growing());
        for (&at, &i) in &heap {
            assert_eq!(
                table.locate(hash_of(i), at).map(|x| location(x.2)),
                Some(at)
            );
        }
        assert_eq!(table.count_items(), n as usize);
    }

    #[test]
    fn snapshot_words_round_trip_and_bad_words_are_refused() {
        let mut table = HashTable::new(100);
        for i in 0..500u32 {
            table
                .insert(
                    hash_key(&i.to_le_bytes()),
                    loc(i),
                    false,
                    0,
                    |_| false,
                    NO_GROWTH,
                )
                .unwrap();
        }
        let words: Vec<u64> = table.words().collect();
        assert_eq!(words.len(), HashTable::words_for(100));
        let mut back = HashTable::from_words(100, &words, |_| true).unwrap();
        assert_eq!(back.count_items(), 500);
        for i in 0..500u32 {
            assert!(back.locate(hash_key(&i.to_le_bytes()), loc(i)).is_some());
        }
        assert!(HashTable::from_words(101, &words, |_| true).is_err());
        assert!(HashTable::from_words(100, &words, |l| l.seg != 7).is_err());
        // Data in a slot whose tag says empty.
        let mut torn = words.clone();
        let (ctrl, slots) = torn.split_at_mut(107);
        let empty = (0..slots.len())
            .find(|&j| (ctrl[j / SLOTS] >> (8 * (j % SLOTS))) & 0xff == 0)
            .unwrap();
        slots[empty] = 5;
        assert!(HashTable::from_words(100, &torn, |_| true).is_err());
        // An item homed past the last home.
        let mut torn = words.clone();
        torn[106] |= 0xff;
        torn[107 + 106 * SLOTS] = pack(0, 0, 0, loc(1));
        assert!(HashTable::from_words(100, &torn, |_| true).is_err());
    }

    #[derive(Clone, Debug)]
    enum Op {
        Insert(u16),
        Remove(u16),
        Read(u16, u32),
        Step,
    }

    fn ops() -> impl Strategy<Value = Vec<Op>> {
        prop::collection::vec(
            prop_oneof![
                6 => (0u16..600).prop_map(Op::Insert),
                2 => (0u16..600).prop_map(Op::Remove),
                3 => (0u16..600, 0u32..5).prop_map(|(k, t)| Op::Read(k, t)),
                1 => Just(Op::Step),
            ],
            1..1500,
        )
    }

    proptest! {
        /// The table against a `HashMap` model: keys 0..600 (the key of a
        /// location is in a side map, as the heap would hold it), inserts
        /// that may grow the table mid-run, removals, counted reads and
        /// drain steps. Every answer matches the model; the structure's
        /// invariants (tags agree with slots, reaches cover their items,
        /// nothing left behind the drain cursor) hold throughout.
        #[test]
        fn table_matches_a_hashmap_model(ops in ops(), homes in 1usize..40, grow in any::<bool>()) {
            let mut table = HashTable::new(homes);
            let mut model: HashMap<u16, Location> = HashMap::new();
            let mut heap: HashMap<Location, u16> = HashMap::new();
            let mut next = 0u32;
            let hash_of = |k: u16| hash_key(&k.to_le_bytes());
            for (step, op) in ops.into_iter().enumerate() {
                match op {
                    Op::Insert(k) => {
                        let at = loc(next);
                        next += 1;
                        let heap_ref = &heap;
                        let r = table.insert(
                            hash_of(k),
                            at,
                            true,
                            0,
                            |l| heap_ref.get(&l) == Some(&k),
                            || grow.then_some(700),
                        );
                        match r {
                            Ok(ins) => {
                                let old = model.insert(k, at);
                                prop_assert_eq!(ins.replaced.map(location), old);
                                if let Some(v) = ins.evicted {
                                    let gone = heap.remove(&location(v)).unwrap();
                                    prop_assert_eq!(model.remove(&gone), Some(location(v)));
                                }
                                if let Some(o) = old {
                                    heap.remove(&o);
                                }
                                heap.insert(at, k);
                            }
                            Err(TableFull) => prop_assert!(false, "evicting inserts never fail"),
                        }
                    }
                    Op::Remove(k) => {
                        let got = model.get(&k).and_then(|&at| table.remove_at(hash_of(k), at));
                        prop_assert_eq!(got.map(location), model.remove(&k));
                        if let Some(v) = got {
                            heap.remove(&location(v));
                        }
                    }
                    Op::Read(k, t) => {
                        let heap_ref = &heap;
                        let found = table.lookup(hash_of(k), |l| heap_ref.get(&l) == Some(&k));
                        prop_assert_eq!(found.map(|f| location(f.2)), model.get(&k).copied());
                        if !table.is_growing() {
                            // The read path's probe, then lookup from it.
                            let probe = table.probe_home(hash_of(k));
                            let probed = if probe.proves_absent() {
                                None
                            } else {
                                table.lookup_probed(hash_of(k), probe, |l| heap_ref.get(&l) == Some(&k))
                            };
                            prop_assert_eq!(probed, found);
                        }
                        if let Some((b, s, _)) = found {
                            table.record_access(b, s, t);
                        }
                    }
                    Op::Step => {}
                }
                let heap_ref = &heap;
                table.grow_step(GROW_STEP_WRITE, |l| hash_of(heap_ref[&l]));
                while let Some(v) = table.take_dropped() {
                    let gone = heap.remove(&location(v)).unwrap();
                    model.remove(&gone);
                }
                if step % 50 == 0 {
                    prop_assert_eq!(table.count_items(), model.len());
                }
            }
            prop_assert_eq!(table.count_items(), model.len());
            for (&k, &at) in &model {
                prop_assert_eq!(table.locate(hash_of(k), at).map(|x| location(x.2)), Some(at));
            }
        }
    }
}

//! Item layout: how one key/value pair is laid out inside a segment.
//!
//! ```text
//! +--------+------+----------------------+--------------+----------+-----+-------+
//! | klen u8| meta | vlen u8 or u24le     | client flags | kept CAS | key | value |
//! +--------+------+----------------------+--------------+----------+-----+-------+
//!   3-byte header (values under 256 B),   0 or 4 bytes   0 or 8
//!   5-byte header (longer values)
//! ```
//!
//! The header's meta byte says how long the value's length field is (bit
//! 0, [`LONG_VALUE`]: three bytes instead of one) and which optional fields
//! follow (bit 1: client flags, stored only when nonzero; bit 2: a CAS
//! token the item keeps when it is rewritten by a touch): the low three
//! bits, times two, are the bytes between the short header and the key,
//! so a lookup finds the key with one mask. It also holds three marks the
//! meta protocol reads and sets in place: fetched (`h`), stale (`X`) and
//! win token sent (`Z`); bit 6 says the item was unlinked (a hint for
//! walks over a segment, [`UNLINKED`]); bit 7 says the value is the
//! 12-byte handle of an [`External`](crate::External) value kept outside
//! the heap ([`EXTERNAL`]). Small objects are the
//! point of the design, so a value under 256 bytes pays a 3-byte header.
//! Items are packed back to back with no padding (the hash table addresses
//! them by byte offset), so the header is the whole per-item cost in the
//! segment. Keys are never empty, so every item is at least 4 bytes long.
//! This module owns that layout and nothing else: it never decides where
//! an item goes, nor whether it is live.

/// Longest key accepted (memcache's limit; the header could hold 255).
pub const MAX_KEY_LEN: usize = 250;
/// Header size in bytes of an item whose value is shorter than 256 bytes.
pub(crate) const SHORT_HEADER_LEN: usize = 3;
/// Header size in bytes of an item with a longer value.
const LONG_HEADER_LEN: usize = 5;
/// Longest value a short header describes.
const SHORT_VALUE_MAX: usize = u8::MAX as usize;
/// Largest value length the 24-bit header field can describe.
pub(crate) const MAX_VALUE_FIELD: usize = (1 << 24) - 1;
/// Offset of the meta byte in the header.
pub(crate) const META_AT: usize = 1;
/// Offset of the value's length in the header.
const VALUE_LEN_AT: usize = 2;
/// The value's length takes three bytes (it is 256 bytes or longer) and
/// the header five; without it, one byte and three.
const LONG_VALUE: u8 = 0x01;
/// Client flags follow the header (4 bytes).
const HAS_FLAGS: u8 = 0x02;
/// A kept CAS token follows the header and the flags (8 bytes).
const HAS_CAS: u8 = 0x04;
/// The bits that say what lies between the short header and the key.
const LAYOUT: u8 = LONG_VALUE | HAS_FLAGS | HAS_CAS;
/// The item has been read (meta `h`).
pub(crate) const FETCHED: u8 = 0x08;
/// The item was invalidated (meta `X`).
pub(crate) const STALE: u8 = 0x10;
/// A reader was handed the win token for this item (meta `W`, then `Z`).
pub(crate) const WIN_SENT: u8 = 0x20;
/// The marks a rewrite may carry over.
pub(crate) const MARKS: u8 = FETCHED | STALE | WIN_SENT;
/// The hash table stopped pointing at the item (overwritten or deleted).
/// A hint only: set when the write path unlinks an item whose header it
/// has just read, never on an item the table points at, so a walk over a
/// segment (compaction, eviction) skips the item without hashing its key
/// and probing the table; an unlinked item without it is found dead by
/// that probe, as before. A new item's header is written whole, so the
/// bit never outlives the item it was set on.
pub(crate) const UNLINKED: u8 = 0x40;
/// The value is an [`External`](crate::External)'s encoding: a handle to
/// memory the cache's owner keeps, released once when the item leaves the
/// cache (`crate::external`). Moves (merges, compaction, a touch's
/// rewrite) carry the bit with the value; nothing else sets or clears it.
pub(crate) const EXTERNAL: u8 = 0x80;

/// Header size of an item with a `value_len`-byte value: 3, or 5 from
/// 256 bytes on.
#[inline(always)]
pub(crate) fn header_len(value_len: usize) -> usize {
    SHORT_HEADER_LEN + 2 * (value_len > SHORT_VALUE_MAX) as usize
}

/// Header size of an item whose meta byte is `bits`: 3, or 5 with
/// [`LONG_VALUE`].
#[inline(always)]
fn header_len_of(bits: u8) -> usize {
    SHORT_HEADER_LEN + (bits & LONG_VALUE) as usize * 2
}

/// Where the key starts in an item whose meta byte is `bits`: after the
/// header and the optional fields, each bit of [`LAYOUT`] worth twice its
/// value in bytes (long header 2 more, flags 4, CAS 8).
#[inline(always)]
fn key_at(bits: u8) -> usize {
    const _: () = assert!(
        LONG_VALUE as usize * 2 == LONG_HEADER_LEN - SHORT_HEADER_LEN
            && HAS_FLAGS as usize * 2 == 4
            && HAS_CAS as usize * 2 == 8
    );
    SHORT_HEADER_LEN + (bits & LAYOUT) as usize * 2
}

/// What an item carries besides its key and value.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Meta {
    /// Memcache client flags.
    pub flags: u32,
    /// A CAS token to keep instead of the one derived from the location.
    pub cas: Option<u64>,
    /// [`FETCHED`], [`STALE`], [`WIN_SENT`].
    pub marks: u8,
    /// The value is an [`External`](crate::External)'s encoding
    /// ([`EXTERNAL`]).
    pub external: bool,
}

impl Meta {
    /// Bytes of optional fields this item carries.
    #[inline]
    pub(crate) fn optional_len(&self) -> usize {
        (if self.flags != 0 { 4 } else { 0 }) + (if self.cas.is_some() { 8 } else { 0 })
    }
}

/// The largest value a new item under a `key_len`-byte key with client
/// `flags` can hold in segments of `segment_size` bytes: an item must fit
/// one segment with its header, key and, when `flags` is not 0, the 4
/// bytes that keep them. A store of a longer value fails with
/// [`Error::ValueTooLarge`](crate::Error::ValueTooLarge).
///
/// ```
/// let mut cache = segcache::Segcache::builder().segment_size(1 << 16).build()?;
/// let max = segcache::max_value_len(1 << 16, 3, 7);
/// assert!(cache.set("key", vec![0u8; max], 7, None).is_ok());
/// assert!(cache.set("key", vec![0u8; max + 1], 7, None).is_err());
/// # Ok::<(), segcache::Error>(())
/// ```
#[inline]
pub fn max_value_len(segment_size: usize, key_len: usize, flags: u32) -> usize {
    let meta = Meta {
        flags,
        ..Meta::default()
    };
    let around = meta.optional_len() + key_len;
    let short = segment_size.saturating_sub(around + SHORT_HEADER_LEN);
    if short <= SHORT_VALUE_MAX {
        return short;
    }
    // A longer value pays the long header; the short one's longest value
    // still fits when the long header leaves less.
    let long = segment_size.saturating_sub(around + LONG_HEADER_LEN);
    long.clamp(SHORT_VALUE_MAX, MAX_VALUE_FIELD)
}

/// Size in the segment (header, optional fields, key, value).
#[inline]
pub(crate) fn item_size(key_len: usize, value_len: usize, meta: &Meta) -> usize {
    header_len(value_len) + meta.optional_len() + key_len + value_len
}

/// Writes an item whose value is the concatenation of `value_parts` into
/// `dst`, which must be exactly `item_size(..)` bytes long (checked: the
/// write path itself, which reserved the bytes, calls [`write_at`]).
#[cfg(test)]
pub(crate) fn write(dst: &mut [u8], key: &[u8], value_parts: [&[u8]; 2], meta: &Meta) {
    let value_len = value_parts[0].len() + value_parts[1].len();
    assert!(key.len() <= MAX_KEY_LEN && value_len <= MAX_VALUE_FIELD);
    assert_eq!(dst.len(), item_size(key.len(), value_len, meta));
    // SAFETY: `dst` holds exactly the item's bytes (checked above).
    unsafe { write_at(dst.as_mut_ptr(), key, value_parts, meta) }
}

/// [`write`] to raw memory, with no bounds checked. Always inline: most
/// callers pass a `meta` known at compile time, and its branches then
/// fold away.
///
/// # Safety
/// `dst` points at `item_size(key.len(), value length, meta)` writable
/// bytes that no live reference covers; the key is at most
/// [`MAX_KEY_LEN`] bytes and the value at most [`MAX_VALUE_FIELD`].
#[inline(always)]
pub(crate) unsafe fn write_at(dst: *mut u8, key: &[u8], value_parts: [&[u8]; 2], meta: &Meta) {
    let value_len = value_parts[0].len() + value_parts[1].len();
    debug_assert!(key.len() <= MAX_KEY_LEN && value_len <= MAX_VALUE_FIELD);
    debug_assert_eq!(meta.marks & !MARKS, 0);
    let long = value_len > SHORT_VALUE_MAX;
    let bits = meta.marks
        | (meta.external as u8 * EXTERNAL)
        | (long as u8 * LONG_VALUE)
        | ((meta.flags != 0) as u8 * HAS_FLAGS)
        | (meta.cas.is_some() as u8 * HAS_CAS);
    let mut at = header_len_of(bits);
    // SAFETY (every write below): each lies inside the item's bytes, which
    // are laid out as `item_size` counts them: header, the optional fields
    // `meta` names, key, value. The header's stores may run past it (by one
    // byte for a short header: every item is at least 4 bytes long, and by
    // one for a long header: its value alone is 256); the optional fields
    // and the key written next cover those bytes again.
    unsafe {
        if !long {
            // Key length, meta byte and value length in one store.
            let word = key.len() as u32 | (bits as u32) << 8 | (value_len as u32) << 16;
            dst.cast::<u32>().write_unaligned(word.to_le());
        } else {
            dst.cast::<u16>()
                .write_unaligned((key.len() as u16 | (bits as u16) << 8).to_le());
            dst.add(VALUE_LEN_AT)
                .cast::<u32>()
                .write_unaligned((value_len as u32).to_le());
        }
        if meta.flags != 0 {
            dst.add(at)
                .cast::<u32>()
                .write_unaligned(meta.flags.to_le());
            at += 4;
        }
        if let Some(cas) = meta.cas {
            dst.add(at).cast::<u64>().write_unaligned(cas.to_le());
            at += 8;
        }
        copy_to(dst.add(at), key);
        at += key.len();
        for part in value_parts {
            if !part.is_empty() {
                copy_to(dst.add(at), part);
                at += part.len();
            }
        }
    }
    debug_assert_eq!(at, item_size(key.len(), value_len, meta));
}

/// `dst.copy_from_slice(src)` (see [`copy_to`]).
#[inline(always)]
pub(crate) fn copy_bytes(dst: &mut [u8], src: &[u8]) {
    let dst = &mut dst[..src.len()];
    // SAFETY: `dst` is exactly `src.len()` writable bytes, apart from `src`
    // (a `&mut` and a `&` never overlap).
    unsafe { copy_to(dst.as_mut_ptr(), src) }
}

/// Copies `src` to `dst`, inline up to 64 bytes (a few overlapping word
/// moves cost less than a call to `memcpy` for keys and small values);
/// longer copies go to `memcpy`.
///
/// # Safety
/// `dst` points at `src.len()` writable bytes that do not overlap `src`.
#[inline(always)]
unsafe fn copy_to(dst: *mut u8, src: &[u8]) {
    let n = src.len();
    let from = src.as_ptr();
    // Copies the `N` bytes at `at`: every call below keeps `at + N <= n`,
    // inside both buffers.
    let chunk = |len: usize, at: usize| {
        // SAFETY: as above; `len` is a constant at every call, so this is
        // one or two unaligned moves.
        unsafe { std::ptr::copy_nonoverlapping(from.add(at), dst.add(at), len) }
    };
    // Tested longest first: keys and small values (17 to 64 bytes) are
    // the common case and take two compares.
    if n > 16 {
        if n <= 32 {
            chunk(16, 0);
            chunk(16, n - 16);
        } else if n <= 64 {
            chunk(32, 0);
            chunk(32, n - 32);
        } else {
            chunk(n, 0);
        }
    } else if n >= 8 {
        chunk(8, 0);
        chunk(8, n - 8);
    } else if n >= 4 {
        chunk(4, 0);
        chunk(4, n - 4);
    } else if n > 0 {
        chunk(1, 0);
        chunk(1, n / 2);
        chunk(1, n - 1);
    }
}

/// Sets the meta-protocol marks `bits` on the item at the front of
/// `bytes`, writing the byte only if one is missing (a read that finds
/// them set leaves the line clean); returns the marks it had before.
#[inline(always)]
pub(crate) fn mark(bytes: &mut [u8], bits: u8) -> u8 {
    debug_assert_eq!(bits & !MARKS, 0);
    let meta = &mut bytes[META_AT];
    let before = *meta;
    if before & bits != bits {
        *meta = before | bits;
    }
    before & MARKS
}

/// A read-only view of an item in a segment.
#[derive(Clone, Copy)]
pub(crate) struct RawItem<'a> {
    bytes: &'a [u8],
}

impl<'a> RawItem<'a> {
    /// Views the item that starts at `bytes[0]` (the slice may run past it).
    #[inline(always)]
    pub(crate) fn at(bytes: &'a [u8]) -> Self {
        debug_assert!(bytes.len() > SHORT_HEADER_LEN);
        RawItem { bytes }
    }

    /// The header's first four bytes (every item has them): key length,
    /// meta byte, and the value's length or its first two bytes.
    #[inline(always)]
    fn word(&self) -> u32 {
        u32::from_le_bytes(self.bytes[..4].try_into().unwrap())
    }

    #[inline(always)]
    fn key_len(&self) -> usize {
        self.word() as u8 as usize
    }

    #[inline(always)]
    fn value_len(&self) -> usize {
        let w = self.word();
        if w & (LONG_VALUE as u32) << 8 == 0 {
            (w >> 16) as u8 as usize
        } else {
            ((w >> 16) | (self.bytes[4] as u32) << 16) as usize
        }
    }

    /// 3, or 5 when the value's length takes three bytes (read from the
    /// meta byte alone).
    #[inline(always)]
    pub(crate) fn header_len(&self) -> usize {
        header_len_of(self.bits())
    }

    #[inline(always)]
    fn bits(&self) -> u8 {
        (self.word() >> 8) as u8
    }

    #[inline(always)]
    pub(crate) fn key(&self) -> &'a [u8] {
        let start = key_at(self.bits());
        &self.bytes[start..start + self.key_len()]
    }

    #[inline(always)]
    pub(crate) fn value(&self) -> &'a [u8] {
        let start = key_at(self.bits()) + self.key_len();
        &self.bytes[start..start + self.value_len()]
    }

    #[inline]
    pub(crate) fn client_flags(&self) -> u32 {
        if self.bits() & HAS_FLAGS != 0 {
            let at = self.header_len();
            let b = &self.bytes[at..at + 4];
            u32::from_le_bytes([b[0], b[1], b[2], b[3]])
        } else {
            0
        }
    }

    /// The CAS token the item keeps across rewrites, if it has one.
    #[inline]
    pub(crate) fn kept_cas(&self) -> Option<u64> {
        if self.bits() & HAS_CAS == 0 {
            return None;
        }
        let at = self.header_len() + if self.bits() & HAS_FLAGS != 0 { 4 } else { 0 };
        let mut b = [0u8; 8];
        b.copy_from_slice(&self.bytes[at..at + 8]);
        Some(u64::from_le_bytes(b))
    }

    /// True if the write path marked the item [`UNLINKED`].
    #[inline]
    pub(crate) fn is_unlinked(&self) -> bool {
        self.bits() & UNLINKED != 0
    }

    /// The meta-protocol marks ([`FETCHED`], [`STALE`], [`WIN_SENT`]).
    #[inline]
    pub(crate) fn marks(&self) -> u8 {
        self.bits() & MARKS
    }

    /// True if the value is an [`External`](crate::External)'s encoding
    /// ([`EXTERNAL`]).
    #[inline(always)]
    pub(crate) fn is_external(&self) -> bool {
        self.bits() & EXTERNAL != 0
    }

    /// Everything but key and value.
    #[inline]
    pub(crate) fn meta(&self) -> Meta {
        Meta {
            flags: self.client_flags(),
            cas: self.kept_cas(),
            marks: self.marks(),
            external: self.is_external(),
        }
    }

    /// Bytes this item occupies in its segment.
    #[inline(always)]
    pub(crate) fn size(&self) -> usize {
        key_at(self.bits()) + self.key_len() + self.value_len()
    }
}

/// The size of the item at `item` if its key is `key`, else `None`.
///
/// Lengths first (most mismatches end at the length byte). The header is
/// read once, as the lengths' word and the meta byte, and gives both where
/// the key starts and, on a match, the item's size, so a write that
/// unlinks the item it found needs no second read. A key of 8 to 32 bytes
/// (the common sizes) is then four 8-byte compares at offsets that depend
/// on its length alone, so a lookup tests that length once, not per
/// candidate. No bounds are checked: the caller vouches for the item.
///
/// # Safety
/// `item` points at a whole item (header, optional fields, key and value)
/// in readable memory.
#[inline(always)]
pub(crate) unsafe fn size_if_key(item: *const u8, key: &[u8]) -> Option<usize> {
    // SAFETY: forwarded.
    unsafe { value_span_if_key(item, key) }.map(|v| v.at + v.len)
}

/// Where a found item's value lies and its meta byte, as the key compare
/// that found it read them from the header: a read hands the value (and
/// its flags, [`flags_before`](Self::flags_before)) out without decoding
/// the header a second time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ValueSpan {
    /// Where the value starts: bytes from the item's start (from the
    /// heap's start once [`Segments::value_span_if_key`](crate::segments::Segments::value_span_if_key)
    /// has placed it).
    pub(crate) at: usize,
    /// The value's length.
    pub(crate) len: usize,
    /// The item's meta byte.
    pub(crate) bits: u8,
}

impl ValueSpan {
    /// The item's client flags (0 if it has none), read from the item
    /// when its meta byte says it has them: right after the header, as
    /// [`RawItem::client_flags`] reads them, found back from the value
    /// through the layout the meta byte names ([`key_at`]).
    ///
    /// # Safety
    /// `value` points where [`at`](Self::at) says the value starts, in the
    /// whole item this span was read from, with leave to read the whole
    /// item (a pointer into the heap, not one derived from the value's
    /// slice: the flags lie before the value).
    #[inline(always)]
    pub(crate) unsafe fn flags_before(&self, value: *const u8, key_len: usize) -> u32 {
        if self.bits & HAS_FLAGS == 0 {
            return 0;
        }
        // From the value back to the item's start, then on to the flags.
        let back = key_len + key_at(self.bits) - header_len_of(self.bits);
        // SAFETY: the meta byte says four bytes of flags follow the header
        // (then the CAS token if any, then the key): inside the item.
        u32::from_le(unsafe { value.sub(back).cast::<u32>().read_unaligned() })
    }
}

/// [`size_if_key`]'s compare, answering where the value lies and the
/// item's flags (see [`ValueSpan`]) instead of its size (the value is the
/// item's last bytes). Same duty.
///
/// # Safety
/// As [`size_if_key`].
#[inline(always)]
pub(crate) unsafe fn value_span_if_key(item: *const u8, key: &[u8]) -> Option<ValueSpan> {
    let n = key.len();
    // SAFETY: a whole item is at least 4 bytes long (a header of 3 or 5
    // and a key of at least one byte): key length, meta byte, and the
    // value's length or its first byte.
    let word = unsafe { u32::from_le(item.cast::<u32>().read_unaligned()) };
    if word as u8 as usize != n {
        return None;
    }
    let bits = (word >> 8) as u8;
    let start = key_at(bits);
    // SAFETY: the key follows the header and the optional fields the meta
    // byte names, and its length byte says it is `n` bytes long; the
    // caller guarantees the whole item is readable.
    let stored = unsafe { item.add(start) };
    let same = if (8..=32).contains(&n) {
        // SAFETY: as above, `n` bytes at `stored`.
        unsafe { eq_8_to_32(stored, key) }
    } else {
        // SAFETY: as above.
        bytes_eq(unsafe { std::slice::from_raw_parts(stored, n) }, key)
    };
    if !same {
        return None;
    }
    let len = if bits & LONG_VALUE == 0 {
        (word >> 16) as u8 as usize
    } else {
        // SAFETY: a long header is 5 bytes, the value length's three at
        // VALUE_LEN_AT, and its value alone is 256, so the four bytes read
        // lie in the item.
        let w = unsafe { item.add(VALUE_LEN_AT).cast::<u32>().read_unaligned() };
        (u32::from_le(w) & 0xff_ffff) as usize
    };
    Some(ValueSpan {
        at: start + n,
        len,
        bits,
    })
}

/// `stored[..n] == key` for a key of `n` = 8 to 32 bytes. From 16 bytes
/// on, the 16-byte blocks at 0 and `n - 16` cover every byte (compared
/// as two vectors on x86-64, where SSE2 is baseline; as four words
/// elsewhere); below 16, the words at 0 and `n - 8`. Either way every
/// read stays inside the `n` bytes.
///
/// # Safety
/// `stored` points at `key.len()` readable bytes.
#[inline(always)]
unsafe fn eq_8_to_32(stored: *const u8, key: &[u8]) -> bool {
    let n = key.len();
    debug_assert!((8..=32).contains(&n));
    let k = key.as_ptr();
    // SAFETY: each offset below is at most `n - 8`, so each 8-byte read
    // stays inside the `n` bytes of `key` and (the caller guarantees)
    // `stored`.
    let w = |p: *const u8, at: usize| unsafe { p.add(at).cast::<u64>().read_unaligned() };
    if n < 16 {
        return ((w(stored, 0) ^ w(k, 0)) | (w(stored, n - 8) ^ w(k, n - 8))) == 0;
    }
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{
            _mm_and_si128, _mm_cmpeq_epi8, _mm_loadu_si128, _mm_movemask_epi8,
        };
        // SAFETY: SSE2 is part of x86-64; with `n >= 16` the 16 bytes at
        // 0 and at `n - 16` lie inside the `n` bytes of both (unaligned
        // loads).
        unsafe {
            let v = |p: *const u8, at: usize| _mm_loadu_si128(p.add(at).cast());
            let same = _mm_and_si128(
                _mm_cmpeq_epi8(v(stored, 0), v(k, 0)),
                _mm_cmpeq_epi8(v(stored, n - 16), v(k, n - 16)),
            );
            _mm_movemask_epi8(same) == 0xffff
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let diff = (w(stored, 0) ^ w(k, 0))
            | (w(stored, 8) ^ w(k, 8))
            | (w(stored, n - 16) ^ w(k, n - 16))
            | (w(stored, n - 8) ^ w(k, n - 8));
        diff == 0
    }
}

/// `a == b` for slices of equal length, inline and without a call: a few
/// word compares, overlapping at the ends, cost less than `memcmp`, and a
/// lookup loop that calls nothing keeps its state in registers.
#[inline(always)]
fn bytes_eq(a: &[u8], b: &[u8]) -> bool {
    debug_assert_eq!(a.len(), b.len());
    let n = a.len();
    let b = &b[..n];
    let w64 = |s: &[u8], at: usize| u64::from_ne_bytes(s[at..at + 8].try_into().unwrap());
    let w32 = |s: &[u8], at: usize| u32::from_ne_bytes(s[at..at + 4].try_into().unwrap());
    match n {
        0 => true,
        1..=3 => a[0] == b[0] && a[n / 2] == b[n / 2] && a[n - 1] == b[n - 1],
        4..=8 => w32(a, 0) == w32(b, 0) && w32(a, n - 4) == w32(b, n - 4),
        9..=16 => w64(a, 0) == w64(b, 0) && w64(a, n - 8) == w64(b, n - 8),
        17..=32 => {
            let diff = (w64(a, 0) ^ w64(b, 0))
                | (w64(a, 8) ^ w64(b, 8))
                | (w64(a, n - 16) ^ w64(b, n - 16))
                | (w64(a, n - 8) ^ w64(b, n - 8));
            diff == 0
        }
        _ => {
            // 16 bytes a step, the last step overlapping the one before.
            let mut at = 0;
            loop {
                let at16 = at.min(n - 16);
                let diff = (w64(a, at16) ^ w64(b, at16)) | (w64(a, at16 + 8) ^ w64(b, at16 + 8));
                if diff != 0 {
                    return false;
                }
                if at16 == n - 16 {
                    return true;
                }
                at += 16;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_key_value_and_flags() {
        for flags in [0u32, 1, 0xdead_beef] {
            for cas in [None, Some(0), Some(u64::MAX - 7)] {
                for (marks, external) in [(0, false), (FETCHED, true), (STALE | WIN_SENT, false)] {
                    let meta = Meta {
                        flags,
                        cas,
                        marks,
                        external,
                    };
                    let key = b"a key";
                    let size = item_size(key.len(), 11, &meta);
                    let mut buf = vec![0xffu8; size + 16];
                    write(&mut buf[..size], key, [b"hello", b" world"], &meta);
                    let item = RawItem::at(&buf);
                    assert_eq!(item.key(), key);
                    assert_eq!(item.value(), b"hello world");
                    assert_eq!(item.meta(), meta);
                    assert_eq!(item.size(), size);
                }
            }
        }
    }

    #[test]
    fn header_is_three_bytes_under_256_and_flags_cost_only_when_set() {
        // 32-byte key + 64-byte value: 99 bytes, no padding.
        let plain = Meta::default();
        assert_eq!(item_size(32, 64, &plain), 99);
        // Client flags cost 4 bytes only when nonzero, a kept CAS 8.
        let flags = Meta { flags: 7, ..plain };
        assert_eq!(item_size(32, 64, &flags), 103);
        let kept = Meta {
            cas: Some(1),
            ..flags
        };
        assert_eq!(item_size(32, 64, &kept), 111);
        assert_eq!(item_size(1, 0, &plain), 4);
        // A value of 256 bytes or more takes the 5-byte header.
        assert_eq!(item_size(1, 255, &plain), 259);
        assert_eq!(item_size(1, 256, &plain), 262);
    }

    #[test]
    fn both_headers_round_trip_at_their_edges() {
        // (Miri interprets: the largest length only natively.)
        let largest = if cfg!(miri) { 70_000 } else { MAX_VALUE_FIELD };
        for value_len in [0, 1, 254, 255, 256, 257, 65_535, 65_536, largest] {
            for meta in [
                Meta::default(),
                Meta {
                    flags: 0xdead_beef,
                    cas: Some(u64::MAX),
                    marks: MARKS,
                    external: true,
                },
            ] {
                let value: Vec<u8> = (0..value_len).map(|i| (i * 7) as u8).collect();
                let key = b"k";
                let size = item_size(key.len(), value_len, &meta);
                let mut buf = vec![0x5au8; size];
                write(&mut buf, key, [&value, &[]], &meta);
                let item = RawItem::at(&buf);
                assert_eq!(item.key(), key, "{value_len}");
                assert_eq!(item.value(), &value[..], "{value_len}");
                assert_eq!(item.meta(), meta, "{value_len}");
                assert_eq!(item.size(), size, "{value_len}");
                assert_eq!(item.header_len(), header_len(value_len));
                // SAFETY: `buf` is exactly the item just written: whole.
                assert_eq!(unsafe { size_if_key(buf.as_ptr(), key) }, Some(size));
                // The read's compare hands out the value and the flags
                // as the header decodes them; another key, nothing.
                // SAFETY: as above.
                let span = unsafe { value_span_if_key(buf.as_ptr(), key) }.unwrap();
                assert_eq!(&buf[span.at..span.at + span.len], &value[..], "{value_len}");
                // SAFETY: as above; `span.at` is where the value starts.
                let flags = unsafe { span.flags_before(buf.as_ptr().add(span.at), key.len()) };
                assert_eq!(flags, meta.flags, "{value_len}");
                // SAFETY: as above.
                assert_eq!(unsafe { value_span_if_key(buf.as_ptr(), b"j") }, None);
                // Marking keeps the length's width.
                mark(&mut buf, FETCHED);
                assert_eq!(RawItem::at(&buf).value(), &value[..]);
            }
        }
    }

    #[test]
    fn max_value_len_is_the_largest_value_that_fits() {
        for segment in (8..700).chain([4096, 1 << 20]) {
            for (key_len, flags) in [(1, 0), (1, 9), (32, 0), (250, 9)] {
                let meta = Meta {
                    flags,
                    ..Meta::default()
                };
                let max = max_value_len(segment, key_len, flags);
                let around = key_len + meta.optional_len() + SHORT_HEADER_LEN;
                if segment < around {
                    assert_eq!(max, 0);
                    continue;
                }
                assert!(
                    item_size(key_len, max, &meta) <= segment,
                    "{segment} {key_len}"
                );
                assert!(
                    item_size(key_len, max + 1, &meta) > segment,
                    "{segment} {key_len}"
                );
            }
        }
    }

    #[test]
    fn key_compare_agrees_with_slice_equality_and_sizes_the_item() {
        let plain = Meta::default();
        let flagged = Meta { flags: 7, ..plain };
        let both = Meta {
            cas: Some(9),
            ..flagged
        };
        // Every length natively; under Miri (which interprets, and took
        // over 20 minutes for all of them) the short ones and the edges of
        // the compare's paths.
        let lens: Vec<usize> = if cfg!(miri) {
            (1..=40).chain([63, 64, 65, MAX_KEY_LEN]).collect()
        } else {
            (1..=MAX_KEY_LEN).collect()
        };
        for (len, meta) in lens
            .into_iter()
            .flat_map(|len| [(len, plain), (len, flagged), (len, both)])
        {
            let key: Vec<u8> = (0..len as u8).map(|i| i.wrapping_mul(37)).collect();
            let size = item_size(len, 3, &meta);
            let mut buf = vec![0u8; size];
            write(&mut buf, &key, [b"val", b""], &meta);
            // SAFETY: `buf` is exactly the item just written: whole.
            let found = |k: &[u8]| unsafe { size_if_key(buf.as_ptr(), k) };
            assert_eq!(found(&key), Some(size), "len {len}");
            // A difference at every position, and a different length.
            for at in 0..len {
                let mut other = key.clone();
                other[at] ^= 0x80;
                assert_eq!(found(&other), None, "len {len}, byte {at}");
            }
            assert_eq!(found(&key[..len - 1]), None);
            let mut longer = key.clone();
            longer.push(0);
            assert_eq!(found(&longer), None);
        }
    }

    #[test]
    fn small_copies_copy_exactly_the_bytes_asked_for() {
        let src: Vec<u8> = (0..100u8)
            .map(|i| i.wrapping_mul(91).wrapping_add(7))
            .collect();
        for n in 0..=100usize {
            let mut dst = [0xeeu8; 102];
            copy_bytes(&mut dst[1..=n], &src[..n]);
            assert_eq!(&dst[1..=n], &src[..n], "len {n}");
            assert_eq!(dst[0], 0xee, "len {n}: nothing before");
            assert!(
                dst[n + 1..].iter().all(|&b| b == 0xee),
                "len {n}: nothing after"
            );
        }
    }

    #[test]
    fn largest_lengths_fit_their_fields() {
        let key = vec![b'k'; MAX_KEY_LEN];
        let value = vec![b'v'; 70_000];
        let meta = Meta {
            flags: 1,
            ..Meta::default()
        };
        let size = item_size(key.len(), value.len(), &meta);
        let mut buf = vec![0u8; size];
        write(&mut buf, &key, [&value, &[]], &meta);
        let item = RawItem::at(&buf);
        assert_eq!(item.key(), &key[..]);
        assert_eq!(item.value().len(), 70_000);
    }
}

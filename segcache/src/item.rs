//! Item layout: how one key/value pair is laid out inside a segment.
//!
//! ```text
//! +--------+-----------+--------+-------------+-----+-------+
//! | klen u8| vlen u24le| flags  | client flags| key | value |
//! +--------+-----------+--------+-------------+-----+-------+
//!   5-byte header                 0 or 4 bytes
//! ```
//!
//! The header's flags byte holds the length of the optional data (bits 0-5);
//! the optional data is the memcache client flags, stored only when nonzero.
//! Items are packed back to back with no padding (the hash table addresses
//! them by byte offset), so the header is the whole per-item cost in the
//! segment. This module owns that layout and nothing else: it never decides
//! where an item goes, nor whether it is live.

/// Longest key accepted (memcache's limit; the header could hold 255).
pub const MAX_KEY_LEN: usize = 250;
/// Item header size in bytes.
pub(crate) const HEADER_LEN: usize = 5;
/// Largest value length the 24-bit header field can describe.
pub(crate) const MAX_VALUE_FIELD: usize = (1 << 24) - 1;
const OPTIONAL_LEN_MASK: u8 = 0x3f;

/// Bytes of optional data an item with these client flags carries.
#[inline]
pub(crate) fn optional_len(client_flags: u32) -> usize {
    if client_flags == 0 {
        0
    } else {
        4
    }
}

/// Size in the segment (header, optional data, key, value).
#[inline]
pub(crate) fn item_size(key_len: usize, value_len: usize, client_flags: u32) -> usize {
    HEADER_LEN + optional_len(client_flags) + key_len + value_len
}

/// Writes an item whose value is the concatenation of `value_parts` into the
/// front of `dst`, which must be exactly `item_size(..)` bytes long.
pub(crate) fn write(dst: &mut [u8], key: &[u8], value_parts: [&[u8]; 2], client_flags: u32) {
    let value_len = value_parts[0].len() + value_parts[1].len();
    debug_assert!(key.len() <= MAX_KEY_LEN && value_len <= MAX_VALUE_FIELD);
    debug_assert_eq!(dst.len(), item_size(key.len(), value_len, client_flags));
    let olen = optional_len(client_flags);
    dst[0] = key.len() as u8;
    dst[1..4].copy_from_slice(&(value_len as u32).to_le_bytes()[..3]);
    dst[4] = olen as u8;
    let mut at = HEADER_LEN;
    if olen != 0 {
        dst[at..at + 4].copy_from_slice(&client_flags.to_le_bytes());
        at += 4;
    }
    dst[at..at + key.len()].copy_from_slice(key);
    at += key.len();
    for part in value_parts {
        dst[at..at + part.len()].copy_from_slice(part);
        at += part.len();
    }
    debug_assert_eq!(at, dst.len());
}

/// A read-only view of an item in a segment.
#[derive(Clone, Copy)]
pub(crate) struct RawItem<'a> {
    bytes: &'a [u8],
}

impl<'a> RawItem<'a> {
    /// Views the item that starts at `bytes[0]` (the slice may run past it).
    #[inline]
    pub(crate) fn at(bytes: &'a [u8]) -> Self {
        debug_assert!(bytes.len() >= HEADER_LEN);
        RawItem { bytes }
    }

    #[inline]
    fn key_len(&self) -> usize {
        self.bytes[0] as usize
    }

    #[inline]
    fn value_len(&self) -> usize {
        u32::from_le_bytes([self.bytes[1], self.bytes[2], self.bytes[3], 0]) as usize
    }

    #[inline]
    fn optional_len(&self) -> usize {
        (self.bytes[4] & OPTIONAL_LEN_MASK) as usize
    }

    #[inline]
    pub(crate) fn key(&self) -> &'a [u8] {
        let start = HEADER_LEN + self.optional_len();
        &self.bytes[start..start + self.key_len()]
    }

    #[inline]
    pub(crate) fn value(&self) -> &'a [u8] {
        let start = HEADER_LEN + self.optional_len() + self.key_len();
        &self.bytes[start..start + self.value_len()]
    }

    #[inline]
    pub(crate) fn client_flags(&self) -> u32 {
        if self.optional_len() >= 4 {
            let b = &self.bytes[HEADER_LEN..HEADER_LEN + 4];
            u32::from_le_bytes([b[0], b[1], b[2], b[3]])
        } else {
            0
        }
    }

    /// Bytes this item occupies in its segment.
    #[inline]
    pub(crate) fn size(&self) -> usize {
        HEADER_LEN + self.optional_len() + self.key_len() + self.value_len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_key_value_and_flags() {
        for flags in [0u32, 1, 0xdead_beef] {
            let key = b"a key";
            let size = item_size(key.len(), 11, flags);
            let mut buf = vec![0xffu8; size + 16];
            write(&mut buf[..size], key, [b"hello", b" world"], flags);
            let item = RawItem::at(&buf);
            assert_eq!(item.key(), key);
            assert_eq!(item.value(), b"hello world");
            assert_eq!(item.client_flags(), flags);
            assert_eq!(item.size(), size);
        }
    }

    #[test]
    fn header_is_five_bytes_and_flags_cost_only_when_set() {
        // 32-byte key + 64-byte value: 101 bytes, no padding.
        assert_eq!(item_size(32, 64, 0), 101);
        // Client flags cost 4 bytes only when nonzero.
        assert_eq!(item_size(32, 64, 7), 105);
        assert_eq!(item_size(1, 0, 0), 6);
    }

    #[test]
    fn largest_lengths_fit_their_fields() {
        let key = vec![b'k'; MAX_KEY_LEN];
        let value = vec![b'v'; 70_000];
        let size = item_size(key.len(), value.len(), 1);
        let mut buf = vec![0u8; size];
        write(&mut buf, &key, [&value, &[]], 1);
        let item = RawItem::at(&buf);
        assert_eq!(item.key(), &key[..]);
        assert_eq!(item.value().len(), 70_000);
    }
}

//! All-in bytes per item of a *full* segcache heap, the number behind the
//! "<= 16 B overhead per 32 B key + 64 B value item" target.
//!
//! [`measure`] builds a cache with a given heap and hash power (merge
//! eviction on, no TTL), writes distinct 32-byte keys with 64-byte values
//! until `overfill` times the heap's worth of item bytes have gone in (so
//! eviction has run for a while and the heap is in steady state), then
//! reads `stats()`: bytes per item = `total_bytes / items`, overhead = that
//! minus the 96 payload bytes. The split of the overhead (item header,
//! hash-table share, segment headers, unused heap) is reported too, so a
//! gap to the target can be attributed.
//!
//! This is the cache's own accounting; the `memory` subcommand's
//! allocator/RSS view checks it from outside.

use segcache::{Eviction, Segcache};

/// Key length of the measurement.
pub const KEY: usize = 32;
/// Value length of the measurement.
pub const VALUE: usize = 64;

/// One full-heap measurement.
#[derive(Debug, Clone, PartialEq)]
pub struct FullHeap {
    pub heap_bytes: u64,
    /// The table's starting size hint (`None`: the default, from the heap).
    pub hash_power: Option<u8>,
    /// Item slots in the table at the end (7 per 64-byte bucket; the table
    /// grows while the heap has room).
    pub slots: u64,
    pub writes: u64,
    pub stats: segcache::Stats,
}

impl FullHeap {
    /// All allocated bytes per item held.
    pub fn per_item(&self) -> f64 {
        self.stats.total_bytes as f64 / self.stats.items.max(1) as f64
    }

    /// Bytes per item beyond the 96 key+value bytes.
    pub fn overhead(&self) -> f64 {
        self.per_item() - (KEY + VALUE) as f64
    }

    /// In-segment bytes per item beyond key+value (header and any padding).
    pub fn item_header(&self) -> f64 {
        self.stats.live_bytes as f64 / self.stats.items.max(1) as f64 - (KEY + VALUE) as f64
    }

    /// Hash-table bytes per item held.
    pub fn table_share(&self) -> f64 {
        self.stats.hash_table_bytes as f64 / self.stats.items.max(1) as f64
    }

    /// Segment-header and TTL-bucket bytes per item held.
    pub fn header_share(&self) -> f64 {
        self.stats.segment_header_bytes as f64 / self.stats.items.max(1) as f64
    }

    /// Merge eviction's admission bytes (ghosts, pool flags) per item held.
    pub fn admission_share(&self) -> f64 {
        self.stats.admission_bytes as f64 / self.stats.items.max(1) as f64
    }

    /// Heap bytes not holding a live item (dead versions, unfilled segment
    /// tails, free segments), per item held.
    pub fn slack_share(&self) -> f64 {
        (self.stats.heap_bytes - self.stats.live_bytes) as f64 / self.stats.items.max(1) as f64
    }

    /// Fraction of table slots in use.
    pub fn table_load(&self) -> f64 {
        self.stats.items as f64 / self.slots.max(1) as f64
    }
}

/// Writes the key of item `i` into `buf` (at least 8 bytes: the index,
/// then a hex digest of it, then `k` padding, cut to the buffer's length).
pub fn key(i: u64, buf: &mut [u8]) {
    buf.fill(b'k');
    buf[..8].copy_from_slice(&i.to_le_bytes());
    let hex = format!("{:016x}", crate::twitter::mix64(i));
    let n = (buf.len() - 8).min(16);
    buf[8..8 + n].copy_from_slice(&hex.as_bytes()[..n]);
}

/// Builds a cache from `builder` and writes distinct items of `key_len`
/// (at least 8) and `value_len` bytes, no TTL, until `overfill` times the
/// items its heap could hold have gone in; returns its stats then and how
/// many items were written.
pub fn fill(
    builder: segcache::Builder,
    key_len: usize,
    value_len: usize,
    overfill: f64,
) -> Result<(segcache::Stats, u64), segcache::Error> {
    let mut cache = builder.build()?;
    let value = vec![b'v'; value_len];
    let mut k = vec![0u8; key_len.max(8)];
    let item = (k.len() + value_len + 5) as f64;
    let writes = (overfill * cache.stats().heap_bytes as f64 / item) as u64;
    for i in 0..writes {
        key(i, &mut k);
        cache.set(&k, &value, 0, None)?;
    }
    Ok((cache.stats(), writes))
}

/// Fills a `heap`-byte cache with `hash_power` past full: `overfill` times
/// the items the heap could hold.
pub fn measure(
    heap: usize,
    segment_size: usize,
    hash_power: Option<u8>,
    overfill: f64,
) -> Result<FullHeap, segcache::Error> {
    let mut builder = Segcache::builder()
        .heap_size(heap)
        .segment_size(segment_size)
        .eviction(Eviction::Merge);
    if let Some(p) = hash_power {
        builder = builder.hash_power(p);
    }
    let (stats, writes) = fill(builder, KEY, VALUE, overfill)?;
    Ok(FullHeap {
        heap_bytes: stats.heap_bytes,
        hash_power,
        slots: stats.hash_table_bytes / 64 * 7,
        writes,
        stats,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn full_heap_accounting_adds_up() {
        // 4 MiB heap of 64 KiB segments, table with room to spare.
        let r = measure(4 << 20, 64 << 10, Some(14), 3.0).unwrap();
        let s = &r.stats;
        assert!(s.evictions > 0, "overfilled: {s:?}");
        assert!(s.items > 0 && s.items <= r.slots);
        // The shares add up to the overhead.
        let sum = r.item_header()
            + r.table_share()
            + r.header_share()
            + r.admission_share()
            + r.slack_share();
        assert!(
            (sum - r.overhead()).abs() < 1e-6,
            "{sum} vs {}",
            r.overhead()
        );
        // Every item pays at least its 3-byte header in the segment.
        assert!(r.item_header() >= 3.0 && r.item_header() < 13.0);
        // A full heap is mostly live items.
        assert!(s.live_bytes as f64 > 0.7 * s.heap_bytes as f64, "{s:?}");
    }

    #[test]
    fn a_too_small_table_grows_to_what_the_heap_holds() {
        let roomy = measure(4 << 20, 64 << 10, Some(14), 2.0).unwrap();
        let tight = measure(4 << 20, 64 << 10, Some(10), 2.0).unwrap();
        // 1024 buckets x 7 = 7168 slots to start for ~41k items' worth of
        // heap: the table grows while the heap has room, so the heap, not
        // the table, decides how many items stay.
        assert!(tight.stats.items > 7168 * 4, "{:?}", tight.stats);
        assert!(
            tight.stats.items as f64 > 0.95 * roomy.stats.items as f64,
            "{} vs {}",
            tight.stats.items,
            roomy.stats.items
        );
        // The default table needs no hint.
        let default = measure(4 << 20, 64 << 10, None, 2.0).unwrap();
        assert!(default.stats.items as f64 > 0.95 * roomy.stats.items as f64);
    }
}

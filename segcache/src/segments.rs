//! Segments: the heap, cut into fixed-size logs, and their headers.
//!
//! A segment is written by appending, and its items stay where they were
//! written. Besides the marks set in an item's header, the one write into
//! an item already written is an overwrite of the same size in place
//! (`Segcache::set`, see [`Segments::tokens_out`]), which leaves the
//! item's size and place as they were.
//!
//! Owns the heap bytes, one [`SegmentHeader`] per segment (kept apart from
//! the data, so items carry no per-item metadata beyond their 3- or 5-byte header)
//! and the free list. Items are addressed by (segment id, offset), never by
//! pointer, so the heap can later live in a file and be mapped anywhere.
//! This module must never touch the hash table: deciding which items are
//! live is the cache's job.

use crate::hashtable::Location;
use crate::item::{RawItem, ValueSpan};
use crate::memory::Heap;
use crate::windows::{Window, Windows, WINDOW_BYTES};
use std::sync::atomic::{AtomicU64, Ordering};

/// "No segment" in the prev/next links.
pub(crate) const NONE: u32 = u32::MAX;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SegState {
    /// On the free list.
    Free,
    /// The tail of its TTL bucket: takes new writes.
    Active,
    /// Full or aged out: takes no new items until evicted or expired
    /// (an item in it may still be overwritten in place, same size).
    Sealed,
}

/// Per-segment metadata.
#[derive(Clone, Debug)]
pub(crate) struct SegmentHeader {
    /// When the segment was taken from the free list (cache seconds).
    pub create_at: u32,
    /// Earliest deadline of any item written into it (of a window not yet
    /// reaped, if `split`); 0 means never.
    pub expire_at: u32,
    /// Latest deadline of any item written into it (0: never); with
    /// `expire_at` it bounds how early an item here can go (`ttl::spread`),
    /// unless the segment is `split`.
    pub expire_last: u32,
    /// Bytes written so far; the next item goes here.
    pub write_offset: u32,
    /// Bytes of items the hash table still points at.
    pub live_bytes: u32,
    /// Number of items the hash table still points at.
    pub live_items: u32,
    /// Neighbours in the TTL bucket's list (older, newer).
    pub prev: u32,
    pub next: u32,
    /// Bumped whenever the segment's contents are discarded or rewritten,
    /// so (generation, segment, offset) names one item version forever.
    pub generation: u32,
    /// The TTL bucket this segment belongs to.
    pub ttl_bucket: u16,
    pub state: SegState,
    /// A merge packed items of deadlines further apart than the bucket's
    /// spread into it: each item expires with its window, and this many
    /// windows ([`Segments::windows`]) are kept in the segment's last
    /// bytes, past its items; `expire_at` is only the earliest. 0: the
    /// header's deadlines hold for every item.
    pub split: u8,
}

impl SegmentHeader {
    /// Counts an item of `size` bytes written into the segment as live.
    #[inline(always)]
    pub(crate) fn count_item(&mut self, size: usize) {
        self.live_bytes += size as u32;
        self.live_items += 1;
    }

    /// Takes an item of `size` bytes the table no longer points at out of
    /// the segment's live counts.
    #[inline(always)]
    pub(crate) fn uncount_item(&mut self, size: usize) {
        self.live_bytes -= size as u32;
        self.live_items -= 1;
    }

    fn free(generation: u32) -> Self {
        SegmentHeader {
            create_at: 0,
            expire_at: 0,
            expire_last: 0,
            write_offset: 0,
            live_bytes: 0,
            live_items: 0,
            prev: NONE,
            next: NONE,
            generation,
            ttl_bucket: 0,
            state: SegState::Free,
            split: 0,
        }
    }

    /// True if a merge split the segment's items into deadline windows.
    #[inline]
    pub(crate) fn is_split(&self) -> bool {
        self.split != 0
    }

    /// True once the segment's earliest item deadline has passed.
    #[inline]
    pub(crate) fn is_expired(&self, now: u32) -> bool {
        self.expire_at != 0 && self.expire_at <= now
    }
}

pub(crate) struct Segments {
    pub(crate) headers: Box<[SegmentHeader]>,
    data: Heap,
    segment_size: usize,
    free: Vec<u32>,
    /// Free segments held back from writes, their pages given back to the
    /// kernel: the heap's share of memory that external values
    /// (`crate::external`) use instead.
    withheld: Vec<u32>,
    /// What a generation grows by when a segment's contents go: 1, or in
    /// a shard of a sharded cache the shard count, so that every
    /// generation of shard `i` is `i` modulo the count and no two shards
    /// hand out the same CAS token ([`Segments::set_cas_lane`]).
    gen_step: u32,
    /// Per segment, whether a CAS token made from the location of one of
    /// its items (see `cache::view::cas_token`) has been handed out since
    /// the segment's generation began: [`TOKENS`] | that generation, or
    /// anything else (0: never). While none has, no caller can hold a
    /// token naming a place in the segment, so an overwrite of one of its
    /// items may write over the old item in place, which keeps its
    /// location and so its token; once one has, every overwrite of the
    /// segment's items goes to the log (a new location, a new token). A
    /// new generation (the segment emptied, or its items packed anew)
    /// makes the old tokens stale, so the tag stops matching by itself.
    /// Set from `&self` (a token is made by an [`Item`](crate::Item)
    /// view), hence atomic.
    tokens: Box<[AtomicU64]>,
}

/// The tag bit of [`Segments`]' `tokens` entries, above the generation.
const TOKENS: u64 = 1 << 32;

impl Segments {
    /// `count` free segments of `segment_size` bytes in anonymous memory.
    #[cfg(test)]
    pub(crate) fn new(segment_size: usize, count: usize) -> Self {
        Self::with_heap(
            segment_size,
            count,
            Heap::anon(segment_size * count).unwrap(),
        )
    }

    /// `count` free segments over `data` (its length must be
    /// `segment_size * count`).
    pub(crate) fn with_heap(segment_size: usize, count: usize, data: Heap) -> Self {
        debug_assert_eq!(data.len(), segment_size * count);
        Segments {
            headers: (0..count).map(|_| SegmentHeader::free(1)).collect(),
            data,
            segment_size,
            free: (0..count as u32).rev().collect(),
            withheld: Vec::new(),
            gen_step: 1,
            tokens: (0..count).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// Records that a CAS token made from a location in segment `seg` was
    /// handed out: until the segment's generation changes, overwrites of
    /// its items are never made in place (see the field).
    #[inline(always)]
    pub(crate) fn note_token(&self, seg: u32) {
        let tag = TOKENS | u64::from(self.headers[seg as usize].generation);
        let noted = &self.tokens[seg as usize];
        // A load first: once set, making a token writes nothing.
        if noted.load(Ordering::Relaxed) != tag {
            noted.store(tag, Ordering::Relaxed);
        }
    }

    /// [`note_token`](Self::note_token) for every segment: a heap
    /// restored from a datapool, whose items' tokens clients of the run
    /// that saved it may hold.
    pub(crate) fn note_tokens_everywhere(&self) {
        for seg in 0..self.headers.len() as u32 {
            self.note_token(seg);
        }
    }

    /// Whether a token naming a place in segment `seg`'s present
    /// generation may be out (see the field): overwrites of its items in
    /// place are off.
    #[inline(always)]
    pub(crate) fn tokens_out(&self, seg: u32) -> bool {
        let tag = TOKENS | u64::from(self.headers[seg as usize].generation);
        self.tokens[seg as usize].load(Ordering::Relaxed) == tag
    }

    /// Whether any segment has a token out (the model's check that no
    /// token was made behind its back).
    #[cfg(any(test, fuzzing))]
    pub(crate) fn any_tokens_out(&self) -> bool {
        (0..self.headers.len() as u32).any(|seg| self.tokens_out(seg))
    }

    /// Makes this the shard `lane` of `lanes` (a power of two up to 1024):
    /// from now on every segment generation is `lane` modulo `lanes`, so
    /// the CAS tokens built from generations (23 bits of them) never
    /// coincide with another shard's. A segment's generation then repeats
    /// after 2^23 / `lanes` reuses instead of 2^23. Generations restored
    /// from a datapool this shard saved are already in its lane and are
    /// kept (tokens survive the restart); any other (a fresh heap, or a
    /// datapool saved without lanes) is moved into the lane, which can only
    /// make an old token stop matching, never match wrongly.
    pub(crate) fn set_cas_lane(&mut self, lane: u32, lanes: u32) {
        debug_assert!(lanes.is_power_of_two() && lanes <= 1024 && lane < lanes);
        self.gen_step = lanes;
        for h in self.headers.iter_mut() {
            if h.generation % lanes != lane {
                h.generation = h.generation.wrapping_mul(lanes).wrapping_add(lane);
            }
        }
    }

    /// Starts a new generation of segment `id`: no CAS token of an item
    /// that was there can match one written there from now on.
    #[inline]
    pub(crate) fn bump_generation(&mut self, id: u32) {
        let h = &mut self.headers[id as usize];
        h.generation = h.generation.wrapping_add(self.gen_step);
    }

    /// The header of segment `id`, without a bounds check (for a read
    /// whose id comes from the table).
    ///
    /// # Safety
    /// `id < self.count()`, as for [`header_unchecked_mut`](Self::header_unchecked_mut).
    #[inline(always)]
    pub(crate) unsafe fn header_unchecked(&self, id: u32) -> &SegmentHeader {
        debug_assert!((id as usize) < self.headers.len());
        // SAFETY: the caller guarantees `id` is in range.
        unsafe { self.headers.get_unchecked(id as usize) }
    }

    /// The header of segment `id`, without a bounds check (for the write
    /// path, whose ids come from a TTL bucket's tail or the table).
    ///
    /// # Safety
    /// `id < self.count()`: true of every TTL bucket's tail and of every
    /// segment the table points into (a restore checks both).
    #[inline(always)]
    pub(crate) unsafe fn header_unchecked_mut(&mut self, id: u32) -> &mut SegmentHeader {
        debug_assert!((id as usize) < self.headers.len());
        // SAFETY: the caller guarantees `id` is in range.
        unsafe { self.headers.get_unchecked_mut(id as usize) }
    }

    #[inline]
    pub(crate) fn segment_size(&self) -> usize {
        self.segment_size
    }

    pub(crate) fn count(&self) -> usize {
        self.headers.len()
    }

    /// Free segments that writes may take (not the withheld ones).
    pub(crate) fn free_count(&self) -> usize {
        self.free.len()
    }

    /// Segments held back from writes ([`withhold`](Self::withhold)).
    pub(crate) fn withheld_count(&self) -> usize {
        self.withheld.len()
    }

    /// Holds a free segment back from writes and gives its pages to the
    /// kernel; false if no segment is free.
    pub(crate) fn withhold(&mut self) -> bool {
        let Some(id) = self.free.pop() else {
            return false;
        };
        debug_assert_eq!(self.headers[id as usize].state, SegState::Free);
        let start = id as usize * self.segment_size;
        self.data.discard(start..start + self.segment_size);
        self.withheld.push(id);
        true
    }

    /// Returns a withheld segment to the free list; false if none is held.
    pub(crate) fn unwithhold(&mut self) -> bool {
        let Some(id) = self.withheld.pop() else {
            return false;
        };
        self.free.push(id);
        true
    }

    pub(crate) fn heap_bytes(&self) -> usize {
        self.data.len()
    }

    pub(crate) fn header_bytes(&self) -> usize {
        self.headers.len()
            * (std::mem::size_of::<SegmentHeader>() + std::mem::size_of::<AtomicU64>())
            + (self.free.capacity() + self.withheld.capacity()) * std::mem::size_of::<u32>()
    }

    pub(crate) fn heap(&self) -> &Heap {
        &self.data
    }

    /// Rebuilds the free list from the headers' states (after a restore).
    pub(crate) fn rebuild_free_list(&mut self) {
        self.free = (0..self.headers.len() as u32)
            .rev()
            .filter(|&id| self.headers[id as usize].state == SegState::Free)
            .collect();
    }

    /// Takes a segment off the free list, ready for writes.
    pub(crate) fn alloc(&mut self, now: u32, ttl_bucket: u16) -> Option<u32> {
        let id = self.free.pop()?;
        self.data.note_used((id as usize + 1) * self.segment_size);
        let h = &mut self.headers[id as usize];
        debug_assert_eq!(h.state, SegState::Free);
        *h = SegmentHeader {
            create_at: now,
            ttl_bucket,
            state: SegState::Active,
            ..SegmentHeader::free(h.generation)
        };
        Some(id)
    }

    /// Returns a segment whose items are all unlinked to the free list.
    pub(crate) fn release(&mut self, id: u32) {
        let h = &mut self.headers[id as usize];
        debug_assert_ne!(h.state, SegState::Free);
        debug_assert_eq!(h.live_items, 0);
        debug_assert_eq!(h.live_bytes, 0);
        *h = SegmentHeader::free(h.generation.wrapping_add(self.gen_step));
        self.free.push(id);
    }

    /// Frees every segment at once (the caller has emptied the table);
    /// withheld segments are free again too.
    pub(crate) fn release_all(&mut self) {
        self.withheld.clear();
        for h in self.headers.iter_mut() {
            let generation = if h.state == SegState::Free {
                h.generation
            } else {
                h.generation.wrapping_add(self.gen_step)
            };
            *h = SegmentHeader::free(generation);
        }
        self.free = (0..self.headers.len() as u32).rev().collect();
    }

    /// The bytes of one segment.
    #[inline]
    pub(crate) fn data(&self, id: u32) -> &[u8] {
        let start = id as usize * self.segment_size;
        &self.data[start..start + self.segment_size]
    }

    #[cfg(test)]
    pub(crate) fn data_mut(&mut self, id: u32) -> &mut [u8] {
        let start = id as usize * self.segment_size;
        &mut self.data[start..start + self.segment_size]
    }

    /// The item stored at `loc` (a view from it to its segment's end:
    /// one bounds check for the pair of slicings this stands for).
    #[inline]
    pub(crate) fn item(&self, loc: Location) -> RawItem<'_> {
        let (start, end) = self.item_span(loc);
        RawItem::at(&self.data[start..end])
    }

    /// Where a new item of `size` bytes goes at `loc`, as a raw pointer
    /// (the write path's item copy checks no bounds).
    ///
    /// # Safety
    /// `loc` and `size` are what the cache's `reserve` just handed out:
    /// `loc.offset + size` bytes fit in segment `loc.seg`, which exists.
    #[inline(always)]
    pub(crate) unsafe fn reserved_ptr(&mut self, loc: Location, size: usize) -> *mut u8 {
        let start = loc.seg as usize * self.segment_size + loc.offset as usize;
        debug_assert!((loc.seg as usize) < self.headers.len());
        debug_assert!(loc.offset as usize + size <= self.segment_size);
        debug_assert!(start + size <= self.data.len());
        // SAFETY: the caller guarantees `start..start + size` is in the heap.
        unsafe { self.data.as_mut_ptr().add(start) }
    }

    /// The size of the item at `loc` if its key is `key`, else `None` (see
    /// [`item::size_if_key`](crate::item::size_if_key)): the lookups' key
    /// compare, with no bounds checked.
    ///
    /// # Safety
    /// `loc` names a whole item inside its segment. Every location the
    /// hash table holds does: the write path links only items it wrote
    /// whole, compaction only items it copied whole, and a restore admits
    /// only entries that pass [`holds_item`](Self::holds_item).
    #[inline(always)]
    pub(crate) unsafe fn size_if_key(&self, loc: Location, key: &[u8]) -> Option<usize> {
        // SAFETY: the caller guarantees a whole item at `loc`, which lies
        // in the heap where `compared` points.
        unsafe { crate::item::size_if_key(self.compared(loc), key) }
    }

    /// The start of the item at `loc`, which a key compare is about to
    /// read with no bounds checked (checked here in debug builds: the
    /// compares' duty, a whole item inside its segment).
    #[inline(always)]
    fn compared(&self, loc: Location) -> *const u8 {
        let (start, end) = self.item_span(loc);
        debug_assert!(end <= self.data.len() && start + crate::item::SHORT_HEADER_LEN < end);
        debug_assert!(
            self.item(loc).size() <= end - start,
            "an item past its segment"
        );
        self.data.as_ptr().wrapping_add(start)
    }

    /// Where the value of the item at `loc` lies in the heap, and its
    /// meta byte, if its key is `key` (see
    /// [`item::value_span_if_key`](crate::item::value_span_if_key)): the
    /// key compare of a read that hands the value out.
    ///
    /// # Safety
    /// As [`size_if_key`](Self::size_if_key).
    #[inline(always)]
    pub(crate) unsafe fn value_span_if_key(&self, loc: Location, key: &[u8]) -> Option<ValueSpan> {
        // SAFETY: as in `size_if_key`.
        let span = unsafe { crate::item::value_span_if_key(self.compared(loc), key) }?;
        debug_assert_eq!(span.at + span.len, self.item(loc).size());
        Some(ValueSpan {
            at: self.item_span(loc).0 + span.at,
            ..span
        })
    }

    /// The value bytes and the client flags of the item a
    /// [`value_span_if_key`](Self::value_span_if_key) found for a key of
    /// `key_len` bytes, with no bounds checked.
    ///
    /// # Safety
    /// `span` came from `value_span_if_key` on this heap for a key of
    /// `key_len` bytes, and no segment changed since (the item is still
    /// where the compare found it).
    #[inline(always)]
    pub(crate) unsafe fn value_at(&self, span: ValueSpan, key_len: usize) -> (&[u8], u32) {
        debug_assert!(span.at + span.len <= self.data.len());
        // SAFETY: the caller's duty: the compare found a whole item whose
        // value is these bytes of the heap, still in place.
        let value = unsafe { self.data.get_unchecked(span.at..span.at + span.len) };
        // SAFETY: as above, the value starts at `span.at`, in the item;
        // the pointer is the heap's (the flags lie before the value, out
        // of the value slice's reach).
        let flags = unsafe { span.flags_before(self.data.as_ptr().add(span.at), key_len) };
        (value, flags)
    }

    /// True if a whole item lies at `loc`, inside the first `written`
    /// bytes of its segment (`written` at most the segment size): the
    /// check a restore makes of every table entry before trusting it.
    pub(crate) fn holds_item(&self, loc: Location, written: u32) -> bool {
        let (offset, written) = (loc.offset as usize, written as usize);
        (loc.seg as usize) < self.headers.len()
            && written <= self.segment_size
            && offset + crate::item::SHORT_HEADER_LEN < written
            && offset + self.item(loc).header_len() < written
            && offset + self.item(loc).size() <= written
    }

    /// Heap range from the item at `loc` to its segment's end.
    #[inline(always)]
    fn item_span(&self, loc: Location) -> (usize, usize) {
        debug_assert!((loc.offset as usize) < self.segment_size);
        let seg = loc.seg as usize * self.segment_size;
        (seg + loc.offset as usize, seg + self.segment_size)
    }

    /// Starts loading the first two cache lines of the item at `loc`
    /// (its header, key and the start of its value).
    #[inline]
    pub(crate) fn prefetch_item(&self, loc: Location) {
        let (start, _) = self.item_span(loc);
        debug_assert!(start < self.data.len());
        let at = self.data.as_ptr().wrapping_add(start);
        crate::hashtable::prefetch(at);
        crate::hashtable::prefetch(at.wrapping_add(64));
    }

    /// Sets meta-protocol marks on the item at `loc` (see [`item::mark`](crate::item::mark)).
    #[inline]
    pub(crate) fn mark(&mut self, loc: Location, bits: u8) {
        let (start, end) = self.item_span(loc);
        crate::item::mark(&mut self.data[start..end], bits);
    }

    /// Marks the item at `loc` [`UNLINKED`](crate::item::UNLINKED): the
    /// caller has just unlinked it from the table, whose entry pointed
    /// there. Returns true if the item is
    /// [`EXTERNAL`](crate::item::EXTERNAL) (its value is the caller's to
    /// release), read from the byte the mark rewrites.
    ///
    /// # Safety
    /// `loc` names a whole item inside its segment (as every location the
    /// table holds does, see [`size_if_key`](Self::size_if_key)).
    #[inline(always)]
    pub(crate) unsafe fn mark_unlinked(&mut self, loc: Location) -> bool {
        let (start, end) = self.item_span(loc);
        let at = start + crate::item::META_AT;
        debug_assert!(at < end && end <= self.data.len());
        // SAFETY: the caller guarantees a whole item, so its header (the
        // meta byte included) lies in the heap.
        let meta = unsafe { self.data.get_unchecked_mut(at) };
        *meta |= crate::item::UNLINKED;
        *meta & crate::item::EXTERNAL != 0
    }

    /// Sets or clears the [`EXTERNAL`](crate::item::EXTERNAL) bit of the
    /// item at `loc` (a move of its external value: see
    /// `Segcache::rewrite`).
    pub(crate) fn set_external(&mut self, loc: Location, on: bool) {
        let (start, _) = self.item_span(loc);
        let meta = &mut self.data[start + crate::item::META_AT];
        if on {
            *meta |= crate::item::EXTERNAL;
        } else {
            *meta &= !crate::item::EXTERNAL;
        }
    }

    /// The item at `loc` as a plain read returns it, with the segments
    /// (for its header and deadline) and the marks it had before this
    /// read: sets the item's `fetched` mark first if it is missing (the
    /// byte is written only then, so later reads leave its line clean).
    #[inline]
    pub(crate) fn fetch(&mut self, loc: Location) -> (RawItem<'_>, &Segments, u8) {
        let (start, end) = self.item_span(loc);
        let before = crate::item::mark(&mut self.data[start..end], crate::item::FETCHED);
        let this: &Segments = self;
        (RawItem::at(&this.data[start..end]), this, before)
    }

    /// [`fetch`](Self::fetch) of an item a key compare has just found,
    /// with its value where the compare placed it: no bounds are checked,
    /// the header is not decoded again, and the marks are not returned.
    ///
    /// # Safety
    /// `loc` names a whole item inside its segment (as every location the
    /// table holds does, see [`size_if_key`](Self::size_if_key)), and
    /// `span` is what [`value_span_if_key`](Self::value_span_if_key) read
    /// of it, with no segment changed since.
    #[inline(always)]
    pub(crate) unsafe fn fetch_spanned(
        &mut self,
        loc: Location,
        span: ValueSpan,
    ) -> (RawItem<'_>, &Segments, &[u8]) {
        let (start, end) = self.item_span(loc);
        debug_assert!(start + crate::item::SHORT_HEADER_LEN < end && end <= self.data.len());
        debug_assert!((loc.seg as usize) < self.headers.len());
        debug_assert!(start < span.at && span.at + span.len <= end);
        debug_assert_eq!(span.bits, self.data[start + crate::item::META_AT]);
        if span.bits & crate::item::FETCHED == 0 {
            // SAFETY: the item is whole (the caller's duty), so its meta
            // byte, inside its header, is in the heap.
            unsafe {
                *self.data.get_unchecked_mut(start + crate::item::META_AT) =
                    span.bits | crate::item::FETCHED;
            }
        }
        let this: &Segments = self;
        // SAFETY: the caller's duties are `item_compared`'s (the same
        // item) and `value_at`'s (the span the compare found, unchanged).
        unsafe {
            let value = this.data.get_unchecked(span.at..span.at + span.len);
            (this.item_compared(loc), this, value)
        }
    }

    /// [`item`](Self::item) of an item a lookup has just found: no bounds
    /// are checked.
    ///
    /// # Safety
    /// As [`fetch_spanned`](Self::fetch_spanned): `loc` names a whole
    /// item inside its segment.
    #[inline(always)]
    pub(crate) unsafe fn item_compared(&self, loc: Location) -> RawItem<'_> {
        let (start, end) = self.item_span(loc);
        debug_assert!(start + crate::item::SHORT_HEADER_LEN < end && end <= self.data.len());
        // SAFETY: the caller guarantees a whole item at `loc`, so
        // `start..end` (from it to its segment's end) is in the heap.
        let bytes = unsafe { self.data.get_unchecked(start..end) };
        // SAFETY: a whole item is at least its header long.
        unsafe { std::hint::assert_unchecked(bytes.len() > crate::item::META_AT) };
        RawItem::at(bytes)
    }

    /// Copies `len` bytes from one location to another (the ranges may
    /// overlap when both are in one segment).
    pub(crate) fn copy(&mut self, from: Location, to: Location, len: usize) {
        let src = from.seg as usize * self.segment_size + from.offset as usize;
        let dst = to.seg as usize * self.segment_size + to.offset as usize;
        self.data.copy_within(src..src + len, dst);
    }

    /// Offsets of every item written to a segment, oldest first.
    pub(crate) fn item_offsets(&self, id: u32) -> ItemOffsets<'_> {
        self.item_offsets_between(id, 0, self.headers[id as usize].write_offset)
    }

    /// Offsets of the items of a segment from byte `start` (an item's
    /// offset) up to `end` (just past an item), oldest first.
    pub(crate) fn item_offsets_between(&self, id: u32, start: u32, end: u32) -> ItemOffsets<'_> {
        debug_assert!(start <= end && end <= self.headers[id as usize].write_offset);
        ItemOffsets {
            data: self.data(id),
            at: start as usize,
            end: end as usize,
        }
    }

    /// The deadline windows of segment `id`: one, from its header, unless
    /// it is `split`.
    pub(crate) fn windows(&self, id: u32) -> Windows {
        let h = &self.headers[id as usize];
        if h.split == 0 {
            return Windows::single(h.write_offset, h.expire_at, h.expire_last);
        }
        let mut windows = Windows::default();
        for i in 0..h.split as usize {
            windows.push_raw(self.stored_window(id, i));
        }
        windows
    }

    /// Window `i` of split segment `id`, from the segment's last bytes.
    fn stored_window(&self, id: u32, i: usize) -> Window {
        let n = self.headers[id as usize].split as usize;
        Window::decode(&self.data[self.window_slot(id, n, i)])
    }

    /// Where in the heap window `i` of `n` kept by segment `id` lies: the
    /// segment's last `n` x [`WINDOW_BYTES`] bytes, in write order.
    fn window_slot(&self, id: u32, n: usize, i: usize) -> std::ops::Range<usize> {
        debug_assert!(i < n);
        let at = (id as usize + 1) * self.segment_size - (n - i) * WINDOW_BYTES;
        at..at + WINDOW_BYTES
    }

    /// Bytes a merge output must leave free at its end to keep `windows`
    /// deadline windows there (none for one).
    pub(crate) fn window_room(windows: usize) -> usize {
        if windows > 1 {
            windows * WINDOW_BYTES
        } else {
            0
        }
    }

    /// Gives segment `id` these windows (ending at its write offset): its
    /// header's deadlines become their bounds, and if there is more than
    /// one it is `split` and they go into its last bytes, which its items
    /// must have left free ([`window_room`](Self::window_room)).
    pub(crate) fn set_windows(&mut self, id: u32, windows: &Windows) {
        let (at, last) = windows.bounds();
        let list = windows.as_slice();
        let segment_size = self.segment_size;
        let h = &mut self.headers[id as usize];
        debug_assert!(list.last().is_none_or(|w| w.end == h.write_offset));
        (h.expire_at, h.expire_last) = (at, last);
        h.split = if list.len() > 1 { list.len() as u8 } else { 0 };
        let split = h.split as usize;
        assert!(
            h.write_offset as usize + Self::window_room(list.len()) <= segment_size,
            "the items left room for their windows"
        );
        for (i, w) in list.iter().enumerate().take(split) {
            let slot = self.window_slot(id, split, i);
            w.encode(&mut self.data[slot]);
        }
    }

    /// The deadline of the item at `loc` (0: never): its segment's, or
    /// its window's in a `split` segment.
    #[inline]
    pub(crate) fn deadline(&self, loc: Location) -> u32 {
        let h = &self.headers[loc.seg as usize];
        if h.split == 0 {
            h.expire_at
        } else {
            self.window_of(loc).at
        }
    }

    /// The window of the item at `loc` (in a `split` segment: its own).
    #[inline(never)]
    fn window_of(&self, loc: Location) -> Window {
        self.windows(loc.seg).window_at(loc.offset)
    }

    /// True if the item at `loc` has expired at `now`: its segment's
    /// earliest deadline has passed and, in a `split` segment, its own
    /// window's too.
    #[inline(always)]
    pub(crate) fn expired(&self, loc: Location, now: u32) -> bool {
        let h = &self.headers[loc.seg as usize];
        h.is_expired(now) && (h.split == 0 || self.window_expired(loc, now))
    }

    /// [`expired`](Self::expired)'s test of a `split` segment's window.
    #[cold]
    #[inline(never)]
    fn window_expired(&self, loc: Location, now: u32) -> bool {
        let at = self.window_of(loc).at;
        at != 0 && at <= now
    }
}

/// Walks the items of one segment in write order.
pub(crate) struct ItemOffsets<'a> {
    data: &'a [u8],
    at: usize,
    end: usize,
}

impl<'a> Iterator for ItemOffsets<'a> {
    /// (offset, item)
    type Item = (u32, RawItem<'a>);

    fn next(&mut self) -> Option<Self::Item> {
        if self.at >= self.end {
            return None;
        }
        let item = RawItem::at(&self.data[self.at..]);
        let at = self.at;
        self.at += item.size();
        Some((at as u32, item))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::item;

    #[test]
    fn alloc_release_cycles_bump_generation() {
        let mut segs = Segments::new(4096, 3);
        assert_eq!(segs.free_count(), 3);
        let a = segs.alloc(5, 7).unwrap();
        assert_eq!(a, 0, "lowest id first");
        let h = &segs.headers[a as usize];
        assert_eq!(
            (h.create_at, h.ttl_bucket, h.state),
            (5, 7, SegState::Active)
        );
        let gen = h.generation;
        segs.alloc(5, 7).unwrap();
        segs.alloc(5, 7).unwrap();
        assert!(segs.alloc(5, 7).is_none());
        segs.release(a);
        assert_eq!(segs.headers[a as usize].generation, gen + 1);
        assert_eq!(segs.alloc(6, 1), Some(a));
        segs.release_all();
        assert_eq!(segs.free_count(), 3);
        assert_eq!(segs.headers[a as usize].generation, gen + 2);
    }

    #[test]
    fn items_walk_in_write_order() {
        let mut segs = Segments::new(4096, 1);
        let id = segs.alloc(0, 0).unwrap();
        let mut at = 0usize;
        for i in 0..10u32 {
            let key = format!("k{i}");
            let meta = item::Meta {
                flags: i,
                ..item::Meta::default()
            };
            let size = item::item_size(key.len(), i as usize, &meta);
            let value = vec![b'x'; i as usize];
            item::write(
                &mut segs.data_mut(id)[at..at + size],
                key.as_bytes(),
                [&value, &[]],
                &meta,
            );
            at += size;
        }
        segs.headers[id as usize].write_offset = at as u32;
        let seen: Vec<_> = segs
            .item_offsets(id)
            .map(|(_, it)| (it.key().to_vec(), it.value().len(), it.client_flags()))
            .collect();
        assert_eq!(seen.len(), 10);
        for (i, (k, vlen, flags)) in seen.into_iter().enumerate() {
            assert_eq!(k, format!("k{i}").into_bytes());
            assert_eq!((vlen, flags), (i, i as u32));
        }
    }

    #[test]
    fn a_restore_admits_only_whole_items_in_written_bytes() {
        let mut segs = Segments::new(4096, 2);
        let id = segs.alloc(0, 0).unwrap();
        let meta = item::Meta::default();
        let size = item::item_size(32, 300, &meta);
        let at = 4096 - size - 10;
        item::write(
            &mut segs.data_mut(id)[at..at + size],
            &[b'k'; 32],
            [&[b'v'; 300], &[]],
            &meta,
        );
        let loc = Location {
            seg: id,
            offset: at as u32,
        };
        let end = (at + size) as u32;
        assert!(segs.holds_item(loc, end));
        assert!(segs.holds_item(loc, 4096));
        // SAFETY: a whole item lies at `loc` (just checked).
        assert_eq!(unsafe { segs.size_if_key(loc, &[b'k'; 32]) }, Some(size));
        assert_eq!(unsafe { segs.size_if_key(loc, &[b'j'; 32]) }, None);
        // Cut short by the written bytes, past them, or past the segment.
        assert!(!segs.holds_item(loc, end - 1));
        assert!(!segs.holds_item(
            Location {
                offset: end - 2,
                ..loc
            },
            end
        ));
        assert!(!segs.holds_item(loc, 4097));
        // Inside the item (its value bytes read as a header claiming a
        // 118-byte key, flags, a kept CAS and a 118-byte value), and a
        // segment that does not exist.
        let inner = Location {
            offset: at as u32 + 100,
            ..loc
        };
        assert!(!segs.holds_item(inner, 4096));
        assert!(!segs.holds_item(Location { seg: 2, ..loc }, 4096));
        // Four bytes before the segment's end, a header whose meta byte
        // says the value's length takes three bytes: the long header
        // would run past the segment, and is not read there.
        let tail = 4096 - 4;
        segs.data_mut(id)[tail..].copy_from_slice(&[1, 0x01, 0, 0]);
        let tail = Location {
            offset: tail as u32,
            ..loc
        };
        assert!(!segs.holds_item(tail, 4096));
        // The same bytes as a short header: a 1-byte key and no value, in
        // four bytes (the smallest item).
        segs.data_mut(id)[4092..].copy_from_slice(&[1, 0x00, 0, b'k']);
        assert!(segs.holds_item(tail, 4096));
        // SAFETY: a whole item lies at `tail` (just checked).
        assert_eq!(unsafe { segs.size_if_key(tail, b"k") }, Some(4));
    }

    #[test]
    fn expiry_is_never_for_zero() {
        let mut h = SegmentHeader::free(1);
        assert!(!h.is_expired(u32::MAX));
        h.expire_at = 10;
        assert!(!h.is_expired(9));
        assert!(h.is_expired(10));
    }
}

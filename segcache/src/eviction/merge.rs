//! The merge pass: reads a chosen chain of segments, keeps the items its
//! [`Plan`] says stay (packed in order into outputs that
//! keep each item's deadline window), evicts the rest into the ghosts,
//! and frees what the outputs do not need. Compactions are merge passes
//! that evict nothing, run a window of segments at a time when longer
//! than the scratch.
//!
//! Must never: return with a copy still pending (entries are repointed
//! as items are placed and the copies batched, so every moved item is
//! whole again before the pass returns), or choose which segments to
//! read (that is `runs.rs`).

use super::*;

/// The deadline windows of the segment a merge last read an item of:
/// items come in chain order, so the source changes once per segment.
#[derive(Default)]
struct SourceWindows {
    seg: Option<u32>,
    windows: Windows,
}

impl SourceWindows {
    /// The window of the item at `loc`, from its segment's windows as
    /// they were before the merge (outputs are rewritten only at its end).
    fn of(&mut self, segs: &Segments, loc: Location) -> Window {
        if self.seg != Some(loc.seg) {
            self.seg = Some(loc.seg);
            self.windows = segs.windows(loc.seg);
        }
        self.windows.window_at(loc.offset)
    }
}

/// Bytes a merge still has to move: `len` bytes from `from` to `to`, in
/// one segment each. Items are copied in chain order and never to a place
/// after their own, so a run may wait until the next item that does not
/// continue it (the copies in between read nothing it writes).
struct CopyRun {
    from: Option<Location>,
    to: Location,
    len: u32,
}

impl CopyRun {
    /// Nothing to move.
    const EMPTY: CopyRun = CopyRun {
        from: None,
        to: Location { seg: 0, offset: 0 },
        len: 0,
    };

    fn start(from: Location, to: Location, len: u32) -> CopyRun {
        CopyRun {
            from: Some(from),
            to,
            len,
        }
    }

    /// Takes `len` more bytes if they continue the run at both ends.
    #[inline]
    fn extend(&mut self, from: Location, to: Location, len: u32) -> bool {
        let Some(start) = self.from else {
            return false;
        };
        let continues =
            |a: Location, b: Location| a.seg == b.seg && a.offset + self.len == b.offset;
        if continues(start, from) && continues(self.to, to) {
            self.len += len;
            return true;
        }
        false
    }

    /// Copies the run (memmove: it may overlap itself) and empties it.
    fn flush(&mut self, segs: &mut crate::segments::Segments) {
        if let Some(from) = self.from.take() {
            segs.copy(from, self.to, self.len as usize);
        }
    }
}

/// Packs the chain's live items, in order, into `outputs` segments of
/// `seg_size` bytes: the first `forced` items (those of the forced
/// segments) and those read at least `cutoff` times must stay, items one
/// count below fill up to `borderline_room` bytes, the rest go. Calls
/// `place` with each item, whether it is forced, and its (output, offset),
/// or `None` if it goes; returns false (after placing what it could) if an
/// item that must stay did not fit.
pub(super) fn pack(
    live: &[LiveItem],
    forced: usize,
    cutoff: usize,
    mut borderline_room: usize,
    outputs: usize,
    seg_size: usize,
    mut place: impl FnMut(LiveItem, bool, Option<(usize, usize)>),
) -> bool {
    let (mut out, mut write) = (0usize, 0usize);
    let mut all_kept = true;
    for (i, &item) in live.iter().enumerate() {
        let size = item.size();
        let is_forced = i < forced;
        let must = is_forced || item.freq() as usize >= cutoff;
        let borderline = !must && item.freq() as usize + 1 == cutoff && size <= borderline_room;
        if !(must || borderline) {
            place(item, is_forced, None);
            continue;
        }
        if write + size > seg_size && out + 1 < outputs {
            out += 1;
            write = 0;
        }
        if write + size <= seg_size {
            if borderline {
                borderline_room -= size;
            }
            place(item, is_forced, Some((out, write)));
            write += size;
        } else {
            all_kept &= !must;
            place(item, is_forced, None);
        }
    }
    all_kept
}

impl Segcache {
    /// Calls `found` with each item of segment `src` that the table still
    /// points at, in write order: its size, its key's hash and its table
    /// entry (bucket, slot, item info), the records a merge pass reads. A
    /// segment the table no longer points into is skipped without reading
    /// its items' headers.
    #[inline]
    fn for_each_live(&self, src: u32, mut found: impl FnMut(usize, u64, usize, usize, u64)) {
        if self.segs.headers[src as usize].live_items == 0 {
            return;
        }
        for (offset, item) in self.segs.item_offsets(src) {
            if item.is_unlinked() {
                continue;
            }
            let hash = self.table.hash(item.key());
            let loc = Location { seg: src, offset };
            if let Some((bucket, slot, info)) = self.table.locate(hash, loc) {
                found(item.size(), hash, bucket, slot, info);
            }
        }
    }

    /// Packs the chain's kept items, in chain order, into its first
    /// segments (the outputs) and evicts the rest; frees the other
    /// segments. Packing in order never writes ahead of what is still to be
    /// read: an item is either copied into an earlier segment or moved
    /// forward within its own. Returns false, changing nothing, if the plan
    /// cannot free a segment and may not keep everything.
    pub(super) fn merge_chain(&mut self, bucket: usize, chain: &[u32], plan: Plan) -> bool {
        let Some(seg_size) = self.output_room(bucket, chain) else {
            return false;
        };
        let usable = usable(seg_size);
        // Pass 1: the live items with their hashes and access counts, and
        // the bytes at each count.
        // The run builders cut runs to the scratch; one that still does
        // not fit changes nothing (the scratch never grows).
        let items: usize = chain
            .iter()
            .map(|&id| self.segs.headers[id as usize].live_items as usize)
            .sum();
        // An empty chain: its first segment alone held more live items
        // than the scratch (items under ~16 bytes); eviction then frees the
        // oldest segment whole.
        if chain.is_empty() || items > self.merge_scratch.capacity() {
            return false;
        }
        // The mean item held, for `Admission::promotes_unread`.
        let mean_size = (self.counters.live_bytes / self.counters.items.max(1)) as usize;
        let mut live = std::mem::take(&mut self.merge_scratch);
        live.clear();
        let mut histogram = [0usize; 128];
        let mut forced_bytes = 0usize;
        // Records of the forced segments (the first ones of the chain).
        let mut forced_items = 0usize;
        let mut largest = 0usize;
        for (index, &src) in chain.iter().enumerate() {
            self.for_each_live(src, |size, hash, bucket, slot, info| {
                debug_assert!(live.len() < live.capacity(), "the scratch never grows");
                let mut freq = hashtable::frequency(info);
                if plan.promote_dropped
                    && index >= plan.forced
                    && (freq as usize) < plan.min_freq
                    && self.admission.promotes_unread(hash, size, mean_size)
                {
                    // Judged as read (its count stays 0).
                    freq = plan.min_freq as u8;
                }
                if index < plan.forced {
                    forced_bytes += size;
                    forced_items += 1;
                } else {
                    histogram[freq as usize] += size;
                }
                largest = largest.max(size);
                live.push(LiveItem::new(bucket, slot, size, freq));
            });
        }
        // How many outputs: enough for the forced items and those read at
        // least `min_freq` times, at least one, at most one fewer than the
        // chain unless it may keep everything.
        let wanted: usize = forced_bytes + histogram[plan.min_freq..].iter().sum::<usize>();
        let max_outputs = if plan.may_keep_all {
            chain.len()
        } else {
            chain.len() - 1
        };
        let nothing_kept = wanted == 0 && !plan.fill;
        if nothing_kept && chain.len() > 1 {
            // Free only what is needed: the run's oldest segment goes, the
            // next ones wait for their own evaluation.
            self.merge_scratch = live;
            return self.merge_chain(bucket, &chain[..1], plan);
        }
        if !nothing_kept && (max_outputs == 0 || forced_bytes > max_outputs * seg_size) {
            self.merge_scratch = live;
            return false;
        }
        // Nothing to keep and no fill: the segment is freed.
        let mut outputs = if nothing_kept {
            0
        } else if plan.frees_one {
            max_outputs
        } else {
            wanted.div_ceil(usable).clamp(1, max_outputs)
        };
        // The lowest access count at which the survivors fit; items one
        // count below it fill whatever room is left, in order.
        let room = (outputs * seg_size).saturating_sub(forced_bytes);
        let mut cutoff = plan.min_freq;
        let mut kept_bytes: usize = histogram[cutoff..].iter().sum();
        while kept_bytes > room {
            kept_bytes -= histogram[cutoff];
            cutoff += 1;
        }
        let mut borderline_room = if plan.fill { room - kept_bytes } else { 0 };
        let mut slack_left = true;
        // Items do not split across segments: check that packing in order
        // really keeps every item it must (forced ones, those at or above
        // the cutoff); if not, no borderline items, then more outputs, then
        // a higher cutoff; give up if even the forced items do not fit.
        loop {
            let fits = pack(
                &live,
                forced_items,
                cutoff,
                borderline_room,
                outputs,
                seg_size,
                |_, _, _| {},
            );
            if fits {
                break;
            }
            if borderline_room > 0 && slack_left {
                // Packing in order leaves less than the largest item unused
                // at each output's end: fill only what then surely fits, so
                // that fillers do not push out items that must stay (with
                // no fill at all, a merge freeing one segment left the
                // room of its unread items empty).
                borderline_room = borderline_room.saturating_sub(outputs * largest);
                slack_left = false;
            } else if borderline_room > 0 {
                borderline_room = 0;
            } else if outputs < max_outputs {
                outputs += 1;
            } else if cutoff < 128 {
                cutoff += 1;
            } else {
                self.merge_scratch = live;
                return false;
            }
        }
        // Items in the output segments move: a new generation means no CAS
        // token of a moved or removed item can match a later item there.
        for &dst in &chain[..outputs] {
            self.segs.bump_generation(dst);
        }
        // Pass 2: pack survivors into the outputs, unlink the rest. Items
        // that sit back to back and land back to back move in one copy.
        let mut written = [(0usize, 0u32); COMPACT_MAX_MAIN];
        let mut windows = [Windows::default(); COMPACT_MAX_MAIN];
        let mut source = SourceWindows::default();
        // (The callback's `bucket` is a table position.)
        let ttl_bucket = bucket;
        let mut evicted = 0u64;
        let mut run = CopyRun::EMPTY;
        pack(
            &live,
            forced_items,
            cutoff,
            borderline_room,
            outputs,
            seg_size,
            |item, forced, to| {
                let (bucket, slot) = (item.bucket(), item.slot());
                let from = hashtable::location(self.table.info_at_slot(bucket, slot));
                debug_assert!(chain.contains(&from.seg), "a record of the chain");
                match to {
                    Some((out, write)) => {
                        debug_assert!(
                            chain[out..].contains(&from.seg),
                            "packing never runs ahead of reading"
                        );
                        let to = Location {
                            seg: chain[out],
                            offset: write as u32,
                        };
                        let size = item.size() as u32;
                        if from != to && !run.extend(from, to, size) {
                            run.flush(&mut self.segs);
                            run = CopyRun::start(from, to, size);
                        }
                        // Survivors of a selection age (their count halves);
                        // forced items (a compaction, a topped-up segment)
                        // were not judged and keep theirs: halving them on
                        // every compaction turned warm probation items cold
                        // before their evaluation.
                        if forced {
                            if from != to {
                                self.table.relocate(bucket, slot, to);
                            }
                        } else {
                            self.table.move_slot(bucket, slot, to);
                        }
                        written[out].0 += size as usize;
                        written[out].1 += 1;
                        let w = source.of(&self.segs, from);
                        windows[out].keep(ttl_bucket, w.at, w.last, written[out].0 as u32);
                    }
                    None => {
                        // Items are copied only to places before their own
                        // and in order: this one's bytes are still intact.
                        if let Some(from_main) = plan.ghosts {
                            let hash = self.table.hash(self.segs.item(from).key());
                            self.admission.remember(hash, from_main);
                        }
                        let dropped = self.segs.item(from);
                        if dropped.is_external() {
                            self.externals.release(dropped.value());
                        }
                        self.table.clear_at(bucket, slot);
                        evicted += 1;
                    }
                }
            },
        );
        run.flush(&mut self.segs);
        self.merge_scratch = live;
        self.finish_merge(bucket, chain, &written[..outputs], &windows, plan.main);
        self.counters.evictions += evicted;
        true
    }

    /// The end of a merge whose outputs, the first segments of `chain`,
    /// were written with `written` (bytes, items) each: their headers and
    /// pool, the other segments freed, the counters, the bucket's cursor.
    fn finish_merge(
        &mut self,
        bucket: usize,
        chain: &[u32],
        written: &[(usize, u32)],
        windows: &[Windows],
        main: bool,
    ) {
        let outputs = written.len();
        let after = match outputs {
            0 => self.segs.headers[chain[chain.len() - 1] as usize].next,
            n => chain[n - 1],
        };
        for (index, &src) in chain.iter().enumerate() {
            let header = &mut self.segs.headers[src as usize];
            self.counters.items -= header.live_items as u64;
            self.counters.live_bytes -= header.live_bytes as u64;
            if index < outputs {
                let (bytes, items) = written[index];
                header.write_offset = bytes as u32;
                header.live_bytes = bytes as u32;
                header.live_items = items;
                self.segs.set_windows(src, &windows[index]);
                self.counters.items += items as u64;
                self.counters.live_bytes += bytes as u64;
                self.admission.set_main(src, main);
            } else {
                header.live_items = 0;
                header.live_bytes = 0;
                self.retire_segment(src);
                self.counters.evicted_segments += 1;
            }
        }
        self.counters.merges += 1;
        self.ttl.buckets[bucket].merge_cursor = if outputs == 0 {
            after
        } else {
            self.segs.headers[after as usize].next
        };
    }

    /// Compacts `chain`, whose live items (`live` bytes) outnumber the
    /// merge scratch, a window of segments at a time: the scratch holds the
    /// records of one window, whose items are packed, in order, after
    /// those of the windows before. The result is what one pass would
    /// give (the same outputs, each item at the same place, access counts
    /// kept): every item is at most 1/32 segment (the caller checked), so
    /// packing in order fills each output but the last past `usable`
    /// bytes and the `live.div_ceil(usable)` outputs hold everything.
    /// A window reads only segments nothing has been written to yet:
    /// items move only into earlier segments or forward in their own.
    /// Returns false, changing nothing, if the room the outputs keep for
    /// their deadline windows leaves no segment to free.
    pub(super) fn compact_in_windows(
        &mut self,
        bucket: usize,
        chain: &[u32],
        main: bool,
        live: usize,
    ) -> bool {
        let Some(seg_size) = self.output_room(bucket, chain) else {
            return false;
        };
        // Items are at most 1/32 of a whole segment: each output but the
        // last is filled past this.
        let usable = seg_size - self.segs.segment_size() / 32;
        let outputs = live.div_ceil(usable).max(1);
        if outputs >= chain.len() {
            // The room the outputs keep for their deadline windows.
            return false;
        }
        for &dst in &chain[..outputs] {
            self.segs.bump_generation(dst);
        }
        let mut records = std::mem::take(&mut self.merge_scratch);
        let capacity = records.capacity();
        let mut written = [(0usize, 0u32); COMPACT_MAX_MAIN];
        let mut windows = [Windows::default(); COMPACT_MAX_MAIN];
        let mut source = SourceWindows::default();
        // (The callback's `bucket` is a table position.)
        let ttl_bucket = bucket;
        let (mut out, mut write) = (0usize, 0usize);
        let mut run = CopyRun::EMPTY;
        let mut next = 0;
        while next < chain.len() {
            // The next segments whose live items the scratch holds.
            records.clear();
            let mut items = 0;
            let start = next;
            while next < chain.len()
                && items + self.segs.headers[chain[next] as usize].live_items as usize <= capacity
            {
                items += self.segs.headers[chain[next] as usize].live_items as usize;
                next += 1;
            }
            assert!(next > start, "every segment of the run fits the scratch");
            for &src in &chain[start..next] {
                self.for_each_live(src, |size, _, bucket, slot, info| {
                    debug_assert!(records.len() < capacity, "the scratch never grows");
                    let freq = hashtable::frequency(info);
                    records.push(LiveItem::new(bucket, slot, size, freq));
                });
            }
            for &item in &records {
                let size = item.size();
                if write + size > seg_size && out + 1 < outputs {
                    out += 1;
                    write = 0;
                }
                debug_assert!(write + size <= seg_size, "small items pack as counted");
                let (bucket, slot) = (item.bucket(), item.slot());
                let from = hashtable::location(self.table.info_at_slot(bucket, slot));
                let to = Location {
                    seg: chain[out],
                    offset: write as u32,
                };
                if from != to {
                    if !run.extend(from, to, size as u32) {
                        run.flush(&mut self.segs);
                        run = CopyRun::start(from, to, size as u32);
                    }
                    self.table.relocate(bucket, slot, to);
                }
                written[out].0 += size;
                written[out].1 += 1;
                write += size;
                let w = source.of(&self.segs, from);
                windows[out].keep(ttl_bucket, w.at, w.last, write as u32);
            }
        }
        run.flush(&mut self.segs);
        self.merge_scratch = records;
        self.finish_merge(bucket, chain, &written[..outputs], &windows, main);
        true
    }
}

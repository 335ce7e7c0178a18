//! Choosing what each eviction step works on: the compaction run that
//! frees the most for the bytes it moves, the small pool's oldest
//! segments for evaluation, a TTL bucket's main run for a merge, and the
//! deadline windows such a run would need.
//!
//! Must never: move or evict an item itself (that is `merge.rs`); a run
//! chosen here is handed over with a [`Plan`].

use super::*;

/// Segments in one evaluation of the small pool: the oldest small one and
/// the next, or a main segment to top up and the oldest small one. Runs of
/// up to seven (a quarter of the pool) freed up to six segments at once
/// when little was read, room that held nothing until written again.
const EVALUATION_RUN: usize = 2;

/// Whether compacting `n` segments holding `live` bytes frees at least one
/// and moves at most [`MAIN_LIVE_BOUND`]` - 1` bytes per byte freed in a
/// main run (15/16 live at most), seven in a small one (7/8).
fn compaction_frees(n: usize, live: usize, seg_size: usize, main: bool) -> bool {
    let bound = if main { MAIN_LIVE_BOUND } else { 8 };
    n >= 2
        && live.div_ceil(usable(seg_size)).max(1) < n
        && live * bound <= n * seg_size * (bound - 1)
}

/// A main run is compacted while at most `(MAIN_LIVE_BOUND - 1) /
/// MAIN_LIVE_BOUND` live (15/16). Overwritten items leave dead copies
/// spread evenly over main (a rewrite goes to probation): on cluster 7 of
/// BENCHMARKS §1 main segments sit near 90% live, which a 7/8 bound never
/// packs. With runs of [`COMPACT_MAX_MAIN`] = 24 the packing test binds
/// first (24 segments free one below ~93% live); 1/32 gave the same.
pub(super) const MAIN_LIVE_BOUND: usize = 16;

/// How much costlier per segment freed (live bytes moved) than the
/// cheapest compactable run the oldest may be and still be compacted
/// first. Taking the oldest always (the policy the hit ratios of
/// BENCHMARKS §1 were tuned on) re-packed the same old, nearly full
/// segments each time they fell to 7/8 live while runs of rewritten hot
/// keys, mostly dead, waited: on Zipf overwrites of 1 M keys it moved ~3
/// items per set and a set cost ~1,800 instructions (BENCHMARKS §2).
/// Always the cheapest moved the Twitter-like rows' miss ratios by up to
/// 0.002 either way (any change to which runs are packed moves cluster
/// 7 by ~0.001); with this slack, at the real rate and at 2 TTL spans,
/// no row missed more than 0.00024 more and cluster 7 at 2 spans 0.0008
/// less.
pub(super) const COMPACTION_COST_SLACK: usize = 4;

/// A run of segments chosen for compaction.
#[derive(Clone)]
pub(super) struct CompactionRun {
    bucket: usize,
    /// The run is of the main pool.
    main: bool,
    /// Its segments, oldest first (the first `n`).
    run: [u32; COMPACT_MAX_MAIN],
    n: usize,
    /// Live bytes and items of the run.
    live: usize,
    items: usize,
}

impl CompactionRun {
    /// True if `slack` times this run's live bytes per segment freed is
    /// below `other`'s (cross-multiplied: no division).
    fn cost_below(&self, other: &CompactionRun, seg_size: usize, slack: usize) -> bool {
        let freed = |r: &CompactionRun| r.n - r.live.div_ceil(usable(seg_size)).max(1);
        slack * self.live * freed(other) < other.live * freed(self)
    }
}

/// What a run of segments needs to be merged into outputs that keep
/// every item's deadline: its items' deadline windows, and the most bytes
/// any of its segments holds. Outputs keep their windows in their last
/// bytes, so each segment of the run must have left that room free:
/// packing items in order into outputs no larger than any segment they
/// came from then never runs ahead of what is still to be read.
#[derive(Clone, Copy, Default)]
pub(super) struct RunDeadlines {
    windows: Windows,
    fullest: u32,
}

impl Segcache {
    /// Segments in use in the small pool.
    pub(super) fn small_count(&self) -> usize {
        self.segs.count() - self.segs.free_count() - self.admission.mains()
    }

    /// The oldest sealed small segment, exactly for heaps of up to 4096
    /// segments, else the oldest of 256 random ones.
    pub(super) fn oldest_small(&mut self) -> Option<u32> {
        let n = self.segs.count();
        let mut best: Option<(u32, u32)> = None;
        let mut consider = |id: u32, this: &Self| {
            let h = &this.segs.headers[id as usize];
            if h.state == SegState::Sealed
                && !this.admission.is_main(id)
                && best.is_none_or(|b| (h.create_at, id) < b)
            {
                best = Some((h.create_at, id));
            }
        };
        if n <= 4096 {
            for id in 0..n as u32 {
                consider(id, self);
            }
        } else {
            for _ in 0..256 {
                let id = (self.next_random() % n as u64) as u32;
                consider(id, self);
            }
        }
        best.map(|(_, id)| id)
    }

    /// Evaluates the oldest small segments of one TTL bucket: read items
    /// move to the main pool, the rest are evicted as ghosts. If
    /// `must_free`, a segment is freed even if read items must go (the
    /// least read first).
    pub(super) fn evaluate_small(&mut self, now: u32, must_free: bool) -> bool {
        let Some(first) = self.oldest_small() else {
            return false;
        };
        // The bucket's oldest small segment (they are usually contiguous).
        let first = self.oldest_in_run(first);
        let header = &self.segs.headers[first as usize];
        let bucket = header.ttl_bucket as usize;
        if near_expiry(header, now) {
            self.evict_segment(first);
            return true;
        }
        let mut chain = [NONE; MERGE_MAX];
        let mut len = 0;
        let seg_size = self.segs.segment_size();
        let prev = self.segs.headers[first as usize].prev;
        // Top up the main segment just before, if it has room and the two
        // segments' deadline windows fit one segment (else it would end
        // the run at one segment, and the pool could only be evicted
        // whole: main segments are old, their deadlines spread wide).
        let forced = if self.sealed(prev)
            && self.admission.is_main(prev)
            && (self.segs.headers[prev as usize].live_bytes as usize) < seg_size - seg_size / 8
            && self
                .widen(bucket, RunDeadlines::default(), prev)
                .and_then(|windows| self.widen(bucket, windows, first))
                .is_some()
        {
            chain[0] = prev;
            len = 1;
            1
        } else {
            0
        };
        let mut at = first;
        let mut range = RunDeadlines::default();
        if forced == 1 {
            range = self.widen(bucket, range, prev).unwrap_or_default();
        }
        let promote_dropped = !must_free
            && self
                .admission
                .main_has_room((self.admission.mains() * seg_size) as u64);
        let mut items: usize = chain[..len]
            .iter()
            .map(|&id| self.segs.headers[id as usize].live_items as usize)
            .sum();
        while len < EVALUATION_RUN
            && self.sealed(at)
            && !self.admission.is_main(at)
            && self.scratch_holds(items, at)
        {
            let Some(wider) = self.widen(bucket, range, at) else {
                break;
            };
            range = wider;
            chain[len] = at;
            items += self.segs.headers[at as usize].live_items as usize;
            len += 1;
            at = self.segs.headers[at as usize].next;
        }
        self.merge_chain(
            bucket,
            &chain[..len],
            Plan {
                forced,
                min_freq: PROMOTE_FREQ as usize,
                may_keep_all: !must_free,
                ghosts: Some(false),
                main: true,
                fill: false,
                frees_one: false,
                promote_dropped,
            },
        )
    }

    /// A main-pool merge in a TTL bucket chosen in proportion to its main
    /// segments; false if no bucket has two sealed main segments in a row.
    pub(super) fn merge_main(&mut self, now: u32) -> bool {
        let n = self.segs.count();
        for _ in 0..8 {
            let seed = (self.next_random() % n as u64) as u32;
            if self.segs.headers[seed as usize].state == SegState::Free
                || !self.admission.is_main(seed)
            {
                continue;
            }
            let bucket = self.segs.headers[seed as usize].ttl_bucket as usize;
            if self.merge_bucket(bucket, now) {
                return true;
            }
        }
        (0..BUCKETS).any(|bucket| self.merge_bucket(bucket, now))
    }

    /// Packs a compactable run ([`compaction_run`](Self::compaction_run))
    /// into as few segments as its live items need, evicting nothing.
    /// Large items may not pack as the byte counts promise: a run found
    /// not to fit is skipped, and at most two are tried per call.
    pub(super) fn compact_any(&mut self) -> bool {
        let seg_size = self.segs.segment_size();
        // A run of more live items than the scratch holds is compacted a
        // window at a time if its items are small (`compact_in_windows`).
        let capacity = self.merge_scratch.capacity();
        let mut failed = None;
        for _ in 0..2 {
            let Some(found) = self.compaction_run(failed) else {
                return false;
            };
            failed = Some((found.run[0], found.n));
            let CompactionRun {
                bucket,
                main,
                run,
                mut n,
                mut live,
                mut items,
            } = found;
            if items > capacity {
                if self.items_at_most(&run[..n], seg_size / 32)
                    && self.compact_in_windows(bucket, &run[..n], main, live)
                {
                    return true;
                }
                // Large items: only what the scratch holds, checked by
                // packing.
                while items > capacity {
                    n -= 1;
                    items -= self.segs.headers[run[n] as usize].live_items as usize;
                    live -= self.segs.headers[run[n] as usize].live_bytes as usize;
                }
            }
            let plan = Plan {
                forced: n,
                min_freq: 0,
                may_keep_all: false,
                ghosts: None,
                main,
                fill: true,
                frees_one: false,
                promote_dropped: false,
            };
            if compaction_frees(n, live, seg_size, main)
                && self.merge_chain(bucket, &run[..n], plan)
            {
                return true;
            }
        }
        false
    }

    /// The run to compact, if any, among the runs of up to [`MERGE_MAX`]
    /// consecutive sealed small segments ([`COMPACT_MAX_MAIN`] main ones)
    /// of one pool and TTL bucket, each as long as it can be from its
    /// first segment (deadline windows that fit one segment, and small runs'
    /// deadlines within [`SMALL_SPREAD`](crate::ttl::SMALL_SPREAD)), that are at most 7/8 live (main: 15/16) and whose live bytes fit
    /// in fewer segments: the oldest (the first found from the buckets'
    /// heads), unless it moves more than [`COMPACTION_COST_SLACK`] times
    /// the live bytes per segment freed of the cheapest such run, which is
    /// then taken instead. `skip` (first segment, length) names a run
    /// already found not to pack. The 7/8 bound caps the copying at seven
    /// bytes moved per byte freed, fifteen in main (dead bytes left by overwrites are
    /// memory lost to every item; 3/4 left a sixth of the heap dead on
    /// overwrite-heavy workloads); fuller runs are left to eviction. Reads
    /// only segment headers.
    fn compaction_run(&self, skip: Option<(u32, usize)>) -> Option<CompactionRun> {
        let seg_size = self.segs.segment_size();
        let (mut oldest, mut cheapest): (Option<CompactionRun>, Option<CompactionRun>) =
            (None, None);
        for bucket in 0..BUCKETS {
            if self.ttl.buckets[bucket].segments < 2 {
                continue;
            }
            let mut start = self.ttl.buckets[bucket].head;
            while start != NONE {
                let main = self.admission.is_main(start);
                let limit = if main { COMPACT_MAX_MAIN } else { MERGE_MAX };
                let run_items = compaction_run_items(limit, seg_size);
                let mut found = CompactionRun {
                    bucket,
                    main,
                    run: [NONE; COMPACT_MAX_MAIN],
                    n: 0,
                    live: 0,
                    items: 0,
                };
                let mut at = start;
                let mut range = RunDeadlines::default();
                while found.n < limit
                    && self.sealed(at)
                    && self.admission.is_main(at) == main
                    && found.items + self.segs.headers[at as usize].live_items as usize <= run_items
                    && self.scratch_holds(0, at)
                {
                    let Some(wider) = self.widen(bucket, range, at) else {
                        break;
                    };
                    if found.n > 0 && !main && wider.windows.span() > crate::ttl::SMALL_SPREAD {
                        break;
                    }
                    range = wider;
                    found.run[found.n] = at;
                    found.live += self.segs.headers[at as usize].live_bytes as usize;
                    found.items += self.segs.headers[at as usize].live_items as usize;
                    found.n += 1;
                    at = self.segs.headers[at as usize].next;
                }
                if compaction_frees(found.n, found.live, seg_size, main)
                    && skip != Some((start, found.n))
                {
                    let cheaper = cheapest
                        .as_ref()
                        .is_none_or(|best| found.cost_below(best, seg_size, 1));
                    if cheaper {
                        cheapest = Some(found.clone());
                    }
                    oldest.get_or_insert(found);
                }
                start = self.segs.headers[start as usize].next;
            }
        }
        match (oldest, cheapest) {
            (Some(oldest), Some(cheapest))
                if cheapest.cost_below(&oldest, seg_size, COMPACTION_COST_SLACK) =>
            {
                Some(cheapest)
            }
            (oldest, _) => oldest,
        }
    }

    /// A main-pool merge in `bucket`, from its cursor (or its head). A
    /// main segment no run can hold (it and the next main segment would
    /// need more deadline windows than a segment keeps) is the CLOCK's
    /// victim on its own: if any of its items was read since it last
    /// moved, their counts halve and the hand moves on (a second chance);
    /// else it is evicted whole (its items remembered as main ghosts).
    /// Before, the merge fell back to the bucket's head, and such a
    /// segment stayed, its overwritten items dead, until it expired.
    pub(super) fn merge_bucket(&mut self, bucket: usize, now: u32) -> bool {
        let head = self.ttl.buckets[bucket].head;
        let cursor = self.ttl.buckets[bucket].merge_cursor;
        for mut start in [cursor, head] {
            for _ in 0..self.ttl.buckets[bucket].segments {
                if !self.sealed(start) || !self.admission.is_main(start) {
                    break;
                }
                let start_header = &self.segs.headers[start as usize];
                let next = start_header.next;
                if near_expiry(start_header, now) {
                    // About to expire anyway: free it whole.
                    self.ttl.buckets[bucket].merge_cursor = next;
                    self.evict_segment(start);
                    return true;
                }
                let (chain, len, lone) = self.main_run(bucket, start);
                if len >= 2 {
                    let plan = Plan {
                        forced: 0,
                        min_freq: 1,
                        may_keep_all: false,
                        ghosts: Some(true),
                        main: true,
                        fill: true,
                        frees_one: self.segs.count() >= FREE_ONE_SEGMENTS,
                        promote_dropped: false,
                    };
                    if self.merge_chain(bucket, &chain[..len], plan) {
                        return true;
                    }
                } else if lone {
                    self.ttl.buckets[bucket].merge_cursor = next;
                    if self.age_segment(start) {
                        start = next;
                        continue;
                    }
                    self.evict_segment(start);
                    return true;
                }
                break;
            }
        }
        false
    }

    /// The run of up to [`MERGE_MAX`] sealed main segments of `bucket` from
    /// `start` whose deadline windows fit one segment ([`widen`](Self::widen))
    /// and whose items the scratch holds, its length, and whether it is
    /// `start` alone because the next main segment's do not fit with its own.
    pub(super) fn main_run(&self, bucket: usize, start: u32) -> ([u32; MERGE_MAX], usize, bool) {
        let mut chain = [NONE; MERGE_MAX];
        let mut len = 0;
        let mut items = 0;
        let mut at = start;
        let mut range = RunDeadlines::default();
        while len < MERGE_MAX
            && self.sealed(at)
            && self.admission.is_main(at)
            && self.scratch_holds(items, at)
        {
            let Some(wider) = self.widen(bucket, range, at) else {
                return (chain, len, len == 1);
            };
            range = wider;
            chain[len] = at;
            items += self.segs.headers[at as usize].live_items as usize;
            len += 1;
            at = self.segs.headers[at as usize].next;
        }
        (chain, len, false)
    }

    /// Halves the access counts of segment `id`'s live items (a CLOCK hand
    /// passing them); true if any was read since its last move.
    fn age_segment(&mut self, id: u32) -> bool {
        let mut read = false;
        for (offset, item) in self.segs.item_offsets(id) {
            if item.is_unlinked() {
                continue;
            }
            let hash = self.table.hash(item.key());
            if let Some((bucket, slot, info)) =
                self.table.locate(hash, Location { seg: id, offset })
            {
                let freq = hashtable::frequency(info);
                if freq > 0 {
                    read = true;
                    self.table.set_frequency(bucket, slot, freq / 2);
                }
            }
        }
        read
    }

    /// The deadline windows a run of segments needs after adding `id`, or
    /// `None` if its items would need more than a segment keeps
    /// ([`MAX_WINDOWS`](crate::windows::MAX_WINDOWS)) or a segment of the
    /// run lacks the room for them at its end: the merge's outputs then
    /// keep every item's deadline within the bucket's precision
    /// (`ttl::spread`).
    fn widen(&self, bucket: usize, mut run: RunDeadlines, id: u32) -> Option<RunDeadlines> {
        if !run.windows.join(bucket, &self.segs.windows(id)) {
            return None;
        }
        run.fullest = run.fullest.max(self.segs.headers[id as usize].write_offset);
        let room = Segments::window_room(run.windows.as_slice().len());
        (run.fullest as usize + room <= self.segs.segment_size()).then_some(run)
    }

    /// Bytes each output of a merge of `chain` may fill with items: the
    /// segment, less the room its deadline windows take at its end if the
    /// chain's items need more than one (see `windows.rs`); `None` if some
    /// segment of the chain holds more than that (its items could then
    /// spill into an output not yet read; the run builders never build
    /// such a chain, see [`widen`](Self::widen)).
    pub(super) fn output_room(&self, bucket: usize, chain: &[u32]) -> Option<usize> {
        let run = chain.iter().try_fold(RunDeadlines::default(), |run, &id| {
            self.widen(bucket, run, id)
        })?;
        Some(self.segs.segment_size() - Segments::window_room(run.windows.as_slice().len()))
    }

    /// Whether the merge scratch holds `items` live items plus those of
    /// segment `id` (see [`scratch_items`]).
    fn scratch_holds(&self, items: usize, id: u32) -> bool {
        items + self.segs.headers[id as usize].live_items as usize <= self.merge_scratch.capacity()
    }

    /// Whether every item, live or dead, of the chain is at most `max`
    /// bytes (reads item headers only).
    fn items_at_most(&self, chain: &[u32], max: usize) -> bool {
        chain.iter().all(|&id| {
            self.segs
                .item_offsets(id)
                .all(|(_, item)| item.size() <= max)
        })
    }
}

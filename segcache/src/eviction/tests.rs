use super::merge::pack;
use super::{
    scratch_items, LiveItem, COMPACT_MAX_MAIN, FREE_ONE_SEGMENTS, MERGE_MAX, PROMOTE_FREQ,
};
use crate::builder::small_cache;
use crate::hashtable::{self, Location};
use crate::segments::SegState;
use crate::segments::NONE;
use crate::ttl::BUCKETS;
use crate::windows::{Windows, MAX_WINDOWS};
use crate::{Eviction, ManualClock, Segcache};
use std::time::Duration;

fn cache(policy: Eviction) -> Segcache {
    small_cache(256 << 10, 8 << 10, 10, policy, &ManualClock::new())
}

#[test]
fn every_policy_but_none_keeps_serving_past_a_full_heap() {
    for policy in Eviction::ALL {
        if policy == Eviction::None {
            continue;
        }
        let mut c = cache(policy);
        let ttls = [
            None,
            Some(Duration::from_secs(3600)),
            Some(Duration::from_secs(60)),
        ];
        for i in 0..20_000u32 {
            let key = format!("key-{i}");
            c.set(key.as_bytes(), [i as u8; 90], 0, ttls[i as usize % 3])
                .unwrap_or_else(|e| panic!("{policy:?}: {e}"));
            assert_eq!(c.get(key.as_bytes()).unwrap().value(), &[i as u8; 90][..]);
        }
        let s = c.stats();
        assert!(s.evictions > 0, "{policy:?}");
        assert!(s.live_bytes <= s.heap_bytes);
        c.check_invariants();
    }
}

#[test]
fn overwrites_within_the_heap_are_compacted_not_evicted() {
    let clock = ManualClock::new();
    let mut c = small_cache(64 << 10, 4 << 10, 8, Eviction::default(), &clock);
    // 300 keys x ~91 bytes = ~27 KiB live in a 64 KiB heap, rewritten
    // ten times over: dead versions fill segments, compaction frees them.
    // Each key's value changes size at every write, so every overwrite
    // goes to the log (one of the same size would be made in place).
    let mut rng = 1u64;
    let mut writes = [0usize; 300];
    for round in 0..7_000u32 {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let k = (rng % 300) as usize;
        writes[k] += 1;
        let value = vec![round as u8; 80 + writes[k] % 2];
        c.set(format!("k{k:03}").as_bytes(), value, 0, None)
            .unwrap();
    }
    for k in 0..300u64 {
        let key = format!("k{k:03}");
        assert!(c.contains(key.as_bytes()) || c.peek(key.as_bytes()).is_none());
    }
    let s = c.stats();
    assert!(s.merges > 10, "compactions ran: {}", s.merges);
    assert_eq!(s.evictions, 0, "nothing live had to go");
    assert!(s.evicted_segments > 10);
    c.check_invariants();
}

/// Compaction packs thinned-out small segments only while their
/// deadlines lie within `ttl::SMALL_SPREAD` (about 9.1 h): at
/// TTL/16 (45 h for 30 days) items written ten hours apart were packed
/// into one segment and went with the earliest, ten hours early.
#[test]
fn small_compaction_packs_thirty_day_items_only_within_its_spread() {
    let clock = ManualClock::new();
    clock.set(1_000);
    let t0 = clock.now();
    let mut c = small_cache(64 << 10, 4 << 10, 8, Eviction::default(), &clock);
    let ttl = 30 * 86_400u32;
    let hours = 96u32;
    // 20 items an hour (a segment spans about 2.3 hours of
    // deadlines, a run of eight small ones 18 hours), 2 of them kept:
    // 96 hours write 2.7 heaps, so thinned segments are compacted.
    for h in 0..hours {
        for i in 0..20u32 {
            let key = format!("h{h}:{i}");
            c.set(
                key.as_bytes(),
                [1u8; 80],
                0,
                Some(Duration::from_secs(ttl.into())),
            )
            .unwrap();
            clock.advance(Duration::from_secs(180));
        }
        for i in 2..20u32 {
            assert!(c.delete(format!("h{h}:{i}").as_bytes()));
        }
    }
    let s = c.stats();
    assert!(s.merges >= 2, "compactions ran: {}", s.merges);
    assert_eq!(s.evictions, 0, "nothing live had to go");
    c.check_invariants();
    // Every kept item is served until 2^15 s before its deadline and
    // not from its deadline on.
    clock.set(t0 + ttl - 2 * 3_600);
    for _ in 0..hours + 4 {
        let now = clock.now();
        for h in 0..hours {
            for i in 0..2u32 {
                let deadline = t0 + h * 3_600 + i * 180 + ttl;
                let served = c.get(format!("h{h}:{i}").as_bytes()).is_some();
                if now >= deadline {
                    assert!(!served, "h{h}:{i} served past its deadline");
                } else if deadline - now >= 1 << 15 {
                    assert!(served, "h{h}:{i} gone {} s early", deadline - now);
                }
            }
        }
        clock.advance(Duration::from_secs(3_600));
    }
}

#[test]
fn merge_keeps_read_items_and_drops_unread_ones() {
    let clock = ManualClock::new();
    let mut c = small_cache(64 << 10, 4 << 10, 8, Eviction::default(), &clock);
    // 16 segments of ~46 items. Every 20th of the first 400 keys is
    // read every second; the rest are written once and never read.
    let hot = |i: u32| i < 400 && i % 20 == 0;
    for i in 0..2_000u32 {
        clock.advance(Duration::from_secs(1));
        for h in (0..i.min(400)).filter(|&h| hot(h)) {
            assert!(
                c.get(format!("k{h}").as_bytes()).is_some(),
                "hot k{h} lost at {i}"
            );
        }
        c.set(format!("k{i}").as_bytes(), [1u8; 80], 0, None)
            .unwrap();
    }
    let cold_present = (0..1000u32)
        .filter(|&i| !hot(i) && c.contains(format!("k{i}").as_bytes()))
        .count();
    assert!(c.stats().merges > 0);
    // Unread items only fill room the survivors leave in a merged
    // segment, so most old cold keys are gone while every hot one stayed.
    assert!(
        cold_present < 980 / 4,
        "old cold keys mostly gone: {cold_present}/980"
    );
    c.check_invariants();
}

fn merge_cache(heap: usize, segment: usize, clock: &ManualClock) -> Segcache {
    small_cache(heap, segment, 12, Eviction::default(), clock)
}

/// Writes keys `k0000`, `k0001`… (80-byte values, no TTL) until
/// `segments` segments are in use; how many keys were written.
fn fill_segments(c: &mut Segcache, segments: u64) -> u32 {
    let mut keys = 0u32;
    while c.stats().segments_used < segments {
        c.set(format!("k{keys:04}"), [1u8; 80], 0, None).unwrap();
        keys += 1;
    }
    keys
}

/// Moves every segment in use to the main pool.
fn all_main(c: &mut Segcache) {
    for id in 0..c.segs.count() as u32 {
        if c.segs.headers[id as usize].state != SegState::Free {
            c.admission.set_main(id, true);
        }
    }
}

/// Where a key's item is and its access count.
fn entry(c: &Segcache, key: &str) -> Option<(Location, u8)> {
    let hash = c.table.hash(key.as_bytes());
    c.table
        .lookup(hash, |at| c.segs.item(at).key() == key.as_bytes())
        .map(|(_, _, info)| (hashtable::location(info), hashtable::frequency(info)))
}

#[test]
fn compaction_moves_items_with_their_access_counts() {
    // Read keys interleaved with overwritten ones: compaction packs the
    // read ones over the dead versions, and must not age them (it
    // judges nothing; halving turned read probation items cold before
    // their evaluation).
    let clock = ManualClock::new();
    let mut c = merge_cache(64 << 10, 4 << 10, &clock);
    // The overwritten keys change size at every write: their overwrites
    // go to the log, not in place.
    for k in 0..120u32 {
        c.set(format!("w{k:03}"), [1u8; 80], 0, None).unwrap();
        let size = 80 + (k / 4) as usize % 2;
        c.set(format!("o{}", k % 4), vec![2u8; size], 0, None)
            .unwrap();
    }
    clock.advance(Duration::from_secs(1));
    for k in 0..120u32 {
        assert!(c.get(format!("w{k:03}")).is_some());
    }
    let before: Vec<_> = (0..120u32)
        .map(|k| entry(&c, &format!("w{k:03}")).unwrap())
        .collect();
    assert!(before.iter().all(|&(_, f)| f == 1), "one access each");
    assert!(c.compact_any(), "half the bytes are dead: a run compacts");
    let after: Vec<_> = (0..120u32)
        .map(|k| entry(&c, &format!("w{k:03}")).unwrap())
        .collect();
    let moved = before
        .iter()
        .zip(&after)
        .filter(|(b, a)| b.0 != a.0)
        .count();
    assert!(moved > 20, "compaction moved read items: {moved}");
    assert!(
        after.iter().all(|&(_, f)| f == 1),
        "moved items keep their count"
    );
    assert_eq!(c.stats().evictions, 0);
    c.check_invariants();
}

#[test]
fn main_runs_thinned_too_evenly_for_eight_segments_are_compacted() {
    // Overwritten items leave dead copies spread thinly over main: at
    // 7/8 live, eight segments cannot pack into seven, but twelve pack
    // into eleven. Compaction must find such a run and free a segment
    // without evicting anything.
    let clock = ManualClock::new();
    let mut c = merge_cache(128 << 10, 4 << 10, &clock);
    let keys = fill_segments(&mut c, 14);
    all_main(&mut c);
    for k in (0..keys).step_by(8) {
        assert!(c.delete(format!("k{k:04}")));
    }
    let live = sealed_live_bytes(&c);
    let usable = super::usable(c.segs.segment_size());
    assert!(live.len() >= 12);
    assert!(
        live[..MERGE_MAX].iter().sum::<usize>() > (MERGE_MAX - 1) * usable,
        "eight segments do not fit in seven"
    );
    compacts_one_segment_away(&mut c, keys, 8);
}

#[test]
fn main_runs_over_seven_eighths_live_are_compacted() {
    // One item in sixteen dead, spread evenly over main: no run of 12
    // packs into 11 and every run is over 7/8 live, but 24 segments
    // pack into 23 at under 15/16 live. Compaction must free a segment
    // without evicting anything.
    let clock = ManualClock::new();
    let mut c = merge_cache(2 << 20, 4 << 10, &clock);
    // ~210-byte items in a heap of 512 segments: the merge scratch
    // holds a run of 24.
    let mut keys = 0u32;
    while c.stats().segments_used < 26 {
        c.set(format!("k{keys:04}"), [1u8; 200], 0, None).unwrap();
        keys += 1;
    }
    all_main(&mut c);
    for k in (0..keys).step_by(16) {
        assert!(c.delete(format!("k{k:04}")));
    }
    let live = sealed_live_bytes(&c);
    let seg = c.segs.segment_size();
    let usable = super::usable(seg);
    assert!(live.len() >= COMPACT_MAX_MAIN);
    assert!(
        live[..12].iter().sum::<usize>() > 11 * usable,
        "twelve segments do not fit in eleven"
    );
    assert!(
        live[..COMPACT_MAX_MAIN].iter().sum::<usize>() * 8 > COMPACT_MAX_MAIN * seg * 7,
        "over 7/8 live"
    );
    compacts_one_segment_away(&mut c, keys, 16);
}

/// Live bytes of each sealed segment, in segment id order.
fn sealed_live_bytes(c: &Segcache) -> Vec<usize> {
    (0..c.segs.count())
        .map(|id| &c.segs.headers[id])
        .filter(|h| h.state == SegState::Sealed)
        .map(|h| h.live_bytes as usize)
        .collect()
}

/// One compaction frees exactly one segment and evicts nothing: of
/// keys `k0000..keys`, every `deleted_every`-th (deleted before) is
/// still gone and every other one is still there.
fn compacts_one_segment_away(c: &mut Segcache, keys: u32, deleted_every: u32) {
    let used = c.stats().segments_used;
    let items = c.stats().items;
    assert!(c.compact_any(), "a main run compacts");
    assert_eq!(c.stats().segments_used, used - 1);
    assert_eq!(c.stats().items, items);
    assert_eq!(c.stats().evictions, 0);
    for k in 0..keys {
        assert_eq!(
            c.contains(format!("k{k:04}").as_bytes()),
            k % deleted_every != 0,
            "key {k}"
        );
    }
    c.check_invariants();
}

/// A cache of `heap` bytes in 4 KiB segments whose sealed segments are
/// all main, every fourth key read once; its keys.
fn main_pool_a_quarter_read(heap: usize, clock: &ManualClock) -> (Segcache, u32) {
    let mut c = merge_cache(heap, 4 << 10, clock);
    let keys = fill_segments(&mut c, 11);
    all_main(&mut c);
    clock.advance(Duration::from_secs(1));
    for k in (0..keys).step_by(4) {
        assert!(c.get(format!("k{k:04}")).is_some());
    }
    (c, keys)
}

#[test]
fn a_main_merge_frees_one_segment_and_keeps_unread_items_in_the_rest() {
    // A quarter of main was read: its read items need two of the run's
    // eight segments. The merge frees one segment only, keeping unread
    // items in the room the read ones leave (before, it freed every
    // segment the read items did not need: all unread items of the run
    // went at once).
    let clock = ManualClock::new();
    let (mut c, keys) = main_pool_a_quarter_read(128 << 10, &clock);
    assert!(c.segs.count() >= FREE_ONE_SEGMENTS);
    let per_segment = (0..c.segs.count())
        .map(|id| c.segs.headers[id].live_items)
        .max()
        .unwrap() as u64;
    let (used, items) = (c.stats().segments_used, c.stats().items);
    assert!(c.merge_main(0), "a main merge ran");
    assert_eq!(c.stats().segments_used, used - 1, "exactly one freed");
    let evicted = items - c.stats().items;
    // One segment's worth, plus at most an item per output: packing
    // in order may leave up to an item's room at each output's end.
    assert!(
        evicted > 0 && evicted <= per_segment + MERGE_MAX as u64,
        "one segment's worth of unread items went: {evicted} (a segment holds {per_segment})"
    );
    for k in (0..keys).step_by(4) {
        assert!(c.contains(format!("k{k:04}").as_bytes()), "read k{k} kept");
    }
    c.check_invariants();
    // In a heap of a few segments a merge frees what its read items
    // leave: there the small pool needs whole segments back.
    let (mut few, _) = main_pool_a_quarter_read(48 << 10, &clock);
    assert!(few.segs.count() < FREE_ONE_SEGMENTS);
    let used = few.stats().segments_used;
    assert!(few.merge_main(0));
    assert!(
        few.stats().segments_used + 1 < used,
        "more than one freed: {} of {used} left",
        few.stats().segments_used
    );
    few.check_invariants();
}

#[test]
fn compaction_takes_a_far_cheaper_run_over_the_oldest() {
    // The oldest run is 5/6 live (8 segments pack into 7: one freed for
    // ~6.7 segments moved); a later run thinned by deletes is 1/4 live
    // (its last three pack into one: two freed for 3/4 moved). It is
    // more than COMPACTION_COST_SLACK times cheaper per segment freed,
    // so it is compacted and the oldest items stay where they are.
    let clock = ManualClock::new();
    let mut c = merge_cache(128 << 10, 4 << 10, &clock);
    let keys = fill_segments(&mut c, 14);
    let bucket = crate::ttl::bucket_for(0);
    let mut chain = vec![];
    let mut id = c.ttl.buckets[bucket].head;
    while id != NONE {
        chain.push(id);
        id = c.segs.headers[id as usize].next;
    }
    assert_eq!(chain.len(), 14);
    let position = |c: &Segcache, k: u32| {
        let (at, _) = entry(c, &format!("k{k:04}")).unwrap();
        chain.iter().position(|&id| id == at.seg).unwrap()
    };
    let mut gone = vec![];
    for k in 0..keys {
        let p = position(&c, k);
        if (p < MERGE_MAX && k % 6 == 0) || ((MERGE_MAX..13).contains(&p) && k % 4 != 0) {
            assert!(c.delete(format!("k{k:04}")));
            gone.push(k);
        }
    }
    let oldest: Vec<_> = (0..keys)
        .filter(|k| !gone.contains(k) && position(&c, *k) < MERGE_MAX)
        .map(|k| (k, entry(&c, &format!("k{k:04}")).unwrap().0))
        .collect();
    let (used, items) = (c.stats().segments_used, c.stats().items);
    assert!(c.compact_any());
    // The oldest run would free one segment; a thinned one frees two
    // or more.
    assert!(
        c.stats().segments_used <= used - 2,
        "a thinned run was packed"
    );
    assert_eq!((c.stats().items, c.stats().evictions), (items, 0));
    for (k, at) in oldest {
        assert_eq!(
            entry(&c, &format!("k{k:04}")).unwrap().0,
            at,
            "key {k} moved"
        );
    }
    for k in 0..keys {
        assert_eq!(
            c.contains(format!("k{k:04}").as_bytes()),
            !gone.contains(&k)
        );
    }
    c.check_invariants();
}

#[test]
fn small_segments_are_evaluated_even_after_a_main_segment_of_older_deadlines() {
    // A main segment whose deadlines are far from the small segments'
    // after it cannot be topped up with their items (TTL precision);
    // the evaluation must still run on the small segments alone and
    // free one, not stop at the main segment.
    let clock = ManualClock::new();
    let mut c = merge_cache(128 << 10, 4 << 10, &clock);
    let ttl = Some(Duration::from_secs(160));
    for k in 0..60u32 {
        c.set(format!("a{k}"), [1u8; 80], 0, ttl).unwrap();
    }
    all_main(&mut c);
    // 100 s later (deadlines 100 s apart, the bucket allows 9): new
    // segments, small, never read.
    clock.advance(Duration::from_secs(100));
    for k in 0..200u32 {
        c.set(format!("b{k}"), [1u8; 80], 0, ttl).unwrap();
    }
    let small = c.small_count();
    assert!(small >= 4, "small segments: {small}");
    let (free, evictions) = (c.segs.free_count(), c.stats().evictions);
    assert!(c.evaluate_small(100, false));
    assert!(c.segs.free_count() > free, "the evaluation freed a segment");
    assert!(c.stats().evictions > evictions, "unread items went");
    for k in 0..60u32 {
        assert!(c.contains(format!("a{k}")), "main items stay");
    }
    c.check_invariants();
}

#[test]
fn a_main_segment_no_run_can_hold_gets_a_second_chance_then_goes() {
    // A main segment whose deadline windows and the next one's are
    // more than a segment keeps (TTL precision) cannot be merged: the
    // CLOCK hand halves its read items' counts and moves on, and
    // evicts it whole when nothing in it was read. Before, the merge
    // fell back to the bucket's head (the same segment) and gave up.
    let clock = ManualClock::new();
    let mut c = merge_cache(128 << 10, 4 << 10, &clock);
    let ttl = Some(Duration::from_secs(1000));
    for k in 0..20u32 {
        c.set(format!("a{k}"), [1u8; 80], 0, ttl).unwrap();
    }
    // 100 s later (the bucket allows ~60 s between deadlines).
    clock.advance(Duration::from_secs(100));
    let mut b = 0u32;
    while c.stats().segments_used < 5 {
        c.set(format!("b{b}"), [1u8; 80], 0, ttl).unwrap();
        b += 1;
    }
    clock.advance(Duration::from_secs(100));
    c.set("c", [1u8; 80], 0, ttl).unwrap();
    all_main(&mut c);
    let lone = entry(&c, "a0").unwrap().0.seg;
    let bucket = c.segs.headers[lone as usize].ttl_bucket as usize;
    assert_eq!(c.ttl.buckets[bucket].head, lone);
    // 100 s from the next segment's deadlines, it would join it as a
    // second window; as if merged from segments written 100 s apart,
    // its items are in as many windows as a segment keeps.
    let at = c.segs.headers[lone as usize].expire_at;
    let ends: Vec<u32> = c
        .segs
        .item_offsets(lone)
        .map(|(o, i)| o + i.size() as u32)
        .collect();
    assert!(ends.len() >= MAX_WINDOWS);
    let mut windows = Windows::default();
    for w in 0..MAX_WINDOWS {
        let deadline = at + 100 * w as u32;
        let end = ends[(w + 1) * ends.len() / MAX_WINDOWS - 1];
        assert!(windows.push(bucket, deadline, deadline, end));
    }
    assert_eq!(windows.as_slice().len(), MAX_WINDOWS);
    c.segs.set_windows(lone, &windows);
    assert!(c.main_run(bucket, lone).2, "no run holds it");
    c.ttl.buckets[bucket].merge_cursor = lone;
    assert!(c.get("a0").is_some());
    let now = clock.now();

    // Read: a second chance; the hand merges the next run instead.
    let evictions = c.stats().evictions;
    assert!(c.merge_bucket(bucket, now));
    assert!(c.stats().evictions > evictions, "the b run merged");
    assert_eq!(
        entry(&c, "a0"),
        Some((
            Location {
                seg: lone,
                offset: 0
            },
            0
        ))
    );
    assert!((0..20u32).all(|k| c.contains(format!("a{k}"))));

    // Nothing read since: evicted whole, remembered as main ghosts.
    c.ttl.buckets[bucket].merge_cursor = lone;
    let (free, evictions) = (c.segs.free_count(), c.stats().evictions);
    assert!(c.merge_bucket(bucket, now));
    assert_eq!(c.segs.free_count(), free + 1);
    assert_eq!(c.stats().evictions, evictions + 20);
    assert!((0..20u32).all(|k| !c.contains(format!("a{k}"))));
    c.set("a1", [1u8; 80], 0, ttl).unwrap();
    assert_eq!(entry(&c, "a1").unwrap().1, PROMOTE_FREQ, "back warm");
    c.check_invariants();
}

#[test]
fn merging_across_deadline_windows_keeps_each_items_deadline() {
    // Two main segments whose deadlines lie 100 s apart (the bucket
    // allows ~60 s in one segment) merge into one, which keeps the two
    // windows: every item expires at its own deadline, not its new
    // neighbours', and the segment goes when the later window does.
    let clock = ManualClock::new();
    clock.set(1_000);
    let mut c = merge_cache(128 << 10, 4 << 10, &clock);
    let ttl = Some(Duration::from_secs(1000));
    for k in 0..20u32 {
        c.set(format!("a{k}"), [1u8; 80], 0, ttl).unwrap();
    }
    clock.advance(Duration::from_secs(100));
    for k in 0..20u32 {
        c.set(format!("b{k}"), [1u8; 80], 0, ttl).unwrap();
    }
    clock.advance(Duration::from_secs(100));
    c.set("c", [1u8; 80], 0, ttl).unwrap();
    let (a, b) = (
        entry(&c, "a0").unwrap().0.seg,
        entry(&c, "b0").unwrap().0.seg,
    );
    assert_ne!(a, b);
    all_main(&mut c);
    for k in 0..20u32 {
        assert!(c.get(format!("a{k}")).is_some() && c.get(format!("b{k}")).is_some());
    }
    let bucket = c.segs.headers[a as usize].ttl_bucket as usize;
    let (chain, len, _) = c.main_run(bucket, a);
    assert_eq!(&chain[..len], [a, b], "one run across the two windows");
    c.ttl.buckets[bucket].merge_cursor = a;
    let used = c.stats().segments_used;
    assert!(c.merge_bucket(bucket, clock.now()));
    assert_eq!(
        c.stats().segments_used,
        used - 1,
        "the merge freed a segment"
    );
    assert_eq!(entry(&c, "b0").unwrap().0.seg, a);
    assert!(c.segs.headers[a as usize].is_split());
    assert_eq!(c.segs.windows(a).as_slice().len(), 2);
    c.check_invariants();
    // Each item reports its own time left.
    let left = |c: &mut Segcache, key: &str| c.get(key).map(|i| i.ttl().duration().unwrap());
    assert_eq!(left(&mut c, "a0"), Some(Duration::from_secs(800)));
    assert_eq!(left(&mut c, "b0"), Some(Duration::from_secs(900)));
    // At the first window's deadline its items go, the others stay;
    // the expiry walk reaps the first window's unread items.
    clock.set(2_000);
    assert!(c.get("a0").is_none());
    assert!(c.get("b0").is_some());
    let expired = c.expire();
    assert_eq!((expired.items, expired.segments), (19, 0));
    assert!((0..20u32).all(|k| c.contains(format!("b{k}"))));
    c.check_invariants();
    // The segment goes with its last window.
    clock.set(2_100);
    let expired = c.expire();
    assert_eq!((expired.items, expired.segments), (20, 1));
    assert!(c.get("b1").is_none());
    c.check_invariants();
}

#[test]
fn keys_of_a_segment_evicted_whole_come_back_warm() {
    let clock = ManualClock::new();
    let mut c = merge_cache(128 << 10, 4 << 10, &clock);
    for k in 0..100u32 {
        c.set(format!("k{k}"), [1u8; 80], 0, None).unwrap();
    }
    let (at, _) = entry(&c, "k0").unwrap();
    let gone: Vec<u32> = (0..100u32)
        .filter(|k| entry(&c, &format!("k{k}")).unwrap().0.seg == at.seg)
        .collect();
    c.evict_segment(at.seg);
    assert!(gone.len() > 10 && gone.iter().all(|k| !c.contains(format!("k{k}"))));
    for k in &gone {
        c.set(format!("k{k}"), [1u8; 80], 0, None).unwrap();
    }
    let warm = gone
        .iter()
        .filter(|k| entry(&c, &format!("k{k}")).unwrap().1 == super::PROMOTE_FREQ)
        .count();
    assert!(warm * 4 >= gone.len() * 3, "{warm}/{} warm", gone.len());
    let cold = entry(&c, "k99").unwrap().1;
    assert_eq!(cold, 0, "a key never evicted has no access");
    c.check_invariants();
}

#[test]
fn keys_that_expire_after_proving_themselves_come_back_warm() {
    // Under merge eviction the expiry walk leaves a ghost of each item
    // that had been read since its last move (or sat in a main segment):
    // written again after its miss, the key starts warm. An item expired
    // unread leaves none.
    let clock = ManualClock::new();
    let mut c = merge_cache(128 << 10, 4 << 10, &clock);
    let ttl = Some(Duration::from_secs(100));
    for k in 0..40u32 {
        c.set(format!("k{k}"), [1u8; 80], 0, ttl).unwrap();
    }
    // A read in the second of the write is not counted (`hit_probed`).
    clock.advance(Duration::from_secs(1));
    for k in 0..20u32 {
        assert!(c.get(format!("k{k}")).is_some());
    }
    clock.advance(Duration::from_secs(200));
    assert!(c.expire().items >= 40);
    assert!((0..40u32).all(|k| !c.contains(format!("k{k}"))));
    for k in 0..40u32 {
        c.set(format!("k{k}"), [1u8; 80], 0, ttl).unwrap();
    }
    let freq = |k: u32| entry(&c, &format!("k{k}")).unwrap().1;
    // A probation ghost starts warm once the small pool's wanted size is
    // above its floor, which the first returns raise (`readmit`).
    let warm = (0..20u32)
        .filter(|&k| freq(k) == super::PROMOTE_FREQ)
        .count();
    assert!(warm >= 15, "{warm}/20 read keys back warm");
    assert!(
        (20..40u32).all(|k| freq(k) == 0),
        "unread keys come back cold"
    );
    c.check_invariants();
}

#[test]
fn a_key_that_expires_in_main_leaves_a_ghost_even_unread() {
    // An item in a main segment proved itself once, whatever its access
    // count is now: expired, it leaves a probation ghost; an unread item
    // of probation leaves none.
    let clock = ManualClock::new();
    let mut c = merge_cache(128 << 10, 4 << 10, &clock);
    let ttl = Some(Duration::from_secs(100));
    for k in 0..600u32 {
        c.set(format!("k{k}"), [1u8; 80], 0, ttl).unwrap();
    }
    // Promoted unread: dropped often lately, while main has room.
    c.admission.give_drop_counts(1024);
    let hash = |c: &Segcache, key: &str| c.table.hash(key.as_bytes());
    let h3 = hash(&c, "k3");
    for _ in 0..crate::admission::DROPS_TO_PROMOTE {
        c.admission.remember(h3, false);
    }
    c.admission.ghosts.take(h3);
    assert!(c.evaluate_small(1, false));
    let (at, freq) = entry(&c, "k3").expect("promoted");
    assert!(c.admission.is_main(at.seg) && freq == 0, "in main, unread");
    let (last, freq) = entry(&c, "k599").unwrap();
    assert!(
        !c.admission.is_main(last.seg) && freq == 0,
        "in probation, unread"
    );
    clock.advance(Duration::from_secs(200));
    c.expire();
    assert!(!c.contains("k3") && !c.contains("k599"));
    assert_eq!(
        c.admission.ghosts.take(h3),
        Some(false),
        "k3: a probation ghost"
    );
    assert_eq!(
        c.admission.ghosts.take(hash(&c, "k599")),
        None,
        "k599: none"
    );
    c.check_invariants();
}

#[test]
fn keys_that_expire_leave_no_ghosts_without_merge_eviction() {
    // Only merge eviction reads ghosts: under FIFO eviction the expiry
    // walk leaves none.
    let clock = ManualClock::new();
    let mut c = small_cache(128 << 10, 4 << 10, 12, Eviction::Fifo, &clock);
    let ttl = Some(Duration::from_secs(100));
    for k in 0..20u32 {
        c.set(format!("k{k}"), [1u8; 80], 0, ttl).unwrap();
    }
    clock.advance(Duration::from_secs(1));
    for k in 0..20u32 {
        assert!(c.get(format!("k{k}")).is_some());
    }
    clock.advance(Duration::from_secs(200));
    assert!(c.expire().items >= 20);
    for k in 0..20u32 {
        let hash = c.table.hash(format!("k{k}").as_bytes());
        assert_eq!(c.admission.ghosts.take(hash), None, "k{k} left a ghost");
    }
    c.check_invariants();
}

#[test]
fn an_overwrite_counts_as_an_access() {
    let clock = ManualClock::new();
    let mut c = merge_cache(128 << 10, 4 << 10, &clock);
    c.set("once", [1u8; 80], 0, None).unwrap();
    c.set("twice", [1u8; 80], 0, None).unwrap();
    assert_eq!(
        entry(&c, "twice").unwrap().1,
        0,
        "a first write is no access"
    );
    c.set("twice", [2u8; 80], 0, None).unwrap();
    assert_eq!(entry(&c, "once").unwrap().1, 0);
    assert_eq!(
        entry(&c, "twice").unwrap().1,
        super::REWRITE_FREQ,
        "written again before its evaluation: promoted by it"
    );
    // Reads already counted are kept, not lowered.
    for _ in 0..3 {
        clock.advance(Duration::from_secs(1));
        c.get("twice").unwrap();
    }
    c.set("twice", [3u8; 80], 0, None).unwrap();
    assert_eq!(entry(&c, "twice").unwrap().1, super::REWRITE_FREQ + 3);
    c.check_invariants();
}

#[test]
fn a_key_written_twice_but_never_read_passes_probation() {
    // Two keys written at the same time, one of them written again;
    // neither is read. Then a flood of keys written once: the oldest
    // small segments are evaluated, and only the rewritten key (its
    // rewrite counted as an access) moves to main.
    let clock = ManualClock::new();
    let mut c = merge_cache(256 << 10, 4 << 10, &clock);
    for k in 0..20u32 {
        c.set(format!("once{k}"), [1u8; 80], 0, None).unwrap();
        c.set(format!("twice{k}"), [1u8; 80], 0, None).unwrap();
    }
    for k in 0..20u32 {
        c.set(format!("twice{k}"), [2u8; 80], 0, None).unwrap();
    }
    for i in 0..4_000u32 {
        c.set(format!("flood{i}"), [3u8; 80], 0, None).unwrap();
    }
    let once = (0..20u32)
        .filter(|k| c.contains(format!("once{k}")))
        .count();
    let twice = (0..20u32)
        .filter(|k| c.contains(format!("twice{k}")))
        .count();
    assert!(c.stats().evictions > 0, "the flood was evicted");
    assert_eq!(once, 0, "unread keys left with probation");
    assert_eq!(twice, 20, "rewritten keys passed it");
    // In main, they still count as read once (the promotion halved
    // the rewrite's two accesses): a main merge, which keeps what was
    // read since the last move, keeps them too.
    for k in 0..20u32 {
        let (at, freq) = entry(&c, &format!("twice{k}")).unwrap();
        assert!(c.admission.is_main(at.seg), "twice{k} in main");
        assert!(
            freq >= super::PROMOTE_FREQ,
            "twice{k} still counts a read: {freq}"
        );
    }
    c.check_invariants();
}

/// A same-size overwrite is made in place in a probation (small)
/// segment. In an old main segment it goes to the log: the new version
/// starts a new trip through probation (its rewrite counted as an
/// access), as the log would have it, instead of keeping an old main
/// place that the next merges reach first (in place in any main segment
/// cost Twitter-like clusters 19 and 22 up to 0.012 of miss ratio:
/// BENCHMARKS.md §1f).
#[test]
fn overwrites_are_made_in_place_in_probation_not_in_old_main_segments() {
    let clock = ManualClock::new();
    let mut c = merge_cache(256 << 10, 4 << 10, &clock);
    for k in 0..20u32 {
        c.set(format!("twice{k}"), [1u8; 80], 0, None).unwrap();
    }
    let first = entry(&c, "twice0").unwrap().0;
    for k in 0..20u32 {
        c.set(format!("twice{k}"), [2u8; 80], 0, None).unwrap();
    }
    assert_eq!(entry(&c, "twice0").unwrap().0, first, "probation: in place");
    for i in 0..4_000u32 {
        c.set(format!("flood{i}"), [3u8; 80], 0, None).unwrap();
    }
    let (in_main, _) = entry(&c, "twice0").unwrap();
    assert!(c.admission.is_main(in_main.seg), "promoted");
    let live = c.stats().live_bytes;
    c.set("twice0", [4u8; 80], 0, None).unwrap();
    let (moved, freq) = entry(&c, "twice0").unwrap();
    assert_ne!(moved, in_main, "main: to the log");
    assert!(!c.admission.is_main(moved.seg), "back in probation");
    assert!(freq >= super::REWRITE_FREQ, "the rewrite counts: {freq}");
    assert_eq!(c.get("twice0").unwrap().value(), [4u8; 80]);
    assert_eq!(c.stats().live_bytes, live, "the old version is dead");
    // Once there, its next overwrite is in place again.
    c.set("twice0", [5u8; 80], 0, None).unwrap();
    assert_eq!(entry(&c, "twice0").unwrap().0, moved);
    assert_eq!(c.get("twice0").unwrap().value(), [5u8; 80]);
    c.check_invariants();
}

/// In main, an overwrite is made in place only in a segment opened in
/// the newest eighth of its bucket's age (a probation segment promoted
/// soon after it was filled); in one merges have kept since long before,
/// it goes to the log.
#[test]
fn overwrites_in_main_are_in_place_in_recently_promoted_segments_only() {
    let clock = ManualClock::new();
    let mut c = merge_cache(256 << 10, 4 << 10, &clock);
    // Keys read every round keep the bucket's oldest segment (opened at
    // 0) in main while floods an hour apart pass through probation.
    for k in 0..20u32 {
        c.set(format!("keep{k}"), [1u8; 80], 0, None).unwrap();
    }
    for round in 0..6u32 {
        for k in 0..20u32 {
            assert!(c.get(format!("keep{k}")).is_some(), "keep{k}");
        }
        clock.advance(Duration::from_secs(3600));
        for i in 0..1_500u32 {
            c.set(format!("flood{round}-{i}"), [3u8; 80], 0, None)
                .unwrap();
        }
    }
    // Keys written and read now, a segment's worth, then promoted by the
    // flood that follows at the same second: their segment, read
    // throughout, becomes a main segment itself, the bucket's newest.
    for i in 0..100u32 {
        c.set(format!("hot{i}"), [1u8; 80], 0, None).unwrap();
    }
    for i in 0..100u32 {
        assert!(c.get(format!("hot{i}")).is_some());
    }
    for i in 0..3_000u32 {
        c.set(format!("late{i}"), [3u8; 80], 0, None).unwrap();
    }
    let (at, _) = entry(&c, "hot50").unwrap();
    assert!(c.admission.is_main(at.seg), "hot50 promoted");
    c.set("hot50", [2u8; 80], 0, None).unwrap();
    assert_eq!(
        entry(&c, "hot50").unwrap().0,
        at,
        "a recent main segment: in place"
    );
    assert_eq!(c.get("hot50").unwrap().value(), [2u8; 80]);
    // A keep key's segment was opened at 0: the log.
    let (kept, _) = entry(&c, "keep0").unwrap();
    assert!(c.admission.is_main(kept.seg));
    c.set("keep0", [2u8; 80], 0, None).unwrap();
    assert_ne!(
        entry(&c, "keep0").unwrap().0,
        kept,
        "an old main segment: the log"
    );
    // Hours later, the hot key's segment is no longer recent.
    let (at, _) = entry(&c, "hot50").unwrap();
    assert!(c.admission.is_main(at.seg));
    clock.advance(Duration::from_secs(3 * 3600));
    c.set("hot50", [3u8; 80], 0, None).unwrap();
    assert_ne!(
        entry(&c, "hot50").unwrap().0,
        at,
        "no longer recent: the log"
    );
    assert_eq!(c.get("hot50").unwrap().value(), [3u8; 80]);
    c.check_invariants();
}

#[test]
fn a_scan_does_not_flush_the_hot_set() {
    // 300 hot keys (~30 KiB) read every round in a 256 KiB heap, while
    // a scan writes 20 000 keys that are never read again (~2 MiB,
    // eight times the heap). FIFO would have cycled the hot keys out
    // many times; the small pool filters the scan.
    let clock = ManualClock::new();
    let mut c = merge_cache(256 << 10, 8 << 10, &clock);
    for h in 0..300u32 {
        c.set(format!("hot{h}"), [7u8; 80], 0, None).unwrap();
    }
    let mut misses = 0;
    for i in 0..20_000u32 {
        if i % 50 == 0 {
            clock.advance(Duration::from_secs(1));
            for h in 0..300u32 {
                let key = format!("hot{h}");
                if c.get(&key).is_none() {
                    misses += 1;
                    c.set(&key, [7u8; 80], 0, None).unwrap();
                }
            }
        }
        c.set(format!("scan{i}"), [1u8; 80], 0, None).unwrap();
    }
    let s = c.stats();
    assert!(s.evictions > 15_000, "the scan was evicted: {s:?}");
    assert!(
        misses < 300,
        "hot keys missed {misses} times over 400 rounds"
    );
    let hot = (0..300u32)
        .filter(|h| c.contains(format!("hot{h}")))
        .count();
    assert!(hot >= 295, "hot keys held at the end: {hot}/300");
    c.check_invariants();
}

#[test]
fn an_evaluation_promotes_only_what_was_read() {
    // Probation keeps nothing unread: the items read move to main, the
    // rest of the run is evicted and its room freed, not filled with
    // unread items that would then skip probation (one segment in
    // every run did, half the evaluated items in runs of two).
    let clock = ManualClock::new();
    let mut c = merge_cache(128 << 10, 4 << 10, &clock);
    for k in 0..600u32 {
        c.set(format!("k{k}"), [1u8; 80], 0, None).unwrap();
    }
    clock.advance(Duration::from_secs(1));
    for k in 0..10u32 {
        assert!(c.get(format!("k{k}")).is_some());
    }
    let small = c.small_count();
    assert!(small >= 12, "small segments: {small}");
    let free = c.segs.free_count();
    assert!(c.evaluate_small(1, false));
    assert_eq!(
        c.admission.mains(),
        1,
        "one main segment for the read items"
    );
    let (at, _) = entry(&c, "k0").unwrap();
    assert!(c.admission.is_main(at.seg));
    let in_main = (0..600u32)
        .filter(|k| entry(&c, &format!("k{k}")).is_some_and(|(l, _)| c.admission.is_main(l.seg)))
        .count();
    assert_eq!(in_main, 10, "only the read keys joined main");
    assert_eq!(c.segs.free_count(), free + 1, "the rest was freed");
    // A run of two 4 KiB segments of 47 items (85-86 bytes: a 3-byte header,
    // a key of 2-3, the value), the 10 read ones moved.
    assert_eq!(c.stats().evictions as usize, 2 * 47 - 10);
    c.check_invariants();
}

#[test]
fn an_evaluation_promotes_keys_dropped_often_while_main_has_room() {
    // A key probation dropped DROPS_TO_PROMOTE times lately is kept
    // unread by its evaluation while main holds less than its share;
    // one dropped a time fewer is evicted, and an evaluation that must
    // free a segment promotes nothing unread.
    let clock = ManualClock::new();
    let mut c = merge_cache(128 << 10, 4 << 10, &clock);
    for k in 0..600u32 {
        c.set(format!("k{k}"), [1u8; 80], 0, None).unwrap();
    }
    c.admission.give_drop_counts(1024);
    let drop = |c: &mut Segcache, key: &str, times: u8| {
        let hash = c.table.hash(key.as_bytes());
        for _ in 0..times {
            c.admission.remember(hash, false);
        }
    };
    drop(&mut c, "k3", crate::admission::DROPS_TO_PROMOTE);
    drop(&mut c, "k4", crate::admission::DROPS_TO_PROMOTE - 1);
    let (oldest, _) = entry(&c, "k3").unwrap();
    assert_eq!(entry(&c, "k4").unwrap().0.seg, oldest.seg);
    assert!(c.admission.main_has_room(0));
    assert!(c.evaluate_small(1, false));
    let (at, freq) = entry(&c, "k3").expect("dropped often: kept");
    assert!(c.admission.is_main(at.seg) && freq == 0, "promoted unread");
    assert!(!c.contains("k4"), "one drop short: evicted");
    assert!(!c.contains("k5"), "never dropped: evicted");
    // Must free: the unread go whatever their past.
    let next = c.segs.headers[oldest.seg as usize].next;
    let victim = (0..600u32)
        .map(|k| format!("k{k}"))
        .find(|k| entry(&c, k).is_some_and(|(l, _)| l.seg == next))
        .unwrap();
    drop(&mut c, &victim, crate::admission::DROPS_TO_PROMOTE);
    let oldest_small = c.oldest_small().unwrap();
    assert_eq!(c.oldest_in_run(oldest_small), next);
    assert!(c.evaluate_small(1, true));
    assert!(
        !c.contains(&victim),
        "a forced evaluation keeps nothing unread"
    );
    c.check_invariants();
}

#[test]
fn an_evaluation_promotes_small_unread_items_while_main_has_room() {
    // Items of 1/2 the mean or less are promoted unread while main has
    // room; larger unread ones are evicted, and so is an item of more
    // than twice the mean however often probation dropped it.
    let clock = ManualClock::new();
    let mut c = merge_cache(128 << 10, 4 << 10, &clock);
    c.admission.give_drop_counts(1024);
    for k in 0..200u32 {
        let len = match k {
            7 => 1_000,
            _ if k % 10 == 3 => 10,
            _ => 300,
        };
        c.set(format!("k{k}"), vec![1u8; len], 0, None).unwrap();
    }
    let stats = c.stats();
    assert_eq!(stats.evictions, 0);
    let hash = c.table.hash(b"k7");
    for _ in 0..crate::admission::DROPS_TO_PROMOTE {
        c.admission.remember(hash, false);
    }
    let (oldest, _) = entry(&c, "k0").unwrap();
    let run = [oldest.seg, c.segs.headers[oldest.seg as usize].next];
    let in_run: Vec<u32> = (0..200u32)
        .filter(|k| entry(&c, &format!("k{k}")).is_some_and(|(l, _)| run.contains(&l.seg)))
        .collect();
    assert!(in_run.contains(&3) && in_run.contains(&7) && in_run.contains(&13));
    assert!(c.admission.main_has_room(0));
    assert!(c.evaluate_small(1, false));
    for k in in_run {
        let key = format!("k{k}");
        if k % 10 == 3 {
            let (at, freq) = entry(&c, &key).expect("small: kept");
            assert!(
                c.admission.is_main(at.seg) && freq == 0,
                "{key} promoted unread"
            );
        } else {
            assert!(!c.contains(&key), "{key}: unread and not small, evicted");
        }
    }
    c.check_invariants();
    // In a heap of a few segments nothing small is promoted unread.
    let mut c = merge_cache(24 << 10, 4 << 10, &clock);
    for k in 0..40u32 {
        let len = if k % 10 == 3 { 10 } else { 300 };
        c.set(format!("k{k}"), vec![1u8; len], 0, None).unwrap();
    }
    assert!(c.segs.count() < 8 && c.contains("k3"));
    assert!(c.evaluate_small(1, false));
    assert!(!c.contains("k3"), "a heap of few segments: evicted");
    c.check_invariants();
}

#[test]
fn drop_counts_take_only_room_the_merge_scratch_cannot_use() {
    // Large items: runs need a few hundred records of the scratch's
    // thousands; at the first eviction 1/2048 of the heap moves from
    // the scratch to the drop counts, and memory does not grow.
    let clock = ManualClock::new();
    let heap = 8 << 20;
    let mut c = small_cache(heap, 64 << 10, 10, Eviction::default(), &clock);
    let scratch = c.merge_scratch.capacity();
    let before = c.stats().admission_bytes - c.admission.ghosts.bytes() as u64;
    assert!(!c.admission.drop_counts_sized());
    for i in 0..4_000u32 {
        c.set(format!("big{i}"), vec![7u8; 4_000], 0, None).unwrap();
    }
    assert!(c.stats().evictions > 0);
    assert!(c.admission.drop_counts_sized());
    let records = heap / crate::admission::DROP_COUNTS_HEAP_SHARE / 8;
    assert_eq!(c.admission.drop_counts_bytes(), records * 8);
    assert_eq!(c.merge_scratch.capacity(), scratch - records);
    let after = c.stats().admission_bytes - c.admission.ghosts.bytes() as u64;
    assert_eq!(after, before, "bytes moved, none added");
    c.check_invariants();
    // Small items: the scratch is needed whole; no drop counts.
    let mut c = small_cache(1 << 20, 8 << 10, 12, Eviction::default(), &clock);
    let scratch = c.merge_scratch.capacity();
    for i in 0..40_000u32 {
        c.set(format!("key{i}"), [5u8; 60], 0, None).unwrap();
    }
    assert!(c.admission.drop_counts_sized());
    assert_eq!(c.admission.drop_counts_bytes(), 0);
    assert_eq!(c.merge_scratch.capacity(), scratch);
    c.check_invariants();
}

#[test]
fn an_evaluation_with_nothing_read_frees_only_the_oldest_segment() {
    // Freeing both segments of the run would leave one empty until
    // written again (memory that holds nothing); the next one waits
    // for its own evaluation.
    let clock = ManualClock::new();
    let mut c = merge_cache(128 << 10, 4 << 10, &clock);
    for k in 0..600u32 {
        c.set(format!("k{k}"), [1u8; 80], 0, None).unwrap();
    }
    let (oldest, _) = entry(&c, "k0").unwrap();
    let next = c.segs.headers[oldest.seg as usize].next;
    let in_next: Vec<u32> = (0..600u32)
        .filter(|k| entry(&c, &format!("k{k}")).unwrap().0.seg == next)
        .collect();
    assert!(in_next.len() > 40);
    let free = c.segs.free_count();
    assert!(c.evaluate_small(0, false));
    assert_eq!(c.segs.free_count(), free + 1, "one segment freed");
    assert!(!c.contains("k0"));
    assert!(
        in_next.iter().all(|k| c.contains(format!("k{k}"))),
        "the next segment is still on probation"
    );
    assert_eq!(c.admission.mains(), 0);
    c.check_invariants();
}

#[test]
fn a_hot_set_of_nine_tenths_of_the_heap_stays() {
    // 4 250 hot keys of 111 B (90% of the heap's bytes) are read each
    // round while one-off keys trickle in: main must hold the hot set,
    // so probation may shrink to 5% of the heap. With S3-FIFO's 10%
    // floor a tenth of the heap stays with one-off keys and hot keys
    // cycle out of main (1 910 misses at 4 200 hot keys; none at 4 100).
    let clock = ManualClock::new();
    let mut c = merge_cache(512 << 10, 8 << 10, &clock);
    let hot = 4_250u32;
    for h in 0..hot {
        c.set(format!("h{h:05}"), [7u8; 100], 0, None).unwrap();
    }
    let mut misses = 0;
    let mut one_off = 0u32;
    for round in 0..60 {
        clock.advance(Duration::from_secs(1));
        for h in 0..hot {
            let key = format!("h{h:05}");
            if c.get(&key).is_none() {
                if round >= 30 {
                    misses += 1;
                }
                c.set(&key, [7u8; 100], 0, None).unwrap();
            }
        }
        for _ in 0..200 {
            c.set(format!("o{one_off}"), [1u8; 100], 0, None).unwrap();
            one_off += 1;
        }
    }
    assert!(misses < 100, "hot misses in the last 30 rounds: {misses}");
    c.check_invariants();
}

#[test]
fn a_key_back_from_the_ghosts_is_promoted() {
    // Keys written once and never read are dropped by their first
    // evaluation; written again soon after, they start warm and
    // survive the next one, while new unread keys do not.
    let clock = ManualClock::new();
    let mut c = merge_cache(128 << 10, 4 << 10, &clock);
    let fill = |c: &mut Segcache, prefix: &str, n: u32| {
        for i in 0..n {
            c.set(format!("{prefix}{i}"), [3u8; 80], 0, None).unwrap();
        }
    };
    fill(&mut c, "a", 400);
    // Push the a-keys through their evaluation (but not so much traffic
    // that their ghosts, one per item held in a cache this small, are
    // pushed out).
    fill(&mut c, "b", 1_400);
    let a_left = (0..400u32).filter(|i| c.contains(format!("a{i}"))).count();
    assert!(
        a_left < 150,
        "unread keys were mostly evicted: {a_left}/400 left"
    );
    // Back again: ghosts. Then as much new unread traffic as before.
    fill(&mut c, "a", 400);
    fill(&mut c, "c", 1_500);
    let a_kept = (0..400u32).filter(|i| c.contains(format!("a{i}"))).count();
    let c_kept = (0..400u32).filter(|i| c.contains(format!("c{i}"))).count();
    assert!(
        a_kept > 300 && a_kept > 4 * c_kept.max(1),
        "readmitted keys promoted: {a_kept}/400 vs {c_kept}/400 of new ones"
    );
    c.check_invariants();
}

#[test]
fn admission_memory_is_counted_and_follows_the_items() {
    let clock = ManualClock::new();
    let mut c = merge_cache(1 << 20, 8 << 10, &clock);
    let before = c.stats();
    assert_eq!(
        before.total_bytes,
        before.heap_bytes
            + before.hash_table_bytes
            + before.segment_header_bytes
            + before.admission_bytes
    );
    for i in 0..40_000u32 {
        c.set(format!("key{i}"), [5u8; 60], 0, None).unwrap();
    }
    let s = c.stats();
    assert!(s.evictions > 0);
    assert_eq!(
        s.total_bytes,
        s.heap_bytes + s.hash_table_bytes + s.segment_header_bytes + s.admission_bytes
    );
    // Ghosts: about 0.55 bytes per item held (a quarter to three
    // eighths of an entry of 2 bytes each), plus a flag per segment and
    // the merge scratch, fixed at build.
    let scratch = (c.merge_scratch.capacity() * std::mem::size_of::<LiveItem>()) as u64;
    let per_item = (s.admission_bytes - 128 - scratch) as f64 / s.items as f64;
    assert!(
        (0.45..=0.8).contains(&per_item),
        "admission bytes per item: {per_item:.2} ({s:?})"
    );
    c.check_invariants();
}

#[test]
fn merge_records_round_trip_at_their_bit_limits() {
    // Every field at 0, 1 and its largest value, next to every other
    // field at its extremes: no field bleeds into another.
    let buckets = [
        0,
        1,
        (1 << 30) + 7,
        (1 << 31) - 1,
        1 << 31,
        u32::MAX as usize,
    ];
    let sizes = [
        0,
        1,
        5,
        hashtable::MAX_SEGMENT_SIZE - 1,
        hashtable::MAX_SEGMENT_SIZE,
        (1 << 22) - 1,
    ];
    for bucket in buckets {
        for slot in [0, 1, 6, 7] {
            for size in sizes {
                for freq in [0u8, 1, 126, 127] {
                    let r = LiveItem::new(bucket, slot, size, freq);
                    assert_eq!(
                        (r.bucket(), r.slot(), r.size(), r.freq()),
                        (bucket, slot, size, freq)
                    );
                }
            }
        }
    }
}

#[test]
fn an_evaluation_keeps_what_was_read_and_remembers_what_it_evicted() {
    // The reference, read from the table before the evaluation: the
    // keys of the run's two segments read since written stay (with
    // their values), the others go and are remembered as ghosts of the
    // small pool under their own key's hash; nothing else changes.
    let clock = ManualClock::new();
    let mut c = merge_cache(128 << 10, 4 << 10, &clock);
    let value = |k: u32| [k as u8; 80];
    for k in 0..600u32 {
        c.set(format!("k{k}"), value(k), 0, None).unwrap();
    }
    clock.advance(Duration::from_secs(1));
    for k in (0..600u32).step_by(7) {
        assert!(c.get(format!("k{k}")).is_some());
    }
    let first = entry(&c, "k0").unwrap().0.seg;
    let run = [first, c.segs.headers[first as usize].next];
    let before: Vec<(u32, Location, u8)> = (0..600u32)
        .map(|k| {
            let (at, freq) = entry(&c, &format!("k{k}")).unwrap();
            (k, at, freq)
        })
        .collect();
    let in_run = before.iter().filter(|(_, at, _)| run.contains(&at.seg));
    let (read, unread): (Vec<&(u32, Location, u8)>, Vec<_>) =
        in_run.partition(|(_, _, f)| *f >= PROMOTE_FREQ);
    assert!(
        read.len() >= 10 && unread.len() >= 60,
        "{} / {}",
        read.len(),
        unread.len()
    );
    // As a merge step would, fit the ghosts to the items held first.
    c.admission.ghosts.fit(c.stats().items as usize);
    let evictions = c.stats().evictions;
    assert!(c.evaluate_small(1, false));
    assert_eq!(c.stats().evictions - evictions, unread.len() as u64);
    for &(k, at, _) in &before {
        let key = format!("k{k}");
        let kept = !run.contains(&at.seg) || read.iter().any(|r| r.0 == k);
        match c.get(&key) {
            Some(item) => {
                assert!(kept, "{key} should have gone");
                assert_eq!(item.value(), &value(k)[..], "{key}");
            }
            None => assert!(!kept, "{key} should have stayed"),
        }
    }
    let remembered = unread
        .iter()
        .filter(|(k, _, _)| {
            let hash = c.table.hash(format!("k{k}").as_bytes());
            c.admission.ghosts.take(hash) == Some(false)
        })
        .count();
    assert_eq!(remembered, unread.len(), "every evicted key is a ghost");
    c.check_invariants();
}

#[test]
fn merges_while_the_table_drains_move_the_right_entries() {
    // A merge records table positions; while the table grows, those
    // of entries not yet drained name the old table (its flag bit).
    // Keys written from a table of 8 buckets until it drains a table
    // of over a thousand homes; then, with most of it still to drain,
    // a compaction and an evaluation run: every key reads back its
    // value (or is gone as it should be), the counters add up.
    let clock = ManualClock::new();
    let mut c = small_cache(1 << 20, 1 << 10, 3, Eviction::default(), &clock);
    let value = |k: u32| (k * 7).to_le_bytes().repeat(1 + k as usize % 5);
    let mut keys = 0u32;
    while !(c.table.is_growing() && c.table.slots() >= 7 * 2048) {
        c.set(format!("key{keys}"), value(keys), 0, None).unwrap();
        keys += 1;
        assert!(keys < 100_000, "the table grew");
    }
    // Thin the oldest segments out (compaction); read a few of their
    // keys (an evaluation keeps those, evicts the others).
    let deleted = |k: u32| k < 300 && k % 3 == 0;
    let read = |k: u32| k < 300 && k % 3 == 1;
    for k in (0..keys).filter(|&k| deleted(k)) {
        assert!(c.delete(format!("key{k}")));
    }
    clock.advance(Duration::from_secs(1));
    for k in (0..keys).filter(|&k| read(k)) {
        assert!(c.get(format!("key{k}")).is_some());
    }
    let (merges, evictions) = (c.stats().merges, c.stats().evictions);
    assert!(c.table.is_growing(), "still draining");
    assert!(c.compact_any(), "thinned segments compact");
    assert_eq!(c.stats().evictions, evictions);
    assert!(c.table.is_growing());
    assert!(c.evaluate_small(1, true), "an evaluation ran");
    assert!(c.stats().merges >= merges + 2);
    assert!(c.stats().evictions > evictions, "unread items went");
    assert!(c.table.is_growing(), "merged while draining");
    c.check_invariants();
    let mut evicted = 0;
    for k in 0..keys {
        match c.get(format!("key{k}")) {
            Some(item) => {
                assert!(!deleted(k), "key{k} deleted");
                assert_eq!(item.value(), &value(k)[..], "key{k}");
            }
            None => {
                assert!(!read(k), "read key{k} kept");
                evicted += !deleted(k) as u64;
            }
        }
    }
    assert_eq!(evicted, c.stats().evictions - evictions);
    c.check_invariants();
}

#[test]
fn compaction_in_windows_gives_what_one_pass_gives() {
    // Two caches take the same writes, deletes and compactions of main
    // segments: one with the scratch it was built with (256 items,
    // about five of these segments), so runs of up to twelve are
    // compacted a window at a time; one with a scratch for whole runs.
    // Every key ends at the same place with the same count, every
    // segment with the same header.
    let clock = ManualClock::new();
    let build = || merge_cache(128 << 10, 4 << 10, &clock);
    let (mut windows, mut whole) = (build(), build());
    assert_eq!(windows.merge_scratch.capacity(), 256);
    whole.merge_scratch = Vec::with_capacity(12 * 4096 / 64);
    let mut keys = 0u32;
    let mut compactions = 0;
    for round in 0..8u32 {
        while windows.stats().segments_used < 26 {
            for c in [&mut windows, &mut whole] {
                c.set(format!("k{keys:05}"), [keys as u8; 80], 0, None)
                    .unwrap();
            }
            keys += 1;
        }
        clock.advance(Duration::from_secs(1));
        for c in [&mut windows, &mut whole] {
            all_main(c);
            for k in 0..keys {
                let key = format!("k{k:05}");
                let mix = (k as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (32 + round);
                match mix % 8 {
                    0 => {
                        c.delete(&key);
                    }
                    1 => {
                        c.get(&key);
                    }
                    _ => {}
                }
            }
        }
        loop {
            let (a, b) = (windows.compact_any(), whole.compact_any());
            assert_eq!(a, b, "round {round}");
            if !a {
                break;
            }
            compactions += 1;
        }
        let (a, b) = (windows.stats(), whole.stats());
        assert_eq!(
            (
                a.merges,
                a.items,
                a.live_bytes,
                a.evictions,
                a.segments_used
            ),
            (
                b.merges,
                b.items,
                b.live_bytes,
                b.evictions,
                b.segments_used
            ),
            "round {round}"
        );
        for k in 0..keys {
            let key = format!("k{k:05}");
            assert_eq!(entry(&windows, &key), entry(&whole, &key), "{key}");
        }
        for id in 0..windows.segs.count() {
            let (x, y) = (&windows.segs.headers[id], &whole.segs.headers[id]);
            assert_eq!(
                (x.state, x.write_offset, x.live_items, x.live_bytes, x.next),
                (y.state, y.write_offset, y.live_items, y.live_bytes, y.next),
                "segment {id}, round {round}"
            );
            if x.state != SegState::Free {
                let n = x.write_offset as usize;
                assert!(
                    windows.segs.data(id as u32)[..n] == whole.segs.data(id as u32)[..n],
                    "segment {id} bytes, round {round}"
                );
            }
        }
        windows.check_invariants();
        whole.check_invariants();
    }
    assert!(compactions > 10, "compactions: {compactions}");
}

#[test]
fn packing_keeps_every_item_it_must_even_when_sizes_do_not_split() {
    // Three items of 0.6 segment each do not pack into two segments,
    // although their bytes would: the plan must see that and keep all.
    let item = |bucket: usize, size: usize, freq: u8| LiveItem::new(bucket, 1, size, freq);
    let live = [item(0, 600, 0), item(1, 600, 0), item(2, 600, 0)];
    assert!(!pack(&live, 3, 0, 0, 2, 1000, |_, _, _| {}));
    let mut placed = vec![];
    assert!(pack(&live, 3, 0, 0, 3, 1000, |it, forced, to| {
        assert!(forced);
        placed.push((it.bucket(), to))
    }));
    assert_eq!(
        placed,
        [(0, Some((0, 0))), (1, Some((1, 0))), (2, Some((2, 0)))]
    );
    // Not forced: the cutoff decides, borderline items fill what is left.
    let live = [
        item(0, 300, 5),
        item(0, 300, 0),
        item(1, 300, 4),
        item(1, 300, 3),
    ];
    let mut kept = vec![];
    assert!(pack(&live, 0, 4, 300, 1, 1000, |it, forced, to| {
        assert!(!forced);
        if to.is_some() {
            kept.push(it.freq())
        }
    }));
    assert_eq!(kept, [5, 4, 3], "count-0 item goes, count-3 fills the room");
}

/// The sum of `live_items` over the longest run of consecutive sealed
/// main segments of one TTL bucket, capped at [`COMPACT_MAX_MAIN`]
/// segments: what one compaction could read with no scratch bound.
fn longest_main_run_items(c: &Segcache) -> usize {
    let mut best = 0;
    for bucket in 0..BUCKETS {
        let mut start = c.ttl.buckets[bucket].head;
        while start != NONE {
            let (mut at, mut n, mut items) = (start, 0, 0);
            while n < COMPACT_MAX_MAIN && c.sealed(at) && c.admission.is_main(at) {
                items += c.segs.headers[at as usize].live_items as usize;
                n += 1;
                at = c.segs.headers[at as usize].next;
            }
            best = best.max(items);
            start = c.segs.headers[start as usize].next;
        }
    }
    best
}

#[test]
fn merge_scratch_is_fixed_at_build_and_counted() {
    // 128 segments of 4 KiB: 1/512 of the heap is 128 items, under
    // the floor of 256 (4 segments of 64-byte items), while 12 main
    // segments of ~40-byte items hold up to 1200.
    let clock = ManualClock::new();
    let mut c = merge_cache(512 << 10, 4 << 10, &clock);
    let cap = scratch_items(128, 4 << 10);
    assert_eq!(cap, 256);
    // Full-heap sizes (BENCHMARKS §4a): 256 segments of 256 KiB, 1/512
    // of the heap (0.2 B per ~100-byte item); 4096 of them, 12 segments
    // of 64-byte items; 64 segments of 1 MiB (a default heap up to
    // 64 MiB), the floor; 3 segments, 1/16 of the heap.
    assert_eq!(scratch_items(256, 256 << 10), 16_384);
    assert_eq!(scratch_items(4096, 256 << 10), 12 * 4096);
    assert_eq!(scratch_items(64, 1 << 20), 4 * (1 << 20) / 64);
    assert_eq!(scratch_items(3, 4 << 10), 3 * 4096 / 16 / 8);
    assert_eq!(c.merge_scratch.capacity(), cap);
    let built = c.stats();
    assert!(built.admission_bytes as usize >= cap * std::mem::size_of::<LiveItem>());
    let ghosts_at_build = c.admission.ghosts.bytes();
    // Keys read once, then rewritten at random: promoted items go to
    // main, rewrites leave their old copies dead there, thin main
    // segments get compacted and merged.
    let mut rng = 7u64;
    let mut bound_mattered = false;
    for op in 0..200_000u32 {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let key = format!("key-{:05}", rng % 20_000);
        if op % 3 == 0 {
            c.get(key.as_bytes());
        } else {
            c.set(key.as_bytes(), [op as u8; 24], 0, None).unwrap();
        }
        if op % 1000 == 0 {
            // What the cache accounts for stays what it was built with,
            // but for the ghosts' growth; the scratch never grows.
            assert_eq!(c.merge_scratch.capacity(), cap, "op {op}");
            let s = c.stats();
            let ghost_growth =
                c.admission.ghosts.bytes() - ghosts_at_build.min(c.admission.ghosts.bytes());
            assert!(
                s.total_bytes <= built.total_bytes + ghost_growth as u64,
                "op {op}: {} > {} + {ghost_growth}",
                s.total_bytes,
                built.total_bytes
            );
            bound_mattered |= longest_main_run_items(&c) > cap;
        }
    }
    let s = c.stats();
    assert!(s.merges > 100, "merges ran: {}", s.merges);
    assert!(
        bound_mattered,
        "a run of main segments held more items than the scratch"
    );
    assert_eq!(c.merge_scratch.capacity(), cap);
    c.check_invariants();
}

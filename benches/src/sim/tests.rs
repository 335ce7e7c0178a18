use super::*;
use crate::trace::{read_cloudphysics, Record};
use crate::twitter::{Action, Workload};
use std::time::Duration;

const MIB: u64 = 1 << 20;

fn misses(mk: impl Fn(u64) -> Box<dyn SimCache>, mib: u64, trace: &[Record]) -> u64 {
    let mut c = mk(mib * MIB);
    replay_trace(c.as_mut(), trace, 0, 0).misses
}

/// A replay whose cache ends holding `end(build budget)` bytes; its
/// `misses` field records the build budget, to tell runs apart.
fn fake_replay<'a>(
    end: impl Fn(usize) -> usize + 'a,
    builds: &'a mut Vec<usize>,
) -> impl FnMut(usize) -> Result<ReplayStats, String> + 'a {
    move |build| {
        builds.push(build);
        Ok(ReplayStats {
            cache: "fake".into(),
            requests: 1,
            reads: 1,
            misses: build as u64,
            end_bytes: end(build),
            wall: Duration::ZERO,
        })
    }
}

#[test]
fn a_cache_within_the_budget_is_replayed_once() {
    let mut builds = Vec::new();
    let s = within_budget(1000, true, fake_replay(|b| b * 995 / 1000, &mut builds)).unwrap();
    assert_eq!((builds, s.end_bytes), (vec![1000], 995));
    let mut builds = Vec::new();
    let s = within_budget(1000, false, fake_replay(|b| b * 8 / 10, &mut builds)).unwrap();
    assert_eq!((builds, s.end_bytes), (vec![1000], 800), "not grown");
    let mut builds = Vec::new();
    let s = within_budget(1000, true, fake_replay(|_| 0, &mut builds)).unwrap();
    assert_eq!((builds, s.end_bytes), (vec![1000], 0), "no allocator");
}

#[test]
fn a_cache_over_the_budget_is_rebuilt_smaller_until_it_fits() {
    // Linear: one rebuild for budget / 1.25 lands on the budget.
    let mut builds = Vec::new();
    let s = within_budget(1000, false, fake_replay(|b| b * 5 / 4, &mut builds)).unwrap();
    assert_eq!(builds, vec![1000, 800]);
    assert_eq!(s.end_bytes, 1000);
    // A table that doubles past a build of 900: the first rebuild
    // undershoots (869), bisection climbs back towards the step, and
    // the largest build that ended within the budget is reported.
    let step = |b: usize| b + if b > 900 { 300 } else { 100 };
    let mut builds = Vec::new();
    let s = within_budget(1000, false, fake_replay(step, &mut builds)).unwrap();
    assert_eq!(builds, vec![1000, 769, 884, 942, 913]);
    assert_eq!((s.misses, s.end_bytes), (884, 984));
    assert!(s.end_bytes <= (1000.0 * OVER_BUDGET) as usize);
}

#[test]
fn a_peer_left_short_is_rebuilt_larger_but_never_over() {
    // Linear: a cache at 0.5x is built for twice the budget.
    let mut builds = Vec::new();
    let s = within_budget(1000, true, fake_replay(|b| b / 2, &mut builds)).unwrap();
    assert_eq!((builds, s.end_bytes), (vec![1000, 2000], 1000));
    // A table that doubles past a build of 1100: growing overshoots,
    // bisection comes back under the limit.
    let step = |b: usize| b * 8 / 10 + if b > 1100 { 400 } else { 0 };
    let mut builds = Vec::new();
    let s = within_budget(1000, true, fake_replay(step, &mut builds)).unwrap();
    assert_eq!(builds, vec![1000, 1250, 1125, 1062, 1093]);
    assert_eq!((s.misses, s.end_bytes), (1093, 874));
}

#[test]
fn a_cache_that_never_fits_reports_its_last_run() {
    let mut builds = Vec::new();
    let s = within_budget(1000, true, fake_replay(|_| 2000, &mut builds)).unwrap();
    assert_eq!(builds.len(), MEASURE_RUNS);
    assert_eq!(s.misses as usize, *builds.last().unwrap());
    let mut calls = 0;
    let err = within_budget(1000, true, |_| {
        calls += 1;
        Err::<ReplayStats, _>("build failed".to_string())
    });
    assert_eq!((err.unwrap_err().as_str(), calls), ("build failed", 1));
}

#[test]
fn object_lru_reproduces_reference_miss_counts() {
    let t = read_cloudphysics().expect("cloudPhysics trace");
    let got: Vec<u64> = [128, 256, 512, 1024]
        .iter()
        .map(|&m| misses(|b| Box::new(ObjLru::new(b)), m, &t))
        .collect();
    assert_eq!(got, vec![93374, 89783, 81722, 71704]);
}

#[test]
fn object_fifo_reproduces_reference_miss_counts() {
    let t = read_cloudphysics().expect("cloudPhysics trace");
    let got: Vec<u64> = [128, 256, 512, 1024]
        .iter()
        .map(|&m| misses(|b| Box::new(ObjFifo::new(b)), m, &t))
        .collect();
    assert_eq!(got, vec![93403, 89386, 84025, 72140]);
}

#[test]
fn reference_policies_evict_in_order() {
    let mut lru = ObjLru::new(30);
    let mut fifo = ObjFifo::new(30);
    for c in [&mut lru as &mut dyn SimCache, &mut fifo] {
        c.set(b"a", 10, None, 0);
        c.set(b"b", 10, None, 0);
        c.set(b"c", 10, None, 0);
        assert!(c.get(b"a", 0)); // LRU: a becomes most recent
        c.set(b"d", 10, None, 0); // evicts b (LRU) / a (FIFO)
        c.set(b"huge", 31, None, 0); // larger than the cache: ignored
        assert!(!c.get(b"huge", 0));
        assert!(c.get(b"c", 0) && c.get(b"d", 0));
    }
    assert!(lru.get(b"a", 0) && !lru.get(b"b", 0));
    assert!(!fifo.get(b"a", 0) && fifo.get(b"b", 0));
    assert_eq!(lru.used(), 30);
    assert_eq!(lru.len(), 3);
}

#[test]
fn an_uncounted_prefix_is_replayed_but_not_counted() {
    let rec = |id: u64| Record {
        time: 0,
        obj_id: id,
        obj_size: 10,
        next_access_vtime: -1,
    };
    // a b | a c a: the prefix inserts a and b; then a hits, c misses,
    // a hits again.
    let t = [rec(1), rec(2), rec(1), rec(3), rec(1)];
    let mut lru = ObjLru::new(100);
    let s = replay_trace(&mut lru, &t, 2, 0);
    assert_eq!((s.requests, s.reads, s.misses), (5, 3, 1));
    let mut cold = ObjLru::new(100);
    let s = replay_trace(&mut cold, &t[2..], 0, 0);
    assert_eq!(
        (s.reads, s.misses),
        (3, 2),
        "without the prefix a misses first"
    );
}

#[test]
fn a_stream_counts_only_the_reads_after_its_uncounted_requests() {
    let c = crate::twitter::load_cluster(52).unwrap();
    let cfg = crate::twitter::WorkloadConfig {
        requests: 20_000,
        ..Default::default()
    };
    let w = Workload::new(c, cfg).unwrap();
    let first_reads = w
        .clone()
        .take(8_000)
        .filter(|r| r.op.action() == Action::Read)
        .count() as u64;
    let mut all = ObjLru::new(1 << 20);
    let whole = replay_workload(&mut all, w.clone(), 0, 0);
    let mut later = ObjLru::new(1 << 20);
    let tail = replay_workload(&mut later, w, 8_000, 0);
    assert_eq!(tail.requests, whole.requests, "every request is replayed");
    assert_eq!(tail.reads, whole.reads - first_reads);
    assert!(first_reads > 0 && tail.misses > 0);
    // The same cache state at every step: the misses counted are the
    // whole replay's less those among the first requests, and those
    // include the cold misses of the start.
    assert!(tail.misses < whole.misses);
    assert_eq!(all.used(), later.used(), "the same replay either way");
}

fn peers(capacity: u64) -> Vec<Box<dyn SimCache>> {
    let s = Sizing {
        per_item: 0,
        capacity,
    };
    vec![
        Box::new(MokaSim::new(s)),
        Box::new(QuickSim::new(s, 100)),
        Box::new(LruSim::new(s)),
    ]
}

#[test]
fn peers_follow_simulated_ttl_and_delete() {
    for mut c in peers(1 << 20) {
        c.set(b"short", 10, Some(5), 100);
        c.set(b"forever", 10, None, 100);
        assert!(c.get(b"short", 104), "{}", c.name());
        assert!(!c.get(b"short", 105), "{} expired at 105", c.name());
        assert!(c.get(b"forever", 1_000_000), "{}", c.name());
        c.delete(b"forever");
        assert!(!c.get(b"forever", 1_000_000), "{}", c.name());
    }
}

#[test]
fn segcache_adapter_follows_simulated_ttl_and_budget() {
    let budget = 16 << 20;
    let typ = Typical {
        key_len: 16,
        value_len: 100,
    };
    let seg = segment_size_for(budget, SEGMENT_SIZE, typ, None);
    let mut c = SegcacheSim::for_budget(budget, seg, typ).unwrap();
    let total = c.reported_bytes();
    assert!(
        total <= budget && total > budget - (1 << 20) - (64 << 10),
        "{total} vs {budget}"
    );
    c.set(b"short", 10, Some(5), 100);
    c.set(b"forever", 10, None, 100);
    assert!(c.get(b"short", 104));
    assert!(!c.get(b"short", 105));
    assert!(c.get(b"forever", 1_000_000));
    c.delete(b"forever");
    assert!(!c.get(b"forever", 1_000_000));
}

#[test]
fn peers_stay_within_weight_budget() {
    // 100 items of 1000+8 bytes into a 50_400-byte cache: at most 50 fit.
    for mut c in peers(50_400) {
        for i in 0u64..100 {
            c.set(&i.to_le_bytes(), 1000, None, 0);
        }
        c.settle();
        let held = (0u64..100).filter(|i| c.get(&i.to_le_bytes(), 0)).count();
        assert!((20..=50).contains(&held), "{} holds {held}", c.name());
    }
}

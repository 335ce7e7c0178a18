//! Property tests: long random sequences of every operation, on a manual
//! clock, checked step by step against a plain model (a `HashMap` with
//! deadlines).
//!
//! What must hold: a read returns the latest value written for the key or
//! a miss; a miss is allowed only through eviction (lossy runs) or early
//! expiry (within the documented bound); nothing is ever returned after its
//! deadline or after it was reported missing; CAS succeeds on the current
//! version and never on a stale one. Internal invariants (counters, lists,
//! table) are checked at the end of every case.
//!
//! The model and its checks are `crate::model`'s; this file generates
//! the operations.

use crate::model::{Harness, Op, TtlChoice};
use crate::ttl;
use proptest::prelude::*;

fn ttl_choice() -> impl Strategy<Value = TtlChoice> {
    prop_oneof![
        2 => Just(TtlChoice::Never),
        1 => Just(TtlChoice::Zero),
        3 => (1u32..40).prop_map(TtlChoice::Secs),
        2 => (40u32..5000).prop_map(TtlChoice::Secs),
        1 => (5000u32..=ttl::MAX_TTL).prop_map(TtlChoice::Secs),
    ]
}

fn value() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        3 => prop::collection::vec(any::<u8>(), 0..120),
        1 => (0u64..1000).prop_map(|n| n.to_string().into_bytes()),
        1 => Just(u64::MAX.to_string().into_bytes()),
    ]
}

fn op(keys: u16) -> impl Strategy<Value = Op> {
    let k = 0..keys;
    prop_oneof![
        8 => k.clone().prop_map(Op::Get),
        6 => (k.clone(), value(), prop_oneof![Just(0u32), any::<u32>()], ttl_choice())
            .prop_map(|(k, v, f, t)| Op::Set(k, v, f, t)),
        2 => (k.clone(), value(), ttl_choice()).prop_map(|(k, v, t)| Op::Add(k, v, t)),
        2 => (k.clone(), value(), ttl_choice()).prop_map(|(k, v, t)| Op::Replace(k, v, t)),
        2 => (k.clone(), value()).prop_map(|(k, v)| Op::CasCurrent(k, v)),
        2 => (k.clone(), value()).prop_map(|(k, v)| Op::CasStale(k, v)),
        1 => (k.clone(), value()).prop_map(|(k, v)| Op::Append(k, v)),
        1 => (k.clone(), value()).prop_map(|(k, v)| Op::Prepend(k, v)),
        2 => (k.clone(), prop_oneof![0u64..10, Just(u64::MAX)]).prop_map(|(k, d)| Op::Incr(k, d)),
        1 => (k.clone(), prop_oneof![0u64..10, Just(u64::MAX)]).prop_map(|(k, d)| Op::Decr(k, d)),
        1 => (k.clone(), ttl_choice()).prop_map(|(k, t)| Op::Touch(k, t)),
        2 => k.clone().prop_map(Op::Delete),
        1 => k.prop_map(Op::Ttl),
        2 => prop_oneof![0u32..3, 3u32..60, Just(3000)].prop_map(Op::Advance),
        1 => Just(Op::Expire),
        1 => Just(Op::Flush).prop_filter("rare", |_| true),
    ]
}

/// Writes, overwrites (other sizes, flags and TTLs than before), deletes
/// and time passing: the operations whose fast paths account with
/// arithmetic only.
fn churn_op(keys: u16) -> impl Strategy<Value = Op> {
    let k = 0..keys;
    prop_oneof![
        6 => (k.clone(), value(), prop_oneof![Just(0u32), any::<u32>()], ttl_choice())
            .prop_map(|(k, v, f, t)| Op::Set(k, v, f, t)),
        3 => k.clone().prop_map(Op::Delete),
        1 => k.prop_map(Op::Get),
        2 => prop_oneof![0u32..3, 3u32..60, Just(3000)].prop_map(Op::Advance),
        1 => Just(Op::Expire),
    ]
}

/// Values of two sizes, so that many overwrites keep their item's size.
fn two_sizes() -> impl Strategy<Value = Vec<u8>> + Clone {
    prop_oneof![Just(8usize), Just(64)].prop_flat_map(|n| prop::collection::vec(any::<u8>(), n))
}

/// Writes of two sizes, mostly without a TTL, between reads, appends,
/// counters, touches, deletes and time passing: for a harness that takes
/// no CAS tokens, most overwrites are made in place.
fn in_place_op(keys: u16) -> impl Strategy<Value = Op> {
    let k = 0..keys;
    let sized = two_sizes();
    let flags = prop_oneof![3 => Just(0u32), 1 => any::<u32>()];
    let ttl = prop_oneof![4 => Just(TtlChoice::Never), 1 => ttl_choice()];
    prop_oneof![
        8 => (k.clone(), sized, flags, ttl).prop_map(|(k, v, f, t)| Op::Set(k, v, f, t)),
        6 => k.clone().prop_map(Op::Get),
        1 => (k.clone(), value()).prop_map(|(k, v)| Op::Append(k, v)),
        1 => (k.clone(), prop_oneof![0u64..10, Just(u64::MAX)]).prop_map(|(k, d)| Op::Incr(k, d)),
        1 => (k.clone(), ttl_choice()).prop_map(|(k, t)| Op::Touch(k, t)),
        2 => k.clone().prop_map(Op::Delete),
        1 => prop_oneof![0u32..3, 3u32..60, Just(3000)].prop_map(Op::Advance),
        1 => Just(Op::Expire),
    ]
}

/// [`in_place_op`] with CAS operations (for a harness that takes some
/// keys' tokens).
fn in_place_op_with_cas(keys: u16) -> impl Strategy<Value = Op> {
    let k = 0..keys;
    let sized = two_sizes();
    prop_oneof![
        8 => in_place_op(keys),
        1 => (k.clone(), sized.clone()).prop_map(|(k, v)| Op::CasCurrent(k, v)),
        1 => (k, sized).prop_map(|(k, v)| Op::CasStale(k, v)),
    ]
}

/// Writes of a few TTLs (two buckets, some deadlines within a bucket's
/// precision of each other, most not), reads that keep items through
/// merges, and time passing in steps of up to a few precisions: merges
/// then join segments of far-apart deadlines into deadline windows, which
/// the expiry walk reaps one by one.
fn window_op(keys: u16) -> impl Strategy<Value = Op> {
    let k = 0..keys;
    let ttl = prop_oneof![Just(600u32), Just(620), Just(3600)].prop_map(TtlChoice::Secs);
    prop_oneof![
        6 => (k.clone(), value(), ttl.clone()).prop_map(|(k, v, t)| Op::Set(k, v, 0, t)),
        6 => k.clone().prop_map(Op::Get),
        1 => k.clone().prop_map(Op::Delete),
        1 => k.clone().prop_map(Op::Ttl),
        1 => (k, ttl).prop_map(|(k, t)| Op::Touch(k, t)),
        2 => (20u32..200).prop_map(Op::Advance),
        1 => Just(Op::Expire),
    ]
}

proptest! {
    // 48 cases by default; PROPTEST_CASES overrides (the valgrind run uses few).
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|n| n.parse().ok()).unwrap_or(48),
        ..ProptestConfig::default()
    })]

    /// A heap big enough that nothing is evicted: the cache must agree with
    /// the model exactly, but for early expiry within its bound.
    #[test]
    fn matches_model_without_eviction(ops in prop::collection::vec(op(48), 1..800)) {
        let mut h = Harness::new(false);
        for op in ops {
            h.step(op);
        }
        h.finish(48);
        prop_assert_eq!(h.cache.stats().evictions, 0);
    }

    /// The table starts at 8 buckets and grows (incrementally, drained a
    /// few buckets per operation) while 600 keys arrive: the cache must
    /// still agree with the model exactly, and nothing is evicted.
    #[test]
    fn matches_model_while_the_table_grows(ops in prop::collection::vec(op(600), 1..1500)) {
        let mut h = Harness::with_table(false, 3);
        let start = h.cache.stats().hash_table_bytes;
        for op in ops {
            h.step(op);
        }
        h.finish(600);
        prop_assert_eq!(h.cache.stats().evictions, 0);
        prop_assert!(h.cache.len() < 90 || h.cache.stats().hash_table_bytes > start);
    }

    /// Growth and eviction together: a small heap, a table that starts at
    /// 8 buckets, many keys.
    #[test]
    fn never_wrong_while_growing_under_eviction(ops in prop::collection::vec(op(3000), 1..3000)) {
        let mut h = Harness::with_table(true, 3);
        for op in ops {
            h.step(op);
        }
        h.finish(3000);
    }

    /// Overwrites and deletes of a few keys, the counters recounted after
    /// every step (the write path takes an overwritten item's size from
    /// the header its key compare read, and a delete likewise).
    #[test]
    fn counters_match_a_recount_after_every_write_and_delete(
        ops in prop::collection::vec(churn_op(24), 1..300)
    ) {
        let mut h = Harness::new(false);
        h.churn(ops);
        h.finish(24);
    }

    /// The same under eviction, with a table that starts small and grows.
    #[test]
    fn counters_match_a_recount_under_eviction_and_growth(
        ops in prop::collection::vec(churn_op(400), 1..600)
    ) {
        let mut h = Harness::with_table(true, 3);
        h.churn(ops);
        h.finish(400);
    }

    /// Merges across deadline windows under eviction: items expire with
    /// their own window, never late and never earlier than the bound.
    #[test]
    fn never_wrong_when_merges_join_deadlines(ops in prop::collection::vec(window_op(500), 1..4000)) {
        let mut h = Harness::new(true);
        for op in ops {
            h.step(op);
        }
        h.finish(500);
    }

    /// A harness that takes no CAS tokens: same-size overwrites without a
    /// TTL are made in place, and must agree with the model as appended
    /// ones do (and no token may be made behind the harness's back).
    #[test]
    fn overwrites_in_place_match_the_model(ops in prop::collection::vec(in_place_op(32), 1..1500)) {
        let mut h = Harness::new(false).without_tokens();
        for op in ops {
            h.step(op);
        }
        h.finish(32);
        prop_assert_eq!(h.cache.stats().evictions, 0);
    }

    /// A harness that takes the tokens of some keys only (with CAS
    /// operations on them): segments where one of those keys' tokens is
    /// out append their overwrites, the others write theirs in place, and
    /// a token must go stale at its item's next version either way.
    #[test]
    fn overwrites_in_place_beside_segments_with_tokens_out(
        ops in prop::collection::vec(in_place_op_with_cas(200), 1..3000)
    ) {
        let mut h = Harness::with_table(true, 3).with_some_tokens();
        for op in ops {
            h.step(op);
        }
        h.finish(200);
    }

    /// The same in a small heap that evicts, with a table that grows.
    #[test]
    fn overwrites_in_place_under_eviction_and_growth(
        ops in prop::collection::vec(in_place_op(600), 1..3000)
    ) {
        let mut h = Harness::with_table(true, 3).without_tokens();
        for op in ops {
            h.step(op);
        }
        h.finish(600);
    }

    /// A small heap under many keys: eviction may lose items, never corrupt
    /// or resurrect them.
    #[test]
    fn never_wrong_under_eviction(ops in prop::collection::vec(op(3000), 1..3000)) {
        let mut h = Harness::new(true);
        for op in ops {
            h.step(op);
        }
        h.finish(3000);
    }
}

/// The fuzz target's entry point (`crate::model::fuzz`, `fuzz/`) on
/// seeded random bytes, so that the stable test suite runs it too: every
/// shape, inputs up to 3 KiB.
#[test]
fn the_fuzz_entry_point_agrees_with_the_model_on_random_inputs() {
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for case in 0..256u64 {
        let len = (next() % 3072) as usize;
        let mut data: Vec<u8> = (0..len).map(|_| next() as u8).collect();
        if let Some(shape) = data.first_mut() {
            *shape = case as u8;
        }
        crate::model::fuzz(&data);
    }
}

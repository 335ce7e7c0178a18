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

use crate::{ttl, Error, Eviction, ManualClock, Segcache};
use proptest::prelude::*;
use std::collections::HashMap;
use std::time::Duration;

#[derive(Clone, Debug)]
enum Op {
    Get(u16),
    Set(u16, Vec<u8>, u32, TtlChoice),
    Add(u16, Vec<u8>, TtlChoice),
    Replace(u16, Vec<u8>, TtlChoice),
    CasCurrent(u16, Vec<u8>),
    CasStale(u16, Vec<u8>),
    Append(u16, Vec<u8>),
    Prepend(u16, Vec<u8>),
    Incr(u16, u64),
    Decr(u16, u64),
    Touch(u16, TtlChoice),
    Delete(u16),
    Ttl(u16),
    Advance(u32),
    Expire,
    Flush,
}

#[derive(Clone, Copy, Debug)]
enum TtlChoice {
    Never,
    Zero,
    Secs(u32),
}

impl TtlChoice {
    fn duration(self) -> Option<Duration> {
        match self {
            TtlChoice::Never => None,
            TtlChoice::Zero => Some(Duration::ZERO),
            TtlChoice::Secs(s) => Some(Duration::from_secs(s as u64)),
        }
    }
    fn secs(self) -> u32 {
        match self {
            TtlChoice::Secs(s) => s,
            _ => 0,
        }
    }
}

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

#[derive(Clone, Debug)]
struct Entry {
    value: Vec<u8>,
    flags: u32,
    /// Absolute deadline in clock seconds; None: never.
    deadline: Option<u32>,
    ttl: u32,
    /// Tokens seen for earlier versions of this key.
    stale_tokens: Vec<u64>,
}

struct Harness {
    cache: Segcache,
    clock: ManualClock,
    model: HashMap<Vec<u8>, Entry>,
    /// Stale tokens of keys that are currently absent in the model.
    graveyard: HashMap<Vec<u8>, Vec<u64>>,
    lossy: bool,
}

/// memcached's reading of a counter (`safe_strtoull` on the value):
/// optional white space and sign, digits, then white space or the end; a
/// `-` is accepted only if the wrapped result is not negative as `i64`.
fn parse_u64(v: &[u8]) -> Option<u64> {
    let space = |c: char| " \t\n\r\x0b\x0c".contains(c);
    let text = String::from_utf8_lossy(v);
    let text = text.trim_start_matches(space);
    let (negative, body) = match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    let end = body
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(body.len());
    if !body[end..].chars().next().is_none_or(space) {
        return None;
    }
    let n: u64 = body[..end].parse().ok()?;
    if negative {
        let wrapped = n.wrapping_neg();
        return ((wrapped as i64) >= 0).then_some(wrapped);
    }
    Some(n)
}

impl Harness {
    fn new(lossy: bool) -> Self {
        Self::with_table(lossy, if lossy { 10 } else { 16 })
    }

    /// A harness whose hash table starts at `2^hash_power` buckets (a
    /// small start makes it grow mid-run).
    fn with_table(lossy: bool, hash_power: u8) -> Self {
        let clock = ManualClock::new();
        let heap = if lossy { 64 << 10 } else { 4 << 20 };
        let cache = Segcache::builder()
            .heap_size(heap)
            .segment_size(4 << 10)
            .hash_power(hash_power)
            .eviction(Eviction::Merge)
            .clock(clock.clone())
            .build()
            .unwrap();
        Harness {
            cache,
            clock,
            model: HashMap::new(),
            graveyard: HashMap::new(),
            lossy,
        }
    }

    fn now(&self) -> u32 {
        self.clock.now()
    }

    /// How early an item of this TTL may expire, in whole clock seconds:
    /// strictly less than `max(1, ttl / 16)` (the documented bound).
    fn early_bound(ttl: u32) -> u32 {
        (ttl / 16).max(1) - 1
    }

    fn forget(&mut self, key: &[u8]) {
        if let Some(e) = self.model.remove(key) {
            self.graveyard
                .entry(key.to_vec())
                .or_default()
                .extend(e.stale_tokens);
        }
    }

    /// Drops model entries whose deadline has passed: they are certainly gone.
    fn expire_model(&mut self) {
        let now = self.now();
        let dead: Vec<_> = self
            .model
            .iter()
            .filter(|(_, e)| e.deadline.is_some_and(|d| d <= now))
            .map(|(k, _)| k.clone())
            .collect();
        for k in dead {
            self.forget(&k);
        }
    }

    /// Observes the key without side effects and reconciles the model:
    /// returns the cache's current (value, flags, cas) if present.
    fn observe(&mut self, key: &[u8]) -> Option<(Vec<u8>, u32, u64)> {
        self.expire_model();
        let now = self.now();
        let seen = self
            .cache
            .peek(key)
            .map(|i| (i.value().to_vec(), i.flags(), i.cas(), i.ttl()));
        match (seen, self.model.get(key)) {
            (Some((v, f, cas, ttl)), Some(e)) => {
                assert_eq!(v, e.value, "value of {key:?}");
                assert_eq!(f, e.flags, "flags of {key:?}");
                match (ttl.duration(), e.deadline) {
                    (None, None) => {}
                    (Some(left), Some(d)) => {
                        assert!(left.as_secs() as u32 <= d - now, "ttl may only be early");
                    }
                    other => panic!("ttl mismatch for {key:?}: {other:?}"),
                }
                assert!(!e.stale_tokens.contains(&cas), "a stale token came back");
                Some((v, f, cas))
            }
            (Some((v, ..)), None) => panic!("{key:?} present with {v:?}, model says absent"),
            (None, Some(e)) => {
                let early = e
                    .deadline
                    .is_some_and(|d| d - now <= Self::early_bound(e.ttl));
                assert!(self.lossy || early, "{key:?} lost: {e:?} at {now}");
                self.forget(key);
                None
            }
            (None, None) => None,
        }
    }

    fn record_write(
        &mut self,
        key: &[u8],
        value: Vec<u8>,
        flags: u32,
        ttl: u32,
        old_cas: Option<u64>,
    ) {
        let now = self.now();
        let mut stale = self
            .model
            .remove(key)
            .map(|e| e.stale_tokens)
            .or_else(|| self.graveyard.remove(key))
            .unwrap_or_default();
        stale.extend(old_cas);
        let deadline = (ttl != 0).then(|| now + ttl);
        self.model.insert(
            key.to_vec(),
            Entry {
                value,
                flags,
                deadline,
                ttl,
                stale_tokens: stale,
            },
        );
    }

    fn step(&mut self, op: Op) {
        let key = |k: u16| format!("key:{k}").into_bytes();
        let front = matches!(op, Op::Prepend(..));
        let incr = matches!(op, Op::Incr(..));
        match op {
            Op::Get(k) => {
                let key = key(k);
                let before = self.observe(&key);
                // Odd keys take the lean read, which must agree with `get`.
                if k % 2 == 1 {
                    let got = self
                        .cache
                        .get_value_with(&key, |v, flags| (v.to_vec(), flags));
                    assert_eq!(got, before.map(|b| (b.0, b.1)));
                } else {
                    let got = self.cache.get(&key).map(|i| i.value().to_vec());
                    assert_eq!(got, before.map(|b| b.0));
                }
            }
            Op::Set(k, v, f, t) => {
                let key = key(k);
                let old = self.observe(&key);
                self.cache.set(&key, &v, f, t.duration()).unwrap();
                self.record_write(&key, v, f, t.secs(), old.map(|o| o.2));
            }
            Op::Add(k, v, t) => {
                let key = key(k);
                match self.observe(&key) {
                    Some(_) => assert_eq!(
                        self.cache.add(&key, &v, 0, t.duration()),
                        Err(Error::NotStored)
                    ),
                    None => {
                        self.cache.add(&key, &v, 0, t.duration()).unwrap();
                        self.record_write(&key, v, 0, t.secs(), None);
                    }
                }
            }
            Op::Replace(k, v, t) => {
                let key = key(k);
                match self.observe(&key) {
                    None => assert_eq!(
                        self.cache.replace(&key, &v, 0, t.duration()),
                        Err(Error::NotStored)
                    ),
                    Some(old) => {
                        self.cache.replace(&key, &v, 0, t.duration()).unwrap();
                        self.record_write(&key, v, 0, t.secs(), Some(old.2));
                    }
                }
            }
            Op::CasCurrent(k, v) => {
                let key = key(k);
                match self.observe(&key) {
                    None => assert_eq!(
                        self.cache.cas(&key, &v, 1, None, 12345),
                        Err(Error::NotFound)
                    ),
                    Some(old) => {
                        self.cache.cas(&key, &v, 1, None, old.2).unwrap();
                        self.record_write(&key, v, 1, 0, Some(old.2));
                    }
                }
            }
            Op::CasStale(k, v) => {
                let key = key(k);
                let current = self.observe(&key);
                let stale = self
                    .model
                    .get(&key)
                    .and_then(|e| e.stale_tokens.last().copied());
                if let (Some(cur), Some(token)) = (current, stale) {
                    assert_ne!(cur.2, token);
                    assert_eq!(self.cache.cas(&key, &v, 0, None, token), Err(Error::Exists));
                }
            }
            Op::Append(k, v) | Op::Prepend(k, v) => {
                let key = key(k);
                let call = |c: &mut Segcache| {
                    if front {
                        c.prepend(&key, &v)
                    } else {
                        c.append(&key, &v)
                    }
                };
                match self.observe(&key) {
                    None => assert_eq!(call(&mut self.cache), Err(Error::NotStored)),
                    Some((old, flags, cas)) if old.len() + v.len() < 1500 => {
                        call(&mut self.cache).unwrap();
                        let new = if front {
                            [&v[..], &old].concat()
                        } else {
                            [&old[..], &v].concat()
                        };
                        let e = &self.model[&key];
                        let (deadline, ttl) = (e.deadline, e.ttl);
                        self.record_write(&key, new, flags, 0, Some(cas));
                        // The TTL carries over (it may only shrink).
                        let e = self.model.get_mut(&key).unwrap();
                        e.deadline = deadline;
                        e.ttl = ttl;
                    }
                    Some(_) => {}
                }
            }
            Op::Incr(k, d) | Op::Decr(k, d) => {
                let key = key(k);
                let before = self.observe(&key);
                let got = if incr {
                    self.cache.incr(&key, d)
                } else {
                    self.cache.decr(&key, d)
                };
                match before {
                    None => assert_eq!(got, Err(Error::NotFound)),
                    Some((old, flags, cas)) => match parse_u64(&old) {
                        None => assert_eq!(got, Err(Error::NotNumeric)),
                        Some(n) => {
                            let want = if incr {
                                n.wrapping_add(d)
                            } else {
                                n.saturating_sub(d)
                            };
                            assert_eq!(got, Ok(want));
                            let e = &self.model[&key];
                            let (deadline, ttl) = (e.deadline, e.ttl);
                            self.record_write(
                                &key,
                                want.to_string().into_bytes(),
                                flags,
                                0,
                                Some(cas),
                            );
                            let e = self.model.get_mut(&key).unwrap();
                            e.deadline = deadline;
                            e.ttl = ttl;
                        }
                    },
                }
            }
            Op::Touch(k, t) => {
                let key = key(k);
                match self.observe(&key) {
                    None => assert_eq!(self.cache.touch(&key, t.duration()), Err(Error::NotFound)),
                    Some((v, f, cas)) => {
                        self.cache.touch(&key, t.duration()).unwrap();
                        self.record_write(&key, v, f, t.secs(), None);
                        if let Some(item) = self.cache.peek(&key) {
                            assert_eq!(item.cas(), cas, "a touch keeps the CAS token");
                        }
                    }
                }
            }
            Op::Delete(k) => {
                let key = key(k);
                let present = self.observe(&key).is_some();
                assert_eq!(self.cache.delete(&key), present);
                self.forget(&key);
            }
            Op::Ttl(k) => {
                let key = key(k);
                let present = self.observe(&key).is_some();
                assert_eq!(self.cache.ttl(&key).is_some(), present);
            }
            Op::Advance(s) => self.clock.advance(Duration::from_secs(s as u64)),
            Op::Expire => {
                self.cache.expire();
                self.expire_model();
            }
            Op::Flush => {
                self.cache.flush();
                let keys: Vec<_> = self.model.keys().cloned().collect();
                for k in keys {
                    self.forget(&k);
                }
            }
        }
    }

    /// Runs `ops`, recounting the cache's items and bytes (per segment and
    /// in total, from the items the table points at) after every one. A
    /// delete is not preceded by a read here, so it also meets items whose
    /// deadline has passed while they are still linked: it must report
    /// them absent (and unlink them).
    fn churn(&mut self, ops: Vec<Op>) {
        for op in ops {
            match op {
                Op::Delete(k) => {
                    let key = format!("key:{k}").into_bytes();
                    let now = self.now();
                    let live = self
                        .model
                        .get(&key)
                        .is_some_and(|e| e.deadline.is_none_or(|d| d > now));
                    let deleted = self.cache.delete(&key);
                    assert!(live || !deleted, "deleted an absent or expired key");
                    // Without eviction, only early expiry may lose a live key.
                    if live && !deleted && !self.lossy {
                        let e = &self.model[&key];
                        let d = e.deadline.expect("a key without a TTL was lost");
                        assert!(d - now <= Self::early_bound(e.ttl), "lost too early");
                    }
                    self.forget(&key);
                }
                op => self.step(op),
            }
            self.cache.check_invariants();
        }
    }

    /// Every key agrees with the model, and the internals are consistent.
    fn finish(&mut self, keys: u16) {
        for k in 0..keys {
            self.observe(format!("key:{k}").as_bytes());
        }
        self.cache.check_invariants();
    }
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

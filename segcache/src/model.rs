//! The model the core is checked against: a plain `HashMap` with
//! deadlines beside a [`Segcache`] on a manual clock, every operation
//! applied to both and the cache's answers checked step by step.
//!
//! What must hold: a read returns the latest value written for the key or
//! a miss; a miss is allowed only through eviction (lossy runs) or early
//! expiry (within the documented bound); nothing is ever returned after its
//! deadline or after it was reported missing; CAS succeeds on the current
//! version and never on a stale one. Internal invariants (counters, lists,
//! table) are checked at the end of every run.
//!
//! Compiled for the crate's tests (`model_tests.rs` drives it with
//! proptest) and for the fuzzer (`cfg(fuzzing)`, `fuzz/`: [`fuzz`] reads
//! the operations from the fuzzer's bytes); never in a normal build.

use crate::{ttl, Error, Eviction, ManualClock, Segcache};
use std::collections::HashMap;
use std::time::Duration;

/// One operation, applied to the cache and the model alike (keys are
/// `key:<n>`).
#[derive(Clone, Debug)]
pub enum Op {
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

/// A store's or touch's TTL.
#[derive(Clone, Copy, Debug)]
pub enum TtlChoice {
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

pub(crate) struct Harness {
    pub(crate) cache: Segcache,
    clock: ManualClock,
    model: HashMap<Vec<u8>, Entry>,
    /// Stale tokens of keys that are currently absent in the model.
    graveyard: HashMap<Vec<u8>, Vec<u64>>,
    lossy: bool,
    /// Which keys the harness takes CAS tokens of (observes them, runs the
    /// CAS operations on). A segment none of whose items' tokens was
    /// handed out gets its same-size overwrites without a TTL made in
    /// place (`Segcache::set`); a run with few or no tokens checks that
    /// path against the model (with some: beside segments that append,
    /// whose tokens must go stale), and a run without any checks that no
    /// token was made behind the harness's back.
    tokens: Tokens,
}

/// Which keys a [`Harness`] takes CAS tokens of.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Tokens {
    All,
    /// Keys whose number ends in 0, 4 or 8.
    Some,
    None,
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
    #[cfg(test)]
    pub(crate) fn new(lossy: bool) -> Self {
        Self::with_table(lossy, if lossy { 10 } else { 16 })
    }

    /// A harness whose hash table starts at `2^hash_power` buckets (a
    /// small start makes it grow mid-run).
    pub(crate) fn with_table(lossy: bool, hash_power: u8) -> Self {
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
            tokens: Tokens::All,
        }
    }

    /// The same harness taking no CAS tokens: no CAS operations, no token
    /// observed (see the field).
    pub(crate) fn without_tokens(mut self) -> Self {
        self.tokens = Tokens::None;
        self
    }

    /// The same harness taking the tokens of three keys in ten only (see
    /// [`Tokens::Some`]).
    pub(crate) fn with_some_tokens(mut self) -> Self {
        self.tokens = Tokens::Some;
        self
    }

    /// Whether the harness takes `key`'s CAS tokens.
    fn takes_token(&self, key: &[u8]) -> bool {
        match self.tokens {
            Tokens::All => true,
            Tokens::Some => matches!(key.last(), Some(b'0' | b'4' | b'8')),
            Tokens::None => false,
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
        let tokens = self.takes_token(key);
        let seen = self.cache.peek(key).map(|i| {
            let cas = if tokens { i.cas() } else { 0 };
            (i.value().to_vec(), i.flags(), cas, i.ttl())
        });
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
                assert!(
                    !tokens || !e.stale_tokens.contains(&cas),
                    "a stale token came back"
                );
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

    pub(crate) fn step(&mut self, op: Op) {
        let key = |k: u16| format!("key:{k}").into_bytes();
        if let Op::CasCurrent(k, _) | Op::CasStale(k, _) = &op {
            if !self.takes_token(&key(*k)) {
                return self.step(Op::Get(*k));
            }
        }
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
                        let takes = self.takes_token(&key);
                        if let Some(item) = self.cache.peek(&key).filter(|_| takes) {
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
    pub(crate) fn churn(&mut self, ops: Vec<Op>) {
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
    pub(crate) fn finish(&mut self, keys: u16) {
        for k in 0..keys {
            self.observe(format!("key:{k}").as_bytes());
        }
        self.cache.check_invariants();
        assert!(
            self.tokens != Tokens::None || !self.cache.segs.any_tokens_out(),
            "a token was made though none was asked for: overwrites in place were off"
        );
    }
}

/// The fuzzer's bytes, read front to back; `None` once they run out.
struct Input<'a>(&'a [u8]);

impl Input<'_> {
    fn u8(&mut self) -> Option<u8> {
        let (&b, rest) = self.0.split_first()?;
        self.0 = rest;
        Some(b)
    }

    fn u16(&mut self) -> Option<u16> {
        Some(u16::from_le_bytes([self.u8()?, self.u8()?]))
    }

    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes([
            self.u8()?,
            self.u8()?,
            self.u8()?,
            self.u8()?,
        ]))
    }

    fn bytes(&mut self, n: usize) -> Option<Vec<u8>> {
        let n = n.min(self.0.len());
        let (taken, rest) = self.0.split_at(n);
        self.0 = rest;
        Some(taken.to_vec())
    }

    fn value(&mut self) -> Option<Vec<u8>> {
        Some(match self.u8()? {
            v @ 0..200 => self.bytes(v as usize % 121)?,
            200..250 => self.u16()?.to_string().into_bytes(),
            _ => u64::MAX.to_string().into_bytes(),
        })
    }

    fn ttl(&mut self) -> Option<TtlChoice> {
        Some(match self.u8()? % 9 {
            0 | 1 => TtlChoice::Never,
            2 => TtlChoice::Zero,
            3..=5 => TtlChoice::Secs(1 + self.u8()? as u32 % 39),
            6 | 7 => TtlChoice::Secs(40 + self.u16()? as u32 % 4960),
            _ => TtlChoice::Secs(5000 + self.u32()? % (ttl::MAX_TTL - 5000 + 1)),
        })
    }

    fn delta(&mut self) -> Option<u64> {
        Some(match self.u8()? {
            d @ 0..250 => d as u64 % 10,
            _ => u64::MAX,
        })
    }

    fn op(&mut self, keys: u16) -> Option<Op> {
        let tag = self.u8()? % 16;
        let k = self.u16()? % keys;
        Some(match tag {
            0 => Op::Get(k),
            1 => {
                let (v, f) = (self.value()?, self.u8()?);
                let flags = if f < 128 { 0 } else { self.u32()? };
                Op::Set(k, v, flags, self.ttl()?)
            }
            2 => Op::Add(k, self.value()?, self.ttl()?),
            3 => Op::Replace(k, self.value()?, self.ttl()?),
            4 => Op::CasCurrent(k, self.value()?),
            5 => Op::CasStale(k, self.value()?),
            6 => Op::Append(k, self.value()?),
            7 => Op::Prepend(k, self.value()?),
            8 => Op::Incr(k, self.delta()?),
            9 => Op::Decr(k, self.delta()?),
            10 => Op::Touch(k, self.ttl()?),
            11 => Op::Delete(k),
            12 => Op::Ttl(k),
            13 => Op::Advance(match self.u8()? {
                s @ 0..200 => s as u32 % 3,
                s @ 200..250 => 3 + s as u32 % 57,
                _ => 3000,
            }),
            14 => Op::Expire,
            _ => Op::Flush,
        })
    }
}

/// Runs the operations `data` encodes against the cache and the model and
/// panics on the first disagreement (the fuzz target `fuzz/fuzz_targets/
/// model.rs`). The first byte picks the shape: whether the heap is small
/// enough to evict (64 KiB of 4 KiB segments, else 4 MiB), whether the
/// table starts at 8 buckets and grows, the number of keys, whether
/// the counters are recounted after every operation, and whose CAS tokens
/// the harness takes (every key's, none, or some keys' only).
#[doc(hidden)]
pub fn fuzz(data: &[u8]) {
    let mut input = Input(data);
    let Some(shape) = input.u8() else { return };
    let (lossy, hash_power, keys) = match shape % 4 {
        0 => (false, 16, 48),
        1 => (false, 3, 600),
        2 => (true, 3, 3000),
        _ => (true, 10, 400),
    };
    let recount = shape & 4 != 0;
    let mut h = Harness::with_table(lossy, hash_power);
    match shape & 24 {
        8 => h = h.without_tokens(),
        16 => h = h.with_some_tokens(),
        _ => {}
    }
    for _ in 0..5000 {
        let Some(op) = input.op(keys) else { break };
        if recount {
            h.churn(vec![op]);
        } else {
            h.step(op);
        }
    }
    h.finish(keys);
}

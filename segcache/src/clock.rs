//! The cache's sense of time: whole seconds since the cache was built.
//!
//! Owns the coarse clock every expiry decision reads and the [`ManualClock`]
//! that tests and simulators inject to move time without sleeping.
//! It must never go backwards: the system clock is monotonic, and a manual
//! clock only moves when its owner moves it.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;
#[cfg(not(target_os = "linux"))]
use std::time::Instant;

/// A clock the caller moves by hand, shared by cloning.
///
/// Give one to [`Builder::clock`](crate::Builder::clock) and the cache reads
/// its time from it instead of the system clock, so expiry can be tested
/// without sleeping:
///
/// ```
/// use std::time::Duration;
/// use segcache::{ManualClock, Segcache};
///
/// let clock = ManualClock::new();
/// let mut cache = Segcache::builder().clock(clock.clone()).build().unwrap();
/// cache.set(b"k", b"v", 0, Some(Duration::from_secs(10))).unwrap();
/// clock.advance(Duration::from_secs(10));
/// assert!(cache.get(b"k").is_none());
/// ```
#[derive(Clone, Debug, Default)]
pub struct ManualClock(Arc<AtomicU32>);

impl ManualClock {
    /// A clock reading zero seconds.
    pub fn new() -> Self {
        Self::default()
    }

    /// Moves the clock forward by whole seconds (fractions are dropped).
    pub fn advance(&self, by: Duration) {
        let secs = u32::try_from(by.as_secs()).unwrap_or(u32::MAX);
        let _ = self
            .0
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |now| {
                Some(now.saturating_add(secs))
            });
    }

    /// Sets the clock to `secs`; a value earlier than now is ignored, so the
    /// clock never runs backwards.
    pub fn set(&self, secs: u32) {
        self.0.fetch_max(secs, Ordering::Relaxed);
    }

    /// The current reading in seconds.
    pub fn now(&self) -> u32 {
        self.0.load(Ordering::Relaxed)
    }
}

/// The clock a cache reads: the system's monotonic clock or a manual one.
#[derive(Clone, Debug)]
pub(crate) enum Clock {
    /// Cache time is `base` plus the whole seconds elapsed since the
    /// monotonic reading `start`, so the first tick comes a full second
    /// after the clock is made. `offset` is `base - start.secs` (modulo
    /// 2^64), so a reading costs an add, the nanoseconds' borrow and a
    /// clamp.
    System { start: Mono, offset: u64 },
    /// Cache time and "wall" time are both the manual reading.
    Manual(ManualClock),
}

/// A monotonic clock reading, kept as the system gives it (seconds and
/// nanoseconds) so whole seconds between two readings cost a subtraction
/// and a compare, not a division.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Mono {
    secs: u64,
    nanos: u32,
}

impl Mono {
    /// Whole seconds from `earlier` to `self` (0 if `earlier` is later).
    #[cfg(test)]
    fn secs_since(self, earlier: Mono) -> u64 {
        // A borrow when the nanoseconds have not yet caught up.
        let borrow = (self.nanos < earlier.nanos) as u64;
        self.secs.saturating_sub(earlier.secs + borrow)
    }

    /// `base` plus the whole seconds from `start` to `self`, for a clock
    /// whose `offset` is `base - start.secs` (modulo 2^64), clamped to the
    /// `u32` range. `self` is never earlier than `start` (the clock is
    /// monotonic), so the modular sum is the exact one.
    #[inline(always)]
    fn cache_secs(self, start: Mono, offset: u64) -> u32 {
        let borrow = (self.nanos < start.nanos) as u64;
        let secs = self.secs.wrapping_add(offset).wrapping_sub(borrow);
        secs.min(u32::MAX as u64) as u32
    }
}

/// The `offset` of a system clock reading `base` at `start`.
fn offset_for(start: Mono, base: u32) -> u64 {
    (base as u64).wrapping_sub(start.secs)
}

/// A reading of a monotonic clock. On Linux this is the coarse clock
/// (`CLOCK_MONOTONIC_COARSE`, read in the vDSO without a system call or a
/// TSC read): every operation that needs the time reads it, and expiry
/// works in whole seconds. Its resolution is the kernel tick
/// (`clock_getres` gives 1-4 ms; 4 ms on the benchmark host): the
/// reading trails the precise monotonic clock by less than that, which is
/// far inside the one-second granularity of TTLs, and the same clock
/// stamps an item's store and judges its expiry.
#[cfg(target_os = "linux")]
#[inline(always)]
fn monotonic() -> Mono {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_MONOTONIC_COARSE
    // exists on every Linux since 2.6.32, and the call only writes `ts`.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC_COARSE, &mut ts) };
    debug_assert_eq!(rc, 0);
    debug_assert!(ts.tv_sec >= 0 && (0..1_000_000_000).contains(&ts.tv_nsec));
    Mono {
        secs: ts.tv_sec as u64,
        nanos: ts.tv_nsec as u32,
    }
}

#[cfg(not(target_os = "linux"))]
#[inline]
fn monotonic() -> Mono {
    use std::sync::OnceLock;
    static EPOCH: OnceLock<std::time::Instant> = OnceLock::new();
    let d = EPOCH.get_or_init(std::time::Instant::now).elapsed();
    Mono {
        secs: d.as_secs(),
        nanos: d.subsec_nanos(),
    }
}

fn unix_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

impl Clock {
    pub(crate) fn system() -> Self {
        let start = monotonic();
        Clock::System {
            start,
            offset: offset_for(start, 0),
        }
    }

    /// Seconds since the clock was created (system) or the manual reading.
    #[inline]
    pub(crate) fn now(&self) -> u32 {
        match self {
            Clock::System { start, offset } => monotonic().cache_secs(*start, *offset),
            Clock::Manual(clock) => clock.now(),
        }
    }

    /// Wall-clock seconds, to carry cache time across a restart: Unix time
    /// for the system clock, the reading itself for a manual one.
    pub(crate) fn wall(&self) -> u64 {
        match self {
            Clock::System { .. } => unix_secs(),
            Clock::Manual(clock) => clock.now() as u64,
        }
    }

    /// Continues a clock saved at cache time `saved_now` and wall time
    /// `saved_wall`: the time the cache was down counts, so items that
    /// expired meanwhile are expired on restore.
    pub(crate) fn resume(self, saved_now: u32, saved_wall: u64) -> Clock {
        let down = self.wall().saturating_sub(saved_wall);
        match self {
            Clock::System { .. } => {
                let start = monotonic();
                let base = saved_now.saturating_add(u32::try_from(down).unwrap_or(u32::MAX));
                Clock::System {
                    start,
                    offset: offset_for(start, base),
                }
            }
            Clock::Manual(clock) => {
                clock.set(saved_now);
                Clock::Manual(clock)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_moves_only_forward() {
        let clock = ManualClock::new();
        assert_eq!(clock.now(), 0);
        clock.advance(Duration::from_millis(2500));
        assert_eq!(clock.now(), 2);
        clock.set(10);
        assert_eq!(clock.now(), 10);
        clock.set(3);
        assert_eq!(clock.now(), 10, "set to an earlier time is ignored");
        let shared = clock.clone();
        shared.advance(Duration::from_secs(1));
        assert_eq!(clock.now(), 11, "clones share one reading");
        clock.set(u32::MAX - 1);
        clock.advance(Duration::from_secs(100));
        assert_eq!(clock.now(), u32::MAX, "saturates instead of wrapping");
    }

    #[test]
    fn whole_seconds_between_readings_borrow_from_the_nanoseconds() {
        let at = |secs, nanos| Mono { secs, nanos };
        assert_eq!(at(10, 0).secs_since(at(10, 0)), 0);
        assert_eq!(at(10, 999_999_999).secs_since(at(10, 0)), 0);
        assert_eq!(at(11, 0).secs_since(at(10, 1)), 0, "0.999999999 s");
        assert_eq!(at(11, 1).secs_since(at(10, 1)), 1);
        assert_eq!(at(12, 0).secs_since(at(10, 500)), 1);
        assert_eq!(at(12, 500).secs_since(at(10, 500)), 2);
        assert_eq!(at(9, 0).secs_since(at(10, 0)), 0, "never negative");
        assert_eq!(at(10, 0).secs_since(at(10, 5)), 0, "never negative");
        // The same answer as dividing nanoseconds.
        let mut rng = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..10_000 {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            let (a, b) = (rng % 5_000_000_000_000, (rng >> 20) % 5_000_000_000_000);
            let (lo, hi) = (a.min(b), a.max(b));
            let mono = |ns: u64| at(ns / 1_000_000_000, (ns % 1_000_000_000) as u32);
            assert_eq!(mono(hi).secs_since(mono(lo)), (hi - lo) / 1_000_000_000);
        }
    }

    #[test]
    fn cache_seconds_from_the_offset_match_the_elapsed_seconds() {
        let at = |secs, nanos| Mono { secs, nanos };
        let mut rng = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..10_000 {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            let start = at(rng % 10_000_000, (rng >> 24) as u32 % 1_000_000_000);
            let later = at(
                start.secs + (rng >> 40) % 5_000_000,
                (rng >> 8) as u32 % 1_000_000_000,
            );
            let base = match rng % 3 {
                0 => 0,
                1 => (rng >> 16) as u32,
                _ => u32::MAX - (rng % 7) as u32,
            };
            let elapsed = later.secs_since(start);
            let want = base.saturating_add(u32::try_from(elapsed).unwrap_or(u32::MAX));
            assert_eq!(later.cache_secs(start, offset_for(start, base)), want);
        }
        // A start later in the second than the reading: no tick yet.
        let start = at(100, 900_000_000);
        assert_eq!(
            at(101, 899_999_999).cache_secs(start, offset_for(start, 7)),
            7
        );
        assert_eq!(
            at(101, 900_000_000).cache_secs(start, offset_for(start, 7)),
            8
        );
    }

    /// The coarse clock's resolution, as the kernel reports it.
    #[cfg(target_os = "linux")]
    fn coarse_resolution() -> Duration {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `ts` is a valid, writable timespec; the call only writes it.
        let rc = unsafe { libc::clock_getres(libc::CLOCK_MONOTONIC_COARSE, &mut ts) };
        assert_eq!(rc, 0);
        Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
    }

    #[cfg(not(target_os = "linux"))]
    fn coarse_resolution() -> Duration {
        Duration::ZERO
    }

    #[test]
    #[cfg_attr(miri, ignore = "Miri cannot call clock_getres")]
    fn coarse_clock_resolution_is_far_below_a_second() {
        let res = coarse_resolution();
        assert!(res < Duration::from_millis(100), "{res:?}");
    }

    /// With the system clock: an item with a TTL is served only while
    /// less than the TTL has passed since it was stored (measured on the
    /// precise clock, plus the coarse clock's resolution, by which its
    /// reading may trail), and it is gone once the TTL has passed, also
    /// between hits on an item without a deadline (whose access stamps
    /// reuse an older reading).
    #[test]
    #[cfg_attr(miri, ignore = "Miri cannot call clock_getres")]
    fn a_ttl_item_is_never_served_at_or_after_its_deadline_on_the_system_clock() {
        use crate::Segcache;
        use std::time::Instant;
        let ttl = Duration::from_secs(1);
        let deadline_slack = coarse_resolution();
        let mut cache = Segcache::builder().build().unwrap();
        // Hits on a key without a TTL reuse a reading a few hits old for
        // their access stamps; they come before every read of the TTL
        // item, which must still be judged on a fresh reading.
        cache.set("forever", b"v", 0, None).unwrap();
        for round in 0..2u8 {
            let key = [b'k', round];
            cache.set(key, b"v", 0, Some(ttl)).unwrap();
            let stored = Instant::now();
            // Ends at the first miss, or at the first read asked after
            // the deadline, which must miss: a slow or descheduled run
            // (valgrind on a loaded machine) only takes longer.
            loop {
                assert!(cache.get("forever").is_some());
                let asked = Instant::now();
                let served = cache.get(key).is_some();
                if asked >= stored + ttl + deadline_slack {
                    assert!(!served, "served {:?} after the store", asked - stored);
                }
                if !served {
                    break;
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        }
    }

    /// With a manual clock: an item stored at `t` with TTL `ttl` is served
    /// at every second before `t + ttl - max(1, ttl / 16)` and at none
    /// from `t + ttl` on.
    #[test]
    fn a_ttl_item_is_never_served_at_or_after_its_deadline_on_a_manual_clock() {
        use crate::Segcache;
        for ttl in [1u32, 2, 3, 16, 40, 100, 700] {
            let clock = ManualClock::new();
            clock.set(1_000 + ttl * 3);
            let mut cache = Segcache::builder().clock(clock.clone()).build().unwrap();
            let stored = clock.now();
            cache
                .set(b"key", b"value", 0, Some(Duration::from_secs(ttl.into())))
                .unwrap();
            let early = ttl.saturating_sub((ttl / 16).max(1));
            for passed in 0..=ttl + 2 {
                let now = stored + passed;
                clock.set(now);
                let served = cache.get(b"key").is_some();
                if passed >= ttl {
                    assert!(!served, "ttl {ttl}: served {passed} s after the store");
                    break;
                }
                if passed < early {
                    assert!(served, "ttl {ttl}: gone {passed} s after the store");
                }
            }
        }
    }

    #[test]
    fn resumed_clock_counts_the_time_down() {
        let start = monotonic();
        let saved = Clock::System {
            start,
            offset: offset_for(start, 500),
        };
        let wall = unix_secs() - 100; // saved 100 s ago
        let resumed = Clock::system().resume(saved.now(), wall);
        let now = resumed.now();
        assert!((600..=602).contains(&now), "{now}");
        let manual = ManualClock::new();
        manual.set(40);
        let resumed = Clock::Manual(manual.clone()).resume(30, 30);
        assert_eq!(resumed.now(), 40, "a manual clock keeps its reading");
        let behind = Clock::Manual(ManualClock::new()).resume(30, 30);
        assert_eq!(behind.now(), 30, "never behind the saved time");
    }

    #[test]
    fn system_clock_starts_at_zero_and_follows_real_time() {
        let made = std::time::Instant::now();
        let clock = Clock::system();
        std::thread::sleep(Duration::from_millis(500));
        let now = clock.now();
        // No tick before a full second of real time (checked only when the
        // thread was not descheduled past that, e.g. under valgrind).
        if made.elapsed() < Duration::from_millis(950) {
            assert_eq!(now, 0, "the first tick is a full second after start");
        }
        let start = std::time::Instant::now();
        let first = clock.now();
        std::thread::sleep(Duration::from_millis(1100));
        let passed = start.elapsed().as_secs() as u32;
        assert!(clock.now() >= first + passed.saturating_sub(1));
    }
}

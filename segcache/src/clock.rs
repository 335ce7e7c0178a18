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
    /// Whole seconds of the monotonic clock at creation.
    System(u64),
    Manual(ManualClock),
}

/// Whole seconds of a monotonic clock. On Linux this is the coarse clock
/// (a few nanoseconds to read, a few milliseconds of resolution): every
/// operation reads it, and expiry works in whole seconds.
#[cfg(target_os = "linux")]
#[inline]
fn monotonic_secs() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_MONOTONIC_COARSE
    // exists on every Linux since 2.6.32, and the call only writes `ts`.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC_COARSE, &mut ts) };
    debug_assert_eq!(rc, 0);
    ts.tv_sec as u64
}

#[cfg(not(target_os = "linux"))]
#[inline]
fn monotonic_secs() -> u64 {
    use std::sync::OnceLock;
    static EPOCH: OnceLock<std::time::Instant> = OnceLock::new();
    EPOCH
        .get_or_init(std::time::Instant::now)
        .elapsed()
        .as_secs()
}

impl Clock {
    pub(crate) fn system() -> Self {
        Clock::System(monotonic_secs())
    }

    /// Seconds since the clock was created (system) or the manual reading.
    #[inline]
    pub(crate) fn now(&self) -> u32 {
        match self {
            Clock::System(start) => {
                u32::try_from(monotonic_secs().saturating_sub(*start)).unwrap_or(u32::MAX)
            }
            Clock::Manual(clock) => clock.now(),
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
    fn system_clock_starts_at_zero_and_follows_real_time() {
        let clock = Clock::system();
        assert!(clock.now() <= 1);
        let start = std::time::Instant::now();
        let first = clock.now();
        std::thread::sleep(Duration::from_millis(1100));
        let passed = start.elapsed().as_secs() as u32;
        assert!(clock.now() >= first + passed.saturating_sub(1));
    }
}

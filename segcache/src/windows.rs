//! Deadline windows: how a segment that merging packed from segments of
//! different ages keeps each item's expiry as precise as the tail's.
//!
//! A segment the tail wrote holds items whose deadlines lie within the
//! bucket's [`spread`](crate::ttl::spread) of each other, and it expires
//! with the earliest. Merging may join segments whose deadlines lie
//! further apart (the main pool's segments settle into deadline windows a
//! spread or more apart, and a run cut at every such gap left their dead
//! bytes unpacked: BENCHMARKS §1g). The merged segment then keeps up to
//! [`MAX_WINDOWS`] *windows*: contiguous ranges of its bytes, in write
//! order, each with its own deadline range within the spread. An item
//! expires with its window, so no item goes earlier than the spread
//! allows, and none is served after its deadline; the segment goes when
//! its last window does (the expiry walk reaps the windows before it one
//! by one).
//!
//! This module owns the window list and the rule that joins deadlines
//! into windows; it never reads item data nor decides what is merged.

use crate::ttl;

/// Most windows one segment keeps. Packing stops taking segments into a
/// run once their items would need more.
pub(crate) const MAX_WINDOWS: usize = 16;

/// A window's deadline once the expiry walk has unlinked its items.
const REAPED: u32 = u32::MAX;

/// Bytes a window takes where a split segment keeps it (its last bytes).
pub(crate) const WINDOW_BYTES: usize = 12;

/// One contiguous range of a segment's items and their deadlines: the
/// items from the end of the window before (or offset 0) up to `end`
/// expire at `at`, and none is due later than `last` (`last - at` is at
/// most the bucket's spread). `at` 0: the items never expire.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Window {
    /// Byte offset just past the window's last item.
    pub end: u32,
    /// Deadline of every item in the window (cache seconds; 0: never).
    pub at: u32,
    /// The latest deadline an item in the window had.
    pub last: u32,
}

impl Window {
    /// True once the expiry walk has unlinked the window's items.
    #[inline]
    pub(crate) fn is_reaped(&self) -> bool {
        self.at == REAPED
    }

    /// Marks the window's items as unlinked by the expiry walk.
    pub(crate) fn reap(&mut self) {
        self.at = REAPED;
        self.last = REAPED;
    }

    /// Writes the window as [`WINDOW_BYTES`] bytes (end, at, last, each
    /// a little-endian u32).
    pub(crate) fn encode(&self, dst: &mut [u8]) {
        for (i, v) in [self.end, self.at, self.last].into_iter().enumerate() {
            dst[4 * i..4 * i + 4].copy_from_slice(&v.to_le_bytes());
        }
    }

    /// Reads a window [`encode`](Self::encode) wrote.
    pub(crate) fn decode(src: &[u8]) -> Self {
        let word = |i: usize| u32::from_le_bytes(src[4 * i..4 * i + 4].try_into().unwrap());
        Window {
            end: word(0),
            at: word(1),
            last: word(2),
        }
    }
}

/// A segment's windows in write order (at most [`MAX_WINDOWS`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Windows {
    list: [Window; MAX_WINDOWS],
    len: u8,
}

impl Windows {
    /// One window of `end` bytes expiring at `at` (the whole of a segment
    /// the tail wrote).
    pub(crate) fn single(end: u32, at: u32, last: u32) -> Self {
        let mut w = Windows::default();
        w.list[0] = Window { end, at, last };
        w.len = 1;
        w
    }

    /// Windows read back from a snapshot of a segment of `written` bytes,
    /// if they are what [`Segments::set_windows`](crate::segments::Segments::set_windows)
    /// keeps: two to [`MAX_WINDOWS`], their ends rising to `written`.
    pub(crate) fn from_saved(list: &[Window], written: u32) -> Option<Self> {
        let ordered = list.windows(2).all(|p| p[0].end < p[1].end);
        if !(2..=MAX_WINDOWS).contains(&list.len()) || !ordered || list.last()?.end != written {
            return None;
        }
        let mut w = Windows::default();
        w.list[..list.len()].copy_from_slice(list);
        w.len = list.len() as u8;
        Some(w)
    }

    /// Appends a window as it was kept (reading a segment's windows back).
    pub(crate) fn push_raw(&mut self, window: Window) {
        self.list[self.len as usize] = window;
        self.len += 1;
    }

    /// The windows, in write order.
    #[inline]
    pub(crate) fn as_slice(&self) -> &[Window] {
        &self.list[..self.len as usize]
    }

    /// The windows, in write order, to reap.
    pub(crate) fn as_mut_slice(&mut self) -> &mut [Window] {
        &mut self.list[..self.len as usize]
    }

    /// The window of the item at byte `offset`.
    #[inline]
    pub(crate) fn window_at(&self, offset: u32) -> Window {
        let list = self.as_slice();
        list.iter()
            .find(|w| offset < w.end)
            .or(list.last())
            .copied()
            .unwrap_or_default()
    }

    /// Earliest and latest deadline of the windows not yet reaped
    /// (0: none).
    pub(crate) fn bounds(&self) -> (u32, u32) {
        let live = self
            .as_slice()
            .iter()
            .filter(|w| !w.is_reaped() && w.at != 0);
        let at = live.clone().map(|w| w.at).min().unwrap_or(0);
        let last = live.map(|w| w.last).max().unwrap_or(0);
        (at, last)
    }

    /// Earliest to latest deadline of the windows not yet reaped.
    pub(crate) fn span(&self) -> u32 {
        let (at, last) = self.bounds();
        last - at
    }

    /// Adds items due from `at` to `last` (0: never) that end at byte
    /// `end`: into the last window if its deadlines and theirs stay
    /// within `bucket`'s spread, else as a new window. False, changing
    /// nothing, if that would take more than [`MAX_WINDOWS`].
    ///
    /// Joining deadlines greedily in write order gives the fewest windows
    /// any split of the sequence can; dropping items from a sequence
    /// never needs more, so the outputs of a merge never need more
    /// windows than its run did.
    #[inline]
    pub(crate) fn push(&mut self, bucket: usize, at: u32, last: u32, end: u32) -> bool {
        if let Some(w) = self.list[..self.len as usize].last_mut() {
            if w.at == 0 || at == 0 {
                // No deadline on one side: never-expiring items are never
                // in a bucket with deadlines (nothing to join), and a
                // segment without items has none yet.
                if w.at == 0 {
                    (w.at, w.last) = (at, last);
                }
                w.end = end;
                return true;
            }
            let (lo, hi) = (w.at.min(at), w.last.max(last));
            if hi - lo <= ttl::spread(bucket) {
                (w.at, w.last, w.end) = (lo, hi, end);
                return true;
            }
        }
        if self.len as usize == MAX_WINDOWS {
            return false;
        }
        self.list[self.len as usize] = Window { end, at, last };
        self.len += 1;
        true
    }

    /// [`push`](Self::push) for a merge's output, whose run was built so
    /// that its items fit the windows: should they not, the last window
    /// takes them anyway, expiring with the earliest (early, never late).
    pub(crate) fn keep(&mut self, bucket: usize, at: u32, last: u32, end: u32) {
        let pushed = self.push(bucket, at, last, end);
        debug_assert!(
            pushed,
            "a merge's items need more windows than its run: {self:?} + {at}..{last} @{end}"
        );
        if !pushed {
            let w = &mut self.list[MAX_WINDOWS - 1];
            (w.at, w.last, w.end) = (w.at.min(at), w.last.max(last), end);
        }
    }

    /// Adds the not yet reaped windows of a segment (`end` unused: a run's
    /// windows only count); false, changing nothing, if they do not fit.
    pub(crate) fn join(&mut self, bucket: usize, other: &Windows) -> bool {
        let mut joined = *self;
        for w in other.as_slice().iter().filter(|w| !w.is_reaped()) {
            if !joined.push(bucket, w.at, w.last, 0) {
                return false;
            }
        }
        *self = joined;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A bucket whose spread is 223 s (TTLs of 3584 s and a little more).
    fn bucket() -> usize {
        let b = ttl::bucket_for(3600);
        assert_eq!(ttl::spread(b), 223);
        b
    }

    #[test]
    fn deadlines_within_the_spread_share_a_window() {
        let b = bucket();
        let mut w = Windows::default();
        assert!(w.push(b, 1000, 1000, 100));
        assert!(w.push(b, 1100, 1223, 200));
        assert_eq!(
            w.as_slice(),
            [Window {
                end: 200,
                at: 1000,
                last: 1223
            }]
        );
        // One second more than the spread opens a second window.
        assert!(w.push(b, 1224, 1224, 300));
        assert_eq!(w.as_slice().len(), 2);
        assert_eq!(
            (w.window_at(0).at, w.window_at(199).at, w.window_at(200).at),
            (1000, 1000, 1224)
        );
        assert_eq!(w.bounds(), (1000, 1224));
    }

    #[test]
    fn no_more_than_max_windows_and_a_refused_push_changes_nothing() {
        let b = bucket();
        let mut w = Windows::default();
        for i in 0..MAX_WINDOWS as u32 {
            assert!(w.push(b, 1000 + 1000 * i, 1000 + 1000 * i, 10 * (i + 1)));
        }
        let before = w;
        assert!(!w.push(b, 100_000, 100_000, 1000));
        assert_eq!(w, before);
        let mut other = Windows::single(10, 50_000, 50_000);
        assert!(!w.join(b, &other));
        assert_eq!(w, before);
        // Reaped windows do not count.
        other.as_mut_slice()[0].reap();
        assert!(w.join(b, &other));
        assert_eq!(w, before);
    }

    #[test]
    fn reaped_windows_leave_the_bounds() {
        let b = bucket();
        let mut w = Windows::default();
        assert!(w.push(b, 1000, 1010, 10));
        assert!(w.push(b, 5000, 5100, 20));
        w.as_mut_slice()[0].reap();
        assert_eq!(w.bounds(), (5000, 5100));
        assert_eq!(w.span(), 100);
        w.as_mut_slice()[1].reap();
        assert_eq!(w.bounds(), (0, 0));
    }

    #[test]
    fn greedy_joining_never_needs_more_windows_for_fewer_items() {
        // Every subsequence of a sequence of deadlines takes at most the
        // windows the sequence takes (what a merge's outputs rely on).
        let b = bucket();
        let seq: Vec<u32> = (0..12).map(|i| 1000 + (i * 157 % 900)).collect();
        let count = |items: &[u32]| {
            let mut w = Windows::default();
            for &d in items {
                if !w.push(b, d, d, 0) {
                    return usize::MAX;
                }
            }
            w.as_slice().len()
        };
        let full = count(&seq);
        assert!((3..=MAX_WINDOWS).contains(&full), "{full} windows");
        for mask in 0u32..(1 << seq.len()) {
            let sub: Vec<u32> = (0..seq.len())
                .filter(|i| mask & (1 << i) != 0)
                .map(|i| seq[i])
                .collect();
            assert!(count(&sub) <= full, "{sub:?} against {full}");
        }
    }
}

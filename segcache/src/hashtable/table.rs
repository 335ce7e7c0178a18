//! One generation of the table's arrays: `homes` home buckets (plus
//! the spare buckets past the last one), their control words and item
//! slots; probing a key's window, inserting (hopscotch moves included),
//! replacing and clearing entries.
//!
//! Must never: grow or drain (that is [`HashTable`],
//! which keeps one `Table`, or two while it grows), or read an item's
//! bytes itself (key compares are the caller's closures).

use super::*;

/// `n` zeroed words, or `None` if the allocator refuses. Large requests are
/// fresh mappings whose pages appear only when first touched.
fn zeroed_words(n: usize) -> Option<Box<[u64]>> {
    assert!(n > 0);
    let layout = Layout::array::<u64>(n).ok()?;
    // SAFETY: `layout` has nonzero size (n > 0) and u64's alignment. A null
    // result is handled; otherwise the zeroed allocation holds `n` valid
    // `u64`s, and `Box<[u64]>` frees it later with this same layout.
    let words = unsafe {
        let ptr = alloc_zeroed(layout) as *mut u64;
        if ptr.is_null() {
            return None;
        }
        Box::from_raw(std::ptr::slice_from_raw_parts_mut(ptr, n))
    };
    let bytes: &[u8] = words_as_bytes(&words);
    crate::memory::advise_huge_pages(bytes);
    Some(words)
}

/// Views words as bytes (for the huge-page advice).
fn words_as_bytes(words: &[u64]) -> &[u8] {
    // SAFETY: u64 has no padding and every byte of it is initialised; u8
    // has alignment 1; the byte view covers exactly the words' memory and
    // borrows it for the same lifetime.
    unsafe { std::slice::from_raw_parts(words.as_ptr() as *const u8, std::mem::size_of_val(words)) }
}

/// One table: `homes` home buckets plus [`MAX_DISPLACEMENT`] spare ones.
pub(super) struct Table {
    /// One control word per bucket (`homes + MAX_DISPLACEMENT`).
    pub(super) ctrl: Box<[u64]>,
    /// `SLOTS` item infos per bucket.
    pub(super) slots: Box<[u64]>,
    pub(super) homes: usize,
}

impl Table {
    pub(super) fn try_new(homes: usize) -> Result<Table, String> {
        assert!(homes > 0);
        let buckets = homes + MAX_DISPLACEMENT;
        let err = || {
            format!(
                "cannot allocate {} bytes for a hash table of {homes} buckets",
                buckets * 8 * (SLOTS + 1)
            )
        };
        let ctrl = zeroed_words(buckets).ok_or_else(err)?;
        let slots = zeroed_words(buckets * SLOTS).ok_or_else(err)?;
        Ok(Table { ctrl, slots, homes })
    }

    pub(super) fn bytes(&self) -> usize {
        std::mem::size_of_val(&*self.ctrl) + std::mem::size_of_val(&*self.slots)
    }

    pub(super) fn buckets(&self) -> usize {
        self.ctrl.len()
    }

    /// The home bucket: the hash's low 32 bits scaled to `homes`.
    #[inline]
    pub(super) fn home(&self, hash: u64) -> usize {
        ((hash as u32 as u64 * self.homes as u64) >> 32) as usize
    }

    /// The control word of bucket `b`.
    ///
    /// # Safety
    /// `b < self.buckets()`: a home (`< homes`) plus at most
    /// [`MAX_DISPLACEMENT`] is always in range.
    #[inline]
    pub(super) unsafe fn ctrl_unchecked(&self, b: usize) -> u64 {
        debug_assert!(b < self.ctrl.len());
        // SAFETY: the caller guarantees `b` is in bounds.
        unsafe { *self.ctrl.get_unchecked(b) }
    }

    /// The item info of slot `s` of bucket `b`.
    ///
    /// # Safety
    /// `b < self.buckets()` and `s < SLOTS`.
    #[inline]
    pub(super) unsafe fn slot_unchecked(&self, b: usize, s: usize) -> u64 {
        debug_assert!(b < self.ctrl.len() && s < SLOTS);
        // SAFETY: `slots` holds `SLOTS` words per bucket, and the caller
        // guarantees both indices are in range.
        unsafe { *self.slots.get_unchecked(b * SLOTS + s) }
    }

    #[inline]
    pub(super) fn reach(&self, home: usize) -> usize {
        ((self.ctrl[home] & REACH_MASK) >> REACH_SHIFT) as usize
    }

    /// Starts loading the line of `home`'s first slots (slots fill from
    /// the first, so a hit is most often there).
    #[inline]
    pub(super) fn prefetch(&self, home: usize) {
        debug_assert!(home < self.homes);
        prefetch(self.slots.as_ptr().wrapping_add(home * SLOTS));
    }

    /// The first slot in `hash`'s window (its home up to the home's reach)
    /// whose tag and check bits match and whose item info satisfies `pred`:
    /// (bucket, slot, item info).
    ///
    /// The home bucket is searched inline (most keys live there); the
    /// displaced buckets, only when the home has a reach, out of line.
    #[inline(always)]
    pub(super) fn find(
        &self,
        hash: u64,
        pred: &mut impl FnMut(u64) -> bool,
    ) -> Option<(usize, usize, u64)> {
        let home = self.home(hash);
        debug_assert!(home < self.homes);
        // Start the slot lines' load while the control word arrives: on a
        // hit the matching slot is most likely in the home bucket.
        self.prefetch(home);
        // SAFETY: `home < homes` (`home` scales a 32-bit value by homes /
        // 2^32), within `ctrl_unchecked`'s bound.
        let head = unsafe { self.ctrl_unchecked(home) };
        let mut pred = |info| pred(info).then_some(());
        if let Some((b, s, info, ())) = self.find_in(home, 0, head, hash, &mut pred) {
            return Some((b, s, info));
        }
        if head & REACH_MASK == 0 {
            return None;
        }
        self.find_displaced(home, head, hash, pred)
            .map(|(b, s, info, ())| (b, s, info))
    }

    /// What one read of `hash`'s home control word says (the first half
    /// of [`find`](Self::find), for a read that rules keys out by tags).
    #[inline(always)]
    pub(super) fn probe_home(&self, hash: u64) -> HomeProbe {
        let home = self.home(hash);
        debug_assert!(home < self.homes);
        // SAFETY: `home < homes` (`home` scales a 32-bit value by homes /
        // 2^32), within `ctrl_unchecked`'s bound.
        let head = unsafe { self.ctrl_unchecked(home) };
        HomeProbe::read(home, head, hash)
    }

    /// The second half of [`find`](Self::find): the home's matching slots
    /// as `probe` found them, then (out of line) the displaced buckets if
    /// the home has a reach. `pred` says yes by answering `Some` (what it
    /// learnt of the entry's item, handed back with the position).
    #[inline(always)]
    pub(super) fn find_probed<T>(
        &self,
        hash: u64,
        probe: HomeProbe,
        mut pred: impl FnMut(u64) -> Option<T>,
    ) -> Option<(usize, usize, u64, T)> {
        debug_assert!(probe.home < self.homes);
        let hits = (probe.seen & TAG_BITS as u64) as u32;
        if let Some(found) = self.find_tagged(probe.home, 0, hits, hash, &mut pred) {
            return Some(found);
        }
        if probe.seen & REACH_MASK == 0 {
            return None;
        }
        // `pred` moves into the out-of-line search, so its captures are
        // laid out in memory only on this path, not on every probe.
        self.find_displaced(probe.home, probe.seen, hash, pred)
    }

    /// [`find`](Self::find) in the buckets past the home, up to its reach.
    #[inline(never)]
    fn find_displaced<T>(
        &self,
        home: usize,
        head: u64,
        hash: u64,
        mut pred: impl FnMut(u64) -> Option<T>,
    ) -> Option<(usize, usize, u64, T)> {
        let reach = ((head & REACH_MASK) >> REACH_SHIFT) as usize;
        (1..=reach).find_map(|d| {
            // SAFETY: `d <= reach <= MAX_DISPLACEMENT`, so `home + d < buckets()`.
            let word = unsafe { self.ctrl_unchecked(home + d) };
            self.find_in(home, d, word, hash, &mut pred)
        })
    }

    /// The slot of bucket `home + d` (control word `word`) holding an entry
    /// of `hash`'s key that satisfies `pred`.
    #[inline(always)]
    fn find_in<T>(
        &self,
        home: usize,
        d: usize,
        word: u64,
        hash: u64,
        pred: &mut impl FnMut(u64) -> Option<T>,
    ) -> Option<(usize, usize, u64, T)> {
        self.find_tagged(home, d, match_byte(word, tag_of(hash)), hash, pred)
    }

    /// [`find_in`](Self::find_in) with the bucket's matching tags already
    /// picked out (`hits`, one bit per slot).
    #[inline(always)]
    fn find_tagged<T>(
        &self,
        home: usize,
        d: usize,
        mut hits: u32,
        hash: u64,
        pred: &mut impl FnMut(u64) -> Option<T>,
    ) -> Option<(usize, usize, u64, T)> {
        // The check bits and the displacement an entry of this key has in
        // this bucket, compared in one masked test.
        let want = entry_id(hash, d);
        let b = home + d;
        debug_assert_eq!(hits & !TAG_BITS, 0);
        while hits != 0 {
            let s = hits.trailing_zeros() as usize;
            hits &= hits - 1;
            // SAFETY: `b < buckets()` (a home plus at most its reach, which
            // is at most MAX_DISPLACEMENT); `s < SLOTS` because
            // `match_byte` only sets bits 0..SLOTS.
            let info = unsafe { self.slot_unchecked(b, s) };
            if info & ID_MASK == want {
                if let Some(learnt) = pred(info) {
                    return Some((b, s, info, learnt));
                }
            }
        }
        None
    }

    /// A free slot in `home`'s window: (bucket, slot, displacement).
    fn free_slot(&self, home: usize) -> Option<(usize, usize, usize)> {
        (0..=MAX_DISPLACEMENT).find_map(|d| {
            let b = home + d;
            let free = match_byte(self.ctrl[b], 0);
            (free != 0).then(|| (b, free.trailing_zeros() as usize, d))
        })
    }

    /// Frees a slot in `home`'s full window (hopscotch): finds the nearest
    /// free slot within [`HOP_SEARCH`] buckets past the window and brings
    /// it back, one move at a time, each moving item staying inside its
    /// own window, until it lies in ours; returns the freed (bucket, slot,
    /// displacement).
    fn make_room(&mut self, home: usize) -> Option<(usize, usize, usize)> {
        let window_end = home + MAX_DISPLACEMENT;
        let last = (window_end + HOP_SEARCH).min(self.buckets() - 1);
        let mut free = (window_end + 1..=last).find(|&b| match_byte(self.ctrl[b], 0) != 0)?;
        while free > window_end {
            let free_slot = match_byte(self.ctrl[free], 0).trailing_zeros() as usize;
            // The earliest item that can move to `free`: its home is at
            // most MAX_DISPLACEMENT before it (the earlier it sits, the
            // further back the hole goes).
            let (b, s, their_home) = (free - MAX_DISPLACEMENT..free)
                .flat_map(|b| (0..SLOTS).map(move |s| (b, s)))
                .filter(|&(b, s)| (self.ctrl[b] >> (8 * s)) & 0xff != 0)
                .map(|(b, s)| (b, s, b - displacement(self.slots[b * SLOTS + s])))
                .find(|&(_, _, h)| free - h <= MAX_DISPLACEMENT)?;
            let tag = (self.ctrl[b] >> (8 * s)) as u8;
            let moved = self.clear_slot(b, s);
            let disp = free - their_home;
            let moved = (moved & !(DISP_MASK << DISP_SHIFT)) | (disp as u64) << DISP_SHIFT;
            self.place(their_home, free, free_slot, tag, moved);
            free = b;
        }
        let s = match_byte(self.ctrl[free], 0).trailing_zeros() as usize;
        debug_assert!(free >= home && s < SLOTS);
        Some((free, s, free - home))
    }

    /// The least-read slot of `home`'s (full) window.
    pub(super) fn least_read(&self, home: usize) -> (usize, usize, usize) {
        let mut victim = (u8::MAX, home, 0, 0);
        for d in 0..=MAX_DISPLACEMENT {
            let b = home + d;
            for s in 0..SLOTS {
                let freq = frequency(self.slots[b * SLOTS + s]);
                if freq < victim.0 {
                    victim = (freq, b, s, d);
                }
            }
        }
        (victim.1, victim.2, victim.3)
    }

    pub(super) fn place(&mut self, home: usize, b: usize, s: usize, tag: u8, info: u64) {
        debug_assert_eq!(match_byte(self.ctrl[b], 0) & (1 << s), 1 << s, "slot free");
        let disp = displacement(info);
        debug_assert_eq!(home + disp, b);
        self.slots[b * SLOTS + s] = info;
        self.ctrl[b] |= (tag as u64) << (8 * s);
        if disp > self.reach(home) {
            self.ctrl[home] = (self.ctrl[home] & !REACH_MASK) | (disp as u64) << REACH_SHIFT;
        }
    }

    /// Inserts an item info for a key known to be absent; `None` if its
    /// window is full.
    pub(super) fn insert_new(&mut self, hash: u64, info: u64) -> Option<()> {
        let home = self.home(hash);
        let (b, s, d) = self.free_slot(home).or_else(|| self.make_room(home))?;
        let info = (info & !(DISP_MASK << DISP_SHIFT)) | (d as u64) << DISP_SHIFT;
        self.place(home, b, s, tag_of(hash), info);
        Some(())
    }

    /// True if bucket `b` holds an item whose home is `b - d`.
    fn holds_displaced(&self, b: usize, d: usize) -> bool {
        let mut used = !match_byte(self.ctrl[b], 0) & TAG_BITS;
        while used != 0 {
            let s = used.trailing_zeros() as usize;
            used &= used - 1;
            if displacement(self.slots[b * SLOTS + s]) == d {
                return true;
            }
        }
        false
    }

    /// Empties a slot and, if it held its home's farthest item, shrinks the
    /// home's reach to the farthest one left.
    #[inline(always)]
    pub(super) fn clear_slot(&mut self, b: usize, s: usize) -> u64 {
        assert!(b < self.buckets() && s < SLOTS);
        debug_assert_ne!(self.ctrl[b] >> (8 * s) & 0xff, 0, "clearing an empty slot");
        // SAFETY: both indices were checked just above.
        let old = unsafe { std::mem::replace(self.slots.get_unchecked_mut(b * SLOTS + s), 0) };
        // SAFETY: as above.
        unsafe { *self.ctrl.get_unchecked_mut(b) &= !(0xff << (8 * s)) };
        if displacement(old) > 0 {
            self.shrink_reach(b, displacement(old));
        }
        old
    }

    /// After clearing a slot of bucket `b` that held an item `disp`
    /// buckets from its home: if that was the home's farthest item,
    /// shrinks the home's reach to the farthest one left.
    #[inline(never)]
    fn shrink_reach(&mut self, b: usize, disp: usize) {
        let home = b - disp;
        if disp == self.reach(home) {
            // Another item of the same home may sit at `disp` too.
            let farthest = (0..=disp)
                .rev()
                .find(|&d| self.holds_displaced(home + d, d))
                .unwrap_or(0);
            self.ctrl[home] = (self.ctrl[home] & !REACH_MASK) | (farthest as u64) << REACH_SHIFT;
        }
    }

    pub(super) fn clear(&mut self) {
        self.ctrl.fill(0);
        self.slots.fill(0);
    }
}

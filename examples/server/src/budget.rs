//! The memory one worker spends on its clients, bounded as a whole.
//!
//! Owns the accounting, not the buffers: the worker tells the [`Budget`]
//! what each connection's buffers hold ([`Budget::sync`]) and asks before
//! it lets memory grow — before a read buffer grows ([`Budget::may_grow`])
//! and before it dispatches a request whose reply or payload is large
//! ([`Budget::reserve`]: a store's value, `per_value` bytes for each key of
//! a get, `per_segment` bytes for each segment a key dump lists). Reservations last until the batch's replies are rendered
//! ([`Budget::settle`]); by then the rendered bytes are in the connections'
//! write buffers and counted there.
//!
//! The bound: every worker keeps `used <= cap` (its share of
//! `--max-buffered`), except for the base each connection always gets
//! ([`BASE`]) and a Vec's growth slack (counted, as capacity). What a
//! worker does when a request does not fit is its policy (wait for the
//! client to read, refuse, shed), not this module's. This module must
//! never touch a socket or a buffer.

use crate::protocol::binary::{op, BinRequest};
use crate::protocol::{Command, Tokens};
use segcache::StoreMode;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// Buffer bytes a connection may always hold, budget or not: a client
/// must be able to send a command and read its reply.
pub const BASE: usize = 64 << 10;

/// The client-connection limits every worker applies.
#[derive(Debug, Clone)]
pub struct Limits {
    /// One worker's share of `--max-buffered`.
    pub worker_buffered: usize,
    /// The largest value a client may store.
    pub max_value: usize,
    /// The largest value stored so far, shared by every worker.
    pub largest: Arc<AtomicUsize>,
    /// `--max-conn-output`.
    pub conn_output: usize,
    /// `--idle-timeout`.
    pub idle_timeout: Option<std::time::Duration>,
    /// Segments a key dump walks, and their size (see
    /// [`Budget::with_walk`]).
    pub walk: (u32, usize),
}

impl Limits {
    /// A worker's empty budget under these limits.
    pub fn budget(&self) -> Budget {
        Budget::new(
            self.worker_buffered,
            self.max_value,
            self.conn_output,
            Arc::clone(&self.largest),
        )
        .with_walk(self.walk.0, self.walk.1)
    }
}

/// Whether a parsed request may be dispatched now (see [`Budget::admit`]).
pub enum Admit<'a> {
    /// Dispatch it; it is answered in full.
    Whole(Command<'a>),
    /// Dispatch this first slice of a get's keys (no `END` yet); the same
    /// request comes back for the rest.
    Part(Command<'a>),
    /// Nothing fits now.
    NoRoom,
}

/// Room for a `VALUE <key> <flags> <bytes> <cas>` line and the `\r\n`s
/// around a value.
pub const VALUE_LINE: usize = 320;

/// One connection's part in the batch in flight.
#[derive(Default, Debug)]
pub struct Share {
    /// Where in the keys of the get being answered the next slice starts
    /// (for a key dump: the segments listed).
    pub keys_done: usize,
    /// Reserved for this connection's replies in flight.
    pub reserved: usize,
    /// The get being answered a slice at a time, as parsed.
    sliced: Option<Sliced>,
}

/// A command answered in slices: where a get's keys lie in the
/// connection's unparsed input, so that its line (up to 1 MiB of keys) is
/// not parsed again for every slice; or a key dump.
#[derive(Debug, Clone, Copy)]
enum Sliced {
    Get {
        used: usize,
        keys_at: usize,
        keys_len: usize,
        cas: bool,
        exptime: Option<i64>,
    },
    Metadump {
        used: usize,
    },
}

impl Share {
    /// The get being answered in slices, rebuilt from `avail` (the
    /// connection's unparsed input, which starts with it) without parsing
    /// it again, with the bytes it uses; `None` when there is none.
    pub fn resume<'a>(&self, avail: &'a [u8]) -> Option<(Command<'a>, usize)> {
        let (keys_at, keys_len, cas, exptime, used) = match self.sliced? {
            Sliced::Get {
                used,
                keys_at,
                keys_len,
                cas,
                exptime,
            } => (keys_at, keys_len, cas, exptime, used),
            // Only a dump of everything is ever sliced.
            Sliced::Metadump { used } => {
                return Some((
                    Command::Metadump {
                        from: 0,
                        to: u32::MAX,
                    },
                    used,
                ))
            }
        };
        let keys = Tokens::new(avail.get(keys_at..keys_at + keys_len)?);
        let req = match exptime {
            None => Command::Get { keys, cas },
            Some(exptime) => Command::Gat { exptime, keys, cas },
        };
        Some((req, used))
    }

    /// Forgets the get being answered in slices (it was refused).
    pub fn reset(&mut self) {
        self.keys_done = 0;
        self.sliced = None;
    }
}

/// What one connection is charged for.
#[derive(Default, Debug)]
pub struct Held(usize);

impl Held {
    /// Bytes charged to this connection.
    pub fn bytes(&self) -> usize {
        self.0
    }
}

/// One worker's buffer budget.
#[derive(Debug)]
pub struct Budget {
    cap: usize,
    /// Buffers' capacity plus reservations.
    used: usize,
    reserved: usize,
    /// The largest value a client may store.
    max_value: usize,
    /// The largest value stored so far (by any worker): what a reply
    /// carrying a value can need.
    largest: Arc<AtomicUsize>,
    /// Most unwritten reply bytes for one connection.
    conn_output: usize,
    /// Segments a key dump walks.
    walk_segments: u32,
    /// What one segment's dump lines are reserved at.
    per_segment: usize,
    /// Bytes released since the allocator was last asked to return memory.
    released: usize,
}

impl Budget {
    /// A budget of `cap` bytes with `conn_output` per connection; values
    /// are at most `max_value` bytes, and `largest` tracks the largest one
    /// stored (start it at `max_value` when the cache may already hold
    /// large items, e.g. restored from a datapool).
    pub fn new(
        cap: usize,
        max_value: usize,
        conn_output: usize,
        largest: Arc<AtomicUsize>,
    ) -> Budget {
        Budget {
            cap,
            used: 0,
            reserved: 0,
            max_value,
            largest,
            conn_output,
            walk_segments: 0,
            per_segment: 0,
            released: 0,
        }
    }

    /// Lets key dumps walk `segments` segments of `segment_size` bytes,
    /// each reserved at twice its size: a line is about 80 bytes and the
    /// key, so twice covers items of 80 bytes or more; a segment of
    /// smaller items lists more than it reserved (up to ~13x for
    /// one-byte keys and empty values). At most a quarter of the budget,
    /// so that a dump always fits one (a small `--max-value` may leave a
    /// budget smaller than a segment).
    pub fn with_walk(mut self, segments: u32, segment_size: usize) -> Budget {
        self.walk_segments = segments;
        self.per_segment = (2 * segment_size).min(self.cap / 4).max(1);
        self
    }

    /// What one reply carrying a value may need: the largest value stored
    /// so far and its `VALUE` line. Small while only small values were
    /// stored, so their gets are not held back by the worst case.
    fn per_value(&self) -> usize {
        self.largest.load(Ordering::Relaxed).min(self.max_value) + VALUE_LINE
    }

    /// Notes a value about to be stored (`None`: its final size is not
    /// known, as for append).
    fn note_value(&self, len: Option<usize>) {
        // Every worker shares `largest`: a plain load first, so a store no
        // larger than the largest (nearly all) takes no locked
        // read-modify-write of a line the other workers read.
        let len = len.unwrap_or(self.max_value);
        if len > self.largest.load(Ordering::Relaxed) {
            self.largest.fetch_max(len, Ordering::Relaxed);
        }
    }

    /// Bytes charged now (buffers and reservations).
    pub fn used(&self) -> usize {
        self.used
    }

    /// Whether nothing more may be charged beyond the bases.
    pub fn exhausted(&self) -> bool {
        self.used >= self.cap
    }

    /// Charges (or refunds) a connection for what its buffers now hold.
    pub fn sync(&mut self, held: &mut Held, capacity: usize) {
        if capacity >= held.0 {
            self.used += capacity - held.0;
        } else {
            let freed = held.0 - capacity;
            self.used -= freed;
            self.released += freed;
        }
        held.0 = capacity;
    }

    /// Refunds everything a closing connection held.
    pub fn release(&mut self, held: &mut Held) {
        self.sync(held, 0);
    }

    /// Whether a connection holding `held` may allocate `extra` more bytes.
    pub fn may_grow(&self, held: &Held, extra: usize) -> bool {
        held.0 + extra <= BASE || self.used + extra <= self.cap
    }

    /// Reserves `bytes` for a request about to be dispatched; false (and
    /// nothing reserved) when they do not fit. Zero always fits.
    pub fn reserve(&mut self, bytes: usize) -> bool {
        if bytes > 0 && self.used + bytes > self.cap {
            return false;
        }
        self.used += bytes;
        self.reserved += bytes;
        true
    }

    /// Drops every reservation: the batch's replies are rendered (and
    /// counted in the write buffers) and its payloads handed over.
    pub fn settle(&mut self) {
        self.used -= self.reserved;
        self.reserved = 0;
    }

    /// How many of `keys` get replies fit in the budget now (at most `keys`).
    pub fn values_that_fit(&self, keys: usize) -> usize {
        self.fitting(self.per_value()).min(keys)
    }

    /// How many reservations of `per` bytes the budget has room for now.
    fn fitting(&self, per: usize) -> usize {
        self.cap.saturating_sub(self.used) / per
    }

    /// What dispatching `req` may add to memory before its reply is
    /// rendered: a store's value, or `per_value` for each key of a get.
    pub fn need(&self, req: &Command<'_>) -> usize {
        match req {
            Command::Get { keys, .. } | Command::Gat { keys, .. } => {
                keys.count() * self.per_value()
            }
            Command::MetaGet { .. } => self.per_value(),
            Command::Store { value, .. } | Command::MetaSet { value, .. } => value.len(),
            _ => 0,
        }
    }

    /// Reserves what `req` (parsed from `avail`, of which it uses `used`
    /// bytes) needs and says whether to dispatch it whole, a
    /// slice of its keys (a get whose replies do not all fit the budget or
    /// the connection's output limit, given its `pending_out` unwritten
    /// bytes and what `share` already reserved), or not yet.
    pub fn admit<'a>(
        &mut self,
        (req, used, avail): (Command<'a>, usize, &'a [u8]),
        share: &mut Share,
        pending_out: usize,
    ) -> Admit<'a> {
        if let Command::Metadump { to, .. } = req {
            return self.admit_metadump(to, used, share, pending_out);
        }
        let keys = match &req {
            Command::Get { keys, .. } | Command::Gat { keys, .. } => Some(*keys),
            Command::MetaGet { .. } => None,
            _ => {
                match &req {
                    Command::Store { mode, value, .. } => self.note_value(
                        (!matches!(mode, StoreMode::Append | StoreMode::Prepend))
                            .then_some(value.len()),
                    ),
                    Command::MetaSet { value, flags, .. } => self.note_value(
                        (!matches!(flags.set_mode(), StoreMode::Append | StoreMode::Prepend))
                            .then_some(value.len()),
                    ),
                    _ => {}
                }
                return if self.reserve(self.need(&req)) {
                    Admit::Whole(req)
                } else {
                    Admit::NoRoom
                };
            }
        };
        let per_value = self.per_value();
        let fit = self.replies_that_fit(per_value, share, pending_out);
        let Some(keys) = keys else {
            if fit == 0 {
                return Admit::NoRoom;
            }
            self.reserve(per_value);
            share.reserved += per_value;
            return Admit::Whole(req);
        };
        let (slice, count, more) = key_slice(keys, share.keys_done, fit);
        if count == 0 && more.is_some() {
            return Admit::NoRoom;
        }
        self.reserve(count * per_value);
        share.reserved += count * per_value;
        let req = match req {
            Command::Get { cas, .. } => Command::Get { keys: slice, cas },
            Command::Gat { exptime, cas, .. } => Command::Gat {
                exptime,
                keys: slice,
                cas,
            },
            other => other,
        };
        if let Some(next) = more {
            if share.sliced.is_none() {
                let all = keys.remainder();
                share.sliced = Some(Sliced::Get {
                    used,
                    keys_at: (all.as_ptr() as usize).wrapping_sub(avail.as_ptr() as usize),
                    keys_len: all.len(),
                    cas: matches!(
                        req,
                        Command::Get { cas: true, .. } | Command::Gat { cas: true, .. }
                    ),
                    exptime: match req {
                        Command::Gat { exptime, .. } => Some(exptime),
                        _ => None,
                    },
                });
            }
            share.keys_done = next;
            Admit::Part(req)
        } else {
            share.reset();
            Admit::Whole(req)
        }
    }

    /// [`admit`](Self::admit) for a binary-protocol request: a read that
    /// returns a value is one key of a get (at most as many in flight as
    /// fit the connection and the budget), a store's value is reserved as
    /// a text store's is. False: no room now (the worker makes room, or
    /// waits, as for a text request).
    pub fn admit_binary(
        &mut self,
        req: &BinRequest<'_>,
        share: &mut Share,
        pending_out: usize,
    ) -> bool {
        match req.base() {
            op::GET | op::GETK | op::GAT | op::GATK => {
                let per_value = self.per_value();
                if self.replies_that_fit(per_value, share, pending_out) == 0 {
                    return false;
                }
                self.reserve(per_value);
                share.reserved += per_value;
                true
            }
            base @ (op::SET | op::ADD | op::REPLACE | op::APPEND | op::PREPEND) => {
                let replaces = !matches!(base, op::APPEND | op::PREPEND);
                self.note_value(replaces.then_some(req.value.len()));
                self.reserve(req.value.len())
            }
            _ => true,
        }
    }

    /// How many more replies of `per` bytes one connection may have in
    /// flight: within its output limit, given its `pending_out` unwritten
    /// bytes and what `share` reserved (but one always may be, when none is
    /// in flight), and within the worker's budget.
    fn replies_that_fit(&self, per: usize, share: &Share, pending_out: usize) -> usize {
        let room = self
            .conn_output
            .saturating_sub(pending_out + share.reserved)
            / per;
        let own = if share.reserved == 0 {
            room.max(1)
        } else {
            room
        };
        self.fitting(per).min(own)
    }

    /// [`admit`](Self::admit) for a key dump (of segments `0..to`): the
    /// next slice of segments that fits, as a get's keys do.
    fn admit_metadump<'a>(
        &mut self,
        to: u32,
        used: usize,
        share: &mut Share,
        pending_out: usize,
    ) -> Admit<'a> {
        let total = to.min(self.walk_segments) as usize;
        let done = share.keys_done.min(total);
        let per = self.per_segment.max(1);
        let count = self
            .replies_that_fit(per, share, pending_out)
            .min(total - done);
        if count == 0 && done < total {
            return Admit::NoRoom;
        }
        self.reserve(count * per);
        share.reserved += count * per;
        let next = done + count;
        let req = Command::Metadump {
            from: done as u32,
            to: next as u32,
        };
        if next < total {
            share.keys_done = next;
            share.sliced = Some(Sliced::Metadump { used });
            Admit::Part(req)
        } else {
            share.reset();
            Admit::Whole(req)
        }
    }

    /// Whether a connection with `pending` unwritten bytes must stop being
    /// read.
    pub fn output_full(&self, pending: usize) -> bool {
        pending > self.conn_output
    }

    /// Whether a connection stopped by [`Budget::output_full`] may be read
    /// again.
    pub fn output_drained(&self, pending: usize) -> bool {
        pending <= self.conn_output / 2
    }

    /// Returns freed memory to the OS when a lot was released since the
    /// last call (connections closed, buffers shrunk). Cheap otherwise.
    pub fn trim(&mut self) {
        const TRIM_AFTER: usize = 1 << 20;
        if self.released < TRIM_AFTER {
            return;
        }
        self.released = 0;
        #[cfg(all(target_os = "linux", target_env = "gnu"))]
        // SAFETY: malloc_trim only returns free heap memory to the OS; it
        // is thread-safe and never moves or frees a live allocation.
        unsafe {
            libc::malloc_trim(0);
        }
    }
}

/// Makes freed client buffers go back to the OS: buffers and values of
/// 256 KiB or more get their own mappings (unmapped when freed), and
/// arenas are trimmed past 1 MiB of free top. glibc would otherwise raise
/// both thresholds as large buffers come and go, and keep what a burst of
/// connections used. Call once, before the workers start.
pub fn return_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only changes allocator tuning parameters; it is
    // called before any other thread of the server allocates.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 256 << 10);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 1 << 20);
    }
}

/// The keys of a get past its first `skip` bytes, at most `take` of
/// them, how many that is, and the byte offset after them if keys are
/// left (one walk over the keys).
pub fn key_slice(keys: Tokens<'_>, skip: usize, take: usize) -> (Tokens<'_>, usize, Option<usize>) {
    let all = keys.remainder();
    let start = &all[skip.min(all.len())..];
    let mut after = Tokens::new(start);
    let mut count = 0;
    while count < take && after.next().is_some() {
        count += 1;
    }
    let tail = after.remainder();
    let slice = &start[..start.len() - tail.len()];
    let next = (!tail.is_empty()).then(|| all.len() - tail.len());
    (Tokens::new(slice), count, next)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn budget(cap: usize, largest: usize, conn_output: usize) -> Budget {
        Budget::new(
            cap,
            1 << 20,
            conn_output,
            Arc::new(AtomicUsize::new(largest)),
        )
    }

    #[test]
    fn gets_reserve_for_the_largest_value_stored() {
        let mut b = budget(10 << 20, 0, 4 << 20);
        let get = Command::Get {
            keys: Tokens::new(b"a b"),
            cas: false,
        };
        assert_eq!(b.need(&get), 2 * VALUE_LINE);
        let set = crate::protocol::parse(b"set k 0 0 5000\r\n", 1 << 20);
        assert!(set.is_err(), "incomplete without its data");
        let mut req = b"set k 0 0 5000\r\n".to_vec();
        req.extend_from_slice(&[b'x'; 5000]);
        req.extend_from_slice(b"\r\n");
        let (set, _) = crate::protocol::parse(&req, 1 << 20).unwrap();
        assert!(matches!(
            b.admit((set, req.len(), &req), &mut Share::default(), 0),
            Admit::Whole(_)
        ));
        assert_eq!(b.need(&get), 2 * (5000 + VALUE_LINE));
        let line = b"append k 0 0 1\r\nx\r\n";
        let (append, used) = crate::protocol::parse(line, 1 << 20).unwrap();
        b.admit((append, used, line), &mut Share::default(), 0);
        assert_eq!(
            b.need(&get),
            2 * ((1 << 20) + VALUE_LINE),
            "append: any size"
        );
    }

    #[test]
    fn reservations_are_bounded_and_settled() {
        let mut b = budget(1000, 0, 4096);
        assert!(b.reserve(600));
        assert!(!b.reserve(500), "over the cap");
        assert!(b.reserve(0), "nothing always fits");
        assert_eq!(b.values_that_fit(5), 1);
        b.settle();
        assert_eq!((b.used(), b.values_that_fit(5)), (0, 3));
    }

    #[test]
    fn buffers_are_charged_and_refunded() {
        let mut b = budget(200_000, 100, 4096);
        let (mut x, mut y) = (Held::default(), Held::default());
        b.sync(&mut x, 150_000);
        assert!(b.may_grow(&y, BASE), "the base is always granted");
        b.sync(&mut y, 40_000);
        assert_eq!(b.used(), 190_000);
        assert!(!b.may_grow(&x, 20_000));
        assert!(b.may_grow(&x, 10_000));
        assert!(!b.reserve(20_000));
        b.release(&mut x);
        assert_eq!((b.used(), x.bytes()), (40_000, 0));
        assert!(b.reserve(20_000));
        b.sync(&mut y, 1000);
        b.settle();
        assert_eq!(b.used(), 1000);
        b.trim();
    }

    #[test]
    fn output_limits_have_hysteresis() {
        let b = budget(1 << 20, 100, 4096);
        assert!(!b.output_full(4096) && b.output_full(4097));
        assert!(!b.output_drained(3000) && b.output_drained(2048));
    }

    #[test]
    fn key_slices() {
        let keys = Tokens::new(b"a  bb c dd e");
        let s = |skip, take| {
            let (t, count, more) = key_slice(keys, skip, take);
            let got = t.map(|k| k.to_vec()).collect::<Vec<_>>();
            assert_eq!(count, got.len(), "the count of the slice's keys");
            (got, more)
        };
        let (first, more) = s(0, 2);
        assert_eq!(first, [b"a".to_vec(), b"bb".to_vec()]);
        let (second, more) = s(more.unwrap(), 2);
        assert_eq!(second, [b"c".to_vec(), b"dd".to_vec()]);
        assert_eq!(s(more.unwrap(), 2), (vec![b"e".to_vec()], None));
        assert_eq!(s(0, 9).0.len(), 5);
        assert_eq!(s(0, 0), (vec![], Some(0)));
        assert_eq!(s(99, 1), (vec![], None));
    }

    #[test]
    fn a_large_multiget_is_admitted_a_slice_at_a_time() {
        let mut b = budget(1000, 0, 4096);
        let mut done = Share::default();
        let mut seen = Vec::new();
        loop {
            let line: &[u8] = b"get k1 k2 k3 k4 k5 k6 k7\r\n";
            let (req, used) = done
                .resume(line)
                .unwrap_or_else(|| crate::protocol::parse(line, 100).unwrap());
            let (keys, whole) = match b.admit((req, used, line), &mut done, 0) {
                Admit::Whole(Command::Get { keys, .. }) => (keys, true),
                Admit::Part(Command::Get { keys, .. }) => (keys, false),
                _ => panic!("a get with room must be admitted"),
            };
            let n = keys.count();
            assert_eq!(b.used(), n * VALUE_LINE);
            assert!(n <= 3);
            seen.extend(keys.map(|k| k.to_vec()));
            b.settle();
            done.reserved = 0;
            if whole {
                break;
            }
        }
        assert_eq!(seen.len(), 7);
        assert_eq!(seen[6], b"k7");
        assert_eq!(done.keys_done, 0);
        assert!(b.reserve(800));
        let req = Command::Get {
            keys: Tokens::new(b"k1"),
            cas: false,
        };
        assert!(matches!(
            b.admit((req, 4, b"get k1"), &mut done, 0),
            Admit::NoRoom
        ));
    }

    #[test]
    fn a_key_dump_is_cut_into_slices_of_segments_that_fit() {
        // 10 segments of 1 KiB, each reserved at 2 KiB; 4 KiB of output
        // per connection: two segments a slice, the last one whole.
        let mut b = budget(1 << 20, 0, 4 << 10).with_walk(10, 1 << 10);
        let mut share = Share::default();
        let all = || Command::Metadump {
            from: 0,
            to: u32::MAX,
        };
        let mut slices = Vec::new();
        loop {
            match b.admit((all(), 26, b"lru_crawler metadump all\r\n"), &mut share, 0) {
                Admit::Part(Command::Metadump { from, to }) => slices.push((from, to, false)),
                Admit::Whole(Command::Metadump { from, to }) => {
                    slices.push((from, to, true));
                    break;
                }
                _ => panic!("a slice did not fit"),
            }
            // The batch's replies were written and read.
            b.settle();
            share.reserved = 0;
            assert!(share.resume(b"lru_crawler metadump all\r\n").is_some());
        }
        let want: Vec<_> = (0..5).map(|i| (2 * i, 2 * i + 2, i == 4)).collect();
        assert_eq!(slices, want);
        assert!(share.resume(b"").is_none(), "done: nothing to resume");
        // With a slice in flight, none more past the output limit; with
        // none in flight, one may go (the worker stops reading a connection
        // whose output is full before it asks). A class list without
        // class 1 is refused by the parser; a dump of no segments is whole
        // at once.
        let mut share = Share::default();
        assert!(matches!(
            b.admit((all(), 26, b""), &mut share, 0),
            Admit::Part(_)
        ));
        assert!(matches!(
            b.admit((all(), 26, b""), &mut share, 0),
            Admit::NoRoom
        ));
        let mut share = Share::default();
        assert!(matches!(
            b.admit((all(), 26, b""), &mut share, 8 << 10),
            Admit::Part(_)
        ));
        let mut share = Share::default();
        let none = Command::Metadump { from: 0, to: 0 };
        assert!(matches!(
            b.admit((none, 26, b""), &mut share, 0),
            Admit::Whole(Command::Metadump { from: 0, to: 0 })
        ));
    }
}

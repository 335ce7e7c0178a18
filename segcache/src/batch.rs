//! [`Batch`]: many requests for the storage thread in one reusable arena.
//!
//! Owns the batch's memory: every key and value of its requests is copied
//! into one byte arena (requests hold spans of it, not `Vec`s), and the
//! buffers of its read replies are kept between runs: a run writes each
//! reply over the last run's in place, a hit into its slot's buffers when
//! the slot held a hit, else into buffers that replies other than hits
//! gave up (whatever their position). A client that fills, runs
//! and clears the same `Batch` over and over allocates nothing once the
//! buffers have grown to its working size, and the whole batch crosses to
//! the storage thread and back as one queue message (or, when the storage
//! thread sleeps, is run by the submitting thread itself, holding the
//! cache's token). On the executing side
//! [`Batch::execute`] runs the requests in order, prefetching the table
//! for the keys a few requests ahead. This module never decides what a
//! request does: every request runs through [`Segcache::execute`] (reads
//! through its buffer-reusing twin).

use crate::cache::OwnedItem;
use crate::hashtable::hash_key;
use crate::ops::{Found, GetOpts, Request, Response, Store, Ttl};
use crate::Segcache;

/// A key or value: a range of the batch's byte arena.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Span {
    start: u32,
    len: u32,
}

/// How far ahead of the request being run the table is prefetched.
const PREFETCH_AHEAD: usize = 8;

/// How far ahead the item is prefetched (its location read from the table
/// lines prefetched `PREFETCH_AHEAD - ITEM_AHEAD` requests earlier).
const ITEM_AHEAD: usize = 4;

/// Requests to run on the storage thread in one round trip, with their
/// keys and values in one reusable arena; see
/// [`Client::run`](crate::storage::Client::run) (blocking) or
/// [`Client::submit_batch`](crate::storage::Client::submit_batch) (from an
/// event loop).
///
/// ```
/// use segcache::{Batch, Response, Segcache, StorageConfig};
///
/// let (handle, thread) = Segcache::builder().spawn_storage(StorageConfig::default())?;
/// let mut client = handle.client();
/// let mut batch = Batch::new();
/// for round in 0..3u32 {
///     batch.clear(); // keeps every buffer for the next round
///     batch.set("k", round.to_string(), 0, None);
///     batch.get("k");
///     client.run(&mut batch)?;
///     match &batch.responses()[1] {
///         Response::Get(Ok(Some(found))) => {
///             assert_eq!(found.item.value(), round.to_string().as_bytes())
///         }
///         other => panic!("{other:?}"),
///     }
/// }
/// drop((client, handle));
/// thread.join().unwrap();
/// # Ok::<(), segcache::Error>(())
/// ```
#[derive(Debug, Default)]
pub struct Batch {
    bytes: Vec<u8>,
    requests: Vec<Request<Span>>,
    responses: Vec<Response>,
    /// Read-reply buffers free for this run's hits.
    free: Vec<OwnedItem>,
}

impl Batch {
    /// An empty batch.
    pub fn new() -> Self {
        Self::default()
    }

    fn span(&mut self, data: &[u8]) -> Span {
        let start = self.bytes.len();
        self.bytes.extend_from_slice(data);
        Span {
            start: u32::try_from(start).expect("a batch holds under 4 GiB"),
            len: data.len() as u32,
        }
    }

    fn view(&self, span: Span) -> &[u8] {
        &self.bytes[span.start as usize..][..span.len as usize]
    }

    /// Adds any request (its key and value are copied into the arena).
    pub fn push<B: AsRef<[u8]>>(&mut self, request: &Request<B>) {
        let request = request.map_bytes(|bytes| self.span(bytes.as_ref()));
        self.requests.push(request);
    }

    /// Adds a plain read (`Request::Get` with default options).
    pub fn get(&mut self, key: impl AsRef<[u8]>) {
        let key = self.span(key.as_ref());
        self.requests.push(Request::Get {
            key,
            opts: Default::default(),
        });
    }

    /// Adds a plain set.
    pub fn set(
        &mut self,
        key: impl AsRef<[u8]>,
        value: impl AsRef<[u8]>,
        flags: u32,
        ttl: impl Into<Ttl>,
    ) {
        let (key, value) = (self.span(key.as_ref()), self.span(value.as_ref()));
        let mut store = Store::new(crate::StoreMode::Set, key, value);
        store.flags = flags;
        store.ttl = ttl.into();
        self.requests.push(Request::Store(store));
    }

    /// Requests in the batch.
    pub fn len(&self) -> usize {
        self.requests.len()
    }

    /// True when the batch holds no request.
    pub fn is_empty(&self) -> bool {
        self.requests.is_empty()
    }

    /// Empties the batch for the next round, keeping its buffers (and the
    /// last responses' buffers, which the next run's hits reuse).
    pub fn clear(&mut self) {
        self.bytes.clear();
        self.requests.clear();
    }

    /// The responses of the last run, one per request, in order.
    pub fn responses(&self) -> &[Response] {
        &self.responses[..self.requests.len().min(self.responses.len())]
    }

    /// Bytes the batch keeps for reuse: its arena's capacity plus the keys
    /// and values held by read replies (the last run's, and free ones). A
    /// caller bounding its memory starts over with a new `Batch` when this
    /// grows too large.
    pub fn retained_bytes(&self) -> usize {
        let replies = self.responses.iter().filter_map(|r| match r {
            Response::Get(Ok(Some(found))) => Some(&found.item),
            _ => None,
        });
        self.bytes.capacity()
            + replies
                .chain(&self.free)
                .map(|item| item.key().len() + item.value().len())
                .sum::<usize>()
    }

    /// Runs every request on `cache` in order (by the token's holder).
    pub(crate) fn execute(&mut self, cache: &mut Segcache) {
        let n = self.requests.len();
        // Replies are written over the last run's, in place: a hit into
        // its slot's buffers if the slot held a hit, else into free ones.
        // Slots past this run's requests give theirs up first.
        if self.responses.len() > n {
            for old in self.responses.drain(n..) {
                if let Response::Get(Ok(Some(found))) = old {
                    self.free.push(found.item);
                }
            }
        }
        // The key hashes of the requests prefetched ahead, by `i % AHEAD`:
        // each key is hashed once, for the prefetches and the run. Two
        // stages: the table lines of request `i + PREFETCH_AHEAD`, and the
        // item of request `i + ITEM_AHEAD`, whose table lines have arrived.
        let mut hashes = [0u64; PREFETCH_AHEAD];
        for (i, hash) in hashes.iter_mut().enumerate().take(n) {
            *hash = self.prefetch(cache, i);
        }
        for i in 0..n {
            let hash = hashes[i % PREFETCH_AHEAD];
            if i + ITEM_AHEAD < n {
                cache.prefetch_item(hashes[(i + ITEM_AHEAD) % PREFETCH_AHEAD]);
            }
            if i + PREFETCH_AHEAD < n {
                hashes[i % PREFETCH_AHEAD] = self.prefetch(cache, i + PREFETCH_AHEAD);
            }
            if i == self.responses.len() {
                self.responses.push(Response::Done);
            }
            let bytes = &self.bytes;
            let view = |span: Span| &bytes[span.start as usize..][..span.len as usize];
            let slot = &mut self.responses[i];
            let free = &mut self.free;
            match self.requests[i] {
                Request::Get { key, opts } if opts == GetOpts::default() => {
                    match (cache.read_plain(view(key), hash), slot) {
                        (Some((item, marks)), Response::Get(Ok(Some(found)))) => {
                            found.refill_plain(item, marks)
                        }
                        (Some((item, marks)), slot) => {
                            let owned = match free.pop() {
                                Some(mut old) => {
                                    old.refill(item, false);
                                    old
                                }
                                None => item.copy_out(false),
                            };
                            *slot = Response::Get(Ok(Some(Found::plain(owned, marks))));
                        }
                        (None, slot) => give_back(slot, Response::Get(Ok(None)), free),
                    }
                }
                Request::Get { key, opts } => {
                    let mut reuse = free.pop();
                    let found = cache.read_reusing(view(key), hash, &opts, &mut reuse);
                    free.extend(reuse);
                    give_back(slot, Response::Get(found), free);
                }
                // Everything else runs as `execute` runs it, on the
                // arena's bytes (a request without a key ignores the hash).
                ref other => {
                    let response = cache.execute_hashed(&other.map_bytes(|&span| view(span)), hash);
                    give_back(slot, response, free);
                }
            }
        }
    }

    /// Starts loading the table lines request `i`'s key will need; returns
    /// the key's hash (0 for a request without a key).
    fn prefetch(&self, cache: &Segcache, i: usize) -> u64 {
        let key = match &self.requests[i] {
            Request::Get { key, .. }
            | Request::Delete { key, .. }
            | Request::Arith { key, .. }
            | Request::Touch { key, .. } => *key,
            Request::Store(s) => s.key,
            _ => return 0,
        };
        let hash = hash_key(self.view(key));
        cache.prefetch(hash);
        hash
    }
}

/// Puts `response` in `slot`, first moving the read buffers of the reply
/// it replaces (if that was a hit) to `free`.
#[inline]
fn give_back(slot: &mut Response, response: Response, free: &mut Vec<OwnedItem>) {
    if let Response::Get(Ok(Some(found))) = std::mem::replace(slot, response) {
        free.push(found.item);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::{DeleteOpts, StoreMode};
    use crate::StorageConfig;

    #[test]
    fn a_run_follows_earlier_submissions_and_leaves_their_replies() {
        let config = StorageConfig {
            queue_capacity: 4,
            ..StorageConfig::default()
        };
        let (handle, thread) = Segcache::builder().spawn_storage(config).unwrap();
        let mut client = handle.client();
        // A full queue of single requests, then a batch that reads them.
        for i in 0..4u32 {
            let store = Store::new(StoreMode::Set, format!("k{i}").into_bytes(), vec![b'v'; 3]);
            client.submit(Request::Store(store)).unwrap();
        }
        let mut batch = Batch::new();
        for i in 0..4u32 {
            batch.get(format!("k{i}"));
        }
        batch.get("absent");
        client.run(&mut batch).unwrap();
        assert_eq!(batch.responses().len(), 5);
        for r in &batch.responses()[..4] {
            assert!(
                matches!(r, Response::Get(Ok(Some(f))) if f.item.value() == b"vvv"),
                "{r:?}"
            );
        }
        assert_eq!(batch.responses()[4], Response::Get(Ok(None)));
        // The earlier replies are still there, in order, for recv.
        assert_eq!(client.in_flight(), 4);
        for _ in 0..4 {
            assert!(matches!(
                client.recv().unwrap(),
                Some(Response::Stored(Ok(_)))
            ));
        }
        assert_eq!(client.recv().unwrap(), None);
        // A closed thread refuses a batch and gives it back untouched.
        handle.shutdown();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while !handle.is_stopped() {
            assert!(
                std::time::Instant::now() < deadline,
                "the thread never stopped"
            );
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        batch.clear();
        batch.get("k0");
        assert_eq!(client.run(&mut batch), Err(crate::Error::Closed));
        assert_eq!(batch.len(), 1);
        drop((client, handle));
        thread.join().unwrap();
    }

    #[test]
    fn a_batch_answers_like_execute_and_reuses_its_buffers() {
        let mut direct = Segcache::builder().build().unwrap();
        let mut batched = Segcache::builder().build().unwrap();
        let mut batch = Batch::new();
        let requests: Vec<Request> = (0..200u32)
            .flat_map(|i| {
                let key = format!("k{}", i % 37).into_bytes();
                [
                    Request::Store(Store::new(
                        StoreMode::Set,
                        key.clone(),
                        i.to_string().into(),
                    )),
                    Request::Get {
                        key: key.clone(),
                        opts: Default::default(),
                    },
                    Request::Store(Store::new(StoreMode::Append, key.clone(), b"+".to_vec())),
                    Request::Delete {
                        key: format!("k{}", i % 5).into_bytes(),
                        opts: DeleteOpts::default(),
                    },
                    Request::Get {
                        key,
                        opts: Default::default(),
                    },
                ]
            })
            .collect();
        for round in requests.chunks(50) {
            batch.clear();
            for r in round {
                batch.push(r);
            }
            batch.execute(&mut batched);
            let want: Vec<Response> = round.iter().map(|r| direct.execute(r)).collect();
            assert_eq!(batch.responses(), &want[..]);
        }
        // Steady state: the arena and the read replies keep their buffers.
        let arena = batch.bytes.as_ptr();
        let value_buffers: Vec<*const u8> = batch
            .responses()
            .iter()
            .filter_map(|r| match r {
                Response::Get(Ok(Some(f))) => Some(f.item.value().as_ptr()),
                _ => None,
            })
            .collect();
        batch.clear();
        for r in &requests[requests.len() - 50..] {
            batch.push(r);
        }
        batch.execute(&mut batched);
        assert_eq!(batch.bytes.as_ptr(), arena, "the arena was reused");
        let reused = batch
            .responses()
            .iter()
            .filter_map(|r| match r {
                Response::Get(Ok(Some(f))) => Some(f.item.value().as_ptr()),
                _ => None,
            })
            .filter(|p| value_buffers.contains(p))
            .count();
        assert!(
            reused > 0,
            "read replies reuse the previous round's buffers"
        );
    }

    /// Plain reads take the short path (and the item prefetch runs ahead
    /// of them): answers, marks and counters must match the general read
    /// (and direct `execute` for the rest) through expiry, invalidation, a delayed flush and a growing table.
    #[test]
    fn plain_reads_in_a_batch_match_direct_execution() {
        use crate::ManualClock;
        use std::time::Duration;
        let build = |clock: &ManualClock| {
            Segcache::builder()
                .heap_size(4 << 20)
                .segment_size(64 << 10)
                .hash_power(4)
                .clock(clock.clone())
                .build()
                .unwrap()
        };
        let (direct_clock, batched_clock) = (ManualClock::new(), ManualClock::new());
        let mut direct = build(&direct_clock);
        let mut batched = build(&batched_clock);
        let mut batch = Batch::new();
        let key = |i: u32| format!("key-{i}").into_bytes();
        let peek = GetOpts {
            bump: false,
            ..GetOpts::default()
        };
        let mg = GetOpts {
            win_tokens: true,
            ..GetOpts::default()
        };
        for round in 0..40u32 {
            let mut requests: Vec<Request> = Vec::new();
            for j in 0..60u32 {
                let i = (round * 37 + j * 11) % 500;
                let mut store = Store::new(
                    StoreMode::Set,
                    key(i),
                    vec![b'a' + (i % 26) as u8; 1 + i as usize % 90],
                );
                store.ttl = if i % 3 == 0 {
                    Ttl::After(Duration::from_secs(1 + u64::from(i % 4)))
                } else {
                    Ttl::Never
                };
                requests.push(Request::Store(store));
                for k in [i, i / 2, i + 1, 999 + j] {
                    requests.push(Request::Get {
                        key: key(k),
                        opts: GetOpts::default(),
                    });
                }
                let opts = if j % 2 == 0 { peek } else { mg };
                requests.push(Request::Get {
                    key: key(i / 3),
                    opts,
                });
                if j % 13 == 0 {
                    requests.push(Request::Delete {
                        key: key(i / 2),
                        opts: DeleteOpts {
                            invalidate: true,
                            ..DeleteOpts::default()
                        },
                    });
                }
            }
            if round % 17 == 16 {
                requests.push(Request::Flush {
                    delay: Duration::from_secs(1),
                });
            }
            batch.clear();
            for r in &requests {
                batch.push(r);
            }
            batch.execute(&mut batched);
            // Reads through the general path (`execute` takes the short
            // one for plain reads too): that is the reference.
            let want: Vec<Response> = requests
                .iter()
                .map(|r| match r {
                    Request::Get { key, opts } => Response::Get(direct.read_reusing(
                        key,
                        crate::hashtable::hash_key(key),
                        opts,
                        &mut None,
                    )),
                    r => direct.execute(r),
                })
                .collect();
            assert_eq!(batch.responses(), &want[..], "round {round}");
            assert_eq!(batched.stats(), direct.stats(), "round {round}");
            for clock in [&direct_clock, &batched_clock] {
                clock.advance(Duration::from_secs(1));
            }
        }
        let stats = direct.stats();
        assert!(stats.hits > 0 && stats.misses > 0 && stats.expirations > 0);
        assert!(stats.hash_table_bytes > 16 * 8 * 8, "the table grew");
    }

    /// Value buffers of the read hits among `responses`.
    fn hit_buffers(batch: &Batch) -> Vec<*const u8> {
        batch
            .responses()
            .iter()
            .filter_map(|r| match r {
                Response::Get(Ok(Some(f))) => Some(f.item.value().as_ptr()),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn hits_reuse_free_buffers_whatever_their_position() {
        let mut cache = Segcache::builder().build().unwrap();
        cache.set("hot", [b'h'; 100], 0, None).unwrap();
        cache.set("warm", [b'w'; 100], 0, None).unwrap();
        let mut batch = Batch::new();
        // Round 1: two hits at the start.
        for key in ["hot", "warm", "cold"] {
            batch.get(key);
        }
        batch.execute(&mut cache);
        let first = hit_buffers(&batch);
        assert_eq!(first.len(), 2);
        // Round 2: misses where the hits were, hits elsewhere; a miss
        // must not use up (or drop) a free buffer.
        batch.clear();
        for key in ["cold", "cold", "cold", "warm", "cold", "hot"] {
            batch.get(key);
        }
        batch.execute(&mut cache);
        let second = hit_buffers(&batch);
        assert_eq!(second.len(), 2);
        assert!(
            second.iter().all(|p| first.contains(p)),
            "every hit reused a buffer of the last run"
        );
        // Round 3: fewer hits; the unused buffer stays free for later.
        batch.clear();
        batch.get("cold");
        batch.get("hot");
        batch.execute(&mut cache);
        assert!(first.contains(&hit_buffers(&batch)[0]));
        assert_eq!(batch.free.len(), 1);
        assert!(batch.retained_bytes() >= batch.bytes.capacity() + 2 * (3 + 100));
        // Round 4: both hits again, both in the old buffers.
        batch.clear();
        batch.get("warm");
        batch.get("hot");
        batch.execute(&mut cache);
        let fourth = hit_buffers(&batch);
        assert_eq!(fourth.len(), 2);
        assert!(fourth.iter().all(|p| first.contains(p)));
        assert!(batch.free.is_empty());
    }
}

//! Single flight: at most one computation per key at a time.
//!
//! [`ShardedCache::get_or_insert_with`](crate::ShardedCache::get_or_insert_with)
//! registers a key here before computing its value outside any shard lock;
//! threads that miss the same key meanwhile wait on the leader's gate
//! instead of computing it again. This module owns the registry and the
//! gates only; it never touches the cache.

use parking_lot::{Condvar, Mutex};
use std::collections::HashMap;
use std::sync::Arc;

#[derive(Default)]
struct Gate {
    done: Mutex<bool>,
    opened: Condvar,
}

/// The keys being computed right now.
#[derive(Default)]
pub(crate) struct Flights {
    running: Mutex<HashMap<Vec<u8>, Arc<Gate>>>,
}

/// A thread's part in one key's computation: the leader computes, the
/// others wait. Dropping the leader's part (after storing, or while
/// unwinding from a panic) lets the waiters go.
pub(crate) struct Flight<'a> {
    flights: &'a Flights,
    key: Vec<u8>,
    gate: Arc<Gate>,
    /// True for the one thread that computes the value.
    pub leader: bool,
}

impl Flights {
    /// Joins the computation of `key`, leading it if none runs.
    pub(crate) fn join(&self, key: &[u8]) -> Flight<'_> {
        let mut running = self.running.lock();
        let (gate, leader) = match running.get(key) {
            Some(gate) => (Arc::clone(gate), false),
            None => {
                let gate = Arc::new(Gate::default());
                running.insert(key.to_vec(), Arc::clone(&gate));
                (gate, true)
            }
        };
        Flight {
            flights: self,
            key: key.to_vec(),
            gate,
            leader,
        }
    }
}

impl Flight<'_> {
    /// Blocks until the leader is done (stored its value, failed or
    /// panicked).
    pub(crate) fn wait(&self) {
        let mut done = self.gate.done.lock();
        while !*done {
            self.gate.opened.wait(&mut done);
        }
    }
}

impl Drop for Flight<'_> {
    fn drop(&mut self) {
        if !self.leader {
            return;
        }
        self.flights.running.lock().remove(&self.key);
        *self.gate.done.lock() = true;
        self.gate.opened.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_leader_per_key_and_waiters_released_on_drop() {
        let flights = Flights::default();
        let a = flights.join(b"k");
        let b = flights.join(b"k");
        let other = flights.join(b"j");
        assert!(a.leader && !b.leader && other.leader);
        std::thread::scope(|s| {
            let waiter = s.spawn(|| b.wait());
            drop(a);
            waiter.join().unwrap();
        });
        assert!(flights.join(b"k").leader, "the key is free again");
    }
}

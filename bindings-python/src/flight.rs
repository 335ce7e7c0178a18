//! Single-flight: while one thread computes the value of a missing key,
//! other threads asking for the same key wait for it instead of computing
//! it again.
//!
//! Owns the table of keys being computed and the waiting; never touches
//! the cache and never runs Python code while holding one of its locks.
//! The first caller becomes the leader ([`Role::Leader`]) and must finish
//! its [`Leader`] with the value (or drop it: the flight then fails and the
//! waiters retry, one of them becoming the next leader). Waiters block with
//! the GIL released, waking every 50 ms to let Python handle signals.

use parking_lot::{Condvar, Mutex};
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use std::collections::HashMap;
use std::sync::Arc;
use std::thread::ThreadId;
use std::time::Duration;

/// The keys being computed right now.
#[derive(Default)]
pub struct Flights {
    map: Mutex<HashMap<Box<[u8]>, Arc<Flight>>>,
}

/// One key being computed.
pub struct Flight {
    leader: ThreadId,
    state: Mutex<State>,
    done: Condvar,
}

enum State {
    Running,
    Done(Py<PyAny>),
    Failed,
}

/// What a caller of [`Flights::join`] is to do.
pub enum Role<'f> {
    /// Compute the value, then [`Leader::finish`].
    Leader(Leader<'f>),
    /// Wait for the leader with [`Flight::wait`].
    Follower(Arc<Flight>),
}

/// The duty of computing one key; dropping it unfinished fails the flight.
pub struct Leader<'f> {
    flights: &'f Flights,
    key: Box<[u8]>,
    flight: Arc<Flight>,
    finished: bool,
}

impl Flights {
    /// Becomes the leader for `key`, or a follower of its current leader.
    pub fn join(&self, key: &[u8]) -> Role<'_> {
        let mut map = self.map.lock();
        if let Some(f) = map.get(key) {
            return Role::Follower(Arc::clone(f));
        }
        let flight = Arc::new(Flight {
            leader: std::thread::current().id(),
            state: Mutex::new(State::Running),
            done: Condvar::new(),
        });
        map.insert(key.into(), Arc::clone(&flight));
        Role::Leader(Leader {
            flights: self,
            key: key.into(),
            flight,
            finished: false,
        })
    }

    /// Keys being computed now (for tests and `repr`).
    pub fn len(&self) -> usize {
        self.map.lock().len()
    }
}

impl Leader<'_> {
    /// Hands `value` to the waiters (`None`: the computation failed).
    pub fn finish(mut self, value: Option<Py<PyAny>>) {
        self.end(value);
    }

    fn end(&mut self, value: Option<Py<PyAny>>) {
        self.finished = true;
        {
            let mut map = self.flights.map.lock();
            if map
                .get(&self.key)
                .is_some_and(|f| Arc::ptr_eq(f, &self.flight))
            {
                map.remove(&self.key);
            }
        }
        *self.flight.state.lock() = match value {
            Some(v) => State::Done(v),
            None => State::Failed,
        };
        self.flight.done.notify_all();
    }
}

impl Drop for Leader<'_> {
    fn drop(&mut self) {
        if !self.finished {
            self.end(None);
        }
    }
}

impl Flight {
    /// Waits for the leader: its value, or `None` if it failed (retry).
    /// A leader waiting for itself (its factory asked for the same key) is
    /// a `RuntimeError` instead of a deadlock.
    pub fn wait(&self, py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
        if self.leader == std::thread::current().id() {
            return Err(PyRuntimeError::new_err(
                "get_or_set: the factory asked for the key it is computing (recursion)",
            ));
        }
        loop {
            let running = py.detach(|| {
                let mut state = self.state.lock();
                if matches!(*state, State::Running) {
                    self.done.wait_for(&mut state, Duration::from_millis(50));
                }
                matches!(*state, State::Running)
            });
            if !running {
                break;
            }
            py.check_signals()?;
        }
        Ok(match &*self.state.lock() {
            State::Done(v) => Some(v.clone_ref(py)),
            _ => None,
        })
    }
}

//! `ManualClock`: the test hook that moves a cache's time by hand.
//!
//! Wraps [`segcache::ManualClock`]; owns nothing else.

use pyo3::prelude::*;

use crate::convert::{int_arg, seconds_arg};

/// A clock moved by hand, for tests: give it to `Cache(_clock=...)` and the
/// cache reads time from it instead of the system's monotonic clock, so TTL
/// expiry can be tested without sleeping. It starts at 0 and counts whole
/// seconds; it never goes backwards.
#[pyclass(frozen, module = "segcache", name = "ManualClock")]
pub struct PyManualClock {
    pub inner: segcache::ManualClock,
}

#[pymethods]
impl PyManualClock {
    #[new]
    fn new() -> Self {
        PyManualClock {
            inner: segcache::ManualClock::new(),
        }
    }

    /// Moves the clock forward by `seconds` (int, float or timedelta;
    /// fractions of a second are dropped).
    fn advance(&self, seconds: &Bound<'_, PyAny>) -> PyResult<()> {
        self.inner.advance(seconds_arg(seconds, "seconds")?);
        Ok(())
    }

    /// Sets the clock to `seconds`; an earlier reading than now is ignored.
    fn set(&self, seconds: &Bound<'_, PyAny>) -> PyResult<()> {
        self.inner
            .set(int_arg(seconds, "seconds", 0, u32::MAX as u64)? as u32);
        Ok(())
    }

    /// The current reading, in whole seconds since the clock was made.
    #[getter]
    fn now(&self) -> u32 {
        self.inner.now()
    }

    fn __repr__(&self) -> String {
        format!("ManualClock(now={})", self.inner.now())
    }
}

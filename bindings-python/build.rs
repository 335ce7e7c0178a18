//! Build script: pyo3's cfgs for this crate, so that `#[cfg(Py_GIL_DISABLED)]`
//! is set when building for a free-threaded CPython (the cache then takes
//! its read lock on every call: see `PyCache::cache_attached`).

fn main() {
    pyo3_build_config::use_pyo3_cfgs();
}

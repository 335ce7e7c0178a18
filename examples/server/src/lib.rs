//! Example memcache-protocol server for segcache (issue 7).
//!
//! The protocol layer lives in [`protocol`]; networking and storage glue
//! come later.

pub mod protocol;

//! The one error type every fallible operation returns.
//!
//! Each variant says what went wrong in terms a caller can act on; none of
//! them leaves a half-written item behind: the operation that failed
//! changed nothing.

use std::fmt;

/// Why an operation or a build failed.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// Keys must be at least one byte long.
    EmptyKey,
    /// Keys are at most [`MAX_KEY_LEN`](crate::MAX_KEY_LEN) bytes.
    KeyTooLong {
        /// The key's length.
        len: usize,
    },
    /// The item (header, key and value) does not fit in one segment.
    ValueTooLarge {
        /// The value's length.
        len: usize,
        /// The longest value that fits with this key.
        max: usize,
    },
    /// TTLs are at most [`MAX_TTL`](crate::MAX_TTL) seconds.
    TtlOutOfRange {
        /// The TTL asked for, in seconds.
        secs: u64,
    },
    /// The key's neighbourhood in the hash table is full and the eviction
    /// policy is [`Eviction::None`](crate::Eviction::None) (other policies
    /// evict the least-read item there instead); raise `hash_power`.
    HashTableFull,
    /// No free segment and the eviction policy is [`Eviction::None`](crate::Eviction::None)
    /// (or nothing could be evicted).
    OutOfMemory,
    /// `add` found the key, or `replace`/`append`/`prepend` did not.
    NotStored,
    /// `cas` found the key at another version.
    Exists,
    /// The key is not in the cache.
    NotFound,
    /// `incr`/`decr` on a value that is not a decimal `u64`.
    NotNumeric,
    /// A builder setting is out of range; `field` names it.
    InvalidConfig {
        /// The setting, as the builder method is named.
        field: &'static str,
        /// What is wrong with its value.
        reason: String,
    },
    /// Reading or writing the datapool or its metadata failed.
    Persistence(String),
    /// The storage thread has stopped (shut down, or it failed); the
    /// request was not accepted.
    Closed,
    /// The cache cannot do this with this value or in this setup (an
    /// [`External`](crate::External) value without a release function, or
    /// in a datapool; arithmetic or append on an external value); the
    /// reason says which.
    Unsupported(&'static str),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::EmptyKey => write!(f, "key is empty"),
            Error::KeyTooLong { len } => write!(
                f,
                "key is {len} bytes, longer than the limit of {}",
                crate::MAX_KEY_LEN
            ),
            Error::ValueTooLarge { len, max } => {
                write!(
                    f,
                    "value of {len} bytes is too large (at most {max} with this key; \
                     an item must fit in one segment: set a larger segment_size)"
                )
            }
            Error::TtlOutOfRange { secs } => write!(
                f,
                "ttl of {secs} s is out of range (at most {} s)",
                crate::MAX_TTL
            ),
            Error::HashTableFull => write!(f, "hash table is full"),
            Error::OutOfMemory => write!(f, "out of memory: no segment could be freed"),
            Error::NotStored => write!(f, "not stored"),
            Error::Exists => write!(f, "item exists at another version"),
            Error::NotFound => write!(f, "not found"),
            Error::NotNumeric => write!(f, "value is not a decimal u64"),
            Error::InvalidConfig { field, reason } => write!(f, "invalid {field}: {reason}"),
            Error::Persistence(reason) => write!(f, "persistence: {reason}"),
            Error::Closed => write!(f, "the storage thread has stopped"),
            Error::Unsupported(reason) => write!(f, "unsupported: {reason}"),
        }
    }
}

impl std::error::Error for Error {}

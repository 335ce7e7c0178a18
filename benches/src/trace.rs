//! Reader for the CloudPhysics block-I/O trace in libCacheSim's
//! `oracleGeneral` binary format.
//!
//! Owns locating the shared data directory (`SEGCACHE_DATA`, falling back to
//! `<workspace root>/../shared/data`) and decoding the packed little-endian
//! 24-byte records (`time u32, obj_id u64, obj_size u32, next_access_vtime
//! i64`, the last being the 1-based request number of the object's next
//! request, -1 if none). The data file is read in place; it is never copied
//! into the repo.

use std::io;
use std::path::PathBuf;

/// File name of the CloudPhysics trace inside the data directory.
pub const CLOUDPHYSICS_FILE: &str = "cloudPhysicsIO.oracleGeneral.bin";
/// Size of one packed record.
pub const RECORD_BYTES: usize = 24;

/// One request of an `oracleGeneral` trace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record {
    /// Request time in seconds.
    pub time: u32,
    /// Object id.
    pub obj_id: u64,
    /// Object size in bytes (fixed per object in this trace).
    pub obj_size: u32,
    /// Virtual time (1-based request number) of the next request to this
    /// object, -1 if never.
    pub next_access_vtime: i64,
}

impl Record {
    /// The cache key used for this object: the 8 little-endian bytes of its id.
    pub fn key(&self) -> [u8; 8] {
        self.obj_id.to_le_bytes()
    }
}

/// Directory holding the shared data files: `$SEGCACHE_DATA` if set, else
/// `<workspace root>/../shared/data`.
pub fn data_dir() -> PathBuf {
    match std::env::var_os("SEGCACHE_DATA") {
        Some(d) if !d.is_empty() => PathBuf::from(d),
        _ => PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/data")),
    }
}

/// Path of the CloudPhysics trace.
pub fn cloudphysics_path() -> PathBuf {
    data_dir().join(CLOUDPHYSICS_FILE)
}

/// Decode a whole `oracleGeneral` byte buffer. Fails if its length is not a
/// multiple of [`RECORD_BYTES`].
pub fn parse(bytes: &[u8]) -> io::Result<Vec<Record>> {
    if bytes.len() % RECORD_BYTES != 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "trace length {} is not a multiple of {RECORD_BYTES}",
                bytes.len()
            ),
        ));
    }
    Ok(bytes
        .chunks_exact(RECORD_BYTES)
        .map(|r| Record {
            time: u32::from_le_bytes(r[0..4].try_into().unwrap()),
            obj_id: u64::from_le_bytes(r[4..12].try_into().unwrap()),
            obj_size: u32::from_le_bytes(r[12..16].try_into().unwrap()),
            next_access_vtime: i64::from_le_bytes(r[16..24].try_into().unwrap()),
        })
        .collect())
}

/// Read and decode an `oracleGeneral` file.
pub fn read(path: &std::path::Path) -> io::Result<Vec<Record>> {
    let bytes = std::fs::read(path)
        .map_err(|e| io::Error::new(e.kind(), format!("reading {}: {e}", path.display())))?;
    parse(&bytes)
}

/// Read the CloudPhysics trace from the data directory.
pub fn read_cloudphysics() -> io::Result<Vec<Record>> {
    read(&cloudphysics_path())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn parses_a_hand_made_record() {
        let mut b = Vec::new();
        b.extend_from_slice(&7u32.to_le_bytes());
        b.extend_from_slice(&0x0102_0304_0506_0708u64.to_le_bytes());
        b.extend_from_slice(&4096u32.to_le_bytes());
        b.extend_from_slice(&(-1i64).to_le_bytes());
        let r = parse(&b).unwrap();
        assert_eq!(
            r,
            vec![Record {
                time: 7,
                obj_id: 0x0102_0304_0506_0708,
                obj_size: 4096,
                next_access_vtime: -1
            }]
        );
        assert!(parse(&b[..23]).is_err());
    }

    #[test]
    fn cloudphysics_has_expected_shape() {
        let t = read_cloudphysics().expect("cloudPhysics trace (set SEGCACHE_DATA)");
        assert_eq!(t.len(), 113_872);
        let mut sizes: HashMap<u64, u32> = HashMap::new();
        for r in &t {
            let s = *sizes.entry(r.obj_id).or_insert(r.obj_size);
            assert_eq!(s, r.obj_size, "object size must be fixed per object");
        }
        assert_eq!(sizes.len(), 48_974);
        // next_access_vtime is the 1-based number of the next request to the
        // same object (-1 if none): check it for every record.
        let mut next_seen: HashMap<u64, i64> = HashMap::new();
        for (i, r) in t.iter().enumerate().rev() {
            let want = next_seen.insert(r.obj_id, i as i64 + 1).unwrap_or(-1);
            assert_eq!(r.next_access_vtime, want, "record {i}");
        }
    }
}

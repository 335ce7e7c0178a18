//! Warm restart: the metadata snapshot written beside a file-backed heap.
//!
//! Owns the snapshot format and its checks. [`save`] writes, next to the
//! datapool file, everything that is not in the heap: settings, the clock
//! (cache time and wall time), segment headers, TTL buckets, the hash table
//! and the counters, plus a CRC-32 of every live heap byte and a CRC-32 of
//! the snapshot itself. It goes to a temporary file, is synced, then renamed
//! into place, so a snapshot is either whole or absent; a failed save
//! removes its temporary file, and [`remove_leftover_tmp`] clears one a
//! crash left behind.
//!
//! [`load`] accepts a snapshot only if it is whole, of this format version,
//! made with the same settings, consistent with itself, and matches the heap
//! byte for byte (by checksum); otherwise it says why and the cache starts
//! empty. It must never hand back anything it has not checked: a cache
//! restored from it serves whatever the heap holds.

use crate::cache::Counters;
use crate::hashtable::{HashTable, Location};
use crate::segments::{SegState, SegmentHeader, Segments, NONE};
use crate::ttl::{TtlBucket, BUCKETS};
use crate::windows::{Window, Windows, MAX_WINDOWS, WINDOW_BYTES};
use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

const MAGIC: [u8; 8] = *b"SEGCMETA";
/// Bumped whenever the snapshot, item or table layout changes.
const VERSION: u32 = 4;

/// The snapshot's path for a datapool file: `<datapool>.meta`.
pub(crate) fn meta_path(datapool: &Path) -> PathBuf {
    let mut name = datapool.as_os_str().to_owned();
    name.push(".meta");
    PathBuf::from(name)
}

/// Where [`save`] writes the snapshot before renaming it into place:
/// `<datapool>.meta.tmp`.
pub(crate) fn tmp_path(datapool: &Path) -> PathBuf {
    let mut name = datapool.as_os_str().to_owned();
    name.push(".meta.tmp");
    PathBuf::from(name)
}

/// Removes a temporary snapshot that an interrupted or failed save left
/// beside `datapool` (it is never valid: only a renamed snapshot is).
/// Returns whether there was one.
pub(crate) fn remove_leftover_tmp(datapool: &Path) -> io::Result<bool> {
    match fs::remove_file(tmp_path(datapool)) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e),
    }
}

/// Settings a snapshot must share with the cache restoring it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Settings {
    pub segment_size: u64,
    pub segments: u64,
}

/// The structures a successful restore hands to the cache.
pub(crate) struct Restored {
    pub ttl: Vec<TtlBucket>,
    pub counters: Counters,
    pub saved_now: u32,
    pub saved_wall: u64,
}

/// Everything a restore needs besides the heap.
pub(crate) struct Snapshot {
    headers: Vec<SegmentHeader>,
    /// The deadline windows of the split segments.
    windows: Vec<(u32, Windows)>,
    ttl: Vec<TtlBucket>,
    table_homes: usize,
    table_words: Vec<u64>,
    counters: Counters,
    saved_now: u32,
    saved_wall: u64,
    heap_crc: u32,
}

/// CRC-32 of the written part of every segment in use.
fn live_heap_crc(segs: &Segments, headers: &[SegmentHeader]) -> u32 {
    let mut crc = crc32fast::Hasher::new();
    for (id, h) in headers.iter().enumerate() {
        if h.state != SegState::Free {
            crc.update(&segs.data(id as u32)[..h.write_offset as usize]);
        }
    }
    crc.finalize()
}

struct Writer(Vec<u8>);

impl Writer {
    fn u8(&mut self, v: u8) {
        self.0.push(v);
    }
    fn u16(&mut self, v: u16) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
}

struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> Result<[u8; N], String> {
        if self.0.len() < N {
            return Err("metadata is truncated".into());
        }
        let (head, rest) = self.0.split_at(N);
        self.0 = rest;
        Ok(head.try_into().expect("length checked"))
    }
    fn u8(&mut self) -> Result<u8, String> {
        Ok(self.take::<1>()?[0])
    }
    fn u16(&mut self) -> Result<u16, String> {
        Ok(u16::from_le_bytes(self.take()?))
    }
    fn u32(&mut self) -> Result<u32, String> {
        Ok(u32::from_le_bytes(self.take()?))
    }
    fn u64(&mut self) -> Result<u64, String> {
        Ok(u64::from_le_bytes(self.take()?))
    }
}

const COUNTERS: usize = 9;

fn counters_to_array(c: &Counters) -> [u64; COUNTERS] {
    [
        c.items,
        c.live_bytes,
        c.hits,
        c.misses,
        c.evictions,
        c.evicted_segments,
        c.expirations,
        c.expired_segments,
        c.merges,
    ]
}

fn counters_from_array(a: [u64; COUNTERS]) -> Counters {
    Counters {
        items: a[0],
        live_bytes: a[1],
        hits: a[2],
        misses: a[3],
        evictions: a[4],
        evicted_segments: a[5],
        expirations: a[6],
        expired_segments: a[7],
        merges: a[8],
    }
}

/// What [`save`] needs from the cache.
pub(crate) struct SaveParts<'a> {
    pub settings: Settings,
    pub segs: &'a Segments,
    pub ttl: &'a [TtlBucket],
    pub table: &'a HashTable,
    pub counters: &'a Counters,
    pub now: u32,
    pub wall: u64,
}

/// Flushes the heap file and writes the snapshot beside it.
pub(crate) fn save(datapool: &Path, parts: SaveParts<'_>) -> io::Result<()> {
    parts.segs.heap().flush()?;
    let headers = &parts.segs.headers;
    let mut w = Writer(Vec::with_capacity(
        64 + headers.len() * 44 + parts.table.bytes(),
    ));
    w.0.extend_from_slice(&MAGIC);
    w.u32(VERSION);
    w.u64(parts.settings.segment_size);
    w.u64(parts.settings.segments);
    w.u32(parts.now);
    w.u64(parts.wall);
    for v in counters_to_array(parts.counters) {
        w.u64(v);
    }
    for h in headers.iter() {
        for v in [
            h.create_at,
            h.expire_at,
            h.expire_last,
            h.write_offset,
            h.live_bytes,
            h.live_items,
            h.prev,
            h.next,
            h.generation,
        ] {
            w.u32(v);
        }
        w.u16(h.ttl_bucket);
        w.u8(h.state as u8);
        w.u8(h.split);
    }
    // The windows of the split segments (also in the heap, past their
    // items, where the heap's checksum does not reach), after all headers.
    for (id, h) in headers.iter().enumerate() {
        if h.split != 0 {
            let windows = parts.segs.windows(id as u32);
            w.u8(windows.as_slice().len() as u8);
            for win in windows.as_slice() {
                let mut bytes = [0u8; WINDOW_BYTES];
                win.encode(&mut bytes);
                w.0.extend_from_slice(&bytes);
            }
        }
    }
    for b in parts.ttl {
        for v in [b.head, b.tail, b.segments, b.merge_cursor] {
            w.u32(v);
        }
    }
    // The table's size is state, not a setting: it grows with the items.
    w.u64(parts.table.homes() as u64);
    for word in parts.table.words() {
        w.u64(word);
    }
    w.u32(live_heap_crc(parts.segs, headers));
    let crc = crc32fast::hash(&w.0);
    w.u32(crc);

    let path = meta_path(datapool);
    let tmp = tmp_path(datapool);
    let written = fs::File::create(&tmp)
        .and_then(|mut file| {
            file.write_all(&w.0)?;
            file.sync_all()
        })
        .and_then(|()| fs::rename(&tmp, &path));
    if let Err(e) = written {
        // Leave the filesystem as it was: no half-written snapshot.
        let _ = fs::remove_file(&tmp);
        return Err(io::Error::new(
            e.kind(),
            format!(
                "writing the {}-byte snapshot {}: {e}",
                w.0.len(),
                path.display()
            ),
        ));
    }
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        // Make the rename durable; not every filesystem allows this.
        let _ = fs::File::open(dir).and_then(|d| d.sync_all());
    }
    Ok(())
}

/// Reads and checks the snapshot at `path` against `settings`.
pub(crate) fn load(path: &Path, settings: Settings) -> Result<Snapshot, String> {
    let bytes = fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    if bytes.len() < MAGIC.len() + 8 || bytes[..8] != MAGIC {
        return Err("not a segcache metadata file".into());
    }
    let (body, tail) = bytes.split_at(bytes.len() - 4);
    let stored_crc = u32::from_le_bytes(tail.try_into().expect("4 bytes"));
    if crc32fast::hash(body) != stored_crc {
        return Err("metadata checksum mismatch (truncated or modified)".into());
    }
    let mut r = Reader(&body[8..]);
    let version = r.u32()?;
    if version != VERSION {
        return Err(format!(
            "metadata format version {version}, this build reads {VERSION}"
        ));
    }
    let saved = Settings {
        segment_size: r.u64()?,
        segments: r.u64()?,
    };
    if saved != settings {
        return Err(format!(
            "settings changed since the save: saved {saved:?}, now {settings:?}"
        ));
    }
    let saved_now = r.u32()?;
    let saved_wall = r.u64()?;
    let mut counters = [0u64; COUNTERS];
    for c in counters.iter_mut() {
        *c = r.u64()?;
    }
    let count = settings.segments as u32;
    let in_range = |id: u32| id == NONE || id < count;
    let mut headers = Vec::with_capacity(count as usize);
    for id in 0..count {
        let mut f = [0u32; 9];
        for v in f.iter_mut() {
            *v = r.u32()?;
        }
        let ttl_bucket = r.u16()?;
        let state = match r.u8()? {
            0 => SegState::Free,
            1 => SegState::Active,
            2 => SegState::Sealed,
            other => return Err(format!("segment {id}: bad state {other}")),
        };
        let split = r.u8()?;
        let h = SegmentHeader {
            create_at: f[0],
            expire_at: f[1],
            expire_last: f[2],
            write_offset: f[3],
            live_bytes: f[4],
            live_items: f[5],
            prev: f[6],
            next: f[7],
            generation: f[8],
            ttl_bucket,
            state,
            split,
        };
        if h.write_offset as u64 > settings.segment_size
            || h.live_bytes > h.write_offset
            || !in_range(h.prev)
            || !in_range(h.next)
            || ttl_bucket as usize >= BUCKETS
        {
            return Err(format!("segment {id}: inconsistent header"));
        }
        headers.push(h);
    }
    let mut windows = Vec::new();
    for (id, h) in headers.iter().enumerate().filter(|(_, h)| h.split != 0) {
        let len = r.u8()? as usize;
        let room = Segments::window_room(len) as u64;
        if !(2..=MAX_WINDOWS).contains(&len)
            || len != h.split as usize
            || h.write_offset as u64 + room > settings.segment_size
        {
            return Err(format!("segment {id}: {len} deadline windows"));
        }
        let mut list = [Window::default(); MAX_WINDOWS];
        for win in &mut list[..len] {
            *win = Window::decode(&r.take::<WINDOW_BYTES>()?);
        }
        let saved = Windows::from_saved(&list[..len], h.write_offset)
            .ok_or_else(|| format!("segment {id}: inconsistent deadline windows"))?;
        windows.push((id as u32, saved));
    }
    let mut ttl = Vec::with_capacity(BUCKETS);
    for _ in 0..BUCKETS {
        let b = TtlBucket {
            head: r.u32()?,
            tail: r.u32()?,
            segments: r.u32()?,
            merge_cursor: r.u32()?,
        };
        if !in_range(b.head) || !in_range(b.tail) || !in_range(b.merge_cursor) || b.segments > count
        {
            return Err("inconsistent TTL bucket".into());
        }
        ttl.push(b);
    }
    let table_homes = r.u64()?;
    // The checksum passed, so this came from a save; still never size an
    // allocation from it beyond what the file holds.
    let words = usize::try_from(table_homes)
        .ok()
        .filter(|&h| h > 0 && HashTable::words_for(h) <= r.0.len() / 8)
        .map(HashTable::words_for)
        .ok_or("metadata: bad hash table size")?;
    let mut table_words = Vec::with_capacity(words);
    for _ in 0..words {
        table_words.push(r.u64()?);
    }
    let heap_crc = r.u32()?;
    if !r.0.is_empty() {
        return Err("metadata has trailing bytes".into());
    }
    Ok(Snapshot {
        headers,
        windows,
        ttl,
        table_homes: table_homes as usize,
        table_words,
        counters: counters_from_array(counters),
        saved_now,
        saved_wall,
        heap_crc,
    })
}

impl Snapshot {
    /// Checks the heap against the snapshot; only then installs the
    /// segment headers into `segs` and returns the rest of the cache's
    /// structures. On error `segs` is untouched.
    pub(crate) fn restore(
        self,
        segs: &mut Segments,
        table: &mut HashTable,
    ) -> Result<Restored, String> {
        if live_heap_crc(segs, &self.headers) != self.heap_crc {
            return Err("heap file does not match the metadata (checksum)".into());
        }
        let headers = &self.headers;
        // Every entry must name a whole item in its segment's written bytes:
        // lookups compare keys there without checking bounds.
        let seg_data = &*segs;
        *table = HashTable::from_words(self.table_homes, &self.table_words, |loc: Location| {
            headers.get(loc.seg as usize).is_some_and(|h| {
                h.state != SegState::Free && seg_data.holds_item(loc, h.write_offset)
            })
        })?;
        segs.headers = self.headers.into_boxed_slice();
        for (id, windows) in &self.windows {
            segs.set_windows(*id, windows);
        }
        segs.rebuild_free_list();
        // Clients of the run that saved may hold tokens of these items:
        // no overwrite in place may keep one valid (until a segment's
        // generation moves on).
        segs.note_tokens_everywhere();
        Ok(Restored {
            ttl: self.ttl,
            counters: self.counters,
            saved_now: self.saved_now,
            saved_wall: self.saved_wall,
        })
    }
}

use super::*;
use proptest::prelude::*;
use std::collections::HashMap;

fn loc(i: u32) -> Location {
    Location {
        seg: i % 1000,
        offset: i / 1000,
    }
}

const NO_GROWTH: fn() -> Option<usize> = || None;

#[test]
fn key_hash_is_ahash_fallback() {
    use std::hash::{BuildHasher, Hasher};
    // Where aHash uses AES hardware (a build with those target
    // features) it computes another function; ours is its portable one.
    if cfg!(any(
        all(
            any(target_arch = "x86", target_arch = "x86_64"),
            target_feature = "aes",
            not(miri)
        ),
        all(target_arch = "aarch64", target_feature = "aes", not(miri))
    )) {
        return;
    }
    let s = key_hash::SEEDS;
    let reference = ahash::RandomState::with_seeds(s[0], s[1], s[2], s[3]);
    let mut bytes = vec![0u8; 300];
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for (i, b) in bytes.iter_mut().enumerate() {
        x = x.rotate_left(7) ^ (i as u64).wrapping_mul(0x2545_f491_4f6c_dd1d);
        *b = x as u8;
    }
    for len in 0..=bytes.len() {
        for start in [0, 1, 7] {
            let key = &bytes[start..(start + len).min(bytes.len())];
            let mut h = reference.build_hasher();
            h.write(key);
            assert_eq!(hash_key(key), h.finish(), "len {}", key.len());
        }
    }
    // Every byte counts: one flipped bit changes the hash.
    for len in [1, 3, 8, 16, 17, 32, 33, 250] {
        let key = &bytes[..len];
        for at in 0..len {
            let mut other = key.to_vec();
            other[at] ^= 1;
            assert_ne!(hash_key(&other), hash_key(key), "len {len}, byte {at}");
        }
    }
}

#[test]
fn key_hash_bits_are_balanced() {
    let n = 50_000u32;
    let mut ones = [0u32; 64];
    for i in 0..n {
        let h = hash_key(format!("key:{i:09}").as_bytes());
        for (bit, count) in ones.iter_mut().enumerate() {
            *count += ((h >> bit) & 1) as u32;
        }
    }
    for (bit, &count) in ones.iter().enumerate() {
        let share = count as f64 / n as f64;
        assert!(
            (0.48..0.52).contains(&share),
            "bit {bit} is set in {share:.3} of hashes"
        );
    }
}

#[test]
fn item_info_round_trips() {
    let l = Location {
        seg: (1 << 20) - 1,
        offset: (1 << 21) - 1,
    };
    let info = pack(0x1f, 0x55, 7, l);
    assert_eq!(location(info), l);
    assert_eq!(frequency(info), 0x55);
    assert_eq!(displacement(info), 7);
    assert_eq!(info >> CHECK_SHIFT, 0x1f);
}

#[test]
fn swar_and_sse2_tag_matching_agree() {
    // Every byte value against words with that byte in chosen lanes,
    // plus random words: the portable and the SSE2 version give the
    // same exact mask (and the mask is right).
    let mut rng = 0x1234_5678_9abc_def1u64;
    let mut next = || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    for _ in 0..20_000 {
        let r = next();
        let byte = (r >> 56) as u8;
        let lanes = next();
        let mut word = next();
        for lane in 0..8 {
            if lanes >> lane & 1 == 1 {
                word = (word & !(0xff << (8 * lane))) | (byte as u64) << (8 * lane);
            }
        }
        let want = (0..7)
            .filter(|&i| (word >> (8 * i)) as u8 == byte)
            .fold(0u32, |m, i| m | 1 << i);
        assert_eq!(match_byte_swar(word, byte), want, "{word:#x} {byte:#x}");
        assert_eq!(match_byte(word, byte), want, "{word:#x} {byte:#x}");
    }
    // Borrow-prone patterns: a zero byte next to 0x01 and 0x80 bytes.
    for word in [0x0100u64, 0x0001, 0x8000_0100, 0x0101_0101_0101_0101, 0x80] {
        for byte in [0u8, 1, 0x80, 0xff] {
            assert_eq!(match_byte_swar(word, byte), match_byte(word, byte));
        }
    }
}

/// Inserts keys `{prefix}-0` .. `{prefix}-{n - 1}` at `loc(i)`, with
/// neither eviction nor growth, checking the item count every `check`
/// inserts. Returns the keys held, by location, and the first index
/// refused (its window full).
fn fill_without_eviction(
    table: &mut HashTable,
    prefix: &str,
    n: u32,
    check: u32,
) -> (HashMap<Location, Vec<u8>>, Option<u32>) {
    let mut keys: HashMap<Location, Vec<u8>> = HashMap::new();
    let mut first_full = None;
    for i in 0..n {
        let key = format!("{prefix}-{i}").into_bytes();
        let hash = hash_key(&key);
        match table.insert(
            hash,
            loc(i),
            false,
            0,
            |at| keys.get(&at) == Some(&key),
            NO_GROWTH,
        ) {
            Ok(ins) => {
                assert_eq!(ins, Inserted::default());
                keys.insert(loc(i), key);
            }
            Err(TableFull) => {
                first_full.get_or_insert(i);
            }
        }
        if i % check == 0 {
            assert_eq!(table.count_items(), keys.len());
        }
    }
    (keys, first_full)
}

/// The table holds exactly `keys`, each found at its location.
fn assert_every_key_found(table: &mut HashTable, keys: &HashMap<Location, Vec<u8>>) {
    assert_eq!(table.count_items(), keys.len());
    for (&at, key) in keys {
        let found = table.lookup(hash_key(key), |l| keys.get(&l) == Some(key));
        assert_eq!(location(found.unwrap().2), at);
    }
}

#[test]
fn fills_most_slots_then_reports_full_or_evicts() {
    // 64 homes x 7 slots = 448 slots (plus 7 spare buckets).
    let mut table = HashTable::new(64);
    let (mut keys, first_full) = fill_without_eviction(&mut table, "key", 448, 448);
    let fill = keys.len() as f64 / 448.0;
    assert!(fill > 0.9, "neighbourhood probing fills {fill:.2} of slots");
    assert!(
        first_full.unwrap_or(448) > 300,
        "first full window at {first_full:?}"
    );
    assert_every_key_found(&mut table, &keys);
    // With eviction allowed, a full window gives up its least-read item.
    let key = b"newcomer".to_vec();
    let hash = hash_key(&key);
    let at = Location {
        seg: 999_999,
        offset: 5,
    };
    let ins = table
        .insert(hash, at, true, 0, |_| false, NO_GROWTH)
        .unwrap();
    if let Some(victim) = ins.evicted {
        assert!(keys.remove(&location(victim)).is_some());
    }
    keys.insert(at, key);
    assert_eq!(table.count_items(), keys.len());
    // Remove everything: every reach shrinks back to zero.
    for (&at, key) in &keys {
        assert!(table.remove_at(hash_key(key), at).is_some());
        assert!(table.remove_at(hash_key(key), at).is_none());
    }
    assert_eq!(table.count_items(), 0);
    assert!(table.table.ctrl.iter().all(|&w| w == 0));
}

#[test]
fn a_rewrite_raises_the_count_to_the_floor_and_never_lowers_it() {
    let mut table = HashTable::new(8);
    let hash = hash_key(b"k");
    let locs = [1u32, 2, 3, 4].map(|seg| Location { seg, offset: 8 });
    table
        .insert(hash, locs[0], false, 0, |_| false, NO_GROWTH)
        .unwrap();
    assert_eq!(frequency(table.info_at(hash, locs[0]).unwrap()), 0);
    let ins = table.insert(hash, locs[1], false, 3, |l| l == locs[0], NO_GROWTH);
    assert_eq!(location(ins.unwrap().replaced.unwrap()), locs[0]);
    assert_eq!(
        frequency(table.info_at(hash, locs[1]).unwrap()),
        3,
        "raised"
    );
    table
        .insert(hash, locs[2], false, 1, |l| l == locs[1], NO_GROWTH)
        .unwrap();
    assert_eq!(frequency(table.info_at(hash, locs[2]).unwrap()), 3, "kept");
    table
        .insert(hash, locs[3], false, 255, |l| l == locs[2], NO_GROWTH)
        .unwrap();
    let info = table.info_at(hash, locs[3]).unwrap();
    assert_eq!(frequency(info) as u64, FREQ_MAX, "capped");
    assert_eq!(
        location(info),
        locs[3],
        "the count does not spill into the location"
    );
}

#[test]
fn insert_replaces_and_keeps_frequency() {
    let mut table = HashTable::new(8);
    let hash = hash_key(b"k");
    let a = Location { seg: 1, offset: 8 };
    let b = Location { seg: 2, offset: 17 };
    assert_eq!(
        table.insert(hash, a, false, 0, |_| true, NO_GROWTH),
        Ok(Inserted::default())
    );
    let (bucket, slot, _) = table.lookup(hash, |l| l == a).unwrap();
    let before = table.table.slots.to_vec();
    table.record_access(bucket, slot, 1);
    let after_first = table.table.slots.to_vec();
    assert_ne!(before, after_first, "the first access of a second counts");
    table.record_access(bucket, slot, 1); // same second: no count, no write
    assert_eq!(table.table.slots.to_vec(), after_first);
    table.record_access(bucket, slot, 2);
    assert_eq!(frequency(table.info_at(hash, a).unwrap()), 2);
    let ins = table
        .insert(hash, b, false, 0, |l| l == a, NO_GROWTH)
        .unwrap();
    assert_eq!(location(ins.replaced.unwrap()), a);
    assert_eq!(frequency(table.info_at(hash, b).unwrap()), 2);
    assert!(table.info_at(hash, a).is_none());
    let (bucket, slot, _) = table.locate(hash, b).unwrap();
    table.move_slot(bucket, slot, a);
    assert_eq!(
        frequency(table.info_at(hash, a).unwrap()),
        1,
        "moving halves"
    );
    assert!(
        table.locate(hash, b).is_none(),
        "nothing points at b any more"
    );
    table.set_frequency(bucket, slot, 200);
    assert_eq!(frequency(table.info_at(hash, a).unwrap()), 127, "capped");
    let before = table.info_at(hash, a).unwrap();
    table.relocate(bucket, slot, b);
    let after = table.info_at(hash, b).unwrap();
    assert_eq!(location(after), b);
    assert_eq!(
        after & !(SEG_MASK << SEG_SHIFT | OFFSET_MASK),
        before & !(SEG_MASK << SEG_SHIFT | OFFSET_MASK),
        "relocating keeps the counter, stamp, check bits and displacement"
    );
    assert!(table.info_at(hash, a).is_none());
    table.relocate(bucket, slot, a);
    assert_eq!(location(table.clear_at(bucket, slot)), a);
    assert!(table.info_at(hash, a).is_none());
}

/// Multi-step hopscotch: a full window takes a free slot from well
/// past it, moved back one hop at a time, so the table fills densely
/// before any insert fails; every item stays findable and within its
/// home's reach throughout.
#[test]
fn full_windows_borrow_free_slots_from_far_away() {
    let homes = 1024;
    let slots = homes * SLOTS;
    let mut table = HashTable::new(homes);
    let (keys, first_full) = fill_without_eviction(&mut table, "dense", slots as u32, 512);
    // One hop (the earlier rule) first failed at 78% of the slots and
    // held 96.8% in the end; hops from up to HOP_SEARCH buckets away
    // reach 88% and 97.9%.
    let first_full = first_full.map_or(slots, |i| i as usize);
    assert!(
        first_full * 100 > slots * 85,
        "first full window at {first_full} of {slots} slots"
    );
    assert!(
        keys.len() * 1000 > slots * 975,
        "held {} of {slots}",
        keys.len()
    );
    assert_every_key_found(&mut table, &keys);
}

/// The read path's two steps (`probe_home`, then `lookup_probed` unless
/// the probe proves the key absent) answer as `lookup` does, in a table
/// dense enough that many keys live in displaced buckets; the probe's
/// "absent" is never wrong and rules out most absent keys without a
/// slot read.
#[test]
fn a_home_probe_then_lookup_answers_as_lookup_does() {
    let homes = 256;
    let mut table = HashTable::new(homes);
    let (keys, _) = fill_without_eviction(&mut table, "probe", (homes * SLOTS) as u32, 512);
    let displaced = keys
        .iter()
        .filter(|(_, key)| {
            let found = table.lookup(hash_key(key), |l| keys.get(&l) == Some(*key));
            (found.unwrap().2 >> DISP_SHIFT) & DISP_MASK != 0
        })
        .count();
    assert!(
        displaced > keys.len() / 20,
        "only {displaced} displaced keys"
    );
    let probed = |key: &[u8]| {
        let hash = hash_key(key);
        let probe = table.probe_home(hash);
        assert_eq!(probe.proves_absent(), table.absent_by_tags(hash));
        if probe.proves_absent() {
            return None;
        }
        table
            .lookup_probed(hash, probe, |l| {
                (keys.get(&l).map(|k| &k[..]) == Some(key)).then_some(())
            })
            .map(|(b, s, info, ())| (b, s, location(info)))
    };
    for (&at, key) in &keys {
        let want = table.lookup(hash_key(key), |l| keys.get(&l) == Some(key));
        assert_eq!(probed(key), want.map(|(b, s, info)| (b, s, location(info))));
        assert_eq!(probed(key).unwrap().2, at);
    }
    let mut ruled_out = 0;
    for i in 0..2000 {
        let key = format!("absent-{i}").into_bytes();
        assert_eq!(probed(&key), None);
        ruled_out += table.probe_home(hash_key(&key)).proves_absent() as usize;
    }
    assert!(ruled_out > 200, "tags ruled out only {ruled_out} of 2000");
}

#[test]
fn eviction_from_a_full_window_takes_the_least_read() {
    // One home: every key lands in bucket 0, the window is buckets 0..8.
    let mut table = HashTable::new(1);
    let mut placed = vec![];
    for i in 0..56u32 {
        let hash = hash_key(&i.to_le_bytes());
        table
            .insert(hash, loc(i), false, 0, |_| false, NO_GROWTH)
            .unwrap();
        placed.push((hash, loc(i)));
    }
    // Read every item but #13 twice, in two different seconds.
    for now in [1, 2] {
        for (i, &(hash, at)) in placed.iter().enumerate() {
            if i != 13 {
                let (b, s, _) = table.lookup(hash, |l| l == at).unwrap();
                table.record_access(b, s, now);
            }
        }
    }
    let hash = hash_key(b"one more");
    assert_eq!(
        table.insert(hash, loc(99), false, 0, |_| false, NO_GROWTH),
        Err(TableFull)
    );
    let ins = table
        .insert(hash, loc(99), true, 0, |_| false, NO_GROWTH)
        .unwrap();
    assert_eq!(location(ins.evicted.unwrap()), loc(13));
    assert_eq!(table.count_items(), 56);
}

#[test]
fn frequency_saturates() {
    let mut table = HashTable::new(8);
    let hash = hash_key(b"hot");
    let l = Location { seg: 0, offset: 0 };
    table
        .insert(hash, l, false, 0, |_| false, NO_GROWTH)
        .unwrap();
    for now in 0..100_000u32 {
        let (b, s, _) = table.lookup(hash, |x| x == l).unwrap();
        table.record_access(b, s, now);
    }
    let f = frequency(table.info_at(hash, l).unwrap());
    assert!(f > 16 && f <= 127, "got {f}");
}

#[test]
fn grows_when_windows_fill_and_drains_incrementally() {
    // Keys are their index; the "heap" maps a location to its key.
    let mut table = HashTable::new(16);
    let mut heap: HashMap<Location, u32> = HashMap::new();
    let hash_of = |i: u32| hash_key(&i.to_le_bytes());
    let n = 5_000u32;
    let mut growths = 0;
    for i in 0..n {
        let was = table.homes();
        let ins = table
            .insert(hash_of(i), loc(i), false, 0, |_| false, || Some(n as usize))
            .expect("growth makes room");
        assert_eq!(ins, Inserted::default());
        heap.insert(loc(i), i);
        growths += (table.homes() != was) as u32;
        // A bounded drain per insert: never the whole table at once.
        table.grow_step(GROW_STEP_WRITE, |at| hash_of(heap[&at]));
        assert!(table.take_dropped().is_none());
        if i % 97 == 0 {
            assert_eq!(table.count_items(), heap.len());
        }
    }
    assert!(growths >= 2, "grew {growths} times");
    assert!(table.slots() >= n as usize);
    table.finish_growth(|at| hash_of(heap[&at]));
    assert!(!table.is_growing());
    for (&at, &i) in &heap {
        assert_eq!(
            table.locate(hash_of(i), at).map(|x| location(x.2)),
            Some(at)
        );
    }
    assert_eq!(table.count_items(), n as usize);
}

#[test]
fn snapshot_words_round_trip_and_bad_words_are_refused() {
    let mut table = HashTable::new(100);
    for i in 0..500u32 {
        table
            .insert(
                hash_key(&i.to_le_bytes()),
                loc(i),
                false,
                0,
                |_| false,
                NO_GROWTH,
            )
            .unwrap();
    }
    let words: Vec<u64> = table.words().collect();
    assert_eq!(words.len(), HashTable::words_for(100));
    let mut back = HashTable::from_words(100, &words, |_| true).unwrap();
    assert_eq!(back.count_items(), 500);
    for i in 0..500u32 {
        assert!(back.locate(hash_key(&i.to_le_bytes()), loc(i)).is_some());
    }
    assert!(HashTable::from_words(101, &words, |_| true).is_err());
    assert!(HashTable::from_words(100, &words, |l| l.seg != 7).is_err());
    // Data in a slot whose tag says empty.
    let mut torn = words.clone();
    let (ctrl, slots) = torn.split_at_mut(107);
    let empty = (0..slots.len())
        .find(|&j| (ctrl[j / SLOTS] >> (8 * (j % SLOTS))) & 0xff == 0)
        .unwrap();
    slots[empty] = 5;
    assert!(HashTable::from_words(100, &torn, |_| true).is_err());
    // An item homed past the last home.
    let mut torn = words.clone();
    torn[106] |= 0xff;
    torn[107 + 106 * SLOTS] = pack(0, 0, 0, loc(1));
    assert!(HashTable::from_words(100, &torn, |_| true).is_err());
}

#[derive(Clone, Debug)]
enum Op {
    Insert(u16),
    Remove(u16),
    Read(u16, u32),
    Step,
}

fn ops() -> impl Strategy<Value = Vec<Op>> {
    prop::collection::vec(
        prop_oneof![
            6 => (0u16..600).prop_map(Op::Insert),
            2 => (0u16..600).prop_map(Op::Remove),
            3 => (0u16..600, 0u32..5).prop_map(|(k, t)| Op::Read(k, t)),
            1 => Just(Op::Step),
        ],
        1..1500,
    )
}

proptest! {
    /// The table against a `HashMap` model: keys 0..600 (the key of a
    /// location is in a side map, as the heap would hold it), inserts
    /// that may grow the table mid-run, removals, counted reads and
    /// drain steps. Every answer matches the model; the structure's
    /// invariants (tags agree with slots, reaches cover their items,
    /// nothing left behind the drain cursor) hold throughout.
    #[test]
    fn table_matches_a_hashmap_model(ops in ops(), homes in 1usize..40, grow in any::<bool>()) {
        let mut table = HashTable::new(homes);
        let mut model: HashMap<u16, Location> = HashMap::new();
        let mut heap: HashMap<Location, u16> = HashMap::new();
        let mut next = 0u32;
        let hash_of = |k: u16| hash_key(&k.to_le_bytes());
        for (step, op) in ops.into_iter().enumerate() {
            match op {
                Op::Insert(k) => {
                    let at = loc(next);
                    next += 1;
                    let heap_ref = &heap;
                    let r = table.insert(
                        hash_of(k),
                        at,
                        true,
                        0,
                        |l| heap_ref.get(&l) == Some(&k),
                        || grow.then_some(700),
                    );
                    match r {
                        Ok(ins) => {
                            let old = model.insert(k, at);
                            prop_assert_eq!(ins.replaced.map(location), old);
                            if let Some(v) = ins.evicted {
                                let gone = heap.remove(&location(v)).unwrap();
                                prop_assert_eq!(model.remove(&gone), Some(location(v)));
                            }
                            if let Some(o) = old {
                                heap.remove(&o);
                            }
                            heap.insert(at, k);
                        }
                        Err(TableFull) => prop_assert!(false, "evicting inserts never fail"),
                    }
                }
                Op::Remove(k) => {
                    let got = model.get(&k).and_then(|&at| table.remove_at(hash_of(k), at));
                    prop_assert_eq!(got.map(location), model.remove(&k));
                    if let Some(v) = got {
                        heap.remove(&location(v));
                    }
                }
                Op::Read(k, t) => {
                    let heap_ref = &heap;
                    let found = table.lookup(hash_of(k), |l| heap_ref.get(&l) == Some(&k));
                    prop_assert_eq!(found.map(|f| location(f.2)), model.get(&k).copied());
                    if !table.is_growing() {
                        // The read path's probe, then lookup from it.
                        let probe = table.probe_home(hash_of(k));
                        let probed = if probe.proves_absent() {
                            None
                        } else {
                            table
                                .lookup_probed(hash_of(k), probe, |l| {
                                    (heap_ref.get(&l) == Some(&k)).then_some(())
                                })
                                .map(|(b, s, info, ())| (b, s, info))
                        };
                        prop_assert_eq!(probed, found);
                    }
                    if let Some((b, s, _)) = found {
                        table.record_access(b, s, t);
                    }
                }
                Op::Step => {}
            }
            let heap_ref = &heap;
            table.grow_step(GROW_STEP_WRITE, |l| hash_of(heap_ref[&l]));
            while let Some(v) = table.take_dropped() {
                let gone = heap.remove(&location(v)).unwrap();
                model.remove(&gone);
            }
            if step % 50 == 0 {
                prop_assert_eq!(table.count_items(), model.len());
            }
        }
        prop_assert_eq!(table.count_items(), model.len());
        for (&k, &at) in &model {
            prop_assert_eq!(table.locate(hash_of(k), at).map(|x| location(x.2)), Some(at));
        }
    }
}

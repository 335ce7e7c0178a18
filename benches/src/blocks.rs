//! Synthetic block-I/O traces: shapes a database or file server produces,
//! to check the eviction policy on more than the one real block trace the
//! project has (issue 13 asks not to tune to one trace).
//!
//! Owns generating [`Record`]s in the `oracleGeneral` layout the trace
//! replay reads (fixed 512-byte blocks, as in the ARC paper's OLTP trace;
//! one request per simulated 4 ms; `next_access_vtime` filled in), and the
//! cold prefix that fills a cache before any trace ([`cold_prefix`]).
//! Every shape is seeded and deterministic. It never replays anything
//! itself.

use crate::trace::Record;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, Zipf};
use std::collections::HashMap;

/// Bytes per block.
pub const BLOCK: u32 = 512;
/// Requests per generated trace (the ARC paper's OLTP trace has 914,145).
pub const REQUESTS: usize = 914_000;

/// The shapes [`generate`] makes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Shape {
    /// Random reads, Zipf 0.6 over 186,000 blocks: weak skew, a large
    /// footprint.
    Zipf,
    /// Four reads in five Zipf 0.9 over 186,000 blocks, the fifth starts a
    /// sequential scan (exponential length, mean 16 blocks) from a random
    /// block: index lookups and range scans.
    Scan,
    /// Half the reads Zipf 0.9 over a hot set of 20,000 blocks, half a
    /// loop over 40,000 other blocks, in order, again and again: a table
    /// scanned repeatedly beside a hot index (LRU's worst case).
    Loop,
}

impl Shape {
    /// Name used in tables and on the command line.
    pub fn label(self) -> &'static str {
        match self {
            Shape::Zipf => "zipf",
            Shape::Scan => "scan",
            Shape::Loop => "loop",
        }
    }
}

/// Block ids drawn from a Zipf law over `n` blocks, the ranks shuffled over
/// the ids so that popular blocks are not neighbours.
struct Popularity {
    zipf: Zipf<f64>,
    ids: Vec<u64>,
}

impl Popularity {
    fn new(n: u64, alpha: f64, offset: u64, rng: &mut StdRng) -> Self {
        let mut ids: Vec<u64> = (offset..offset + n).collect();
        for i in (1..ids.len()).rev() {
            ids.swap(i, rng.gen_range(0..=i));
        }
        Popularity {
            zipf: Zipf::new(n, alpha).expect("valid Zipf parameters"),
            ids,
        }
    }

    fn draw(&self, rng: &mut StdRng) -> u64 {
        // Zipf yields ranks 1..=n as floats.
        let rank = self.zipf.sample(rng) as usize;
        self.ids[rank.clamp(1, self.ids.len()) - 1]
    }
}

/// The block ids of one trace of `shape`.
fn block_ids(shape: Shape, seed: u64) -> Vec<u64> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut out = Vec::with_capacity(REQUESTS + 1024);
    match shape {
        Shape::Zipf => {
            let pop = Popularity::new(186_000, 0.6, 0, &mut rng);
            while out.len() < REQUESTS {
                out.push(pop.draw(&mut rng));
            }
        }
        Shape::Scan => {
            let blocks = 186_000u64;
            let pop = Popularity::new(blocks, 0.9, 0, &mut rng);
            while out.len() < REQUESTS {
                if rng.gen_bool(0.2) {
                    let start = rng.gen_range(0..blocks);
                    let len = 1 + (-16.0 * (1.0 - rng.gen::<f64>()).ln()) as u64;
                    out.extend((0..len).map(|k| (start + k) % blocks));
                } else {
                    out.push(pop.draw(&mut rng));
                }
            }
        }
        Shape::Loop => {
            let (hot, cycle) = (20_000u64, 40_000u64);
            let pop = Popularity::new(hot, 0.9, 0, &mut rng);
            let mut next = 0;
            while out.len() < REQUESTS {
                if rng.gen_bool(0.5) {
                    out.push(pop.draw(&mut rng));
                } else {
                    out.push(hot + next);
                    next = (next + 1) % cycle;
                }
            }
        }
    }
    out.truncate(REQUESTS);
    out
}

/// A trace of `shape`: [`REQUESTS`] reads of [`BLOCK`]-byte blocks.
pub fn generate(shape: Shape, seed: u64) -> Vec<Record> {
    let ids = block_ids(shape, seed);
    let mut next_at: HashMap<u64, i64> = HashMap::new();
    let mut records = vec![
        Record {
            time: 0,
            obj_id: 0,
            obj_size: BLOCK,
            next_access_vtime: -1,
        };
        ids.len()
    ];
    for (i, &id) in ids.iter().enumerate().rev() {
        records[i] = Record {
            time: (i / 250) as u32,
            obj_id: id,
            obj_size: BLOCK,
            next_access_vtime: next_at.insert(id, i as i64 + 1).unwrap_or(-1),
        };
    }
    records
}

/// Requests that fill a cache with `bytes` of cold objects before `trace`
/// (`trace --fill-first-mib`): objects read once each, their sizes those of
/// requests of `trace` drawn at random (seeded), their ids above every id
/// in `trace`, at its first request's time. Empty if `trace` is.
pub fn cold_prefix(trace: &[Record], bytes: u64, seed: u64) -> Vec<Record> {
    let Some(first) = trace.first() else {
        return Vec::new();
    };
    let mut rng = StdRng::seed_from_u64(seed);
    let mut id = trace.iter().map(|r| r.obj_id).max().unwrap_or(0);
    let (mut out, mut total) = (Vec::new(), 0u64);
    while total < bytes {
        let size = trace[rng.gen_range(0..trace.len())].obj_size;
        id += 1;
        out.push(Record {
            time: first.time,
            obj_id: id,
            obj_size: size,
            next_access_vtime: -1,
        });
        total += size.max(1) as u64;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn shapes_are_deterministic_and_link_each_request_to_the_next() {
        for shape in [Shape::Zipf, Shape::Scan, Shape::Loop] {
            let t = generate(shape, 7);
            assert_eq!(t.len(), REQUESTS);
            assert_eq!(t, generate(shape, 7), "{shape:?} is seeded");
            assert_ne!(t, generate(shape, 8), "{shape:?} follows its seed");
            for (i, r) in t.iter().enumerate().take(50_000) {
                assert_eq!(r.obj_size, BLOCK);
                if r.next_access_vtime > 0 {
                    let j = r.next_access_vtime as usize - 1;
                    assert!(j > i && t[j].obj_id == r.obj_id);
                    assert!(t[i + 1..j].iter().all(|o| o.obj_id != r.obj_id));
                }
            }
        }
    }

    #[test]
    fn a_cold_prefix_is_new_objects_read_once_with_the_traces_sizes() {
        let trace: Vec<Record> = (0..100u64)
            .map(|i| Record {
                time: 7 + i as u32,
                obj_id: 1_000 + i % 10,
                obj_size: if i % 2 == 0 { 512 } else { 4096 },
                next_access_vtime: -1,
            })
            .collect();
        let p = cold_prefix(&trace, 1 << 20, 1);
        let bytes: u64 = p.iter().map(|r| r.obj_size as u64).sum();
        assert!((1 << 20..(1 << 20) + 4096).contains(&bytes), "{bytes}");
        let ids: HashSet<u64> = p.iter().map(|r| r.obj_id).collect();
        assert_eq!(ids.len(), p.len(), "each read once");
        assert!(ids.iter().all(|&id| id > 1_009), "none of the trace's ids");
        assert!(p
            .iter()
            .all(|r| r.time == 7 && [512, 4096].contains(&r.obj_size)));
        assert!(p.iter().any(|r| r.obj_size == 512) && p.iter().any(|r| r.obj_size == 4096));
        assert_eq!(p, cold_prefix(&trace, 1 << 20, 1), "seeded");
        assert!(cold_prefix(&[], 1 << 20, 1).is_empty());
    }

    #[test]
    fn the_loop_repeats_its_blocks_in_order_beside_the_hot_set() {
        let t = generate(Shape::Loop, 1);
        let looped: Vec<u64> = t
            .iter()
            .map(|r| r.obj_id)
            .filter(|&id| id >= 20_000)
            .collect();
        assert!(looped
            .windows(2)
            .all(|w| w[1] == w[0] + 1 || (w[0] == 59_999 && w[1] == 20_000)));
        let share = looped.len() as f64 / t.len() as f64;
        assert!((0.49..0.51).contains(&share), "{share}");
        let hot: HashSet<u64> = t
            .iter()
            .map(|r| r.obj_id)
            .filter(|&id| id < 20_000)
            .collect();
        assert!(hot.len() > 15_000, "{}", hot.len());
    }
}

//! Runners of the memory subcommands: `full-heap` (the cache's own
//! accounting at a full heap) and `memory` (the allocator's and the
//! kernel's view, one fresh child process per cache).

use super::MIB;
use segcache_bench::alloc;
use segcache_bench::fullheap;
use segcache_bench::sim::{self, Kind, SimCache};
use std::process::Command;

/// `full-heap`: one row per heap size and starting table, bytes per
/// item split by where they go.
pub fn run_full_heap(configs: &[String], overfill: f64, segment_size: usize) -> Result<(), String> {
    println!(
        "segcache bytes per item at a full heap: {} B keys + {} B values, merge eviction, {overfill}x heap written, {} KiB segments\n",
        fullheap::KEY,
        fullheap::VALUE,
        segment_size >> 10
    );
    println!("| heap MiB | hash_power (start) | table MiB (end) | items held | table load | B/item all-in | overhead B/item | = item header | + table | + seg headers | + ghosts | + unused heap |");
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|");
    let mut best: Option<(f64, String)> = None;
    for c in configs {
        let (heap, hp) = match c.split_once(':') {
            None => (c.parse::<usize>().ok(), None),
            Some((h, p)) => (h.parse::<usize>().ok(), p.parse::<u8>().ok()),
        };
        let heap = heap
            .filter(|_| c.split_once(':').is_none_or(|_| hp.is_some()))
            .ok_or(format!(
                "bad config {c:?}; expected HEAP_MIB (default table) or HEAP_MIB:HASH_POWER"
            ))?;
        let r =
            fullheap::measure(heap << 20, segment_size, hp, overfill).map_err(|e| e.to_string())?;
        let hint = hp.map_or("default".to_string(), |p| p.to_string());
        println!(
            "| {heap} | {hint} | {:.1} | {} | {:.0}% | {:.1} | {:.1} | {:.1} | {:.1} | {:.2} | {:.2} | {:.1} |",
            r.stats.hash_table_bytes as f64 / MIB,
            r.stats.items,
            100.0 * r.table_load(),
            r.per_item(),
            r.overhead(),
            r.item_header(),
            r.table_share(),
            r.header_share(),
            r.admission_share(),
            r.slack_share()
        );
        if best.as_ref().is_none_or(|b| r.overhead() < b.0) {
            best = Some((r.overhead(), format!("{heap} MiB heap, hash_power {hint}")));
        }
    }
    if let Some((o, name)) = best {
        println!("\nBest: {name}: {o:.1} B/item overhead (target <= 16).");
    }
    Ok(())
}

const MEM_KEY: usize = 32;
const MEM_VALUE: usize = 64;

/// `memory`: one fresh child process per cache (`measure_one`), so that
/// each RSS is its own.
pub fn run_memory(items: u64) -> Result<(), String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    println!("Memory overhead: {items} items of {MEM_KEY} B key + {MEM_VALUE} B value, one fresh process per cache\n");
    println!("| cache | items held | allocated MiB | alloc overhead B/item | RSS delta MiB | RSS overhead B/item |");
    println!("|---|---|---|---|---|---|");
    let kinds = [Kind::Segcache, Kind::Moka, Kind::QuickCache, Kind::Lru];
    for k in kinds {
        let out = Command::new(&exe)
            .args(["memory", "--items", &items.to_string(), "--only", k.label()])
            .output()
            .map_err(|e| e.to_string())?;
        let text = String::from_utf8_lossy(&out.stdout);
        let line = text.lines().find(|l| l.starts_with("RESULT"));
        match line {
            Some(l) => {
                let f: Vec<f64> = l
                    .split_whitespace()
                    .skip(1)
                    .map(|v| v.parse().unwrap())
                    .collect();
                let (held, alloc_b, rss_b) = (f[0], f[1], f[2]);
                let payload = (MEM_KEY + MEM_VALUE) as f64;
                println!(
                    "| {} | {held} | {:.1} | {:.1} | {:.1} | {:.1} |",
                    k.label(),
                    alloc_b / MIB,
                    alloc_b / held - payload,
                    rss_b / MIB,
                    rss_b / held - payload
                );
            }
            None => println!(
                "| {} | n/a: {} | | | | |",
                k.label(),
                String::from_utf8_lossy(&out.stderr)
                    .lines()
                    .last()
                    .unwrap_or("failed")
            ),
        }
    }
    println!(
        "\nOverhead = bytes per held item minus the {} payload bytes.",
        MEM_KEY + MEM_VALUE
    );
    Ok(())
}

fn mem_key(i: u64, buf: &mut Vec<u8>) {
    buf.clear();
    buf.extend_from_slice(&i.to_le_bytes());
    buf.resize(MEM_KEY, b'm');
}

/// Writes the `items` keys of [`mem_key`] with [`MEM_VALUE`]-byte values.
fn fill(c: &mut dyn SimCache, items: u64) {
    let mut key = Vec::with_capacity(MEM_KEY);
    for i in 0..items {
        mem_key(i, &mut key);
        c.set(&key, MEM_VALUE, None, 0);
    }
}

/// How many of the `items` keys [`fill`] wrote the cache still holds.
fn count_held(c: &mut dyn SimCache, items: u64) -> u64 {
    let mut key = Vec::with_capacity(MEM_KEY);
    (0..items)
        .filter(|&i| {
            mem_key(i, &mut key);
            c.get(&key, 0)
        })
        .count() as u64
}

/// Insert `items` items into an unconstrained instance of `kind` and print
/// `RESULT held alloc_bytes rss_bytes`.
pub fn measure_one(kind: Kind, items: u64) -> Result<(), String> {
    let (held, alloc_b, rss_b) = match kind {
        Kind::Segcache => segcache_memory(items)?,
        _ => {
            let rss0 = alloc::rss_bytes();
            let a0 = alloc::live_bytes();
            let sizing = sim::Sizing {
                per_item: 0,
                capacity: u64::MAX / 4,
            };
            let mut c: Box<dyn SimCache> = match kind {
                Kind::Moka => Box::new(sim::MokaSim::new(sizing)),
                Kind::QuickCache => {
                    Box::new(sim::QuickSim::new(sizing, (MEM_KEY + MEM_VALUE) as u64))
                }
                _ => Box::new(sim::LruSim::new(sizing)),
            };
            fill(c.as_mut(), items);
            c.settle();
            let a = alloc::live_bytes() - a0;
            let r = alloc::rss_bytes().saturating_sub(rss0);
            (count_held(c.as_mut(), items), a, r)
        }
    };
    println!("RESULT {held} {alloc_b} {rss_b}");
    Ok(())
}

fn segcache_memory(items: u64) -> Result<(u64, usize, usize), String> {
    // Size the heap from the payload, growing it until every item is held;
    // the hash table gets one bucket per ~4 items.
    let mut hp = 4u8;
    while (1u64 << hp) * 4 < items {
        hp += 1;
    }
    let mut heap_per_item = (MEM_KEY + MEM_VALUE + 8) as f64;
    loop {
        let seg = sim::SEGMENT_SIZE;
        let heap = (((items as f64 * heap_per_item) as usize / seg) + 2) * seg;
        let rss0 = alloc::rss_bytes();
        let a0 = alloc::live_bytes();
        let mut c = sim::SegcacheSim::with_params(heap, seg, hp, segcache::Eviction::Merge)
            .map_err(|e| format!("{e:?}"))?;
        fill(&mut c, items);
        // The heap is an anonymous mmap, outside the counting allocator.
        let a = alloc::live_bytes() - a0 + c.mapped_bytes();
        let r = alloc::rss_bytes().saturating_sub(rss0);
        let held = count_held(&mut c, items);
        // The neighbourhood hash table may drop the odd key from a full
        // window even at low load; 99.9% held is "all of them" here (and
        // the table reports the count actually held).
        if held as f64 >= 0.999 * items as f64 || heap_per_item > 1024.0 {
            return Ok((held, a, r));
        }
        drop(c);
        heap_per_item *= 1.05;
    }
}

//! Warm-restart benchmark: save and restore times for heaps full of small
//! items, and throughput with a file-backed heap against anonymous memory.
//!
//! `cargo run --release -p segcache-bench --bin restart -- [--gib 1,4] [--dir /dev/shm]`
//! prints markdown tables. Items are 32-byte keys with 64-byte values, the
//! issue's "small items". The datapool lives in `--dir` (tmpfs by default,
//! so the numbers show the cache's own work, not a disk).

use segcache::Segcache;
use std::path::{Path, PathBuf};
use std::time::Instant;

fn key(i: u64) -> [u8; 32] {
    let mut k = [b'k'; 32];
    k[..8].copy_from_slice(&i.to_le_bytes());
    k
}

fn builder(heap: usize, pool: Option<&Path>) -> segcache::Builder {
    let b = Segcache::builder().heap_size(heap).restore(pool.is_some());
    match pool {
        Some(p) => b.datapool(p),
        None => b,
    }
}

/// Fills `cache` until every segment is in use; returns keys written.
fn fill(cache: &mut Segcache) -> u64 {
    let value = [7u8; 64];
    for i in 0.. {
        cache.set(key(i), value, 0, None).expect("set");
        if i % 4096 == 0 && cache.stats().segments_free == 0 {
            return i + 1;
        }
    }
    unreachable!()
}

fn remove(pool: &Path) {
    let _ = std::fs::remove_file(pool);
    let mut meta = pool.as_os_str().to_owned();
    meta.push(".meta");
    let _ = std::fs::remove_file(PathBuf::from(meta));
}

fn save_restore(gibs: &[usize], dir: &Path) {
    println!("| heap | items | fill (s) | save (s) | restore (s) | restore GiB/s | items after restore |");
    println!("| --- | --- | --- | --- | --- | --- | --- |");
    for &gib in gibs {
        let heap = gib << 30;
        let pool = dir.join(format!("segcache-bench-{gib}g.pool"));
        remove(&pool);
        let mut cache = builder(heap, Some(&pool)).build().expect("build");
        let t = Instant::now();
        fill(&mut cache);
        let fill_s = t.elapsed().as_secs_f64();
        let items = cache.len();
        let t = Instant::now();
        cache.save().expect("save");
        let save_s = t.elapsed().as_secs_f64();
        let t = Instant::now();
        let cache = builder(heap, Some(&pool)).build().expect("restore");
        let restore_s = t.elapsed().as_secs_f64();
        let after = cache.len();
        drop(cache);
        remove(&pool);
        println!(
            "| {gib} GiB | {items} | {fill_s:.2} | {save_s:.2} | {restore_s:.2} | {:.1} | {after} |",
            gib as f64 / restore_s
        );
    }
}

fn ops_per_sec(cache: &mut Segcache, n: u64, keys: u64) -> (f64, f64) {
    let value = [9u8; 64];
    let mut r = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = || {
        r ^= r << 13;
        r ^= r >> 7;
        r ^= r << 17;
        r % keys
    };
    let idx: Vec<u64> = (0..n).map(|_| next()).collect();
    let t = Instant::now();
    let mut found = 0u64;
    for &i in &idx {
        found += cache.get(key(i)).is_some() as u64;
    }
    let get = n as f64 / t.elapsed().as_secs_f64();
    let t = Instant::now();
    for &i in &idx {
        cache.set(key(i), value, 0, None).expect("set");
    }
    let set = n as f64 / t.elapsed().as_secs_f64();
    assert!(found > 0);
    (get, set)
}

/// Median of `rounds` runs, alternating the two backings so that load
/// from other processes hits both alike.
fn throughput(dir: &Path) {
    let heap = 256 << 20;
    let rounds = 5;
    let pool = dir.join("segcache-bench-tp.pool");
    let mut anon = (Vec::new(), Vec::new());
    let mut file = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        for backing in [None, Some(pool.as_path())] {
            if let Some(p) = backing {
                remove(p);
            }
            let mut cache = builder(heap, backing).build().expect("build");
            let keys = fill(&mut cache);
            let (get, set) = ops_per_sec(&mut cache, 1_000_000, keys);
            let out = if backing.is_some() {
                &mut file
            } else {
                &mut anon
            };
            out.0.push(get);
            out.1.push(set);
        }
    }
    remove(&pool);
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (ag, asx) = (median(&mut anon.0), median(&mut anon.1));
    let (fg, fs) = (median(&mut file.0), median(&mut file.1));
    println!("| heap backing | get Mops/s | set Mops/s | ratio get | ratio set |");
    println!("| --- | --- | --- | --- | --- |");
    println!(
        "| anonymous | {:.2} | {:.2} | 1.00 | 1.00 |",
        ag / 1e6,
        asx / 1e6
    );
    println!(
        "| file on {} | {:.2} | {:.2} | {:.2} | {:.2} |",
        dir.display(),
        fg / 1e6,
        fs / 1e6,
        fg / ag,
        fs / asx
    );
}

const USAGE: &str = "usage: restart [--gib LIST] [--dir DIR]
  --gib LIST  heap sizes in whole GiB, comma-separated (default 1,4)
  --dir DIR   where the datapool files go (default /dev/shm)";

fn main() {
    let args: Vec<String> = std::env::args().collect();
    // Flags come in pairs; anything else is a mistake, reported before any
    // long run starts.
    let mut rest = args.iter().skip(1);
    while let Some(flag) = rest.next() {
        match flag.as_str() {
            "-h" | "--help" => {
                println!("{USAGE}");
                return;
            }
            "--gib" | "--dir" if rest.next().is_some() => {}
            _ => {
                eprintln!("restart: unexpected argument {flag:?}\n{USAGE}");
                std::process::exit(2);
            }
        }
    }
    let arg = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let gibs: Vec<usize> = arg("--gib")
        .unwrap_or_else(|| "1,4".into())
        .split(',')
        .map(|s| s.parse().expect("--gib takes a list of whole GiB"))
        .collect();
    let dir = PathBuf::from(arg("--dir").unwrap_or_else(|| "/dev/shm".into()));
    println!(
        "## Save and restore (32 B keys, 64 B values, datapool in {})\n",
        dir.display()
    );
    save_restore(&gibs, &dir);
    println!("\n## Throughput, 256 MiB heap full of small items, 1M random gets then sets, median of 5 alternating rounds\n");
    throughput(&dir);
}

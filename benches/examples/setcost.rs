//! Scratch: steady-state overwrite cost (not committed).
use std::time::Instant;
fn main() {
    let n: u64 = std::env::args()
        .nth(1)
        .map(|s| s.parse().unwrap())
        .unwrap_or(100_000);
    let heap = (n as usize * 104 * 2).max(16 << 20);
    let mut c = segcache::Segcache::builder()
        .heap_size(heap)
        .prefault(true)
        .build()
        .unwrap();
    let keys: Vec<String> = (0..n).map(|i| format!("key:{i:012}")).collect();
    let v = [7u8; 64];
    let mut x: u64 = 88172645463325252;
    let mut order: Vec<usize> = (0..n as usize).collect();
    let seq = std::env::var("SEQ").is_ok();
    let mut tot = Vec::new();
    for pass in 0..12 {
        if !seq {
            for i in (1..order.len()).rev() {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                order.swap(i, (x % (i as u64 + 1)) as usize);
            }
        }
        let t = Instant::now();
        for &i in &order {
            c.set(&keys[i], v, 0, None).unwrap();
        }
        let ns = t.elapsed().as_nanos() as f64 / n as f64;
        if pass >= 4 {
            tot.push(ns);
        }
    }
    tot.sort_by(|a, b| a.partial_cmp(b).unwrap());
    println!(
        "median steady ns/set {:.1} (min {:.1} max {:.1})",
        tot[tot.len() / 2],
        tot[0],
        tot[tot.len() - 1]
    );
}

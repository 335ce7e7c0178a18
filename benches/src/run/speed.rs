//! Runners of the speed subcommands: `throughput` (every cache on every
//! case, interleaved round by round, ratios to segcache's rate),
//! `concurrent` (threads, the sharded cache and the storage thread) and
//! `opcount` (one cache, one case, for instruction counters).

use segcache_bench::throughput::{self, Contender, Dist, KeySeq, Keys, Op};

/// `throughput`: one table row per operation, value size and key
/// distribution, every cache in each.
pub fn run_throughput(
    n: usize,
    ops: u64,
    rounds: usize,
    values: &[usize],
    caches: &[String],
    only: &[String],
) -> Result<(), String> {
    segcache_bench::alloc::stop_counting();
    let contenders: Vec<Contender> = caches
        .iter()
        .map(|c| Contender::parse(c).ok_or(format!("unknown cache {c:?}")))
        .collect::<Result<_, _>>()?;
    let cases: Vec<Op> = Op::ALL
        .into_iter()
        .filter(|op| only.is_empty() || only.iter().any(|o| *o == op.label()))
        .collect();
    if cases.is_empty() {
        return Err(format!("no case matches {only:?}"));
    }
    let rounds = rounds.max(1);
    let keys = Keys::new(n);
    let dists = [Dist::Uniform, Dist::Zipf(0.99)];
    let seq_len = (ops as usize).clamp(1 << 16, 1 << 22);
    let seqs: Vec<KeySeq> = dists
        .iter()
        .enumerate()
        .map(|(i, &d)| KeySeq::new(n, seq_len, d, 7 + i as u64))
        .collect();
    let base = contenders
        .iter()
        .position(|&c| c == Contender::Segcache)
        .unwrap_or(0);
    let mut rows: Vec<String> = Vec::new();
    for &v in values {
        let value = vec![b'v'; v];
        // Every cache built and filled first, then each case runs on every
        // cache in turn, round after round, so load on the machine hits
        // them alike.
        let mut built: Vec<_> = contenders
            .iter()
            .map(|&c| {
                let mut cache = c.build(n, v);
                throughput::fill(cache.as_mut(), &keys, &value);
                match cache.held() {
                    Some(n) => eprintln!("{} {v} B: filled ({n} items held)", c.label()),
                    None => eprintln!("{} {v} B: filled", c.label()),
                }
                cache
            })
            .collect();
        for &op in &cases {
            for (d, seq) in dists.iter().zip(&seqs) {
                // mops[round][cache]
                let mut mops = vec![vec![0.0f64; built.len()]; rounds];
                for round in mops.iter_mut() {
                    for (i, cache) in built.iter_mut().enumerate() {
                        let mut seq = seq.clone();
                        throughput::run_case(cache.as_mut(), &keys, &value, &mut seq, op, ops / 10);
                        let r =
                            throughput::run_case(cache.as_mut(), &keys, &value, &mut seq, op, ops);
                        if op == Op::GetHit && r.hits != r.ops {
                            eprintln!(
                                "warning: {} {v} B {}: {} of {} get-hits missed",
                                contenders[i].label(),
                                d.label(),
                                r.ops - r.hits,
                                r.ops
                            );
                        }
                        round[i] = r.mops();
                    }
                }
                let mut line = format!("| {} | {v} B | {} |", op.label(), d.label());
                for i in 0..built.len() {
                    let speed = median(mops.iter().map(|r| r[i]).collect());
                    if i == base {
                        line += &format!(" {speed:.2} |");
                    } else {
                        let ratios: Vec<f64> = mops.iter().map(|r| r[i] / r[base]).collect();
                        let lo = ratios.iter().copied().fold(f64::INFINITY, f64::min);
                        let hi = ratios.iter().copied().fold(0.0, f64::max);
                        line += &format!(
                            " {speed:.2} ({:.2}x, {lo:.2}-{hi:.2}) |",
                            median(ratios.clone())
                        );
                    }
                }
                eprintln!("{line}");
                rows.push(line);
            }
        }
        built.clear();
    }
    println!(
        "Single-thread throughput, Mops/s, median of {rounds} interleaved rounds; peers' cells: median ratio to segcache (x) and its range over the rounds. {n} resident 32 B keys, {ops} timed ops per cell.\n"
    );
    let mut header = "| op | value | keys |".to_string();
    for c in &contenders {
        header += &format!(" {} |", c.label());
    }
    println!("{header}");
    println!("|---|---|---|{}", "---|".repeat(contenders.len()));
    for line in rows {
        println!("{line}");
    }
    Ok(())
}

/// `concurrent`: its command, then the tables `concurrent::run` builds.
pub fn run_concurrent(
    keys: u64,
    ops: usize,
    threads: &[usize],
    batches: &[usize],
    rounds: usize,
    only: &[String],
) -> Result<(), String> {
    segcache_bench::alloc::stop_counting();
    let list = |xs: &[usize]| {
        xs.iter()
            .map(|x| x.to_string())
            .collect::<Vec<_>>()
            .join(",")
    };
    println!(
        "```\ncargo run --release -p segcache-bench -- concurrent --keys {keys} --ops {ops} --rounds {rounds} --threads {} --batches {}\n```\n",
        list(threads),
        list(batches)
    );
    for line in segcache_bench::concurrent::run(keys, ops, threads, batches, rounds, only) {
        println!("{line}");
    }
    Ok(())
}

/// `opcount`: one case on one cache, for counting its instructions.
pub fn run_opcount(
    cache: &str,
    op: &str,
    n: usize,
    ops: u64,
    value_len: usize,
    zipf: bool,
) -> Result<(), String> {
    segcache_bench::alloc::stop_counting();
    let contender = Contender::parse(cache).ok_or(format!("unknown cache {cache:?}"))?;
    let op = Op::ALL
        .into_iter()
        .chain([Op::Delete])
        .find(|o| o.label() == op)
        .ok_or(format!("unknown op {op:?}"))?;
    let keys = Keys::new(n);
    let value = vec![b'v'; value_len];
    let dist = if zipf {
        Dist::Zipf(0.99)
    } else {
        Dist::Uniform
    };
    let mut seq = KeySeq::new(n, (ops as usize).clamp(1 << 16, 1 << 22), dist, 7);
    let mut built = contender.build(n, value_len);
    throughput::fill(built.as_mut(), &keys, &value);
    let r = throughput::run_case(built.as_mut(), &keys, &value, &mut seq, op, ops);
    println!(
        "{} {} {}: {} ops, {} hits, {} items",
        contender.label(),
        op.label(),
        dist.label(),
        r.ops,
        r.hits,
        built.held().map_or("?".to_string(), |n| n.to_string())
    );
    Ok(())
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    let m = xs.len() / 2;
    if xs.len() % 2 == 1 {
        xs[m]
    } else {
        (xs[m - 1] + xs[m]) / 2.0
    }
}

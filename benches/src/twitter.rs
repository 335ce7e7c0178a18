//! Synthetic request streams shaped like Twitter's production cache clusters.
//!
//! Owns two things:
//! * parsing `twitter-cache-trace-2020Mar-stats.md` (a markdown table with one
//!   row per cluster: key/value size, request rate, mean frequency,
//!   one-hit-wonder ratio, common TTL mix, operation mix, Zipf alpha, ...) into
//!   [`ClusterStats`];
//! * a deterministic (seeded) generator, [`Workload`], that turns one
//!   cluster's numbers into a stream of [`Request`]s on a simulated clock.
//!
//! Model (documented so results can be judged):
//! * Keys: Zipf(alpha) over a population of `requests * (1 - ohw) / mean_freq`
//!   keys (at least [`MIN_KEY_SPACE`]), so the stream has roughly the
//!   cluster's mean frequency; popularity rank is scrambled into the key id by
//!   a bijective mix. With probability `ohw / mean_freq` per request a brand
//!   new key is used once instead (one-hit wonders), which makes about `ohw`
//!   of all objects one-hit wonders.
//! * Sizes and TTL are fixed per key and derived from a hash of the key id:
//!   key length = mean key size x U[0.75, 1.25) (at least 8 bytes, the id is
//!   embedded), value length = mean value size x U[0.5, 1.5) (at least 1), TTL
//!   drawn from the cluster's common-TTL mix (the table lists only the most
//!   common TTLs, so the mix is renormalised to sum to 1).
//! * Operations drawn per request from the (renormalised) operation mix.
//! * Time: request `i` happens at `i * time_scale / (kqps * 1000)` seconds.
//!   `time_scale = 1` is the cluster's real rate; larger values compress
//!   time so that TTLs expire within a short replay.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, Zipf};
use std::io;
use std::path::{Path, PathBuf};

/// File name of the Twitter statistics table inside the data directory.
pub const STATS_FILE: &str = "twitter-cache-trace-2020Mar-stats.md";
/// Smallest Zipf key population the generator uses.
pub const MIN_KEY_SPACE: u64 = 1000;
/// Clusters used by default: 52, 22, 25, 11 mix short and long TTLs;
/// 18, 19, 6, 7 are short-TTL only.
pub const DEFAULT_CLUSTERS: [u32; 8] = [52, 22, 25, 11, 18, 19, 6, 7];

/// Path of the statistics table in the data directory.
pub fn stats_path() -> PathBuf {
    crate::trace::data_dir().join(STATS_FILE)
}

/// Memcached-style operation names appearing in the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    Get,
    Gets,
    Set,
    Add,
    Replace,
    Cas,
    Append,
    Prepend,
    Incr,
    Decr,
    Delete,
}

/// What an operation does in the look-aside simulation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Lookup; on a miss the client fills the cache with a set.
    Read,
    /// Store (set/add/replace/cas/append/prepend/incr/decr all end with the
    /// key holding a value of the key's size).
    Write,
    /// Remove the key.
    Delete,
}

impl Op {
    /// Parse an operation name from the table.
    pub fn parse(s: &str) -> Option<Op> {
        Some(match s {
            "get" => Op::Get,
            "gets" => Op::Gets,
            "set" => Op::Set,
            "add" => Op::Add,
            "replace" => Op::Replace,
            "cas" => Op::Cas,
            "append" => Op::Append,
            "prepend" => Op::Prepend,
            "incr" => Op::Incr,
            "decr" => Op::Decr,
            "delete" => Op::Delete,
            _ => return None,
        })
    }

    /// Look-aside semantics of this operation.
    pub fn action(self) -> Action {
        match self {
            Op::Get | Op::Gets => Action::Read,
            Op::Delete => Action::Delete,
            _ => Action::Write,
        }
    }
}

/// One row of the statistics table. Numbers that are `N/A` in the table are
/// `None`.
#[derive(Debug, Clone, PartialEq)]
pub struct ClusterStats {
    pub cluster: u32,
    pub production_miss_ratio: Option<f64>,
    pub category: Option<u32>,
    pub key_size: Option<f64>,
    pub value_size: Option<f64>,
    pub kqps: Option<f64>,
    pub mean_freq: Option<f64>,
    /// Percent of objects requested once.
    pub one_hit_wonder_pct: Option<f64>,
    pub compulsory_miss_pct: Option<f64>,
    /// `(ttl seconds, fraction)` as listed (not renormalised).
    pub ttl_mix: Vec<(u32, f64)>,
    pub wss_mb_no_ttl: Option<f64>,
    pub wss_mb: Option<f64>,
    /// `(operation, fraction)` as listed (not renormalised).
    pub op_mix: Vec<(Op, f64)>,
    pub zipf_alpha: Option<f64>,
}

impl ClusterStats {
    /// Whether the row has every number the generator needs.
    pub fn is_complete(&self) -> bool {
        self.key_size.is_some()
            && self.value_size.is_some()
            && self.kqps.is_some()
            && self.mean_freq.is_some()
            && self.one_hit_wonder_pct.is_some()
            && self.zipf_alpha.is_some()
            && !self.ttl_mix.is_empty()
            && !self.op_mix.is_empty()
    }
}

fn num(s: &str) -> Option<f64> {
    let s = s.trim();
    if s.eq_ignore_ascii_case("n/a") || s.eq_ignore_ascii_case("na") || s.is_empty() {
        return None;
    }
    s.parse().ok()
}

/// Parse a TTL like `240s`, `1.8h`, `14d` or `30m` into seconds.
pub fn parse_ttl(s: &str) -> Option<u32> {
    let s = s.trim();
    let (n, unit) = s.split_at(s.len().checked_sub(1)?);
    let mult = match unit {
        "s" => 1.0,
        "m" => 60.0,
        "h" => 3600.0,
        "d" => 86400.0,
        _ => return None,
    };
    let v: f64 = n.parse().ok()?;
    Some((v * mult).round() as u32)
}

fn parse_ttl_mix(s: &str) -> Result<Vec<(u32, f64)>, String> {
    let mut out = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        if part.eq_ignore_ascii_case("n/a") {
            return Ok(Vec::new());
        }
        let (ttl, frac) = part
            .split_once(':')
            .ok_or_else(|| format!("bad TTL entry {part:?}"))?;
        let ttl = parse_ttl(ttl).ok_or_else(|| format!("bad TTL {ttl:?}"))?;
        let frac = num(frac).ok_or_else(|| format!("bad TTL fraction {frac:?}"))?;
        out.push((ttl, frac));
    }
    Ok(out)
}

fn parse_op_mix(s: &str) -> Result<Vec<(Op, f64)>, String> {
    let mut out = Vec::new();
    for part in s.split_whitespace() {
        if part.eq_ignore_ascii_case("n/a") {
            return Ok(Vec::new());
        }
        let (op, frac) = part
            .split_once(':')
            .ok_or_else(|| format!("bad op entry {part:?}"))?;
        let op = Op::parse(op).ok_or_else(|| format!("unknown op {op:?}"))?;
        let frac = num(frac).ok_or_else(|| format!("bad op fraction {frac:?}"))?;
        out.push((op, frac));
    }
    Ok(out)
}

/// Parse the whole markdown table. Columns are found by header name.
pub fn parse_stats(md: &str) -> Result<Vec<ClusterStats>, String> {
    let mut lines = md.lines().filter(|l| l.trim_start().starts_with('|'));
    let header: Vec<String> = lines
        .next()
        .ok_or("no table header")?
        .split('|')
        .map(|c| c.trim().to_ascii_lowercase())
        .collect();
    let col = |name: &str| -> Result<usize, String> {
        header
            .iter()
            .position(|h| h == name)
            .ok_or_else(|| format!("missing column {name:?}"))
    };
    let c_cluster = col("cluster")?;
    let c_pmr = col("production miss ratio")?;
    let c_cat = col("category")?;
    let c_key = col("key size")?;
    let c_val = col("value size")?;
    let c_rate = col("request rate (kqps)")?;
    let c_freq = col("mean freq")?;
    let c_ohw = col("one-hit-wonder ratio (%)")?;
    let c_comp = col("compulsory miss ratio (%)")?;
    let c_ttl = col("common ttl")?;
    let c_wss0 = col("wss in mb (not considering ttl)")?;
    let c_wss = col("wss in mb (working set size)")?;
    let c_op = col("operation")?;
    let c_alpha = col("zipf alpha")?;

    let mut out = Vec::new();
    for line in lines {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        let Some(name) = cells.get(c_cluster) else {
            continue;
        };
        let Some(id) = name.strip_prefix("cluster") else {
            continue; // the alignment row
        };
        if cells.len() < header.len() - 1 {
            return Err(format!("short row: {line}"));
        }
        let cluster: u32 = id.parse().map_err(|_| format!("bad cluster {name:?}"))?;
        let wrap = |e: String| format!("cluster{cluster}: {e}");
        out.push(ClusterStats {
            cluster,
            production_miss_ratio: num(cells[c_pmr]),
            category: num(cells[c_cat]).map(|v| v as u32),
            key_size: num(cells[c_key]),
            value_size: num(cells[c_val]),
            kqps: num(cells[c_rate]),
            mean_freq: num(cells[c_freq]),
            one_hit_wonder_pct: num(cells[c_ohw]),
            compulsory_miss_pct: num(cells[c_comp]),
            ttl_mix: parse_ttl_mix(cells[c_ttl]).map_err(wrap)?,
            wss_mb_no_ttl: num(cells[c_wss0]),
            wss_mb: num(cells[c_wss]),
            op_mix: parse_op_mix(cells[c_op]).map_err(wrap)?,
            zipf_alpha: num(cells[c_alpha]),
        });
    }
    Ok(out)
}

/// Read and parse the statistics table at `path`.
pub fn load_stats(path: &Path) -> io::Result<Vec<ClusterStats>> {
    let md = std::fs::read_to_string(path)
        .map_err(|e| io::Error::new(e.kind(), format!("reading {}: {e}", path.display())))?;
    parse_stats(&md).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

/// Look up one cluster in the shared data directory's table.
pub fn load_cluster(cluster: u32) -> io::Result<ClusterStats> {
    load_stats(&stats_path())?
        .into_iter()
        .find(|c| c.cluster == cluster)
        .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, format!("no cluster{cluster}")))
}

/// One synthetic request.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Request {
    /// Simulated time of the request, microseconds since the stream start.
    pub time_us: u64,
    pub op: Op,
    /// Unique key id; the key bytes come from [`Request::write_key`].
    pub key_id: u64,
    pub key_len: u32,
    pub value_len: u32,
    /// TTL to use when this request (or the fill after a read miss) stores
    /// the key.
    pub ttl_secs: u32,
}

impl Request {
    /// Whole simulated seconds.
    pub fn now_secs(&self) -> u64 {
        self.time_us / 1_000_000
    }

    /// Write the key bytes into `buf` (cleared first): the 8 little-endian
    /// bytes of the id, padded to `key_len` with a fixed filler.
    pub fn write_key(&self, buf: &mut Vec<u8>) {
        buf.clear();
        buf.extend_from_slice(&self.key_id.to_le_bytes());
        buf.resize(self.key_len.max(8) as usize, b'k');
    }
}

/// SplitMix64 finaliser: a bijection on u64 used to scramble ranks into ids
/// and to derive per-key attributes.
pub fn mix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn unit(h: u64) -> f64 {
    (h >> 11) as f64 / (1u64 << 53) as f64
}

/// Pick from a weighted list given `u` uniform in [0, 1); weights need not
/// sum to 1.
fn pick<T: Copy>(items: &[(T, f64)], total: f64, u: f64) -> T {
    let mut x = u * total;
    for &(t, w) in items {
        if x < w {
            return t;
        }
        x -= w;
    }
    items.last().expect("non-empty mix").0
}

/// Generator parameters.
#[derive(Debug, Clone)]
pub struct WorkloadConfig {
    pub requests: u64,
    pub seed: u64,
    /// Multiplier on simulated time per request (1 = the cluster's real rate).
    pub time_scale: f64,
}

impl Default for WorkloadConfig {
    fn default() -> Self {
        WorkloadConfig {
            requests: 2_000_000,
            seed: 42,
            time_scale: 1.0,
        }
    }
}

/// A deterministic synthetic request stream for one cluster; iterate it to
/// get the requests. Cloning restarts nothing: build a new one with the same
/// config to replay the same stream.
#[derive(Debug, Clone)]
pub struct Workload {
    stats: ClusterStats,
    cfg: WorkloadConfig,
    key_space: u64,
    ohw_prob: f64,
    zipf: Zipf<f64>,
    ttl_total: f64,
    op_total: f64,
    rng: StdRng,
    issued: u64,
    next_ohw: u64,
    us_per_request: f64,
}

impl Workload {
    /// Build the generator. Fails for rows with missing numbers.
    pub fn new(stats: ClusterStats, cfg: WorkloadConfig) -> Result<Workload, String> {
        if !stats.is_complete() {
            return Err(format!("cluster{} has missing numbers", stats.cluster));
        }
        let ohw = (stats.one_hit_wonder_pct.unwrap() / 100.0).clamp(0.0, 1.0);
        let mean_freq = stats.mean_freq.unwrap().max(1.0);
        let ohw_prob = (ohw / mean_freq).clamp(0.0, 1.0);
        let key_space =
            ((cfg.requests as f64 * (1.0 - ohw) / mean_freq).round() as u64).max(MIN_KEY_SPACE);
        let alpha = stats.zipf_alpha.unwrap().max(0.0);
        let zipf = Zipf::new(key_space, alpha).map_err(|e| e.to_string())?;
        let kqps = stats.kqps.unwrap();
        if kqps <= 0.0 {
            return Err(format!("cluster{} has a zero request rate", stats.cluster));
        }
        let us_per_request = cfg.time_scale * 1_000.0 / kqps;
        Ok(Workload {
            ttl_total: stats.ttl_mix.iter().map(|t| t.1).sum(),
            op_total: stats.op_mix.iter().map(|t| t.1).sum(),
            rng: StdRng::seed_from_u64(cfg.seed ^ mix64(stats.cluster as u64)),
            key_space,
            ohw_prob,
            zipf,
            issued: 0,
            next_ohw: 0,
            us_per_request,
            stats,
            cfg,
        })
    }

    /// The cluster this stream follows.
    pub fn stats(&self) -> &ClusterStats {
        &self.stats
    }

    /// Size of the Zipf key population.
    pub fn key_space(&self) -> u64 {
        self.key_space
    }

    /// Per-request probability of a one-hit-wonder key.
    pub fn one_hit_probability(&self) -> f64 {
        self.ohw_prob
    }

    /// Simulated duration of the whole stream in seconds.
    pub fn duration_secs(&self) -> f64 {
        self.cfg.requests as f64 * self.us_per_request / 1e6
    }

    /// Key length, value length and TTL of a key id (fixed per key).
    pub fn key_attrs(&self, key_id: u64) -> (u32, u32, u32) {
        let h1 = mix64(key_id ^ 0x6b65_795f_6c65_6e00);
        let h2 = mix64(key_id ^ 0x7661_6c75_655f_6c00);
        let h3 = mix64(key_id ^ 0x7474_6c5f_6d69_7800);
        let ks = self.stats.key_size.unwrap();
        let vs = self.stats.value_size.unwrap();
        let key_len = ((ks * (0.75 + 0.5 * unit(h1))).round() as u32).clamp(8, 250);
        let value_len = ((vs * (0.5 + unit(h2))).round() as u32).max(1);
        let ttl = pick(&self.stats.ttl_mix, self.ttl_total, unit(h3));
        (key_len, value_len, ttl)
    }

    /// The stream's footprint: key plus value bytes of every distinct key
    /// (generates the whole stream once).
    pub fn unique_bytes(&self) -> u64 {
        let mut seen = std::collections::HashSet::new();
        self.clone()
            .filter(|r| seen.insert(r.key_id))
            .map(|r| (r.key_len + r.value_len) as u64)
            .sum()
    }

    /// Key id of Zipf popularity rank `rank` (1 = most popular).
    pub fn rank_to_id(rank: u64) -> u64 {
        mix64(rank)
    }
}

impl Iterator for Workload {
    type Item = Request;

    fn next(&mut self) -> Option<Request> {
        if self.issued >= self.cfg.requests {
            return None;
        }
        let i = self.issued;
        self.issued += 1;
        let key_id = if self.rng.gen::<f64>() < self.ohw_prob {
            self.next_ohw += 1;
            // Ids above the Zipf population, scrambled the same way: unique.
            Self::rank_to_id(self.key_space + self.next_ohw)
        } else {
            let rank = (self.zipf.sample(&mut self.rng) as u64).clamp(1, self.key_space);
            Self::rank_to_id(rank)
        };
        let op = pick(&self.stats.op_mix, self.op_total, self.rng.gen::<f64>());
        let (key_len, value_len, ttl_secs) = self.key_attrs(key_id);
        Some(Request {
            time_us: (i as f64 * self.us_per_request) as u64,
            op,
            key_id,
            key_len,
            value_len,
            ttl_secs,
        })
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = (self.cfg.requests - self.issued) as usize;
        (left, Some(left))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn table() -> Vec<ClusterStats> {
        load_stats(&stats_path()).expect("twitter stats table (set SEGCACHE_DATA)")
    }

    #[test]
    fn parses_every_cluster_with_numbers() {
        let t = table();
        assert_eq!(t.len(), 54);
        let ids: Vec<u32> = t.iter().map(|c| c.cluster).collect();
        assert_eq!(ids, (1..=54).collect::<Vec<_>>());
        // cluster5 is all N/A, clusters 43 and 46 have no Zipf alpha; every other
        // row has all the generator's inputs.
        let incomplete: Vec<u32> = t
            .iter()
            .filter(|c| !c.is_complete())
            .map(|c| c.cluster)
            .collect();
        assert_eq!(incomplete, vec![5, 43, 46]);
        assert_eq!(t[42].zipf_alpha, None);
        assert_eq!(t[42].kqps, Some(14.54));
        let c52 = t.iter().find(|c| c.cluster == 52).unwrap();
        assert_eq!(c52.key_size, Some(20.0));
        assert_eq!(c52.value_size, Some(273.0));
        assert_eq!(c52.kqps, Some(24.25));
        assert_eq!(c52.one_hit_wonder_pct, Some(19.36));
        assert_eq!(c52.zipf_alpha, Some(1.2117));
        assert_eq!(
            c52.ttl_mix,
            vec![(86400, 0.65), (14 * 86400, 0.27), (43200, 0.07)]
        );
        assert_eq!(
            c52.op_mix,
            vec![
                (Op::Get, 0.91),
                (Op::Add, 0.04),
                (Op::Gets, 0.02),
                (Op::Cas, 0.02)
            ]
        );
        let c7 = t.iter().find(|c| c.cluster == 7).unwrap();
        assert_eq!(c7.ttl_mix[0], (6480, 0.28)); // 1.8h
        let c22 = t.iter().find(|c| c.cluster == 22).unwrap();
        assert!(c22.op_mix.contains(&(Op::Incr, 0.18)));
        let c21 = t.iter().find(|c| c.cluster == 21).unwrap();
        assert_eq!(c21.production_miss_ratio, None);
        assert_eq!(c21.value_size, Some(1.0));
    }

    #[test]
    fn ttl_units() {
        assert_eq!(parse_ttl("240s"), Some(240));
        assert_eq!(parse_ttl("1.8h"), Some(6480));
        assert_eq!(parse_ttl("92.6d"), Some(8_000_640));
        assert_eq!(parse_ttl("30m"), Some(1800));
        assert_eq!(parse_ttl("5x"), None);
    }

    #[test]
    fn stream_is_deterministic_and_timed() {
        let c = load_cluster(52).unwrap();
        let cfg = WorkloadConfig {
            requests: 10_000,
            ..Default::default()
        };
        let a: Vec<Request> = Workload::new(c.clone(), cfg.clone()).unwrap().collect();
        let b: Vec<Request> = Workload::new(c.clone(), cfg).unwrap().collect();
        assert_eq!(a, b);
        assert_eq!(a.len(), 10_000);
        // 24.25 kqps: 10k requests span ~0.412 s.
        let last = a.last().unwrap().time_us as f64 / 1e6;
        assert!((last - 10_000.0 / 24_250.0).abs() < 1e-3, "{last}");
        let other: Vec<Request> = Workload::new(
            c,
            WorkloadConfig {
                requests: 10_000,
                seed: 7,
                ..Default::default()
            },
        )
        .unwrap()
        .collect();
        assert_ne!(a, other);
    }

    #[test]
    fn zipf_rank_frequency_follows_alpha() {
        // Fit the log-log slope of rank vs frequency over the top ranks.
        for (alpha, n) in [(0.8, 100_000u64), (1.2, 100_000)] {
            let z = Zipf::new(n, alpha).unwrap();
            let mut rng = StdRng::seed_from_u64(1);
            let mut counts = vec![0u64; 51];
            for _ in 0..2_000_000 {
                let r = z.sample(&mut rng) as u64;
                if r <= 50 {
                    counts[r as usize] += 1;
                }
            }
            let pts: Vec<(f64, f64)> = (1..=50)
                .map(|r| ((r as f64).ln(), (counts[r] as f64).ln()))
                .collect();
            let mx = pts.iter().map(|p| p.0).sum::<f64>() / 50.0;
            let my = pts.iter().map(|p| p.1).sum::<f64>() / 50.0;
            let slope = pts.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum::<f64>()
                / pts.iter().map(|p| (p.0 - mx).powi(2)).sum::<f64>();
            assert!((slope + alpha).abs() < 0.05, "alpha {alpha} slope {slope}");
        }
    }

    #[test]
    fn generated_mixes_match_cluster() {
        let c = load_cluster(22).unwrap();
        let w = Workload::new(
            c.clone(),
            WorkloadConfig {
                requests: 200_000,
                ..Default::default()
            },
        )
        .unwrap();
        let mut ops: HashMap<Op, u64> = HashMap::new();
        let mut key_ttl: HashMap<u64, u32> = HashMap::new();
        let mut key_seen: HashMap<u64, u32> = HashMap::new();
        let (mut klen, mut vlen, mut n) = (0f64, 0f64, 0f64);
        for r in w {
            *ops.entry(r.op).or_default() += 1;
            key_ttl.insert(r.key_id, r.ttl_secs);
            *key_seen.entry(r.key_id).or_default() += 1;
            klen += r.key_len as f64;
            vlen += r.value_len as f64;
            n += 1.0;
        }
        // Operation mix: get 0.72, incr 0.18, set 0.10 (sums to 1).
        for (op, want) in [(Op::Get, 0.72), (Op::Incr, 0.18), (Op::Set, 0.10)] {
            let got = ops[&op] as f64 / n;
            assert!((got - want).abs() < 0.01, "{op:?} {got} vs {want}");
        }
        // TTL mix over keys, renormalised: 1d 0.85, 1h 0.11, 1800s 0.03 (/0.99).
        let keys = key_ttl.len() as f64;
        for (ttl, want) in [(86400, 0.85), (3600, 0.11), (1800, 0.03)] {
            let got = key_ttl.values().filter(|&&t| t == ttl).count() as f64 / keys;
            assert!(
                (got - want / 0.99).abs() < 0.02,
                "ttl {ttl}: {got} vs {want}"
            );
        }
        // Mean sizes near the table (key 54, value 4).
        assert!((klen / n - 54.0).abs() < 3.0, "key {}", klen / n);
        assert!((vlen / n - 4.0).abs() < 0.5, "value {}", vlen / n);
        // One-hit wonders are a substantial share of objects (table: 41%).
        let once = key_seen.values().filter(|&&c| c == 1).count() as f64 / keys;
        assert!(once > 0.25 && once < 0.9, "one-hit share {once}");
    }
}

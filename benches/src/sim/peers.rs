//! The third-party peers: moka, quick_cache and lru, each holding real
//! value bytes under a byte weight ([`Sizing`]) and checking the simulated
//! expiry on `get`. Owns their adapters; never sizes them (`calibrate.rs`).

use super::{SimCache, Sizing, Val};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// `moka::sync::Cache` adapter.
pub struct MokaSim {
    cache: moka::sync::Cache<Box<[u8]>, Arc<Val>>,
}

struct WallTtl;

// The key type is `Box<[u8]>`, so moka's `&K` is a `&Box<[u8]>`.
impl moka::Expiry<Box<[u8]>, Arc<Val>> for WallTtl {
    #[allow(clippy::borrowed_box)]
    fn expire_after_create(
        &self,
        _key: &Box<[u8]>,
        value: &Arc<Val>,
        _created_at: Instant,
    ) -> Option<Duration> {
        (value.ttl_secs > 0).then(|| Duration::from_secs(value.ttl_secs as u64))
    }

    #[allow(clippy::borrowed_box)]
    fn expire_after_update(
        &self,
        _key: &Box<[u8]>,
        value: &Arc<Val>,
        _updated_at: Instant,
        _duration_until_expiry: Option<Duration>,
    ) -> Option<Duration> {
        (value.ttl_secs > 0).then(|| Duration::from_secs(value.ttl_secs as u64))
    }
}

impl MokaSim {
    #[allow(clippy::borrowed_box)] // moka's weigher takes `&K`
    pub fn new(sizing: Sizing) -> MokaSim {
        let per_item = sizing.per_item;
        let cache = moka::sync::Cache::builder()
            .max_capacity(sizing.capacity)
            .weigher(move |k: &Box<[u8]>, v: &Arc<Val>| {
                (k.len() + v.data.len() + per_item).min(u32::MAX as usize) as u32
            })
            .expire_after(WallTtl)
            .build();
        MokaSim { cache }
    }
}

impl SimCache for MokaSim {
    fn name(&self) -> String {
        "moka".into()
    }
    fn get(&mut self, key: &[u8], now_secs: u64) -> bool {
        match self.cache.get(key) {
            Some(v) if v.expire_at > now_secs => true,
            Some(_) => {
                self.cache.invalidate(key);
                false
            }
            None => false,
        }
    }
    fn set(&mut self, key: &[u8], value_len: usize, ttl_secs: Option<u32>, now_secs: u64) {
        let v = Arc::new(Val::new(value_len, ttl_secs, now_secs));
        self.cache.insert(key.into(), v);
    }
    fn delete(&mut self, key: &[u8]) {
        self.cache.invalidate(key);
    }
    fn settle(&mut self) {
        self.cache.run_pending_tasks();
    }
}

// ---------------------------------------------------------- quick_cache

#[derive(Clone)]
struct ByteWeighter(usize);

impl quick_cache::Weighter<Box<[u8]>, Val> for ByteWeighter {
    fn weight(&self, key: &Box<[u8]>, val: &Val) -> u64 {
        (key.len() + val.data.len() + self.0) as u64
    }
}

/// `quick_cache::unsync::Cache` adapter.
pub struct QuickSim {
    cache: quick_cache::unsync::Cache<Box<[u8]>, Val, ByteWeighter>,
}

impl QuickSim {
    /// `typical_weight` sizes quick_cache's item-count estimate.
    pub fn new(sizing: Sizing, typical_weight: u64) -> QuickSim {
        let est = (sizing.capacity / typical_weight.max(1)).max(16) as usize;
        QuickSim {
            cache: quick_cache::unsync::Cache::with_weighter(
                est,
                sizing.capacity,
                ByteWeighter(sizing.per_item),
            ),
        }
    }
}

impl SimCache for QuickSim {
    fn name(&self) -> String {
        "quick_cache".into()
    }
    fn get(&mut self, key: &[u8], now_secs: u64) -> bool {
        match self.cache.get(key) {
            Some(v) if v.expire_at > now_secs => true,
            Some(_) => {
                self.cache.remove(key);
                false
            }
            None => false,
        }
    }
    fn set(&mut self, key: &[u8], value_len: usize, ttl_secs: Option<u32>, now_secs: u64) {
        self.cache
            .insert(key.into(), Val::new(value_len, ttl_secs, now_secs));
    }
    fn delete(&mut self, key: &[u8]) {
        self.cache.remove(key);
    }
}

// ------------------------------------------------------------------ lru

/// `lru::LruCache` adapter with a byte budget.
pub struct LruSim {
    cache: lru::LruCache<Box<[u8]>, Val>,
    sizing: Sizing,
    used: u64,
}

impl LruSim {
    pub fn new(sizing: Sizing) -> LruSim {
        LruSim {
            cache: lru::LruCache::unbounded(),
            sizing,
            used: 0,
        }
    }

    fn remove(&mut self, key: &[u8]) {
        if let Some(v) = self.cache.pop(key) {
            self.used -= self.sizing.weight(key.len(), v.data.len());
        }
    }
}

impl SimCache for LruSim {
    fn name(&self) -> String {
        "lru".into()
    }
    fn get(&mut self, key: &[u8], now_secs: u64) -> bool {
        match self.cache.get(key) {
            Some(v) if v.expire_at > now_secs => true,
            Some(_) => {
                self.remove(key);
                false
            }
            None => false,
        }
    }
    fn set(&mut self, key: &[u8], value_len: usize, ttl_secs: Option<u32>, now_secs: u64) {
        self.remove(key);
        let w = self.sizing.weight(key.len(), value_len);
        if w > self.sizing.capacity {
            return;
        }
        while self.used + w > self.sizing.capacity {
            let (k, v) = self.cache.pop_lru().expect("used > 0 implies entries");
            self.used -= self.sizing.weight(k.len(), v.data.len());
        }
        self.cache
            .put(key.into(), Val::new(value_len, ttl_secs, now_secs));
        self.used += w;
    }
    fn delete(&mut self, key: &[u8]) {
        self.remove(key);
    }
}

//! Reference policies that count only object bytes ([`ObjLru`],
//! [`ObjFifo`]), to check the replay against libCacheSim's numbers. They
//! never stand in for a peer at equal real memory.

use super::SimCache;

const NIL: usize = usize::MAX;

struct Node {
    key: Box<[u8]>,
    size: u64,
    prev: usize,
    next: usize,
}

/// LRU that counts only object bytes (`value_len`), for checking the replay
/// against reference miss counts. Insertion rule: evict from the LRU end
/// until the object fits; an object larger than the cache is not inserted.
pub struct ObjLru {
    capacity: u64,
    used: u64,
    map: std::collections::HashMap<Box<[u8]>, usize>,
    nodes: Vec<Node>,
    free: Vec<usize>,
    head: usize, // most recent
    tail: usize, // least recent
}

impl ObjLru {
    pub fn new(capacity: u64) -> ObjLru {
        ObjLru {
            capacity,
            used: 0,
            map: Default::default(),
            nodes: Vec::new(),
            free: Vec::new(),
            head: NIL,
            tail: NIL,
        }
    }

    fn unlink(&mut self, i: usize) {
        let (p, n) = (self.nodes[i].prev, self.nodes[i].next);
        if p == NIL {
            self.head = n;
        } else {
            self.nodes[p].next = n;
        }
        if n == NIL {
            self.tail = p;
        } else {
            self.nodes[n].prev = p;
        }
    }

    fn push_front(&mut self, i: usize) {
        self.nodes[i].prev = NIL;
        self.nodes[i].next = self.head;
        if self.head != NIL {
            self.nodes[self.head].prev = i;
        }
        self.head = i;
        if self.tail == NIL {
            self.tail = i;
        }
    }

    fn remove_index(&mut self, i: usize) {
        self.unlink(i);
        let key = std::mem::take(&mut self.nodes[i].key);
        self.map.remove(&key);
        self.used -= self.nodes[i].size;
        self.free.push(i);
    }

    /// Objects currently cached.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether the cache is empty.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Object bytes currently cached.
    pub fn used(&self) -> u64 {
        self.used
    }
}

impl SimCache for ObjLru {
    fn name(&self) -> String {
        "obj-lru".into()
    }
    fn get(&mut self, key: &[u8], _now_secs: u64) -> bool {
        match self.map.get(key) {
            Some(&i) => {
                self.unlink(i);
                self.push_front(i);
                true
            }
            None => false,
        }
    }
    fn set(&mut self, key: &[u8], value_len: usize, _ttl: Option<u32>, _now: u64) {
        self.delete(key);
        let size = value_len as u64;
        if size > self.capacity {
            return;
        }
        while self.used + size > self.capacity {
            let t = self.tail;
            self.remove_index(t);
        }
        let node = Node {
            key: key.into(),
            size,
            prev: NIL,
            next: NIL,
        };
        let i = match self.free.pop() {
            Some(i) => {
                self.nodes[i] = node;
                i
            }
            None => {
                self.nodes.push(node);
                self.nodes.len() - 1
            }
        };
        self.map.insert(key.into(), i);
        self.push_front(i);
        self.used += size;
    }
    fn delete(&mut self, key: &[u8]) {
        if let Some(&i) = self.map.get(key) {
            self.remove_index(i);
        }
    }
}

/// FIFO that counts only object bytes; same insertion rule as [`ObjLru`],
/// hits do not reorder.
pub struct ObjFifo {
    capacity: u64,
    used: u64,
    /// key -> (size, generation of its queue entry)
    map: std::collections::HashMap<Box<[u8]>, (u64, u64)>,
    queue: std::collections::VecDeque<(Box<[u8]>, u64)>,
    generation: u64,
}

impl ObjFifo {
    pub fn new(capacity: u64) -> ObjFifo {
        ObjFifo {
            capacity,
            used: 0,
            map: Default::default(),
            queue: Default::default(),
            generation: 0,
        }
    }
}

impl SimCache for ObjFifo {
    fn name(&self) -> String {
        "obj-fifo".into()
    }
    fn get(&mut self, key: &[u8], _now_secs: u64) -> bool {
        self.map.contains_key(key)
    }
    fn set(&mut self, key: &[u8], value_len: usize, _ttl: Option<u32>, _now: u64) {
        self.delete(key);
        let size = value_len as u64;
        if size > self.capacity {
            return;
        }
        while self.used + size > self.capacity {
            let (k, g) = self.queue.pop_front().expect("used > 0 implies entries");
            if let Some(&(s, live)) = self.map.get(&k) {
                if live == g {
                    self.map.remove(&k);
                    self.used -= s;
                }
            }
        }
        self.generation += 1;
        self.map.insert(key.into(), (size, self.generation));
        self.queue.push_back((key.into(), self.generation));
        self.used += size;
    }
    fn delete(&mut self, key: &[u8]) {
        if let Some((s, _)) = self.map.remove(key) {
            self.used -= s;
        }
    }
}

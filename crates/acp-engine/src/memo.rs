//! A bounded memo by string key, shared by every thread: the keys are split over shards, each
//! behind a read-write lock of its own, so threads looking up different keys never meet and
//! threads looking up the same key only read. A shard is emptied when it is full (the entries
//! are cheap to make again; no bookkeeping per hit). Pure: std only.

use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::hash::{BuildHasher, BuildHasherDefault, Hasher};
use std::sync::{PoisonError, RwLock};

const SHARDS: usize = 16;

/// Values kept by string key: at most `capacity` in all (a sixteenth of it per shard).
pub struct Memo<V> {
    hasher: RandomState,
    per_shard: usize,
    shards: [RwLock<Shard<V>>; SHARDS],
}

/// Entries by the hash of their key (computed once per lookup, for the shard and the slot
/// alike), each with its key: two keys with one hash are told apart, the later replacing the
/// earlier.
type Shard<V> = HashMap<u64, (String, V), BuildHasherDefault<Hashed>>;

/// Passes on a hash computed already (a key's, by the memo's random hasher).
#[derive(Default)]
struct Hashed(u64);

impl Hasher for Hashed {
    fn write(&mut self, bytes: &[u8]) {
        // Only `u64` keys are hashed here; any other input is folded in all the same.
        for b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(*b);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

impl<V: Clone> Memo<V> {
    pub fn new(capacity: usize) -> Self {
        Self {
            hasher: RandomState::new(),
            per_shard: capacity.div_ceil(SHARDS).max(1),
            shards: std::array::from_fn(|_| RwLock::new(Shard::default())),
        }
    }

    /// The shard of a key and the key's hash. The shard is chosen by bits of the hash that
    /// the shard's own table does not use (it takes the low bits for the slot and the top
    /// seven as tags), so that the keys of one shard spread over its whole table.
    fn shard(&self, key: &str) -> (&RwLock<Shard<V>>, u64) {
        let hash = self.hasher.hash_one(key);
        let index = (hash >> 32) as usize % SHARDS;
        (&self.shards[index], hash)
    }

    /// What is kept under `key`.
    pub fn get(&self, key: &str) -> Option<V> {
        let (shard, hash) = self.shard(key);
        let shard = shard.read().unwrap_or_else(PoisonError::into_inner);
        shard
            .get(&hash)
            .filter(|(kept, _)| kept == key)
            .map(|(_, value)| value.clone())
    }

    /// Keeps `value` under `key`, emptying the key's shard first when it is full.
    pub fn insert(&self, key: String, value: V) {
        let (shard, hash) = self.shard(&key);
        let mut shard = shard.write().unwrap_or_else(PoisonError::into_inner);
        if shard.len() >= self.per_shard && !shard.contains_key(&hash) {
            shard.clear();
        }
        shard.insert(hash, (key, value));
    }

    /// How many values are kept.
    pub fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.read().unwrap_or_else(PoisonError::into_inner).len())
            .sum()
    }

    /// Forgets every value.
    pub fn clear(&self) {
        for shard in &self.shards {
            shard
                .write()
                .unwrap_or_else(PoisonError::into_inner)
                .clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Memo;

    #[test]
    fn keeps_values_by_key_within_its_capacity() {
        let memo = Memo::new(64);
        for i in 0..1000 {
            memo.insert(format!("key {i}"), i);
            assert_eq!(memo.get(&format!("key {i}")), Some(i));
            assert!(memo.len() <= 64, "{}", memo.len());
        }
        assert_eq!(memo.get("another key"), None);
        memo.insert("key 999".into(), 7);
        assert_eq!(memo.get("key 999"), Some(7));
        memo.clear();
        assert_eq!(memo.len(), 0);
        assert_eq!(memo.get("key 999"), None);
    }
}

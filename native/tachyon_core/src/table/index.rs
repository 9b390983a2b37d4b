//! The in-memory index: key -> where the value is (and, in the `Memory`
//! mode, the value itself), split into shards, each a `RwLock` over a
//! `hashbrown::HashTable`.
//!
//! Readers take one shard's read lock (shared: readers never wait for each
//! other); the writer takes one shard's write lock for the few nanoseconds of
//! an insert, so a reader waits at most that long, and only for its shard.
//! A shard is chosen from bits 40.. of the key's hash, which hashbrown uses
//! for neither the bucket (low bits) nor the control byte (top 7 bits).

use std::hash::BuildHasher;
use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

use crossbeam_utils::CachePadded;
use hashbrown::{DefaultHashBuilder, HashTable};

/// One live key.
#[derive(Debug)]
pub struct Entry {
    /// The key, followed by the value in the `Memory` mode.
    pub buf: Box<[u8]>,
    pub klen: u32,
    /// Slot of the segment that holds the value.
    pub slot: u32,
    /// File offset of the value in that segment.
    pub off: u32,
    pub vlen: u32,
    pub seq: u64,
}

impl Entry {
    #[inline]
    pub fn key(&self) -> &[u8] {
        &self.buf[..self.klen as usize]
    }

    /// The value held in memory (`Memory` mode only).
    #[inline]
    pub fn mem_value(&self) -> &[u8] {
        &self.buf[self.klen as usize..]
    }
}

pub type Shard = HashTable<Entry>;

pub struct Index {
    shards: Box<[CachePadded<RwLock<Shard>>]>,
    hasher: DefaultHashBuilder,
    mask: usize,
}

impl Index {
    /// `shards` is rounded up to a power of two; `capacity` is the expected
    /// number of keys (avoids growing, which rehashes a shard under its lock).
    pub fn new(shards: usize, capacity: usize) -> Index {
        let n = shards.max(1).next_power_of_two();
        let per = capacity / n;
        Index {
            shards: (0..n)
                .map(|_| CachePadded::new(RwLock::new(HashTable::with_capacity(per))))
                .collect(),
            hasher: DefaultHashBuilder::default(),
            mask: n - 1,
        }
    }

    #[inline]
    pub fn hash(&self, key: &[u8]) -> u64 {
        self.hasher.hash_one(key)
    }

    #[inline]
    fn shard(&self, hash: u64) -> &RwLock<Shard> {
        &self.shards[(hash >> 40) as usize & self.mask]
    }

    #[inline]
    pub fn read(&self, hash: u64) -> RwLockReadGuard<'_, Shard> {
        self.shard(hash).read().unwrap_or_else(|p| p.into_inner())
    }

    #[inline]
    pub fn write(&self, hash: u64) -> RwLockWriteGuard<'_, Shard> {
        self.shard(hash).write().unwrap_or_else(|p| p.into_inner())
    }

    pub fn shard_count(&self) -> usize {
        self.shards.len()
    }

    pub fn read_shard(&self, i: usize) -> RwLockReadGuard<'_, Shard> {
        self.shards[i].read().unwrap_or_else(|p| p.into_inner())
    }

    pub fn write_shard(&self, i: usize) -> RwLockWriteGuard<'_, Shard> {
        self.shards[i].write().unwrap_or_else(|p| p.into_inner())
    }

    /// The rehash function hashbrown needs when a shard grows.
    #[inline]
    pub fn rehasher(&self) -> impl Fn(&Entry) -> u64 + '_ {
        move |e: &Entry| self.hasher.hash_one(e.key())
    }
}

#[inline]
pub fn find<'a>(shard: &'a Shard, hash: u64, key: &[u8]) -> Option<&'a Entry> {
    shard.find(hash, |e| e.key() == key)
}

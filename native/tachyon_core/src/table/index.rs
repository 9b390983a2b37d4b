//! The in-memory index: key -> where the value is (and, in the `Memory`
//! mode, the value itself), split into shards, each a `RwLock` over an
//! open-addressing hash table.
//!
//! Readers take one shard's read lock (shared: readers never wait for each
//! other); the writer takes one shard's write lock for the few nanoseconds of
//! an insert, so a reader waits at most that long, and only for its shard.
//!
//! A lookup in a big table is bound by cache misses, so the table is laid
//! out for two: a slot (full 64-bit hash + pointer, four to a cache line,
//! linear probing) and the node it points to, which holds the metadata, the
//! key and, in the `Memory` mode, the value, in one allocation. (A
//! `hashbrown` table costs one more: its control bytes, its buckets, then the
//! key.) Deletion shifts the following slots back, so there are no
//! tombstones and probe sequences stay short.
//!
//! The shard is chosen from bits 32..48 of the hash; the slot from the low
//! bits.

use std::alloc::{self, Layout};
use std::hash::BuildHasher;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

use crossbeam_utils::CachePadded;
use hashbrown::DefaultHashBuilder;

/// Node header; the key then (Memory mode) the value follow it.
#[repr(C)]
struct Header {
    seq: u64,
    klen: u32,
    vlen: u32,
    /// Segment slot and file offset of the value.
    slot: u32,
    off: u32,
    /// Bytes after the header (key, plus value in the Memory mode).
    data_len: u32,
    _pad: u32,
}

const HDR: usize = std::mem::size_of::<Header>();

/// Nodes come from the node arena ([`super::arena`]: 4 KiB pages faulted in
/// ahead of the writer by the reaper thread; a first touch of a transparent
/// huge page on the writer's path took 4-7 ms here); slot arrays from
/// mimalloc's default heap, allowed large OS pages (allocated at an open or
/// a resize, zeroed by mimalloc, off the put path).
fn init_allocator() {
    static INIT: std::sync::Once = std::sync::Once::new();
    INIT.call_once(|| {
        // Before mimalloc maps anything of its own for the index.
        super::arena::init();
        // SAFETY: setting an option before (and while) the allocator is in
        // use is supported; it only affects later segment allocations.
        unsafe { libmimalloc_sys::mi_option_set(libmimalloc_sys::mi_option_large_os_pages, 1) };
    });
}

fn node_alloc(layout: Layout) -> *mut u8 {
    init_allocator();
    // (A non-zero size, the header, and a power-of-two alignment.)
    let p = super::arena::alloc(layout.size(), layout.align());
    if p.is_null() {
        alloc::handle_alloc_error(layout);
    }
    p
}

fn node_free(p: *mut u8, _layout: Layout) {
    // SAFETY: `p` came from `node_alloc` and is freed once (Node's Drop).
    unsafe { libmimalloc_sys::mi_free(p as *mut std::ffi::c_void) };
}

/// One live key: an owned heap node. (`repr(transparent)` over a
/// `NonNull`: `Option<Node>` is a nullable pointer, all zero when `None`.)
#[repr(transparent)]
pub struct Node(NonNull<Header>);

// SAFETY: a Node owns its allocation exclusively (like a Box); it is only
// shared through `&Node` under the shard lock.
unsafe impl Send for Node {}
// SAFETY: as above; `&Node` only reads.
unsafe impl Sync for Node {}

impl Node {
    fn layout(data_len: usize) -> Layout {
        Layout::from_size_align(HDR + data_len, std::mem::align_of::<Header>())
            .expect("node layout")
    }

    /// A node for `key`; with `mem_value`, the value is stored in it too.
    pub fn new(
        key: &[u8],
        mem_value: Option<&[u8]>,
        vlen: u32,
        slot: u32,
        off: u32,
        seq: u64,
    ) -> Node {
        let data_len = key.len() + mem_value.map_or(0, |v| v.len());
        let layout = Self::layout(data_len);
        let p = node_alloc(layout) as *mut Header;
        let Some(p) = NonNull::new(p) else {
            alloc::handle_alloc_error(layout)
        };
        // SAFETY: `p` is a fresh allocation of HDR + data_len bytes, aligned
        // for Header; we initialise the header and then the data bytes.
        unsafe {
            p.as_ptr().write(Header {
                seq,
                klen: key.len() as u32,
                vlen,
                slot,
                off,
                data_len: data_len as u32,
                _pad: 0,
            });
            let d = (p.as_ptr() as *mut u8).add(HDR);
            std::ptr::copy_nonoverlapping(key.as_ptr(), d, key.len());
            if let Some(v) = mem_value {
                std::ptr::copy_nonoverlapping(v.as_ptr(), d.add(key.len()), v.len());
            }
        }
        Node(p)
    }

    #[inline]
    fn hdr(&self) -> &Header {
        // SAFETY: the pointer is valid and initialised for the node's life.
        unsafe { self.0.as_ref() }
    }

    #[inline]
    fn data(&self) -> &[u8] {
        let h = self.hdr();
        // SAFETY: `data_len` bytes follow the header, initialised in `new`.
        unsafe {
            std::slice::from_raw_parts((self.0.as_ptr() as *const u8).add(HDR), h.data_len as usize)
        }
    }

    #[inline]
    pub fn key(&self) -> &[u8] {
        &self.data()[..self.hdr().klen as usize]
    }

    /// The value stored in the node (Memory mode; empty otherwise).
    #[inline]
    pub fn mem_value(&self) -> &[u8] {
        &self.data()[self.hdr().klen as usize..]
    }

    #[inline]
    pub fn seq(&self) -> u64 {
        self.hdr().seq
    }

    #[inline]
    pub fn vlen(&self) -> u32 {
        self.hdr().vlen
    }

    #[inline]
    pub fn slot(&self) -> u32 {
        self.hdr().slot
    }

    #[inline]
    pub fn off(&self) -> u32 {
        self.hdr().off
    }

    /// Points the node at another copy of the value (compaction, or a new
    /// value when the node does not hold it).
    #[inline]
    pub fn set_loc(&mut self, slot: u32, off: u32, vlen: u32, seq: u64) {
        // SAFETY: `&mut self` is the only access to the node.
        let h = unsafe { self.0.as_mut() };
        h.slot = slot;
        h.off = off;
        h.vlen = vlen;
        h.seq = seq;
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let layout = Self::layout(self.hdr().data_len as usize);
        node_free(self.0.as_ptr() as *mut u8, layout);
    }
}

impl std::fmt::Debug for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Node")
            .field("key", &self.key())
            .field("seq", &self.seq())
            .field("slot", &self.slot())
            .field("off", &self.off())
            .field("vlen", &self.vlen())
            .finish()
    }
}

/// One slot: the key's full hash and its node (`None`: empty).
struct Slot {
    hash: u64,
    node: Option<Node>,
}

/// An open-addressing (linear probing) table of nodes.
pub struct Shard {
    slots: SlotArray,
    mask: usize,
    len: usize,
}

/// A zero-initialised array of slots (all empty), from mimalloc like the
/// nodes (huge pages for big tables).
struct SlotArray {
    ptr: NonNull<Slot>,
    len: usize,
}

// SAFETY: owns its slots (and through them the nodes) exclusively.
unsafe impl Send for SlotArray {}
// SAFETY: shared access only reads.
unsafe impl Sync for SlotArray {}

impl SlotArray {
    fn layout(len: usize) -> Layout {
        Layout::array::<Slot>(len).expect("slot array layout")
    }

    fn new(len: usize) -> SlotArray {
        let layout = Self::layout(len);
        init_allocator();
        // SAFETY: non-zero size (len >= 8), power-of-two alignment.
        let p = unsafe { libmimalloc_sys::mi_zalloc_aligned(layout.size(), layout.align()) }
            as *mut Slot;
        let Some(ptr) = NonNull::new(p) else {
            alloc::handle_alloc_error(layout)
        };
        // Huge pages (mimalloc's memory), faulted in here rather than by
        // the inserts that touch them first (each first touch of a 2 MiB
        // page is 4-7 ms of compaction here: docs in `super::arena`).
        crate::segment::map::populate_anon(p as *mut u8, 0, layout.size());
        // All-zero bytes are valid empty slots: hash 0 and `None` (a null
        // pointer, see Node).
        SlotArray { ptr, len }
    }
}

impl std::ops::Deref for SlotArray {
    type Target = [Slot];
    fn deref(&self) -> &[Slot] {
        // SAFETY: `len` initialised slots (zeroed = empty).
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl std::ops::DerefMut for SlotArray {
    fn deref_mut(&mut self) -> &mut [Slot] {
        // SAFETY: as for Deref, with `&mut self`.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for SlotArray {
    fn drop(&mut self) {
        // SAFETY: drop every slot's node, then the memory from SlotArray::new.
        unsafe {
            std::ptr::drop_in_place(std::ptr::slice_from_raw_parts_mut(
                self.ptr.as_ptr(),
                self.len,
            ));
            libmimalloc_sys::mi_free(self.ptr.as_ptr() as *mut std::ffi::c_void);
        }
    }
}

fn empty_slots(n: usize) -> SlotArray {
    SlotArray::new(n)
}

impl Default for Shard {
    fn default() -> Self {
        Shard::with_capacity(0)
    }
}

impl Shard {
    /// Room for `cap` keys before the first growth (load factor 7/10).
    pub fn with_capacity(cap: usize) -> Shard {
        let n = (cap * 10 / 7 + 1).max(8).next_power_of_two();
        Shard {
            slots: empty_slots(n),
            mask: n - 1,
            len: 0,
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Position of `key`, or of the empty slot where it would go.
    #[inline]
    fn probe(&self, hash: u64, key: &[u8]) -> (usize, bool) {
        let mut i = hash as usize & self.mask;
        loop {
            let s = &self.slots[i];
            match &s.node {
                None => return (i, false),
                Some(n) if s.hash == hash && n.key() == key => return (i, true),
                Some(_) => i = (i + 1) & self.mask,
            }
        }
    }

    #[inline]
    pub fn find(&self, hash: u64, key: &[u8]) -> Option<&Node> {
        let (i, found) = self.probe(hash, key);
        if found {
            self.slots[i].node.as_ref()
        } else {
            None
        }
    }

    #[inline]
    pub fn find_mut(&mut self, hash: u64, key: &[u8]) -> Option<&mut Node> {
        let (i, found) = self.probe(hash, key);
        if found {
            self.slots[i].node.as_mut()
        } else {
            None
        }
    }

    /// Inserts a node whose key is not in the table.
    pub fn insert_new(&mut self, hash: u64, node: Node) {
        if (self.len + 1) * 10 > self.slots.len() * 7 {
            self.grow();
        }
        let (i, found) = self.probe(hash, node.key());
        debug_assert!(!found, "insert_new of a present key");
        self.slots[i] = Slot {
            hash,
            node: Some(node),
        };
        self.len += 1;
    }

    fn grow(&mut self) {
        let n = self.slots.len() * 2;
        let mut old = std::mem::replace(&mut self.slots, empty_slots(n));
        self.mask = n - 1;
        for s in old.iter_mut() {
            if let Some(node) = s.node.take() {
                let mut i = s.hash as usize & self.mask;
                while self.slots[i].node.is_some() {
                    i = (i + 1) & self.mask;
                }
                self.slots[i] = Slot {
                    hash: s.hash,
                    node: Some(node),
                };
            }
        }
    }

    /// Removes `key`, shifting the following run of slots back so that no
    /// probe sequence has a hole.
    pub fn remove(&mut self, hash: u64, key: &[u8]) -> Option<Node> {
        let (mut i, found) = self.probe(hash, key);
        if !found {
            return None;
        }
        let out = self.slots[i].node.take();
        self.len -= 1;
        let mut j = i;
        loop {
            j = (j + 1) & self.mask;
            if self.slots[j].node.is_none() {
                break;
            }
            let ideal = self.slots[j].hash as usize & self.mask;
            // Move j back to i if its ideal slot is not in (i, j] (cyclic).
            let between = if i <= j {
                i < ideal && ideal <= j
            } else {
                i < ideal || ideal <= j
            };
            if !between {
                let moved = Slot {
                    hash: self.slots[j].hash,
                    node: self.slots[j].node.take(),
                };
                self.slots[i] = moved;
                i = j;
            }
        }
        out
    }

    /// Address of the slot array and the mask, for [`Index::prefetch`].
    fn base_mask(&self) -> (usize, usize) {
        (self.slots.as_ptr() as usize, self.mask)
    }

    pub fn iter(&self) -> impl Iterator<Item = &Node> {
        self.slots.iter().filter_map(|s| s.node.as_ref())
    }
}

/// A shard and, readable without its lock, where its slot array is (for
/// prefetching; possibly stale, which only makes a prefetch useless).
struct Cell {
    lock: RwLock<Shard>,
    base: AtomicUsize,
    mask: AtomicUsize,
}

pub struct Index {
    shards: Box<[CachePadded<Cell>]>,
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
                .map(|_| {
                    let shard = Shard::with_capacity(per);
                    let (b, m) = shard.base_mask();
                    CachePadded::new(Cell {
                        lock: RwLock::new(shard),
                        base: AtomicUsize::new(b),
                        mask: AtomicUsize::new(m),
                    })
                })
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
    fn cell(&self, hash: u64) -> &Cell {
        &self.shards[(hash >> 32) as usize & self.mask]
    }

    #[inline]
    pub fn read(&self, hash: u64) -> RwLockReadGuard<'_, Shard> {
        self.cell(hash)
            .lock
            .read()
            .unwrap_or_else(|p| p.into_inner())
    }

    #[inline]
    pub fn write(&self, hash: u64) -> RwLockWriteGuard<'_, Shard> {
        self.cell(hash)
            .lock
            .write()
            .unwrap_or_else(|p| p.into_inner())
    }

    pub fn shard_count(&self) -> usize {
        self.shards.len()
    }

    pub fn read_shard(&self, i: usize) -> RwLockReadGuard<'_, Shard> {
        self.shards[i]
            .lock
            .read()
            .unwrap_or_else(|p| p.into_inner())
    }

    pub fn write_shard(&self, i: usize) -> RwLockWriteGuard<'_, Shard> {
        self.shards[i]
            .lock
            .write()
            .unwrap_or_else(|p| p.into_inner())
    }

    /// Records where `shard` (the one of `hash`, write-locked by the
    /// caller) keeps its slots now; call after an insert (it may grow).
    #[inline]
    pub fn publish(&self, hash: u64, shard: &Shard) {
        let (b, m) = shard.base_mask();
        let c = self.cell(hash);
        c.base.store(b, Ordering::Relaxed);
        c.mask.store(m, Ordering::Relaxed);
    }

    /// Starts loading the cache line of the slot where `hash` probes first,
    /// so that it is there by the time the caller takes the shard's lock.
    #[inline]
    pub fn prefetch(&self, hash: u64) {
        let c = self.cell(hash);
        let addr = c.base.load(Ordering::Relaxed).wrapping_add(
            (hash as usize & c.mask.load(Ordering::Relaxed)) * std::mem::size_of::<Slot>(),
        );
        #[cfg(target_arch = "x86_64")]
        // SAFETY: a prefetch is a hint: it never faults and has no effect on
        // memory, whatever the address (a stale one only wastes the hint).
        unsafe {
            std::arch::x86_64::_mm_prefetch(addr as *const i8, std::arch::x86_64::_MM_HINT_T0);
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = addr;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn model_with_collisions_and_wraparound() {
        // A tiny table and a hash that collides a lot: every probe path,
        // growth and back-shift across the end of the array.
        let mut s = Shard::with_capacity(0);
        let mut model: HashMap<Vec<u8>, u64> = HashMap::new();
        let hash =
            |k: &[u8]| (k.iter().map(|&b| b as u64).sum::<u64>() % 13) | (u64::from(k[0]) << 60);
        let mut x = 7u64;
        for step in 0..50_000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let k = format!("k{}", x % 200).into_bytes();
            let h = hash(&k);
            match x % 3 {
                0 => {
                    if let Some(n) = s.find_mut(h, &k) {
                        n.set_loc(1, 2, 3, step);
                    } else {
                        s.insert_new(h, Node::new(&k, Some(b"val"), 3, 0, 0, step));
                    }
                    model.insert(k, step);
                }
                1 => {
                    assert_eq!(s.remove(h, &k).map(|n| n.seq()), model.remove(&k));
                }
                _ => {
                    assert_eq!(s.find(h, &k).map(|n| n.seq()), model.get(&k).copied());
                }
            }
            assert_eq!(s.len(), model.len());
        }
        for (k, v) in &model {
            let n = s.find(hash(k), k).unwrap();
            assert_eq!(n.seq(), *v);
            assert_eq!(n.key(), &k[..]);
            assert_eq!(n.mem_value(), b"val");
        }
        assert_eq!(s.iter().count(), model.len());
    }
}

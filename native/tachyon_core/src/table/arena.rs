//! Where the index's nodes live: one region of address space given to
//! mimalloc as an arena of their own, in 4 KiB pages, faulted in ahead of
//! the allocations by the reaper thread.
//!
//! Why. mimalloc asks for transparent huge pages on the memory it maps
//! (`madvise(MADV_HUGEPAGE)` on its 1 GiB arenas, whatever its options
//! say: seen with `strace`), and with the kernel's default THP `defrag`
//! setting (`madvise`) the first touch of each 2 MiB page then compacts
//! memory synchronously to find one. Measured on the 2-core KVM guest
//! (`/tmp/touch`-style loop: one write per 4 KiB over 512 MiB of fresh
//! anonymous memory, after `echo 3 > /proc/sys/vm/drop_caches`): with
//! `MADV_HUGEPAGE` each 2 MiB fault took 4.4-6.9 ms (336-441 MB/s; 6.7 ms
//! even with memory warm); with `MADV_NOHUGEPAGE` a 4 KiB fault took
//! 1.3-1.7 us at the median, 0.24-0.32 ms at worst (2.0-2.5 GB/s). In the
//! table that was one put of 4.4-5.2 ms every ~6,500 puts of 256 bytes
//! (2 MiB of nodes): 174-181 per 1,000,000 puts in a Rust loop, and the
//! in-memory put's max of 12-25 ms in `mix tachyon.bench table`.
//!
//! How. At the first table's open, [`init`] maps [`ARENA_SIZE`] of address
//! space (`MAP_NORESERVE`: nothing is committed until touched), asks for no
//! huge pages on it, gives it to mimalloc (`mi_manage_os_memory_ex`,
//! exclusive) and makes a heap in it ([`alloc`] takes the nodes from
//! there; mimalloc's heaps are first-class: any thread allocates from one).
//! After each node allocation, [`allocated`] checks one bit: whether the
//! 2 MiB stretch [`AHEAD`] bytes past the node was asked for already. If
//! not, it marks the stretches from the node's to that one and hands their
//! faulting-in (`MADV_POPULATE_WRITE`, which changes no byte) to the reaper
//! thread: mimalloc hands a thread's allocations out of a chunk in address
//! order, so the pages past the last node are the next ones used, and the
//! writer takes no page fault at all.
//!
//! What it costs. 4 KiB pages: a lookup in a very large table misses the
//! TLB more often than with huge pages. Up to [`AHEAD`] of memory is
//! faulted in before it is used, per place mimalloc allocates from. Pages
//! that mimalloc gives back to the OS after a free (purged) and reuses
//! later are faulted in by whoever touches them. Past [`ARENA_SIZE`] of
//! nodes and slot arrays, or where the map or mimalloc refuse, nodes come from mimalloc's
//! default heap as before.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

/// Address space given to mimalloc (reserved, not committed). (mimalloc
/// 3.3 refuses an arena of 16 GiB: its meta-information would take 521
/// slices, more than its largest object of 512.)
pub const ARENA_SIZE: usize = 8 << 30;
/// The unit of faulting-in ahead.
const STRETCH: usize = 2 << 20;
/// How far past each allocation the pages are faulted in ahead.
pub const AHEAD: usize = 16 << 20;
/// mimalloc's arenas are aligned to this (a multiple of its slice size).
const ALIGN: usize = 64 << 20;

struct Heap(*mut libmimalloc_sys::mi_heap_t);

// SAFETY: a mimalloc v3 heap is first-class: any thread may allocate from
// it and free its blocks (mimalloc.h, "Heaps: first-class"); the pointer is
// never written after creation.
unsafe impl Send for Heap {}
// SAFETY: as above.
unsafe impl Sync for Heap {}

struct Arena {
    base: usize,
    /// The arena's own heap (the arena is exclusive to it).
    heap: Heap,
    /// One bit per 2 MiB stretch: its faulting-in was asked for.
    asked: Box<[AtomicU64]>,
}

static ARENA: OnceLock<Option<Arena>> = OnceLock::new();

/// Maps the arena and gives it to mimalloc, once per process (from the
/// first table's open, on a dirty scheduler). Without it (the map or
/// mimalloc refused), nodes come from mimalloc's default heap.
pub fn init() {
    ARENA.get_or_init(map_arena);
}

fn map_arena() -> Option<Arena> {
    let len = ARENA_SIZE + ALIGN;
    // SAFETY: a fresh private anonymous mapping, owned by nobody else.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return None;
    }
    let base = (p as usize + ALIGN - 1) & !(ALIGN - 1);
    // SAFETY: [base, base + ARENA_SIZE) lies inside the mapping just made
    // (base - p < ALIGN); the advice only changes how it is backed.
    unsafe { libc::madvise(base as *mut libc::c_void, ARENA_SIZE, libc::MADV_NOHUGEPAGE) };
    let mut id: libmimalloc_sys::mi_arena_id_t = std::ptr::null_mut();
    // SAFETY: the range stays mapped read-write for the life of the process
    // (never unmapped: mimalloc owns it from here on), is aligned to 64 MiB,
    // zero (fresh anonymous memory) and committed in mimalloc's sense
    // (accessible; the kernel backs a page at its first touch).
    let ok = unsafe {
        libmimalloc_sys::mi_manage_os_memory_ex(
            base as *const libc::c_void,
            ARENA_SIZE,
            true,
            false,
            true,
            -1,
            true,
            &mut id,
        )
    };
    if !ok {
        // SAFETY: the mapping made above, handed to no one.
        unsafe { libc::munmap(p, len) };
        return None;
    }
    // SAFETY: `id` is the arena just registered.
    let heap = unsafe { libmimalloc_sys::mi_heap_new_in_arena(id) };
    if heap.is_null() {
        // (The arena stays registered, unused.)
        return None;
    }
    let words = ARENA_SIZE / STRETCH / 64;
    Some(Arena {
        base,
        heap: Heap(heap),
        asked: (0..words).map(|_| AtomicU64::new(0)).collect(),
    })
}

/// `size` bytes aligned to `align` (a power of two) for a node: from the
/// arena's heap if there is one, else from mimalloc's default heap. Null if
/// out of memory. Freed with `mi_free`.
#[inline]
pub fn alloc(size: usize, align: usize) -> *mut u8 {
    match ARENA.get() {
        Some(Some(a)) => {
            // SAFETY: the arena's heap lives as long as the process.
            let p = unsafe { libmimalloc_sys::mi_heap_malloc_aligned(a.heap.0, size, align) };
            if p.is_null() {
                // The arena is full: mimalloc's default heap.
                // SAFETY: plain mimalloc allocation.
                return unsafe { libmimalloc_sys::mi_malloc_aligned(size, align) as *mut u8 };
            }
            allocated(p as *const u8, size);
            p as *mut u8
        }
        // SAFETY: plain mimalloc allocation.
        _ => unsafe { libmimalloc_sys::mi_malloc_aligned(size, align) as *mut u8 },
    }
}

/// After a node of `len` bytes was allocated at `p`: has the pages up to
/// [`AHEAD`] past it faulted in by the reaper thread, unless asked already.
/// One relaxed load when they were (nearly always).
#[inline]
pub fn allocated(p: *const u8, len: usize) {
    let Some(Some(a)) = ARENA.get() else {
        return;
    };
    let Some(off) = (p as usize).checked_sub(a.base) else {
        return;
    };
    if off >= ARENA_SIZE {
        return;
    }
    let last = ((off + len + AHEAD).min(ARENA_SIZE) - 1) / STRETCH;
    if a.asked[last / 64].load(Ordering::Relaxed) & (1 << (last % 64)) != 0 {
        return;
    }
    a.ask(off / STRETCH, last);
}

impl Arena {
    /// Marks stretches `first..=last` asked for and hands the faulting-in
    /// of those no one asked for before to the reaper, in one job.
    #[cold]
    fn ask(&self, first: usize, last: usize) {
        let mut from = None;
        let mut to = 0;
        for s in first..=last {
            let bit = 1u64 << (s % 64);
            if self.asked[s / 64].fetch_or(bit, Ordering::Relaxed) & bit == 0 {
                from.get_or_insert(s);
                to = s + 1;
            }
        }
        let Some(from) = from else {
            return;
        };
        let base = self.base;
        crate::worker::defer(move || {
            // (Stretches in [from, to) asked for by another caller
            // meanwhile are faulted in twice: the second finds them there.)
            crate::segment::map::populate_anon(base as *mut u8, from * STRETCH, to * STRETCH);
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nodes_come_from_the_arena_and_the_pages_ahead_are_asked_for_once() {
        init();
        // (On Linux with overcommit the arena must exist.)
        let a = ARENA
            .get()
            .and_then(|a| a.as_ref())
            .expect("the node arena");
        let asked = |s: usize| a.asked[s / 64].load(Ordering::Relaxed) & (1 << (s % 64)) != 0;
        let p = alloc(300, 8);
        assert!(!p.is_null());
        let off = (p as usize).wrapping_sub(a.base);
        assert!(off < ARENA_SIZE, "a node outside the arena: {p:?}");
        assert!((off / STRETCH..=(off + 300 + AHEAD - 1) / STRETCH).all(asked));
        // SAFETY: allocated above, freed once.
        unsafe { libmimalloc_sys::mi_free(p as *mut libc::c_void) };

        // Far into the arena, where mimalloc has not been: faulting its
        // pages in changes no byte.
        let off = ARENA_SIZE - 4 * AHEAD;
        assert!(!asked(off / STRETCH));
        allocated((a.base + off) as *const u8, 300);
        let last = (off + 300 + AHEAD - 1) / STRETCH;
        assert!((off / STRETCH..=last).all(asked));
        assert!(!asked(last + 1));
        // The next node a stretch further: only the one stretch past is new.
        allocated((a.base + off + STRETCH) as *const u8, 300);
        assert!(asked(last + 1) && !asked(last + 2));
        // Outside the arena: ignored.
        allocated(std::ptr::null(), 8);
        allocated((a.base + ARENA_SIZE) as *const u8, 8);
    }
}

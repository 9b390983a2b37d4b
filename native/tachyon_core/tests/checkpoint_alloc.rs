//! A checkpoint's counts (of epochs, membership changes, members) size no
//! allocation before they are checked against the bytes that follow: a
//! short checkpoint claiming 2^20 members reserved a map for them (34 MB)
//! before it failed. The largest allocation of a decode is measured by
//! this test binary's own allocator.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use tachyon_core::seq::core::node::checkpoint::Checkpoint;

struct Largest;

static ON: AtomicBool = AtomicBool::new(false);
static LARGEST: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is passed on to the system allocator unchanged; the
// only addition is an atomic maximum of the sizes asked for.
unsafe impl GlobalAlloc for Largest {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if ON.load(Ordering::Relaxed) {
            LARGEST.fetch_max(layout.size(), Ordering::Relaxed);
        }
        // SAFETY: the caller's contract for `alloc` is the system's.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` was allocated by `System` with `layout`.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOC: Largest = Largest;

/// A checkpoint whose counts are `epochs`, `configs`, `members`, with no
/// items after them, and a valid CRC.
fn claiming(epochs: u32, configs: u32, members: u32) -> Vec<u8> {
    let mut b = Vec::new();
    b.extend_from_slice(&0x504b_4354u32.to_le_bytes());
    b.extend_from_slice(&1u32.to_le_bytes());
    b.extend_from_slice(&900u64.to_le_bytes());
    b.extend_from_slice(&77u64.to_le_bytes());
    for n in [epochs, configs, members] {
        b.extend_from_slice(&n.to_le_bytes());
    }
    let crc = tachyon_core::crc::crc32c(&b);
    b.extend_from_slice(&crc.to_le_bytes());
    b
}

#[test]
fn a_checkpoints_counts_reserve_nothing_beyond_its_bytes() {
    for (e, c, m) in [
        (u32::MAX, 0, 0),
        (0, u32::MAX, 0),
        (0, 0, u32::MAX),
        (0, 0, 1 << 20),
        (1 << 16, 0, 0),
    ] {
        let b = claiming(e, c, m);
        LARGEST.store(0, Ordering::Relaxed);
        ON.store(true, Ordering::Relaxed);
        let got = Checkpoint::decode(&b);
        ON.store(false, Ordering::Relaxed);
        assert_eq!(got, None);
        let largest = LARGEST.load(Ordering::Relaxed);
        assert!(
            largest < 4096,
            "counts ({e}, {c}, {m}): an allocation of {largest} bytes"
        );
    }
}

//! Write prefetches for the hot paths' next record.
//!
//! A store append copies its record into log lines that are not in this
//! core's cache (the pre-touch thread mapped the page; nobody has touched
//! the lines since), and an async-store producer into ring lines the writer
//! thread last read on the other core. Each first store to such a line
//! needs a read-for-ownership, and the next locked instruction (the lock of
//! the next append) waits for all of them. [`write_range`] starts fetching
//! the lines of the *next* record in the exclusive state (`prefetchw`) at
//! the end of an append: the caller goes back to its own work while they
//! come. `prefetchw` is a no-op on x86 CPUs without it; other architectures
//! skip the hint.

/// Prefetches for writing every cache line of `[p, p + len)`. Never faults
/// and never changes memory, whatever the addresses.
#[inline(always)]
pub fn write_range(p: *const u8, len: usize) {
    let mut line = (p as usize) & !63;
    let end = p as usize + len;
    while line < end {
        line_for_write(line as *const u8);
        line += 64;
    }
}

#[inline(always)]
fn line_for_write(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is a hint: it reads nothing architecturally,
    // writes nothing and never faults, whatever the address.
    unsafe {
        std::arch::asm!("prefetchw [{}]", in(reg) p, options(nostack, preserves_flags, readonly));
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

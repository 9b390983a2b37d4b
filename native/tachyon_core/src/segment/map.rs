//! The maps of a segment file: a read-only one for readers, and a writable
//! one while the segment may be written.
//!
//! Readers (the store's `read`, the table's `Mapped` gets, hint writing,
//! compaction, recovery) read through the read-only map; the single writer
//! copies records in through the [`WriteMap`]. Both are shared file maps of
//! the same pages, so a record published through one is seen through the
//! other (the parts publish with release stores or locks).
//!
//! The writable map goes as soon as the segment is sealed
//! ([`Maps::release_writable`]): while a shared file map is writable, every
//! page the kernel writes back (after 30 s, under dirty-page pressure, or
//! on `sync`) must first be write-protected in it, one TLB-shootdown
//! interrupt per page to every CPU running the process, the writer's
//! included (measured on the table: 30-40% of put throughput while a sealed
//! 64 MiB segment was synced). Read-only entries are left alone.
//!
//! Unmapping 64 MiB of dirty, mapped pages holds the process's mmap lock
//! for milliseconds, and every page fault of the process (the BEAM's heap,
//! the writer's) waits behind it; so a writable map is released a chunk of
//! page table entries at a time before it is unmapped, and never on the
//! writer's thread: a background thread releases it
//! ([`Maps::release_writable`]), a writer *retires* it ([`retire`]): hands
//! it to the reaper thread ([`crate::worker::defer`]).

use std::fs::File;
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use memmap2::{MmapOptions, MmapRaw};

use crate::sys::lock;

/// Page size the segments are aligned to.
pub const PAGE: usize = 4096;

/// Bytes per `madvise` call when releasing pages: 1 MiB (256 pages), a
/// fraction of a millisecond with the mmap lock held. The call holds the
/// process's mmap lock (shared), and an `mmap`/`munmap` anywhere in the VM
/// (which takes it exclusively), then every page fault behind that, waits
/// for it: 32 MiB at once held it for milliseconds.
pub const MM_CHUNK: usize = 1 << 20;

/// Bytes per call when faulting pages in: 128 KiB (32 pages, 66-74 us at
/// the median on the 2-core KVM guest, against 0.6-0.8 ms for 1 MiB), a
/// piece of background work short enough for [`crate::worker::pace`]. A
/// file's pages are read in first with `MADV_WILLNEED` on the piece
/// alone: the first fault of a populate in a file map reads
/// `read_ahead_kb` around it (8 MiB on this guest's disk, zeroed in large
/// folios), one system call of 5-12 ms that no pacing can split. (Pieces
/// cost more in total: 64 MiB of a fresh segment took 100-130 ms this way
/// against 40-60 ms in 1 MiB calls with the kernel's read-around; a
/// background thread pays that, never the writer.)
const POPULATE_PIECE: usize = crate::worker::PACE_BYTES;

/// The maps of one segment file.
pub struct Maps {
    ro: MmapRaw,
    rw: Mutex<Option<Arc<WriteMap>>>,
}

/// The writable map of a segment being written. Shared (`Arc`) by the
/// segment's [`Maps`], the writer and the prepare thread; unmapped when the
/// last holder lets go (by the reaper, once retired).
pub struct WriteMap {
    map: MmapRaw,
}

// SAFETY: the map is shared memory. Only the segment's single writer (which
// holds its part's writer lock, or is the thread writing a compaction
// output) stores into it, into bytes no reader looks at before they are
// published; populating and releasing pages changes no byte.
unsafe impl Send for WriteMap {}
// SAFETY: as for Send.
unsafe impl Sync for WriteMap {}

// SAFETY: the read-only map is only read, through the owning part's
// published ranges; the writable one is behind a mutex and `WriteMap`'s
// own contract.
unsafe impl Send for Maps {}
// SAFETY: as for Send.
unsafe impl Sync for Maps {}

impl Maps {
    /// Maps the first `len` bytes of `file` read-only and, if `writable`,
    /// writable too. The file must be at least `len` bytes long (allocated:
    /// see [`super::create`]).
    pub fn new(file: &File, len: usize, writable: bool) -> io::Result<Maps> {
        let ro = MmapOptions::new().len(len).map_raw_read_only(file)?;
        let rw = if writable {
            let map = MmapOptions::new().len(len).map_raw(file)?;
            // No read-around: a write fault there (the writer's, if the
            // pages were not faulted in ahead of it) reads one page, not
            // `read_ahead_kb` (8 MiB, 5-12 ms here) around it.
            // SAFETY: the whole map just made; the advice changes no byte.
            unsafe {
                libc::madvise(
                    map.as_mut_ptr() as *mut libc::c_void,
                    len,
                    libc::MADV_RANDOM,
                )
            };
            Some(Arc::new(WriteMap { map }))
        } else {
            None
        };
        Ok(Maps {
            ro,
            rw: Mutex::new(rw),
        })
    }

    pub fn len(&self) -> usize {
        self.ro.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ro.len() == 0
    }

    /// The start of the read-only map.
    #[inline]
    pub fn ptr(&self) -> *const u8 {
        self.ro.as_ptr()
    }

    /// The bytes `[off, off + len)`, or `None` outside the map.
    ///
    /// # Safety
    /// The range was published to the caller and is not written any more
    /// while the slice lives (below the segment's end in an append-only
    /// log, or written by the caller itself).
    #[inline]
    pub unsafe fn slice(&self, off: usize, len: usize) -> Option<&[u8]> {
        if off.checked_add(len)? > self.ro.len() {
            return None;
        }
        // SAFETY: in bounds (checked above); publication is the caller's.
        Some(unsafe { std::slice::from_raw_parts(self.ro.as_ptr().add(off), len) })
    }

    /// The writable map, while there is one.
    pub fn writable(&self) -> Option<Arc<WriteMap>> {
        lock(&self.rw).clone()
    }

    /// Takes the segment's hold on its writable map without retiring it:
    /// for a caller that holds another clone and retires that one.
    pub fn take_writable(&self) -> Option<Arc<WriteMap>> {
        lock(&self.rw).take()
    }

    /// Lets the writable map go (the segment is sealed), on this thread: a
    /// background thread's (the caller's thread unmaps it if no writer or
    /// prepare thread holds it any more, its pages released a chunk at a
    /// time first). A writer retires its map instead ([`retire`]).
    pub fn release_writable(&self) {
        if let Some(w) = self.take_writable() {
            release(w);
        }
    }

    /// Faults `[from, to)` in without changing a byte: writable in the
    /// writable map (if there is one) so the writer takes no page fault
    /// there, and with `read` in the read-only map too, so readers of fresh
    /// records take none either.
    pub fn populate(&self, from: usize, to: usize, read: bool) {
        if let Some(w) = self.writable() {
            w.populate(from, to);
        }
        if read {
            populate(
                self.ro.as_ptr() as *mut u8,
                self.ro.len(),
                from,
                to,
                Access::Read,
                true,
            );
        }
    }

    /// Bytes of `[from, to)` whose pages are in the page cache (`mincore`
    /// on the read-only map: no page is faulted in).
    pub fn resident(&self, from: usize, to: usize) -> io::Result<usize> {
        let from = from & !(PAGE - 1);
        let to = to.min(self.ro.len());
        if to <= from {
            return Ok(0);
        }
        let pages = (to - from).div_ceil(PAGE);
        let mut vec = vec![0u8; pages];
        // SAFETY: [from, to) lies inside the read-only map, `from` page
        // aligned; `vec` has one byte per page of it.
        let rc = unsafe {
            libc::mincore(
                self.ro.as_ptr().add(from) as *mut libc::c_void,
                to - from,
                vec.as_mut_ptr(),
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(vec.iter().filter(|&&b| b & 1 == 1).count() * PAGE)
    }

    /// `msync` (waits) of `[from, to)` of the writable map, or `fdatasync`
    /// of `file` if there is none (its pages are the file's).
    pub fn sync_range(&self, file: &File, from: usize, to: usize) -> io::Result<()> {
        let Some(w) = self.writable() else {
            return file.sync_data();
        };
        let from = from & !(PAGE - 1);
        let to = to.min(w.map.len());
        if to <= from {
            return Ok(());
        }
        w.map.flush_range(from, to - from)
    }

    /// Writes the dirty pages of `[from, to)` of `file` back
    /// (`sync_file_range`), and with `wait` waits for them (and for any
    /// writeback of the range already under way), without the device cache
    /// flush of [`Maps::sync_range`]: the pages are durable once a later
    /// `sync_range` of the same file returns (its `fdatasync` commits the
    /// file's metadata and flushes the device's cache, writes done before
    /// it included). Without `wait`, writeback only starts. Where the file
    /// system refuses `sync_file_range`, does a `sync_range` instead.
    pub fn write_back(&self, file: &File, from: usize, to: usize, wait: bool) -> io::Result<()> {
        use std::os::fd::AsRawFd;
        let from = from & !(PAGE - 1);
        if to <= from {
            return Ok(());
        }
        let flags = if wait {
            libc::SYNC_FILE_RANGE_WAIT_BEFORE
                | libc::SYNC_FILE_RANGE_WRITE
                | libc::SYNC_FILE_RANGE_WAIT_AFTER
        } else {
            libc::SYNC_FILE_RANGE_WRITE
        };
        // SAFETY: a system call on a descriptor `file` keeps open; it reads
        // no memory of ours.
        let rc = unsafe {
            libc::sync_file_range(file.as_raw_fd(), from as i64, (to - from) as i64, flags)
        };
        if rc == 0 {
            Ok(())
        } else if wait {
            self.sync_range(file, from, to)
        } else {
            Ok(())
        }
    }
}

impl WriteMap {
    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.len() == 0
    }

    /// The start of the map (for stores the owner has checked).
    #[inline]
    pub fn ptr(&self) -> *mut u8 {
        self.map.as_mut_ptr()
    }

    /// A mutable view of `[off, off + len)`, to write a record in place.
    /// Panics outside the map.
    ///
    /// # Safety
    /// The caller is the only writer, nobody reads `[off, off + len)` (it
    /// is past the segment's published end) and the slice is dropped before
    /// the bytes are published.
    #[inline]
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn slice_mut(&self, off: usize, len: usize) -> &mut [u8] {
        assert!(
            off.checked_add(len).is_some_and(|e| e <= self.map.len()),
            "write outside the segment"
        );
        // SAFETY: in bounds; exclusivity is the caller's contract.
        unsafe { std::slice::from_raw_parts_mut(self.map.as_mut_ptr().add(off), len) }
    }

    /// Starts bringing the cache lines of `[off, off + len)` in for writing
    /// (`prefetchw`), so that the next record's stores do not wait for them
    /// (see [`crate::prefetch`]).
    #[inline]
    pub fn prefetch_write(&self, off: usize, len: usize) {
        let off = off.min(self.map.len());
        let len = len.min(self.map.len() - off);
        // SAFETY: `off <= len()`, so the pointer is inside the map or one
        // past its end (then `len` is 0).
        crate::prefetch::write_range(unsafe { self.map.as_ptr().add(off) }, len);
    }

    /// Faults `[from, to)` in writable without changing its bytes.
    pub fn populate(&self, from: usize, to: usize) {
        populate(
            self.map.as_mut_ptr(),
            self.map.len(),
            from,
            to,
            Access::Write,
            true,
        );
    }

    /// `msync` of the whole map without waiting (starts writeback).
    pub fn flush_async(&self) {
        let _ = self.map.flush_async();
    }

    /// Drops this map's page table entries, a chunk at a time
    /// (`MADV_DONTNEED`, which holds the mmap lock shared), ahead of its
    /// unmap. The data is untouched: for a shared file map the pages stay in
    /// the page cache (dirty ones are written back as usual).
    pub fn release_pages(&self) {
        let len = self.map.len() & !(PAGE - 1);
        let mut at = 0;
        while at < len {
            let end = (at + MM_CHUNK).min(len);
            // SAFETY: [at, end) is page aligned and inside the map; for a
            // shared file map MADV_DONTNEED only drops page table entries,
            // the bytes stay the file's.
            unsafe {
                libc::madvise(
                    self.map.as_mut_ptr().add(at) as *mut libc::c_void,
                    end - at,
                    libc::MADV_DONTNEED,
                );
            }
            at = end;
            crate::worker::pace();
        }
    }
}

/// Hands `w` to the reaper: its pages are released a chunk at a time and it
/// is unmapped there if that was the last hold (else by whoever lets go
/// last: a reader or the prepare thread, never the writer, which retires its
/// own hold).
pub fn retire(w: Arc<WriteMap>) {
    crate::worker::defer(move || release(w));
}

/// Drops `w`, its pages released first, a chunk at a time, if this was the
/// last hold.
fn release(w: Arc<WriteMap>) {
    if Arc::strong_count(&w) == 1 {
        w.release_pages();
    }
    drop(w);
}

/// How [`populate`] faults pages in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Access {
    Read,
    Write,
}

/// Whether the kernel knows `MADV_POPULATE_READ` / `_WRITE` (5.14 on);
/// cleared at the first `EINVAL`.
static POPULATE_READ_OK: AtomicBool = AtomicBool::new(true);
static POPULATE_WRITE_OK: AtomicBool = AtomicBool::new(true);

/// Faults the pages of `[from, to)` of the map at `base` (`len` bytes) in,
/// a [`POPULATE_PIECE`] at a time (a `file` map's piece read in first),
/// without changing a byte; [`crate::worker::pace`] between pieces.
///
/// With `MADV_POPULATE_WRITE` / `_READ`; on an older kernel (`EINVAL`) with
/// `MADV_WILLNEED` instead, which brings the pages into the page cache (the
/// kernel zeroing a fresh page, the slow part) without mapping them, so the
/// writer's or reader's first access there only takes a minor fault. Both
/// are safe on any range of the map, even past the end of a file that was
/// cut meanwhile (no access is made, so no `SIGBUS`).
fn populate(base: *mut u8, len: usize, from: usize, to: usize, how: Access, file: bool) {
    let from = from & !(PAGE - 1);
    let to = to.min(len);
    let (ok, advice) = match how {
        Access::Read => (&POPULATE_READ_OK, libc::MADV_POPULATE_READ),
        Access::Write => (&POPULATE_WRITE_OK, libc::MADV_POPULATE_WRITE),
    };
    let mut at = from;
    while at < to {
        let end = (at + POPULATE_PIECE).min(to);
        if file || !ok.load(Ordering::Relaxed) {
            advise(base, at, end, libc::MADV_WILLNEED);
        }
        if ok.load(Ordering::Relaxed) && advise(base, at, end, advice) == Some(libc::EINVAL) {
            // Kernel older than 5.14: the pieces are only read in.
            ok.store(false, Ordering::Relaxed);
            advise(base, at, end, libc::MADV_WILLNEED);
        }
        at = end;
        crate::worker::pace();
    }
}

/// Faults `[from, to)` of anonymous memory at `base` in, writable, without
/// changing a byte (the table's node arena and slot arrays; on a kernel
/// without `MADV_POPULATE_WRITE` the fallback does nothing for anonymous
/// memory).
pub(crate) fn populate_anon(base: *mut u8, from: usize, to: usize) {
    populate(base, to, from, to, Access::Write, false);
}

/// `madvise(advice)` of `[from, to)` of the map at `base`; the errno if it
/// failed.
fn advise(base: *mut u8, from: usize, to: usize, advice: libc::c_int) -> Option<i32> {
    // SAFETY: [from, to) starts page aligned and lies inside the map (the
    // kernel rounds the length up to whole pages, all of them mapped: a map
    // covers whole pages); the advices used here only fault pages in or
    // read them ahead, and change no byte.
    let rc = unsafe { libc::madvise(base.add(from) as *mut libc::c_void, to - from, advice) };
    (rc != 0).then(|| io::Error::last_os_error().raw_os_error().unwrap_or(0))
}

#[cfg(test)]
pub(super) fn populate_without_madv_populate(base: *mut u8, len: usize, from: usize, to: usize) {
    let mut at = from & !(PAGE - 1);
    while at < to.min(len) {
        let end = (at + MM_CHUNK).min(to.min(len));
        assert_eq!(advise(base, at, end, libc::MADV_WILLNEED), None);
        at = end;
    }
}

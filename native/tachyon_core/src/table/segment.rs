//! One segment file of a table's log.
//!
//! In the `Memory` and `Mapped` modes the file is memory-mapped (shared),
//! twice while it is written: the writer copies records into a writable
//! mapping ([`WriteMap`]), and readers (`Mapped` gets, hint writing,
//! compaction, recovery) read through a read-only one. The writable mapping
//! goes as soon as the segment is sealed, before the background thread
//! `fdatasync`s it: writeback write-protects every writable, dirty page
//! table entry of a shared file mapping, one TLB-shootdown interrupt per
//! page to every CPU running the process, so syncing a sealed 64 MiB
//! segment that is still mapped writable interrupts the writer 16,384 times
//! (measured: 30-40% of put throughput). Read-only entries are left alone.
//! In the `File` mode nothing is mapped: records go out with `pwrite` and
//! values come back with `pread`.
//!
//! A segment that will be written (the active one, a compaction output) is
//! created with `fallocate` for its whole capacity before anything is written
//! to it, so a full disk shows up as `ENOSPC` from `fallocate` (an error the
//! caller returns) and never as a `SIGBUS` on a store into the map.

use std::borrow::Cow;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use memmap2::{MmapOptions, MmapRaw};

use super::format::*;

/// A segment file and its counters.
pub struct Segment {
    pub id: u64,
    /// Index in the table's segment slot array (what index entries store).
    pub slot: u32,
    pub path: PathBuf,
    file: File,
    /// Read-only mapping (`Memory` and `Mapped` modes).
    map: Option<MmapRaw>,
    /// Writable mapping, while the segment may be written (see the module
    /// doc); taken by [`Segment::release_writable`].
    wmap: Mutex<Option<Arc<WriteMap>>>,
    /// Bytes of the file that may be written (preallocated), or the file
    /// length for a read-only segment.
    pub cap: usize,
    pub writable: bool,
    /// End of the valid records (file offset).
    pub end: AtomicU64,
    /// Bytes of entries still live (see `format::entry_cost`).
    pub live: AtomicU64,
    /// Bytes of all entries ever written to this segment.
    pub total: AtomicU64,
    /// Bytes of delete entries (tombstones): neither live nor garbage.
    pub tombs: AtomicU64,
    pub min_seq: AtomicU64,
    pub max_seq: AtomicU64,
    /// No record will be added (not the active segment, not an unfinished
    /// compaction output).
    pub sealed: AtomicBool,
    /// A hint file exists (the segment is durable and truncated to `end`).
    pub hinted: AtomicBool,
    /// Bytes known to be on stable storage.
    pub synced: AtomicU64,
    /// Bytes faulted in ahead of the writer (prepare thread).
    pub touched: std::sync::atomic::AtomicUsize,
}

impl std::fmt::Debug for Segment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Segment")
            .field("id", &self.id)
            .field("slot", &self.slot)
            .field("end", &self.end.load(Ordering::Relaxed))
            .field("live", &self.live.load(Ordering::Relaxed))
            .field("total", &self.total.load(Ordering::Relaxed))
            .finish()
    }
}

// SAFETY: the raw maps are shared memory. The writer only stores into bytes
// at or after `end`, which no reader looks at, and publishes them through the
// table's locks before any reader can learn their offsets; readers only read
// below `end`. Everything else is atomics, a mutex or immutable.
unsafe impl Send for Segment {}
// SAFETY: as for Send.
unsafe impl Sync for Segment {}

/// The writable mapping of a segment being written. Shared (`Arc`) by the
/// segment, the writer and the prepare thread; unmapped when the last holder
/// lets go.
pub struct WriteMap {
    map: MmapRaw,
}

// SAFETY: as for Segment: only the single writer (which holds the table's
// writer lock, or is the background thread writing a compaction output)
// stores into it, past `end`; `populate` changes no byte.
unsafe impl Send for WriteMap {}
// SAFETY: as for Send.
unsafe impl Sync for WriteMap {}

impl WriteMap {
    /// A mutable view of `[off, off + len)`, to encode a record in place (no
    /// intermediate buffer).
    ///
    /// # Safety
    /// The caller is the only writer, `[off, off + len)` is at or after the
    /// segment's `end` (nobody reads it) and the slice is dropped before the
    /// bytes are published.
    #[inline]
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn slice_mut(&self, off: usize, len: usize) -> &mut [u8] {
        assert!(off + len <= self.map.len(), "write outside the segment");
        // SAFETY: in bounds; exclusivity is the caller's contract.
        unsafe { std::slice::from_raw_parts_mut(self.map.as_mut_ptr().add(off), len) }
    }

    /// Starts bringing the cache lines of `[off, off + len)` in for
    /// writing (`prefetchw`), so that the next record's stores do not wait
    /// for them: otherwise the first atomic instruction after the record is
    /// copied (a lock) waits until those cold lines have come from memory.
    #[inline]
    pub fn prefetch_write(&self, off: usize, len: usize) {
        let off = off.min(self.map.len());
        let len = len.min(self.map.len() - off);
        // SAFETY: `off <= map.len()`, so the pointer is inside the map or
        // one past its end (then `len` is 0).
        crate::prefetch::write_range(unsafe { self.map.as_ptr().add(off) }, len);
    }

    /// Writes a whole record (header included) at `off`: payload first,
    /// then the CRC (bytes 0..4), so a reader of the file after a crash sees
    /// a whole record or a zero / non-verifying header.
    ///
    /// # Safety
    /// As for [`WriteMap::slice_mut`].
    unsafe fn write_record(&self, off: usize, rec: &[u8]) {
        // SAFETY: the caller's contract.
        let dst = unsafe { self.slice_mut(off, rec.len()) };
        dst[4..].copy_from_slice(&rec[4..]);
        std::sync::atomic::compiler_fence(Ordering::Release);
        dst[..4].copy_from_slice(&rec[..4]);
    }
}

/// `madvise(advice)` over the page-aligned part of `[from, to)` of `map`.
fn advise(map: &MmapRaw, from: usize, to: usize, advice: libc::c_int) {
    let from = from & !4095;
    let to = to.min(map.len()) & !4095;
    if to <= from {
        return;
    }
    // SAFETY: the range is page aligned and inside the map; the populate
    // advices only fault pages in and change no byte (kernel >= 5.14; an
    // older kernel returns EINVAL and nothing happens).
    unsafe {
        libc::madvise(
            map.as_mut_ptr().add(from) as *mut libc::c_void,
            to - from,
            advice,
        );
    }
}

impl Segment {
    fn build(
        id: u64,
        slot: u32,
        path: PathBuf,
        file: File,
        maps: Option<(MmapRaw, Option<MmapRaw>)>,
        cap: usize,
        writable: bool,
    ) -> Segment {
        let (map, wmap) = match maps {
            Some((r, w)) => (Some(r), w.map(|map| Arc::new(WriteMap { map }))),
            None => (None, None),
        };
        Segment {
            id,
            slot,
            path,
            file,
            map,
            wmap: Mutex::new(wmap),
            cap,
            writable,
            end: AtomicU64::new(SEG_HEADER as u64),
            live: AtomicU64::new(0),
            total: AtomicU64::new(0),
            tombs: AtomicU64::new(0),
            min_seq: AtomicU64::new(u64::MAX),
            max_seq: AtomicU64::new(0),
            sealed: AtomicBool::new(false),
            hinted: AtomicBool::new(false),
            synced: AtomicU64::new(0),
            touched: std::sync::atomic::AtomicUsize::new(0),
        }
    }

    /// Creates segment `id` with `cap` bytes preallocated and its header
    /// written. On any error the file is removed again.
    pub fn create(dir: &Path, id: u64, slot: u32, cap: usize, mapped: bool) -> io::Result<Segment> {
        let path = dir.join(segment_file_name(id));
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)?;
        let res = (|| {
            crate::sys::fallocate(&file, cap)?;
            file.write_all_at(&segment_header(id), 0)?;
            if mapped {
                let o = MmapOptions::new().len(cap).clone();
                Ok(Some((o.map_raw_read_only(&file)?, Some(o.map_raw(&file)?))))
            } else {
                Ok(None)
            }
        })();
        match res {
            Ok(maps) => Ok(Segment::build(id, slot, path, file, maps, cap, true)),
            Err(e) => {
                drop(file);
                let _ = std::fs::remove_file(&path);
                Err(e)
            }
        }
    }

    /// Opens an existing segment. With `write_cap`, it is extended (and
    /// preallocated) to that many bytes and mapped writable; otherwise it is
    /// read-only and mapped (if `mapped`) over its current length.
    pub fn open(
        path: &Path,
        id: u64,
        slot: u32,
        mapped: bool,
        write_cap: Option<usize>,
    ) -> io::Result<Segment> {
        let file = OpenOptions::new()
            .read(true)
            .write(write_cap.is_some())
            .open(path)?;
        let len = file.metadata()?.len() as usize;
        let (cap, writable) = match write_cap {
            Some(c) => {
                let c = c.max(len);
                crate::sys::fallocate(&file, c)?;
                (c, true)
            }
            None => (len, false),
        };
        let maps = if mapped && cap > 0 {
            let o = MmapOptions::new().len(cap).clone();
            let w = if writable {
                Some(o.map_raw(&file)?)
            } else {
                None
            };
            Some((o.map_raw_read_only(&file)?, w))
        } else {
            None
        };
        Ok(Segment::build(
            id,
            slot,
            path.to_path_buf(),
            file,
            maps,
            cap,
            writable,
        ))
    }

    /// Reads the header of a segment file: `Ok(None)` if all zero (its
    /// creation did not finish), an `InvalidData` error if damaged.
    pub fn read_header(path: &Path, id: u64) -> io::Result<Option<u64>> {
        let file = File::open(path)?;
        let len = file.metadata()?.len();
        let mut h = [0u8; SEG_HEADER];
        let n = (len as usize).min(SEG_HEADER);
        file.read_exact_at(&mut h[..n], 0)?;
        match check_segment_header(&h[..n], id) {
            HeaderCheck::Valid => Ok(Some(len)),
            HeaderCheck::Zero => Ok(None),
            HeaderCheck::Damaged => Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "bad segment header",
            )),
        }
    }

    /// `(total, live, tombstone)` bytes.
    pub fn counters(&self) -> (u64, u64, u64) {
        (
            self.total.load(Ordering::Acquire),
            self.live.load(Ordering::Acquire),
            self.tombs.load(Ordering::Acquire),
        )
    }

    pub fn is_mapped(&self) -> bool {
        self.map.is_some()
    }

    /// The writable mapping, if the segment is mapped and still writable.
    pub fn writable_map(&self) -> Option<Arc<WriteMap>> {
        self.wmap.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Drops the segment's hold on its writable mapping (unmapped once no
    /// writer or prepare thread holds it either). Call once the segment is
    /// sealed and before syncing it (see the module doc).
    pub fn release_writable(&self) {
        let w = self.wmap.lock().unwrap_or_else(|p| p.into_inner()).take();
        drop(w);
    }

    /// Current file length.
    pub fn file_len(&self) -> io::Result<u64> {
        Ok(self.file.metadata()?.len())
    }

    /// Disk blocks in use (bytes).
    pub fn disk_bytes(&self) -> u64 {
        use std::os::unix::fs::MetadataExt;
        self.file.metadata().map(|m| m.blocks() * 512).unwrap_or(0)
    }

    /// The bytes `[off, off + len)` of a mapped segment.
    ///
    /// The caller guarantees the range lies below `end` (or was written by
    /// the caller itself), so no concurrent store touches it.
    #[inline]
    pub fn map_slice(&self, off: usize, len: usize) -> &[u8] {
        let map = self.map.as_ref().expect("mapped segment");
        assert!(off + len <= self.cap, "range outside the segment");
        // SAFETY: in bounds (checked above); the bytes are published and
        // never written again (append-only log).
        unsafe { std::slice::from_raw_parts(map.as_ptr().add(off), len) }
    }

    /// Copies `[off, off + dst.len())` into `dst` (from the map, or with
    /// `pread`).
    #[inline]
    pub fn read_into(&self, off: usize, dst: &mut [u8]) -> io::Result<()> {
        if self.map.is_some() {
            dst.copy_from_slice(self.map_slice(off, dst.len()));
            Ok(())
        } else {
            self.file.read_exact_at(dst, off as u64)
        }
    }

    /// The bytes `[0, end)`: borrowed from the map, or read from the file.
    pub fn data(&self, end: usize) -> io::Result<Cow<'_, [u8]>> {
        if self.map.is_some() {
            Ok(Cow::Borrowed(self.map_slice(0, end.min(self.cap))))
        } else {
            let mut v = vec![0u8; end];
            self.file.read_exact_at(&mut v, 0)?;
            Ok(Cow::Owned(v))
        }
    }

    /// Writes `rec` (a whole record, header included) at file offset `off`.
    /// Into the writable map: payload first, then the CRC (see
    /// [`WriteMap::write_record`]). With `pwrite`: one call.
    ///
    /// The caller is the segment's only writer and owns
    /// `[off, off + rec.len())`, inside `cap`.
    #[inline]
    pub fn write_record(&self, off: usize, rec: &[u8]) -> io::Result<()> {
        assert!(
            self.writable && off + rec.len() <= self.cap,
            "write outside the segment"
        );
        if self.map.is_none() {
            return self.file.write_all_at(rec, off as u64);
        }
        let Some(w) = self.writable_map() else {
            return Err(io::Error::other("segment no longer writable"));
        };
        // SAFETY: the caller is the only writer and `[off, off + len)` is at
        // or after `end`, which no reader looks at (the caller's contract).
        unsafe { w.write_record(off, rec) };
        Ok(())
    }

    /// Faults `[from, to)` in writable without changing its bytes, so the
    /// writer takes no page fault there; with `read`, the read-only mapping
    /// too, so `Mapped` readers of fresh values take none either.
    pub fn populate(&self, from: usize, to: usize, read: bool) {
        let Some(w) = self.writable_map() else { return };
        advise(&w.map, from, to, libc::MADV_POPULATE_WRITE);
        drop(w);
        if let (true, Some(map)) = (read, &self.map) {
            advise(map, from, to, libc::MADV_POPULATE_READ);
        }
    }

    /// fdatasync: everything written (through the map or pwrite) is on
    /// stable storage when it returns.
    pub fn datasync(&self) -> io::Result<()> {
        self.file.sync_data()
    }

    /// Cuts the file to `len` bytes (returns the preallocated tail).
    pub fn truncate(&self, len: u64) -> io::Result<()> {
        self.file.set_len(len)
    }

    /// Unlinks the file and its hint if they are still this segment's.
    pub fn remove_files(&self) {
        let _ = std::fs::remove_file(&self.path);
        let _ = std::fs::remove_file(self.path.with_extension("hint"));
    }
}

/// Position of the last non-zero byte of `data` from `from` on, plus one
/// (`from` if all zero).
pub fn nonzero_end(data: &[u8], from: usize) -> usize {
    let mut i = data.len();
    while i > from {
        if data[i - 1] != 0 {
            return i;
        }
        i -= 1;
    }
    from
}

//! One segment file of a table's log.
//!
//! In the `Memory` and `Mapped` modes the file is memory-mapped (shared),
//! twice while it is written ([`crate::segment::map`]): the writer copies
//! records into a writable mapping ([`WriteMap`]), and readers (`Mapped` gets, hint writing,
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
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use super::format::*;
use crate::segment::{self, Maps, WriteMap};

/// A segment file and its counters.
pub struct Segment {
    pub id: u64,
    /// Index in the table's segment slot array (what index entries store).
    pub slot: u32,
    pub path: PathBuf,
    file: File,
    /// The maps (`Memory` and `Mapped` modes): read-only, and writable while
    /// the segment may be written (see the module doc).
    maps: Option<Maps>,
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
    pub touched: AtomicUsize,
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

/// Writes a whole record (header included) at `off` of `w`: payload
/// first, then the CRC (bytes 0..4), so a reader of the file after a crash
/// sees a whole record or a zero / non-verifying header.
///
/// # Safety
/// As for [`WriteMap::slice_mut`].
unsafe fn write_record_at(w: &WriteMap, off: usize, rec: &[u8]) {
    // SAFETY: the caller's contract.
    let dst = unsafe { w.slice_mut(off, rec.len()) };
    dst[4..].copy_from_slice(&rec[4..]);
    std::sync::atomic::compiler_fence(Ordering::Release);
    dst[..4].copy_from_slice(&rec[..4]);
}

impl Segment {
    fn build(
        id: u64,
        slot: u32,
        path: PathBuf,
        file: File,
        maps: Option<Maps>,
        cap: usize,
        writable: bool,
    ) -> Segment {
        Segment {
            id,
            slot,
            path,
            file,
            maps,
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
            touched: AtomicUsize::new(0),
        }
    }

    /// Creates segment `id` with `cap` bytes preallocated and its header
    /// written (see [`crate::segment::create`]).
    pub fn create(dir: &Path, id: u64, slot: u32, cap: usize, mapped: bool) -> io::Result<Segment> {
        let head = segment_header(id);
        let (file, path, maps) = segment::create(dir, &segment_file_name(id), cap, &head, |f| {
            mapped.then(|| Maps::new(f, cap, true)).transpose()
        })?;
        Ok(Segment::build(id, slot, path, file, maps, cap, true))
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
                segment::allocate(&file, path.parent().unwrap_or(path), c)?;
                (c, true)
            }
            None => (len, false),
        };
        let maps = if mapped && cap > 0 {
            Some(Maps::new(&file, cap, writable)?)
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
        self.maps.is_some()
    }

    /// The writable mapping, if the segment is mapped and still writable.
    pub fn writable_map(&self) -> Option<Arc<WriteMap>> {
        self.maps.as_ref()?.writable()
    }

    /// Drops the segment's hold on its writable mapping: retired, unmapped
    /// off this thread once no writer or prepare thread holds it either.
    /// Call once the segment is sealed and before syncing it (see the
    /// module doc).
    pub fn release_writable(&self) {
        if let Some(m) = &self.maps {
            m.release_writable();
        }
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
        let maps = self.maps.as_ref().expect("mapped segment");
        assert!(off + len <= self.cap, "range outside the segment");
        // SAFETY: the bytes are published and never written again
        // (append-only log); the range is checked by `slice`.
        unsafe { maps.slice(off, len) }.expect("range outside the segment")
    }

    /// Copies `[off, off + dst.len())` into `dst` (from the map, or with
    /// `pread`).
    #[inline]
    pub fn read_into(&self, off: usize, dst: &mut [u8]) -> io::Result<()> {
        if self.maps.is_some() {
            dst.copy_from_slice(self.map_slice(off, dst.len()));
            Ok(())
        } else {
            self.file.read_exact_at(dst, off as u64)
        }
    }

    /// The bytes `[0, end)`: borrowed from the map, or read from the file.
    pub fn data(&self, end: usize) -> io::Result<Cow<'_, [u8]>> {
        if self.maps.is_some() {
            Ok(Cow::Borrowed(self.map_slice(0, end.min(self.cap))))
        } else {
            let mut v = vec![0u8; end];
            self.file.read_exact_at(&mut v, 0)?;
            Ok(Cow::Owned(v))
        }
    }

    /// Writes `rec` (a whole record, header included) at file offset `off`.
    /// Into the writable map: payload first, then the CRC (see
    /// [`write_record_at`]). With `pwrite`: one call.
    ///
    /// The caller is the segment's only writer and owns
    /// `[off, off + rec.len())`, inside `cap`.
    #[inline]
    pub fn write_record(&self, off: usize, rec: &[u8]) -> io::Result<()> {
        assert!(
            self.writable && off + rec.len() <= self.cap,
            "write outside the segment"
        );
        if self.maps.is_none() {
            return self.file.write_all_at(rec, off as u64);
        }
        let Some(w) = self.writable_map() else {
            return Err(io::Error::other("segment no longer writable"));
        };
        // SAFETY: the caller is the only writer and `[off, off + len)` is at
        // or after `end`, which no reader looks at (the caller's contract).
        unsafe { write_record_at(&w, off, rec) };
        Ok(())
    }

    /// Faults `[from, to)` in writable without changing its bytes, so the
    /// writer takes no page fault there; with `read`, the read-only mapping
    /// too, so `Mapped` readers of fresh values take none either.
    /// In chunks, with the fallback for older kernels (see
    /// [`Maps::populate`]); nothing once the segment is sealed.
    pub fn populate(&self, from: usize, to: usize, read: bool) {
        if let Some(m) = &self.maps {
            if m.writable().is_some() {
                m.populate(from, to, read);
            }
        }
    }

    /// fdatasync: everything written (through the map or pwrite) is on
    /// stable storage when it returns. Its writeback is started in paced
    /// pieces ([`crate::sys::datasync_paced`]).
    pub fn datasync(&self) -> io::Result<()> {
        crate::sys::datasync_paced(&self.file, self.cap as u64)
    }

    /// Cuts the file to `len` bytes (returns the preallocated tail).
    pub fn truncate(&self, len: u64) -> io::Result<()> {
        self.file.set_len(len)
    }

    /// At least as many entries as the segment holds, close to that for a
    /// segment the writer filled: each entry has its own sequence number
    /// (consecutive ones, but for a compaction output) and costs at least
    /// [`entry_cost`]`(0, 0)` bytes of `total`.
    pub fn most_entries(&self) -> usize {
        let (min, max) = (
            self.min_seq.load(Ordering::Acquire),
            self.max_seq.load(Ordering::Acquire),
        );
        let by_seq = if max >= min { max - min + 1 } else { 0 };
        let by_size = self.total.load(Ordering::Acquire) / entry_cost(0, 0);
        by_seq.min(by_size) as usize
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

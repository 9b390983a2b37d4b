//! One segment file, memory-mapped (shared) for reading and, in the writer,
//! for writing.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use super::format::*;
use crate::segment::{self, Maps, WriteMap};

/// Why a record could not be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordError {
    /// No record there (zero header): the end of the log.
    Empty,
    /// A header or checksum that does not verify.
    Corrupt,
}

/// A mapped segment file: read through its read-only map; written, while it
/// is the active segment (or recovery repairs it), through its writable one
/// (see [`crate::segment::map`]).
pub struct Segment {
    pub seq: u64,
    /// Index of the first record. Set when the segment is activated.
    pub base: AtomicU64,
    pub path: PathBuf,
    pub layout: Layout,
    file: File,
    maps: Maps,
    /// Set once retention took the segment out of the log (its file is
    /// then removed or reused; the maps stay valid while it is held).
    pub deleted: AtomicBool,
    /// File offset up to which the pre-touch thread faulted the segment in.
    pub touched: AtomicUsize,
    /// What record CRCs are chained from: the header CRC (version 2), or 0
    /// (version 1). Set when the segment is activated.
    seed: AtomicU32,
    /// The header's CRC word (bytes 56..64) when it was activated or
    /// opened: a header that no longer has it was reused meanwhile.
    stamp: AtomicU64,
    /// Activation time, Unix nanoseconds (the header's `created`).
    created: AtomicU64,
    /// The header's `flags` (`FLAG_REUSED`, `FLAG_RESET`).
    flags: AtomicU32,
}

// Headers and slots are accessed only through atomics, payloads through
// ranges that are published (a release store of their header) before
// being read, through either map: both map the same pages of the same file,
// and the hardware keeps them coherent as it does for another process's map
// of the file. So the segment can be shared between threads.
// SAFETY: see above; every access to the maps goes through the methods
// below.
unsafe impl Send for Segment {}
// SAFETY: as for Send.
unsafe impl Sync for Segment {}

/// Bytes after a record that `write_record` prefetches for writing: a
/// 256-byte record and its header span five cache lines.
const PREFETCH_BYTES: usize = 320;

/// The word at `off` of a map starting at `base`, as an atomic.
///
/// # Safety
/// `off` is 8-aligned and `off + 8` inside the map, which outlives the
/// returned reference; the word is only ever accessed atomically.
#[inline]
unsafe fn word<'a>(base: *const u8, off: usize) -> &'a AtomicU64 {
    // SAFETY: the caller's contract (the map is page aligned).
    unsafe { &*(base.add(off) as *const AtomicU64) }
}

/// As [`word`], for a 4-byte slot (4-aligned).
///
/// # Safety
/// As for [`word`], with 4-byte alignment.
#[inline]
unsafe fn slot_word<'a>(base: *const u8, off: usize) -> &'a AtomicU32 {
    // SAFETY: the caller's contract.
    unsafe { &*(base.add(off) as *const AtomicU32) }
}

impl Segment {
    fn build(seq: u64, base: u64, path: PathBuf, layout: Layout, file: File, maps: Maps) -> Self {
        Segment {
            seq,
            base: AtomicU64::new(base),
            path,
            layout,
            file,
            maps,
            deleted: AtomicBool::new(false),
            touched: AtomicUsize::new(0),
            seed: AtomicU32::new(0),
            stamp: AtomicU64::new(0),
            created: AtomicU64::new(0),
            flags: AtomicU32::new(0),
        }
    }

    /// Creates a new, not yet activated segment file of `data_cap` bytes of
    /// data, with every block allocated (see [`crate::segment::create`]),
    /// its header a prepared one (`PREP_MAGIC`) until it is activated.
    pub fn create(dir: &Path, seq: u64, data_cap: usize) -> io::Result<Segment> {
        let layout = Layout::new(data_cap);
        let name = segment_file_name(seq);
        let head = encode_header(seq, 0, &layout, PREP_MAGIC, 0, 0);
        let (file, path, maps) = segment::create(dir, &name, layout.file_len, &head, |f| {
            Maps::new(f, layout.file_len, true)
        })?;
        Ok(Segment::build(seq, 0, path, layout, file, maps))
    }

    /// Makes `self`, a segment retention took out of the log (held by
    /// nobody else), the prepared segment `seq` of `dir`, without zeroing
    /// its data: the file is renamed out of the log's names first
    /// (`<seq:020>.retired`: a reader listing the directory no longer
    /// finds it), then its header becomes a prepared one naming `seq`
    /// (with `FLAG_REUSED`), its sealed fields, index and first record
    /// header are zeroed, and it takes the name of segment `seq` (never
    /// over an existing file). Its old records stay in the data region and
    /// never verify under the seed it gets when activated. A crash at any
    /// step leaves a file a store removes at open: a `.retired` file, or
    /// the prepared segment `seq`. On error the file is removed.
    pub fn reuse(self, dir: &Path, seq: u64) -> io::Result<Segment> {
        let l = self.layout;
        let retired = dir.join(retired_file_name(self.seq));
        let to = dir.join(segment_file_name(seq));
        let done = (|| {
            std::fs::rename(&self.path, &retired)?;
            let mut head = [0u8; H_SEALED + 8];
            head[..64].copy_from_slice(&encode_header(seq, 0, &l, PREP_MAGIC, FLAG_REUSED, 0));
            self.file.write_all_at(&head, 0)?;
            let zeros = vec![0u8; segment::MM_CHUNK];
            let mut at = l.index_start;
            while at < l.data_start + REC_HEADER {
                let end = (at + zeros.len()).min(l.data_start + REC_HEADER);
                self.file.write_all_at(&zeros[..end - at], at as u64)?;
                at = end;
            }
            segment::rename_noreplace(&retired, &to)
        })();
        if let Err(e) = done {
            // (Under one of its three names.)
            for p in [&self.path, &retired, &to] {
                segment::remove_if_same_file(&self.file, p);
            }
            return Err(e);
        }
        let maps = match Maps::new(&self.file, l.file_len, true) {
            Ok(m) => m,
            Err(e) => {
                segment::remove_if_same_file(&self.file, &to);
                return Err(e);
            }
        };
        let s = Segment::build(seq, 0, to, l, self.file, maps);
        s.flags.store(FLAG_REUSED, Ordering::Relaxed);
        Ok(s)
    }

    /// The fraction (0..=1) of the data region's pages in the page cache:
    /// reusing a file whose pages went back to the disk reads them in again.
    pub fn resident_fraction(&self) -> f64 {
        let l = self.layout;
        match self.maps.resident(l.data_start, l.file_len) {
            Ok(b) => b as f64 / (l.file_len - l.data_start).max(1) as f64,
            Err(_) => 0.0,
        }
    }

    /// Whether the file at `path`, segment `seq` of a store's directory
    /// that [`Segment::open`] found not activated, may be removed: it is a
    /// prepared segment of this store (its header says so and names `seq`;
    /// an interrupted activation leaves the magic and the sequence number
    /// as they were), or it holds nothing at all (a prepared segment of the
    /// release before prepared headers; an empty file a crash left between
    /// its creation and its header). Anything else is not the store's to
    /// remove.
    pub fn is_unused_and_ours(path: &Path, seq: u64) -> io::Result<bool> {
        segment::is_all_zero_or(path, |head| {
            head.len() >= H_SEQ + 8
                && head[H_MAGIC..H_MAGIC + 8] == PREP_MAGIC
                && head[H_SEQ..H_SEQ + 8] == seq.to_le_bytes()
        })
    }

    /// Whether the file at `path`, a `.retired` file (see
    /// [`Segment::reuse`]), is the store's: a segment's header (activated
    /// or prepared), or nothing at all.
    pub fn is_retired_and_ours(path: &Path) -> io::Result<bool> {
        segment::is_all_zero_or(path, |head| {
            head.len() >= 8 && (head[..8] == MAGIC || head[..8] == PREP_MAGIC)
        })
    }

    /// Opens an existing segment file. Returns `Ok(None)` for a file that was
    /// created but never activated (a prepared header, or no magic): a
    /// leftover of a prepared segment, or one a writer is about to
    /// activate.
    pub fn open(path: &Path, seq: u64, writable: bool) -> Result<Option<Segment>, OpenError> {
        let file = match OpenOptions::new().read(true).write(writable).open(path) {
            Ok(f) => f,
            // Gone between the listing and here: a prepared segment that a
            // closed store's pre-touch thread removed on its way out (it never
            // held an entry; activated segments go only by this store's own
            // retention).
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        let len = file.metadata()?.len() as usize;
        if len < HEADER_SIZE {
            return Ok(None);
        }
        let maps = Maps::new(&file, len, writable)?;
        let mut head = [0u8; 64];
        // SAFETY: the map is at least HEADER_SIZE bytes long; a header being
        // activated by another process reads as not activated or fails its
        // CRC (it is written magic last).
        head.copy_from_slice(unsafe { maps.slice(0, 64) }.ok_or(OpenError::Corrupt {
            segment: seq,
            offset: 0,
        })?);
        if head[..8] == [0u8; 8] || head[..8] == PREP_MAGIC {
            return Ok(None);
        }
        let layout = check_header(&head, seq, len)?;
        let u64_at = |o: usize| u64::from_le_bytes(head[o..o + 8].try_into().unwrap_or([0; 8]));
        let s = Segment::build(seq, u64_at(H_BASE), path.to_path_buf(), layout, file, maps);
        s.set_life(&head);
        Ok(Some(s))
    }

    /// Takes the seed, stamp, creation time and flags of header `head`.
    fn set_life(&self, head: &[u8; 64]) {
        let u64_at = |o: usize| u64::from_le_bytes(head[o..o + 8].try_into().unwrap_or([0; 8]));
        let u32_at = |o: usize| u32::from_le_bytes(head[o..o + 4].try_into().unwrap_or([0; 4]));
        let seed = if u32_at(H_VERSION) >= VERSION {
            u32_at(H_HCRC)
        } else {
            0
        };
        self.seed.store(seed, Ordering::Relaxed);
        self.stamp.store(u64_at(H_HCRC), Ordering::Relaxed);
        self.created.store(u64_at(H_CREATED), Ordering::Relaxed);
        self.flags.store(u32_at(H_FLAGS), Ordering::Relaxed);
    }

    /// Activation time (Unix nanoseconds) of the segment.
    pub fn created_ns(&self) -> u64 {
        self.created.load(Ordering::Relaxed)
    }

    /// The header's flags (`FLAG_REUSED`, `FLAG_RESET`).
    pub fn flags(&self) -> u32 {
        self.flags.load(Ordering::Relaxed)
    }

    /// Marks the segment, not yet activated, as the one a reset starts the
    /// log with (see [`crate::store::reset_dir`]).
    pub fn mark_reset(&self) {
        self.flags.fetch_or(FLAG_RESET, Ordering::Relaxed);
    }

    /// Whether the file still holds this segment (a reader in another
    /// process checks it after reading: the writer may have reused the
    /// file of a segment retention took out of the log).
    pub fn is_current(&self) -> bool {
        std::sync::atomic::fence(Ordering::Acquire);
        self.atomic_u64(H_MAGIC).load(Ordering::Acquire) == u64::from_le_bytes(MAGIC)
            && self.atomic_u64(H_HCRC).load(Ordering::Acquire) == self.stamp.load(Ordering::Relaxed)
    }

    /// The writable map, while the segment has one.
    pub fn writable(&self) -> Option<Arc<WriteMap>> {
        self.maps.writable()
    }

    /// Takes the segment's hold on its writable map (the caller retires or
    /// drops it, see [`crate::segment::map`]).
    pub fn take_writable(&self) -> Option<Arc<WriteMap>> {
        self.maps.take_writable()
    }

    /// Writes the header, making this segment part of the log with its first
    /// record at `base`, activated at `now_ns` (Unix nanoseconds). The magic
    /// is written last.
    pub fn activate(&self, base: u64, now_ns: u64) {
        let Some(w) = self.writable() else { return };
        let head = encode_header(self.seq, base, &self.layout, MAGIC, self.flags(), now_ns);
        self.set_life(&head);
        self.base.store(base, Ordering::Release);
        let p = w.ptr();
        // SAFETY: writable map of at least HEADER_SIZE bytes; bytes 8..64
        // first, then the magic, then a release fence so that a reader that
        // sees the magic sees the rest.
        unsafe {
            std::ptr::copy_nonoverlapping(head.as_ptr().add(8), p.add(8), 56);
            std::sync::atomic::fence(Ordering::Release);
            std::ptr::copy_nonoverlapping(head.as_ptr(), p, 8);
        }
        std::sync::atomic::fence(Ordering::Release);
    }

    /// The header word at `off`, to read.
    #[inline]
    fn atomic_u64(&self, off: usize) -> &AtomicU64 {
        debug_assert!(off.is_multiple_of(8) && off + 8 <= self.layout.file_len);
        // SAFETY: 8-aligned and inside the read-only map, which lives as
        // long as `self`.
        unsafe { word(self.maps.ptr(), off) }
    }

    /// Stores `v` into the word at `off` through the writable map (nothing
    /// without one: a read-only segment is never changed).
    fn store_u64(&self, off: usize, v: u64, order: Ordering) {
        if let Some(w) = self.writable() {
            debug_assert!(off.is_multiple_of(8) && off + 8 <= w.len());
            // SAFETY: as for `atomic_u64`, in the writable map (held by `w`).
            unsafe { word(w.ptr(), off) }.store(v, order);
        }
    }

    /// The index slot of record `k` of this segment, to read.
    #[inline]
    pub fn slot(&self, k: usize) -> &AtomicU32 {
        let off = self.layout.index_start + k * 4;
        debug_assert!(k < self.layout.slots);
        // SAFETY: 4-aligned and inside the read-only map (k < slots).
        unsafe { slot_word(self.maps.ptr(), off) }
    }

    /// Stores slot `k` (recovery only; the writer uses `write_record`).
    pub fn set_slot(&self, k: usize, off: u32) {
        if let Some(w) = self.writable() {
            debug_assert!(k < self.layout.slots);
            // SAFETY: as for `slot`, in the writable map (held by `w`).
            unsafe { slot_word(w.ptr(), self.layout.index_start + k * 4) }
                .store(off, Ordering::Relaxed);
        }
    }

    pub fn base(&self) -> u64 {
        self.base.load(Ordering::Acquire)
    }

    pub fn is_sealed(&self) -> bool {
        self.atomic_u64(H_SEALED).load(Ordering::Acquire) == 1
    }

    /// Makes a sealed segment active again (recovery only).
    pub fn clear_seal(&self) {
        self.store_u64(H_SEALED, 0, Ordering::Release);
        self.store_u64(H_SEALED_COUNT, 0, Ordering::Relaxed);
        self.store_u64(H_SEALED_END, 0, Ordering::Relaxed);
    }

    /// Records in a sealed segment (None while active).
    pub fn sealed_count(&self) -> Option<u64> {
        if self.is_sealed() {
            Some(self.atomic_u64(H_SEALED_COUNT).load(Ordering::Acquire))
        } else {
            None
        }
    }

    /// Marks the segment full: no record will be added.
    pub fn seal(&self, count: u64, end: u64) {
        self.store_u64(H_SEALED_COUNT, count, Ordering::Relaxed);
        self.store_u64(H_SEALED_END, end, Ordering::Relaxed);
        self.store_u64(H_SEALED, 1, Ordering::Release);
    }

    /// Records present: the sealed count, or the length of the filled prefix
    /// of the index (binary search: slots fill in order).
    pub fn count(&self) -> u64 {
        if let Some(c) = self.sealed_count() {
            return c;
        }
        let (mut lo, mut hi) = (0usize, self.layout.slots);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if self.slot(mid).load(Ordering::Acquire) != 0 {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo as u64
    }

    /// Reads the record header word at file offset `off`.
    #[inline]
    pub fn header_at(&self, off: usize) -> u64 {
        self.atomic_u64(off).load(Ordering::Acquire)
    }

    /// The payload of the record at file offset `off`, checked: header valid,
    /// length inside the data region, CRC32C matching.
    pub fn record_at(&self, off: usize) -> Result<&[u8], RecordError> {
        let l = &self.layout;
        if off < l.data_start || !off.is_multiple_of(8) || off + REC_HEADER > l.file_len {
            return Err(RecordError::Corrupt);
        }
        let h = self.header_at(off);
        if h == 0 {
            return Err(RecordError::Empty);
        }
        if h & VALID == 0 {
            return Err(RecordError::Corrupt);
        }
        let len = (h & 0x7fff_ffff) as usize;
        if off + record_size(len) > l.file_len {
            return Err(RecordError::Corrupt);
        }
        // SAFETY: the record was published before its header (acquire load
        // above) and is never written again while this segment is held
        // (a reused file's are: see `is_current`).
        let payload = unsafe { self.maps.slice(off + REC_HEADER, len) };
        match payload {
            Some(p) if record_crc(self.seed.load(Ordering::Relaxed), p) == (h >> 32) as u32 => {
                Ok(p)
            }
            _ => Err(RecordError::Corrupt),
        }
    }

    /// Writes a record at data offset `pos` (relative to the data region) as
    /// record `k` of the segment, through `w`, this segment's writable map.
    /// The caller checked that it fits and is the only writer.
    #[inline]
    pub fn write_record(&self, w: &WriteMap, pos: usize, k: usize, payload: &[u8]) {
        let l = &self.layout;
        let off = l.data_start + pos;
        assert!(w.len() == l.file_len && off + record_size(payload.len()) <= l.file_len);
        debug_assert!(k < l.slots);
        // SAFETY: the writer owns [off, off + record_size) (nobody reads it
        // before the header below is published) and it is inside the map
        // (asserted above).
        unsafe {
            std::ptr::copy_nonoverlapping(
                payload.as_ptr(),
                w.ptr().add(off + REC_HEADER),
                payload.len(),
            );
        }
        // The next record's header word is zero before this one is
        // published, so a zero header ends the log even in a reused file
        // (whose data region holds old records).
        let next = off + record_size(payload.len());
        if next + REC_HEADER <= l.file_len {
            // SAFETY: `next` is 8-aligned and its word inside the map;
            // nobody reads it (past the published end).
            unsafe { word(w.ptr(), next) }.store(0, Ordering::Relaxed);
        }
        let h = header_word(self.seed.load(Ordering::Relaxed), payload);
        // SAFETY: `off` is 8-aligned (records are) and inside the map.
        unsafe { word(w.ptr(), off) }.store(h, Ordering::Release);
        // SAFETY: slot k is inside the index region of the map.
        unsafe { slot_word(w.ptr(), l.index_start + k * 4) }.store(off as u32, Ordering::Release);
        // Ask for the lines the next record will be written to, for
        // writing, now: the caller goes back to its work while they come
        // (see `crate::prefetch`).
        w.prefetch_write(next, PREFETCH_BYTES);
    }

    /// Zeroes the data bytes `[from, to)` (file offsets) that are not already
    /// zero, a page at a time. Used to cut a torn tail.
    pub fn zero_range(&self, from: usize, to: usize) {
        let Some(w) = self.writable() else { return };
        let to = to.min(self.layout.file_len);
        let mut off = from;
        while off < to {
            let end = (align_up(off + 1, PAGE)).min(to);
            // SAFETY: [off, end) is inside the writable map; the writer owns
            // it (recovery runs before any append).
            let s = unsafe { w.slice_mut(off, end - off) };
            if s.iter().any(|&b| b != 0) {
                s.fill(0);
            }
            off = end;
        }
    }

    /// Faults `[from, to)` (file offsets) in without changing the bytes,
    /// writable for the writer and readable for readers, in chunks (see
    /// [`Maps::populate`]).
    pub fn populate(&self, from: usize, to: usize) {
        self.maps.populate(from, to, true);
    }

    /// msync (MS_SYNC) of `[from, to)` (file offsets): durable on return.
    /// A sealed segment has no writable map: its file is `fdatasync`ed.
    pub fn sync_range(&self, from: usize, to: usize) -> io::Result<()> {
        let to = align_up(to.min(self.layout.file_len), PAGE).min(self.layout.file_len);
        self.maps.sync_range(&self.file, from, to)
    }

    /// Writes `[from, to)` (file offsets) back, waiting for it with `wait`,
    /// without flushing the device's cache: durable once a later
    /// [`Segment::sync_range`] returns ([`Maps::write_back`]).
    pub fn write_back(&self, from: usize, to: usize, wait: bool) -> io::Result<()> {
        let to = align_up(to.min(self.layout.file_len), PAGE).min(self.layout.file_len);
        self.maps.write_back(&self.file, from, to, wait)
    }

    /// Starts writeback of the whole file without waiting.
    pub fn sync_async(&self) {
        if let Some(w) = self.writable() {
            w.flush_async();
        }
    }

    /// Unlinks the file at `self.path` only if it is still this segment's
    /// file: a name taken over by someone else is left alone.
    pub fn remove_if_same_file(&self) {
        segment::remove_if_same_file(&self.file, &self.path);
    }
}

/// The header of a segment with `magic` (`MAGIC` activated, `PREP_MAGIC`
/// prepared; the magic is written last when activating; CRC over bytes
/// 0..56), `flags` and activation time `created` (Unix nanoseconds; 0 while
/// prepared).
fn encode_header(
    seq: u64,
    base: u64,
    layout: &Layout,
    magic: [u8; 8],
    flags: u32,
    created: u64,
) -> [u8; 64] {
    let mut head = [0u8; 64];
    head[H_VERSION..H_VERSION + 4].copy_from_slice(&VERSION.to_le_bytes());
    head[H_FLAGS..H_FLAGS + 4].copy_from_slice(&flags.to_le_bytes());
    head[H_SEQ..H_SEQ + 8].copy_from_slice(&seq.to_le_bytes());
    head[H_BASE..H_BASE + 8].copy_from_slice(&base.to_le_bytes());
    head[H_DATA_CAP..H_DATA_CAP + 8].copy_from_slice(&(layout.data_cap as u64).to_le_bytes());
    head[H_SLOTS..H_SLOTS + 8].copy_from_slice(&(layout.slots as u64).to_le_bytes());
    head[H_CREATED..H_CREATED + 8].copy_from_slice(&created.to_le_bytes());
    head[H_MAGIC..H_MAGIC + 8].copy_from_slice(&magic);
    let crc = crc32c::crc32c(&head[..H_HCRC]);
    head[H_HCRC..H_HCRC + 4].copy_from_slice(&crc.to_le_bytes());
    head
}

/// Checks the header of segment `seq` (a file of `len` bytes) and returns
/// its layout.
fn check_header(head: &[u8; 64], seq: u64, len: usize) -> Result<Layout, OpenError> {
    let corrupt = OpenError::Corrupt {
        segment: seq,
        offset: 0,
    };
    let u64_at = |o: usize| u64::from_le_bytes(head[o..o + 8].try_into().unwrap_or([0; 8]));
    let u32_at = |o: usize| u32::from_le_bytes(head[o..o + 4].try_into().unwrap_or([0; 4]));
    if head[H_MAGIC..H_MAGIC + 8] != MAGIC
        || crc32c::crc32c(&head[..H_HCRC]) != u32_at(H_HCRC)
        || !(VERSION_1..=VERSION).contains(&u32_at(H_VERSION))
    {
        return Err(corrupt);
    }
    let data_cap = u64_at(H_DATA_CAP) as usize;
    if !(MIN_DATA_CAP..=MAX_DATA_CAP).contains(&data_cap) {
        return Err(corrupt);
    }
    let layout = Layout::new(data_cap);
    if u64_at(H_SEQ) != seq || u64_at(H_SLOTS) as usize != layout.slots || layout.file_len > len {
        return Err(corrupt);
    }
    Ok(layout)
}

/// Errors opening a segment.
#[derive(Debug)]
pub enum OpenError {
    Io(io::Error),
    Corrupt { segment: u64, offset: u64 },
}

impl From<io::Error> for OpenError {
    fn from(e: io::Error) -> Self {
        OpenError::Io(e)
    }
}

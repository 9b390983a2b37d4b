//! One segment file, memory-mapped (shared) for reading and, in the writer,
//! for writing.

use std::fs::{File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

use memmap2::{MmapOptions, MmapRaw};

use super::format::*;

/// Why a record could not be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordError {
    /// No record there (zero header): the end of the log.
    Empty,
    /// A header or checksum that does not verify.
    Corrupt,
}

/// A mapped segment file.
pub struct Segment {
    pub seq: u64,
    /// Index of the first record. Set when the segment is activated.
    pub base: AtomicU64,
    pub path: PathBuf,
    pub layout: Layout,
    pub writable: bool,
    file: File,
    map: MmapRaw,
    /// Set once the file was unlinked by retention (the map stays valid).
    pub deleted: AtomicBool,
}

// The raw map is shared memory accessed only through atomics (headers, slots)
// or through ranges that are published before being read (payloads), so the
// segment can be shared between threads.
// SAFETY: see above; every access to `map` goes through the methods below.
unsafe impl Send for Segment {}
// SAFETY: as for Send.
unsafe impl Sync for Segment {}

static POPULATE_WRITE_OK: AtomicBool = AtomicBool::new(true);

/// Bytes per `madvise` call of `populate` and `release_pages`: 1 MiB (256
/// pages), a fraction of a millisecond with the mmap lock held.
pub const MM_CHUNK: usize = 1 << 20;

/// Bytes after a record that `write_record` prefetches for writing: a
/// 256-byte record and its header span five cache lines.
const PREFETCH_BYTES: usize = 320;

impl Segment {
    /// Creates a new, not yet activated segment file of `data_cap` bytes of
    /// data, with every block allocated (so writes through the map can never
    /// hit ENOSPC, which would be a SIGBUS).
    pub fn create(dir: &Path, seq: u64, data_cap: usize) -> io::Result<Segment> {
        let layout = Layout::new(data_cap);
        let path = dir.join(segment_file_name(seq));
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)?;
        let res = (|| {
            crate::sys::fallocate(&file, layout.file_len)?;
            let map = MmapOptions::new().len(layout.file_len).map_raw(&file)?;
            Ok(map)
        })();
        match res {
            Ok(map) => Ok(Segment {
                seq,
                base: AtomicU64::new(0),
                path,
                layout,
                writable: true,
                file,
                map,
                deleted: AtomicBool::new(false),
            }),
            Err(e) => {
                let _ = std::fs::remove_file(&path);
                Err(e)
            }
        }
    }

    /// Opens an existing segment file. Returns `Ok(None)` for a file that was
    /// created but never activated (no magic): a leftover of a prepared
    /// segment.
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
        let map = if writable {
            MmapOptions::new().len(len).map_raw(&file)?
        } else {
            MmapOptions::new().len(len).map_raw_read_only(&file)?
        };
        let ptr = map.as_ptr();
        let mut head = [0u8; 64];
        // SAFETY: the map is at least HEADER_SIZE bytes long.
        unsafe { std::ptr::copy_nonoverlapping(ptr, head.as_mut_ptr(), 64) };
        if head[..8] == [0u8; 8] {
            return Ok(None);
        }
        let corrupt = OpenError::Corrupt {
            segment: seq,
            offset: 0,
        };
        if head[H_MAGIC..H_MAGIC + 8] != MAGIC {
            return Err(corrupt);
        }
        let u64_at = |o: usize| u64::from_le_bytes(head[o..o + 8].try_into().unwrap());
        let u32_at = |o: usize| u32::from_le_bytes(head[o..o + 4].try_into().unwrap());
        if crc32c::crc32c(&head[..H_HCRC]) != u32_at(H_HCRC) || u32_at(H_VERSION) != VERSION {
            return Err(corrupt);
        }
        let data_cap = u64_at(H_DATA_CAP) as usize;
        let layout = Layout::new(data_cap);
        if u64_at(H_SEQ) != seq
            || u64_at(H_SLOTS) as usize != layout.slots
            || layout.file_len > len
            || !(MIN_DATA_CAP..=MAX_DATA_CAP).contains(&data_cap)
        {
            return Err(corrupt);
        }
        Ok(Some(Segment {
            seq,
            base: AtomicU64::new(u64_at(H_BASE)),
            path: path.to_path_buf(),
            layout,
            writable,
            file,
            map,
            deleted: AtomicBool::new(false),
        }))
    }

    /// Writes the header, making this segment part of the log with its first
    /// record at `base`. The magic is written last.
    pub fn activate(&self, base: u64) {
        let mut head = [0u8; 64];
        head[H_VERSION..H_VERSION + 4].copy_from_slice(&VERSION.to_le_bytes());
        head[H_SEQ..H_SEQ + 8].copy_from_slice(&self.seq.to_le_bytes());
        head[H_BASE..H_BASE + 8].copy_from_slice(&base.to_le_bytes());
        head[H_DATA_CAP..H_DATA_CAP + 8]
            .copy_from_slice(&(self.layout.data_cap as u64).to_le_bytes());
        head[H_SLOTS..H_SLOTS + 8].copy_from_slice(&(self.layout.slots as u64).to_le_bytes());
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        head[H_CREATED..H_CREATED + 8].copy_from_slice(&now.to_le_bytes());
        head[H_MAGIC..H_MAGIC + 8].copy_from_slice(&MAGIC);
        let crc = crc32c::crc32c(&head[..H_HCRC]);
        head[H_HCRC..H_HCRC + 4].copy_from_slice(&crc.to_le_bytes());
        self.base.store(base, Ordering::Release);
        let p = self.map.as_mut_ptr();
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

    #[inline]
    fn atomic_u64(&self, off: usize) -> &AtomicU64 {
        debug_assert!(off.is_multiple_of(8) && off + 8 <= self.layout.file_len);
        // SAFETY: `off` is 8-aligned (the map is page aligned) and inside the
        // map, which lives as long as `self`; the word is only ever accessed
        // atomically by writers.
        unsafe { &*(self.map.as_ptr().add(off) as *const AtomicU64) }
    }

    #[inline]
    fn atomic_u32(&self, off: usize) -> &AtomicU32 {
        debug_assert!(off.is_multiple_of(4) && off + 4 <= self.layout.file_len);
        // SAFETY: as for atomic_u64, with 4-byte alignment.
        unsafe { &*(self.map.as_ptr().add(off) as *const AtomicU32) }
    }

    /// The index slot of record `k` of this segment.
    #[inline]
    pub fn slot(&self, k: usize) -> &AtomicU32 {
        self.atomic_u32(self.layout.index_start + k * 4)
    }

    pub fn base(&self) -> u64 {
        self.base.load(Ordering::Acquire)
    }

    pub fn is_sealed(&self) -> bool {
        self.atomic_u64(H_SEALED).load(Ordering::Acquire) == 1
    }

    /// Makes a sealed segment active again (recovery only).
    pub fn clear_seal(&self) {
        if self.writable {
            self.atomic_u64(H_SEALED).store(0, Ordering::Release);
            self.atomic_u64(H_SEALED_COUNT).store(0, Ordering::Relaxed);
            self.atomic_u64(H_SEALED_END).store(0, Ordering::Relaxed);
        }
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
        self.atomic_u64(H_SEALED_COUNT)
            .store(count, Ordering::Relaxed);
        self.atomic_u64(H_SEALED_END).store(end, Ordering::Relaxed);
        self.atomic_u64(H_SEALED).store(1, Ordering::Release);
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
        // SAFETY: the range is inside the map (checked above) and the record
        // was published before its header (acquire load above).
        let payload =
            unsafe { std::slice::from_raw_parts(self.map.as_ptr().add(off + REC_HEADER), len) };
        if record_crc(payload) != (h >> 32) as u32 {
            return Err(RecordError::Corrupt);
        }
        Ok(payload)
    }

    /// Writes a record at data offset `pos` (relative to the data region) as
    /// record `k` of the segment. The caller checked that it fits and is the
    /// only writer.
    #[inline]
    pub fn write_record(&self, pos: usize, k: usize, payload: &[u8]) {
        let off = self.layout.data_start + pos;
        debug_assert!(self.writable && off + record_size(payload.len()) <= self.layout.file_len);
        // SAFETY: the writer owns [off, off + record_size) (nobody reads it
        // before the header below is published) and it is inside the map.
        unsafe {
            std::ptr::copy_nonoverlapping(
                payload.as_ptr(),
                self.map.as_mut_ptr().add(off + REC_HEADER),
                payload.len(),
            );
        }
        self.atomic_u64(off)
            .store(header_word(payload), Ordering::Release);
        self.slot(k).store(off as u32, Ordering::Release);
        // Ask for the lines the next record will be written to, for
        // writing, now: the caller goes back to its work while they come
        // (see `crate::prefetch`).
        let next = off + record_size(payload.len());
        let len = PREFETCH_BYTES.min(self.layout.file_len - next);
        // SAFETY: `next <= file_len` (the record fit), so the pointer is
        // inside the map or one past its end (then `len` is 0).
        crate::prefetch::write_range(unsafe { self.map.as_ptr().add(next) }, len);
    }

    /// Zeroes the data bytes `[from, to)` (file offsets) that are not already
    /// zero, a page at a time. Used to cut a torn tail.
    pub fn zero_range(&self, from: usize, to: usize) {
        let to = to.min(self.layout.file_len);
        let mut off = from;
        while off < to {
            let end = (align_up(off + 1, PAGE)).min(to);
            // SAFETY: [off, end) is inside the writable map; the writer owns
            // it (recovery runs before any append).
            unsafe {
                let s = std::slice::from_raw_parts_mut(self.map.as_mut_ptr().add(off), end - off);
                if s.iter().any(|&b| b != 0) {
                    s.fill(0);
                }
            }
            off = end;
        }
    }

    /// Faults in `[from, to)` (file offsets) writable without changing the
    /// bytes (MADV_POPULATE_WRITE), so the writer takes no page fault there.
    ///
    /// In chunks of [`MM_CHUNK`]: the call holds the process's mmap lock
    /// (shared) while it faults pages in, and an `mmap`/`munmap` anywhere in
    /// the VM (which takes it exclusively), then every page fault behind
    /// that (the BEAM heap's, the appender's) waits for it. 32 MiB at once
    /// held it for milliseconds.
    pub fn populate(&self, from: usize, to: usize) {
        if !self.writable {
            return;
        }
        let from = from & !(PAGE - 1);
        let to = align_up(to.min(self.layout.file_len), PAGE).min(self.layout.file_len);
        let mut at = from;
        while at < to && POPULATE_WRITE_OK.load(Ordering::Relaxed) {
            let end = (at + MM_CHUNK).min(to);
            // SAFETY: [at, end) is page aligned and inside the map;
            // MADV_POPULATE_WRITE only faults pages in, it never changes
            // contents.
            let rc = unsafe {
                libc::madvise(
                    self.map.as_mut_ptr().add(at) as *mut libc::c_void,
                    end - at,
                    libc::MADV_POPULATE_WRITE,
                )
            };
            if rc != 0 && io::Error::last_os_error().raw_os_error() == Some(libc::EINVAL) {
                // Kernel older than 5.14: no pre-faulting (the writer then
                // takes its own minor faults).
                POPULATE_WRITE_OK.store(false, Ordering::Relaxed);
            }
            at = end;
        }
    }

    /// Drops this map's page table entries ahead of its unmap, in chunks of
    /// [`MM_CHUNK`] (`MADV_DONTNEED`, which holds the mmap lock shared):
    /// unmapping 64 MiB of mapped, dirty pages at once holds it exclusively
    /// for milliseconds. The data is untouched: for a shared file map the
    /// pages stay in the page cache (dirty ones are written back as usual)
    /// and a later access through this map faults them back in.
    pub fn release_pages(&self) {
        let len = self.layout.file_len;
        let mut at = 0;
        while at < len {
            let end = (at + MM_CHUNK).min(len);
            // SAFETY: [at, end) is page aligned and inside the map; for a
            // shared file mapping MADV_DONTNEED only drops page table
            // entries (see above), the bytes stay the file's.
            unsafe {
                libc::madvise(
                    self.map.as_ptr().add(at) as *mut libc::c_void,
                    end - at,
                    libc::MADV_DONTNEED,
                );
            }
            at = end;
        }
    }

    /// msync (MS_SYNC) of `[from, to)` (file offsets): durable on return.
    pub fn sync_range(&self, from: usize, to: usize) -> io::Result<()> {
        if !self.writable {
            // A read-only map has nothing of its own to flush; the pages
            // written through the writer's (now gone) map are the file's.
            return self.file.sync_data();
        }
        let from = from & !(PAGE - 1);
        let to = align_up(to.min(self.layout.file_len), PAGE).min(self.layout.file_len);
        if to <= from {
            return Ok(());
        }
        self.map.flush_range(from, to - from)
    }

    /// A read-only twin of this (sealed) segment: the same file (a
    /// duplicate descriptor) mapped without write permission.
    ///
    /// The writer swaps a sealed segment for its twin so that the writable
    /// map goes away. While a shared file map is writable, every page the
    /// kernel writes back (after 30 s, under dirty-page pressure, or on
    /// `sync`) must first be write-protected in it, and that costs a
    /// TLB-shootdown interrupt on every CPU running the BEAM, the appending
    /// scheduler included. A read-only map has no writable entries to clean.
    pub fn read_only_twin(&self) -> io::Result<Segment> {
        let file = self.file.try_clone()?;
        let map = MmapOptions::new()
            .len(self.layout.file_len)
            .map_raw_read_only(&file)?;
        Ok(Segment {
            seq: self.seq,
            base: AtomicU64::new(self.base()),
            path: self.path.clone(),
            layout: self.layout,
            writable: false,
            file,
            map,
            deleted: AtomicBool::new(self.deleted.load(Ordering::Acquire)),
        })
    }

    /// Starts writeback of the whole file without waiting.
    pub fn sync_async(&self) {
        let _ = self.map.flush_async();
    }

    /// Unlinks the file at `self.path` only if it is still this segment's
    /// file (same device and inode): a name taken over by someone else is
    /// left alone.
    pub fn remove_if_same_file(&self) {
        use std::os::unix::fs::MetadataExt;
        if let (Ok(mine), Ok(there)) = (self.file.metadata(), std::fs::metadata(&self.path)) {
            if mine.dev() == there.dev() && mine.ino() == there.ino() {
                let _ = std::fs::remove_file(&self.path);
            }
        }
    }
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

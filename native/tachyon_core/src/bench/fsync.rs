//! The floor of the sequencer bench's `durability: :fsync` cases
//! (`raw.fdatasync`): what the disk under the sequencer's log costs per
//! durable write, with no log, no sequencing and no threads around it.
//! One loop on a file in the directory the sequencer logs to: write a
//! record of a bus entry's size (`pwrite`), then `fdatasync`.
//!
//! * [`latency`]: one record per `fdatasync`, each write-and-sync timed:
//!   the least a round trip that waits for one sync can add.
//! * [`throughput`]: `per` records per `fdatasync` (one `pwrite` of them
//!   all), as group commit batches them: records per second.
//!
//! The file is written whole and synced before the timed loop (its blocks
//! allocated and written, as a sequencer's prepared segment is after its
//! first pass), and the records overwrite it in turn, wrapping around at
//! [`FILE_SIZE`]: every `fdatasync` then writes the records' pages and
//! flushes the device's cache, and commits no file size or extent change.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::hist::Hist;
use crate::seq::wire::MSG_HEADER;

/// The file's size at most: the records wrap around within it.
pub const FILE_SIZE: usize = 64 << 20;

/// The name of the floor's file in its directory (removed afterwards).
pub const FILE_NAME: &str = "raw.fdatasync";

/// The size of the log entry of a `size`-byte message: what one record of
/// the floor writes.
pub fn entry_size(size: usize) -> usize {
    MSG_HEADER + size
}

crate::named_fields! {
    /// What [`throughput`] measured.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub struct Throughput {
        /// Records written and synced.
        pub records: u64,
        /// `fdatasync` calls (one per `per` records).
        pub syncs: u64,
        pub elapsed_ns: u64,
    }
}

/// The floor's file in `dir`: created, written whole (`len` bytes of
/// zeros) and synced; removed when dropped.
struct FloorFile {
    file: File,
    path: PathBuf,
    len: usize,
    at: usize,
}

impl FloorFile {
    fn create(dir: &Path, len: usize) -> io::Result<FloorFile> {
        fs::create_dir_all(dir)?;
        let path = dir.join(FILE_NAME);
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)?;
        let zeros = vec![0u8; 1 << 20];
        let mut left = len;
        while left > 0 {
            let n = left.min(zeros.len());
            file.write_all(&zeros[..n])?;
            left -= n;
        }
        file.sync_all()?;
        crate::sys::fsync_dir(dir)?;
        Ok(FloorFile {
            file,
            path,
            len,
            at: 0,
        })
    }

    /// Writes `buf` at the next offset (back at 0 where it would not fit)
    /// and `fdatasync`s the file.
    fn write_and_sync(&mut self, buf: &[u8]) -> io::Result<()> {
        if self.at + buf.len() > self.len {
            self.at = 0;
        }
        self.file.write_all_at(buf, self.at as u64)?;
        self.at += buf.len();
        self.file.sync_data()
    }
}

impl Drop for FloorFile {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.path);
    }
}

/// The file's length for `bytes` written in all: enough for them (no
/// wrapping in a short run) up to [`FILE_SIZE`], and at least one write of
/// `chunk` bytes.
fn file_len(bytes: usize, chunk: usize) -> usize {
    bytes.clamp(chunk, FILE_SIZE.max(chunk))
}

/// `warmup + count` writes of one record of [`entry_size`]`(size)` bytes,
/// each followed by `fdatasync`, on a file in `dir`; the histogram of the
/// last `count` (each write and its sync, in nanoseconds).
pub fn latency(dir: &Path, count: u64, warmup: u64, size: usize) -> io::Result<Hist> {
    let rec = vec![0x5Au8; entry_size(size)];
    let total = (count + warmup) as usize;
    let mut f = FloorFile::create(dir, file_len(total.saturating_mul(rec.len()), rec.len()))?;
    for _ in 0..warmup {
        f.write_and_sync(&rec)?;
    }
    let mut h = Hist::new();
    for _ in 0..count {
        let t0 = Instant::now();
        f.write_and_sync(&rec)?;
        h.record(t0.elapsed().as_nanos() as u64);
    }
    Ok(h)
}

/// `count` records of [`entry_size`]`(size)` bytes, `per` to a write and
/// one `fdatasync` after each write (the last write takes what is left),
/// on a file in `dir`: what group commit of `per` entries a sync would
/// reach on this disk. The first `per` are a warm-up, not counted.
pub fn throughput(dir: &Path, count: u64, size: usize, per: usize) -> io::Result<Throughput> {
    let per = per.max(1);
    let entry = entry_size(size);
    let chunk = vec![0x33u8; per * entry];
    let mut f = FloorFile::create(
        dir,
        file_len(
            (count as usize).saturating_add(per).saturating_mul(entry),
            chunk.len(),
        ),
    )?;
    f.write_and_sync(&chunk)?;
    let (mut records, mut syncs) = (0u64, 0u64);
    let t0 = Instant::now();
    while records < count {
        let n = (count - records).min(per as u64) as usize;
        f.write_and_sync(&chunk[..n * entry])?;
        records += n as u64;
        syncs += 1;
    }
    Ok(Throughput {
        records,
        syncs,
        elapsed_ns: t0.elapsed().as_nanos() as u64,
    })
}

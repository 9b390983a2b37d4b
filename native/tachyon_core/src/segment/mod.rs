//! Segment files, shared by the [`store`](crate::store) and the
//! [`table`](crate::table): both keep their data in append-only files of a
//! fixed capacity, written through a shared memory map (the table's `File`
//! mode aside) and made ready ahead of the writer by a background thread.
//! What a record looks like is each part's own (`store::format`,
//! `table::format`); everything about the files themselves is here:
//!
//! * names: `<id:020>.<ext>` ([`file_name`], [`parse_file_name`]);
//! * the directory lock (`.lock`, an `flock`: one writer per directory,
//!   [`lock_dir`]);
//! * creation ([`create`]): `O_EXCL`, then `fallocate` of the whole
//!   capacity before anything is mapped, so a full disk is an `ENOSPC` from
//!   the creation and never a `SIGBUS` on a store into the map; a failed
//!   creation removes the file again;
//! * the maps ([`map`]): every mapped segment has a read-only map that
//!   readers use, and while it may be written a writable one
//!   ([`WriteMap`]) that goes as soon as the segment is sealed (writeback
//!   of a writable shared map costs a TLB shootdown per page); populating
//!   in chunks with a fallback for kernels without `MADV_POPULATE_*`;
//!   retiring a writable map hands its unmapping to the reaper thread;
//! * the queue of prepared segments and the thread that fills it
//!   ([`prepare`]), driven by the [`Worker`](crate::worker::Worker)'s stop
//!   flag and wake-up line.

pub mod map;
pub mod prepare;

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

pub use map::{Maps, WriteMap, MM_CHUNK, PAGE};
pub use prepare::{Prepare, Prepared};

/// The most segments a part may keep prepared (`prepared_segments`).
///
/// The prepare thread keeps `prepared_segments` next segments ready: each
/// one created, allocated, faulted in whole, before the writer reaches it.
/// Faulting in a fresh segment is the kernel zeroing its page-cache pages:
/// about 60 ms for 64 MiB on the test machine (1 GB/s), slower than an
/// appender in a tight loop (up to 2 GB/s). A writer that catches up with
/// the thread's faulting-in waits in its own page faults, behind the
/// thread, for about 20 ms (see docs/BENCHMARK_HISTORY.md, "The stall"). With 4
/// segments of 64 MiB ready from the open on (and the active one faulted in
/// whole), a burst of 256 MiB finds every page ready; the cost is the disk
/// space preallocated for them, and the open's time to fault them in (done
/// on a dirty scheduler).
pub const MAX_PREPARED_SEGMENTS: usize = 16;

/// The file name of segment `id` with extension `ext` (`seg`, `hint`).
pub fn file_name(id: u64, ext: &str) -> String {
    format!("{id:020}.{ext}")
}

/// The id and extension of a file name made by [`file_name`].
pub fn parse_file_name(name: &str) -> Option<(u64, &str)> {
    let (stem, ext) = name.rsplit_once('.')?;
    if stem.len() != 20 || !stem.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((stem.parse().ok()?, ext))
}

/// Takes the directory's lock (`dir/.lock`, created if needed): `Ok(None)`
/// if another handle, in this process or another, holds it. The lock lasts
/// as long as the returned file.
pub fn lock_dir(dir: &Path) -> io::Result<Option<File>> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(dir.join(".lock"))?;
    // SAFETY: flock on a descriptor we own.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        let e = io::Error::last_os_error();
        return if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
            Ok(None)
        } else {
            Err(e)
        };
    }
    Ok(Some(file))
}

/// Creates the new file `dir/name` (never one that exists), allocates
/// `len` bytes of it, then runs `init` on it (writing a header, mapping
/// it). On any error the file is removed again.
pub fn create<T>(
    dir: &Path,
    name: &str,
    len: usize,
    init: impl FnOnce(&File) -> io::Result<T>,
) -> io::Result<(File, PathBuf, T)> {
    let path = dir.join(name);
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&path)?;
    match crate::sys::fallocate(&file, len).and_then(|()| init(&file)) {
        Ok(t) => Ok((file, path, t)),
        Err(e) => {
            drop(file);
            let _ = std::fs::remove_file(&path);
            Err(e)
        }
    }
}

/// Unlinks `path` only if it is still `file` (same device and inode): a
/// name taken over by someone else is left alone.
pub fn remove_if_same_file(file: &File, path: &Path) {
    use std::os::unix::fs::MetadataExt;
    if let (Ok(mine), Ok(there)) = (file.metadata(), std::fs::metadata(path)) {
        if mine.dev() == there.dev() && mine.ino() == there.ino() {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// `From<io::Error>` (a full disk, `ENOSPC` or `EDQUOT`, is `NoSpace`),
/// `Display` and `Error` for the error enums of the parts on segment files
/// (the store's and the table's: the same variant names for the same
/// failures). `$corrupt` starts the text of a `Corrupt` error.
macro_rules! segment_error_impls {
    ($t:ident, $corrupt:literal) => {
        impl From<std::io::Error> for $t {
            fn from(e: std::io::Error) -> Self {
                match e.raw_os_error() {
                    Some(libc::ENOSPC) | Some(libc::EDQUOT) => $t::NoSpace,
                    _ => $t::Io(e),
                }
            }
        }

        impl std::fmt::Display for $t {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                match self {
                    $t::Corrupt { segment, offset } => {
                        write!(f, concat!($corrupt, " {} at offset {}"), segment, offset)
                    }
                    $t::BadConfig(s) => write!(f, "bad config: {s}"),
                    $t::Io(e) => write!(f, "{e}"),
                    other => write!(f, "{other:?}"),
                }
            }
        }

        impl std::error::Error for $t {}
    };
}
pub(crate) use segment_error_impls;

/// A fresh directory path for a test (`tachyon-<what>-test-<pid>-<n>`),
/// removed if it exists; the test creates it.
#[cfg(test)]
pub(crate) fn test_dir(what: &str) -> PathBuf {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static N: AtomicUsize = AtomicUsize::new(0);
    let d = std::env::temp_dir().join(format!(
        "tachyon-{what}-test-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&d);
    d
}

#[cfg(test)]
mod tests;

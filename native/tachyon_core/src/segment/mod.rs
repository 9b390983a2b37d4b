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
//! * what a directory holds ([`dir`]): its manifest, checked before
//!   anything in it is touched, and the kind of part that owns it;
//! * creation ([`create`]): `O_EXCL`, the part's header written first (so
//!   that a file left by a crash says whose it is), then `fallocate` of the
//!   whole capacity before anything is mapped, so a full disk is an
//!   `ENOSPC` from the creation and never a `SIGBUS` on a store into the
//!   map; a failed creation removes the file again, and the shortfall
//!   (bytes asked, bytes free) is kept for the error message
//!   ([`shortfall`]);
//! * sizes ([`Growth`]): a part's first segment is small and each next one
//!   twice the one before, up to its `segment_size`, so that an empty part
//!   takes little disk;
//! * the maps ([`map`]): every mapped segment has a read-only map that
//!   readers use, and while it may be written a writable one
//!   ([`WriteMap`]) that goes as soon as the segment is sealed (writeback
//!   of a writable shared map costs a TLB shootdown per page); populating
//!   in chunks with a fallback for kernels without `MADV_POPULATE_*`;
//!   retiring a writable map hands its unmapping to the reaper thread;
//! * the queue of prepared segments and the thread that fills it
//!   ([`prepare`]), driven by the [`Worker`](crate::worker::Worker)'s stop
//!   flag and wake-up line; it starts with one segment and keeps one more
//!   at every roll, up to `prepared_segments`;
//! * which leftover files a part may remove ([`is_all_zero`]): only those
//!   it can prove are its own, or that hold nothing.

pub mod dir;
pub mod map;
pub mod prepare;

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

pub use map::{Maps, WriteMap, MM_CHUNK, PAGE};
pub use prepare::{Prepare, Prepared};

/// The most segments a part may keep prepared (`prepared_segments`).
///
/// The prepare thread keeps up to `prepared_segments` next segments ready:
/// each one created, allocated, faulted in whole, before the writer reaches
/// it (one from the open on, one more at every roll: see
/// [`prepare::Prepared`]).
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

/// Creates the new file `dir/name` (never one that exists), writes `head`
/// at its start, allocates `len` bytes of it ([`allocate`]), then runs
/// `init` on it (mapping it). On any error the file is removed again. The
/// header goes first so that a file a crash leaves behind is either empty
/// or says whose it is.
pub fn create<T>(
    dir: &Path,
    name: &str,
    len: usize,
    head: &[u8],
    init: impl FnOnce(&File) -> io::Result<T>,
) -> io::Result<(File, PathBuf, T)> {
    let path = dir.join(name);
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&path)?;
    let made = file
        .write_all_at(head, 0)
        .and_then(|()| allocate(&file, dir, len))
        .and_then(|()| init(&file));
    match made {
        Ok(t) => Ok((file, path, t)),
        Err(e) => {
            drop(file);
            let _ = std::fs::remove_file(&path);
            Err(e)
        }
    }
}

/// Allocates the first `len` bytes of `file`, a segment of `dir` (and
/// extends it): a write through a map of that range can never hit `ENOSPC`,
/// which would be a `SIGBUS`. A full disk is recorded ([`shortfall`]).
pub fn allocate(file: &File, dir: &Path, len: usize) -> io::Result<()> {
    let r = crate::sys::fallocate(file, len);
    match &r {
        Err(e) if matches!(e.raw_os_error(), Some(libc::ENOSPC) | Some(libc::EDQUOT)) => {
            shortfall::record(dir, len as u64)
        }
        Ok(()) => shortfall::clear(dir),
        Err(_) => {}
    }
    r
}

/// Whether every byte of the file at `path` is zero (it holds nothing:
/// removing it loses nothing). Reads it a [`MM_CHUNK`] at a time.
pub fn is_all_zero(path: &Path) -> io::Result<bool> {
    is_all_zero_or(path, |_| false)
}

/// Whether the file at `path` starts with bytes `head` accepts (given what
/// one read of its first [`MM_CHUNK`] returned), or else is all zero. One
/// read decides both, so a file whose header is being written meanwhile
/// (by a thread that just created it) is judged on one view of it.
pub fn is_all_zero_or(path: &Path, head: impl Fn(&[u8]) -> bool) -> io::Result<bool> {
    let f = File::open(path)?;
    let mut buf = vec![0u8; MM_CHUNK];
    let mut at = 0u64;
    loop {
        let n = f.read_at(&mut buf, at)?;
        if at == 0 && head(&buf[..n]) {
            return Ok(true);
        }
        if n == 0 {
            return Ok(true);
        }
        if buf[..n].iter().any(|&b| b != 0) {
            return Ok(false);
        }
        at += n as u64;
    }
}

/// The sizes of a part's segments: the first `first` bytes, each next one
/// twice the one before it, at most `max`. A new part takes little disk
/// (its first segment, and one prepared); one that is written to soon
/// reaches `max`. Sizes are computed from the segment before, so a
/// reopened part carries on where it was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Growth {
    first: usize,
    max: usize,
}

impl Growth {
    /// Segments from `first` (at most `max`) up to `max` bytes.
    pub fn new(first: usize, max: usize) -> Growth {
        Growth {
            first: first.min(max),
            max,
        }
    }

    pub fn first(&self) -> usize {
        self.first
    }

    pub fn max(&self) -> usize {
        self.max
    }

    /// The size of the segment after one of `prev` bytes (`None`: of the
    /// first one).
    pub fn next(&self, prev: Option<usize>) -> usize {
        match prev {
            None => self.first,
            Some(p) => p.saturating_mul(2).clamp(self.first, self.max),
        }
    }

    /// The size `n` segments after one of `prev` bytes.
    pub fn after(&self, prev: usize, n: usize) -> usize {
        (0..n).fold(prev, |s, _| self.next(Some(s)))
    }
}

/// Why the last segment a directory asked for could not be made: how many
/// bytes were asked for and how many were free then. A full disk is still
/// `{:error, :enospc}` to the caller; the BEAM side reads this to say how
/// much was asked for, and where (`Tachyon.Error`), without any part's
/// error type carrying it.
pub mod shortfall {
    use super::*;

    /// What a directory could not get.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub struct Shortfall {
        pub asked: u64,
        pub free: u64,
    }

    /// The last shortfall of each directory (a few: the oldest go).
    static LAST: Mutex<Vec<(PathBuf, Shortfall)>> = Mutex::new(Vec::new());
    const KEEP: usize = 64;

    /// Bytes an unprivileged writer may still allocate in `dir`'s file
    /// system (`statvfs`: available blocks times the fragment size).
    pub fn free_bytes(dir: &Path) -> io::Result<u64> {
        use std::os::unix::ffi::OsStrExt;
        let c = std::ffi::CString::new(dir.as_os_str().as_bytes())
            .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
        // SAFETY: a zeroed statvfs is a valid out-parameter; `c` is a
        // NUL-terminated path that outlives the call.
        let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok((st.f_bavail as u64).saturating_mul(st.f_frsize as u64))
    }

    /// Records that `dir` could not get `asked` bytes.
    pub fn record(dir: &Path, asked: u64) {
        let free = free_bytes(dir).unwrap_or(0);
        let mut l = crate::sys::lock(&LAST);
        l.retain(|(d, _)| d != dir);
        if l.len() >= KEEP {
            l.remove(0);
        }
        l.push((dir.to_path_buf(), Shortfall { asked, free }));
    }

    /// Forgets `dir`'s shortfall (a segment was made there since).
    pub fn clear(dir: &Path) {
        let mut l = crate::sys::lock(&LAST);
        if !l.is_empty() {
            l.retain(|(d, _)| d != dir);
        }
    }

    /// The last segment `dir` could not get, if it has not got one since.
    pub fn last(dir: &Path) -> Option<Shortfall> {
        crate::sys::lock(&LAST)
            .iter()
            .find(|(d, _)| d == dir)
            .map(|(_, s)| *s)
    }
}

/// Renames `from` to `to` unless `to` exists (`renameat2` with
/// `RENAME_NOREPLACE`: an existing `to` is `AlreadyExists`, never
/// replaced). A part reusing a retired segment's file gives it the next
/// segment's name this way: a file its writer made under that name
/// meanwhile stays.
pub fn rename_noreplace(from: &Path, to: &Path) -> io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let c = |p: &Path| {
        std::ffi::CString::new(p.as_os_str().as_bytes())
            .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
    };
    let (f, t) = (c(from)?, c(to)?);
    // SAFETY: two NUL-terminated paths that outlive the call.
    let rc = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            f.as_ptr(),
            libc::AT_FDCWD,
            t.as_ptr(),
            libc::RENAME_NOREPLACE,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
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
/// `From<dir::ReadError>` (a directory of another kind is `Dir`),
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

        impl From<crate::segment::dir::ReadError> for $t {
            fn from(e: crate::segment::dir::ReadError) -> Self {
                match e {
                    crate::segment::dir::ReadError::Dir(d) => $t::Dir(d),
                    crate::segment::dir::ReadError::Io(e) => e.into(),
                }
            }
        }

        impl std::fmt::Display for $t {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                match self {
                    $t::Corrupt { segment, offset } => {
                        write!(f, concat!($corrupt, " {} at offset {}"), segment, offset)
                    }
                    $t::Dir(d) => write!(f, "{d}"),
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

/// Waits (at most 10 s, then panics naming `what`) until `f()` holds.
#[cfg(test)]
pub(crate) fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let t0 = std::time::Instant::now();
    while !f() {
        assert!(
            t0.elapsed() < std::time::Duration::from_secs(10),
            "timed out waiting for {what}"
        );
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

#[cfg(test)]
mod tests;

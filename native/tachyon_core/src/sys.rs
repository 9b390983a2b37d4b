//! Small system helpers shared by the store, the async store and the table.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::sync::{Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// Locks `m`, ignoring poisoning: a panic elsewhere never leaves these
/// structures half-updated in a way a later caller could not handle, and a
/// NIF must not turn one panic into a cascade.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Allocates `len` bytes of `file` (and extends it): writes through a map
/// of that range can then never hit ENOSPC, which would be a SIGBUS.
/// Reads `l`, a poisoned lock too (what it guards stays consistent: every
/// writer replaces whole values).
pub(crate) fn read<T>(l: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    l.read().unwrap_or_else(|p| p.into_inner())
}

/// Writes `l`, a poisoned lock too.
pub(crate) fn write<T>(l: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    l.write().unwrap_or_else(|p| p.into_inner())
}

pub(crate) fn fallocate(file: &File, len: usize) -> io::Result<()> {
    // SAFETY: fallocate on a valid fd the caller owns; mode 0 allocates
    // blocks and extends the file size.
    let rc = unsafe { libc::fallocate(file.as_raw_fd(), 0, 0, len as libc::off_t) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Writes `bytes` to `path` as a whole or not at all: to `tmp` first
/// (created or truncated), `fdatasync`ed, then renamed over `path`. The
/// caller `fsync`s the directory ([`fsync_dir`]) when the new name must
/// survive a power loss.
pub(crate) fn write_file_durably(tmp: &Path, path: &Path, bytes: &[u8]) -> io::Result<()> {
    {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(tmp)?;
        // In pieces: a background thread's write of a large file (a
        // table's hints) paces itself (see `worker::pace`).
        for piece in bytes.chunks(crate::worker::PACE_BYTES) {
            io::Write::write_all(&mut f, piece)?;
            crate::worker::pace();
        }
        f.sync_data()?;
    }
    std::fs::rename(tmp, path)
}

/// `fdatasync` of `file`, whose dirty pages lie in its first `len` bytes,
/// with their writeback started first a piece at a time
/// (`sync_file_range(SYNC_FILE_RANGE_WRITE)` of 512 KiB, then
/// [`crate::worker::pace`]): the writeback of a 64 MiB segment is about
/// 2 ms of CPU in the caller's system call, which a background thread
/// sharing a writer's core must not spend at once (traced: 1.8-4.0 ms
/// stretches of the table's maintenance thread in `fdatasync`). The final
/// `fdatasync` then only waits for the disk.
pub(crate) fn datasync_paced(file: &File, len: u64) -> io::Result<()> {
    const PIECE: u64 = 512 << 10;
    let mut at = 0;
    while at < len {
        let n = PIECE.min(len - at);
        // SAFETY: a plain system call on a descriptor `file` keeps open;
        // it only starts writeback of the range (an error is left to the
        // fdatasync below, which reports it).
        unsafe {
            libc::sync_file_range(
                file.as_raw_fd(),
                at as libc::off64_t,
                n as libc::off64_t,
                libc::SYNC_FILE_RANGE_WRITE,
            );
        }
        at += n;
        crate::worker::pace();
    }
    file.sync_data()
}

/// Makes the directory's entries (files created, renamed, removed) durable.
pub(crate) fn fsync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Bytes free for an unprivileged writer on the file system of `path`
/// (`statvfs`: blocks available times the fragment size).
pub(crate) fn free_space(path: &Path) -> io::Result<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: a zeroed statvfs is a valid value for statvfs to fill.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a NUL-terminated path, `st` a valid statvfs to fill.
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(st.f_bavail as u64 * st.f_frsize as u64)
}

/// Fills `buf` from the kernel's random source (`getrandom(2)`, blocking
/// only until the pool is first initialised): keys and nonces' random
/// parts.
pub(crate) fn random_bytes(buf: &mut [u8]) -> io::Result<()> {
    let mut done = 0;
    while done < buf.len() {
        let rest = &mut buf[done..];
        // SAFETY: `rest` is a valid, writable buffer of `rest.len()` bytes
        // for the whole call.
        let n = unsafe { libc::getrandom(rest.as_mut_ptr().cast(), rest.len(), 0) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        done += n as usize;
    }
    Ok(())
}

//! Small system helpers shared by the store, the async store and the table.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::sync::{Mutex, MutexGuard};

/// Locks `m`, ignoring poisoning: a panic elsewhere never leaves these
/// structures half-updated in a way a later caller could not handle, and a
/// NIF must not turn one panic into a cascade.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Allocates `len` bytes of `file` (and extends it): writes through a map
/// of that range can then never hit ENOSPC, which would be a SIGBUS.
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
        io::Write::write_all(&mut f, bytes)?;
        f.sync_data()?;
    }
    std::fs::rename(tmp, path)
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

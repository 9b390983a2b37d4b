//! POSIX error names for `io::Error`s, as the lower-case atoms Erlang uses
//! (`:enospc`, `:eaddrinuse`, ...). One table for every part.

use std::io;

/// The errno name of `err` (`"eio"` when it has no errno Tachyon names;
/// `"timeout"` / `"interrupted"` for the matching error kinds).
pub fn name(err: &io::Error) -> &'static str {
    match err.raw_os_error() {
        Some(libc::EPERM) => "eperm",
        Some(libc::ENOENT) => "enoent",
        Some(libc::EIO) => "eio",
        Some(libc::EBADF) => "ebadf",
        Some(libc::EAGAIN) => "eagain",
        Some(libc::ENOMEM) => "enomem",
        Some(libc::EACCES) => "eacces",
        Some(libc::EEXIST) => "eexist",
        Some(libc::ENOTDIR) => "enotdir",
        Some(libc::EISDIR) => "eisdir",
        Some(libc::EINVAL) => "einval",
        Some(libc::ENFILE) => "enfile",
        Some(libc::EMFILE) => "emfile",
        Some(libc::EFBIG) => "efbig",
        Some(libc::ENOSPC) => "enospc",
        Some(libc::EROFS) => "erofs",
        Some(libc::EOPNOTSUPP) => "eopnotsupp",
        Some(libc::EDQUOT) => "edquot",
        Some(libc::EADDRINUSE) => "eaddrinuse",
        Some(libc::EADDRNOTAVAIL) => "eaddrnotavail",
        Some(libc::EAFNOSUPPORT) => "eafnosupport",
        Some(libc::EMSGSIZE) => "emsgsize",
        Some(libc::ECONNREFUSED) => "econnrefused",
        Some(libc::ENETUNREACH) => "enetunreach",
        Some(libc::EHOSTUNREACH) => "ehostunreach",
        Some(libc::ENOBUFS) => "enobufs",
        Some(libc::EDESTADDRREQ) => "edestaddrreq",
        Some(libc::ENOTCONN) => "enotconn",
        Some(libc::ETIMEDOUT) => "etimedout",
        _ => match err.kind() {
            io::ErrorKind::TimedOut => "timeout",
            io::ErrorKind::Interrupted => "interrupted",
            _ => "eio",
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert_eq!(name(&io::Error::from_raw_os_error(libc::ENOSPC)), "enospc");
        assert_eq!(
            name(&io::Error::from_raw_os_error(libc::EADDRINUSE)),
            "eaddrinuse"
        );
        assert_eq!(name(&io::Error::from_raw_os_error(libc::ENOENT)), "enoent");
        assert_eq!(name(&io::Error::from(io::ErrorKind::TimedOut)), "timeout");
        assert_eq!(name(&io::Error::other("x")), "eio");
    }
}

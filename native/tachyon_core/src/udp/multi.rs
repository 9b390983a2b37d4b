//! Several datagrams, or several sockets, at once: `sendmmsg` of queued
//! datagrams ([`SendBatch`], and [`send_all`] under it and under the echo's
//! answer), and an epoll set of sockets ([`Epoll`]).

use std::io;
use std::net::SocketAddr;
use std::os::fd::RawFd;
use std::time::Duration;

use super::sys::{cvt, to_sockaddr, SendOutcome, Socket};

/// Sends `hdrs` (each with one iovec, `iovs[i]`) with `sendmmsg`, as many
/// calls as it takes: a full socket buffer is waited for (ten times 1 ms at
/// most, then the rest counts as errors); a datagram the kernel refuses is
/// counted and skipped.
///
/// # Safety
/// Every header must point at a live name and at `iovs[i]`'s live buffer.
pub(crate) unsafe fn send_all(
    sock: &Socket,
    hdrs: &mut [libc::mmsghdr],
    iovs: &[libc::iovec],
) -> SendOutcome {
    let k = hdrs.len();
    let mut out = SendOutcome::default();
    let mut done = 0usize;
    let mut full_waits = 0u32;
    while done < k {
        // SAFETY: hdrs[done..k] are valid per this function's contract.
        let r = unsafe {
            libc::sendmmsg(
                sock.fd(),
                hdrs.as_mut_ptr().add(done),
                (k - done) as libc::c_uint,
                libc::MSG_DONTWAIT,
            )
        };
        if r > 0 {
            for iov in &iovs[done..done + r as usize] {
                out.bytes += iov.iov_len as u64;
            }
            out.sent += r as u64;
            done += r as usize;
            continue;
        }
        match io::Error::last_os_error().kind() {
            io::ErrorKind::Interrupted => {}
            io::ErrorKind::WouldBlock if full_waits < 10 => {
                full_waits += 1;
                let _ = crate::wait::poll_fds(
                    &[(sock.fd(), libc::POLLOUT)],
                    Some(Duration::from_millis(1)),
                );
            }
            io::ErrorKind::WouldBlock => {
                out.errors += (k - done) as u64;
                done = k;
            }
            _ => {
                // The first remaining datagram failed: skip it.
                out.errors += 1;
                done += 1;
            }
        }
    }
    out
}

/// An epoll set of sockets: one descriptor that is readable when any of
/// them is (for a loop or a VM `select` that waits on several sockets).
#[derive(Debug)]
pub struct Epoll {
    fd: RawFd,
}

impl Epoll {
    /// A set holding `fds` (level-triggered, readable).
    pub fn new(fds: &[RawFd]) -> io::Result<Epoll> {
        // SAFETY: plain syscall; the result is checked.
        let fd = cvt(unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) })?;
        let ep = Epoll { fd };
        for &f in fds {
            let mut ev = libc::epoll_event {
                events: libc::EPOLLIN as u32,
                u64: f as u64,
            };
            // SAFETY: ev is a live epoll_event; both descriptors are open.
            cvt(unsafe { libc::epoll_ctl(ep.fd, libc::EPOLL_CTL_ADD, f, &mut ev) })?;
        }
        Ok(ep)
    }

    pub fn fd(&self) -> RawFd {
        self.fd
    }
}

impl Drop for Epoll {
    fn drop(&mut self) {
        // SAFETY: we own fd and close it exactly once.
        unsafe {
            libc::close(self.fd);
        }
    }
}

/// Datagrams queued to go out with one `sendmmsg`: each queued datagram's
/// bytes are copied once and may go to several addresses (a fan-out).
/// Nothing is allocated once the queue has been as full as it will get.
pub struct SendBatch {
    /// Bytes of every queued datagram, back to back.
    bytes: Vec<u8>,
    /// (offset, len, destination) of each datagram to send.
    items: Vec<(usize, usize, libc::sockaddr_storage, libc::socklen_t)>,
    iovs: Vec<libc::iovec>,
    hdrs: Vec<libc::mmsghdr>,
    cap: usize,
}

// SAFETY: the raw pointers in `iovs` and `hdrs` are only set and used within
// `flush` (&mut self), pointing into this value's own vectors.
unsafe impl Send for SendBatch {}

impl SendBatch {
    /// A queue of at most `cap` datagrams (at least 1).
    pub fn new(cap: usize) -> SendBatch {
        let cap = cap.max(1);
        SendBatch {
            bytes: Vec::new(),
            items: Vec::with_capacity(cap),
            iovs: Vec::with_capacity(cap),
            hdrs: Vec::with_capacity(cap),
            cap,
        }
    }

    pub fn len(&self) -> usize {
        self.items.len()
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Room for `n` more sends?
    pub fn has_room(&self, n: usize) -> bool {
        self.items.len() + n <= self.cap
    }

    /// Queues `data` to every address of `to` (the caller checks `has_room`;
    /// beyond the capacity the queue just grows).
    pub fn push(&mut self, data: &[u8], to: &[SocketAddr]) {
        let off = self.bytes.len();
        self.bytes.extend_from_slice(data);
        for a in to {
            let (storage, len) = to_sockaddr(a);
            self.items.push((off, data.len(), storage, len));
        }
    }

    /// Sends everything queued (a full socket buffer is waited for, up to
    /// ten times 1 ms, as [`Batch::echo`]) and empties the queue.
    pub fn flush(&mut self, sock: &Socket) -> SendOutcome {
        let k = self.items.len();
        if k == 0 {
            return SendOutcome::default();
        }
        self.iovs.clear();
        for (off, len, _, _) in &self.items {
            self.iovs.push(libc::iovec {
                // SAFETY: off..off+len lies within `bytes` (pushed together).
                iov_base: unsafe { self.bytes.as_mut_ptr().add(*off) } as *mut libc::c_void,
                iov_len: *len,
            });
        }
        self.hdrs.clear();
        for (i, item) in self.items.iter_mut().enumerate() {
            // SAFETY: mmsghdr is plain data; all-zero is a valid value.
            let mut h: libc::mmsghdr = unsafe { std::mem::zeroed() };
            h.msg_hdr.msg_name = &mut item.2 as *mut libc::sockaddr_storage as *mut libc::c_void;
            h.msg_hdr.msg_namelen = item.3;
            h.msg_hdr.msg_iov = &mut self.iovs[i];
            h.msg_hdr.msg_iovlen = 1;
            self.hdrs.push(h);
        }
        // SAFETY: hdrs[..k] point into items, iovs and bytes, which are not
        // touched until the call returns.
        let out = unsafe { send_all(sock, &mut self.hdrs[..k], &self.iovs[..k]) };
        self.items.clear();
        self.bytes.clear();
        out
    }
}

//! The thin libc layer under the UDP loops: a non-blocking datagram socket,
//! address conversion, `recvmmsg`/`sendmmsg` batches, an eventfd waker and
//! `poll`.
//!
//! Everything here is Linux-only (recvmmsg, sendmmsg, eventfd, SO_RXQ_OVFL).

use std::io;
use std::mem::{size_of, MaybeUninit};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::RawFd;

/// `SO_RXQ_OVFL` (asm-generic value; libc does not export it for every target).
const SO_RXQ_OVFL: libc::c_int = 40;

/// Largest UDP payload over IPv4 (65,535 - 8 byte UDP header - 20 byte IP header).
pub const MAX_UDP_PAYLOAD: usize = 65_507;

/// Socket options applied at bind time.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SocketOptions {
    /// `SO_RCVBUF` in bytes (the kernel doubles it and caps it at `rmem_max`).
    pub recbuf: Option<usize>,
    /// `SO_SNDBUF` in bytes (capped at `wmem_max`).
    pub sndbuf: Option<usize>,
    /// `SO_REUSEADDR`.
    pub reuseaddr: bool,
    /// `SO_REUSEPORT` (several members of one multicast group on a host).
    pub reuseport: bool,
}

/// An owned, non-blocking, close-on-exec UDP socket. Closed on drop.
#[derive(Debug)]
pub struct Socket {
    fd: RawFd,
}

pub(super) fn cvt(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

fn cvt_size(ret: libc::ssize_t) -> io::Result<usize> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret as usize)
    }
}

impl Socket {
    /// Creates a UDP socket of `addr`'s family, applies `opts` and binds it.
    ///
    /// # Errors
    /// The OS error of `socket`, `setsockopt` or `bind` (e.g. `EADDRINUSE`).
    pub fn bind(addr: SocketAddr, opts: &SocketOptions) -> io::Result<Socket> {
        let family = match addr {
            SocketAddr::V4(_) => libc::AF_INET,
            SocketAddr::V6(_) => libc::AF_INET6,
        };
        // SAFETY: plain syscall with constant arguments; the result is checked.
        let fd = cvt(unsafe {
            libc::socket(
                family,
                libc::SOCK_DGRAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                0,
            )
        })?;
        let sock = Socket { fd };
        // Kernel drop counter in a control message of every datagram received
        // after a drop: surfaced as `kernel_drops` in the stats.
        sock.set_int(libc::SOL_SOCKET, SO_RXQ_OVFL, 1)?;
        if opts.reuseaddr {
            sock.set_int(libc::SOL_SOCKET, libc::SO_REUSEADDR, 1)?;
        }
        if opts.reuseport {
            sock.set_int(libc::SOL_SOCKET, libc::SO_REUSEPORT, 1)?;
        }
        if let Some(n) = opts.recbuf {
            sock.set_int(libc::SOL_SOCKET, libc::SO_RCVBUF, clamp_int(n))?;
        }
        if let Some(n) = opts.sndbuf {
            sock.set_int(libc::SOL_SOCKET, libc::SO_SNDBUF, clamp_int(n))?;
        }
        let (storage, len) = to_sockaddr(&addr);
        // SAFETY: storage is a valid sockaddr of `len` bytes for this family.
        cvt(unsafe { libc::bind(fd, &storage as *const _ as *const libc::sockaddr, len) })?;
        Ok(sock)
    }

    /// Connects the socket (filters incoming datagrams to `peer` and reports
    /// ICMP errors such as `ECONNREFUSED` on the next send or receive).
    pub fn connect(&self, peer: &SocketAddr) -> io::Result<()> {
        let (storage, len) = to_sockaddr(peer);
        // SAFETY: storage is a valid sockaddr of `len` bytes.
        cvt(unsafe { libc::connect(self.fd, &storage as *const _ as *const libc::sockaddr, len) })?;
        Ok(())
    }

    fn set_int(&self, level: libc::c_int, name: libc::c_int, value: libc::c_int) -> io::Result<()> {
        // SAFETY: value is a live c_int and the length matches it.
        cvt(unsafe {
            libc::setsockopt(
                self.fd,
                level,
                name,
                &value as *const libc::c_int as *const libc::c_void,
                size_of::<libc::c_int>() as libc::socklen_t,
            )
        })?;
        Ok(())
    }

    fn get_int(&self, level: libc::c_int, name: libc::c_int) -> io::Result<libc::c_int> {
        let mut value: libc::c_int = 0;
        let mut len = size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: value and len are live and len holds value's size.
        cvt(unsafe {
            libc::getsockopt(
                self.fd,
                level,
                name,
                &mut value as *mut libc::c_int as *mut libc::c_void,
                &mut len,
            )
        })?;
        Ok(value)
    }

    /// Joins the IPv4 multicast `group` on the interface with address
    /// `iface` (`0.0.0.0`: the kernel's choice).
    pub fn join_multicast_v4(&self, group: Ipv4Addr, iface: Ipv4Addr) -> io::Result<()> {
        let mreq = libc::ip_mreq {
            imr_multiaddr: libc::in_addr {
                s_addr: u32::from_ne_bytes(group.octets()),
            },
            imr_interface: libc::in_addr {
                s_addr: u32::from_ne_bytes(iface.octets()),
            },
        };
        // SAFETY: mreq is a live ip_mreq and the length matches it.
        cvt(unsafe {
            libc::setsockopt(
                self.fd,
                libc::IPPROTO_IP,
                libc::IP_ADD_MEMBERSHIP,
                &mreq as *const libc::ip_mreq as *const libc::c_void,
                size_of::<libc::ip_mreq>() as libc::socklen_t,
            )
        })?;
        Ok(())
    }

    /// Sends multicast through the interface with address `iface`, with
    /// `ttl` hops, looped back to this host's members when `looped`.
    pub fn multicast_sender_v4(&self, iface: Ipv4Addr, ttl: u8, looped: bool) -> io::Result<()> {
        let addr = libc::in_addr {
            s_addr: u32::from_ne_bytes(iface.octets()),
        };
        // SAFETY: addr is a live in_addr and the length matches it.
        cvt(unsafe {
            libc::setsockopt(
                self.fd,
                libc::IPPROTO_IP,
                libc::IP_MULTICAST_IF,
                &addr as *const libc::in_addr as *const libc::c_void,
                size_of::<libc::in_addr>() as libc::socklen_t,
            )
        })?;
        self.set_int(libc::IPPROTO_IP, libc::IP_MULTICAST_TTL, ttl as libc::c_int)?;
        self.set_int(
            libc::IPPROTO_IP,
            libc::IP_MULTICAST_LOOP,
            looped as libc::c_int,
        )
    }

    /// The effective `SO_RCVBUF` and `SO_SNDBUF` (as the kernel reports them).
    pub fn buffer_sizes(&self) -> io::Result<(usize, usize)> {
        let r = self.get_int(libc::SOL_SOCKET, libc::SO_RCVBUF)?;
        let s = self.get_int(libc::SOL_SOCKET, libc::SO_SNDBUF)?;
        Ok((r.max(0) as usize, s.max(0) as usize))
    }

    /// The raw descriptor (still owned by this socket).
    pub fn fd(&self) -> RawFd {
        self.fd
    }

    /// The bound address (with the port the kernel chose for port 0).
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        // SAFETY: sockaddr_storage is plain data; all-zero is a valid value.
        let mut storage: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        let mut len = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
        // SAFETY: storage/len describe a writable sockaddr_storage.
        cvt(unsafe {
            libc::getsockname(
                self.fd,
                &mut storage as *mut _ as *mut libc::sockaddr,
                &mut len,
            )
        })?;
        from_sockaddr(&storage, len)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "unknown address family"))
    }

    /// One non-blocking `sendto`. `WouldBlock` if the send buffer is full.
    pub fn send_to(&self, data: &[u8], to: &SocketAddr) -> io::Result<usize> {
        let (storage, len) = to_sockaddr(to);
        // SAFETY: data is a live slice; storage is a valid sockaddr of `len` bytes.
        cvt_size(unsafe {
            libc::sendto(
                self.fd,
                data.as_ptr() as *const libc::c_void,
                data.len(),
                libc::MSG_DONTWAIT,
                &storage as *const _ as *const libc::sockaddr,
                len,
            )
        })
    }

    /// One non-blocking `send` on a connected socket.
    pub fn send(&self, data: &[u8]) -> io::Result<usize> {
        // SAFETY: data is a live slice.
        cvt_size(unsafe {
            libc::send(
                self.fd,
                data.as_ptr() as *const libc::c_void,
                data.len(),
                libc::MSG_DONTWAIT,
            )
        })
    }

    /// One non-blocking `recv`. Returns the datagram's full length (which may
    /// exceed `buf.len()`: `MSG_TRUNC`), so a truncated datagram is detectable.
    pub fn recv(&self, buf: &mut [u8]) -> io::Result<usize> {
        // SAFETY: buf is a live, writable slice of buf.len() bytes.
        cvt_size(unsafe {
            libc::recv(
                self.fd,
                buf.as_mut_ptr() as *mut libc::c_void,
                buf.len(),
                libc::MSG_DONTWAIT | libc::MSG_TRUNC,
            )
        })
    }
}

impl Drop for Socket {
    fn drop(&mut self) {
        // SAFETY: we own fd and close it exactly once.
        unsafe {
            libc::close(self.fd);
        }
    }
}

fn clamp_int(n: usize) -> libc::c_int {
    n.min(libc::c_int::MAX as usize) as libc::c_int
}

/// Converts a Rust address into a `sockaddr_storage` and its length.
pub fn to_sockaddr(addr: &SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: sockaddr_storage is plain data; all-zero is a valid value.
    let mut storage: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    match addr {
        SocketAddr::V4(a) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(a.ip().octets()),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in.
            unsafe { std::ptr::write(&mut storage as *mut _ as *mut libc::sockaddr_in, sin) };
            (storage, size_of::<libc::sockaddr_in>() as libc::socklen_t)
        }
        SocketAddr::V6(a) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: a.port().to_be(),
                sin6_flowinfo: a.flowinfo(),
                sin6_addr: libc::in6_addr {
                    s6_addr: a.ip().octets(),
                },
                sin6_scope_id: a.scope_id(),
            };
            // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in6.
            unsafe { std::ptr::write(&mut storage as *mut _ as *mut libc::sockaddr_in6, sin6) };
            (storage, size_of::<libc::sockaddr_in6>() as libc::socklen_t)
        }
    }
}

/// Converts a kernel-filled `sockaddr_storage` back; `None` for other families.
pub fn from_sockaddr(storage: &libc::sockaddr_storage, len: libc::socklen_t) -> Option<SocketAddr> {
    match storage.ss_family as libc::c_int {
        libc::AF_INET if len as usize >= size_of::<libc::sockaddr_in>() => {
            // SAFETY: the family says the storage holds a sockaddr_in.
            let sin = unsafe { &*(storage as *const _ as *const libc::sockaddr_in) };
            let ip = Ipv4Addr::from(sin.sin_addr.s_addr.to_ne_bytes());
            Some(SocketAddr::V4(SocketAddrV4::new(
                ip,
                u16::from_be(sin.sin_port),
            )))
        }
        libc::AF_INET6 if len as usize >= size_of::<libc::sockaddr_in6>() => {
            // SAFETY: the family says the storage holds a sockaddr_in6.
            let sin6 = unsafe { &*(storage as *const _ as *const libc::sockaddr_in6) };
            let ip = Ipv6Addr::from(sin6.sin6_addr.s6_addr);
            Some(SocketAddr::V6(SocketAddrV6::new(
                ip,
                u16::from_be(sin6.sin6_port),
                sin6.sin6_flowinfo,
                sin6.sin6_scope_id,
            )))
        }
        _ => None,
    }
}

/// The unspecified address of `ip`'s family (for an ephemeral client bind).
pub fn unspecified_like(ip: &IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
    }
}

/// Space for one `SO_RXQ_OVFL` control message (CMSG_SPACE(4) = 24 on 64-bit).
#[derive(Clone, Copy)]
#[repr(C, align(8))]
struct CtrlBuf([u8; 32]);

/// Preallocated `recvmmsg`/`sendmmsg` state for `slots` datagrams of at most
/// `slot_size` bytes each. Nothing is allocated per datagram: the buffers,
/// addresses and headers are built once and their pointers never move (they
/// live in boxed slices; moving the `Batch` does not move them).
pub struct Batch {
    slot_size: usize,
    bufs: Box<[u8]>,
    names: Box<[libc::sockaddr_storage]>,
    iovs: Box<[libc::iovec]>,
    ctrl: Box<[CtrlBuf]>,
    msgs: Box<[libc::mmsghdr]>,
    out_iovs: Box<[libc::iovec]>,
    out: Box<[libc::mmsghdr]>,
    len: usize,
    kernel_drops: u32,
}

// SAFETY: the raw pointers inside the headers only point into this Batch's own
// heap allocations; the Batch is used by one thread at a time (&mut self).
unsafe impl Send for Batch {}

/// Outcome of sending a batch of replies.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct SendOutcome {
    pub sent: u64,
    pub bytes: u64,
    pub errors: u64,
}

impl Batch {
    /// Preallocates `slots` (at least 1) buffers of `slot_size` bytes. Pages of
    /// a large allocation that no datagram touches are never faulted in.
    pub fn new(slots: usize, slot_size: usize) -> Batch {
        let slots = slots.max(1);
        // SAFETY: these libc structs are plain data; all-zero is valid.
        let zero_name: libc::sockaddr_storage = unsafe { MaybeUninit::zeroed().assume_init() };
        let zero_iov = libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        };
        // SAFETY: as above.
        let zero_msg: libc::mmsghdr = unsafe { MaybeUninit::zeroed().assume_init() };
        let mut b = Batch {
            slot_size,
            bufs: vec![0u8; slots * slot_size.max(1)].into_boxed_slice(),
            names: vec![zero_name; slots].into_boxed_slice(),
            iovs: vec![zero_iov; slots].into_boxed_slice(),
            ctrl: vec![CtrlBuf([0; 32]); slots].into_boxed_slice(),
            msgs: vec![zero_msg; slots].into_boxed_slice(),
            out_iovs: vec![zero_iov; slots].into_boxed_slice(),
            out: vec![zero_msg; slots].into_boxed_slice(),
            len: 0,
            kernel_drops: 0,
        };
        let stride = slot_size.max(1);
        let base = b.bufs.as_mut_ptr();
        for i in 0..slots {
            // SAFETY: i * stride + slot_size <= bufs.len().
            b.iovs[i].iov_base = unsafe { base.add(i * stride) } as *mut libc::c_void;
            b.iovs[i].iov_len = slot_size;
            let hdr = &mut b.msgs[i].msg_hdr;
            hdr.msg_name = &mut b.names[i] as *mut _ as *mut libc::c_void;
            hdr.msg_iov = &mut b.iovs[i];
            hdr.msg_iovlen = 1;
            hdr.msg_control = &mut b.ctrl[i] as *mut _ as *mut libc::c_void;
        }
        b
    }

    /// Number of slots.
    pub fn capacity(&self) -> usize {
        self.msgs.len()
    }

    /// Largest datagram kept whole.
    pub fn slot_size(&self) -> usize {
        self.slot_size
    }

    /// Receives up to `capacity()` waiting datagrams without blocking.
    /// Returns how many arrived; `WouldBlock` if none.
    pub fn recv(&mut self, sock: &Socket) -> io::Result<usize> {
        self.recv_max(sock, usize::MAX)
    }

    /// [`Batch::recv`] of at most `max` datagrams (at least one).
    pub fn recv_max(&mut self, sock: &Socket, max: usize) -> io::Result<usize> {
        let vlen = max.clamp(1, self.msgs.len());
        self.len = 0;
        for m in self.msgs[..vlen].iter_mut() {
            m.msg_hdr.msg_namelen = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
            m.msg_hdr.msg_controllen = size_of::<CtrlBuf>() as _;
            m.msg_hdr.msg_flags = 0;
            m.msg_len = 0;
        }
        let n = if vlen == 1 {
            // One slot: `recvmsg`, which costs about 100 ns less per call
            // than `recvmmsg` here (no vector of headers to copy in and
            // out), and a poller calls it in a loop.
            // SAFETY: the header points into buffers owned by self, sized
            // as declared; the kernel writes at most those sizes.
            let r =
                unsafe { libc::recvmsg(sock.fd(), &mut self.msgs[0].msg_hdr, libc::MSG_DONTWAIT) };
            if r >= 0 {
                self.msgs[0].msg_len = r as libc::c_uint;
                1
            } else {
                -1
            }
        } else {
            // SAFETY: every header points into buffers owned by self, sized
            // as declared; the kernel writes at most those sizes.
            unsafe {
                libc::recvmmsg(
                    sock.fd(),
                    self.msgs.as_mut_ptr(),
                    vlen as libc::c_uint,
                    libc::MSG_DONTWAIT,
                    std::ptr::null_mut(),
                )
            }
        };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        self.len = n as usize;
        if self.len > 0 {
            self.scan_kernel_drops();
        }
        Ok(self.len)
    }

    fn scan_kernel_drops(&mut self) {
        for i in 0..self.len {
            let hdr = &self.msgs[i].msg_hdr;
            if hdr.msg_controllen == 0 {
                continue;
            }
            // SAFETY: the kernel filled msg_control/msg_controllen for this
            // header; the CMSG_* helpers stay within msg_controllen.
            unsafe {
                let mut c = libc::CMSG_FIRSTHDR(hdr);
                while !c.is_null() {
                    if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == SO_RXQ_OVFL {
                        let v = std::ptr::read_unaligned(libc::CMSG_DATA(c) as *const u32);
                        self.kernel_drops = self.kernel_drops.max(v);
                    }
                    c = libc::CMSG_NXTHDR(hdr, c);
                }
            }
        }
    }

    /// Datagrams in the last receive.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes of datagram `i` (truncated to `slot_size` if it was larger).
    pub fn data(&self, i: usize) -> &[u8] {
        let n = (self.msgs[i].msg_len as usize).min(self.slot_size);
        let start = i * self.slot_size.max(1);
        &self.bufs[start..start + n]
    }

    /// Whether datagram `i` was larger than `slot_size` (its tail was lost).
    pub fn is_truncated(&self, i: usize) -> bool {
        self.msgs[i].msg_hdr.msg_flags & libc::MSG_TRUNC != 0
    }

    /// Sender of datagram `i`.
    pub fn addr(&self, i: usize) -> Option<SocketAddr> {
        from_sockaddr(&self.names[i], self.msgs[i].msg_hdr.msg_namelen)
    }

    /// Highest kernel drop count (`SO_RXQ_OVFL`) seen on this socket so far:
    /// datagrams the kernel discarded because the receive buffer was full.
    pub fn kernel_drops(&self) -> u32 {
        self.kernel_drops
    }

    /// Sends every datagram of the last receive back to its sender with
    /// `sendmmsg`, except truncated ones. A datagram the kernel refuses (e.g.
    /// `EPERM`, `ENETUNREACH`) is skipped and counted; a full send buffer is
    /// waited on briefly (`poll`), then the rest is dropped and counted.
    pub fn echo(&mut self, sock: &Socket) -> SendOutcome {
        let mut k = 0usize;
        for i in 0..self.len {
            if self.is_truncated(i) {
                continue;
            }
            let n = self.msgs[i].msg_len as usize;
            self.out_iovs[k] = libc::iovec {
                iov_base: self.iovs[i].iov_base,
                iov_len: n,
            };
            let hdr = &mut self.out[k].msg_hdr;
            hdr.msg_name = self.msgs[i].msg_hdr.msg_name;
            hdr.msg_namelen = self.msgs[i].msg_hdr.msg_namelen;
            hdr.msg_iov = &mut self.out_iovs[k];
            hdr.msg_iovlen = 1;
            hdr.msg_control = std::ptr::null_mut();
            hdr.msg_controllen = 0;
            hdr.msg_flags = 0;
            k += 1;
        }
        // SAFETY: out[..k] are headers built above, pointing into self's
        // buffers, untouched until the call returns.
        unsafe { send_all(sock, &mut self.out[..k], &self.out_iovs[..k]) }
    }
}

/// The errno name of `err` (see [`crate::errno::name`]).
pub use crate::errno::name as errno_name;

pub(crate) use super::multi::send_all;
pub use super::multi::{Epoll, SendBatch};

//! Packet protection: every datagram a node or a member sends is sealed,
//! every datagram it reads is opened before the protocol sees it (after
//! WireGuard, and quinn-proto's packet protection: a layer the state
//! machines never see). The shells and the simulator put the same
//! [`Guard`] between the sockets and the cores.
//!
//! A sealed datagram is an envelope around the protocol's datagram:
//!
//! ```text
//! 0   magic "TS"   2  version   3  class   4  flags (ENCRYPTED, CHACHA)
//! 5   generation   6  0 (2 bytes)          8  sender (u64)
//! 16  incarnation (u64)                    24 counter (u64)
//! 32  recipient: 48 bits of its address's hash (FNV-1a), and its port
//! 40  payload: the datagram, or its ciphertext
//! end-16: the tag; a BUS datagram has a second tag after it, the nodes'
//! ```
//!
//! * **Who may say what** ([`Class`]): a node seals for the nodes with the
//!   node key, for one member with that member's key, for every member
//!   (a multicast bus) with the bus key plus a second tag with the node key
//!   (so a member, which holds the bus key, cannot speak to the nodes as
//!   a node). A member seals with its own key, and only command datagrams
//!   of its own id pass: it publishes under its id only.
//! * **Authenticity and integrity**: an AEAD from `ring`: AES-256-GCM
//!   where the CPU has AES in hardware, else ChaCha20-Poly1305 (the
//!   sender's choice, flagged; every receiver opens both). With `encrypt:
//!   false` the header and the datagram are all associated data (GMAC:
//!   authenticated, in the clear); with `encrypt: true` the header is.
//!   Each sender stream seals, in each of its starts (a random
//!   incarnation), under a key of its own derived from the class's key
//!   (BLAKE3 `derive_key` over the key, the sender and the incarnation),
//!   so its counter alone is a nonce no other sender uses with that key.
//! * **Who it is for**: a node's datagram for a node and a member's carry
//!   the address they were sent to; a node takes only its own (its port,
//!   where it binds every address). The same datagram sent again to
//!   another node (its counter unseen there) is refused: the member key is
//!   one for every node, the node key one for the group. A member's own
//!   key makes what is sealed for it its own already.
//! * **Replays**: each sender's counter starts at its clock (ns since the
//!   epoch) and goes up by one per datagram, so it goes up across its
//!   restarts too; each receiver keeps a window per sender ([`window`],
//!   RFC 6479). A host whose clock stepped back before a restart is not
//!   heard until its clock passes where its last start's counter stood.
//! * **Rejection before state**: a datagram that fails any check is
//!   dropped here and counted ([`GuardCounters`]); nothing of it reaches
//!   the protocol.

pub mod keys;
mod seal;
#[cfg(test)]
mod tests;
pub mod window;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, RwLock};

use crossbeam_utils::CachePadded;

use crate::counter::Counter;
pub use keys::{Key, KeyError, Keys};
use window::Window;

/// Sealed datagram magic, `"TS"` (beside the protocol's `"TB"`, `"TC"`,
/// `"TN"`).
pub const SEAL_MAGIC: u16 = 0x5354;
const VERSION: u8 = 1;
/// Bytes of the envelope's header.
pub const HEADER: usize = 40;
/// Bytes of a tag.
pub const TAG: usize = 16;
/// What sealing adds to a datagram at most (a multicast bus datagram's
/// two tags).
pub const OVERHEAD: usize = HEADER + 2 * TAG;

/// Flag: the payload is encrypted.
const ENCRYPTED: u8 = 0x01;
/// Flag: sealed with ChaCha20-Poly1305 (else AES-256-GCM): the sender's
/// choice, by its CPU; every receiver opens both.
const CHACHA: u8 = 0x02;

/// Sender keys a guard keeps at most (its own, and the senders' it heard).
const KEYS_MAX: usize = 4096;

/// A guard's own sender key: the key generation, class and member whose
/// key it is made from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct SealKey {
    gen: u8,
    class: u8,
    member: u32,
}

/// A sender's key, as a receiver keeps it: what it is made from, and whose.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct OpenKey {
    gen: u8,
    class: u8,
    member: u32,
    sender: u64,
    incarnation: u64,
    chacha: bool,
}

/// Whether this CPU runs AES-GCM in hardware (AES and carry-less
/// multiplication); else a sender seals with ChaCha20-Poly1305.
fn aes_in_hardware() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("aes")
            && std::arch::is_x86_feature_detected!("pclmulqdq")
    }
    #[cfg(target_arch = "aarch64")]
    {
        std::arch::is_aarch64_feature_detected!("aes")
            && std::arch::is_aarch64_feature_detected!("pmull")
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        false
    }
}

/// Who sealed a datagram, with which key, for whom.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Class {
    /// A node, for the nodes (the node key).
    Node = 1,
    /// A member, for the nodes (its member key).
    Member = 2,
    /// A node, for one member (that member's key).
    ToMember = 3,
    /// A node, for every member and node of a multicast bus (the bus key,
    /// and the node key's second tag).
    Bus = 4,
}

impl Class {
    fn from_u8(b: u8) -> Option<Class> {
        Some(match b {
            1 => Class::Node,
            2 => Class::Member,
            3 => Class::ToMember,
            4 => Class::Bus,
            _ => return None,
        })
    }
}

/// Why a datagram was not opened (each counted).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reject {
    /// Not sealed (a plain datagram where keys are required), or not an
    /// envelope of this version.
    Unsealed,
    /// Too short, or a class or sender that cannot be.
    Malformed,
    /// A generation this process holds no key of.
    UnknownKey,
    /// The tag does not verify: forged, damaged, or another group's key.
    BadTag,
    /// A counter seen already, or too old: a replay.
    Replayed,
    /// A class this process does not take (a member's datagram at a
    /// member, a node's at a member of another id), or a member's datagram
    /// that is not a command of its own id.
    Forbidden,
}

/// What a guard counted.
#[derive(Debug, Default)]
pub struct GuardCounters {
    pub sealed: Counter,
    pub opened: Counter,
    pub unsealed: Counter,
    pub malformed: Counter,
    pub unknown_key: Counter,
    pub bad_tag: Counter,
    pub replayed: Counter,
    pub forbidden: Counter,
}

impl GuardCounters {
    /// Every rejection.
    pub fn rejected(&self) -> u64 {
        self.unsealed.get()
            + self.malformed.get()
            + self.unknown_key.get()
            + self.bad_tag.get()
            + self.replayed.get()
            + self.forbidden.get()
    }

    /// Every rejection, then: forged (a tag that does not verify, a key
    /// not held, a malformed envelope), replayed, unsealed, forbidden.
    pub fn rejections(&self) -> [u64; 5] {
        [
            self.rejected(),
            self.bad_tag.get() + self.unknown_key.get() + self.malformed.get(),
            self.replayed.get(),
            self.unsealed.get(),
            self.forbidden.get(),
        ]
    }

    fn count(&self, r: Reject) {
        match r {
            Reject::Unsealed => &self.unsealed,
            Reject::Malformed => &self.malformed,
            Reject::UnknownKey => &self.unknown_key,
            Reject::BadTag => &self.bad_tag,
            Reject::Replayed => &self.replayed,
            Reject::Forbidden => &self.forbidden,
        }
        .bump(1);
    }
}

/// A shell's packet protection settings: the keys, and whether payloads
/// are encrypted too.
#[derive(Clone, Debug)]
pub struct Auth {
    pub keys: Keys,
    pub encrypt: bool,
}

/// Wraps a [`crate::seq::core::Sink`]: every datagram sealed for each
/// address it goes to (the simulator's processes; the shells seal in
/// their queues).
pub struct Sealing<'a> {
    pub guard: &'a mut Guard,
    pub inner: &'a mut dyn crate::seq::core::Sink,
    pub buf: &'a mut Vec<u8>,
}

impl crate::seq::core::Sink for Sealing<'_> {
    fn send(&mut self, to: &[SocketAddr], d: &[u8]) {
        for a in to {
            self.guard.seal(*a, d, self.buf);
            if !self.buf.is_empty() {
                self.inner.send(&[*a], self.buf);
            }
        }
    }
}

/// Whose guard this is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// A node, at its command address (its identity as a sender).
    Node(SocketAddr),
    /// A member of this id.
    Member(u32),
}

/// What every guard of one process shares: the keys (swapped whole on a
/// rotation), the members' addresses the nodes learned, the counters.
pub struct Shared {
    keys: RwLock<Arc<Keys>>,
    encrypt: bool,
    /// Seal with ChaCha20-Poly1305 (no AES in hardware here).
    chacha: bool,
    /// Key rotations so far (a guard looks at the keys again when it moves).
    rotations: CachePadded<std::sync::atomic::AtomicU64>,
    role: Role,
    /// Member addresses, learned from datagrams that verified as theirs
    /// (or that a node passed on): where a node's datagram to a member is
    /// sealed with that member's key.
    book: RwLock<HashMap<SocketAddr, u32>>,
    incarnation: u64,
    pub counters: Arc<CachePadded<GuardCounters>>,
}

/// Most member addresses a node keeps (beyond, the oldest are forgotten;
/// a member's next datagram teaches it again).
const BOOK_MAX: usize = 16_384;

impl Shared {
    /// A process's guards' shared state: `keys` for `role`; `encrypt`: seal
    /// with XChaCha20-Poly1305 (else a BLAKE3 MAC only).
    pub fn new(keys: Keys, role: Role, encrypt: bool) -> Result<Arc<Shared>, KeyError> {
        match role {
            Role::Node(_) if !keys.is_group() => {
                return Err(KeyError::Kind(
                    "a node needs the group's key, not a member's credential",
                ))
            }
            Role::Member(id) => {
                keys.for_member(id)?;
            }
            Role::Node(_) => {}
        }
        let keys = match role {
            Role::Member(id) => keys.for_member(id)?,
            Role::Node(_) => keys,
        };
        let mut r = [0u8; 8];
        crate::sys::random_bytes(&mut r).map_err(|_| KeyError::Kind("no random source"))?;
        Ok(Arc::new(Shared {
            keys: RwLock::new(Arc::new(keys)),
            encrypt,
            chacha: !aes_in_hardware(),
            rotations: CachePadded::new(std::sync::atomic::AtomicU64::new(0)),
            role,
            book: RwLock::new(HashMap::new()),
            incarnation: u64::from_le_bytes(r) | 1,
            counters: Arc::new(CachePadded::new(GuardCounters::default())),
        }))
    }

    /// Replaces the keys (a rotation): the first generation seals from now
    /// on; a member's credential must stay its id's.
    pub fn set_keys(&self, keys: Keys) -> Result<(), KeyError> {
        let keys = match self.role {
            Role::Member(id) => keys.for_member(id)?,
            Role::Node(_) if !keys.is_group() => {
                return Err(KeyError::Kind("a node needs the group's key"))
            }
            Role::Node(_) => keys,
        };
        *crate::sys::write(&self.keys) = Arc::new(keys);
        self.rotations
            .fetch_add(1, std::sync::atomic::Ordering::Release);
        Ok(())
    }

    fn keys(&self) -> Arc<Keys> {
        crate::sys::read(&self.keys).clone()
    }

    fn learn(&self, addr: SocketAddr, member: u32) {
        if crate::sys::read(&self.book).get(&addr) == Some(&member) {
            return;
        }
        let mut b = crate::sys::write(&self.book);
        if b.len() >= BOOK_MAX {
            b.clear();
        }
        b.insert(addr, member);
    }

    fn member_at(&self, addr: &SocketAddr) -> Option<u32> {
        crate::sys::read(&self.book).get(addr).copied()
    }
}

/// One thread's guard: its own sender stream and counter, the receive
/// windows of the datagrams it reads, and caches of derived keys.
pub struct Guard {
    shared: Arc<Shared>,
    /// This guard's sender identity (the process's, and its stream).
    sender: u64,
    counter: u64,
    windows: HashMap<u64, Window>,
    /// The keys as last read, and member keys derived from them.
    keys: Arc<Keys>,
    member_keys: HashMap<(u8, u32), Key>,
    /// This guard's own sender keys, and those of the senders it heard.
    seal_keys: HashMap<SealKey, ring::aead::LessSafeKey>,
    /// `Shared::rotations` when this guard last read the keys.
    rotations: u64,
    open_keys: HashMap<OpenKey, ring::aead::LessSafeKey>,
}

/// Windows a guard keeps at most (senders: nodes and members).
const WINDOWS_MAX: usize = 65_536;

impl Guard {
    /// A guard of `shared`'s process for stream `stream` (each thread that
    /// sends has its own: its counter goes up in its own order), its
    /// counter from the clock.
    pub fn new(shared: &Arc<Shared>, stream: u8) -> Guard {
        let clock = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64);
        Guard::starting_at(shared, stream, clock)
    }

    /// The same, its counter from `counter` (the simulator's clock).
    pub fn starting_at(shared: &Arc<Shared>, stream: u8, counter: u64) -> Guard {
        let sender = match shared.role {
            Role::Node(addr) => node_sender(addr, stream),
            Role::Member(id) => member_sender(id, stream),
        };
        Guard {
            keys: shared.keys(),
            shared: shared.clone(),
            sender,
            counter: counter.max(1),
            windows: HashMap::new(),
            member_keys: HashMap::new(),
            seal_keys: HashMap::new(),
            open_keys: HashMap::new(),
            rotations: shared.rotations.load(std::sync::atomic::Ordering::Acquire),
        }
    }

    pub fn counters(&self) -> &Arc<CachePadded<GuardCounters>> {
        &self.shared.counters
    }

    /// Takes a rotation made since this guard last looked.
    fn refresh(&mut self) {
        // One load per datagram; the lock only after a rotation.
        let r = self
            .shared
            .rotations
            .load(std::sync::atomic::Ordering::Acquire);
        if r == self.rotations {
            return;
        }
        self.rotations = r;
        let now = self.shared.keys();
        if !Arc::ptr_eq(&now, &self.keys) {
            self.keys = now;
            self.member_keys.clear();
            self.seal_keys.clear();
            self.open_keys.clear();
        }
    }
}

/// A 64-bit hash of an address's IP bytes and port.
fn addr_hash(a: SocketAddr) -> [u8; 8] {
    // FNV-1a: a name, not a secret (the tag covers it); cheap, as every
    // datagram sealed takes its recipient's.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut eat = |b: &[u8]| {
        for x in b {
            h = (h ^ *x as u64).wrapping_mul(0x100_0000_01b3);
        }
    };
    match a.ip() {
        std::net::IpAddr::V4(ip) => eat(&ip.octets()),
        std::net::IpAddr::V6(ip) => eat(&ip.octets()),
    }
    eat(&a.port().to_le_bytes());
    h.to_le_bytes()
}

/// 48 bits of the hash of address `a`, and its port: who a datagram is
/// for.
fn recipient(a: SocketAddr) -> [u8; 8] {
    let h = addr_hash(a);
    let mut r = [0u8; 8];
    r[..6].copy_from_slice(&h[..6]);
    r[6..].copy_from_slice(&a.port().to_le_bytes());
    r
}

/// Whether `r` (a datagram's recipient) is the node at `me`: its address,
/// or, for a node bound to every address, its port.
fn is_recipient(r: &[u8], me: SocketAddr) -> bool {
    if me.ip().is_unspecified() {
        r[6..8] == me.port().to_le_bytes()
    } else {
        r == recipient(me)
    }
}

/// A node's sender identity: 56 bits of its address's hash, and a stream.
fn node_sender(addr: SocketAddr, stream: u8) -> u64 {
    let h = addr_hash(addr);
    let mut b = [0u8; 8];
    b.copy_from_slice(&h);
    (u64::from_le_bytes(b) & !(1 << 63) & !0xff) | stream as u64
}

/// A member's sender identity: the top bit set, its id, and a stream.
fn member_sender(id: u32, stream: u8) -> u64 {
    1 << 63 | (id as u64) << 8 | stream as u64
}

/// The member id a member's sender identity names (`None`: a node's).
fn sender_member(sender: u64) -> Option<u32> {
    (sender >> 63 == 1).then_some((sender >> 8) as u32)
}

//! Sealing and opening one datagram ([`Guard::seal`], [`Guard::open`]).

use std::net::SocketAddr;

use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM, CHACHA20_POLY1305};
use zeroize::Zeroize;

use super::keys::KEY_LEN;
use super::{
    is_recipient, recipient, sender_member, Class, Guard, Key, OpenKey, Reject, Role, SealKey,
    CHACHA, ENCRYPTED, HEADER, SEAL_MAGIC, TAG, VERSION,
};
use crate::seq::wire::{self, Cmd, Peer, PeerKind, CMD_MAGIC, PEER_MAGIC};

const SENDER_CONTEXT: &str = "tachyon 2026-11 sequencer group sender key";

/// A sender's own key under `key` (ring's AES-256-GCM, or
/// ChaCha20-Poly1305 with `chacha`): each sender stream, in each of its
/// starts (`incarnation`), seals under a key of its own, so that its
/// counter, which goes up by one per datagram, is a nonce that nobody
/// else uses with that key. Derived with BLAKE3's `derive_key`.
fn sender_key(key: &Key, sender: u64, incarnation: u64, chacha: bool) -> Option<LessSafeKey> {
    let mut m = [0u8; KEY_LEN + 16];
    m[..KEY_LEN].copy_from_slice(key.bytes());
    m[KEY_LEN..KEY_LEN + 8].copy_from_slice(&sender.to_le_bytes());
    m[KEY_LEN + 8..].copy_from_slice(&incarnation.to_le_bytes());
    let mut k = blake3::derive_key(SENDER_CONTEXT, &m);
    m.zeroize();
    let alg = if chacha {
        &CHACHA20_POLY1305
    } else {
        &AES_256_GCM
    };
    let r = UnboundKey::new(alg, &k).ok().map(LessSafeKey::new);
    k.zeroize();
    r
}

/// Which of a generation's keys a datagram's class is sealed with.
#[derive(Clone, Copy)]
enum Base {
    Node,
    Bus,
    Member(u32),
}

/// The nonce of counter `c` (unique per sender key: see [`sender_key`]).
fn nonce(c: u64) -> Nonce {
    let mut n = [0u8; 12];
    n[..8].copy_from_slice(&c.to_le_bytes());
    Nonce::assume_unique_for_key(n)
}

/// Seals `out[HEADER..]` in place (encrypted) or authenticates all of
/// `out` (clear); appends the tag.
fn tag_into(k: &LessSafeKey, c: u64, encrypt: bool, out: &mut Vec<u8>) -> bool {
    let tag = if encrypt {
        let (head, body) = out.split_at_mut(HEADER);
        k.seal_in_place_separate_tag(nonce(c), Aad::from(&*head), body)
    } else {
        k.seal_in_place_separate_tag(nonce(c), Aad::from(out.as_slice()), &mut [])
    };
    match tag {
        Ok(t) => {
            out.extend_from_slice(t.as_ref());
            true
        }
        Err(_) => false,
    }
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut x = [0u8; 8];
    x.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(x)
}

impl Guard {
    /// Member `id`'s key in generation `g` (derived once, then cached).
    fn member_key(&mut self, g: usize, id: u32) -> Option<Key> {
        let gen = self.keys.gens.get(g)?;
        if let Some(k) = self.member_keys.get(&(gen.id, id)) {
            return Some(k.clone());
        }
        let k = gen.member_key(id)?;
        if self.member_keys.len() >= 4096 {
            self.member_keys.clear();
        }
        self.member_keys.insert((gen.id, id), k.clone());
        Some(k)
    }

    /// Seals datagram `d` for `to` into `out` (cleared): for a member, with
    /// its key; for a node, with the key of whoever `to` is (a member it
    /// heard from, a multicast group, or a node).
    pub fn seal(&mut self, to: SocketAddr, d: &[u8], out: &mut Vec<u8>) {
        self.refresh();
        out.clear();
        let (class, member) = match self.shared.role {
            Role::Member(id) => (Class::Member, id),
            Role::Node(_) if to.ip().is_multicast() => (Class::Bus, 0),
            Role::Node(_) => match self.shared.member_at(&to) {
                Some(m) => (Class::ToMember, m),
                None => (Class::Node, 0),
            },
        };
        let encrypt = self.shared.encrypt;
        let chacha = self.shared.chacha;
        self.counter += 1;
        let c = self.counter;
        out.extend_from_slice(&SEAL_MAGIC.to_le_bytes());
        out.push(VERSION);
        out.push(class as u8);
        out.push(if encrypt { ENCRYPTED } else { 0 } | if chacha { CHACHA } else { 0 });
        out.push(self.keys.gens[0].id);
        out.extend_from_slice(&[0, 0]);
        out.extend_from_slice(&self.sender.to_le_bytes());
        out.extend_from_slice(&self.shared.incarnation.to_le_bytes());
        out.extend_from_slice(&c.to_le_bytes());
        out.extend_from_slice(&recipient(to));
        out.extend_from_slice(d);
        let mut ok = match self.seal_key(class, member) {
            Some(k) => tag_into(k, c, encrypt, out),
            None => false,
        };
        if ok && class == Class::Bus {
            // The nodes' own tag: a member, which holds the bus key, cannot
            // speak to the nodes as a node.
            ok = match self.seal_key(Class::Node, 0) {
                Some(k) => tag_into(k, c, false, out),
                None => false,
            };
        }
        if !ok {
            // Keys of no member (cannot be: a member's credential is its own
            // id's, a node holds every member's): nothing leaves unsealed.
            out.clear();
            return;
        }
        self.shared.counters.sealed.bump(1);
    }

    /// This guard's own key for `class` (and `member`'s key), derived once.
    fn seal_key(&mut self, class: Class, member: u32) -> Option<&LessSafeKey> {
        let sk = SealKey {
            gen: self.keys.gens[0].id,
            class: class as u8,
            member,
        };
        if !self.seal_keys.contains_key(&sk) {
            let base = match class {
                Class::Node => self.keys.gens[0].node.clone(),
                Class::Bus => self.keys.gens[0].bus.clone(),
                Class::Member | Class::ToMember => self.member_key(0, member)?,
            };
            let k = sender_key(
                &base,
                self.sender,
                self.shared.incarnation,
                self.shared.chacha,
            )?;
            if self.seal_keys.len() >= super::KEYS_MAX {
                self.seal_keys.clear();
            }
            self.seal_keys.insert(sk, k);
        }
        self.seal_keys.get(&sk)
    }

    /// Checks a tag (`in_out`: the ciphertext and its tag, or the tag
    /// alone) with the sender's key for `ok` (derived from `base` if not
    /// seen yet, and kept once a datagram verified); the plaintext's length.
    fn verify(
        &mut self,
        ok: OpenKey,
        counter: u64,
        (g, base): (usize, Base),
        aad: &[u8],
        in_out: &mut [u8],
    ) -> Result<usize, Reject> {
        let mut fresh = None;
        if !self.open_keys.contains_key(&ok) {
            // A sender not heard yet (or since a rotation): its key, from
            // the class's, derived once; a known sender's costs a lookup.
            let key = match base {
                Base::Node => self.keys.gens[g].node.clone(),
                Base::Bus => self.keys.gens[g].bus.clone(),
                Base::Member(m) => self.member_key(g, m).ok_or(Reject::UnknownKey)?,
            };
            fresh = Some(
                sender_key(&key, ok.sender, ok.incarnation, ok.chacha).ok_or(Reject::UnknownKey)?,
            );
        }
        let Some(k) = fresh.as_ref().or_else(|| self.open_keys.get(&ok)) else {
            return Err(Reject::UnknownKey);
        };
        let n = k
            .open_in_place(nonce(counter), Aad::from(aad), in_out)
            .map_err(|_| Reject::BadTag)?
            .len();
        if let Some(k) = fresh {
            if self.open_keys.len() >= super::KEYS_MAX {
                self.open_keys.clear();
            }
            self.open_keys.insert(ok, k);
        }
        Ok(n)
    }

    /// Opens datagram `d` from `from`: the protocol's datagram (in `out`),
    /// or why it was dropped (counted). Nothing of a rejected datagram is
    /// kept but the count.
    pub fn open<'a>(
        &mut self,
        from: SocketAddr,
        d: &[u8],
        out: &'a mut Vec<u8>,
    ) -> Result<&'a [u8], Reject> {
        let r = self.try_open(from, d, out);
        match r {
            Ok(()) => {
                self.shared.counters.opened.bump(1);
                Ok(out.as_slice())
            }
            Err(e) => {
                self.shared.counters.count(e);
                out.clear();
                Err(e)
            }
        }
    }

    fn try_open(&mut self, from: SocketAddr, d: &[u8], out: &mut Vec<u8>) -> Result<(), Reject> {
        if d.len() < 4 || wire::magic(d) != SEAL_MAGIC || d[2] != VERSION {
            return Err(Reject::Unsealed);
        }
        let class = Class::from_u8(d[3]).ok_or(Reject::Malformed)?;
        let tags = if class == Class::Bus { 2 } else { 1 };
        if d.len() < HEADER + tags * TAG {
            return Err(Reject::Malformed);
        }
        self.refresh();
        let encrypted = d[4] & ENCRYPTED != 0;
        let g = self
            .keys
            .gens
            .iter()
            .position(|g| g.id == d[5])
            .ok_or(Reject::UnknownKey)?;
        let sender = u64_at(d, 8);
        let counter = u64_at(d, 24);
        let member = sender_member(sender);
        // Who may say what, and with which key.
        let base = match (self.shared.role, class, member) {
            (Role::Node(_), Class::Node, None) => Base::Node,
            (Role::Node(_), Class::Bus, None) => Base::Bus,
            (Role::Node(_), Class::Member, Some(m)) => Base::Member(m),
            (Role::Member(id), Class::ToMember, None) => Base::Member(id),
            (Role::Member(_), Class::Bus, None) => Base::Bus,
            _ => return Err(Reject::Forbidden),
        };
        // For this node: what was sent to another node is not this one's
        // (a member's key, and the node key, are one for every node).
        if let Role::Node(me) = self.shared.role {
            if matches!(class, Class::Node | Class::Member) && !is_recipient(&d[32..40], me) {
                return Err(Reject::Forbidden);
            }
        }
        if !self.windows.get(&sender).is_none_or(|w| w.fresh(counter)) {
            return Err(Reject::Replayed);
        }
        let chacha = d[4] & CHACHA != 0;
        let incarnation = u64_at(d, 16);
        let key_of = |class: Class| OpenKey {
            gen: d[5],
            class: class as u8,
            member: member.unwrap_or(0),
            sender,
            incarnation,
            chacha,
        };
        let mut end = d.len();
        if class == Class::Bus {
            end -= TAG;
            if let Role::Node(_) = self.shared.role {
                let mut t = [0u8; TAG];
                t.copy_from_slice(&d[end..]);
                self.verify(
                    key_of(Class::Node),
                    counter,
                    (g, Base::Node),
                    &d[..end],
                    &mut t,
                )?;
            }
        }
        out.clear();
        if encrypted {
            out.extend_from_slice(&d[HEADER..end]);
            let n = self.verify(key_of(class), counter, (g, base), &d[..HEADER], out)?;
            out.truncate(n);
        } else {
            let mut t = [0u8; TAG];
            t.copy_from_slice(&d[end - TAG..end]);
            self.verify(key_of(class), counter, (g, base), &d[..end - TAG], &mut t)?;
            out.extend_from_slice(&d[HEADER..end - TAG]);
        }
        self.check_inner(from, member, out)?;
        if self.windows.len() >= super::WINDOWS_MAX && !self.windows.contains_key(&sender) {
            self.windows.clear();
        }
        self.windows.entry(sender).or_default().mark(counter);
        Ok(())
    }

    /// What a verified datagram may say: a member's is a command of its own
    /// id (it publishes, says hello, asks for replays only as itself); and
    /// where members are (a member's own datagram, or a node's HELLO_VIA).
    fn check_inner(&self, from: SocketAddr, member: Option<u32>, d: &[u8]) -> Result<(), Reject> {
        match member {
            Some(m) => {
                let ok =
                    wire::magic(d) == CMD_MAGIC && Cmd::parse(d).is_ok_and(|c| c.member_id == m);
                if !ok {
                    return Err(Reject::Forbidden);
                }
                self.shared.learn(from, m);
            }
            None if wire::magic(d) == PEER_MAGIC => {
                if let Ok(p) = Peer::parse(d) {
                    if p.h.kind == PeerKind::HelloVia {
                        let addr = wire::body_addr(p.a, p.b, p.c);
                        if let (Some(a), Ok(c)) = (addr, Cmd::parse(Peer::payload(d))) {
                            self.shared.learn(a, c.member_id);
                        }
                    }
                }
            }
            None => {}
        }
        Ok(())
    }
}

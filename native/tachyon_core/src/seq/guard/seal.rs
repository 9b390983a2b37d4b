//! Sealing and opening one datagram ([`Guard::seal`], [`Guard::open`]).

use std::net::SocketAddr;

use chacha20poly1305::aead::{AeadInOut, KeyInit};
use chacha20poly1305::{Tag, XChaCha20Poly1305, XNonce};

use super::{
    is_recipient, recipient, sender_member, Class, Guard, Key, Reject, Role, ENCRYPTED, HEADER,
    SEAL_MAGIC, TAG, VERSION,
};
use crate::seq::wire::{self, Cmd, Peer, PeerKind, CMD_MAGIC, PEER_MAGIC};

/// A keyed BLAKE3 MAC of `parts`, cut to a tag.
fn mac(key: &Key, parts: &[&[u8]]) -> [u8; TAG] {
    let mut h = blake3::Hasher::new_keyed(key.bytes());
    for p in parts {
        h.update(p);
    }
    let mut t = [0u8; TAG];
    t.copy_from_slice(&h.finalize().as_bytes()[..TAG]);
    t
}

/// Equal in time independent of where they differ.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |d, (x, y)| d | (x ^ y)) == 0
}

fn nonce(header: &[u8]) -> XNonce {
    // Sender, incarnation and counter: unique per key.
    let mut n = [0u8; 24];
    n.copy_from_slice(&header[8..32]);
    XNonce::from(n)
}

fn cipher(key: &Key) -> XChaCha20Poly1305 {
    XChaCha20Poly1305::new(&chacha20poly1305::Key::from(*key.bytes()))
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
        let (class, key) = match self.shared.role {
            Role::Member(id) => (Class::Member, self.member_key(0, id)),
            Role::Node(_) if to.ip().is_multicast() => {
                (Class::Bus, Some(self.keys.gens[0].bus.clone()))
            }
            Role::Node(_) => match self.shared.member_at(&to) {
                Some(m) => (Class::ToMember, self.member_key(0, m)),
                None => (Class::Node, Some(self.keys.gens[0].node.clone())),
            },
        };
        let Some(key) = key else {
            // Keys of no member (cannot be: a member's credential is its own
            // id's, a node holds every member's): nothing leaves unsealed.
            out.clear();
            return;
        };
        self.counter += 1;
        out.clear();
        out.extend_from_slice(&SEAL_MAGIC.to_le_bytes());
        out.push(VERSION);
        out.push(class as u8);
        out.push(if self.shared.encrypt { ENCRYPTED } else { 0 });
        out.push(self.keys.gens[0].id);
        out.extend_from_slice(&[0, 0]);
        out.extend_from_slice(&self.sender.to_le_bytes());
        out.extend_from_slice(&self.shared.incarnation.to_le_bytes());
        out.extend_from_slice(&self.counter.to_le_bytes());
        out.extend_from_slice(&recipient(to));
        out.extend_from_slice(d);
        if self.shared.encrypt {
            let (head, body) = out.split_at_mut(HEADER);
            let tag = cipher(&key)
                .encrypt_inout_detached(&nonce(head), head, body.into())
                .unwrap_or_default();
            out.extend_from_slice(&tag);
        } else {
            let t = mac(&key, &[out]);
            out.extend_from_slice(&t);
        }
        if class == Class::Bus {
            // The nodes' own tag: a member, which holds the bus key, cannot
            // speak to the nodes as a node.
            let t = mac(&self.keys.gens[0].node, &[out]);
            out.extend_from_slice(&t);
        }
        self.shared.counters.sealed.bump(1);
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
        let key = match (self.shared.role, class, member) {
            (Role::Node(_), Class::Node, None) => self.keys.gens[g].node.clone(),
            (Role::Node(_), Class::Bus, None) => self.keys.gens[g].bus.clone(),
            (Role::Node(_), Class::Member, Some(m)) => {
                self.member_key(g, m).ok_or(Reject::UnknownKey)?
            }
            (Role::Member(id), Class::ToMember, None) => {
                self.member_key(g, id).ok_or(Reject::UnknownKey)?
            }
            (Role::Member(_), Class::Bus, None) => self.keys.gens[g].bus.clone(),
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
        let mut end = d.len();
        if class == Class::Bus {
            end -= TAG;
            if let Role::Node(_) = self.shared.role {
                let t = mac(&self.keys.gens[g].node, &[&d[..end]]);
                if !same(&t, &d[end..]) {
                    return Err(Reject::BadTag);
                }
            }
        }
        let (head, body, tag) = (&d[..HEADER], &d[HEADER..end - TAG], &d[end - TAG..end]);
        out.clear();
        out.extend_from_slice(body);
        if encrypted {
            let mut t = [0u8; TAG];
            t.copy_from_slice(tag);
            cipher(&key)
                .decrypt_inout_detached(
                    &nonce(head),
                    head,
                    out.as_mut_slice().into(),
                    &Tag::from(t),
                )
                .map_err(|_| Reject::BadTag)?;
        } else if !same(&mac(&key, &[&d[..end - TAG]]), tag) {
            return Err(Reject::BadTag);
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

//! Key material: a group's secret and what derives from it, a member's
//! credential, their files, and how they never show.
//!
//! A group has a 32-byte secret. Every key is derived from it with
//! BLAKE3's key derivation (a context string per purpose): the **node
//! key** (node to node), the **bus key** (a node to every member at once,
//! on a multicast bus), and one **member key** per member id (a member to
//! the nodes and the nodes to that member). The nodes hold the secret; a
//! member holds only its own credential (its id, its member key and the
//! bus key), so it can speak only as itself and read only what is sent to
//! it or to every member. A member given the group's secret instead (one
//! key for a small deployment) derives its own credential from it.
//!
//! Up to two generations are held at once (a key rotation): the first
//! seals, every one opens. A generation is named in each datagram by one
//! byte, the first of the BLAKE3 hash of its bus key.
//!
//! Files are text: a first line naming what they hold, then one line per
//! generation of hex keys. Keys are zeroed when dropped and never printed:
//! `Debug` shows only the generation's name.

use std::fmt;

use zeroize::Zeroize;

/// Bytes of a key.
pub const KEY_LEN: usize = 32;

/// Generations held at most (the one that seals and the next or last).
pub const MAX_GENERATIONS: usize = 2;

const NODE_CONTEXT: &str = "tachyon 2026-11 sequencer group node key";
const BUS_CONTEXT: &str = "tachyon 2026-11 sequencer group bus key";
const MEMBER_CONTEXT: &str = "tachyon 2026-11 sequencer group member key";

/// A secret key: zeroed when dropped, never printed.
#[derive(Clone, PartialEq, Eq)]
pub struct Key([u8; KEY_LEN]);

impl Drop for Key {
    fn drop(&mut self) {
        self.0.zeroize();
    }
}

impl Key {
    pub fn from_bytes(b: [u8; KEY_LEN]) -> Key {
        Key(b)
    }

    pub fn bytes(&self) -> &[u8; KEY_LEN] {
        &self.0
    }

    /// A new random key (from the kernel's random source).
    pub fn random() -> std::io::Result<Key> {
        let mut b = [0u8; KEY_LEN];
        crate::sys::random_bytes(&mut b)?;
        Ok(Key(b))
    }

    fn derive(context: &str, material: &[u8]) -> Key {
        Key(blake3::derive_key(context, material))
    }

    fn hex(&self) -> String {
        let mut s = String::with_capacity(2 * KEY_LEN);
        for b in &self.0 {
            s.push_str(&format!("{b:02x}"));
        }
        s
    }

    fn parse_hex(s: &str) -> Option<Key> {
        let s = s.trim();
        if s.len() != 2 * KEY_LEN || !s.is_ascii() {
            return None;
        }
        let mut b = [0u8; KEY_LEN];
        for (i, out) in b.iter_mut().enumerate() {
            *out = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).ok()?;
        }
        Some(Key(b))
    }
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Key(redacted)")
    }
}

/// One generation of a group's keys, as a node holds them.
#[derive(Clone, Debug)]
pub struct Generation {
    /// Names the generation in every datagram.
    pub id: u8,
    pub node: Key,
    pub bus: Key,
    /// The member keys' root (only where the group's secret is held).
    members: Option<Key>,
    /// One member's own key (a member's credential).
    member: Option<(u32, Key)>,
}

fn generation_id(bus: &Key) -> u8 {
    blake3::hash(bus.bytes()).as_bytes()[0]
}

impl Generation {
    /// Everything of the group's secret `secret`.
    pub fn of_secret(secret: &Key) -> Generation {
        let bus = Key::derive(BUS_CONTEXT, secret.bytes());
        Generation {
            id: generation_id(&bus),
            node: Key::derive(NODE_CONTEXT, secret.bytes()),
            bus,
            members: Some(Key::derive(MEMBER_CONTEXT, secret.bytes())),
            member: None,
        }
    }

    /// Member `id`'s key, derived (where the group's secret is held) or its
    /// own.
    pub fn member_key(&self, id: u32) -> Option<Key> {
        if let Some((mine, k)) = &self.member {
            return (*mine == id).then(|| k.clone());
        }
        let root = self.members.as_ref()?;
        let mut m = [0u8; KEY_LEN + 4];
        m[..KEY_LEN].copy_from_slice(root.bytes());
        m[KEY_LEN..].copy_from_slice(&id.to_le_bytes());
        let k = Key(blake3::derive_key(MEMBER_CONTEXT, &m));
        m.zeroize();
        Some(k)
    }

    /// Whether it holds the node key (a node's generation, not a
    /// member's credential).
    pub fn has_node_key(&self) -> bool {
        self.members.is_some()
    }
}

/// What a process holds: a group's keys (a node, or a member of a small
/// deployment), or one member's credential.
#[derive(Clone, Debug)]
pub struct Keys {
    /// The first seals; every one opens.
    pub gens: Vec<Generation>,
    /// A member's credential: its id.
    pub member: Option<u32>,
}

/// Why a key file was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyError {
    /// Not a key file of this format (its first line says what it holds).
    Format(&'static str),
    /// No key, or more than [`MAX_GENERATIONS`].
    Count,
    /// A member's credential where a group's key is needed, or another
    /// member's.
    Kind(&'static str),
}

impl fmt::Display for KeyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeyError::Format(w) => write!(f, "not a Tachyon key file: {w}"),
            KeyError::Count => write!(f, "a key file holds one key, or two during a rotation"),
            KeyError::Kind(w) => f.write_str(w),
        }
    }
}

const GROUP_HEADER: &str = "tachyon-key v1 group";
const MEMBER_HEADER: &str = "tachyon-key v1 member";

impl Keys {
    /// A group's keys from its secrets (the first seals).
    pub fn of_secrets(secrets: &[Key]) -> Result<Keys, KeyError> {
        if secrets.is_empty() || secrets.len() > MAX_GENERATIONS {
            return Err(KeyError::Count);
        }
        let gens: Vec<Generation> = secrets.iter().map(Generation::of_secret).collect();
        if gens.len() == 2 && gens[0].id == gens[1].id {
            // A datagram names its key by this one byte: two alike could not
            // be told apart (1 in 256 new keys; `add` draws another).
            return Err(KeyError::Kind("two keys of the same generation id"));
        }
        Ok(Keys { gens, member: None })
    }

    /// Whether these are a group's keys (a node can use them).
    pub fn is_group(&self) -> bool {
        self.member.is_none() && self.gens.iter().all(Generation::has_node_key)
    }

    /// Member `id`'s credential (its key and the bus key, every
    /// generation), from a group's keys.
    pub fn credential(&self, id: u32) -> Result<Keys, KeyError> {
        if !self.is_group() {
            return Err(KeyError::Kind(
                "a member's credential is made from a group's key",
            ));
        }
        let gens = self
            .gens
            .iter()
            .map(|g| Generation {
                id: g.id,
                node: Key([0; KEY_LEN]),
                bus: g.bus.clone(),
                members: None,
                member: g.member_key(id).map(|k| (id, k)),
            })
            .collect();
        Ok(Keys {
            gens,
            member: Some(id),
        })
    }

    /// What a member with id `id` uses: its credential, or one derived from
    /// a group's keys (a small deployment); refused if the credential is
    /// another member's.
    pub fn for_member(&self, id: u32) -> Result<Keys, KeyError> {
        match self.member {
            None => self.credential(id),
            Some(m) if m == id => Ok(self.clone()),
            Some(_) => Err(KeyError::Kind("this credential is another member id's")),
        }
    }

    /// The file's text for the group's secrets (the first seals).
    pub fn group_file(secrets: &[Key]) -> String {
        let mut s = format!("{GROUP_HEADER}\n");
        for k in secrets {
            s.push_str(&k.hex());
            s.push('\n');
        }
        s
    }

    /// The file's text for member `id`'s credential from a group's secrets.
    pub fn member_file(secrets: &[Key], id: u32) -> Result<String, KeyError> {
        let keys = Keys::of_secrets(secrets)?.credential(id)?;
        let mut s = format!("{MEMBER_HEADER} {id}\n");
        for g in &keys.gens {
            let (_, k) = g.member.as_ref().ok_or(KeyError::Count)?;
            s.push_str(&format!("{} {}\n", k.hex(), g.bus.hex()));
        }
        Ok(s)
    }

    /// Reads a key file's text: a group's secrets, or a member's
    /// credential.
    pub fn parse(text: &str) -> Result<Keys, KeyError> {
        let mut lines = text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'));
        let head = lines.next().ok_or(KeyError::Format("empty"))?;
        if head == GROUP_HEADER {
            let secrets: Vec<Key> = lines
                .map(|l| Key::parse_hex(l).ok_or(KeyError::Format("a key is 64 hex digits")))
                .collect::<Result<_, _>>()?;
            return Keys::of_secrets(&secrets);
        }
        let id = head
            .strip_prefix(MEMBER_HEADER)
            .and_then(|r| r.trim().parse::<u32>().ok())
            .ok_or(KeyError::Format("its first line is not a Tachyon key's"))?;
        let mut gens = Vec::new();
        for l in lines {
            let mut w = l.split_whitespace();
            let (Some(m), Some(b), None) = (w.next(), w.next(), w.next()) else {
                return Err(KeyError::Format(
                    "a member line is two keys of 64 hex digits",
                ));
            };
            let bad = KeyError::Format("a key is 64 hex digits");
            let (m, bus) = (
                Key::parse_hex(m).ok_or(bad.clone())?,
                Key::parse_hex(b).ok_or(bad)?,
            );
            gens.push(Generation {
                id: generation_id(&bus),
                node: Key([0; KEY_LEN]),
                bus,
                members: None,
                member: Some((id, m)),
            });
        }
        if gens.is_empty() || gens.len() > MAX_GENERATIONS {
            return Err(KeyError::Count);
        }
        Ok(Keys {
            gens,
            member: Some(id),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret(b: u8) -> Key {
        Key([b; KEY_LEN])
    }

    #[test]
    fn files_round_trip_and_keys_never_print() {
        let s = [secret(1), secret(2)];
        let g = Keys::parse(&Keys::group_file(&s)).unwrap();
        assert!(g.is_group());
        assert_eq!(g.gens.len(), 2);
        assert_eq!(g.gens[0].id, Generation::of_secret(&s[0]).id);
        let m = Keys::parse(&Keys::member_file(&s, 7).unwrap()).unwrap();
        assert_eq!(m.member, Some(7));
        assert!(!m.is_group());
        // The member's key is what the nodes derive for id 7, and no other.
        assert_eq!(m.gens[1].member_key(7), g.gens[1].member_key(7));
        assert_eq!(m.gens[0].member_key(8), None);
        assert_ne!(g.gens[0].member_key(7), g.gens[0].member_key(8));
        assert_eq!(m.gens[0].id, g.gens[0].id);
        let shown = format!("{g:?}{m:?}");
        assert!(!shown.contains("0101") && !shown.contains(&s[0].hex()[..16]));
        assert!(shown.contains("redacted"));
        // Credentials from a credential, or for another id: refused.
        assert!(m.credential(8).is_err());
        assert!(m.for_member(8).is_err());
        assert_eq!(m.for_member(7).unwrap().member, Some(7));
        assert_eq!(g.for_member(9).unwrap().member, Some(9));
    }

    #[test]
    fn bad_files_are_refused_with_a_reason() {
        assert!(matches!(Keys::parse(""), Err(KeyError::Format(_))));
        assert!(matches!(Keys::parse("hello\n00"), Err(KeyError::Format(_))));
        assert!(matches!(
            Keys::parse(&format!("{GROUP_HEADER}\nzz")),
            Err(KeyError::Format(_))
        ));
        assert_eq!(Keys::parse(GROUP_HEADER).unwrap_err(), KeyError::Count);
        let three = Keys::group_file(&[secret(1), secret(2), secret(3)]);
        assert_eq!(Keys::parse(&three).unwrap_err(), KeyError::Count);
        assert!(Keys::parse(&format!("{MEMBER_HEADER} x\n")).is_err());
    }
}

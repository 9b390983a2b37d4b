//! A group's membership: every node's id and address, and whether it
//! votes (Raft thesis, chapter 4: changes one server at a time, the
//! configuration in the log).
//!
//! The group starts with the `:group` list (node `i` is the `i`-th
//! address, every one a voter). A change is a log entry (CONTROL|CONFIG,
//! its data the whole new membership): every node uses the latest one in
//! its log, committed or not, and reverts to the one before if a
//! truncation removes it. A primary appends a change only when the last
//! one is committed and its own term has committed an entry, and only one
//! node is added or removed at a time, so that any majority of the old
//! membership and any majority of the new one share a voter. A node is
//! added as a non-voter (it copies the log, is counted by no quorum) and
//! made a voter by the primary once it has caught up (thesis §4.2.1).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// Node ids are below this (a node campaigns only in terms `t` with
/// `t % MAX_NODES == id`: one candidate per term whatever the membership).
pub const MAX_NODES: usize = 64;

/// A node of the group.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct NodeEntry {
    pub id: u8,
    pub addr: SocketAddr,
    pub voter: bool,
}

/// Every node of the group, by id.
#[derive(Debug, Clone, PartialEq, Eq, Default, Hash)]
pub struct Membership {
    nodes: Vec<NodeEntry>,
}

/// Why a change was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChangeError {
    /// Only the primary changes the membership.
    NotPrimary,
    /// A change is not committed yet (or the primary's term has committed
    /// nothing): one at a time.
    Pending,
    /// The address is a node already (`add`), or the id is none (`remove`).
    Exists,
    NotFound,
    /// No id left, or the last voter.
    Full,
    /// The log refused the entry (a full disk, say).
    Log,
}

impl Membership {
    /// The initial membership: node `i` at `group[i]`, every one a voter.
    pub fn initial(group: &[SocketAddr]) -> Membership {
        Membership {
            nodes: group
                .iter()
                .enumerate()
                .take(MAX_NODES)
                .map(|(i, a)| NodeEntry {
                    id: i as u8,
                    addr: *a,
                    voter: true,
                })
                .collect(),
        }
    }

    pub fn nodes(&self) -> &[NodeEntry] {
        &self.nodes
    }

    pub fn get(&self, id: u8) -> Option<&NodeEntry> {
        self.nodes.iter().find(|n| n.id == id)
    }

    pub fn addr(&self, id: u8) -> Option<SocketAddr> {
        self.get(id).map(|n| n.addr)
    }

    pub fn id_of(&self, addr: SocketAddr) -> Option<u8> {
        self.nodes.iter().find(|n| n.addr == addr).map(|n| n.id)
    }

    pub fn is_voter(&self, id: u8) -> bool {
        self.get(id).is_some_and(|n| n.voter)
    }

    /// The voters' ids.
    pub fn voters(&self) -> impl Iterator<Item = u8> + '_ {
        self.nodes.iter().filter(|n| n.voter).map(|n| n.id)
    }

    pub fn n_voters(&self) -> usize {
        self.nodes.iter().filter(|n| n.voter).count()
    }

    /// Voters that make a majority.
    pub fn majority(&self) -> usize {
        super::quorum::majority(self.n_voters())
    }

    /// With a new non-voting node at `addr`: its id (the lowest free).
    pub fn with_added(&self, addr: SocketAddr) -> Result<(u8, Membership), ChangeError> {
        if self.id_of(addr).is_some() {
            return Err(ChangeError::Exists);
        }
        let id = (0..MAX_NODES as u8)
            .find(|i| self.get(*i).is_none())
            .ok_or(ChangeError::Full)?;
        let mut m = self.clone();
        m.nodes.push(NodeEntry {
            id,
            addr,
            voter: false,
        });
        m.nodes.sort_by_key(|n| n.id);
        Ok((id, m))
    }

    /// With node `id` a voter.
    pub fn with_voter(&self, id: u8) -> Result<Membership, ChangeError> {
        let mut m = self.clone();
        let n = m
            .nodes
            .iter_mut()
            .find(|n| n.id == id)
            .ok_or(ChangeError::NotFound)?;
        n.voter = true;
        Ok(m)
    }

    /// Without node `id` (never the last voter).
    pub fn without(&self, id: u8) -> Result<Membership, ChangeError> {
        let n = self.get(id).ok_or(ChangeError::NotFound)?;
        if n.voter && self.n_voters() == 1 {
            return Err(ChangeError::Full);
        }
        let mut m = self.clone();
        m.nodes.retain(|n| n.id != id);
        Ok(m)
    }

    /// The data of a CONFIG entry: a count, then per node its id, voter
    /// flag, address family (4 or 6), address and port.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.push(self.nodes.len() as u8);
        for n in &self.nodes {
            out.push(n.id);
            out.push(n.voter as u8);
            match n.addr.ip() {
                IpAddr::V4(ip) => {
                    out.push(4);
                    out.extend_from_slice(&ip.octets());
                }
                IpAddr::V6(ip) => {
                    out.push(6);
                    out.extend_from_slice(&ip.octets());
                }
            }
            out.extend_from_slice(&n.addr.port().to_le_bytes());
        }
    }

    /// Reads the data of a CONFIG entry (`None` if it does not parse).
    pub fn decode(b: &[u8]) -> Option<Membership> {
        let (&count, mut rest) = b.split_first()?;
        let mut nodes = Vec::with_capacity(count as usize);
        for _ in 0..count {
            let (&id, r) = rest.split_first()?;
            let (&voter, r) = r.split_first()?;
            let (&family, r) = r.split_first()?;
            let (ip, r): (IpAddr, &[u8]) = match family {
                4 if r.len() >= 4 => {
                    let o: [u8; 4] = r[..4].try_into().ok()?;
                    (Ipv4Addr::from(o).into(), &r[4..])
                }
                6 if r.len() >= 16 => {
                    let o: [u8; 16] = r[..16].try_into().ok()?;
                    (Ipv6Addr::from(o).into(), &r[16..])
                }
                _ => return None,
            };
            if r.len() < 2 || id as usize >= MAX_NODES || voter > 1 {
                return None;
            }
            let port = u16::from_le_bytes([r[0], r[1]]);
            rest = &r[2..];
            nodes.push(NodeEntry {
                id,
                addr: SocketAddr::new(ip, port),
                voter: voter == 1,
            });
        }
        if !rest.is_empty() {
            return None;
        }
        nodes.sort_by_key(|n| n.id);
        let ids_unique = nodes.windows(2).all(|w| w[0].id != w[1].id);
        (ids_unique && nodes.iter().any(|n| n.voter)).then_some(Membership { nodes })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(p: u16) -> SocketAddr {
        SocketAddr::from(([10, 0, 0, 1], p))
    }

    #[test]
    fn changes_one_node_at_a_time_and_round_trip() {
        let m = Membership::initial(&[a(1), a(2), a(3)]);
        assert_eq!((m.n_voters(), m.majority()), (3, 2));
        let (id, m2) = m.with_added(a(4)).unwrap();
        assert_eq!((id, m2.n_voters(), m2.is_voter(3)), (3, 3, false));
        assert_eq!(m2.with_added(a(4)), Err(ChangeError::Exists));
        let m3 = m2.with_voter(3).unwrap();
        assert_eq!((m3.n_voters(), m3.majority()), (4, 3));
        let m4 = m3.without(1).unwrap();
        assert_eq!(m4.voters().collect::<Vec<_>>(), vec![0, 2, 3]);
        // The lowest free id is reused.
        assert_eq!(m4.with_added(a(9)).unwrap().0, 1);
        let mut b = Vec::new();
        m4.encode(&mut b);
        assert_eq!(Membership::decode(&b), Some(m4));
        let v6 = SocketAddr::from(([0u16, 0, 0, 0, 0, 0, 0, 1], 7000));
        let (_, m6) = m.with_added(v6).unwrap();
        b.clear();
        m6.encode(&mut b);
        assert_eq!(Membership::decode(&b), Some(m6));
    }

    #[test]
    fn the_last_voter_stays_and_garbage_is_none() {
        let one = Membership::initial(&[a(1)]);
        assert_eq!(one.without(0), Err(ChangeError::Full));
        assert_eq!(one.without(7), Err(ChangeError::NotFound));
        let mut b = Vec::new();
        Membership::initial(&[a(1), a(2)]).encode(&mut b);
        for cut in 0..b.len() {
            assert_eq!(Membership::decode(&b[..cut]), None, "cut at {cut}");
        }
        b.push(0);
        assert_eq!(Membership::decode(&b), None);
        assert_eq!(
            Membership::decode(&[1, 0, 0, 4, 1, 2, 3, 4, 0, 0]),
            None,
            "no voter"
        );
    }
}

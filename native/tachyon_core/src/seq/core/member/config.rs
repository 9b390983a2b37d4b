//! A member's options, counters and stats.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use crate::counter::Counter;
use crate::seq::BusMode;
use crate::udp::sys::SocketOptions;

/// Member options (`MemberConfig::new` holds the defaults).
#[derive(Debug, Clone)]
pub struct MemberConfig {
    /// The sequencer's command address (of a group: one node's; the
    /// others are `alternates`).
    pub sequencer: SocketAddr,
    pub bus: BusMode,
    /// The address of the member's own socket (port 0: any).
    pub bind: SocketAddr,
    /// Non-zero, unique on the bus.
    pub member_id: u32,
    /// `None`: from the next message on; `Some(n)`: from sequence number n.
    pub from: Option<u64>,
    /// Start from the latest snapshot of a state machine on the bus: its
    /// position (the snapshot's messages follow, then the rest), or from
    /// sequence number 1 if there is none (`from` is then ignored).
    pub from_snapshot: bool,
    /// Deliver state machine snapshot messages (flagged); without it a
    /// member never sees them.
    pub snapshots: bool,
    /// Read from `from`, deliver from here (set from the welcome when
    /// starting from a snapshot).
    pub deliver_from: Option<u64>,
    /// Largest datagram (as the sequencer's, or smaller).
    pub max_datagram: usize,
    /// Largest message (larger ones are refused by publish; fragments of
    /// a larger one on the bus are dropped).
    pub max_message_size: usize,
    /// Resend a command not seen sequenced after this long at least: the
    /// floor of the retransmission timeout, which follows the measured
    /// round trip (doubled per expiry, up to 8 times, 1 s at most); a nack from
    /// the primary resends one at once.
    pub resend_after: Duration,
    /// Ask again for a gap not filled after this long.
    pub retransmit_after: Duration,
    /// Say hello to every node after this long without a datagram.
    pub hello_after: Duration,
    /// A hello this often to renew the member id's binding.
    pub keepalive: Duration,
    /// Tells this member from another claiming its id (random at open).
    pub incarnation: u64,
    pub connect_timeout: Duration,
    /// Most messages asked for in one replay request (a rewind asks for
    /// the next chunk when this one is in).
    pub replay_chunk: u64,
    /// How far ahead of the next sequence number messages are kept while
    /// a gap is filled (later ones are asked for again).
    pub max_buffer: u64,
    /// Commands (datagrams) published and not yet seen on the bus, at most.
    pub max_pending: usize,
    /// Datagrams per `recvmmsg`.
    pub batch: usize,
    /// Test and benchmark aid: drop this share of received bus datagrams.
    pub loss: f64,
    /// The other nodes of the sequencer group: bus datagrams are taken
    /// from the group's nodes only, and hellos go to all of them when the
    /// primary falls silent. With any, the socket is not connected (it
    /// must hear them all).
    pub alternates: Vec<SocketAddr>,
    pub socket: SocketOptions,
    /// Packet protection (`None`: datagrams as they are): the member's
    /// credential, and whether payloads are encrypted.
    pub auth: Option<crate::seq::guard::Auth>,
}

impl MemberConfig {
    pub fn new(sequencer: SocketAddr, member_id: u32) -> MemberConfig {
        let any = match sequencer.ip() {
            IpAddr::V4(ip) if ip.is_loopback() => IpAddr::V4(Ipv4Addr::LOCALHOST),
            IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            IpAddr::V6(_) => IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED),
        };
        MemberConfig {
            sequencer,
            bus: BusMode::Unicast,
            bind: SocketAddr::new(any, 0),
            member_id,
            from: None,
            from_snapshot: false,
            snapshots: false,
            deliver_from: None,
            max_datagram: 1472,
            max_message_size: 1 << 20,
            resend_after: Duration::from_millis(20),
            retransmit_after: Duration::from_millis(1),
            hello_after: Duration::from_millis(30),
            keepalive: Duration::from_secs(1),
            incarnation: 0,
            connect_timeout: Duration::from_secs(5),
            replay_chunk: 1024,
            max_buffer: 1 << 16,
            max_pending: 1 << 16,
            batch: 32,
            loss: 0.0,
            alternates: Vec::new(),
            socket: crate::seq::socket_options(),
            auth: None,
        }
    }
}

/// Why a publish was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PublishError {
    TooLarge,
    /// `max_pending` commands are waiting to be seen on the bus.
    Busy,
    Closed,
    /// The member id is bound to another member.
    Taken,
    /// The group's access control lets this member read, not publish.
    Forbidden,
    /// The primary's disk is full: it could not append this member's last
    /// command (resent to the next primary); refused until a primary takes
    /// this member's commands again.
    NoSpace,
}

impl MemberConfig {
    /// Every node of the group: the sequencer, then the alternates.
    pub fn group(&self) -> Vec<SocketAddr> {
        let mut g = vec![self.sequencer];
        g.extend(
            self.alternates
                .iter()
                .copied()
                .filter(|a| *a != self.sequencer),
        );
        g
    }
}

#[derive(Debug, Default, Clone)]
pub struct TxCounters {
    pub published: Counter,
    pub commands: Counter,
    pub resent: Counter,
    /// Resends asked for by a nack.
    pub nacked: Counter,
    /// Tail-loss probes sent (RFC 8985; also counted in `resent`).
    pub probes: Counter,
    /// Pending commands sent marked to skip the numbers a fork lost.
    pub renumbered: Counter,
    pub send_errors: Counter,
    /// Mirror of the pending queue's length.
    pub pending: Counter,
    /// Mirror of the congestion window (command datagrams).
    pub cwnd: Counter,
    /// Mirror of the retransmission timeout (nanoseconds, before backoff).
    pub rto: Counter,
    /// Messages (fragments) that joined a command datagram waiting for the
    /// congestion window.
    pub coalesced: Counter,
    /// When the receive side last looked for datagrams (a poll or a tick;
    /// the member's clock): the shell sets it at every poll, without the
    /// `tx` lock.
    pub looked: Counter,
}

#[derive(Debug, Default, Clone)]
pub struct RxCounters {
    pub delivered: Counter,
    pub datagrams: Counter,
    pub duplicates: Counter,
    pub gaps: Counter,
    pub replay_requests: Counter,
    pub malformed: Counter,
    pub wrong_session: Counter,
    pub dropped_ahead: Counter,
    pub injected_losses: Counter,
    pub oversized: Counter,
    pub hellos: Counter,
    pub stale_epoch: Counter,
    pub forks: Counter,
    /// Messages the member could not get: retention had removed them.
    pub trimmed: Counter,
    /// Bus datagrams not from a node of the group.
    pub strangers: Counter,
    /// Datagrams of the current term from another node than its primary.
    pub conflicts: Counter,
    pub welcomes: Counter,
    /// Acknowledgements of followers counted (commit in three hops).
    pub acks: Counter,
    /// Mirrors of the receive state, for stats without the lock.
    pub next_seq: Counter,
    pub epoch: Counter,
    pub commit: Counter,
}

crate::named_fields! {
    /// A snapshot of a member's counters.
    #[derive(Debug, Clone, Default, PartialEq, Eq)]
    pub struct MemberStats {
        /// Messages published (not fragments).
        pub published: u64,
        /// Command datagrams sent, resends aside.
        pub commands: u64,
        /// Commands resent (not seen on the bus in time).
        pub resent: u64,
        pub send_errors: u64,
        /// Messages delivered.
        pub delivered: u64,
        /// Bus datagrams received.
        pub datagrams: u64,
        /// Messages received again (already delivered).
        pub duplicates: u64,
        /// Gaps found (a jump in sequence numbers or a heartbeat ahead).
        pub gaps: u64,
        /// Replay requests sent (gap fills and rewind chunks).
        pub replay_requests: u64,
        pub malformed: u64,
        pub wrong_session: u64,
        /// Messages too far ahead to keep during a gap (asked for again later).
        pub dropped_ahead: u64,
        /// Datagrams dropped by the `loss` option.
        pub injected_losses: u64,
        /// Reassembled messages over `max_message_size`, dropped.
        pub oversized: u64,
        pub hellos: u64,
        /// The next sequence number to deliver.
        pub next_seq: u64,
        /// Commands waiting to be seen on the bus.
        pub pending: u64,
        /// The epoch of the sequencer followed.
        pub epoch: u64,
        /// Datagrams of a lower epoch (term: a deposed primary), dropped.
        pub stale_epoch: u64,
        /// Forks met: a new primary whose log does not hold messages this
        /// member delivered, or lacks commands of this member it had seen
        /// sequenced.
        pub forks: u64,
        /// Messages skipped because retention had removed them before this
        /// member read them (a `:trimmed` event says which).
        pub trimmed: u64,
        /// Resends asked for by the primary's nacks.
        pub nacked: u64,
        /// Tail-loss probes sent (RFC 8985; also in `resent`).
        pub probes: u64,
        pub renumbered: u64,
        pub strangers: u64,
        pub conflicts: u64,
        pub welcomes: u64,
        /// The commit position (messages below it may be delivered).
        pub commit: u64,
        /// The congestion window: command datagrams in flight at most.
        pub cwnd: u64,
        /// The retransmission timeout from the measured round trip (before
        /// backoff), in microseconds.
        pub rto_us: u64,
        /// Messages that joined a command datagram waiting for the window.
        pub coalesced: u64,
        /// Datagrams dropped by packet protection (keys given) before the
        /// member saw them: every one, then forged, replayed, unsealed,
        /// forbidden (as `Tachyon.Sequencer`'s).
        pub rejected: u64,
        pub rejected_forged: u64,
        pub rejected_replayed: u64,
        pub rejected_unsealed: u64,
        pub rejected_forbidden: u64,
    }
}

defmodule Tachyon.Sequencer.Options do
  @moduledoc false
  # The option schemas of Tachyon.Sequencer and Tachyon.Bus (checked and
  # documented by Tachyon.Options), and the bus address type they share.

  alias Tachyon.UDP.Options, as: U

  @doc "The options of `Tachyon.Sequencer.start_link/1`."
  def sequencer_schema do
    [
      path: [
        type: :path,
        required: true,
        doc: "the directory of the sequencer's log (a `Tachyon.Store`)."
      ],
      port:
        U.port()
        |> Keyword.put(
          :doc,
          "UDP port for commands (the bus leaves from it too), `0` for one the kernel picks."
        ),
      ip: U.ip_spec(:loopback),
      bus: bus_spec(),
      wait: [
        type: :wait,
        default: U.default_wait(),
        default_doc: "`:busy_spin` on machines with more than two cores, `:backoff` otherwise",
        doc: "what the thread does when no command is waiting (as `Tachyon.Echo`'s `:wait`)."
      ],
      core: U.core_spec(),
      batch: [
        type: {:integer, 1, 1024},
        default: {:native, :sequencer, :batch},
        doc: "command datagrams per `recvmmsg`."
      ],
      max_datagram_size: max_datagram(:sequencer),
      batching: [
        type: :boolean,
        default: {:native, :sequencer, :batching},
        doc:
          "several messages per bus datagram when several commands are waiting (`false`: one each)."
      ],
      heartbeat_ms: [
        type: {:integer, 1, 3_600_000},
        default: {:native, :sequencer, :heartbeat_ms},
        formerly: [heartbeat: nil],
        doc: "milliseconds between heartbeats (the next sequence number) when the bus is idle."
      ],
      heartbeat_after_us: [
        type: {:integer, 1, 1_000_000},
        default: {:native, :sequencer, :heartbeat_after_us},
        formerly: [heartbeat_after: nil],
        doc: """
        microseconds after the last data datagram before a heartbeat when the
        bus goes idle; the next ones come ten times later each (10 us,
        100 us, 1 ms ...) up to `:heartbeat_ms`. A member that lost the last
        message of a burst learns of it then, not a whole `:heartbeat_ms` later.
        """
      ],
      replay_max: [
        type: {:integer, 1, 65_536},
        default: {:native, :sequencer, :replay_max},
        doc: "most messages sent for one replay request."
      ],
      segment_size: [
        type: {:multiple_of, 8, 65_536, 3_221_225_472},
        default: {:native, :sequencer, :segment_size},
        doc: """
        data bytes of the log's largest segment files. The log is a
        `Tachyon.Store` in a directory of the sequencer's own (a store's or
        a table's directory is refused, `{:error, {:wrong_kind, kind}}`,
        nothing changed): its first segment holds 2 MiB of data, each next
        one twice the one before, up to this size, and one next segment is
        kept ready. A new node's log takes about 6.4 MB; one that has
        rolled keeps its data (see `Tachyon.Store`, "Disk use") and one
        segment of this size ahead. A full disk at start is
        `{:error, :enospc}`, with what was asked for and where in the log.
        """
      ],
      retention: [
        type: Tachyon.Options.retention_type(),
        default: [],
        default_doc: "`[]` (keep the whole log)",
        doc: """
        `[max_bytes: n, max_age_ms: n]`: the log's retention (see
        "Retention"). Whole segments go, the oldest first, never the active
        one, once the segment files take more than `:max_bytes` or a
        segment was sealed more than `:max_age_ms` ago, and only below
        what is still needed (committed, heard by every follower and by
        the members that said hello lately); a checkpoint saved beside the
        log sums up what they held. A member that asks for a removed
        sequence gets a `:trimmed` event.
        """
      ],
      recbuf: [
        type: {:or, [nil, {:integer, 1, :infinity}]},
        default: 4 * 1024 * 1024,
        doc: "`SO_RCVBUF` in bytes."
      ],
      sndbuf: [
        type: {:or, [nil, {:integer, 1, :infinity}]},
        default: 4 * 1024 * 1024,
        doc: "`SO_SNDBUF` in bytes."
      ],
      reuseaddr: [type: :boolean, default: false, doc: "set `SO_REUSEADDR`."],
      group: [
        type: {:custom, &__MODULE__.group/1, "a list of {ip, port}, one per node"},
        default: [],
        doc: """
        every node's command address, this node's (`{:ip, :port}`) included,
        in the same order on every node (a node's id is its index). `[]`: a
        group of one. Three or five nodes: a majority group, which fails
        over without forking (see "Failover"); two: a primary and a
        standby (see `:two_nodes`).
        """
      ],
      join: [
        type:
          {:custom, &__MODULE__.join/1, "an \"ip:port\" string, an {ip, port}, or a list of them"},
        default: [],
        doc: """
        start as a new node of a running group: the address of a node of it
        (or several), `"10.0.0.1:7000"` or `{{10, 0, 0, 1}, 7000}`. Without
        `:group`, on an empty directory, with this node's own `:ip` and
        `:port` (the address the group will know it by). The node asks to
        join; the primary adds it as a non-voter and makes it a voter once
        it has copied the log (docs/FAILOVER.md, "Replacing a host"). See
        also `Tachyon.Sequencer.add_node/3`.
        """
      ],
      election_timeout_ms: [
        type: {:integer, 1, 3_600_000},
        default: {:native, :sequencer, :election_timeout_ms},
        formerly: [election_timeout: nil],
        doc: """
        milliseconds without hearing the primary before a node asks for
        votes (each wait drawn in `[t, 2t)`); also how long a primary of a
        group of three or more that cannot reach a majority keeps its role.
        """
      ],
      two_nodes: [
        type: {:in, [:safe, :available]},
        default: {:native, :sequencer, :two_nodes},
        doc: """
        a group of two: `:safe` (the primary commits only what the standby
        holds; the standby takes over only when `:watch_nodes` reports the
        primary's BEAM node down: a partition stops the bus, it never forks
        it) or `:available` (a silent peer is taken for dead after
        `:election_timeout_ms`: the bus goes on through a partition and can
        fork; members report a fork as an event).
        """
      ],
      durability: [
        type: {:in, [:replicated, :fsync]},
        default: :replicated,
        doc: """
        what "committed" means, and so what a member's delivery promises.
        `:replicated`: held by a majority of the nodes in their page cache
        (a node acknowledges an entry once appended: it survives `kill -9`
        of any minority and the power loss of a minority of hosts, not of a
        majority at once). `:fsync`: on the disk of a majority (a node
        acknowledges an entry once synced; one sync per receive batch, off
        the sequencing thread: group commit): committed messages survive the
        power loss of every host. The same on every node. See
        docs/FAILOVER.md, "Durability".
        """
      ],
      eager: [
        type: :boolean,
        default: {:native, :sequencer, :eager},
        doc: "ask for votes at start (else wait one election timeout for a primary to be heard)."
      ],
      watch_nodes: [
        type: {:custom, &__MODULE__.nodes/1, "a list of BEAM node names (or nil)"},
        default: [],
        doc: """
        BEAM nodes to monitor, by group index (`nil` or the node's own name
        for none): a `:nodedown` of node `i`'s BEAM node is the witness's
        word that node `i` is down (in a group of two: the standby may take
        over, the primary commits alone).
        """
      ],
      events_to: [
        type: {:custom, &U.owner/1, "a local pid or nil"},
        default: nil,
        doc: """
        a process that also receives the node's events as they happen, as
        `{:tachyon_sequencer_event, pid, kind, fields}` (`pid`: the node's
        process; `kind` and `fields` as the telemetry event
        `[:tachyon, :sequencer, kind]` and its measurements: `:role`,
        `:campaign`, `:voted`, `:truncated`, `:learner`, `:caught_up`,
        `:disk_full`, `:disk_space`, `:membership`, ...), from the node's start on: for a
        host without `:telemetry`, and for `mix tachyon.sequencer`, which
        prints them.
        """
      ],
      name: [
        type: {:custom, &U.gen_name/1, "nil, an atom, {:global, term} or {:via, module, term}"},
        default: nil,
        doc: "register the process under this name."
      ],
      stats_interval_ms: [
        type: :interval,
        default: 1000,
        formerly: [stats_interval: nil],
        doc: "milliseconds between `[:tachyon, :sequencer, :stats]` events (`nil`: none)."
      ],
      auth: Tachyon.Auth.option_spec(true)
    ]
  end

  @doc "The options only `Tachyon.Bus.start_link/1` takes (besides `bus_schema/0`'s)."
  def bus_server_schema do
    [
      name: [
        type: {:custom, &U.gen_name/1, "nil, an atom, {:global, term} or {:via, module, term}"},
        default: nil,
        doc: "`start_link/1`: register the process under this name."
      ],
      stats_interval_ms: [
        type: :interval,
        default: 1000,
        formerly: [stats_interval: nil],
        doc:
          "`start_link/1`: milliseconds between `[:tachyon, :bus, :stats]` events (`nil`: none)."
      ]
    ]
  end

  @doc "The options of `Tachyon.Bus.open/1`."
  def bus_schema do
    [
      sequencer: [
        type:
          {:custom, &__MODULE__.sequencer/1,
           "{ip, port}, a non-empty list of them, or the name of a Tachyon.Sequencer"},
        required: true,
        doc: """
        the sequencer's command address `{ip, port}`, or the group's: every
        node's, in the group's order (the member says hello to all of them
        when the primary falls silent, and accepts the bus only from them);
        or the registered name of a `Tachyon.Sequencer` on this BEAM node,
        whose address is looked up when the member starts (so that a static
        child list works with `port: 0`).
        """
      ],
      member_id: [
        type: {:integer, 1, 4_294_967_295},
        required: true,
        doc: "this member's id, unique on the bus."
      ],
      bus: bus_spec(),
      ip: [
        type: {:or, [nil, {:custom, &U.ip/1, "an IP address"}]},
        default: nil,
        doc:
          "address of the member's socket (`nil`: loopback for a loopback sequencer, any otherwise)."
      ],
      owner: [
        type: {:custom, &__MODULE__.owner/1, "a local pid, a registered name or nil"},
        default: nil,
        doc: """
        the process the messages go to, or its registered name (looked up
        when the member starts, and again at each restart). `open/1`: `nil`
        is the caller, and the owner's exit closes the member.
        `start_link/1`: `nil` is no owner (processes `subscribe/1`); a pid's
        exit closes the member for good, a named owner's exit restarts it.
        Required with `delivery: :poll` (the owner polls).
        """
      ],
      from: [
        type: {:or, [{:in, [:live, :snapshot]}, {:integer, 0, :infinity}]},
        default: :live,
        doc: """
        `:live` (messages sequenced from now on), a sequence number to rewind
        from, or `:snapshot`: from the latest state machine snapshot on the
        bus (`publish_snapshot/4`), if there is one (its messages are
        delivered, with the messages from its position on: see "State
        machine snapshots"), else from the log's start.
        """
      ],
      delivery: [
        type: {:in, [:messages, :poll]},
        default: :messages,
        formerly: [mode: &U.old_mode/1],
        doc: """
        `:messages`: a thread sends `{:tachyon_bus, bus, seq, member_id, data}`
        to the owner; `:poll`: no thread, `recv/2` delivers on the caller's scheduler.
        """
      ],
      wait: [
        type: :wait,
        default: :backoff,
        doc: "`:messages`: how the thread waits; `:poll`: how `recv` waits (as `Tachyon.UDP`)."
      ],
      max_queue: [
        type: {:or, [{:in, [:infinity]}, {:integer, 1, :infinity}]},
        default: :infinity,
        doc: """
        `:messages` mode: the most messages delivered to the owner and not yet
        acknowledged with `ack/2`, give or take one datagram's messages (a
        datagram is delivered whole); at the bound the member stops reading
        the bus until the owner acknowledges (nothing is lost: what waits is
        read later or asked for again).
        """
      ],
      spin_us: [
        type: {:integer, 0, 1_000_000},
        default: 50,
        formerly: [spin: nil],
        doc: "poll mode: microseconds `recv` polls before it sleeps."
      ],
      core: U.core_spec(),
      max_datagram_size: max_datagram(:bus),
      max_message_size: [
        type: {:integer, 0, 64 * 1024 * 1024},
        default: {:native, :bus, :max_message_size},
        doc: "largest message; larger ones are cut into fragments on the bus and reassembled."
      ],
      resend_after_ms: [
        type: {:integer, 1, 60_000},
        default: {:native, :bus, :resend_after_ms},
        formerly: [resend_after: nil],
        doc:
          "milliseconds before a command not seen on the bus is resent, at least: the floor of the retransmission timeout, which follows the measured round trip."
      ],
      retransmit_after_us: [
        type: {:integer, 1, 60_000_000},
        default: {:native, :bus, :retransmit_after_us},
        formerly: [retransmit_after: nil],
        doc: "microseconds before an unanswered replay request is sent again."
      ],
      hello_after_ms: [
        type: {:integer, 1, 60_000},
        default: {:native, :bus, :hello_after_ms},
        formerly: [hello_after: nil],
        doc: "milliseconds of silence before the member says hello again."
      ],
      connect_timeout_ms: [
        type: {:integer, 1, 3_600_000},
        default: {:native, :bus, :connect_timeout_ms},
        formerly: [connect_timeout: nil],
        doc: "milliseconds `open/1` waits for the sequencer."
      ],
      loss: [
        type: {:number, 0, 1},
        default: 0.0,
        doc: "tests and benchmarks only: the share of received bus datagrams dropped on purpose."
      ],
      auth: Tachyon.Auth.option_spec(false)
    ]
  end

  defp max_datagram(part) do
    [
      type: {:integer, 64, 65_507},
      default: {:native, part, :max_datagram_size},
      formerly: [max_datagram: nil],
      doc: "largest datagram on the bus (the same for the sequencer and its members)."
    ]
  end

  defp bus_spec do
    [
      type:
        {:custom, &__MODULE__.bus/1,
         ":unicast or {:multicast, {group_ip, port}} or {:multicast, {group_ip, port}, opts}"},
      default: :unicast,
      doc: """
      `:unicast`: the sequencer sends the bus to every member that said
      hello; `{:multicast, {group, port}}` or `{:multicast, {group, port},
      interface: ip, ttl: 1, loop: true}`: to an IPv4 multicast group.
      """
    ]
  end

  @doc false
  def bus(:unicast), do: {:ok, :unicast}
  def bus({:multicast, group}), do: bus({:multicast, group, []})

  def bus({:multicast, {ip, port}, opts})
      when is_integer(port) and port in 1..65_535 and is_list(opts) do
    with {:ok, {a, _, _, _} = g} when a in 224..239 <- U.ip(ip),
         {:ok, iface} <- U.ip(Keyword.get(opts, :interface, :any)),
         ttl when ttl in 0..255 <- Keyword.get(opts, :ttl, 1),
         loop when is_boolean(loop) <- Keyword.get(opts, :loop, true) do
      {:ok, {:multicast, {g, port}, iface, ttl, loop}}
    else
      _ -> :error
    end
  end

  def bus(_), do: :error

  @doc false
  def group(list) when is_list(list) do
    list = Enum.map(list, &address/1)

    cond do
      not Enum.all?(list, &match?({:ok, _}, &1)) -> :error
      length(list) > 64 -> :error
      true -> {:ok, Enum.map(list, &elem(&1, 1))}
    end
  end

  def group(_), do: :error

  @doc false
  def join(list) when is_list(list) do
    list = Enum.map(list, &address/1)

    if Enum.all?(list, &match?({:ok, _}, &1)),
      do: {:ok, Enum.map(list, &elem(&1, 1))},
      else: :error
  end

  def join(one) do
    with {:ok, a} <- address(one), do: {:ok, [a]}
  end

  @doc false
  def nodes(list) when is_list(list) do
    if Enum.all?(list, &is_atom/1), do: {:ok, list}, else: :error
  end

  def nodes(_), do: :error

  @doc false
  def address({ip, port}) when is_integer(port) and port in 1..65_535 do
    case U.ip(ip) do
      {:ok, ip} -> {:ok, {ip, port}}
      :error -> :error
    end
  end

  # "ip:port" ("[v6]:port" for an IPv6 address)
  def address(s) when is_binary(s) do
    with [host, port] <- String.split(s, ~r/:(?=[0-9]+$)/),
         {port, ""} <- Integer.parse(port) do
      address({String.trim(host, "[") |> String.trim("]"), port})
    else
      _ -> :error
    end
  end

  def address(_), do: :error

  @doc false
  def owner(name) when is_atom(name), do: {:ok, name}
  def owner(other), do: U.owner(other)

  @doc false
  def sequencer(name) when is_atom(name) and name != nil, do: {:ok, name}
  def sequencer(other), do: addresses(other)

  @doc false
  def addresses([_ | _] = list) do
    list = Enum.map(list, &address/1)

    if Enum.all?(list, &match?({:ok, _}, &1)),
      do: {:ok, Enum.map(list, &elem(&1, 1))},
      else: :error
  end

  def addresses(one) do
    case address(one) do
      {:ok, a} -> {:ok, [a]}
      :error -> :error
    end
  end
end

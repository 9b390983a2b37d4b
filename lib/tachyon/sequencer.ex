defmodule Tachyon.Sequencer do
  @moduledoc """
  The sequencer of a total-order message bus over UDP (after
  CoralSequencer): members (`Tachyon.Bus`) send it messages; it stamps each
  with the next sequence number, appends it to its log and sends it on the
  bus, where every member receives every message in the same order,
  including its own.

  One Rust thread runs the node (`recvmmsg` of commands, duplicate check by
  `(member_id, member_seq)`, append to a `Tachyon.Store`, send on the bus);
  a second answers replays from the log for members that lost datagrams or
  rewind. The sequence number of a message is its index in the log: index
  0 holds the session record and every primary's term opens with an epoch
  record, so numbers increase by one per message but skip those (a new
  bus's first message is 2). A restarted node on the same log keeps the
  session, the numbering and every member's last `member_seq` (a command
  resent across the restart is sequenced once).

  The bus is a unicast fan-out to the members that said hello (the
  default: works on any network), or an IPv4 multicast group
  (`bus: {:multicast, {{239, 1, 2, 3}, 4000}}`). See docs/FORMAT.md for
  the datagrams and docs/ARCHITECTURE.md for the protocol.

  ## Example

      dir = Path.join(System.tmp_dir!(), "seq-doc-#{System.os_time()}")
      {:ok, seq} = Tachyon.Sequencer.start_link(path: dir, port: 0, wait: :park)
      addr = Tachyon.Sequencer.address(seq)
      {:ok, bus} = Tachyon.Bus.open(sequencer: addr, member_id: 1)
      {:ok, _member_seq} = Tachyon.Bus.publish(bus, "hello")
      receive do
        {:tachyon_bus, ^bus, _seq, 1, "hello"} -> :ok
      after
        5000 -> raise "no message"
      end
      :ok = Tachyon.Bus.close(bus)
      :ok = Tachyon.Sequencer.close(seq)
      File.rm_rf!(dir)

  The log outlives the sequencer: a sequencer started again on `dir`
  continues its numbering, and so does member 1's `member_seq` (the
  sequencer remembers every member's last one, so that a command resent
  across a restart is sequenced once): on a directory used before, the
  first publish returns `{:ok, 2}`, not `{:ok, 1}`. Hence a fresh
  directory per run (`System.unique_integer/1` is not one across VMs: a
  new VM often starts it at the same small number) and `{:ok, _}`.

  Under a supervisor: `{Tachyon.Sequencer, name: :seq, path: "/var/lib/app/seq", port: 7000}`;
  or from the application environment: `config :tachyon, sequencers: [[name: :seq, ...]]`;
  or as an OS process of its own: `mix tachyon.sequencer --port 7000 --path DIR`.

  ## Failover

  Start three (or five) nodes, on three hosts, each with its own log and
  the same `:group`; members list every node (`Tachyon.Bus`'s
  `:sequencer`):

      group = [{{10, 0, 0, 1}, 7000}, {{10, 0, 0, 2}, 7000}, {{10, 0, 0, 3}, 7000}]
      # on host i:
      Tachyon.Sequencer.start_link(path: "/var/lib/app/seq", ip: elem(Enum.at(group, i), 0),
                                   port: 7000, group: group)

  The nodes run Raft (docs/ARCHITECTURE.md, "Failover"): one is elected
  primary by a majority; it sequences, copies each entry to the others and
  sends a message to the bus, but members deliver it only once a majority
  holds it (the commit index every bus datagram carries). When the primary
  dies, is paused or is cut off, the others elect a new one within about
  two election timeouts, and it holds every message any member delivered:
  failover cannot fork the bus. A deposed primary that resumes learns the
  new term from the first datagram it hears and stops. Members resend
  what the new primary lacks; nothing published and acknowledged by a
  majority is lost. While no majority can talk, the bus stops (publishes
  return `{:ok, _}` and wait in the member to be resent, up to its
  `:busy` bound).

  Two nodes (`:two_nodes`) cannot have a majority after one fails; choose:
  `:safe` (default) never forks: the primary commits only what the standby
  holds, and the standby takes over only with a witness's vote, the
  `:nodedown` of the primary's BEAM node (`:watch_nodes`) or
  `take_over/1`; `:available` takes silence for death and keeps going, at
  the price of possible forks, which members report (`Tachyon.Bus`,
  "Events").

  ## Durability

  With `durability: :replicated` (the default) a message is committed, and
  delivered, once it is in the page cache of a majority of the nodes; with
  `durability: :fsync`, once it is on the disk of a majority: each node
  acknowledges only what its syncer thread has synced (one sync per receive
  batch that appended, off the sequencing thread; the entries that arrive
  during a sync go with the next one: group commit). What that costs, from
  `mix tachyon.bench sequencer --durability fsync` on a 2-core VM shared
  with other builds (docs/BENCHMARKS.md, "Sequencer with durability:
  :fsync"): one node, load average 2.6, a bus round trip took 79 us (p50)
  instead of 9 us, about one `fdatasync` of the same disk (58 us on its
  own) more, and the bus carried 208,513 messages/s one per datagram against
  274,421 (0.76x); a group of three with a load average of 6, every wait for
  the disk also waiting for a core, took 2.2 ms (p50). A node's
  `stats/1` says what its disk takes: `:syncs` and `:sync_time_us`.

  ## Membership

  The group changes one node at a time, through its primary (Raft's
  thesis, chapter 4; docs/FAILOVER.md, "Replacing a host"):
  `remove_node/3` takes a node out (a dead one first: it still counts in
  every majority), and a node started with `join: "ip:port"` (any node of
  the group) on an empty directory asks to join: the primary adds it as a
  non-voter, and makes it a voter once it has copied the log.
  `add_node/3` adds an address ahead of its start; `membership/1` lists
  the group as the node knows it. Members take bus datagrams from the
  nodes their `:sequencer` list names (and from others of the same bus
  once one has sent to them): list the new node's address there too.

  ## Access

  On any address but loopback a node needs keys (`auth:`, `Tachyon.Auth`;
  docs/SECURITY.md): every datagram is sealed and checked, a node
  without the group's key cannot join, vote or be counted, and a member
  speaks only as the id of its credential. `acl:` in `auth:` says what
  each member may do:

      {:ok, _} =
        Tachyon.Sequencer.start_link(
          name: :seq,
          ip: {10, 0, 0, 1},
          port: 7000,
          path: "/var/lib/app/seq",
          group: [{{10, 0, 0, 1}, 7000}, {{10, 0, 0, 2}, 7000}, {{10, 0, 0, 3}, 7000}],
          auth: [
            key_file: "/etc/app/group.key",
            acl: [publishers: [1, 2], read_from: %{7 => 1_000_000}, default_read_from: 0]
          ]
        )

  `publishers` (`:all`, the default, or a list of member ids): the others
  may only read (their publishes end in `{:error, :forbidden}`);
  `read_from` (member id to sequence number) and `default_read_from`: the
  lowest sequence a member may read (a welcome or a replay below it starts
  there, with a `:trimmed` event). Every node of a group should be given
  the same `acl`.

  ## Retention

  A node keeps its whole log unless given `:retention`:

      {:ok, _} =
        Tachyon.Sequencer.start_link(
          name: :seq,
          port: 7000,
          path: "/var/lib/app/seq",
          segment_size: 16 * 1024 * 1024,
          retention: [max_bytes: 1024 * 1024 * 1024, max_age_ms: :timer.hours(24)]
        )

  Every second, a node cuts its log at a segment boundary where the
  policy says (about `:max_bytes` of segment files left, or no segment
  sealed more than `:max_age_ms` ago), but never above what is still
  needed: what is not committed, what a follower heard lately lacks, what
  a member that said hello within its lease has still to read, the log
  from the latest snapshot on. A checkpoint that sums up the removed
  entries is saved beside the log first; a follower too far behind to be
  filled from the log installs its primary's checkpoint. A member asking
  for a removed sequence gets a `:trimmed` event (`Tachyon.Bus`,
  "Events") and goes on from the first one kept.

  ## Options

  #{Tachyon.Options.docs(Tachyon.Sequencer.Options.sequencer_schema())}

  ## Stats and telemetry

  `stats/1` returns the node's counters: `:role` (`:primary`, `:follower`,
  `:pre_candidate`, `:candidate`), `:epoch` (the term), `:leader` (the
  primary's index in the group, or nil), `:commit`, `:next_seq`,
  `:messages`, `:datagrams` (bus data datagrams), `:heartbeats`,
  `:duplicates` (commands already sequenced), `:held` (commands ahead of a
  member's next `member_seq`, held until the gap is filled), `:nacks`,
  `:out_of_order`, `:replays`, `:replayed`, `:replayed_inline` (of
  `:replayed`, the small gap fills the sequencing thread answered itself),
  `:replays_dropped`,
  `:malformed`, `:strangers`, `:departed` (datagrams of a member after its
  goodbye, dropped: they would bind its id again), `:wrong_session`, `:oversized`,
  `:send_errors`, `:store_errors`, `:members` (unicast fan-out),
  `:backpressure`, `:not_primary`, `:taken`, `:elections`, `:terms_led`,
  `:stepped_down`, `:truncated`, `:copied`, `:acks`, `:session`;
  `:learner` (true while the node votes for nobody: see
  `[:tachyon, :sequencer, :learner]`), `:probes` and `:learner_refusals`
  (votes refused as a learner); `:durable` (the end of what the node's
  acknowledgements cover: what is synced with `durability: :fsync`, the
  log's end otherwise), `:sync_requests`, `:syncs`, `:sync_time_us` (the time the syncs done
  took, in all), `:sync_errors`;
  `:disk_full` (appends refused for want of space), `:stale_replays`
  (replay jobs of another term or log dropped). The same
  map is the measurement of `[:tachyon, :sequencer, :stats]` every
  `:stats_interval_ms`; role changes, campaigns, votes, truncations, a
  learner's start and catch-up, a full disk and membership changes are events of their own
  (see `Tachyon.Telemetry`), sent as messages too to the `:events_to`
  process if given.
  """
  alias Tachyon.{Named, Native}
  alias Tachyon.Sequencer.Options

  @type server :: GenServer.server()
  @type address :: {:inet.ip_address(), :inet.port_number()}

  @doc """
  Starts the sequencer, linked to the caller: opens (or recovers) the log,
  binds the port and starts the thread. Returns `{:error, reason}` (such as
  `:eaddrinuse`, `:locked`, `:bad_log`) if it cannot.

  ## Example

      dir = Path.join(System.tmp_dir!(), "seq-#{System.unique_integer([:positive])}")
      {:ok, seq} = Tachyon.Sequencer.start_link(path: dir, wait: :park)
      :ok = Tachyon.Sequencer.close(seq)
  """
  @spec start_link(keyword()) :: GenServer.on_start()
  def start_link(opts) do
    if is_list(opts) and
         Enum.any?([:role, :primary, :takeover_after, :primary_node], &Keyword.has_key?(opts, &1)) do
      raise ArgumentError,
            "Tachyon.Sequencer has no :role, :primary, :takeover_after or :primary_node any more: " <>
              "start every node with the same :group (a list of every node's {ip, port}), " <>
              "and :watch_nodes for the BEAM nodes to monitor (see \"Failover\")"
    end

    opts =
      opts
      |> Tachyon.Options.validate!(Options.sequencer_schema(), "Tachyon.Sequencer")
      |> Map.new()

    check_group!(opts)
    check_join!(opts)
    Tachyon.Auth.require!(opts.auth, opts.ip, "Tachyon.Sequencer")

    nif =
      opts
      |> Map.drop([
        :name,
        :stats_interval_ms,
        :heartbeat_ms,
        :heartbeat_after_us,
        :election_timeout_ms,
        :max_datagram_size,
        :watch_nodes,
        :events_to
      ])
      |> Map.merge(%{
        max_datagram: opts.max_datagram_size,
        election_timeout_us: opts.election_timeout_ms * 1000,
        heartbeat_us: opts.heartbeat_ms * 1000,
        heartbeat_after_us: opts.heartbeat_after_us,
        report_id: System.unique_integer([:positive]),
        path: Path.expand(opts.path)
      })
      |> Tachyon.Options.put_retention()

    File.mkdir_p(nif.path)

    # Bind in the caller: a port in use is an {:error, _} return, not an exit.
    Tachyon.PartServer.start_link(Tachyon.Sequencer.Server, {nif, opts},
      module: __MODULE__,
      part: :sequencer,
      name: opts.name,
      interval: opts.stats_interval_ms,
      open: :in_caller,
      stop_event: true
    )
  end

  defp check_group!(%{group: []}), do: :ok

  defp check_group!(%{group: group, ip: ip, port: port}) do
    cond do
      port == 0 ->
        raise ArgumentError, "a Tachyon.Sequencer in a :group needs a non-zero :port"

      {ip, port} not in group ->
        raise ArgumentError,
              "the :group of a Tachyon.Sequencer must hold its own address #{inspect({ip, port})}, " <>
                "got: #{inspect(group)}"

      length(Enum.uniq(group)) != length(group) ->
        raise ArgumentError, "the :group of a Tachyon.Sequencer lists an address twice"

      true ->
        :ok
    end
  end

  defp check_join!(%{join: []}), do: :ok

  defp check_join!(%{join: join, group: group, ip: ip, port: port}) do
    cond do
      group != [] ->
        raise ArgumentError,
              "a Tachyon.Sequencer takes :join or :group, not both (a joining node learns the group from its log)"

      port == 0 or ip in [{0, 0, 0, 0}, {0, 0, 0, 0, 0, 0, 0, 0}] ->
        raise ArgumentError,
              "a Tachyon.Sequencer started with :join needs its own :ip and a non-zero :port " <>
                "(the address the group will know it by)"

      {ip, port} in join ->
        raise ArgumentError,
              "the :join option lists this node's own address #{inspect({ip, port})}"

      true ->
        :ok
    end
  end

  @doc """
  The child specification (id `{Tachyon.Sequencer, name}`, `:transient`).

  ## Example

      %{id: {Tachyon.Sequencer, :seq}} = Tachyon.Sequencer.child_spec(name: :seq, path: "/tmp/s")
  """
  @spec child_spec(keyword()) :: Supervisor.child_spec()
  def child_spec(opts), do: Named.child_spec(__MODULE__, opts, shutdown: 5000)

  @doc """
  Closes the sequencer for good (under a supervisor it is not restarted):
  the thread is joined, the port free and the log closed on return.
  `{:error, :noproc}` if no sequencer runs under that name or pid.

  ## Example

      dir = Path.join(System.tmp_dir!(), "seq-#{System.unique_integer([:positive])}")
      {:ok, seq} = Tachyon.Sequencer.start_link(path: dir, wait: :park)
      :ok = Tachyon.Sequencer.close(seq)
  """
  @spec close(server()) :: :ok | {:error, :noproc}
  def close(server) do
    case Named.close(server) do
      {:error, :noproc} = error -> error
      _ -> :ok
    end
  end

  @doc """
  Deprecated: use `close/1`.

  ## Example

      dir = Path.join(System.tmp_dir!(), "seq-#{System.unique_integer([:positive])}")
      {:ok, seq} = Tachyon.Sequencer.start_link(path: dir, wait: :park)
      :ok = Tachyon.Sequencer.stop(seq)
  """
  @doc deprecated: "Use Tachyon.Sequencer.close/1"
  @spec stop(server(), timeout()) :: :ok | {:error, :noproc}
  def stop(server, _timeout \\ 5000) do
    Tachyon.Options.deprecated("Tachyon.Sequencer", "stop/2", "close/1")
    close(server)
  end

  @doc """
  What the node started with: `:address`, `:session`, `:next_seq` (at
  start), `:recovered_members`, `:path`, `:core`, `:pinned`, `:wait`,
  `:node_id`, `:group`; and its latest `:role`, `:epoch` and `:leader`.
  Raises `ArgumentError` if no sequencer runs under that name or pid.

  ## Example

      dir = Path.join(System.tmp_dir!(), "seq-#{System.unique_integer([:positive])}")
      {:ok, seq} = Tachyon.Sequencer.start_link(path: dir, wait: :park)
      %{next_seq: 2, role: :primary} = Tachyon.Sequencer.info(seq)
  """
  @spec info(server()) :: map()
  def info(server) do
    GenServer.call(server, :info)
  catch
    :exit, {reason, {GenServer, :call, _}} when reason in [:noproc, :normal] ->
      raise ArgumentError, "no Tachyon.Sequencer #{describe(server)} is running"
  end

  defp describe(name) when is_atom(name), do: "named #{inspect(name)}"
  defp describe(server), do: inspect(server)

  @doc """
  The defaults of the options (`:path` has none), from the Rust
  `SequencerConfig::new` where it has them (`:recbuf` and `:sndbuf` are
  Tachyon's own: 4 MiB, where the Rust side leaves the kernel's).

  ## Example

      %{heartbeat_ms: 10, election_timeout_ms: 50, two_nodes: :safe, group: []} =
        Tachyon.Sequencer.defaults()
  """
  @spec defaults() :: map()
  def defaults do
    schema = for {k, spec} <- Options.sequencer_schema(), !spec[:required], do: {k, spec}
    Map.new(Tachyon.Options.validate!([], schema, "Tachyon.Sequencer"))
  end

  @doc """
  The command address `{ip, port}` members send to. A registered name is
  read without a call to the process; it raises `ArgumentError` if no
  sequencer runs under it (as `Tachyon.Echo.address/1`).

  ## Example

      dir = Path.join(System.tmp_dir!(), "seq-#{System.unique_integer([:positive])}")
      {:ok, seq} = Tachyon.Sequencer.start_link(path: dir, wait: :park)
      {{127, 0, 0, 1}, _port} = Tachyon.Sequencer.address(seq)
  """
  @spec address(server()) :: address()
  def address(name) when is_atom(name) do
    # Read without a call to the process (the address never changes).
    case Named.whereis(__MODULE__, name) do
      {:ok, %{info: %{address: address}}} ->
        address

      {:error, :noproc} ->
        raise ArgumentError, "no Tachyon.Sequencer named #{inspect(name)} is running"
    end
  end

  def address(server), do: info(server).address

  @doc """
  The thread's counters (see "Stats and telemetry"): `{:ok, map}` or
  `{:error, :noproc}`.

  ## Example

      dir = Path.join(System.tmp_dir!(), "seq-#{System.unique_integer([:positive])}")
      {:ok, seq} = Tachyon.Sequencer.start_link(path: dir, wait: :park)
      {:ok, %{messages: 0}} = Tachyon.Sequencer.stats(seq)
  """
  @spec stats(server()) :: {:ok, map()} | {:error, :noproc | :closed}
  def stats(server) do
    GenServer.call(server, :stats)
  catch
    :exit, {:noproc, _} -> {:error, :noproc}
  end

  @doc """
  Holds an election now (the primary is known to be gone); in a group of
  two, also the witness's vote for this node. A node that is not up to
  date is not elected; a healthy primary keeps its place (pre-vote).

  ## Example

      dir = Path.join(System.tmp_dir!(), "seq-#{System.unique_integer([:positive])}")
      {:ok, seq} = Tachyon.Sequencer.start_link(path: dir, wait: :park)
      :ok = Tachyon.Sequencer.take_over(seq)
  """
  @spec take_over(server()) :: :ok
  def take_over(server) do
    Native.seq_takeover(GenServer.call(server, :handle).ref)
  end

  @typedoc "A node's id in its group (its index in the initial `:group`, or given when it joined)."
  @type node_id :: 0..63

  @typedoc """
  Why a membership change did not happen: `{:not_primary, leader}` (ask
  the primary: its address, or `nil` while none is known),
  `:change_in_progress` (the last change is not committed yet, or the
  primary was just elected: one at a time, ask again), `:not_found` (no
  such node), `:last_voter`, `:group_full` (64 nodes), `:store_error` (the
  primary's log refused the entry: a full disk), `:aborted` (the entry was
  cut from the log before it was committed: the primary lost its term),
  `:timeout` (neither committed nor refused in time: no majority, say; it
  may still commit), `:closed`, `:busy` (changes queue on the node),
  `:noproc`.
  """
  @type change_error ::
          {:not_primary, address() | nil}
          | :change_in_progress
          | :not_found
          | :last_voter
          | :group_full
          | :store_error
          | :aborted
          | :timeout
          | :closed
          | :busy
          | :noproc

  @doc """
  Adds a node at `address` (`{ip, port}` or `"ip:port"`) to the group;
  call it on the primary. The node is added as a non-voter: it copies the
  log and counts in no majority until it holds the primary's commit
  position, when the primary makes it a voter (Raft's thesis, §4.2.1).
  Returns `{:ok, node_id}` once the change is committed (at once if the
  address is a node already), `{:error, reason}` (`t:change_error/0`)
  otherwise. Start the new node with `join:` (the address of any node
  of the group); a node started so asks to join by itself, and the
  primary adds it without this call. One change at a time: a second
  while the first is not committed is `{:error, :change_in_progress}`.
  The caller waits up to `timeout` ms, on a dirty scheduler. Raises
  `ArgumentError` for an address that is not one.

  ## Example

      dir = Path.join(System.tmp_dir!(), "seq-#{System.unique_integer([:positive])}")
      {:ok, seq} = Tachyon.Sequencer.start_link(path: dir, wait: :park)
      {:ok, 1} = Tachyon.Sequencer.add_node(seq, "127.0.0.1:7999")
      {:ok, 1} = Tachyon.Sequencer.remove_node(seq, 1)
      :ok = Tachyon.Sequencer.close(seq)
  """
  @spec add_node(server(), address() | String.t(), non_neg_integer()) ::
          {:ok, node_id()} | {:error, change_error()}
  def add_node(server, address, timeout \\ 5000) when is_integer(timeout) and timeout >= 0 do
    change(server, {:add, address!(address, "add_node/3", "a node's address")}, timeout)
  end

  @doc """
  Removes a node (by id, or by address: `{ip, port}` or `"ip:port"`) from
  the group; call it on the primary. Remove a dead node before adding its
  replacement: a dead voter still counts in every majority. A primary that
  removes itself steps down once the change is committed, and the others
  elect one of them. Returns `{:ok, node_id}` once the change is committed,
  `{:error, reason}` (`t:change_error/0`) otherwise; waits up to `timeout`
  ms, on a dirty scheduler. Raises `ArgumentError` for neither an id nor
  an address.

  ## Example

      dir = Path.join(System.tmp_dir!(), "seq-#{System.unique_integer([:positive])}")
      {:ok, seq} = Tachyon.Sequencer.start_link(path: dir, wait: :park)
      {:error, :not_found} = Tachyon.Sequencer.remove_node(seq, 5)
      {:error, :last_voter} = Tachyon.Sequencer.remove_node(seq, 0)
  """
  @spec remove_node(server(), node_id() | address() | String.t(), non_neg_integer()) ::
          {:ok, node_id()} | {:error, change_error()}
  def remove_node(server, node, timeout \\ 5000) when is_integer(timeout) and timeout >= 0 do
    node =
      if is_integer(node) and node in 0..63,
        do: node,
        else: address!(node, "remove_node/3", "a node's id (0..63), or its address")

    change(server, {:remove, node}, timeout)
  end

  @doc """
  The group as this node knows it (the latest membership in its log,
  committed or not): `{:ok, %{node_id: id, nodes: [%{id: id, address:
  {ip, port}, voter: boolean}]}}` (`node_id` is `nil` while a node that
  joins is not added yet), or `{:error, :noproc}`.

  ## Example

      dir = Path.join(System.tmp_dir!(), "seq-#{System.unique_integer([:positive])}")
      {:ok, seq} = Tachyon.Sequencer.start_link(path: dir, wait: :park)
      {:ok, %{node_id: 0, nodes: [%{id: 0, voter: true}]}} = Tachyon.Sequencer.membership(seq)
  """
  @spec membership(server()) ::
          {:ok,
           %{
             node_id: node_id() | nil,
             nodes: [%{id: node_id(), address: address(), voter: boolean()}]
           }}
          | {:error, :noproc}
  def membership(server) do
    with {:ok, ref} <- handle(server), do: {:ok, Native.seq_membership(ref)}
  end

  defp change(server, change, timeout) do
    with {:ok, ref} <- handle(server), do: Native.seq_change(ref, change, timeout)
  end

  defp handle(server) do
    {:ok, GenServer.call(server, :handle).ref}
  catch
    :exit, {reason, {GenServer, :call, _}} when reason in [:noproc, :normal] -> {:error, :noproc}
  end

  defp address!(address, fun, what) do
    case Options.address(address) do
      {:ok, a} ->
        a

      :error ->
        raise ArgumentError,
              "Tachyon.Sequencer.#{fun} takes #{what} as {ip, port} or \"ip:port\", got: " <>
                inspect(address)
    end
  end

  @doc """
  Waits until this node is the primary (`{:ok, epoch}`) or `timeout` ms
  pass (`{:error, :timeout}`).

  ## Example

      dir = Path.join(System.tmp_dir!(), "seq-#{System.unique_integer([:positive])}")
      {:ok, seq} = Tachyon.Sequencer.start_link(path: dir, wait: :park)
      {:ok, _epoch} = Tachyon.Sequencer.await_primary(seq, 5000)
  """
  @spec await_primary(server(), non_neg_integer()) :: {:ok, pos_integer()} | {:error, :timeout}
  def await_primary(server, timeout) when is_integer(timeout) and timeout >= 0 do
    # The node's process learns its role from the node's reports as they
    # come; the call waits for the one that makes it primary.
    GenServer.call(server, {:await_primary, timeout}, :infinity)
  end

  @doc """
  Reads the node's keys again (its `auth: [key_file: path]`), or takes new
  ones (`auth`, as the `:auth` option): a key rotation without a restart
  (docs/SECURITY.md, "Rotating keys"). The first key of the file seals from
  now on; every key of it is accepted. `{:error, :no_keys}` for a node
  started without keys, `{:error, {:bad_key, why}}` for a file that cannot
  be used (the keys in use stay).

  ## Example

      dir = Path.join(System.tmp_dir!(), "seq-#{System.unique_integer([:positive])}")
      {:ok, seq} = Tachyon.Sequencer.start_link(path: dir, wait: :park)
      {:error, :no_keys} = Tachyon.Sequencer.reload_keys(seq)
  """
  @spec reload_keys(server(), keyword() | nil) :: :ok | {:error, term()}
  def reload_keys(server, auth \\ nil) do
    auth =
      case auth && Tachyon.Auth.option(auth, true) do
        nil ->
          nil

        {:ok, %{} = a} ->
          a

        _ ->
          raise ArgumentError,
                "Tachyon.Sequencer.reload_keys/2 takes auth: options, got: #{inspect(auth)}"
      end

    GenServer.call(server, {:reload_keys, auth})
  catch
    :exit, {reason, {GenServer, :call, _}} when reason in [:noproc, :normal] -> {:error, :noproc}
  end
end

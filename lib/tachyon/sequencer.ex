defmodule Tachyon.Sequencer do
  @moduledoc """
  The sequencer of a total-order message bus over UDP (after
  CoralSequencer): members (`Tachyon.Bus`) send it messages; it stamps each
  with the next sequence number, appends it to its log and sends it on the
  bus, where every member receives every message in the same order,
  including its own.

  One Rust thread does all of it (`recvmmsg` of commands, duplicate check
  by `(member_id, member_seq)`, append to a `Tachyon.Store`, send on the
  bus, replays from the log for members that lost datagrams or rewind).
  The sequence number of a message is its index in that store; index 0
  holds the session record, so messages start at 1. A new log is a new
  session; a restarted sequencer on the same log keeps the session, its
  numbering and every member's last `member_seq` (a command resent across
  the restart is sequenced once).

  The bus is a unicast fan-out to the members that said hello (the
  default: works on any network), or an IPv4 multicast group
  (`bus: {:multicast, {{239, 1, 2, 3}, 4000}}`). See docs/FORMAT.md for
  the datagrams and docs/ARCHITECTURE.md for the protocol.

  ## Example

      dir = Path.join(System.tmp_dir!(), "seq-doc-#{System.unique_integer([:positive])}")
      {:ok, seq} = Tachyon.Sequencer.start_link(path: dir, port: 0, wait: :park)
      addr = Tachyon.Sequencer.address(seq)
      {:ok, bus} = Tachyon.Bus.open(sequencer: addr, member_id: 1)
      {:ok, 1} = Tachyon.Bus.publish(bus, "hello")
      receive do
        {:tachyon_bus, ^bus, 1, 1, "hello"} -> :ok
      after
        5000 -> raise "no message"
      end
      :ok = Tachyon.Bus.close(bus)
      :ok = Tachyon.Sequencer.stop(seq)

  Under a supervisor: `{Tachyon.Sequencer, name: :seq, path: "/var/lib/app/seq", port: 7000}`;
  or from the application environment: `config :tachyon, sequencers: [[name: :seq, ...]]`;
  or as an OS process of its own: `mix tachyon.sequencer --port 7000 --path DIR`.

  ## Options

  #{Tachyon.Options.docs(Tachyon.Sequencer.Options.sequencer_schema())}

  ## Stats and telemetry

  `stats/1` returns the thread's counters: `:messages`, `:datagrams`
  (bus data datagrams), `:heartbeats`, `:duplicates` (commands already
  sequenced), `:out_of_order` (commands ahead of a member's next
  `member_seq`, dropped until resent in order), `:replays`, `:replayed`,
  `:malformed`, `:wrong_session`, `:oversized`, `:send_errors`,
  `:store_errors`, `:members` (unicast fan-out) and `:next_seq`. The same
  map is the measurement of `[:tachyon, :sequencer, :stats]` every
  `:stats_interval` (see `Tachyon.Telemetry`).
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
      Tachyon.Sequencer.stop(seq)
  """
  @spec start_link(keyword()) :: GenServer.on_start()
  def start_link(opts) do
    opts =
      opts
      |> Tachyon.Options.validate!(Options.sequencer_schema(), "Tachyon.Sequencer")
      |> Map.new()

    {name, interval} = {opts.name, opts.stats_interval}

    if opts.role == :standby and (opts.primary == nil or opts.port == 0) do
      raise ArgumentError,
            "a Tachyon.Sequencer standby needs :primary and a non-zero :port (the one it takes over on)"
    end

    if is_atom(name) and name != nil and Process.whereis(name) == nil,
      do: Named.close_orphan(__MODULE__, name, &Native.seq_stop(&1.ref))

    nif =
      opts
      |> Map.drop([:name, :stats_interval, :heartbeat, :heartbeat_after, :primary_node])
      |> Map.merge(%{
        takeover_after_us: opts.takeover_after * 1000,
        heartbeat_us: opts.heartbeat * 1000,
        heartbeat_after_us: opts.heartbeat_after,
        path: Path.expand(opts.path)
      })

    File.mkdir_p(nif.path)

    case Native.seq_start(nif) do
      {:ok, ref, info} ->
        gen_opts = if name, do: [name: name], else: []

        info =
          Map.merge(
            %{address: {opts.ip, opts.port}, session: nil, epoch: nil, recovered_members: 0},
            info
          )
          |> Map.put(:role, opts.role)

        spec = %{
          module: __MODULE__,
          part: :sequencer,
          ref: ref,
          info: Map.put(info, :path, nif.path),
          name: name,
          interval: interval,
          stats: &Native.seq_stats/1,
          stop: &Native.seq_stop/1,
          meta: &meta/1,
          start: %{next_seq: info.next_seq},
          init: &watch_primary_node(&1, opts.primary_node),
          info_hook: &on_info/2,
          tick: &check_takeover/1
        }

        case Tachyon.ThreadServer.start_link(spec, gen_opts) do
          {:ok, _} = ok ->
            ok

          other ->
            Native.seq_stop(ref)
            other
        end

      {:error, _} = error ->
        error
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
  Stops the sequencer: the thread is joined, the port free and the log
  closed on return.

  ## Example

      dir = Path.join(System.tmp_dir!(), "seq-#{System.unique_integer([:positive])}")
      {:ok, seq} = Tachyon.Sequencer.start_link(path: dir, wait: :park)
      :ok = Tachyon.Sequencer.stop(seq)
  """
  @spec stop(server(), timeout()) :: :ok
  def stop(server, timeout \\ 5000), do: GenServer.stop(server, :normal, timeout)

  @doc """
  What the sequencer started with: `:address`, `:session`, `:next_seq` (at
  start), `:recovered_members`, `:path`, `:core`, `:pinned`, `:wait`.

  ## Example

      dir = Path.join(System.tmp_dir!(), "seq-#{System.unique_integer([:positive])}")
      {:ok, seq} = Tachyon.Sequencer.start_link(path: dir, wait: :park)
      %{next_seq: 1} = Tachyon.Sequencer.info(seq)
  """
  @spec info(server()) :: map()
  def info(server), do: GenServer.call(server, :info)

  @doc """
  The command address `{ip, port}` members send to.

  ## Example

      dir = Path.join(System.tmp_dir!(), "seq-#{System.unique_integer([:positive])}")
      {:ok, seq} = Tachyon.Sequencer.start_link(path: dir, wait: :park)
      {{127, 0, 0, 1}, _port} = Tachyon.Sequencer.address(seq)
  """
  @spec address(server()) :: address()
  def address(server), do: info(server).address

  @doc """
  The thread's counters (see "Stats and telemetry"): `{:ok, map}` or
  `{:error, :noproc}`.

  ## Example

      dir = Path.join(System.tmp_dir!(), "seq-#{System.unique_integer([:positive])}")
      {:ok, seq} = Tachyon.Sequencer.start_link(path: dir, wait: :park)
      {:ok, %{messages: 0, next_seq: 1}} = Tachyon.Sequencer.stats(seq)
  """
  @spec stats(server()) :: {:ok, map()} | {:error, :noproc | :closed}
  def stats(server) do
    GenServer.call(server, :stats)
  catch
    :exit, {:noproc, _} -> {:error, :noproc}
  end

  # A standby monitors its primary's node: a :nodedown is a takeover now,
  # without waiting for `:takeover_after` of silence.
  defp watch_primary_node(state, nil), do: state

  defp watch_primary_node(state, node) do
    Node.monitor(node, true)
    Map.put(state, :primary_node, node)
  end

  defp on_info({:nodedown, node}, %{primary_node: node} = state) do
    Native.seq_takeover(state.ref)
    state
  end

  defp on_info(_msg, state), do: state

  # `[:tachyon, :sequencer, :takeover]` once, when a standby became primary.
  defp check_takeover(%{info: %{role: :standby}} = state) do
    case Native.seq_stats(state.ref) do
      {:ok, %{role: :primary} = st} ->
        info = %{state.info | role: :primary, address: st.address, epoch: st.epoch}
        state = %{state | info: info}

        Tachyon.Telemetry.execute(
          [:tachyon, :sequencer, :takeover],
          %{takeover_ns: st.takeover_ns, next_seq: st.next_seq, epoch: st.epoch},
          meta(state)
        )

        state

      _ ->
        state
    end
  end

  defp check_takeover(state), do: state

  defp meta(state) do
    %{
      name: state.name,
      address: state.info.address,
      session: state.info.session,
      path: state.info.path
    }
  end
end

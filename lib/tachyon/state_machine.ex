defmodule Tachyon.StateMachine do
  @moduledoc """
  A replicated state machine on a `Tachyon.Sequencer`'s bus (what ra's
  `ra_machine` or Aeron Cluster's `ClusteredService` are to their logs):
  you write the state and what a message does to it; a runner process
  applies every message of the bus, in sequence order, so every runner of
  the same module ends at the same state, and publishes snapshots of it
  so that a runner started later restores the latest one and applies only
  the messages after it, instead of the whole log.

  ## The behaviour

    * `c:init/1` - the state before any message (open local resources
      here).
    * `c:apply/3` - `apply(meta, data, state)` returns `{reply, state}`:
      the message `data` (a binary, published by any member of the bus),
      with `meta` `%{seq: seq, member_id: member_id}`. `reply` goes to the
      caller of `command/3` when this runner published the message;
      otherwise it is dropped. `apply/3` must be deterministic: the same
      messages in the same order give the same state on every runner.
    * `c:snapshot/1` - the state as iodata (`:erlang.term_to_binary/1`
      does for most).
    * `c:restore/2` - `restore(snapshot, state)`: the state a snapshot
      holds; `state` is what `c:init/1` returned (its resources), to be
      replaced by the snapshot's content.
    * `c:last_applied/1` (optional) - for a state kept on disk: the last
      sequence number the state returned by `c:init/1` holds (0: none).
      The runner then reads the log from the next one (or, if retention
      removed it, restores the latest snapshot). Without it, every start
      is from the latest snapshot.
    * `c:terminate/1` (optional) - called when the runner stops (close
      local resources).

  ## The runner

  `start_link/1` starts a process that opens a bus member (`bus:` options
  of `Tachyon.Bus.open/1`) from the latest snapshot (`from: :snapshot`),
  or from the log's start when there is none; it restores the snapshot
  (holding the messages that come before the snapshot is whole), then
  applies every message in order. Every `:snapshot_every` messages it
  applies (or every `:snapshot_interval_ms`), it publishes a snapshot of
  its state (`Tachyon.Bus.publish_snapshot/4`)
  as of the next sequence number. Messages published by members that do
  not run the machine are applied too: every message on the bus is a
  command of the machine.

  A runner that the sequencer's retention left behind (`:trimmed`) or
  whose messages a fork replaced (`:fork`, see `Tachyon.Bus`'s events)
  stops with `{:lost, kind}`: its supervisor restarts it, and it restores
  the latest snapshot again.

  ## Example

      defmodule Counter do
        @behaviour Tachyon.StateMachine
        def init(start), do: start
        def apply(_meta, "add " <> n, total), do: {total + String.to_integer(n), total + String.to_integer(n)}
        def snapshot(total), do: Integer.to_string(total)
        def restore(bin, _initial), do: String.to_integer(bin)
      end

      dir = Path.join(System.tmp_dir!(), "sm-#{System.unique_integer([:positive])}")
      {:ok, seq} = Tachyon.Sequencer.start_link(path: dir, wait: :park)
      bus = [sequencer: Tachyon.Sequencer.address(seq), member_id: 1]
      {:ok, sm} = Tachyon.StateMachine.start_link(module: Counter, args: 0, bus: bus, snapshot_every: 1000)
      {:ok, 5} = Tachyon.StateMachine.command(sm, "add 5")
      {:ok, 5} = Tachyon.StateMachine.state(sm)

  Under a supervisor: `{Tachyon.StateMachine, name: :counter, module:
  Counter, args: 0, bus: [sequencer: :seq, member_id: 1]}` (child id
  `{Tachyon.StateMachine, :counter}`, `:transient`: `close/1` is final, a
  crash is restarted).

  ## Options

  #{Tachyon.Options.docs(Tachyon.StateMachine.Runner.schema())}
  """

  alias Tachyon.StateMachine.Runner

  @typedoc "A runner: its pid or name."
  @type server :: GenServer.server()
  @typedoc "What `c:apply/3` knows of a message besides its data."
  @type meta :: %{seq: pos_integer(), member_id: pos_integer()}
  @type state :: term()

  @doc "The state before any message."
  @callback init(args :: term()) :: state()

  @doc "Applies one message: the reply (to `command/3`'s caller, if any) and the new state."
  @callback apply(meta(), data :: binary(), state()) :: {reply :: term(), state()}

  @doc "The state, to publish as a snapshot."
  @callback snapshot(state()) :: iodata()

  @doc "The state a snapshot holds; `state` is `c:init/1`'s, whose content it replaces."
  @callback restore(snapshot :: binary(), state()) :: state()

  @doc "A state kept on disk: the last sequence number `c:init/1`'s state holds."
  @callback last_applied(state()) :: non_neg_integer()

  @doc "The runner stops."
  @callback terminate(state()) :: term()

  @optional_callbacks last_applied: 1, terminate: 1

  @doc """
  Starts a runner (see "Options"); raises `ArgumentError` for a bad
  option. Returns once the member has joined the bus (the restore goes on
  in the process).

  ## Example

      {:ok, sm} = Tachyon.StateMachine.start_link(module: Counter, args: 0, bus: [sequencer: {{127, 0, 0, 1}, 7000}, member_id: 3])
  """
  @spec start_link(keyword()) :: GenServer.on_start()
  def start_link(opts) do
    opts = Runner.validate!(opts)
    gen = if opts[:name], do: [name: opts[:name]], else: []
    GenServer.start_link(Runner, opts, gen)
  end

  @doc """
  The child specification (id `{Tachyon.StateMachine, name}`, `:transient`).

  ## Example

      %{id: {Tachyon.StateMachine, :counter}} =
        Tachyon.StateMachine.child_spec(name: :counter, module: Counter, bus: [sequencer: :seq, member_id: 1])
  """
  @spec child_spec(keyword()) :: Supervisor.child_spec()
  def child_spec(opts), do: Tachyon.Named.child_spec(__MODULE__, opts, shutdown: 10_000)

  @doc """
  Publishes `data` (iodata) on the bus through this runner's member and
  waits until this runner has applied it: `{:ok, reply}` (what
  `c:apply/3` returned for it), or `{:error, reason}` if the publish was
  refused (as `Tachyon.Bus.publish/2`), `{:error, :timeout}` or
  `{:error, :noproc}`. Every other runner applies it too, in the same
  place of the order.

  ## Example

      {:ok, 5} = Tachyon.StateMachine.command(sm, "add 5")
  """
  @spec command(server(), iodata(), timeout()) :: {:ok, term()} | {:error, atom()}
  def command(server, data, timeout \\ 5000),
    do: call(server, {:command, IO.iodata_to_binary(data)}, timeout)

  @doc """
  The runner's state: `{:ok, state}` (`{:error, :restoring}` while it
  restores a snapshot).

  ## Example

      {:ok, 5} = Tachyon.StateMachine.state(sm)
  """
  @spec state(server()) :: {:ok, state()} | {:error, :restoring | :noproc}
  def state(server), do: call(server, :state, 5000)

  @doc """
  Runs `fun` on the state in the runner's process and returns `{:ok,
  result}` (for a part of a large state without copying it all).

  ## Example

      {:ok, true} = Tachyon.StateMachine.query(sm, &(&1 > 0))
  """
  @spec query(server(), (state() -> term()), timeout()) ::
          {:ok, term()} | {:error, :restoring | :noproc | :timeout}
  def query(server, fun, timeout \\ 5000) when is_function(fun, 1),
    do: call(server, {:query, fun}, timeout)

  @doc """
  Waits until the runner has applied sequence number `seq`: `:ok` or
  `{:error, :timeout}`.

  ## Example

      {:ok, %{applied: n}} = Tachyon.StateMachine.stats(other)
      :ok = Tachyon.StateMachine.sync(sm, n)
  """
  @spec sync(server(), non_neg_integer(), timeout()) :: :ok | {:error, :timeout | :noproc}
  def sync(server, seq, timeout \\ 5000) when is_integer(seq),
    do:
      call(
        server,
        {:sync, seq, timeout},
        if(timeout == :infinity, do: :infinity, else: timeout + 1000)
      )

  @doc """
  Publishes a snapshot of the state now (besides those of
  `:snapshot_every`): `{:ok, as_of}` (its position: the state after every
  message below it) or `{:error, reason}` (as
  `Tachyon.Bus.publish_snapshot/4`, or `:restoring`).

  ## Example

      {:ok, _as_of} = Tachyon.StateMachine.publish_snapshot(sm)
  """
  @spec publish_snapshot(server(), timeout()) :: {:ok, pos_integer()} | {:error, atom()}
  def publish_snapshot(server, timeout \\ 30_000),
    do: call(server, :publish_snapshot, timeout)

  @doc """
  The runner's counters: `{:ok, map}` with `:applied` (the last sequence
  number applied; 0: none), `:messages` (messages applied by this
  process), `:restored` (the position of the snapshot it restored, or
  `nil`), `:restored_size` (its bytes), `:restoring` (still waiting for
  the snapshot's messages), `:snapshots` (snapshots it published) and
  `:last_snapshot` (the position of the last, or `nil`).

  ## Example

      {:ok, %{applied: _, restored: _}} = Tachyon.StateMachine.stats(sm)
  """
  @spec stats(server()) :: {:ok, map()} | {:error, :noproc}
  def stats(server), do: call(server, :stats, 5000)

  @doc """
  Stops the runner for good (a supervisor does not restart it): its
  member leaves the bus once what it published is delivered, and
  `c:terminate/1` runs. `{:error, :noproc}` if none runs.

  ## Example

      :ok = Tachyon.StateMachine.close(sm)
  """
  @spec close(server()) :: :ok | {:error, :noproc}
  def close(server), do: Tachyon.Named.close(server, 15_000)

  defp call(server, msg, timeout) do
    GenServer.call(server, msg, timeout)
  catch
    :exit, {:timeout, {GenServer, :call, _}} -> {:error, :timeout}
    :exit, {reason, {GenServer, :call, _}} when reason in [:noproc, :normal] -> {:error, :noproc}
  end
end

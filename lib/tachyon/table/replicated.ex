defmodule Tachyon.Table.Replicated do
  @moduledoc """
  A `Tachyon.Table` replicated by a `Tachyon.Sequencer`'s bus: every write
  is published on the bus and applied by every replica in sequence order,
  so all replicas hold the same table; reads are local.

  Each replica is a process with a bus member (its `:member_id`) and a
  local table (its `:path`). `put/4` and `delete/3` return once the write
  is applied to this replica's table, that is after one round trip through
  the sequencer; every other replica applies it in the same order.
  The last applied sequence number is kept in the table itself (under the
  key `"\\0tachyon.applied"`), so a replica that restarts resumes from
  the log where it stopped. Writes are idempotent (a put or a delete of a
  given key), so a write applied again after a crash leaves the same
  table.

  A replica is a `Tachyon.StateMachine` (its process is the runner): with
  `:snapshot_every`, it publishes its whole table as a snapshot every so
  many writes, and a replica started late (an empty table, or one behind
  what the sequencer's retention kept) restores the latest snapshot and
  applies only the writes after it; without any snapshot on the bus, it
  reads the whole log.

  ## Example

      dir = Path.join(System.tmp_dir!(), "rep-#{System.unique_integer([:positive])}")
      {:ok, seq} = Tachyon.Sequencer.start_link(path: Path.join(dir, "seq"), wait: :park)
      addr = Tachyon.Sequencer.address(seq)
      {:ok, a} = Tachyon.Table.Replicated.start_link(path: Path.join(dir, "a"), sequencer: addr, member_id: 1)
      {:ok, b} = Tachyon.Table.Replicated.start_link(path: Path.join(dir, "b"), sequencer: addr, member_id: 2)
      :ok = Tachyon.Table.Replicated.put(a, "alice", "admin")
      {:ok, "admin"} = Tachyon.Table.Replicated.get(a, "alice")
      :ok = Tachyon.Table.Replicated.sync(b, Tachyon.Table.Replicated.applied(a))
      {:ok, "admin"} = Tachyon.Table.Replicated.get(b, "alice")

  Options: `:path` (the local table), `:sequencer` (as `Tachyon.Bus`),
  `:member_id`, `:bus` (`:unicast` or multicast, as `Tachyon.Bus`), `:auth` (as `Tachyon.Bus`),
  `:table` (options of `Tachyon.Table.open/2`), `:snapshot_every` (as
  `Tachyon.StateMachine`: a snapshot every so many writes applied; `nil`,
  the default: none), `:name`. A bad option raises `ArgumentError`.
  """
  @behaviour Tachyon.StateMachine

  alias Tachyon.{StateMachine, Table}

  @applied_key "\0tachyon.applied"

  @type server :: GenServer.server()

  @doc """
  Starts a replica (see the moduledoc for the options).

  ## Example

      {:ok, r} = Tachyon.Table.Replicated.start_link(path: "/var/lib/app/t", sequencer: {{127, 0, 0, 1}, 7000}, member_id: 3)
  """
  @spec start_link(keyword()) :: GenServer.on_start()
  def start_link(opts) do
    o = Tachyon.Options.validate!(opts, schema(), "Tachyon.Table.Replicated")

    StateMachine.start_link(
      module: __MODULE__,
      args: %{path: o[:path], table: o[:table]},
      bus: [sequencer: o[:sequencer], member_id: o[:member_id], bus: o[:bus], auth: o[:auth]],
      snapshot_every: o[:snapshot_every],
      name: o[:name]
    )
  end

  defp schema do
    any = fn what -> {:custom, &{:ok, &1}, what} end

    [
      path: [type: :path, required: true],
      sequencer: [type: any.("as Tachyon.Bus's :sequencer"), required: true],
      member_id: [type: {:integer, 1, 4_294_967_295}, required: true],
      bus: [type: any.("as Tachyon.Bus's :bus"), default: :unicast],
      auth: [type: any.("as Tachyon.Bus's :auth"), default: nil],
      table: [type: {:custom, &keyword/1, "a keyword list"}, default: []],
      snapshot_every: [type: {:or, [nil, {:integer, 1, :infinity}]}, default: nil],
      name: [
        type: {:custom, &Tachyon.UDP.Options.gen_name/1, "nil or a process name"},
        default: nil
      ]
    ]
  end

  defp keyword(v), do: if(Keyword.keyword?(v), do: {:ok, v}, else: :error)

  @doc """
  The child specification (id `{Tachyon.Table.Replicated, name}`).

  ## Example

      %{id: {Tachyon.Table.Replicated, :users}} =
        Tachyon.Table.Replicated.child_spec(name: :users, path: "/tmp/u", sequencer: {{127, 0, 0, 1}, 7000}, member_id: 1)
  """
  @spec child_spec(keyword()) :: Supervisor.child_spec()
  def child_spec(opts),
    do: %{
      id: {__MODULE__, opts[:name]},
      start: {__MODULE__, :start_link, [opts]},
      shutdown: 30_000
    }

  @doc """
  Writes `value` under `key` on every replica; returns once applied here.

  ## Example

      :ok = Tachyon.Table.Replicated.put(r, "alice", "admin")
  """
  @spec put(server(), binary(), binary(), timeout()) :: :ok | {:error, atom()}
  def put(server, key, value, timeout \\ 5000) when is_binary(key) and is_binary(value),
    do: write(server, {:put, key, value}, timeout)

  @doc """
  Removes `key` on every replica; returns once applied here.

  ## Example

      :ok = Tachyon.Table.Replicated.delete(r, "alice")
  """
  @spec delete(server(), binary(), timeout()) :: :ok | {:error, atom()}
  def delete(server, key, timeout \\ 5000) when is_binary(key),
    do: write(server, {:delete, key}, timeout)

  # The op's first element was a per-replica id (the runner matches the
  # replies now); kept in the format for readers of the log.
  defp write(server, op, timeout) do
    case StateMachine.command(server, :erlang.term_to_binary({0, op}), timeout) do
      {:ok, :ok} -> :ok
      {:error, _} = e -> e
    end
  end

  @doc """
  Reads `key` from this replica's table (no round trip through the bus; a
  call to the replica's process: for hot reads take `table/1` once and
  use `Tachyon.Table.get/2` on it).

  ## Example

      {:ok, "admin"} = Tachyon.Table.Replicated.get(r, "alice")
  """
  @spec get(server(), binary()) :: {:ok, binary()} | :error | {:error, atom()}
  def get(server, key), do: Table.get(table(server), key)

  @doc """
  This replica's local `Tachyon.Table` (read it with `Tachyon.Table`'s
  functions; write through this module only).

  ## Example

      t = Tachyon.Table.Replicated.table(r)
  """
  @spec table(server()) :: Table.t()
  def table(server) do
    # (Once a restore, if any, is done.)
    :ok = StateMachine.sync(server, 0, :infinity)
    {:ok, t} = StateMachine.query(server, & &1.table)
    t
  end

  @doc """
  The last sequence number applied to this replica.

  ## Example

      n = Tachyon.Table.Replicated.applied(r)
  """
  @spec applied(server()) :: non_neg_integer()
  def applied(server) do
    {:ok, %{applied: n}} = StateMachine.stats(server)
    n
  end

  @doc """
  Waits until this replica has applied sequence number `seq` (default
  timeout 5 s): `:ok` or `{:error, :timeout}`.

  ## Example

      :ok = Tachyon.Table.Replicated.sync(r, 42)
  """
  @spec sync(server(), non_neg_integer(), timeout()) :: :ok | {:error, :timeout | :noproc}
  def sync(server, seq, timeout \\ 5000) do
    StateMachine.sync(server, seq, timeout)
  end

  @doc """
  The table's entries (the bookkeeping key aside), as a map.

  ## Example

      %{"alice" => "admin"} = Tachyon.Table.Replicated.to_map(r)
  """
  @spec to_map(server()) :: %{binary() => binary()}
  def to_map(server) do
    table(server) |> Table.stream() |> Map.new() |> Map.delete(@applied_key)
  end

  # -- Tachyon.StateMachine ----------------------------------------------------------

  @impl StateMachine
  def init(%{path: path, table: opts}) do
    {:ok, table} = open_table(path, opts, 100)
    %{table: table}
  end

  @impl StateMachine
  def last_applied(%{table: t}) do
    case Table.get(t, @applied_key) do
      {:ok, <<n::64>>} -> n
      _ -> 0
    end
  end

  @impl StateMachine
  def apply(%{seq: seq}, data, %{table: t} = s) do
    # Something else published on this bus: not a write, skipped.
    {_id, op} = decode(data)
    :ok = apply_op(t, op, {@applied_key, <<seq::64>>})
    {:ok, s}
  end

  # The whole table, the applied sequence number with it.
  @impl StateMachine
  def snapshot(%{table: t}), do: t |> Table.stream() |> Enum.to_list() |> :erlang.term_to_binary()

  # The table becomes the snapshot's: what it held is deleted first (a
  # crash in between leaves it without an applied number: restored again).
  @impl StateMachine
  def restore(bin, %{table: t} = s) do
    pairs = :erlang.binary_to_term(bin, [:safe])
    for {k, _} <- Table.stream(t), do: :ok = Table.delete(t, k)
    if pairs != [], do: :ok = Table.put_many(t, pairs)
    s
  end

  @impl StateMachine
  def terminate(%{table: t}), do: Table.close(t)

  # A replica restarted at once may find its table still closing (only
  # the last try's failure is logged).
  defp open_table(path, opts, tries) do
    case Table.do_open(path, Table.Options.validate!(opts || []), nil, tries == 0) do
      {:error, :locked} when tries > 0 ->
        Process.sleep(20)
        open_table(path, opts, tries - 1)

      other ->
        other
    end
  end

  defp decode(data) do
    case :erlang.binary_to_term(data, [:safe]) do
      {id, {:put, k, v} = op} when is_binary(k) and is_binary(v) -> {id, op}
      {id, {:delete, k} = op} when is_binary(k) -> {id, op}
      _ -> {nil, :skip}
    end
  rescue
    ArgumentError -> {nil, :skip}
  end

  # The write and the applied sequence number: one atomic batch for a put.
  defp apply_op(t, {:put, k, v}, applied), do: Table.put_many(t, [{k, v}, applied])

  defp apply_op(t, {:delete, k}, {ak, av}) do
    :ok = Table.delete(t, k)
    Table.put(t, ak, av)
  end

  defp apply_op(t, :skip, {ak, av}), do: Table.put(t, ak, av)
end

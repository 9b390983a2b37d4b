defmodule Tachyon.Table.Replicated do
  @moduledoc """
  A `Tachyon.Table` replicated by a `Tachyon.Sequencer`'s bus: every write
  is published on the bus and applied by every replica in sequence order,
  so all replicas hold the same table; reads are local.

  Each replica is a process with a bus member (its `:member_id`) and a
  local table (its `:path`). `put/4` and `delete/3` return once the write
  is applied to this replica's table, that is after one round trip through
  the sequencer; every other replica applies it in the same order. The
  last applied sequence number is kept in the table itself (under the key
  `"\\0tachyon.applied"`), so a replica that restarts resumes from the log
  where it stopped, and a replica started late (an empty table) rewinds the
  whole log. Writes are idempotent (a put or a delete of a given key), so a
  write applied again after a crash leaves the same table.

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
  `:member_id`, `:bus` (`:unicast` or multicast, as `Tachyon.Bus`),
  `:table` (options of `Tachyon.Table.open/2`), `:name`.
  """
  use GenServer

  alias Tachyon.{Bus, Table}

  @applied_key "\0tachyon.applied"

  @type server :: GenServer.server()

  @doc """
  Starts a replica (see the moduledoc for the options).

  ## Example

      {:ok, r} = Tachyon.Table.Replicated.start_link(path: "/var/lib/app/t", sequencer: {{127, 0, 0, 1}, 7000}, member_id: 3)
  """
  @spec start_link(keyword()) :: GenServer.on_start()
  def start_link(opts) do
    opts =
      Keyword.validate!(opts, [:path, :sequencer, :member_id, :name, bus: :unicast, table: []])

    for k <- [:path, :sequencer, :member_id],
        opts[k] == nil,
        do: raise(ArgumentError, "Tachyon.Table.Replicated needs #{inspect(k)}")

    gen = if opts[:name], do: [name: opts[:name]], else: []
    GenServer.start_link(__MODULE__, opts, gen)
  end

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
    do: GenServer.call(server, {:write, {:put, key, value}}, timeout)

  @doc """
  Removes `key` on every replica; returns once applied here.

  ## Example

      :ok = Tachyon.Table.Replicated.delete(r, "alice")
  """
  @spec delete(server(), binary(), timeout()) :: :ok | {:error, atom()}
  def delete(server, key, timeout \\ 5000) when is_binary(key),
    do: GenServer.call(server, {:write, {:delete, key}}, timeout)

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
  def table(server), do: GenServer.call(server, :table)

  @doc """
  The last sequence number applied to this replica.

  ## Example

      n = Tachyon.Table.Replicated.applied(r)
  """
  @spec applied(server()) :: non_neg_integer()
  def applied(server), do: GenServer.call(server, :applied)

  @doc """
  Waits until this replica has applied sequence number `seq` (default
  timeout 5 s): `:ok` or `{:error, :timeout}`.

  ## Example

      :ok = Tachyon.Table.Replicated.sync(r, 42)
  """
  @spec sync(server(), non_neg_integer(), timeout()) :: :ok | {:error, :timeout}
  def sync(server, seq, timeout \\ 5000), do: GenServer.call(server, {:sync, seq}, timeout + 100)

  @doc """
  The table's entries (the bookkeeping key aside), as a map.

  ## Example

      %{"alice" => "admin"} = Tachyon.Table.Replicated.to_map(r)
  """
  @spec to_map(server()) :: %{binary() => binary()}
  def to_map(server) do
    table(server) |> Table.stream() |> Map.new() |> Map.delete(@applied_key)
  end

  # -- GenServer -------------------------------------------------------------------

  @impl true
  def init(opts) do
    Process.flag(:trap_exit, true)

    with {:ok, table} <- open_table(opts[:path], opts[:table], 100),
         applied = read_applied(table),
         {:ok, bus} <-
           Bus.open(
             sequencer: opts[:sequencer],
             member_id: opts[:member_id],
             bus: opts[:bus],
             from: applied + 1
           ) do
      {:ok,
       %{
         table: table,
         bus: bus,
         me: opts[:member_id],
         applied: applied,
         next_op: 1,
         pending: %{},
         syncs: []
       }}
    else
      {:error, reason} -> {:stop, reason}
    end
  end

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

  defp read_applied(table) do
    case Table.get(table, @applied_key) do
      {:ok, <<n::64>>} -> n
      _ -> 0
    end
  end

  @impl true
  def handle_call({:write, op}, from, s) do
    id = s.next_op

    case Bus.publish(s.bus, :erlang.term_to_binary({id, op})) do
      {:ok, _} -> {:noreply, %{s | next_op: id + 1, pending: Map.put(s.pending, id, from)}}
      {:error, _} = e -> {:reply, e, s}
    end
  end

  def handle_call(:table, _from, s), do: {:reply, s.table, s}
  def handle_call(:applied, _from, s), do: {:reply, s.applied, s}

  def handle_call({:sync, seq}, from, s) do
    if s.applied >= seq,
      do: {:reply, :ok, s},
      else: {:noreply, %{s | syncs: [{seq, from} | s.syncs]}}
  end

  @impl true
  def handle_info({:tachyon_bus, bus, seq, member_id, data}, %{bus: bus} = s) do
    # Something else published on this bus: not a write, skipped.
    {id, op} = decode(data)
    :ok = apply_op(s.table, op, {@applied_key, <<seq::64>>})
    s = %{s | applied: seq}

    s =
      case member_id == s.me and Map.pop(s.pending, id) do
        {from, pending} when from != nil ->
          GenServer.reply(from, :ok)
          %{s | pending: pending}

        _ ->
          s
      end

    {done, waiting} = Enum.split_with(s.syncs, fn {n, _} -> n <= seq end)
    for {_, from} <- done, do: GenServer.reply(from, :ok)
    {:noreply, %{s | syncs: waiting}}
  end

  def handle_info({:EXIT, _pid, :normal}, s), do: {:noreply, s}
  def handle_info({:EXIT, _pid, reason}, s), do: {:stop, reason, s}
  def handle_info(_msg, s), do: {:noreply, s}

  @impl true
  def terminate(_reason, s) do
    Bus.close(s.bus)
    Table.close(s.table)
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

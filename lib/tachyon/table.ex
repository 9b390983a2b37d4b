defmodule Tachyon.Table do
  @moduledoc """
  A persistent key-value table: binary keys and values, reads as fast as ETS,
  every write in an append-only log on disk before it returns.

  Tachyon.Table follows LinkedIn's Krati and Basho's Bitcask: an in-memory
  hash index over values kept in append-only segment files. One writer at a
  time, any number of concurrent readers on any schedulers: readers never
  wait for each other and wait for a writer at most for one hash-table
  insert.

      {:ok, t} = Tachyon.Table.open("/var/lib/app/users", storage: :memory)
      :ok = Tachyon.Table.put(t, "alice", "admin")
      {:ok, "admin"} = Tachyon.Table.get(t, "alice")
      :error = Tachyon.Table.get(t, "bob")
      :ok = Tachyon.Table.close(t)

  ## Under a supervisor

      children = [
        {Tachyon.Table, name: :users, path: "/var/lib/app/users", storage: :memory}
      ]

  The process opens the table, registers it under `:name` (calls with the
  name look it up in `:persistent_term`, so they do not go through the
  process), emits periodic `[:tachyon, :table, :stats]` telemetry and closes
  the table when it stops:

      Tachyon.Table.put(:users, "alice", "admin")

  ## Value storage

  Like Krati's Memory, Mapped and Channel segments (`:storage`):

    * `:memory` - every value is also kept in RAM (rebuilt from the log on
      open): the fastest reads, memory use like ETS.
    * `:mapped` (default) - values are read from the memory-mapped segment
      files: the page cache holds them, RAM use is the index only.
    * `:file` - no mapping: appends with `pwrite`, reads with `pread`. The
      slowest, for tables far larger than memory.

  ## Durability

  Each `put/3`, `delete/2` and `put_many/2` is in the log (the OS page cache)
  when it returns: it survives a crash of the VM (`kill -9`). `sync/1` makes
  everything written so far durable on power loss; `:sync_interval_ms` does
  it periodically from a background thread. `put_many/2` is atomic: after a
  crash all of its pairs are there or none is. On open, every segment is
  checked: a torn tail (a record whose write never finished) is cut and
  reported in the `[:tachyon, :table, :recover]` event.

  The index is rebuilt on open from each sealed segment's hint file (keys and
  value positions, CRC-checked) plus a scan of the tail of the log, so a
  table of millions of keys opens in seconds.

  ## Compaction

  A background thread rewrites sealed segments whose live data fell under
  `:compaction_threshold` of their size, checking every
  `:compaction_interval_ms` (`nil` to only compact on `compact/1`). Readers and the writer carry on meanwhile; the old files are
  deleted, so the disk space is returned. A deleted key never comes back
  after a compaction and a restart (delete markers are kept as long as an
  older value of their key may be on disk).

  ## Disk use

  The active segment is allocated whole (`fallocate`) when it is created,
  so that a full disk is an `{:error, :enospc}` from `put/3` and never a
  crash while writing; sealed segments are cut to their data, and so is the
  active one at `close/1`.

    * The first segment of a new table is `:initial_segment_size` bytes
      (2 MiB; more if `:max_key_size` and `:max_value_size` need it), each
      next one twice the one before it, up to `:segment_size` (64 MiB). A
      reopened table appends to its last segment again (extended to the
      first size of that progression holding twice its data) if that is at
      most half of `:segment_size`, else to a new one of the next size.
    * With `:pretouch`, next segments are kept ready: one from the open on,
      one more after each roll, up to `:prepared_segments` (4). Compaction
      outputs are sized for the live data they receive (at most
      `:segment_size`) and cut to it.
    * So a new, empty table takes about 6.1 MB (a 2 MiB segment and a
      prepared 4 MiB one), and one written to steadily holds its data plus up to
      (1 + `:prepared_segments`) x `:segment_size` of allocated space ahead
      of it (320 MiB with the defaults).

  To size it: `:prepared_segments` x `:segment_size` is the burst a writer
  can write with no page fault once it is rolling; lower either to keep
  less ahead. While the segments grow, a burst of puts right after `open`
  may reach a roll before the prepare thread has made the next segment and
  wait for it (up to tens of milliseconds on a loaded machine): a table
  that must take such a burst sets `:initial_segment_size` to
  `:segment_size` (segments all of one size from the start, and their disk
  from the start too).

  ## Directories

  A table's directory is its own (its manifest, `tachyon.meta`, says so;
  see "Directories" in `Tachyon.Store`): a directory of another part, of a
  newer format, or of files that are no table's is refused with nothing
  changed in it (`{:error, {:wrong_kind, kind}}`,
  `{:error, {:unsupported_format, version}}`), a new or empty one becomes
  a table's, and one written before manifests opens if its files are a
  table's. A table removes only its own leftovers (its temporary files,
  segments that hold nothing).

  ## Options

  Defaults "from Rust" are the Rust `Config::default()`; `defaults/0`
  returns them.

  #{Tachyon.Options.docs(Tachyon.Table.Options.open_schema() ++ Tachyon.Table.Options.server_schema())}

  ## Errors

  Expected failures are `{:error, reason}`: `:too_large`, `:closed`,
  `:enospc` (disk full: the table is unchanged and keeps working for reads;
  at open, how much was asked for and how much was free are logged),
  `{:wrong_kind, kind}` and `{:unsupported_format, version}` (see
  "Directories"),
  `:locked` (another handle, in this or another OS process, has the
  directory open), `:corrupt` (a damaged segment header), `:eio`, `:eacces`,
  `:enoent`, `:enotdir`, and `:noproc` for a name no table runs under; every
  reason is an atom. Keys and values that are not binaries, and bad
  options, raise `ArgumentError`; `open!/2` raises `Tachyon.Error`.

  ## Telemetry

  See `Tachyon.Telemetry` ("Table events").
  """

  alias Tachyon.{Named, Native}
  alias Tachyon.Telemetry

  @enforce_keys [:ref, :path, :storage]
  defstruct [:ref, :path, :storage, :name, recovery: %{}]

  @typedoc """
  An open table. `recovery` is what opening it found (the measurements of
  the `[:tachyon, :table, :recover]` event, plus `:cut`, `:keys` and
  `:duration_ns`).
  """
  @type t :: %__MODULE__{
          ref: reference(),
          path: String.t(),
          storage: storage(),
          name: atom() | nil,
          recovery: map()
        }
  @typedoc "A table handle or the name a supervised table was started with."
  @type table :: t() | atom()
  @type storage :: :memory | :mapped | :file
  @type reason ::
          :too_large
          | :noproc
          | :closed
          | :enospc
          | :locked
          | :corrupt
          | :eio
          | :eacces
          | :enoent
          | :enotdir
          | {:wrong_kind, :store | :sequencer | :unknown}
          | {:unsupported_format, pos_integer()}

  # put_many batches at most this big run on a normal scheduler.
  @small_batch_count 64
  @small_batch_bytes 256 * 1024
  @stream_chunk 1_000

  # -- opening -------------------------------------------------------------

  @doc """
  Opens (creating if needed) the table in directory `path`.

  Recovers the index from the files there; see the moduledoc for options.
  The handle is valid in any process; the table is closed by `close/1` or
  when the handle is garbage-collected.

  ## Example

      {:ok, t} = Tachyon.Table.open("/tmp/users", storage: :memory)
  """
  @spec open(Path.t(), keyword()) :: {:ok, t()} | {:error, reason()}
  def open(path, opts \\ []) do
    opts = Tachyon.Table.Options.validate!(opts)
    do_open(path, opts, nil)
  end

  @doc """
  Like `open/2` but raises `Tachyon.Error` on error.

  ## Example

      t = Tachyon.Table.open!("/tmp/users")
  """
  @spec open!(Path.t(), keyword()) :: t()
  def open!(path, opts \\ []) do
    case open(path, opts) do
      {:ok, t} -> t
      {:error, reason} -> raise Tachyon.Error, reason: reason, part: __MODULE__, target: path
    end
  end

  @doc false
  # `report`: log a failure (Tachyon.Error.report/3); false for a caller
  # that retries.
  def do_open(path, opts, name, report \\ true) do
    path = path |> Tachyon.Options.path!() |> Path.expand()
    t0 = System.monotonic_time()

    # The NIF's option name for the storage is still `mode`.
    case Native.table_open(path, opts |> Map.new() |> Map.put(:mode, opts[:storage])) do
      {:ok, ref, rec} ->
        duration = System.monotonic_time() - t0
        # `:mode` is the deprecated name of `:storage` (one release).
        meta = %{path: path, storage: opts[:storage], mode: opts[:storage], name: name}

        Telemetry.execute(
          [:tachyon, :table, :open],
          %{duration: duration, keys: rec.keys, records: rec.records, segments: rec.segments},
          meta
        )

        Telemetry.execute(
          [:tachyon, :table, :recover],
          %{
            duration: System.convert_time_unit(rec.duration_ns, :nanosecond, :native),
            records: rec.records,
            hinted_segments: rec.hinted_segments,
            scanned_segments: rec.scanned_segments,
            truncated_bytes: rec.truncated_bytes,
            removed_files: rec.removed_files
          },
          Map.put(meta, :cut, rec.cut)
        )

        {:ok,
         %__MODULE__{ref: ref, path: path, storage: opts[:storage], name: name, recovery: rec}}

      {:error, :badarg} ->
        raise ArgumentError, "Tachyon.Table: the options were rejected: #{inspect(opts)}"

      {:error, _} = e ->
        e = Tachyon.Error.normalize(e, __MODULE__, path)
        if report, do: Tachyon.Error.report(e, __MODULE__, target: path, name: name), else: e
    end
  end

  # -- writes --------------------------------------------------------------

  @doc """
  Writes `value` under `key`. In the log when it returns.

  ## Example

      :ok = Tachyon.Table.put(t, "alice", "admin")
  """
  @spec put(table(), binary(), binary()) :: :ok | {:error, reason()}
  def put(table, key, value) when is_binary(key) and is_binary(value) do
    with {:ok, t} <- resolve(table), do: Native.table_put(t.ref, key, value)
  end

  def put(_table, key, value), do: bad_kv!(key, value)

  @doc """
  Removes `key` (`:ok` whether it was there or not).

  ## Example

      :ok = Tachyon.Table.delete(t, "alice")
  """
  @spec delete(table(), binary()) :: :ok | {:error, reason()}
  def delete(table, key) when is_binary(key) do
    with {:ok, t} <- resolve(table), do: Native.table_delete(t.ref, key)
  end

  def delete(_table, key), do: bad_kv!(key, "")

  @doc """
  Writes every `{key, value}` pair atomically: after a crash, all of them are
  there or none is. A later pair wins over an earlier one with the same key.

  ## Example

      :ok = Tachyon.Table.put_many(t, [{"a", "1"}, {"b", "2"}])
  """
  @spec put_many(table(), [{binary(), binary()}]) :: :ok | {:error, reason()}
  def put_many(table, pairs) when is_list(pairs) do
    with {:ok, t} <- resolve(table), do: put_pairs(t.ref, pairs)
  end

  def put_many(_table, pairs),
    do: raise(ArgumentError, "put_many/2 expects a list of {key, value}, got: #{inspect(pairs)}")

  defp put_pairs(r, pairs) do
    {count, bytes} =
      Enum.reduce(pairs, {0, 0}, fn
        {k, v}, {n, b} when is_binary(k) and is_binary(v) ->
          {n + 1, b + byte_size(k) + byte_size(v)}

        other, _ ->
          raise ArgumentError, "put_many/2 expects {key, value} binaries, got: #{inspect(other)}"
      end)

    if count <= @small_batch_count and bytes <= @small_batch_bytes,
      do: Native.table_put_many(r, pairs),
      else: Native.table_put_many_dirty(r, pairs)
  end

  # -- reads ---------------------------------------------------------------

  @doc """
  Reads `key`: `{:ok, value}`, or `:error` if absent.

  ## Example

      {:ok, "admin"} = Tachyon.Table.get(t, "alice")
      :error = Tachyon.Table.get(t, "nobody")
  """
  @spec get(table(), binary()) :: {:ok, binary()} | :error | {:error, reason()}
  def get(table, key) when is_binary(key) do
    with {:ok, t} <- resolve(table), do: Native.table_get(t.ref, key)
  end

  def get(_table, key), do: bad_kv!(key, "")

  @doc """
  Reads `key`, raising `KeyError` if it is absent.

  ## Example

      "admin" = Tachyon.Table.fetch!(t, "alice")
  """
  @spec fetch!(table(), binary()) :: binary()
  def fetch!(table, key) do
    case get(table, key) do
      {:ok, v} ->
        v

      :error ->
        raise KeyError, key: key, term: table

      {:error, reason} ->
        raise ArgumentError, "could not read #{inspect(key)}: #{inspect(reason)}"
    end
  end

  @doc """
  The number of keys: `{:ok, count}`, or `{:error, :closed | :noproc}`.

  ## Example

      {:ok, 1} = Tachyon.Table.count(t)
  """
  @spec count(table()) :: {:ok, non_neg_integer()} | {:error, :closed | :noproc}
  def count(table) do
    with {:ok, t} <- resolve(table) do
      case Native.table_count(t.ref) do
        n when is_integer(n) -> {:ok, n}
        {:error, _} = error -> error
      end
    end
  end

  @doc """
  Every `{key, value}` pair, as a stream, in no particular order.

  The view is consistent: it is the table at the moment enumeration starts
  (writes after that are not seen, compaction does not disturb it). Keys are
  copied then and values are read in chunks as the stream is consumed.
  Enumerating a closed table raises `ArgumentError`.

  ## Example

      Tachyon.Table.stream(t) |> Enum.to_list()
      #=> [{"alice", "admin"}]
  """
  @spec stream(table()) :: Enumerable.t()
  def stream(table) do
    r =
      case resolve(table) do
        {:ok, t} -> t.ref
        {:error, reason} -> raise ArgumentError, "cannot stream the table: #{inspect(reason)}"
      end

    Stream.resource(
      fn ->
        case Native.table_snapshot(r) do
          {:error, reason} -> raise ArgumentError, "cannot stream the table: #{inspect(reason)}"
          snap -> snap
        end
      end,
      fn snap ->
        case Native.table_snapshot_next(snap, @stream_chunk) do
          [] -> {:halt, snap}
          list when is_list(list) -> {list, snap}
        end
      end,
      fn _snap -> :ok end
    )
  end

  # -- maintenance ---------------------------------------------------------

  @doc """
  Makes every write so far durable on power loss (fdatasync).

  ## Example

      :ok = Tachyon.Table.sync(t)
  """
  @spec sync(table()) :: :ok | {:error, reason()}
  def sync(table) do
    with {:ok, t} <- resolve(table), do: do_sync(t)
  end

  defp do_sync(t) do
    t0 = System.monotonic_time()
    res = Native.table_sync(t.ref)

    if res == :ok do
      Telemetry.execute(
        [:tachyon, :table, :sync],
        %{duration: System.monotonic_time() - t0},
        %{path: t.path, name: t.name}
      )
    end

    res
  end

  @doc """
  Compacts now: seals the active segment if it holds garbage and rewrites
  every sealed segment that holds garbage or delete markers. Returns what it
  did (bytes are file sizes).

  ## Example

      {:ok, %{segments_in: _, bytes_in: _, bytes_out: _}} = Tachyon.Table.compact(t)
  """
  @spec compact(table()) :: {:ok, map()} | {:error, reason()}
  def compact(table) do
    with {:ok, t} <- resolve(table) do
      res = Native.table_compact(t.ref)
      emit_events(t)
      res
    end
  end

  @doc """
  Counters: `:keys`, `:puts`, `:deletes`, `:batches`, `:segments`,
  `:disk_bytes`, `:live_bytes`, `:total_bytes`, `:compactions`,
  `:compacted_bytes_in`, `:compacted_bytes_out`, `:syncs`, `:next_seq`.
  No side effect: the compaction events are emitted by the table's process
  at its stats tick (and by `compact/1` and `close/1`).

  ## Example

      {:ok, %{keys: 1}} = Tachyon.Table.stats(t)
  """
  @spec stats(table()) :: {:ok, map()} | {:error, reason()}
  def stats(table) do
    with {:ok, t} <- resolve(table), do: Native.table_stats(t.ref)
  end

  @doc """
  Closes the table: stops its background thread, syncs, and releases its
  memory, files and directory lock. Later calls get `{:error, :closed}`.
  Idempotent. For a named table, stops its process for good (it is not
  restarted); `{:error, :noproc}` if none runs under that name.

  ## Example

      :ok = Tachyon.Table.close(t)
  """
  @spec close(table()) :: :ok | {:error, reason()}
  def close(%__MODULE__{} = t) do
    emit_events(t)
    Native.table_close(t.ref)
  end

  def close(name) when is_atom(name), do: Named.close(name)

  def close(other), do: resolve(other)

  @doc """
  Returns the handle of a table started with a `:name`, or
  `{:error, :noproc}`.

  ## Example

      {:ok, %Tachyon.Table{}} = Tachyon.Table.whereis(:users)
  """
  @spec whereis(atom()) :: {:ok, t()} | {:error, :noproc}
  def whereis(name) when is_atom(name), do: Named.whereis(__MODULE__, name)

  @doc """
  The handle of a table: a name (or a pid of a table process) resolved to
  its `t:t/0`. Raises `ArgumentError` for a name no table runs under (see
  `whereis/1` for a non-raising lookup).

  ## Example

      %Tachyon.Table{} = Tachyon.Table.table(:users)
  """
  @spec table(table() | pid()) :: t()
  def table(pid) when is_pid(pid), do: GenServer.call(pid, :handle)

  def table(table) do
    case resolve(table) do
      {:ok, t} -> t
      {:error, _} -> raise ArgumentError, "no Tachyon.Table named #{inspect(table)} is running"
    end
  end

  @doc false
  def emit_events(t) do
    for {:compaction, c} <- Native.table_take_events(t.ref) do
      Telemetry.execute(
        [:tachyon, :table, :compaction],
        c
        |> Map.delete(:duration_ns)
        |> Map.put(:duration, System.convert_time_unit(c.duration_ns, :nanosecond, :native)),
        %{path: t.path, name: t.name}
      )
    end

    :ok
  end

  defp resolve(table), do: Named.resolve(__MODULE__, table)

  defp bad_kv!(key, value) do
    bad = if is_binary(key), do: {"value", value}, else: {"key", key}
    raise ArgumentError, "the #{elem(bad, 0)} must be a binary, got: #{inspect(elem(bad, 1))}"
  end

  # -- options and process --------------------------------------------------

  @doc """
  The defaults of the open options (from the Rust `Config::default()`).

  ## Example

      %{storage: :mapped, shards: 256} = Tachyon.Table.defaults()
  """
  @spec defaults() :: map()
  def defaults, do: Map.new(Tachyon.Table.Options.validate!([]))

  @doc """
  A child spec, so that `{Tachyon.Table, opts}` works in a supervision tree.
  The id is `{Tachyon.Table, name}`; `:transient`, so `close/1` is final.

  ## Example

      Supervisor.start_link([{Tachyon.Table, name: :users, path: "/tmp/users"}],
        strategy: :one_for_one
      )
  """
  @spec child_spec(keyword()) :: Supervisor.child_spec()
  def child_spec(opts), do: Named.child_spec(__MODULE__, opts, shutdown: 30_000)

  @doc """
  Starts a process that opens the table at `:path` and owns it (see the
  moduledoc for options). With `:name`, the table is reachable by that name
  from every function of this module.

  ## Example

      {:ok, pid} = Tachyon.Table.start_link(name: :users, path: "/tmp/users")
      :ok = Tachyon.Table.put(:users, "alice", "admin")
  """
  @spec start_link(keyword()) :: GenServer.on_start()
  def start_link(opts) do
    schemas = [Tachyon.Table.Options.server_schema(), Tachyon.Table.Options.open_schema()]
    Tachyon.Options.check_keys!(opts, schemas, "Tachyon.Table")
    {server, open} = Keyword.split(opts, Tachyon.Table.Options.server_keys())
    server = Tachyon.Table.Options.validate_server!(server)
    open = Tachyon.Table.Options.validate!(open)
    Tachyon.Table.Server.start_link(server, open)
  end
end

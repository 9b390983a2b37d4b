defmodule Tachyon.Store do
  @moduledoc """
  An append-only message log on memory-mapped segment files.

  Messages are binaries (or iodata); each gets an index, starting at 0 and
  contiguous. `append/2` is a regular NIF call that copies the message into the
  mapped active segment: no process hop, no allocation beyond the result.
  Once `append/2` returns, the message is in the OS page cache and survives a
  crash of the VM (even `kill -9`); `sync/1` makes everything appended so far
  durable on power loss.

  ## Starting

  Under your own supervisor:

      children = [
        {Tachyon.Store, name: :events, path: "/var/lib/my_app/events"}
      ]

  then use the name anywhere:

      {:ok, index} = Tachyon.Store.append(:events, "hello")
      {:ok, "hello"} = Tachyon.Store.read(:events, index)

  or without a process, with a handle:

      {:ok, store} = Tachyon.Store.open("/tmp/events")
      {:ok, 0} = Tachyon.Store.append(store, ["hel", "lo"])
      :ok = Tachyon.Store.close(store)

  Stores listed in `config :tachyon, stores: [[name: ..., path: ...]]` are
  started by Tachyon's own application.

  ## Options

  `open/2` takes the directory as its first argument and the options from
  `:access` on; `start_link/1` takes them all. Defaults marked "from Rust" are the Rust
  `Config::default()`: `defaults/0` returns them.

  #{Tachyon.Options.docs(Tachyon.Store.Options.server_schema() ++ Tachyon.Store.Options.open_schema())}

  ## Errors

    * `{:error, :too_large}`, `{:error, :closed}`,
      `{:error, :noproc}` (no store under that name),
      `{:error, :not_found}`, `{:error, :read_only}` (append to a reader),
      `{:error, :locked}` (another writer has the directory),
      `{:error, :enospc}` (disk full: the message is not stored, the log
      stays valid; at open, how much was asked for and how much was free
      are logged), `{:error, :corrupt}` (a record that does not verify:
      the segment and offset are logged), and POSIX atoms (`:eacces`, ...)
      for other I/O errors.
    * `{:error, {:trimmed, first}}`: the index is below the first one the
      log keeps (see "Retention").
    * `{:error, {:wrong_kind, kind}}`: the directory is another part's
      (`:table`, `:sequencer`; `:unknown` for files of no part or of
      several), and `{:error, {:unsupported_format, version}}`: its files
      are of a newer format than this release reads. Nothing in the
      directory is changed (see "Directories").
    * Wrong argument types and bad options raise `ArgumentError`; `open!/2`
      raises `Tachyon.Error`.

  ## Directories

  A store's directory is its own: its manifest, `tachyon.meta` (a few
  lines: the kind of part that owns the directory and the format of its
  files, with a checksum), is checked before anything else is done there.
  A directory of another part (a `Tachyon.Table`'s, a `Tachyon.Sequencer`'s
  log), of a newer format, or whose manifest does not verify is refused
  with nothing created, locked or changed in it. A new or empty directory
  becomes a store's; one written by a release before manifests opens if
  its files are a store's and nobody else's, and gets its manifest. A
  reader (`access: :read`) never writes one, and may also read a
  sequencer's log. A store removes only files it can prove it made (a
  segment it prepared and never used, or one that holds nothing). An
  `AsyncStore` writes to a store: its directory is a store's.
  docs/FORMAT.md has the manifest's bytes.

  ## Disk use

  A store's files are its segments: each one a header page, an index (4
  bytes per 64 bytes of data) and its data, allocated whole (`fallocate`)
  when it is created, so that a full disk is an `{:error, :enospc}` when a
  segment cannot be created and never a crash while writing.

    * The first segment of a new log holds `:initial_segment_size` bytes of
      data (2 MiB; more if `:max_message_size` needs it), each next one
      twice the one before it, up to `:segment_size` (64 MiB): 2, 4, 8, 16,
      32, 64, 64 ... MiB. A reopened store carries on from its last
      segment's size.
    * The pre-touch thread keeps next segments ready (allocated and faulted
      in): one from the open on, one more after each roll, up to
      `:prepared_segments` (4).
    * So a new, empty store takes about 6.4 MB (a 2 MiB segment and a
      prepared 4 MiB one, each with its index); one written to steadily
      holds its data plus up to `:prepared_segments` x `:segment_size`
      ahead of it (256 MiB with the defaults); retention
      (`:max_segments`, `:retention`) bounds the data.

  To size it: `:segment_size` is the unit of retention and of the space
  kept ahead; `:prepared_segments` x `:segment_size` is the burst an
  appender can write at full speed (no page faults) once the store is
  rolling; an appender that must write a large burst right after `open`
  at full speed needs it prepared before: set `:initial_segment_size` to
  `:segment_size` (segments all of one size) and accept the disk that
  costs from the start (about `:segment_size` x 2). `stats/1`'s
  `:disk_bytes` is what the log's segments take.

  ## Retention

  A store keeps every message unless told otherwise. With `:retention`
  (or `:max_segments`) it deletes whole segments, the oldest first, never
  the active one:

      {:ok, store} =
        Tachyon.Store.open("/tmp/events",
          segment_size: 1024 * 1024,
          retention: [max_bytes: 64 * 1024 * 1024, max_age_ms: :timer.hours(24)]
        )

  keeps at most 64 MiB of segment files (a segment goes when the others
  reach the limit) and no segment sealed more than a day ago (a message
  goes at least a day after it was written, and at most a day after its
  segment was sealed). `stats/1` and `first_index/1` say where the log
  starts now; `read/2` or `read_many/4` below it return
  `{:error, {:trimmed, first}}`, `first` the first index kept (a reopen
  keeps it). Deleting is off the appender's path: the files of deleted
  segments go to the pre-touch thread, which reuses them as the next
  segments (their pages are still in the page cache: nothing is zero-filled
  again) or removes them.

  ## Recovery

  A writer's open checks every record of the active segment (length and
  CRC32C) and rebuilds its index. A torn record at the end (power loss during
  a write) is cut; a record that does not verify in the middle of the log is
  `{:error, :corrupt}` unless `repair: true`: the log says where, and that
  opening with `repair: true` cuts the log there, losing the records after
  it (how many, and how many bytes). Only that damage is repairable: a
  damaged segment header, or a record found damaged by a read, is not
  (no repair is advised). What was
  found is returned by `recovery/1`, logged when something was cut, and sent
  as `[:tachyon, :store, :recover]` telemetry.

  ## Concurrency

  Appends from many processes are safe (a short lock in Rust serialises
  them) and each process's own messages keep their order. Reads never wait
  for the writer beyond a reader lock held for a lookup.

  See `docs/FORMAT.md` for the file format and `docs/ARCHITECTURE.md` for the
  threads and files.
  """

  alias Tachyon.{Native, Named}
  alias Tachyon.Store.Report

  defstruct [:ref, :path, :access, :name, :recovery]

  @typedoc "A store handle."
  @type t :: %__MODULE__{
          ref: reference(),
          path: String.t(),
          access: :write | :read,
          name: atom() | nil,
          recovery: recovery()
        }

  @typedoc "A handle or the name of a store started with `start_link/1`."
  @type store :: t() | atom()

  @type index :: non_neg_integer()

  @typedoc "What a writer's open found and did (see the moduledoc)."
  @type recovery :: %{
          segments: non_neg_integer(),
          messages: non_neg_integer(),
          recovered: non_neg_integer(),
          truncated_bytes: non_neg_integer(),
          lost_records: non_neg_integer(),
          cut: nil | :torn_tail | :repaired,
          segment: non_neg_integer() | nil,
          offset: non_neg_integer() | nil,
          removed_unused: non_neg_integer(),
          duration_ns: non_neg_integer()
        }

  @type reason ::
          :closed
          | :not_found
          | :too_large
          | :enospc
          | :locked
          | :read_only
          | :noproc
          | :corrupt
          | {:wrong_kind, :table | :sequencer | :unknown}
          | {:unsupported_format, pos_integer()}
          | atom()

  @small_batch_count 1024
  @small_batch_bytes 1024 * 1024

  # -- starting ----------------------------------------------------------------

  @doc """
  The child specification: `{Tachyon.Store, opts}` in a supervisor starts
  `start_link(opts)`. The id is `{Tachyon.Store, name}`, so several stores
  live under one supervisor; `:transient`, so `close/1` is final.

  ## Example

      Supervisor.start_link([{Tachyon.Store, name: :events, path: "/tmp/events"}],
        strategy: :one_for_one
      )
  """
  @spec child_spec(keyword()) :: Supervisor.child_spec()
  def child_spec(opts), do: Named.child_spec(__MODULE__, opts)

  @doc """
  Starts a process that opens the store at `:path`, registers it under
  `:name` and closes it when it stops. See the moduledoc for the options.

  ## Example

      {:ok, _pid} = Tachyon.Store.start_link(name: :events, path: "/tmp/events")
      {:ok, 0} = Tachyon.Store.append(:events, "hello")
  """
  @spec start_link(keyword()) :: GenServer.on_start()
  def start_link(opts) when is_list(opts) do
    schemas = [Tachyon.Store.Options.server_schema(), Tachyon.Store.Options.open_schema()]
    Tachyon.Options.check_keys!(opts, schemas, "Tachyon.Store")
    {server, open} = Keyword.split(opts, Tachyon.Store.Options.server_keys())
    server = Tachyon.Store.Options.validate_server!(server)
    open = Tachyon.Store.Options.validate!(open)
    Tachyon.Store.Server.start_link(server, open)
  end

  @doc """
  The defaults of the options, as `open/2` fills them in (most come from the
  Rust `Config::default()`; `:max_message_size` is then capped by the
  segment size).

  ## Example

      %{
        access: :write,
        segment_size: 67_108_864,
        initial_segment_size: 2_097_152,
        retention: [max_bytes: nil, max_age_ms: nil]
      } = Tachyon.Store.defaults()
  """
  @spec defaults() :: map()
  def defaults, do: Map.new(Tachyon.Store.Options.validate!([]))

  @doc """
  Opens the store in `path` and returns a handle, with no process involved.
  The store is closed by `close/1` or when the handle is garbage-collected.
  See the moduledoc for the options.

  ## Example

      {:ok, store} = Tachyon.Store.open("/tmp/my_log", segment_size: 1024 * 1024)
      {:ok, reader} = Tachyon.Store.open("/tmp/my_log", access: :read)
  """
  @spec open(Path.t(), keyword()) :: {:ok, t()} | {:error, reason()}
  def open(path, opts \\ []) when is_list(opts) do
    do_open(Tachyon.Options.path!(path), Tachyon.Store.Options.validate!(opts), nil)
  end

  @doc """
  Like `open/2` but raises `Tachyon.Error` on error.

  ## Example

      store = Tachyon.Store.open!("/tmp/my_log")
  """
  @spec open!(Path.t(), keyword()) :: t()
  def open!(path, opts \\ []) do
    case open(path, opts) do
      {:ok, store} -> store
      {:error, reason} -> raise Tachyon.Error, reason: reason, part: __MODULE__, target: path
    end
  end

  @doc false
  def do_open(path, opts, name) do
    t0 = System.monotonic_time()
    abs = Path.expand(path)

    # The NIF's option name for the access is still `mode`.
    nif_opts =
      opts |> Map.new() |> Map.put(:mode, opts[:access]) |> Tachyon.Options.put_retention()

    case Native.store_open(abs, nif_opts) do
      {:ok, ref, rec} ->
        store = %__MODULE__{ref: ref, path: abs, access: opts[:access], name: name, recovery: rec}
        Report.open(store, rec, System.monotonic_time() - t0)
        {:ok, store}

      {:error, {:bad_config, msg}} ->
        raise ArgumentError, "Tachyon.Store: #{msg}"

      {:error, _} = error ->
        error
        |> normalize(abs)
        |> Tachyon.Error.report(__MODULE__, target: abs, name: name)
    end
  end

  defp normalize(error, path), do: Tachyon.Error.normalize(error, __MODULE__, path)

  # -- the log -----------------------------------------------------------------

  @doc """
  Appends a message (a binary or iodata) and returns its index.

  ## Example

      {:ok, 0} = Tachyon.Store.append(store, "first")
      {:ok, 1} = Tachyon.Store.append(store, ["sec", ?o, "nd"])
  """
  @spec append(store(), iodata()) :: {:ok, index()} | {:error, reason()}
  def append(%__MODULE__{ref: ref}, data) when is_binary(data) or is_list(data),
    do: Native.store_append(ref, data)

  def append(name, data) when is_atom(name) and (is_binary(data) or is_list(data)) do
    case Named.whereis(__MODULE__, name) do
      {:ok, %__MODULE__{ref: ref}} -> Native.store_append(ref, data)
      error -> error
    end
  end

  def append(store, data) when is_binary(data) or is_list(data),
    do: raise(ArgumentError, "expected a Tachyon.Store handle or name, got: #{inspect(store)}")

  def append(_store, data),
    do: raise(ArgumentError, "a message must be a binary or iodata, got: #{inspect(data)}")

  @doc """
  Appends a list of messages as one batch: their indices are contiguous (no
  other appender in between). Returns the index of the last one. Sizes are
  checked before anything is written; on an I/O error mid-batch (disk full)
  the messages before it are stored. An empty list is `{:error, :empty}`.

  Batches up to #{@small_batch_count} messages and 1 MiB run on a normal
  scheduler; larger ones on a dirty I/O scheduler.

  ## Example

      {:ok, 2} = Tachyon.Store.append_many(store, ["a", "b", "c"])
  """
  @spec append_many(store(), [iodata()]) :: {:ok, index()} | {:error, reason() | :empty}
  def append_many(store, messages) when is_list(messages) do
    with {:ok, %__MODULE__{ref: ref}} <- resolve(store) do
      if length(messages) <= @small_batch_count and
           :erlang.iolist_size(messages) <= @small_batch_bytes do
        Native.store_append_many(ref, messages)
      else
        Native.store_append_many_dirty(ref, messages)
      end
    end
  end

  def append_many(_store, messages),
    do:
      raise(ArgumentError, "append_many/2 expects a list of messages, got: #{inspect(messages)}")

  @doc """
  Reads the message at `index`.

  ## Example

      {:ok, "first"} = Tachyon.Store.read(store, 0)
      {:error, :not_found} = Tachyon.Store.read(store, 1_000_000)
      # Below the first index retention kept:
      {:error, {:trimmed, first}} = Tachyon.Store.read(store, 0)
  """
  @spec read(store(), index()) :: {:ok, binary()} | {:error, reason()}
  def read(store, index) when is_integer(index) and index >= 0 do
    with {:ok, %__MODULE__{ref: ref, path: path}} <- resolve(store) do
      case Native.store_read(ref, index) do
        {:ok, _} = ok -> ok
        error -> normalize(error, path)
      end
    end
  end

  def read(_store, index),
    do: raise(ArgumentError, "the index must be a non-negative integer, got: #{inspect(index)}")

  @doc """
  A stream of `{index, message}` from `from` (default: the first kept index)
  to the newest message at the time the stream reaches it. Reads in batches.

  ## Example

      Tachyon.Store.stream(store) |> Enum.take(2)
      #=> [{0, "first"}, {1, "second"}]
  """
  @spec stream(store(), index() | :first) :: Enumerable.t()
  def stream(store, from \\ :first)

  def stream(store, from) when from == :first or (is_integer(from) and from >= 0) do
    Stream.resource(
      fn ->
        case {resolve(store), from} do
          {{:ok, s}, :first} ->
            {:ok, {first, _}} = indices!(s)
            {s, first}

          {{:ok, s}, i} ->
            {s, i}

          {{:error, reason}, _} ->
            raise ArgumentError, "cannot stream store #{inspect(store)}: #{inspect(reason)}"
        end
      end,
      fn {s, i} ->
        case Native.store_read_many(s.ref, i, 512, 1024 * 1024) do
          {:ok, []} ->
            {:halt, {s, i}}

          {:ok, msgs} ->
            {items, next} = Enum.map_reduce(msgs, i, fn m, j -> {{j, m}, j + 1} end)
            {items, {s, next}}

          {:error, :not_found} ->
            {:halt, {s, i}}

          {:error, _} = error ->
            {:error, reason} = normalize(error, s.path)
            raise RuntimeError, "Tachyon.Store.stream failed at index #{i}: #{inspect(reason)}"
        end
      end,
      fn _ -> :ok end
    )
  end

  def stream(_store, from),
    do:
      raise(
        ArgumentError,
        "stream/2 expects a non-negative index or :first, got: #{inspect(from)}"
      )

  defp indices!(s) do
    case Native.store_indices(s.ref) do
      {:ok, _} = ok -> ok
      {:error, reason} -> raise ArgumentError, "cannot stream store: #{inspect(reason)}"
    end
  end

  @doc """
  The index of the oldest message kept (the next index if the log is empty).

  ## Example

      {:ok, 0} = Tachyon.Store.first_index(store)
  """
  @spec first_index(store()) :: {:ok, index()} | {:error, reason()}
  def first_index(store) do
    with {:ok, s} <- resolve(store),
         {:ok, {first, _}} <- Native.store_indices(s.ref),
         do: {:ok, first}
  end

  @doc """
  The index of the newest message, or `{:error, :empty}`.

  ## Example

      {:ok, 1} = Tachyon.Store.last_index(store)
  """
  @spec last_index(store()) :: {:ok, index()} | {:error, reason() | :empty}
  def last_index(store) do
    with {:ok, s} <- resolve(store), {:ok, {first, next}} <- Native.store_indices(s.ref) do
      if next > first, do: {:ok, next - 1}, else: {:error, :empty}
    end
  end

  @doc """
  The index the next append will get.

  ## Example

      {:ok, 2} = Tachyon.Store.next_index(store)
  """
  @spec next_index(store()) :: {:ok, index()} | {:error, reason()}
  def next_index(store) do
    with {:ok, s} <- resolve(store),
         {:ok, {_, next}} <- Native.store_indices(s.ref),
         do: {:ok, next}
  end

  @doc """
  Makes every message appended so far durable on power loss (msync of the
  written ranges, fsync of the directory), on a dirty I/O scheduler.
  Appenders are not blocked while it waits for the disk.

  ## Example

      :ok = Tachyon.Store.sync(store)
  """
  @spec sync(store()) :: :ok | {:error, reason()}
  def sync(store) do
    with {:ok, s} <- resolve(store) do
      t0 = System.monotonic_time()

      case Native.store_sync(s.ref) do
        {:ok, bytes} ->
          Tachyon.Telemetry.execute(
            [:tachyon, :store, :sync],
            %{duration: System.monotonic_time() - t0, bytes: bytes},
            %{path: s.path, name: s.name}
          )

          Report.events(s)
          :ok

        {:error, _} = error ->
          error
      end
    end
  end

  @doc """
  Counters: `:appended`, `:appended_bytes` (since open), `:rolls`,
  `:prepared_rolls` (rolls onto a segment the pre-touch thread had ready),
  `:deleted_segments`, `:segments`, `:first_index`, `:next_index`,
  `:disk_bytes`, `:unsynced_bytes`, `:pretouch`. No side effect: the
  roll events are emitted by the store's process at its stats tick (and by
  `sync/1` and `close/1`).

  ## Example

      {:ok, %{appended: 2}} = Tachyon.Store.stats(store)
  """
  @spec stats(store()) :: {:ok, map()} | {:error, reason()}
  def stats(store) do
    with {:ok, s} <- resolve(store), do: Native.store_stats(s.ref)
  end

  @doc """
  What the writer's open found and did (see "Recovery" in the moduledoc):
  `{:ok, recovery}`, or `{:error, :noproc}` for a name no store runs under.

  ## Example

      {:ok, %{cut: nil, messages: 2}} = Tachyon.Store.recovery(store)
  """
  @spec recovery(store()) :: {:ok, recovery()} | {:error, :noproc}
  def recovery(store) do
    with {:ok, s} <- resolve(store), do: {:ok, s.recovery}
  end

  @doc """
  Closes the store: further calls get `{:error, :closed}`, the pre-touch
  thread is stopped and joined, the directory lock is released. It does not
  wait for the disk: call `sync/1` first if you need durability on power
  loss. For a named store, stops its process for good (it is not
  restarted); `{:error, :noproc}` if no store runs under that name.

  ## Example

      :ok = Tachyon.Store.close(store)
  """
  @spec close(store()) :: :ok | {:error, :noproc}
  def close(%__MODULE__{} = s) do
    Report.events(s)
    Native.store_close(s.ref)
  end

  def close(name) when is_atom(name), do: Named.close(name)

  @doc """
  Returns the handle of a store started with `start_link/1`, or
  `{:error, :noproc}`.

  ## Example

      {:ok, %Tachyon.Store{}} = Tachyon.Store.whereis(:events)
  """
  @spec whereis(atom()) :: {:ok, t()} | {:error, :noproc}
  def whereis(name) when is_atom(name), do: Named.whereis(__MODULE__, name)

  defp resolve(store), do: Named.resolve(__MODULE__, store)
end

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

    * `:path` - the directory (created if needed). Required.
    * `:name` - an atom to register the store under. Required for `start_link/1`.
    * `:mode` - `:write` (default; one writer per directory, enforced with a
      lock file) or `:read` (a reader, possibly in another OS process, that
      sees every message whose append has returned while the writer keeps
      writing).
    * `:segment_size` - data bytes per segment file (default 64 MiB; a
      multiple of 8 between 64 KiB and 3 GiB). A segment also rolls when its
      index (one slot per 64 bytes of data) is full.
    * `:max_message_size` - larger messages get `{:error, :message_too_large}`
      (default 1 MiB, or the segment size less 8 bytes if that is smaller).
    * `:max_segments` - keep at most this many segments; the oldest are
      deleted when the writer rolls (default: keep all).
    * `:max_bytes` - keep at most this many bytes of segment files (the
      active segment is always kept) (default: no limit).
    * `:pretouch` - run the pre-touch thread that faults pages in ahead of the
      writer and prepares the next segment (default `true`).
    * `:pretouch_ahead` - bytes faulted in ahead of the write position
      (default 32 MiB).
    * `:repair` - on a checksum mismatch in the middle of the log, truncate
      there instead of failing with `{:error, {:corrupt, segment, offset}}`
      (default `false`).
    * `:verify` - `:active` (default) checks every record of the active
      segment on open; `:all` checks every segment.
    * `:stats_interval` - `start_link/1` only: milliseconds between
      `[:tachyon, :store, :stats]` events and roll event flushes (default
      1000, `nil` for none).

  ## Errors

    * `{:error, :message_too_large}`, `{:error, :closed}`,
      `{:error, :not_found}`, `{:error, :read_only}` (append to a reader),
      `{:error, :locked}` (another writer has the directory),
      `{:error, :enospc}` (disk full: the message is not stored, the log
      stays valid), `{:error, {:corrupt, segment, offset}}`, and POSIX
      atoms (`:eacces`, ...) for other I/O errors.
    * Wrong argument types and bad options raise `ArgumentError`.

  ## Recovery

  A writer's open checks every record of the active segment (length and
  CRC32C) and rebuilds its index. A torn record at the end (power loss during
  a write) is cut; a record that does not verify in the middle of the log is
  `{:error, {:corrupt, segment, offset}}` unless `repair: true`. What was
  found is returned by `recovery/1`, logged when something was cut, and sent
  as `[:tachyon, :store, :recover]` telemetry.

  ## Concurrency

  Appends from many processes are safe (a short lock in Rust serialises
  them) and each process's own messages keep their order. Reads never wait
  for the writer beyond a reader lock held for a lookup.

  See `docs/FORMAT.md` for the file format and `docs/ARCHITECTURE.md` for the
  threads and files.
  """
  use GenServer, restart: :transient

  require Logger

  alias Tachyon.Native

  defstruct [:ref, :path, :mode, :name, :recovery]

  @typedoc "A store handle."
  @type t :: %__MODULE__{
          ref: reference(),
          path: String.t(),
          mode: :write | :read,
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
          | :message_too_large
          | :enospc
          | :locked
          | :read_only
          | :noproc
          | {:corrupt, non_neg_integer(), non_neg_integer()}
          | atom()

  @open_defaults [
    mode: :write,
    segment_size: 64 * 1024 * 1024,
    max_message_size: nil,
    max_segments: nil,
    max_bytes: nil,
    pretouch: true,
    pretouch_ahead: 32 * 1024 * 1024,
    repair: false,
    verify: :active
  ]

  @small_batch_count 1024
  @small_batch_bytes 1024 * 1024

  # -- starting ----------------------------------------------------------------

  @doc """
  Starts a process that opens the store at `:path`, registers it under
  `:name` and closes it when it stops. See the moduledoc for the options.

  ## Example

      {:ok, _pid} = Tachyon.Store.start_link(name: :events, path: "/tmp/events")
      {:ok, 0} = Tachyon.Store.append(:events, "hello")
  """
  @spec start_link(keyword()) :: GenServer.on_start()
  def start_link(opts) when is_list(opts) do
    name = Keyword.get(opts, :name)

    unless is_atom(name) and name != nil do
      raise ArgumentError,
            "the :name option is required and must be an atom, got: #{inspect(name)}"
    end

    path = Keyword.get(opts, :path)

    unless is_binary(path) do
      raise ArgumentError,
            "the :path option is required and must be a string, got: #{inspect(path)}"
    end

    interval = Keyword.get(opts, :stats_interval, 1000)

    unless interval == nil or (is_integer(interval) and interval > 0) do
      raise ArgumentError,
            "the :stats_interval option must be a positive integer or nil, got: #{inspect(interval)}"
    end

    open_opts = validate!(Keyword.drop(opts, [:name, :path, :stats_interval]))
    GenServer.start_link(__MODULE__, {name, path, open_opts, interval}, name: name)
  end

  @doc """
  Opens the store in `path` and returns a handle, with no process involved.
  The store is closed by `close/1` or when the handle is garbage-collected.
  See the moduledoc for the options.

  ## Example

      {:ok, store} = Tachyon.Store.open("/tmp/my_log", segment_size: 1024 * 1024)
      {:ok, reader} = Tachyon.Store.open("/tmp/my_log", mode: :read)
  """
  @spec open(Path.t(), keyword()) :: {:ok, t()} | {:error, reason()}
  def open(path, opts \\ []) when is_binary(path) and is_list(opts) do
    do_open(path, validate!(opts), nil)
  end

  @doc """
  Like `open/2` but raises on error.

  ## Example

      store = Tachyon.Store.open!("/tmp/my_log")
  """
  @spec open!(Path.t(), keyword()) :: t()
  def open!(path, opts \\ []) do
    case open(path, opts) do
      {:ok, store} -> store
      {:error, reason} -> raise File.Error, reason: reason, action: "open store", path: path
    end
  end

  defp do_open(path, opts, name) do
    t0 = System.monotonic_time()
    abs = Path.expand(path)

    case Native.store_open(abs, Map.new(opts)) do
      {:ok, ref, rec} ->
        store = %__MODULE__{ref: ref, path: abs, mode: opts[:mode], name: name, recovery: rec}
        report_open(store, rec, System.monotonic_time() - t0)
        {:ok, store}

      {:error, _} = error ->
        error
    end
  end

  defp report_open(store, rec, duration) do
    meta = %{path: store.path, mode: store.mode, name: store.name}

    Tachyon.Telemetry.execute(
      [:tachyon, :store, :open],
      %{duration: duration, segments: rec.segments, messages: rec.messages},
      meta
    )

    if store.mode == :write do
      Tachyon.Telemetry.execute(
        [:tachyon, :store, :recover],
        %{
          duration: System.convert_time_unit(rec.duration_ns, :nanosecond, :native),
          recovered: rec.recovered,
          truncated_bytes: rec.truncated_bytes,
          lost_records: rec.lost_records
        },
        %{path: store.path, segment: rec.segment, cut: rec.cut, offset: rec.offset}
      )

      if rec.cut do
        Logger.warning(
          "Tachyon.Store #{store.path}: recovery cut the log (#{rec.cut}) in segment #{rec.segment} " <>
            "at offset #{rec.offset}: #{rec.truncated_bytes} bytes truncated, #{rec.lost_records} records lost; " <>
            "#{rec.messages} messages kept"
        )
      end
    end
  end

  defp validate!(opts) do
    opts =
      try do
        Keyword.validate!(opts, @open_defaults)
      rescue
        e in ArgumentError ->
          reraise ArgumentError,
                  "invalid Tachyon.Store option: " <> Exception.message(e),
                  __STACKTRACE__
      end

    check!(opts, :mode, &(&1 in [:write, :read]), "must be :write or :read")

    check!(
      opts,
      :segment_size,
      &(is_integer(&1) and &1 >= 65_536 and &1 <= 3 * 1024 * 1024 * 1024 and rem(&1, 8) == 0),
      "must be a multiple of 8 between 65536 and 3 GiB"
    )

    opts =
      if opts[:max_message_size] == nil,
        do: Keyword.put(opts, :max_message_size, min(1024 * 1024, opts[:segment_size] - 8)),
        else: opts

    check!(
      opts,
      :max_message_size,
      &(is_integer(&1) and &1 >= 0),
      "must be a non-negative integer"
    )

    if opts[:max_message_size] + 8 > opts[:segment_size] do
      raise ArgumentError,
            "the :max_message_size option (#{opts[:max_message_size]}) must fit in a segment " <>
              "(:segment_size #{opts[:segment_size]} minus 8 bytes of header)"
    end

    check!(
      opts,
      :max_segments,
      &(&1 == nil or (is_integer(&1) and &1 > 0)),
      "must be a positive integer or nil"
    )

    check!(
      opts,
      :max_bytes,
      &(&1 == nil or (is_integer(&1) and &1 > 0)),
      "must be a positive integer or nil"
    )

    check!(opts, :pretouch, &is_boolean/1, "must be a boolean")
    check!(opts, :pretouch_ahead, &(is_integer(&1) and &1 >= 0), "must be a non-negative integer")
    check!(opts, :repair, &is_boolean/1, "must be a boolean")
    check!(opts, :verify, &(&1 in [:active, :all]), "must be :active or :all")
    opts
  end

  defp check!(opts, key, ok?, msg) do
    value = Keyword.fetch!(opts, key)

    unless ok?.(value) do
      raise ArgumentError, "the #{inspect(key)} option #{msg}, got: #{inspect(value)}"
    end
  end

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
    case :persistent_term.get({__MODULE__, name}, nil) do
      %__MODULE__{ref: ref} -> Native.store_append(ref, data)
      nil -> {:error, :noproc}
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
  """
  @spec read(store(), index()) :: {:ok, binary()} | {:error, reason()}
  def read(store, index) when is_integer(index) and index >= 0 do
    with {:ok, %__MODULE__{ref: ref}} <- resolve(store), do: Native.store_read(ref, index)
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

          {:error, reason} ->
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

          flush_events(s)
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
  `:disk_bytes`, `:unsynced_bytes`, `:pretouch`.

  ## Example

      {:ok, %{appended: 2}} = Tachyon.Store.stats(store)
  """
  @spec stats(store()) :: {:ok, map()} | {:error, reason()}
  def stats(store) do
    with {:ok, s} <- resolve(store) do
      flush_events(s)
      Native.store_stats(s.ref)
    end
  end

  @doc """
  What the writer's open found and did (see "Recovery" in the moduledoc).

  ## Example

      %{cut: nil, messages: 2} = Tachyon.Store.recovery(store)
  """
  @spec recovery(store()) :: recovery() | nil
  def recovery(store) do
    case resolve(store) do
      {:ok, s} -> s.recovery
      _ -> nil
    end
  end

  @doc """
  Closes the store: further calls get `{:error, :closed}`, the pre-touch
  thread is stopped and joined, the directory lock is released. It does not
  wait for the disk: call `sync/1` first if you need durability on power
  loss. For a named store, stops its process (which is not restarted).

  ## Example

      :ok = Tachyon.Store.close(store)
  """
  @spec close(store()) :: :ok
  def close(%__MODULE__{} = s) do
    flush_events(s)
    Native.store_close(s.ref)
  end

  def close(name) when is_atom(name) do
    case GenServer.whereis(name) do
      nil -> :ok
      _pid -> GenServer.call(name, :close, :infinity)
    end
  end

  @doc """
  Returns the handle of a store started with `start_link/1`.

  ## Example

      {:ok, %Tachyon.Store{}} = Tachyon.Store.whereis(:events)
  """
  @spec whereis(atom()) :: {:ok, t()} | {:error, :noproc}
  def whereis(name) when is_atom(name) do
    case :persistent_term.get({__MODULE__, name}, nil) do
      nil -> {:error, :noproc}
      s -> {:ok, s}
    end
  end

  defp resolve(%__MODULE__{} = s), do: {:ok, s}
  defp resolve(name) when is_atom(name), do: whereis(name)

  defp resolve(other),
    do: raise(ArgumentError, "expected a Tachyon.Store handle or name, got: #{inspect(other)}")

  defp flush_events(s) do
    for ev <- Native.store_take_events(s.ref) do
      {event, measurements} = Map.pop(ev, :event)

      Tachyon.Telemetry.execute([:tachyon, :store, event], measurements, %{
        path: s.path,
        name: s.name
      })
    end

    :ok
  end

  # -- the process -------------------------------------------------------------

  @impl true
  def init({name, path, opts, interval}) do
    Process.flag(:trap_exit, true)

    # A previous incarnation that was killed (no terminate/2) left its handle
    # here, still holding the directory lock: close it first.
    case :persistent_term.get({__MODULE__, name}, nil) do
      %__MODULE__{ref: ref} ->
        Native.store_close(ref)
        :persistent_term.erase({__MODULE__, name})

      nil ->
        :ok
    end

    case do_open(path, opts, name) do
      {:ok, store} ->
        :persistent_term.put({__MODULE__, name}, store)
        if interval, do: Process.send_after(self(), :tick, interval)
        {:ok, %{store: store, interval: interval}}

      {:error, reason} ->
        {:stop, reason}
    end
  end

  @impl true
  def handle_call(:close, _from, state) do
    shutdown(state)
    {:stop, :normal, :ok, %{state | store: nil}}
  end

  @impl true
  def handle_info(:tick, %{store: s, interval: interval} = state) do
    flush_events(s)

    case Native.store_stats(s.ref) do
      {:ok, st} ->
        Tachyon.Telemetry.execute(
          [:tachyon, :store, :stats],
          Map.take(st, [:appended, :appended_bytes, :segments, :first_index, :next_index]),
          %{path: s.path, name: s.name}
        )

      _ ->
        :ok
    end

    Process.send_after(self(), :tick, interval)
    {:noreply, state}
  end

  def handle_info(_msg, state), do: {:noreply, state}

  @impl true
  def terminate(_reason, state), do: shutdown(state)

  defp shutdown(%{store: nil}), do: :ok

  defp shutdown(%{store: s}) do
    :persistent_term.erase({__MODULE__, s.name})
    close(s)
  end
end

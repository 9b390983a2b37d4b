defmodule Tachyon.AsyncStore do
  @moduledoc """
  An asynchronous front for a `Tachyon.Store`: `append/2` copies the message
  into a preallocated ring in memory and returns; a writer thread (in Rust)
  drains the ring into the store in batches, paying for checksums, indexes,
  page faults and segment rolls off the caller's path.

  `append/2` returns the index the message will have in the store, known at
  enqueue time: an AsyncStore must be the store's only appender while it runs
  (two AsyncStores cannot wrap the same store; a direct
  `Tachyon.Store.append/2` is detected and stops the writer with
  `:index_conflict`).

  ## What each call guarantees

    * `append/2` returning `{:ok, index}` means **enqueued**: the message is
      in the ring, in memory. A crash of the VM before the writer took it
      loses it.
    * `flush/2` returning means **in the store**: everything enqueued before
      the call is in the store's page cache and survives a VM crash (even
      `kill -9`).
    * `Tachyon.Store.sync/1` (on `store/1`) after a flush means **durable** on
      power loss.

  ## Starting

  Under your own supervisor, owning its store:

      children = [
        {Tachyon.AsyncStore, name: :events, path: "/var/lib/my_app/events"}
      ]

      {:ok, index} = Tachyon.AsyncStore.append(:events, "hello")
      {:ok, ^index} = Tachyon.AsyncStore.flush(:events)

  or in front of a store you started yourself (start the store first, e.g.
  with a `:rest_for_one` supervisor, so that a store restart restarts the
  AsyncStore too):

      children = [
        {Tachyon.Store, name: :events_log, path: "/var/lib/my_app/events"},
        {Tachyon.AsyncStore, name: :events, store: :events_log}
      ]

  or without a process, with a handle (closed by `close/1` or when the
  handle is garbage-collected):

      {:ok, async} = Tachyon.AsyncStore.open("/tmp/events", segment_size: 1024 * 1024)
      {:ok, 0} = Tachyon.AsyncStore.append(async, "hello")
      :ok = Tachyon.AsyncStore.close(async)

      {:ok, store} = Tachyon.Store.open("/tmp/other")
      {:ok, async} = Tachyon.AsyncStore.open(store)

  `append/2` on a name is one `:persistent_term` lookup and one NIF call: no
  message to any process.

  ## Options

    * `:name` - `start_link/1` only, required: the atom to register under.
    * `:path` - open (and own) the store in this directory; any
      `Tachyon.Store` option (`:segment_size`, `:max_message_size`,
      `:max_segments`, ...) may be given alongside. The store is closed with
      the AsyncStore.
    * `:store` - instead of `:path`: a `Tachyon.Store` handle or the name of
      a started store to write to. It stays open after `close/1`.

  The AsyncStore's own options (defaults "from Rust" are the Rust
  `Config::default()`; `defaults/0` returns them):

  #{Tachyon.Options.docs(Tachyon.AsyncStore.Options.schema())}

  The largest message accepted is the store's `:max_message_size` or half
  the ring less 8 bytes, whichever is smaller (`max_message_size/1`).

  ## Disk use and directories

  An AsyncStore has no directory of its own: with `:path` it opens a
  `Tachyon.Store` there (the directory is a store's, and `Tachyon.Store`
  opens it later), so a directory of another part is refused as the store
  refuses it (`{:error, {:wrong_kind, kind}}`, nothing changed). Its disk
  use is the store's: a new one takes about 6.4 MB (a 2 MiB first segment
  and a prepared 4 MiB one), its segments double up to `:segment_size` as
  it is written to, and it keeps up to `:prepared_segments` of them ready
  ahead of the writer thread; see "Disk use" in `Tachyon.Store` for how to
  size them. Its own memory is the ring (`:ring_size`).

  ## Errors

    * `append/2`: `{:error, :full}` (see `:on_full`), `{:error,
      :too_large}`, `{:error, :closed}` (after `close/1`),
      `{:error, :noproc}` (no AsyncStore under that name), and after a writer
      failure the failure's reason (below).
    * Writer failures: a store error while writing (`:enospc` when the disk
      is full, `:enoent`, `:eacces`, ... when a segment cannot be created,
      `:closed` when the store was closed under it, `:index_conflict` when
      something else appended to the store). The writer stops; messages
      already written stay valid in the store (the store never leaves a
      partial record); messages still in the ring are not written (counted
      by `stats/1` as `:pending`); every later `append/2` and `flush/2`
      returns `{:error, reason}`; a `[:tachyon, :async_store,
      :writer_failed]` event and an error log say why. Close it and start a
      new one once the cause is fixed.
    * Bad options, timeouts out of range and messages that are not iodata
      raise `ArgumentError`; `open!/2` raises `Tachyon.Error`.

  ## Threads

  One writer thread per AsyncStore, named `tachyon-async`. It is stopped and
  joined by `close/1`, when the handle is garbage-collected, and (for
  `start_link/1`) when the owning process dies, even if it is killed: the
  ring is written out first.
  """
  require Logger

  alias Tachyon.{Named, Native, Options, Store}

  defstruct [:ref, :store, :name, :path, :owns_store, :max_message_size]

  @typedoc "An AsyncStore handle."
  @type t :: %__MODULE__{
          ref: reference(),
          store: Store.t(),
          name: atom() | nil,
          path: String.t(),
          owns_store: boolean(),
          max_message_size: non_neg_integer()
        }

  @typedoc "A handle or the name of an AsyncStore started with `start_link/1`."
  @type async :: t() | atom()

  @type index :: non_neg_integer()

  @type reason ::
          :full
          | :closed
          | :too_large
          | :noproc
          | :timeout
          | :index_conflict
          | :enospc
          | {:wrong_kind, :table | :sequencer | :unknown}
          | {:unsupported_format, pos_integer()}
          | atom()

  @async_keys Tachyon.AsyncStore.Options.keys()

  @default_timeout 5000

  # -- starting ----------------------------------------------------------------

  @doc """
  The child specification: `{Tachyon.AsyncStore, opts}` in a supervisor
  starts `start_link(opts)`. The child id is `{Tachyon.AsyncStore, name}`, so
  several AsyncStores can live under one supervisor. `:transient`: a
  deliberate `close/1` is not restarted.

  ## Example

      Supervisor.start_link([{Tachyon.AsyncStore, name: :events, path: "/tmp/events"}],
        strategy: :one_for_one
      )
  """
  @spec child_spec(keyword()) :: Supervisor.child_spec()
  def child_spec(opts), do: Named.child_spec(__MODULE__, opts)

  @doc """
  Starts a process that opens the AsyncStore (and its store, with `:path`),
  registers it under `:name`, emits its telemetry and closes it when it
  stops. See the moduledoc for the options.

  ## Example

      {:ok, _pid} = Tachyon.AsyncStore.start_link(name: :events, path: "/tmp/events")
      {:ok, 0} = Tachyon.AsyncStore.append(:events, "hello")
  """
  @spec start_link(keyword()) :: GenServer.on_start()
  def start_link(opts) when is_list(opts) do
    check_keys!(opts, name: [], path: [], store: [])
    {name, opts} = Keyword.pop(opts, :name)

    unless is_atom(name) and name != nil do
      raise ArgumentError,
            "the :name option is required and must be an atom, got: #{inspect(name)}"
    end

    {source, async_opts, store_opts} = split!(opts)

    Tachyon.AsyncStore.Server.start_link(name, source, async_opts, store_opts)
  end

  @doc """
  Opens an AsyncStore with no process involved and returns its handle.

  The first argument is either a directory (the store is opened there with
  the `Tachyon.Store` options in `opts`, and closed with the AsyncStore) or
  a `Tachyon.Store` handle or name (wrapped; it stays open). It is closed by
  `close/1` or when the handle is garbage-collected.

  ## Examples

      {:ok, async} = Tachyon.AsyncStore.open("/tmp/events", ring_size: 1024 * 1024)

      {:ok, store} = Tachyon.Store.open("/tmp/other")
      {:ok, async} = Tachyon.AsyncStore.open(store, on_full: :error)
  """
  @spec open(Path.t() | Store.store(), keyword()) :: {:ok, t()} | {:error, reason()}
  def open(path_or_store, opts \\ []) when is_list(opts) do
    if Keyword.has_key?(opts, :path) or Keyword.has_key?(opts, :store) or
         Keyword.has_key?(opts, :name) do
      raise ArgumentError,
            "open/2 takes the directory or store as its first argument; " <>
              ":path, :store and :name are not options of open/2"
    end

    check_keys!(opts, [])
    key = if is_binary(path_or_store) or is_list(path_or_store), do: :path, else: :store
    {source, async_opts, store_opts} = split!([{key, path_or_store} | opts])
    do_open(source, async_opts, store_opts, nil, nil)
  end

  @doc """
  Like `open/2` but raises `Tachyon.Error` on error.

  ## Example

      async = Tachyon.AsyncStore.open!("/tmp/events")
  """
  @spec open!(Path.t() | Store.store(), keyword()) :: t()
  def open!(path_or_store, opts \\ []) do
    case open(path_or_store, opts) do
      {:ok, async} ->
        async

      {:error, reason} ->
        target =
          if is_binary(path_or_store) or is_list(path_or_store),
            do: Tachyon.Options.path!(path_or_store)

        raise Tachyon.Error, reason: reason, part: __MODULE__, target: target
    end
  end

  # Every key is the AsyncStore's, the store's or one of `extra` (a schema).
  defp check_keys!(opts, extra) do
    schemas = [extra, Tachyon.AsyncStore.Options.schema(), Tachyon.Store.Options.open_schema()]

    Tachyon.Options.check_keys!(opts, schemas, "Tachyon.AsyncStore")
  end

  # Splits options into {source, async options, store options} and validates
  # the async ones (the store ones are validated by Tachyon.Store.open/2).
  defp split!(opts) do
    {path, opts} = Keyword.pop(opts, :path)
    {store, opts} = Keyword.pop(opts, :store)
    {async_opts, store_opts} = Keyword.split(opts, @async_keys)

    source =
      cond do
        path != nil and store != nil ->
          raise ArgumentError, "give either the :path or the :store option, not both"

        path != nil ->
          {:path, Tachyon.Options.check!(:path, path, :path)}

        match?(%Store{}, store) or (is_atom(store) and store != nil) ->
          {:store, store}

        store != nil ->
          raise ArgumentError,
                "the :store option must be a Tachyon.Store handle or name, got: #{inspect(store)}"

        true ->
          raise ArgumentError, "either the :path or the :store option is required"
      end

    if match?({:store, _}, source) and store_opts != [] do
      raise ArgumentError,
            "store options (#{inspect(Keyword.keys(store_opts))}) are only valid with :path; " <>
              "the AsyncStore options are #{inspect(@async_keys)}"
    end

    {source, Tachyon.AsyncStore.Options.validate!(async_opts), store_opts}
  end

  @doc """
  The defaults of the AsyncStore's own options on this machine (most from
  the Rust `Config::default()`).

  ## Example

      %{ring_size: 262_144, on_full: :spin} = Tachyon.AsyncStore.defaults()
  """
  @spec defaults() :: map()
  def defaults, do: Map.new(Tachyon.AsyncStore.Options.validate!([]))

  @doc """
  The writer's default `:wait` strategy on this machine: `:busy_spin` with
  more than two cores, `:backoff` otherwise.

  ## Example

      Tachyon.AsyncStore.default_wait()
      #=> :backoff
  """
  @spec default_wait() :: :busy_spin | :backoff
  def default_wait, do: Native.async_default_wait()

  @doc """
  The default `:ring_size` in bytes.

  ## Example

      Tachyon.AsyncStore.default_ring_size()
      #=> 262144
  """
  @spec default_ring_size() :: pos_integer()
  def default_ring_size, do: Options.native_default(:async_store, :ring_size)

  # Opens (or resolves) the store, then the AsyncStore in front of it.
  # `owner` is monitored by the resource (start_link); `report_to` gets the
  # writer's reports (the owner, or a small reporter process for open/2).
  @doc false
  def do_open(source, async_opts, store_opts, name, owner) do
    with {:ok, store, owns?} <- resolve_store(source, store_opts) do
      meta = %{name: name, path: store.path}
      report_to = owner || spawn_reporter(meta)
      nif_opts = Tachyon.AsyncStore.Options.to_nif(async_opts)

      id = System.unique_integer([:positive])

      case Native.async_open(store.ref, nif_opts, report_to, id, owner, owns?) do
        {:ok, ref, max} ->
          {:ok,
           %__MODULE__{
             ref: ref,
             store: store,
             name: name,
             path: store.path,
             owns_store: owns?,
             max_message_size: max
           }}

        {:error, _} = error ->
          if owner == nil, do: send(report_to, :stop)
          if owns?, do: Store.close(store)
          error
      end
    end
  end

  defp resolve_store({:path, path}, store_opts) do
    if store_opts[:access] == :read or store_opts[:mode] == :read do
      raise ArgumentError, "an AsyncStore writes: the store's :access must be :write"
    end

    case Store.open(path, store_opts) do
      {:ok, store} -> {:ok, store, true}
      {:error, _} = error -> error
    end
  end

  defp resolve_store({:store, %Store{} = store}, _), do: {:ok, store, false}

  defp resolve_store({:store, name}, _) when is_atom(name) do
    case Store.whereis(name) do
      {:ok, store} -> {:ok, store, false}
      {:error, _} = error -> error
    end
  end

  # -- the hot path ------------------------------------------------------------

  @doc """
  Enqueues a message (a binary or iodata) and returns the index it will have
  in the store. Runs on the caller's scheduler; with `on_full: :spin` a full
  ring makes it wait at most `:spin_timeout_us` microseconds.

  ## Example

      {:ok, 0} = Tachyon.AsyncStore.append(async, "first")
      {:ok, 1} = Tachyon.AsyncStore.append(async, ["sec", ?o, "nd"])
  """
  @spec append(async(), iodata()) :: {:ok, index()} | {:error, reason()}
  def append(%__MODULE__{ref: ref}, data) when is_binary(data) or is_list(data),
    do: Native.async_append(ref, data)

  def append(name, data) when is_atom(name) and (is_binary(data) or is_list(data)) do
    case Named.whereis(__MODULE__, name) do
      {:ok, %__MODULE__{ref: ref}} -> Native.async_append(ref, data)
      error -> error
    end
  end

  def append(async, data) when is_binary(data) or is_list(data),
    do:
      raise(
        ArgumentError,
        "expected a Tachyon.AsyncStore handle or name, got: #{inspect(async)}"
      )

  def append(_async, data),
    do: raise(ArgumentError, "a message must be a binary or iodata, got: #{inspect(data)}")

  @doc """
  Waits until every message enqueued before the call is in the store (at
  most `timeout` milliseconds, on a dirty I/O scheduler; `:infinity` or
  0..4294967295, anything else raises `ArgumentError`). Returns the index
  of the last message in the store at that point (`nil` if the store is
  empty): it is at least the index of every message appended before the
  call.

  ## Example

      {:ok, 7} = Tachyon.AsyncStore.append(async, "x")
      {:ok, 7} = Tachyon.AsyncStore.flush(async)
  """
  @spec flush(async(), timeout()) :: {:ok, index() | nil} | {:error, reason()}
  def flush(async, timeout \\ @default_timeout) do
    ms = Options.timeout!(timeout)

    with {:ok, a} <- resolve(async) do
      case Native.async_flush(a.ref, ms) do
        {:ok, 0} -> {:ok, nil}
        {:ok, next} -> {:ok, next - 1}
        {:error, _} = error -> error
      end
    end
  end

  @doc """
  Waits until the ring is empty (at most `timeout` milliseconds), like
  CoralStore's `drainAndWait`. Unlike `flush/2` it also waits for messages
  other processes append meanwhile, so under a steady load from others it
  may time out.

  ## Example

      :ok = Tachyon.AsyncStore.drain(async)
  """
  @spec drain(async(), timeout()) :: :ok | {:error, reason()}
  def drain(async, timeout \\ @default_timeout) do
    ms = Options.timeout!(timeout)
    with {:ok, a} <- resolve(async), do: Native.async_drain(a.ref, ms)
  end

  @doc """
  Counters and gauges:

    * `:enqueued` - messages accepted by `append/2`
    * `:written` - messages the writer put in the store
    * `:pending` - enqueued but not written (yet; or never, after a failure)
    * `:written_bytes`, `:batches` - payload bytes and store batches written
    * `:full_events` - appends that found the ring full
    * `:rejected` - appends that returned `{:error, :full}`
    * `:high_water_bytes` - the most ring bytes in use the writer saw
    * `:ring_size`, `:ring_used` - ring bytes, and bytes in use now
    * `:base_index`, `:next_index` - the store index of this AsyncStore's
      first message, and the index the next append gets
    * `:state` - `:running`, `:failed`, `:closing` or `:closed`
    * `:wait`, `:pinned` - the writer's wait strategy; whether it is pinned
      (`nil` if no `:core` was asked)

  ## Example

      {:ok, %{enqueued: 2, written: 2, pending: 0}} = Tachyon.AsyncStore.stats(async)
  """
  @spec stats(async()) :: {:ok, map()} | {:error, reason()}
  def stats(async) do
    with {:ok, a} <- resolve(async), do: {:ok, Native.async_stats(a.ref)}
  end

  @doc """
  The largest message `append/2` accepts: `{:ok, bytes}`, or
  `{:error, :noproc}` for a name no AsyncStore runs under.

  ## Example

      Tachyon.AsyncStore.max_message_size(async)
      #=> {:ok, 1048576}
  """
  @spec max_message_size(async()) :: {:ok, non_neg_integer()} | {:error, :noproc}
  def max_message_size(async) do
    with {:ok, a} <- resolve(async), do: {:ok, a.max_message_size}
  end

  @doc """
  The store written to, for reading (`Tachyon.Store.read/2`,
  `Tachyon.Store.stream/2`) and `Tachyon.Store.sync/1`. Do not append to it
  directly while the AsyncStore runs.

  ## Example

      {:ok, store} = Tachyon.AsyncStore.store(async)
      {:ok, "first"} = Tachyon.Store.read(store, 0)
  """
  @spec store(async()) :: {:ok, Store.t()} | {:error, :noproc}
  def store(async) do
    with {:ok, a} <- resolve(async), do: {:ok, a.store}
  end

  @doc """
  Stops accepting messages, lets the writer write everything queued, stops
  and joins the writer thread, and closes the store if the AsyncStore opened
  it. Returns `{:error, reason}` if the writer had failed (its queued
  messages were not written). For a named AsyncStore, stops its process
  for good (it is not restarted); `{:error, :noproc}` if none runs.

  ## Example

      :ok = Tachyon.AsyncStore.close(async)
      {:error, :closed} = Tachyon.AsyncStore.append(async, "late")
  """
  @spec close(async()) :: :ok | {:error, reason()}
  def close(%__MODULE__{} = a) do
    result = Native.async_close(a.ref)
    if a.owns_store, do: Store.close(a.store)
    result
  end

  def close(name) when is_atom(name), do: Named.close(name)

  @doc """
  Returns the handle of an AsyncStore started with `start_link/1`.

  ## Example

      {:ok, %Tachyon.AsyncStore{}} = Tachyon.AsyncStore.whereis(:events)
  """
  @spec whereis(atom()) :: {:ok, t()} | {:error, :noproc}
  def whereis(name) when is_atom(name), do: Named.whereis(__MODULE__, name)

  defp resolve(async), do: Named.resolve(__MODULE__, async)

  # -- reports from the writer thread ------------------------------------------

  # For open/2 handles: a small process that turns the writer's reports into
  # telemetry and logs. It holds no reference to the handle (so the handle
  # can still be garbage-collected) and exits with the writer's last report.
  defp spawn_reporter(meta) do
    spawn(fn -> reporter_loop(meta) end)
  end

  defp reporter_loop(meta) do
    receive do
      :stop ->
        :ok

      {:tachyon_report, :async_store, _id, kind, fields} ->
        handle_report(kind, fields, meta)
        if kind not in [:writer_failed, :stopped], do: reporter_loop(meta)
    end
  end

  # The writer's reports come on the report channel (tachyon_nif's
  # deliver::reporter): {:tachyon_report, :async_store, id, kind, fields}.
  @doc false
  def handle_report(:stats, stats, meta) do
    Tachyon.Telemetry.execute(
      [:tachyon, :async_store, :stats],
      Map.take(stats, [
        :enqueued,
        :written,
        :pending,
        :written_bytes,
        :batches,
        :full_events,
        :rejected,
        :high_water_bytes,
        :ring_used
      ]),
      meta
    )
  end

  def handle_report(:writer_failed, %{reason: reason, detail: detail, stats: stats}, meta) do
    # A full disk: the segment the store could not get, and the space left.
    detail =
      case Tachyon.Error.details(reason, meta.path) do
        %{asked_bytes: asked, free_bytes: free} ->
          "#{detail}: a #{Tachyon.Error.format_bytes(asked)} segment could not be created " <>
            "(#{Tachyon.Error.format_bytes(free)} free)"

        _ ->
          detail
      end

    Logger.error(
      "Tachyon.AsyncStore #{meta.path}: the writer stopped: #{detail} (#{inspect(reason)}). " <>
        "#{stats.written} messages were written, #{stats.pending} queued ones were not; " <>
        "appends now return {:error, #{inspect(reason)}}"
    )

    Tachyon.Telemetry.execute(
      [:tachyon, :async_store, :writer_failed],
      %{enqueued: stats.enqueued, written: stats.written, lost: stats.pending},
      Map.merge(meta, %{reason: reason, detail: detail})
    )
  end

  def handle_report(:stopped, _stats, _meta), do: :ok
end

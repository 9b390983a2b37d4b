defmodule Tachyon.PartServer do
  @moduledoc false
  # The one process skeleton of every part that owns a native handle:
  # Tachyon.Store, Tachyon.AsyncStore, Tachyon.Table, Tachyon.Echo,
  # Tachyon.Sequencer and Tachyon.Bus (`start_link/1` of each). A part
  # gives a callback module (`Tachyon.Store.Server`, ...); this module
  # does the rest, the same way for all:
  #
  #   * opening: in the server's `init/1` (`open: :in_server`, the
  #     default) through `Tachyon.Named.open/4` (traps exits, closes an
  #     orphan left by a killed incarnation, publishes the handle), or in
  #     the caller (`open: :in_caller`, for parts that bind a port: a port
  #     in use is an `{:error, _}` return of `start_link/1`, not an exit
  #     signal), the orphan closed first and the handle adopted by `init/1`;
  #   * the stats tick: a `:tick` message every `:interval` ms (`nil`:
  #     none). Each tick runs the part's `tick/1` (flushing events queued
  #     in Rust: rolls, compactions), then `stats/2`: `{:ok, measurements}`
  #     is `[:tachyon, part, :stats]`; `{:error, :closed}` (the handle was
  #     closed behind the process's back) stops the process with `:normal`,
  #     for good; any other error is skipped until the next tick;
  #   * events from the report channel: `{:tachyon_report, part, id, kind,
  #     fields}` (tachyon_nif's deliver::reporter, sent by the part's own
  #     thread as things happen) go to `report/3`. Nothing is learnt by
  #     polling on the tick;
  #   * by pid (`by_pid: true`): the handle is also published under
  #     `{Module, pid}`, so that the part's functions take the process's pid
  #     with one lookup, as they take its name;
  #   * calls: `:handle`, `:info`, `:stats` and `:tachyon_close`
  #     (`Tachyon.Named.close/2`: closes, replies with what closing
  #     returned, stops with `:normal`); others go to `call/3`;
  #   * exits: a linked process's crash stops the server with its reason
  #     (`:normal` exits are ignored); `terminate/2` always closes the
  #     handle, also on a supervisor's shutdown;
  #   * the child spec (`Tachyon.Named.child_spec/3`): id `{Module, name}`,
  #     `restart: :transient`.
  #
  # The state every callback sees: %{callback, module, part, name (the
  # registered atom or nil), handle, data (the part's own map), interval,
  # stop_event, by_pid}.

  use GenServer

  alias Tachyon.{Named, Telemetry}
  alias Tachyon.Auth.Watch

  @type state :: %{
          callback: module(),
          module: module(),
          part: atom(),
          name: atom() | nil,
          handle: term(),
          data: map(),
          interval: pos_integer() | nil,
          stop_event: boolean(),
          by_pid: boolean(),
          rejected: map()
        }

  @doc "Opens the handle: `{:ok, handle, data}` (`data` a map) or `{:error, reason}`."
  @callback open(arg :: term()) :: {:ok, handle :: term(), data :: map()} | {:error, term()}

  @doc "Closes a handle (also an orphan's); the result is what `close/1` of the part returns."
  @callback close(handle :: term()) :: term()

  @doc "The measurements of `[:tachyon, part, :stats]`, or an error."
  @callback stats(handle :: term(), data :: map()) :: {:ok, map()} | {:error, term()}

  @doc "The metadata of the part's events."
  @callback meta(state()) :: map()

  @doc "After the handle is open or adopted, in `init/1` (subscriptions, monitors)."
  @callback init_handle(state()) :: state()

  @doc "At each stats tick, before `stats/2` (events queued in Rust)."
  @callback tick(state()) :: state()

  @doc "A report from the part's thread."
  @callback report(kind :: atom(), fields :: map(), state()) :: state()

  @doc "Any other message: the new state, or `{:stop, reason, state}` to stop the process."
  @callback message(msg :: term(), state()) :: state() | {:stop, term(), state()}

  @doc "Calls other than the skeleton's."
  @callback call(request :: term(), GenServer.from(), state()) ::
              {:reply, term(), state()} | {:noreply, state()}

  @doc "The measurements of `[:tachyon, part, :start]` (`duration` of the open in native units)."
  @callback started(state(), duration :: integer()) :: map()

  @optional_callbacks init_handle: 1, tick: 1, report: 3, message: 2, call: 3, started: 2

  @doc """
  Starts the process of `callback`'s part. `opts`: `:module` (the public
  module: the `Tachyon.Named` key), `:part` (the telemetry name), `:name`
  (a GenServer name; an atom is also the `Tachyon.Named` name),
  `:interval` (ms or nil), `:open` (`:in_server` or `:in_caller`),
  `:stop_event` (emit `[:tachyon, part, :stop]` with the last stats),
  `:by_pid` (also publish the handle under the process's pid).
  """
  @spec start_link(module(), term(), keyword()) :: GenServer.on_start()
  def start_link(callback, arg, opts) do
    gen_name = Keyword.get(opts, :name)
    gen_opts = if gen_name, do: [name: gen_name], else: []

    case Keyword.get(opts, :open, :in_server) do
      :in_server ->
        GenServer.start_link(__MODULE__, {:open, callback, arg, opts}, gen_opts)

      :in_caller ->
        start_in_caller(callback, arg, opts, gen_opts)
    end
  end

  defp start_in_caller(callback, arg, opts, gen_opts) do
    module = Keyword.fetch!(opts, :module)
    named = registered(Keyword.get(opts, :name))

    # A named server that was killed (no terminate/2) left its handle
    # behind: close it before opening again. Only when no process holds
    # the name, so a live server is never touched.
    if named && Process.whereis(named) == nil,
      do: Named.close_orphan(module, named, &callback.close/1)

    t0 = System.monotonic_time()

    case callback.open(arg) do
      {:ok, handle, data} ->
        opened = {handle, data, System.monotonic_time() - t0}

        case GenServer.start_link(__MODULE__, {:adopt, callback, opened, opts}, gen_opts) do
          {:ok, _pid} = ok ->
            ok

          other ->
            callback.close(handle)
            other
        end

      {:error, _} = error ->
        error
    end
  end

  @impl true
  def init({:open, callback, arg, opts}) do
    state = new_state(callback, opts)
    t0 = System.monotonic_time()

    case Named.open(state.module, state.name, fn -> callback.open(arg) end, &callback.close/1) do
      {:ok, handle, data} ->
        if state.by_pid, do: Named.publish(state.module, self(), handle)
        started(%{state | handle: handle, data: data}, System.monotonic_time() - t0)

      {:error, reason} ->
        {:stop, reason}
    end
  end

  def init({:adopt, callback, {handle, data, duration}, opts}) do
    # terminate/2 must run on a supervisor's shutdown, to close the handle.
    Process.flag(:trap_exit, true)
    state = %{new_state(callback, opts) | handle: handle, data: data}
    if state.name, do: Named.publish(state.module, state.name, handle)
    if state.by_pid, do: Named.publish(state.module, self(), handle)
    started(state, duration)
  end

  defp new_state(callback, opts) do
    %{
      callback: callback,
      module: Keyword.fetch!(opts, :module),
      part: Keyword.fetch!(opts, :part),
      name: registered(Keyword.get(opts, :name)),
      handle: nil,
      data: %{},
      interval: Keyword.get(opts, :interval),
      stop_event: Keyword.get(opts, :stop_event, false),
      by_pid: Keyword.get(opts, :by_pid, false),
      rejected: Watch.new()
    }
  end

  defp started(state, duration) do
    state = optional(state, :init_handle, [state], state)

    if function_exported?(state.callback, :started, 2),
      do: emit(state, :start, state.callback.started(state, duration))

    schedule(state.interval)
    {:ok, state}
  end

  @impl true
  def handle_call(:tachyon_close, _from, state) do
    {:stop, :normal, release(state), %{state | handle: nil}}
  end

  def handle_call(:handle, _from, state), do: {:reply, state.handle, state}
  def handle_call(:info, _from, state), do: {:reply, Map.get(state.data, :info), state}

  def handle_call(:stats, _from, state),
    do: {:reply, state.callback.stats(state.handle, state.data), state}

  def handle_call(request, from, state) do
    if function_exported?(state.callback, :call, 3),
      do: state.callback.call(request, from, state),
      else: {:reply, {:error, :unknown_call}, state}
  end

  @impl true
  def handle_info(:tick, %{handle: nil} = state), do: {:noreply, state}

  def handle_info(:tick, state) do
    state = optional(state, :tick, [state], state)

    case state.callback.stats(state.handle, state.data) do
      {:ok, measurements} ->
        emit(state, :stats, measurements)
        label = "#{inspect(state.module)} #{inspect(state.name || self())}"
        emit_rejected = &emit(state, :rejected, &1)

        state = %{
          state
          | rejected: Watch.note(state.rejected, measurements, label, emit_rejected)
        }

        schedule(state.interval)
        {:noreply, state}

      {:error, :closed} ->
        {:stop, :normal, state}

      {:error, _} ->
        schedule(state.interval)
        {:noreply, state}
    end
  end

  def handle_info({:tachyon_report, _part, _id, kind, fields}, state),
    do: {:noreply, optional(state, :report, [kind, fields, state], state)}

  # Exits of the parent are handled by GenServer itself (terminate/2 runs);
  # a crash of another linked process stops us as it would without trapping.
  def handle_info({:EXIT, _pid, :normal}, state), do: {:noreply, state}
  def handle_info({:EXIT, _pid, reason}, state), do: {:stop, reason, state}

  def handle_info(msg, state) do
    case optional(state, :message, [msg, state], state) do
      {:stop, reason, state} -> {:stop, reason, state}
      state -> {:noreply, state}
    end
  end

  @impl true
  def terminate(_reason, state), do: release(state)

  defp release(%{handle: nil}), do: :ok

  defp release(state) do
    last = if state.stop_event, do: state.callback.stats(state.handle, state.data)
    if state.by_pid, do: :persistent_term.erase({state.module, self()})
    result = Named.release(state.module, state.name, state.handle, &state.callback.close/1)
    with {:ok, m} <- last, do: emit(state, :stop, m)
    result
  end

  defp optional(state, fun, args, default) do
    if function_exported?(state.callback, fun, length(args)),
      do: apply(state.callback, fun, args),
      else: default
  end

  defp emit(state, event, measurements),
    do: Telemetry.execute([:tachyon, state.part, event], measurements, state.callback.meta(state))

  defp schedule(nil), do: :ok
  defp schedule(ms), do: Process.send_after(self(), :tick, ms)

  defp registered(name) when is_atom(name) and name != nil, do: name
  defp registered(_), do: nil
end

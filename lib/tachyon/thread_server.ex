defmodule Tachyon.ThreadServer do
  @moduledoc false
  # The process of a part whose NIF resource runs a thread of its own
  # (Tachyon.Echo, Tachyon.Sequencer): holds the resource, publishes it
  # under `{module, name}` (Tachyon.Named), emits `[:tachyon, part, :start |
  # :stats | :stop]`, and stops (joins) the thread when it terminates,
  # including on a supervisor's shutdown.
  #
  # `spec`: %{module, part, ref, info, name, interval, stats: (ref -> map |
  # {:ok, map} | {:error, _}), stop: (ref -> any), meta: (state -> map),
  # start: measurements of the start event}, and optional hooks: `init`
  # (state -> state), `tick` (state -> state, at each stats interval and
  # before each `:info` call), `info_hook` ((msg, state) -> state, for
  # other messages).

  use GenServer

  def start_link(spec, gen_opts), do: GenServer.start_link(__MODULE__, spec, gen_opts)

  @impl true
  def init(spec) do
    # terminate/2 must run on a supervisor's shutdown, to join the thread.
    Process.flag(:trap_exit, true)

    state =
      spec
      |> Map.take([:module, :part, :ref, :info, :name, :interval, :stats, :stop, :meta])
      |> Map.merge(%{
        tick: Map.get(spec, :tick, & &1),
        info_hook: Map.get(spec, :info_hook, fn _msg, st -> st end)
      })

    state = Map.get(spec, :init, & &1).(state)

    if is_atom(state.name) and state.name != nil,
      do: :persistent_term.put({state.module, state.name}, state)

    emit(state, :start, spec.start)
    schedule(state.interval)
    {:ok, state}
  end

  @impl true
  def handle_call(:info, _from, state) do
    state = state.tick.(state)
    {:reply, state.info, state}
  end

  def handle_call(:stats, _from, state), do: {:reply, state.stats.(state.ref), state}
  def handle_call(:ref, _from, state), do: {:reply, state.ref, state}

  @impl true
  def handle_info(:stats, state) do
    state = state.tick.(state)
    with %{} = m <- measurements(state), do: emit(state, :stats, m)
    schedule(state.interval)
    {:noreply, state}
  end

  # Exits of the parent are handled by GenServer itself (terminate/2 runs);
  # a crash of another linked process stops us as it would without trapping.
  def handle_info({:EXIT, _pid, :normal}, state), do: {:noreply, state}
  def handle_info({:EXIT, _pid, reason}, state), do: {:stop, reason, state}
  def handle_info(other, state), do: {:noreply, state.info_hook.(other, state)}

  @impl true
  def terminate(_reason, state) do
    if is_atom(state.name) and state.name != nil,
      do: :persistent_term.erase({state.module, state.name})

    last = measurements(state)
    state.stop.(state.ref)
    with %{} = m <- last, do: emit(state, :stop, m)
  end

  defp measurements(state) do
    case state.stats.(state.ref) do
      {:ok, %{} = m} -> m
      %{} = m -> m
      _ -> nil
    end
  end

  defp emit(state, event, measurements),
    do: Tachyon.Telemetry.execute([:tachyon, state.part, event], measurements, state.meta.(state))

  defp schedule(nil), do: :ok
  defp schedule(ms), do: Process.send_after(self(), :stats, ms)
end

defmodule Tachyon.Store.Server do
  @moduledoc false
  # The process of a named Tachyon.Store (Tachyon.Store.start_link/1): owns
  # the handle (Tachyon.Named), emits the periodic stats event and the roll
  # events, closes the store when it stops.

  use GenServer

  alias Tachyon.{Named, Native, Store}

  @impl true
  def init({server, open}) do
    name = server[:name]

    case Named.open(Store, name, fn -> Store.do_open(server[:path], open, name) end, &close/1) do
      {:ok, store} ->
        schedule(server[:stats_interval])
        {:ok, %{store: store, interval: server[:stats_interval]}}

      {:error, reason} ->
        {:stop, reason}
    end
  end

  @impl true
  def handle_call(:tachyon_close, _from, state) do
    {:stop, :normal, release(state), %{state | store: nil}}
  end

  @impl true
  def handle_info(:tick, %{store: s} = state) do
    Store.flush_events(s)

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

    schedule(state.interval)
    {:noreply, state}
  end

  def handle_info(_msg, state), do: {:noreply, state}

  @impl true
  def terminate(_reason, state), do: release(state)

  defp release(%{store: nil}), do: :ok
  defp release(%{store: s}), do: Named.release(Store, s.name, s, &close/1)

  defp close(s), do: Store.close(s)

  defp schedule(nil), do: :ok
  defp schedule(ms), do: Process.send_after(self(), :tick, ms)
end

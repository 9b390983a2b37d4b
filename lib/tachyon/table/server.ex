defmodule Tachyon.Table.Server do
  @moduledoc false
  # The process of a Tachyon.Table started with start_link/1: owns the
  # handle (Tachyon.Named: an orphan left by a killed incarnation is closed
  # before reopening, so the restart does not find the directory locked),
  # emits the periodic stats and compaction events, closes the table when it
  # stops.

  use GenServer

  alias Tachyon.{Named, Native, Table, Telemetry}

  @stats_keys [
    :keys,
    :puts,
    :deletes,
    :segments,
    :disk_bytes,
    :live_bytes,
    :total_bytes,
    :compactions
  ]

  @impl true
  def init({server, open}) do
    name = server[:name]

    case Named.open(Table, name, fn -> Table.do_open(server[:path], open, name) end, &close/1) do
      {:ok, t} ->
        schedule(server[:stats_interval])
        {:ok, %{table: t, interval: server[:stats_interval]}}

      {:error, reason} ->
        {:stop, reason}
    end
  end

  @impl true
  def handle_call(:table, _from, state), do: {:reply, state.table, state}

  def handle_call(:tachyon_close, _from, state) do
    {:stop, :normal, release(state), %{state | table: nil}}
  end

  @impl true
  def handle_info(:tick, %{table: t} = state) do
    Table.emit_events(t)

    case Native.table_stats(t.ref) do
      {:ok, s} ->
        Telemetry.execute(
          [:tachyon, :table, :stats],
          Map.take(s, @stats_keys),
          %{path: t.path, name: t.name}
        )

        schedule(state.interval)
        {:noreply, state}

      {:error, :closed} ->
        {:stop, :normal, state}

      {:error, _} ->
        schedule(state.interval)
        {:noreply, state}
    end
  end

  def handle_info(_msg, state), do: {:noreply, state}

  @impl true
  def terminate(_reason, state), do: release(state)

  defp release(%{table: nil}), do: :ok
  defp release(%{table: t}), do: Named.release(Table, t.name, t, &close/1)

  defp close(t) do
    Table.emit_events(t)
    Native.table_close(t.ref)
  end

  defp schedule(nil), do: :ok
  defp schedule(ms), do: Process.send_after(self(), :tick, ms)
end

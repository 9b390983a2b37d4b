defmodule Tachyon.Table.Server do
  @moduledoc false
  # The part callbacks of a Tachyon.Table started with start_link/1
  # (Tachyon.PartServer runs the process): opens the table in the server
  # (an orphan left by a killed incarnation is closed first, so the restart
  # does not find the directory locked), emits the compaction events queued
  # in Rust and `[:tachyon, :table, :stats]` at each stats tick, closes the
  # table when the process stops.

  @behaviour Tachyon.PartServer

  alias Tachyon.{Native, PartServer, Table}

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

  @doc "Starts the process (options already validated)."
  def start_link(server, open) do
    PartServer.start_link(__MODULE__, {server[:path], open, server[:name]},
      module: Table,
      part: :table,
      name: server[:name],
      interval: server[:stats_interval_ms]
    )
  end

  @impl true
  def open({path, open, name}) do
    with {:ok, t} <- Table.do_open(path, open, name), do: {:ok, t, %{}}
  end

  @impl true
  def close(t) do
    Table.emit_events(t)
    Native.table_close(t.ref)
  end

  @impl true
  def tick(state) do
    Table.emit_events(state.handle)
    state
  end

  @impl true
  def stats(t, _data) do
    with {:ok, s} <- Native.table_stats(t.ref), do: {:ok, Map.take(s, @stats_keys)}
  end

  @impl true
  def meta(%{handle: t}), do: %{path: t.path, name: t.name}
end

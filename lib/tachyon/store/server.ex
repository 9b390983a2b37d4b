defmodule Tachyon.Store.Server do
  @moduledoc false
  # The part callbacks of a named Tachyon.Store (Tachyon.PartServer runs
  # the process): opens the store in the server, flushes the roll events
  # queued in Rust at each stats tick, emits `[:tachyon, :store, :stats]`,
  # closes the store when the process stops.

  @behaviour Tachyon.PartServer

  alias Tachyon.{Native, PartServer, Store}

  @stats_keys [:appended, :appended_bytes, :segments, :first_index, :next_index]

  @doc "Starts the process (options already validated)."
  def start_link(server, open) do
    PartServer.start_link(__MODULE__, {server[:path], open, server[:name]},
      module: Store,
      part: :store,
      name: server[:name],
      interval: server[:stats_interval_ms]
    )
  end

  @impl true
  def open({path, open, name}) do
    with {:ok, store} <- Store.do_open(path, open, name), do: {:ok, store, %{}}
  end

  @impl true
  def close(store), do: Store.close(store)

  @impl true
  def tick(state) do
    Store.Report.events(state.handle)
    state
  end

  @impl true
  def stats(store, _data) do
    with {:ok, st} <- Native.store_stats(store.ref), do: {:ok, Map.take(st, @stats_keys)}
  end

  @impl true
  def meta(%{handle: store}), do: %{path: store.path, name: store.name}
end

defmodule Tachyon.AsyncStore.Server do
  @moduledoc false
  # The part callbacks of a named Tachyon.AsyncStore (Tachyon.PartServer
  # runs the process). The process is the monitored owner of the resource
  # (its death, even by a kill, stops the writer after writing out the
  # ring). No Elixir tick: the writer thread counts and sends its stats on
  # the report channel every `:stats_interval_ms`; each report is turned
  # into telemetry here, with the owned store's roll events.

  @behaviour Tachyon.PartServer

  alias Tachyon.{AsyncStore, Native, PartServer, Store}

  @doc "Starts the process (options already validated)."
  def start_link(name, source, async_opts, store_opts) do
    PartServer.start_link(__MODULE__, {name, source, async_opts, store_opts},
      module: AsyncStore,
      part: :async_store,
      name: name,
      interval: nil
    )
  end

  # An orphan's resource already stopped its writer when its owner died
  # (the resource monitors its owner); closing it also closes a store it
  # owned, releasing the directory lock.
  @impl true
  def open({name, source, async_opts, store_opts}) do
    with {:ok, a} <- AsyncStore.do_open(source, async_opts, store_opts, name, self()),
         do: {:ok, a, %{}}
  end

  @impl true
  def close(async), do: AsyncStore.close(async)

  @impl true
  def stats(async, _data), do: {:ok, Native.async_stats(async.ref)}

  @impl true
  def report(kind, fields, state) do
    AsyncStore.handle_report(kind, fields, meta(state))

    if kind == :stats and state.handle && state.handle.owns_store,
      do: Store.Report.events(state.handle.store)

    state
  end

  @impl true
  def meta(%{handle: a}), do: %{name: a.name, path: a.path}
end

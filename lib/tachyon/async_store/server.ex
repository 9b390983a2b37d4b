defmodule Tachyon.AsyncStore.Server do
  @moduledoc false
  # The process of a named Tachyon.AsyncStore (start_link/1): owns the handle
  # (Tachyon.Named), is the monitored owner of the resource (its death, even
  # by a kill, stops the writer after writing out the ring), and turns the
  # writer's reports into telemetry and logs.

  use GenServer

  alias Tachyon.{AsyncStore, Named, Store}

  @impl true
  def init({name, source, async_opts, store_opts}) do
    # An orphan's resource already stopped its writer when its owner died
    # (the resource monitors its owner); closing it also closes a store it
    # owned, releasing the directory lock.
    open = fn -> AsyncStore.do_open(source, async_opts, store_opts, name, self()) end

    case Named.open(AsyncStore, name, open, &AsyncStore.close/1) do
      {:ok, a} -> {:ok, %{async: a, meta: %{name: name, path: a.path}}}
      {:error, reason} -> {:stop, reason}
    end
  end

  @impl true
  def handle_call(:tachyon_close, _from, state) do
    {:stop, :normal, release(state), %{state | async: nil}}
  end

  @impl true
  def handle_info({:tachyon_report, :async_store, _id, kind, fields}, state) do
    AsyncStore.handle_report(kind, fields, state.meta)
    # Emit the owned store's roll events too (Tachyon.Store.stats/1 flushes
    # them).
    if kind == :stats and state.async && state.async.owns_store,
      do: Store.stats(state.async.store)

    {:noreply, state}
  end

  def handle_info(_msg, state), do: {:noreply, state}

  @impl true
  def terminate(_reason, state), do: release(state)

  defp release(%{async: nil}), do: :ok
  defp release(%{async: a}), do: Named.release(AsyncStore, a.name, a, &AsyncStore.close/1)
end

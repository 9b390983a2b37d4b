defmodule Tachyon.Application do
  @moduledoc false
  use Application

  # Starts the parts listed in the application environment, stores first so
  # that an AsyncStore can name a configured store with `store: name`:
  #
  #     config :tachyon,
  #       stores: [[name: :events_log, path: "/var/lib/app/events"]],
  #       async_stores: [[name: :events, store: :events_log]]
  #
  # :rest_for_one: a store that restarts restarts the parts started after it.
  @impl true
  def start(_type, _args) do
    # Every part's child id is {Module, name}: no ids needed here.
    children =
      [Tachyon.Bus.Events, Tachyon.Bus.Subscribers] ++
        Enum.map(Application.get_env(:tachyon, :stores, []), &{Tachyon.Store, &1}) ++
        Enum.map(Application.get_env(:tachyon, :async_stores, []), &{Tachyon.AsyncStore, &1}) ++
        Enum.map(Application.get_env(:tachyon, :sequencers, []), &{Tachyon.Sequencer, &1})

    Supervisor.start_link(children, strategy: :rest_for_one, name: Tachyon.Supervisor)
  end
end

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
    children =
      child_specs(Tachyon.Store, Application.get_env(:tachyon, :stores, [])) ++
        child_specs(Tachyon.AsyncStore, Application.get_env(:tachyon, :async_stores, []))

    Supervisor.start_link(children, strategy: :rest_for_one, name: Tachyon.Supervisor)
  end

  defp child_specs(mod, list) do
    for opts <- list do
      Supervisor.child_spec({mod, opts}, id: {mod, Keyword.fetch!(opts, :name)})
    end
  end
end

defmodule Tachyon.Application do
  @moduledoc false
  use Application

  @impl true
  def start(_type, _args) do
    stores =
      for opts <- Application.get_env(:tachyon, :stores, []) do
        Supervisor.child_spec({Tachyon.Store, opts},
          id: {Tachyon.Store, Keyword.fetch!(opts, :name)}
        )
      end

    Supervisor.start_link(stores, strategy: :one_for_one, name: Tachyon.Supervisor)
  end
end

defmodule Tachyon.Bus.Events do
  @moduledoc false
  # Turns every member's events into telemetry: each member sends its
  # `{:tachyon_bus_event, bus, kind, fields}` here as well as to its owner
  # (started by the application; a member opened without it only tells
  # its owner). `[:tachyon, :bus, kind]` with `fields` as measurements and
  # `%{bus: bus, member_id: id}` as metadata.

  use GenServer

  def start_link(_opts), do: GenServer.start_link(__MODULE__, nil, name: __MODULE__)

  @impl true
  def init(nil), do: {:ok, nil}

  @impl true
  def handle_info({:tachyon_bus_event, bus, kind, fields}, state) do
    Tachyon.Telemetry.execute([:tachyon, :bus, kind], fields, %{
      bus: bus,
      member_id: Map.get(fields, :member_id)
    })

    {:noreply, state}
  end

  def handle_info(_other, state), do: {:noreply, state}
end

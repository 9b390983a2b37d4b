defmodule Tachyon.Bus.Server do
  @moduledoc false
  # The part callbacks of a member started with Tachyon.Bus.start_link/1
  # (Tachyon.PartServer runs the process): joins the bus in the server (an
  # orphan member left under the name by a killed incarnation leaves the
  # bus first, so the restart does not find its member_id taken), emits
  # `[:tachyon, :bus, :stats]` at each tick, leaves the bus when the
  # process stops. The member's events go to its owner and to
  # Tachyon.Bus.Events (the `[:tachyon, :bus, kind]` telemetry).

  @behaviour Tachyon.PartServer

  alias Tachyon.{Bus, Native}

  @impl true
  def open(opts) do
    case Bus.open_info(opts) do
      {:ok, bus, info} -> {:ok, bus, %{info: info}}
      {:error, _} = error -> error
    end
  end

  # A shutdown waits a second at most for what the member published to be
  # delivered (the child spec's shutdown is 5 s).
  @impl true
  def close(bus), do: Native.bus_drain_close(bus, 1000)

  @impl true
  def stats(bus, _data), do: Native.bus_stats(bus)

  @impl true
  def meta(%{data: %{info: info}}), do: %{member_id: info.member_id}
end

defmodule :telemetry do
  @moduledoc false
  # A minimal stand-in for the :telemetry package (which Tachyon does not
  # depend on), compiled only in the test environment so that tests can
  # assert the events Tachyon emits. It implements the subset Tachyon and
  # the tests use: attach/4, detach/1, execute/3.

  def attach(id, event, fun, config) do
    handlers = :persistent_term.get({__MODULE__, :handlers}, %{})
    :persistent_term.put({__MODULE__, :handlers}, Map.put(handlers, id, {event, fun, config}))
    :ok
  end

  def detach(id) do
    handlers = :persistent_term.get({__MODULE__, :handlers}, %{})
    :persistent_term.put({__MODULE__, :handlers}, Map.delete(handlers, id))
    :ok
  end

  def execute(event, measurements, metadata) do
    for {_id, {^event, fun, config}} <- :persistent_term.get({__MODULE__, :handlers}, %{}) do
      fun.(event, measurements, metadata, config)
    end

    :ok
  end
end

defmodule Tachyon.TelemetryHelpers do
  @moduledoc false
  # Forwards the given events to the calling test process as
  # {:telemetry, event, measurements, metadata}.

  def forward(events) do
    me = self()
    id = {__MODULE__, make_ref()}

    for event <- events do
      :telemetry.attach({id, event}, event, &__MODULE__.handle/4, me)
    end

    ExUnit.Callbacks.on_exit(fn ->
      for event <- events, do: :telemetry.detach({id, event})
    end)

    :ok
  end

  def handle(event, measurements, metadata, pid) do
    send(pid, {:telemetry, event, measurements, metadata})
  end
end

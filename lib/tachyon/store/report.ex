defmodule Tachyon.Store.Report do
  @moduledoc false
  # What a Tachyon.Store reports of itself (the events are documented in
  # Tachyon.Telemetry): its open and recovery as telemetry (and a log line
  # when recovery cut the log), and the events Rust queues (rolls,
  # retention), emitted by the store's process at each stats tick, by
  # sync/1 and by close/1.

  require Logger

  alias Tachyon.Native

  @doc "Emits the open's and the recovery's telemetry; logs a cut."
  def open(store, rec, duration) do
    # `:mode` is the deprecated name of `:access` (one release).
    meta = %{path: store.path, access: store.access, mode: store.access, name: store.name}

    Tachyon.Telemetry.execute(
      [:tachyon, :store, :open],
      %{duration: duration, segments: rec.segments, messages: rec.messages},
      meta
    )

    if store.access == :write do
      Tachyon.Telemetry.execute(
        [:tachyon, :store, :recover],
        %{
          duration: System.convert_time_unit(rec.duration_ns, :nanosecond, :native),
          recovered: rec.recovered,
          truncated_bytes: rec.truncated_bytes,
          lost_records: rec.lost_records
        },
        %{path: store.path, segment: rec.segment, cut: rec.cut, offset: rec.offset}
      )

      if rec.cut do
        Logger.warning(
          "Tachyon.Store #{store.path}: recovery cut the log (#{rec.cut}) in segment #{rec.segment} " <>
            "at offset #{rec.offset}: #{rec.truncated_bytes} bytes truncated, #{rec.lost_records} records lost; " <>
            "#{rec.messages} messages kept"
        )
      end
    end
  end

  @doc "Emits the events queued in Rust (rolls, retention) as telemetry."
  def events(s) do
    for ev <- Native.store_take_events(s.ref) do
      {event, measurements} = Map.pop(ev, :event)
      # (A retention event's reason is metadata.)
      {reason, measurements} = Map.split(measurements, [:reason])

      Tachyon.Telemetry.execute(
        [:tachyon, :store, event],
        measurements,
        Map.merge(%{path: s.path, name: s.name}, reason)
      )
    end

    :ok
  end
end

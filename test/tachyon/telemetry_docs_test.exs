defmodule Tachyon.TelemetryDocsTest do
  # Every event Tachyon emits is documented in Tachyon.Telemetry's
  # moduledoc: the literal ones found in lib/, and the ones whose last
  # name comes from Rust (report kinds, bus events) or from the process
  # skeleton (start, stats, stop).
  use ExUnit.Case, async: true

  @dynamic [
    [:tachyon, :sequencer, :role],
    [:tachyon, :sequencer, :campaign],
    [:tachyon, :sequencer, :voted],
    [:tachyon, :sequencer, :truncated],
    [:tachyon, :sequencer, :start],
    [:tachyon, :sequencer, :stats],
    [:tachyon, :sequencer, :stop],
    [:tachyon, :bus, :epoch],
    [:tachyon, :bus, :renumbered],
    [:tachyon, :bus, :fork],
    [:tachyon, :bus, :member_id_taken],
    [:tachyon, :bus, :stats],
    [:tachyon, :echo, :start],
    [:tachyon, :echo, :stats],
    [:tachyon, :echo, :stop],
    [:tachyon, :store, :roll],
    [:tachyon, :store, :stats],
    [:tachyon, :table, :stats],
    [:tachyon, :async_store, :stats],
    [:tachyon, :async_store, :writer_failed]
  ]

  test "every event is in the moduledoc's table" do
    {:docs_v1, _, _, _, %{"en" => doc}, _, _} = Code.fetch_docs(Tachyon.Telemetry)

    literal =
      for file <- Path.wildcard("lib/**/*.ex"),
          # (the benchmarks list applications, not events)
          not String.contains?(file, "/bench/"),
          [_, part, name] <-
            Regex.scan(~r/\[:tachyon, :(\w+), :(\w+)\]/, File.read!(file)),
          do: [:tachyon, String.to_atom(part), String.to_atom(name)]

    for event <- Enum.uniq(literal ++ @dynamic) do
      assert doc =~ "| `#{inspect(event)}` |", "#{inspect(event)} is not documented"
    end
  end
end

defmodule Tachyon.SoakTest do
  # A short soak (`mix tachyon.soak`, Tachyon.Nemesis.Soak): three
  # "minutes" of 20 s each, with a retention small enough to trim within
  # the run (300 messages a second per member and table writes, about 50 KB
  # of log a second: 1.8 MB is about 36 s of it), a member joining from the latest snapshot every minute and a
  # host replaced every minute, the nemesis's faults throughout: a row a
  # minute, every join and replacement done, no violation, the logs'
  # bytes within the retention's bound. Not async; skipped with a message
  # where namespaces cannot be made.
  use ExUnit.Case, async: false

  alias Tachyon.Nemesis.{NetNS, Soak}

  @moduletag :slow
  @moduletag timeout: 600_000

  case NetNS.probe("skprobe") do
    :ok ->
      :ok

    {:error, why} ->
      IO.puts("\n  Tachyon.SoakTest skipped: cannot create network namespaces here (#{why})")
      @moduletag skip: "cannot create network namespaces here (#{why})"
  end

  test "three short minutes: rows, joins from snapshots, replacements, retention, no violation" do
    out = Path.join(System.tmp_dir!(), "tachyon-soak-#{System.unique_integer([:positive])}")
    # (The progress lines in order: an ordered set keyed by arrival.)
    lines = :ets.new(:lines, [:public, :ordered_set])

    opts = [
      minutes: 3,
      minute_ms: 20_000,
      replace_every: 1,
      rate: 300,
      retention_bytes: 1_800_000,
      segment_size: 262_144,
      out: out,
      print: &:ets.insert(lines, {System.unique_integer([:monotonic]), &1})
    ]

    assert {:ok, s} = Soak.run(opts)
    all = for {_, l} <- :ets.tab2list(lines), do: l
    # The run's progress (faults, replacements, joins, rows) when it failed.
    unless s.ok, do: IO.puts("\n" <> Enum.join(all, "\n"))
    IO.puts("\n" <> Enum.map_join(Soak.format(s), "\n", &("  " <> &1)))
    rows = for l <- all, String.starts_with?(l, "soak: minute "), do: l
    assert length(rows) == 3
    assert s.violations == [], "seed #{s.seed}: #{inspect(s.violations)}"
    assert s.replacements == {3, 3}
    assert s.joins == {3, 3}
    assert Enum.all?(s.max_log_bytes, &(&1 > 0 and &1 <= s.bound))
    # Retention trimmed: every node's log starts after the session record.
    assert Enum.all?(s.report.log_ranges, fn {first, _} -> first > 0 end)
    # The deliveries were checked against the logs as recorded each minute
    # (the retention here keeps about 36 s of log at this rate, the checks
    # come every 20 s: a check late by more than the difference on a loaded
    # machine leaves some unchecked, counted).
    delivered = s.report.members |> Enum.map(& &1.delivered) |> Enum.sum()
    assert s.report.ext.checks >= 4 and s.unchecked < delivered / 2
    assert s.ok

    csv = File.read!(Path.join(out, "soak.csv")) |> String.split("\n", trim: true)
    assert length(csv) == 4 and hd(csv) =~ "log_bytes_node0"
    assert File.read!(Path.join(out, "soak.svg")) =~ "<polyline"
    File.rm_rf!(out)
  end
end

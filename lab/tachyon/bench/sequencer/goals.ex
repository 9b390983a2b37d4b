defmodule Tachyon.Bench.Sequencer.Goals do
  @moduledoc false
  # The goals of `mix tachyon.bench sequencer`, in the user's words (each a
  # `Tachyon.Bench.goal/4`): checked on a full run, shown on a shorter one.

  alias Tachyon.Bench
  alias Tachyon.Bench.Report
  alias Tachyon.Bench.Sequencer.{Durability, Floors}

  # {what, case a, case b, :le | :ge, bound, a's key, b's key}: a / b.
  @goals [
    {"bus round trip from a Rust member / Tachyon.Echo's round trip (p50)",
     "tachyon.sequencer.roundtrip.native", "tachyon.echo", :le, 1.3, :p50_ns, :p50_ns},
    {"GenServer sequencer over distribution / Tachyon bus, round trip (p50)",
     "beam.dist.roundtrip", "tachyon.sequencer.roundtrip", :ge, 3.0, :p50_ns, :p50_ns},
    {"bus round trip from Elixir / Tachyon.Echo's round trip (p50)",
     "tachyon.sequencer.roundtrip", "tachyon.echo", :le, 1.5, :p50_ns, :p50_ns},
    {"bus round trip with 1% loss, p99.9 / without loss, p50", "tachyon.sequencer.roundtrip.loss",
     "tachyon.sequencer.roundtrip", :le, 4.0, :p999_ns, :p50_ns},
    {"bus round trip with 1% loss, p99.9 / without loss, p99.9 (a lost datagram costs a round trip, not a timer)",
     "tachyon.sequencer.roundtrip.loss", "tachyon.sequencer.roundtrip", :le, 1.5, :p999_ns,
     :p999_ns}
  ]

  @rates [
    {"messages per second, one per datagram, Elixir member", "tachyon.sequencer.throughput",
     200_000},
    {"messages per second, batched, Elixir member", "tachyon.sequencer.throughput.batched",
     2_000_000},
    {"messages per second, one per datagram, Rust member", "tachyon.sequencer.throughput.native",
     200_000},
    {"messages per second, batched, Rust member", "tachyon.sequencer.throughput.batched.native",
     2_000_000}
  ]

  @doc """
  The part's goals that the cases ran for: against Tachyon.Echo and the
  GenServer sequencer, the throughput bounds, the group's, the floors'
  (`Floors.goals/1`) and, with --durability fsync, `Durability.goals/2`.
  """
  def goals(cases, group) do
    by = Bench.by_name(cases)

    group_goals =
      if group,
        do: [
          {"bus round trip through a group of #{group} / through one node (p50)",
           "tachyon.sequencer.group#{group}.roundtrip", "tachyon.sequencer.roundtrip", :le, 2.0,
           :p50_ns, :p50_ns},
          {"bus round trip through a group of #{group} / through one node (p99)",
           "tachyon.sequencer.group#{group}.roundtrip", "tachyon.sequencer.roundtrip", :le, 5.0,
           :p99_ns, :p99_ns},
          {"CPU per committed message, group of #{group} / one node (round trip)",
           "tachyon.sequencer.group#{group}.roundtrip", "tachyon.sequencer.roundtrip", :le, 2.5,
           :cpu_us_per_msg, :cpu_us_per_msg}
        ],
        else: []

    ratios =
      for {what, a, b, cmp, bound, ka, kb} <- @goals ++ group_goals,
          is_number(by[a][ka]) && is_number(by[b][kb]) && by[b][kb] > 0 do
        ratio = Map.fetch!(by[a], ka) / Map.fetch!(by[b], kb)
        met = if cmp == :le, do: ratio <= bound, else: ratio >= bound
        goal = Bench.bound_text(cmp, bound)
        Bench.goal(what, Bench.x(ratio), goal, met)
      end

    rates =
      for {what, name, floor} <- @rates, c = by[name] do
        Bench.goal(
          what,
          Report.delimit(round(c.rate)),
          "at least #{Report.delimit(floor)}",
          c.rate >= floor
        )
      end

    ratios ++ rates ++ Floors.goals(cases) ++ Durability.goals(cases, group)
  end
end

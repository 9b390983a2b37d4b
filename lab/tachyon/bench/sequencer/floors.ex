defmodule Tachyon.Bench.Sequencer.Floors do
  @moduledoc false
  # The floors of the sequencer bench, measured in the same run: the same
  # sockets, sizes and system calls as a member and the sequencer, with no
  # sequencing and no log (docs/BENCHMARKS.md, "What each case measures").
  #
  #   raw.relay.roundtrip           a Rust ping thread sends a bus-sized datagram
  #                                 (one message), a relay thread (Tachyon.Echo:
  #                                 recvmmsg, sendmmsg) returns it
  #   raw.relay.throughput          a Rust client (dirty scheduler) pipelines
  #                                 bus-sized datagrams of one message each through
  #                                 the relay, 64 in flight: msg/s
  #   raw.relay.throughput.batched  the same with 64 messages per datagram (the
  #                                 batched case's datagrams), 32 in flight (a
  #                                 member's initial congestion window)
  #
  # The throughput floors' sockets, the client's and the relay's, have the
  # buffers of a member's and a sequencer's (@buffers, 4 MiB:
  # tachyon_core::seq::SOCKET_BUFFER), so that floor and case have the
  # same room in the kernel.

  alias Tachyon.Bench
  alias Tachyon.Bench.Echo.Peers
  alias Tachyon.Bench.Report
  alias Tachyon.Native

  @batched 64
  # A member's initial congestion window, in datagrams
  # (tachyon_core::seq::core::member::cc::INITIAL_CWND).
  @batched_window 32
  @buffers 4 * 1024 * 1024

  @doc "The floor cases, in the order they run."
  def names, do: ~w(raw.relay.roundtrip raw.relay.throughput raw.relay.throughput.batched)

  @doc "Runs one floor case."
  def run_case("raw.relay.roundtrip" = name, cfg) do
    size = Native.bench_bus_datagram_size(cfg.size, 1)

    Peers.with_echo(nil, cfg.wait, fn _echo, addr ->
      {h, info} = Peers.rust_ping!(addr, cfg.n, cfg.warmup, %{cfg | size: size})

      Bench.from_hist(name, h, size, %{
        note:
          "Rust ping thread -> relay (Tachyon.Echo, wait #{cfg.wait}), #{size}-byte datagrams " <>
            "(a bus datagram of one #{cfg.size}-byte message), lost #{info.lost}"
      })
    end)
  end

  def run_case("raw.relay.throughput" = name, cfg), do: throughput(name, cfg, 1, 64)

  def run_case("raw.relay.throughput.batched" = name, cfg),
    do: throughput(name, cfg, @batched, @batched_window)

  defp throughput(name, cfg, per, window) do
    size = Native.bench_bus_datagram_size(cfg.size, per)

    Peers.with_echo(
      nil,
      cfg.wait,
      fn _echo, {ip, port} ->
        # A warm-up of its own, then the measured run.
        run = fn count ->
          opts = %{
            ip: ip,
            port: port,
            count: count,
            size: cfg.size,
            per: per,
            window: window,
            buffers: @buffers
          }

          case Native.bench_relay_throughput(opts) do
            {:ok, t} -> t
            {:error, reason} -> Mix.raise("#{name}: #{inspect(reason)}")
          end
        end

        run.(max(cfg.warmup, per))
        n = max(cfg.n - rem(cfg.n, per), per)
        t = run.(n)
        rate = t.messages * 1.0e9 / t.elapsed_ns
        ns = t.elapsed_ns / max(t.messages, 1)
        ks = [:avg, :min, :max, :p50, :p90, :p99, :p999, :p9999, :p99999]
        report = Map.merge(Map.new(ks, &{&1, ns}), %{count: t.messages, stdev: 0, tails: []})

        Bench.from_report(name, report, cfg.size, %{
          rate: rate,
          note:
            "#{per} message(s) per #{size}-byte datagram, #{window} datagrams in flight, through a " <>
              "relay (Tachyon.Echo, wait #{cfg.wait}); #{Report.delimit(round(rate))} msg/s; " <>
              "#{t.lost} datagrams lost; the latency columns are elapsed/messages",
          json_extra: %{"msgs_per_sec" => rate, "lost" => t.lost}
        })
      end,
      recbuf: @buffers,
      sndbuf: @buffers
    )
  end

  # Each sequencer case against its floor: {case, floor, what}.
  @pairs [
    {"tachyon.sequencer.roundtrip.native", "raw.relay.roundtrip", :p50_ns},
    {"tachyon.sequencer.roundtrip", "raw.relay.roundtrip", :p50_ns},
    {"tachyon.sequencer.roundtrip.loss", "raw.relay.roundtrip", :p50_ns},
    {"tachyon.sequencer.roundtrip.messages", "raw.relay.roundtrip", :p50_ns},
    {"tachyon.sequencer.roundtrip.subscriber", "raw.relay.roundtrip", :p50_ns},
    {"tachyon.sequencer.throughput", "raw.relay.throughput", :rate},
    {"tachyon.sequencer.throughput.native", "raw.relay.throughput", :rate},
    {"tachyon.sequencer.throughput.batched", "raw.relay.throughput.batched", :rate},
    {"tachyon.sequencer.throughput.batched.native", "raw.relay.throughput.batched", :rate}
  ]

  @doc "Prints every sequencer case's ratio to its floor (those that ran)."
  def print_ratios(cases) do
    by = Bench.by_name(cases)
    rows = for {c, f, k} <- @pairs, by[c] && by[f], do: row(c, f, k, by[c], by[f])

    if rows != [] do
      IO.puts(
        "\nAgainst the floors of the same run (docs/BENCHMARKS.md, \"What each case measures\"):"
      )

      Report.print_rows(["case", "floor", "case", "floor", "ratio"], rows)
      IO.puts("  (round trips: p50, case / floor; throughput: msg/s, case / floor)")
    end
  end

  defp row(c, f, :rate, a, b),
    do: [
      c,
      f,
      Report.delimit(round(a.rate)),
      Report.delimit(round(b.rate)),
      ratio(a.rate, b.rate)
    ]

  defp row(c, f, k, a, b) do
    [c, f, Report.short_ns(Map.fetch!(a, k)), Report.short_ns(Map.fetch!(b, k))] ++
      [ratio(Map.fetch!(a, k), Map.fetch!(b, k))]
  end

  defp ratio(a, b), do: :erlang.float_to_binary(a / b, decimals: 2) <> "x"

  @doc """
  The goals against the floors: unbatched Elixir-member throughput at
  least 0.8x `raw.relay.throughput`; batched at least 2,000,000 msg/s or
  0.8x `raw.relay.throughput.batched`, whichever is lower.
  """
  def goals(cases) do
    by = Bench.by_name(cases)

    unbatched =
      with %{rate: r} <- by["tachyon.sequencer.throughput"],
           %{rate: f} <- by["raw.relay.throughput"] do
        [
          Bench.goal(
            "messages per second, one per datagram, Elixir member / the same datagrams " <>
              "relayed with no sequencer (raw.relay.throughput)",
            Bench.x(r / f),
            "at least 0.8x",
            r / f >= 0.8
          )
        ]
      else
        _ -> []
      end

    batched =
      with %{rate: r} <- by["tachyon.sequencer.throughput.batched"],
           %{rate: f} <- by["raw.relay.throughput.batched"] do
        bound = min(2_000_000, 0.8 * f)

        [
          Bench.goal(
            "messages per second, batched, Elixir member",
            Report.delimit(round(r)),
            "at least #{Report.delimit(round(bound))}, the lower of 2,000,000 and 0.8x the " <>
              "batched relay with no sequencer (#{Report.delimit(round(f))})",
            r >= bound
          )
        ]
      else
        _ -> []
      end

    unbatched ++ batched
  end
end

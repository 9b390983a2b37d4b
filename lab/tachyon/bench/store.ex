defmodule Tachyon.Bench.Store do
  @moduledoc false
  # `mix tachyon.bench store`: append latency of Tachyon.Store against the
  # BEAM's own choices and a pure-Rust floor.
  #
  # Cases:
  #   machine.hiccup                    a Rust loop that only reads the clock (--hiccup-ms, 1000):
  #                                     the machine's own tail, the floor of every tail below
  #   nif.noop                          an empty two-argument NIF: the floor of any Elixir call
  #   tachyon.store.append              one Elixir call per message, timed around the call
  #   tachyon.store.append.no_pretouch  the same with the pre-touch thread off
  #   tachyon.store.append.native       the same append in a Rust loop (no BEAM): the floor
  #   disk_log.blog                     :disk_log.blog/2 on a halt log (internal format)
  #   file.write.raw                    :file.write/2 on a :raw append fd
  #
  # Extra options: see spec/0.

  alias Tachyon.{Bench, Store}
  alias Tachyon.Bench.Report

  @defaults [messages: 200_000, warmup: 20_000, size: 256, hiccup_ms: 1000]
  @quick [messages: 20_000, warmup: 2_000, hiccup_ms: 200]
  @all ~w(machine.hiccup nif.noop tachyon.store.append tachyon.store.append.no_pretouch tachyon.store.append.native disk_log.blog file.write.raw)

  @doc "The part's options, defaults and goals' run (Tachyon.Bench.CLI)."
  def spec do
    %{
      name: "store",
      summary:
        "Tachyon.Store.append/2 against :disk_log.blog/2, :file.write/2 on a raw fd, " <>
          "and the same append in a Rust loop (the floor)",
      cases: @all,
      options: [
        {:cases, :string, "LIST", "run only these cases (comma-separated)"},
        {:hiccup_ms, :integer, "MS", "how long machine.hiccup reads the clock"}
      ],
      defaults: @defaults,
      quick: @quick,
      full: [messages: 1_000_000]
    }
  end

  def run(argv) do
    opts = Bench.parse!(argv, spec())
    n = opts[:messages]
    warmup = opts[:warmup]
    size = opts[:size]
    wanted = Bench.cases!(opts, @all)
    msg = :binary.copy(<<0xA5>>, size)

    Report.print_machine()
    overhead = Bench.timer_overhead()

    IO.puts(
      "Store bench: #{Report.delimit(n)} messages of #{size} bytes after #{Report.delimit(warmup)} warm-up. " <>
        "Timer overhead (two :os.perf_counter/0 calls, included in the Elixir cases): " <>
        "avg #{Report.fmt_ns(overhead.avg_ns)}, p50 #{Report.fmt_ns(overhead.p50_ns)}"
    )

    cases =
      Bench.run_cases(@all, wanted, opts, "store", fn name, dir ->
        run_case(name, dir, n, warmup, size, msg)
      end)

    Report.print_table(cases, "tachyon.store.append")
    goals = print_goals(cases, opts)

    Report.write_json(opts[:json], "store", cases, %{
      "goals" => goals,
      "timer_overhead_ns" => overhead.avg_ns,
      "warmup" => warmup
    })

    cases
  end

  # Sized for the burst it times right after open (58 MB with the defaults
  # of this bench): segments all of 64 MiB, the first one faulted in whole
  # at open, as Tachyon.Store's "Disk use" advises for such a burst. With
  # the library's defaults the first segments are 2, 4, 8 ... MiB and a
  # writer faster than the pre-touch thread faults pages in itself for the
  # first ~100 MB (docs/ARCHITECTURE.md, Tachyon.Store).
  defp store_opts(pretouch),
    do: [
      pretouch: pretouch,
      segment_size: 64 * 1024 * 1024,
      initial_segment_size: 64 * 1024 * 1024
    ]

  defp run_case("nif.noop" = name, _dir, n, warmup, size, msg),
    do: noop_case(name, n, warmup, size, msg)

  defp run_case("tachyon.store.append" = name, dir, n, warmup, size, msg),
    do: elixir_append(name, dir, n, warmup, size, msg, true)

  defp run_case("tachyon.store.append.no_pretouch" = name, dir, n, warmup, size, msg),
    do: elixir_append(name, dir, n, warmup, size, msg, false)

  defp run_case("tachyon.store.append.native" = name, dir, n, warmup, size, _msg) do
    {:ok, s} = Store.open(dir, store_opts(true))
    {:ok, h, faults} = Tachyon.Native.store_bench_native(s.ref, n, warmup, size)
    Store.close(s)

    Bench.from_hist(name, h, size, %{
      note:
        "Rust loop, Instant::now() around each append; the writer thread took #{faults} page faults",
      json_extra: %{page_faults: faults}
    })
  end

  defp run_case("disk_log.blog" = name, dir, n, warmup, size, msg) do
    file = String.to_charlist(Path.join(dir, "bench.LOG"))
    log = :"tachyon_bench_#{System.unique_integer([:positive])}"
    {:ok, ^log} = :disk_log.open(name: log, file: file, type: :halt, format: :internal)
    bytes = :erlang.term_to_binary(msg)
    c = Bench.measure(name, n, warmup, size, fn -> :ok = :disk_log.blog(log, bytes) end)
    :ok = :disk_log.close(log)
    Map.put(c, :note, "halt log, internal format, term pre-encoded")
  end

  defp run_case("file.write.raw" = name, dir, n, warmup, size, msg) do
    {:ok, fd} =
      :file.open(String.to_charlist(Path.join(dir, "raw.bin")), [:raw, :binary, :append])

    c = Bench.measure(name, n, warmup, size, fn -> :ok = :file.write(fd, msg) end)
    :ok = :file.close(fd)
    Map.put(c, :note, ":raw :append fd, one write(2) per message")
  end

  @doc false
  # The `nif.noop` case: an empty two-argument NIF timed like the Elixir
  # cases (shared with the other benches).
  def noop_case(name, n, warmup, size, msg) do
    {h, _, gcs} =
      Bench.in_big_heap(fn ->
        Bench.sample(warmup, n, fn count, h, _ -> noop_loop(count, msg, h) end)
      end)

    Bench.from_hist(name, h, size, %{
      unit: :perf_counter,
      note: "empty NIF, same timing as the Elixir cases; #{gcs} minor GCs",
      json_extra: %{minor_gcs: gcs}
    })
  end

  @doc false
  # `Tachyon.Store.append/2` timed around each call, in a big-heap process
  # (shared with the other benches).
  def elixir_append(name, dir, n, warmup, size, msg, pretouch) do
    {:ok, s} = Store.open(dir, store_opts(pretouch))

    {h, _, gcs} =
      Bench.in_big_heap(fn ->
        Bench.sample(warmup, n, fn count, h, _ -> loop(count, s, msg, h) end)
      end)

    {:ok, stats} = Store.stats(s)
    Store.close(s)

    Bench.from_hist(name, h, size, %{
      unit: :perf_counter,
      note:
        "pretouch #{pretouch}, #{stats.rolls} rolls (#{stats.prepared_rolls} prepared), " <>
          "#{gcs} minor GCs in the timed loop",
      json_extra: %{
        pretouch: pretouch,
        rolls: stats.rolls,
        prepared_rolls: stats.prepared_rolls,
        minor_gcs: gcs
      }
    })
  end

  defp noop_loop(0, _msg, _h), do: :ok

  defp noop_loop(n, msg, nil) do
    :ok = Tachyon.Native.bench_noop(msg, msg)
    noop_loop(n - 1, msg, nil)
  end

  defp noop_loop(n, msg, h) do
    t0 = :os.perf_counter()
    :ok = Tachyon.Native.bench_noop(msg, msg)
    t1 = :os.perf_counter()
    Tachyon.Native.hist_record(h, t1 - t0)
    noop_loop(n - 1, msg, h)
  end

  defp loop(0, _s, _msg, _h), do: :ok

  defp loop(n, s, msg, nil) do
    {:ok, _} = Store.append(s, msg)
    loop(n - 1, s, msg, nil)
  end

  defp loop(n, s, msg, h) do
    t0 = :os.perf_counter()
    {:ok, _} = Store.append(s, msg)
    t1 = :os.perf_counter()
    Tachyon.Native.hist_record(h, t1 - t0)
    loop(n - 1, s, msg, h)
  end

  defp print_goals(cases, opts) do
    by = Bench.by_name(cases)
    t = by["tachyon.store.append"]
    d = by["disk_log.blog"]
    f = by["tachyon.store.append.native"]

    goals =
      if t do
        [
          d &&
            Bench.goal(
              "average append, :disk_log.blog / Tachyon.Store",
              Bench.x(d.avg_ns / t.avg_ns),
              "at least 40x",
              d.avg_ns / t.avg_ns >= 40
            ),
          f &&
            Bench.goal(
              "average append, Tachyon.Store from Elixir / the same append in a Rust loop",
              Bench.x(t.avg_ns / f.avg_ns),
              "at most 3x",
              t.avg_ns / f.avg_ns <= 3
            ),
          Bench.goal(
            "Tachyon.Store.append p99.9",
            Report.short_ns(t.p999_ns),
            "under 2 us",
            t.p999_ns < 2_000
          ),
          Bench.goal(
            "Tachyon.Store.append slowest call",
            Report.short_ns(t.max_ns),
            "under 100 us",
            t.max_ns < 100_000
          )
        ]
        |> Enum.filter(& &1)
      else
        []
      end

    json = Bench.print_goals(goals, opts, spec())
    Bench.print_hiccup_floor(cases)

    np = by["tachyon.store.append.no_pretouch"]

    if t && np do
      IO.puts(
        "  pre-touch on vs off: p99.9 #{Report.short_ns(t.p999_ns)} vs #{Report.short_ns(np.p999_ns)}, " <>
          "p99.99 #{Report.short_ns(t.p9999_ns)} vs #{Report.short_ns(np.p9999_ns)}, " <>
          "max #{Report.short_ns(t.max_ns)} vs #{Report.short_ns(np.max_ns)}"
      )
    end

    json
  end
end

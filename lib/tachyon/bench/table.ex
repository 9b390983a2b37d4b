defmodule Tachyon.Bench.Table do
  @moduledoc false
  # `mix tachyon.bench table`: Tachyon.Table against ETS, DETS and Bitcask,
  # as the Corfu "large table" benchmark did (put a table of N records, then
  # random gets), plus a Rust-only comparison with RocksDB and a scale run.
  #
  #     mix tachyon.bench table                      # short default run
  #     mix tachyon.bench table --quick              # CI-sized
  #     mix tachyon.bench table --records 1000000 --peer-records 1000000 \
  #         --value-sizes 64,256,1024,4096 --procs 1,4 --rocksdb --scale \
  #         --json bench/results/table.json         # the full run
  #
  # Options (besides the common ones):
  #
  #   --records N          records put into each Tachyon/ETS table (1,000,000)
  #   --peer-records N     records for the slow peers, dets and bitcask
  #                        (100,000 by default: DETS takes ~70 us per put)
  #   --messages N         random gets measured per case (500,000; capped
  #                        at the table's record count for the slow peers)
  #   --warmup N           gets run first and discarded (100,000)
  #   --value-sizes LIST   value sizes in bytes (256; --size N is one size)
  #   --procs LIST         concurrent processes (1,4)
  #   --engines LIST       a subset of tachyon.memory,tachyon.mapped,
  #                        tachyon.file,ets,dets,bitcask
  #   --krati              Krati's mixed workload instead (Tachyon.Bench.Table.Krati:
  #                        1 writer + 4 readers at once, values 0.5-2 KB;
  #                        --krati-seconds N per engine, default 10)
  #   --rocksdb            also build and run native/bench_rocksdb (Rust:
  #                        Tachyon's core table vs RocksDB, same workload)
  #   --scale              also the scale run: --scale-records records of
  #                        256 bytes (10,000,000), put, get, close, reopen
  #   --scale-records N
  #   --hiccup-ms N        how long the machine.hiccup loop runs first (1000):
  #                        the machine's own worst gap, the floor of every max
  #   --shared-value       put one value binary under every key instead of
  #                        one binary per key (ETS then stores a pointer per
  #                        key: its best case)
  #
  # Cases are named <engine>.<put|get>.<size>.<procs>p. `ops/s` is
  # 1e9 / average latency for one process, and operations / wall time for
  # several (on this 2-core machine, 4 processes share 2 schedulers).

  alias Tachyon.Bench
  alias Tachyon.Bench.Report
  alias Tachyon.Bench.Table.{Engines, RocksDB, Scale}

  @engines ~w(tachyon.memory tachyon.mapped tachyon.file ets dets bitcask)

  @switches [
    records: :integer,
    peer_records: :integer,
    value_sizes: :string,
    procs: :string,
    engines: :string,
    rocksdb: :boolean,
    scale: :boolean,
    scale_records: :integer,
    shared_value: :boolean,
    krati: :boolean,
    krati_seconds: :integer,
    hiccup_ms: :integer
  ]

  @defaults [
    records: 1_000_000,
    peer_records: 100_000,
    messages: 500_000,
    warmup: 100_000,
    value_sizes: "256",
    procs: "1,4",
    engines: Enum.join(@engines, ","),
    scale_records: 10_000_000,
    hiccup_ms: 1000
  ]

  @quick [
    records: 20_000,
    peer_records: 5_000,
    messages: 20_000,
    warmup: 2_000,
    procs: "1",
    scale_records: 200_000,
    hiccup_ms: 200
  ]

  def run(argv) do
    opts = Bench.parse!(argv, @switches, @defaults, @quick)

    if opts[:krati] do
      Report.print_machine()
      opts = if "--engines" in argv, do: opts, else: Keyword.delete(opts, :engines)
      rows = Tachyon.Bench.Table.Krati.run(opts)
      Report.write_json(opts[:json], "table_krati", [], %{"krati" => rows})
      []
    else
      run_cases(opts, argv)
    end
  end

  defp run_cases(opts, argv) do
    # The common --size, when given, is one value size.
    opts =
      if "--size" in argv and "--value-sizes" not in argv,
        do: Keyword.put(opts, :value_sizes, Integer.to_string(opts[:size])),
        else: opts

    sizes = int_list!(opts, :value_sizes)
    procs = int_list!(opts, :procs)
    engines = String.split(opts[:engines], ",", trim: true)

    for e <- engines, e not in @engines do
      Mix.raise("unknown engine #{inspect(e)}; known: #{Enum.join(@engines, ", ")}")
    end

    Report.print_machine()

    IO.puts(
      "Table: #{Report.delimit(opts[:records])} records (dets, bitcask: #{Report.delimit(opts[:peer_records])}), " <>
        "#{Report.delimit(opts[:messages])} random gets per case after #{Report.delimit(opts[:warmup])} warm-up, " <>
        "values #{Enum.join(sizes, ",")} bytes, #{Enum.join(procs, ",")} process(es), 12-byte keys"
    )

    overhead = Bench.timer_overhead()
    IO.puts("Timer overhead (two :os.perf_counter calls): avg #{Report.fmt_ns(overhead.avg_ns)}")

    # The floor of any Elixir call, timed the same way.
    noop =
      Tachyon.Bench.Store.noop_case(
        "nif.noop",
        min(opts[:messages], 1_000_000),
        min(opts[:warmup], 100_000),
        0,
        "x"
      )

    # The machine's own tail, in the same run: the floor of every max below.
    hiccup = Bench.hiccup_case(opts[:hiccup_ms])

    cases =
      for size <- sizes, p <- procs, engine <- engines do
        Engines.run(engine, size, p, opts)
      end
      |> List.flatten()

    for c <- [hiccup, noop | cases], do: Report.print_report(c)
    Bench.print_hiccup_floor([hiccup])
    print_max_vs_hiccup(cases, hiccup)

    for size <- sizes do
      IO.puts("\n== value size #{size}")
      Report.print_table([noop | Enum.filter(cases, &(&1.size == size))], "ets.get.#{size}.1p")
    end

    ratios = print_targets(cases)
    rust = if opts[:rocksdb], do: RocksDB.run(opts, sizes, procs), else: RocksDB.skip()
    scale = if opts[:scale], do: Scale.run(opts), else: []
    all = [hiccup, noop | cases] ++ rust ++ scale
    targets = Map.merge(ratios, RocksDB.targets(rust))
    Report.write_json(opts[:json], "table", all, %{"targets" => targets})
    all
  end

  defp int_list!(opts, key) do
    opts[key]
    |> String.split(",", trim: true)
    |> Enum.map(fn s ->
      case Integer.parse(String.trim(s)) do
        {n, ""} when n > 0 ->
          n

        _ ->
          Mix.raise(
            "--#{String.replace(to_string(key), "_", "-")} must be a list of positive integers"
          )
      end
    end)
  end

  # -- targets -------------------------------------------------------------

  # Issue 19's target: an in-memory put's worst case within 2x the worst
  # gap of a loop that only reads the clock, measured in the same run.
  defp print_max_vs_hiccup(cases, hiccup) do
    for c <- cases, String.starts_with?(c.name, "tachyon.memory.put.") do
      ratio = c.max_ns / max(hiccup.max_ns, 1)

      IO.puts(
        "  #{c.name} max #{Report.short_ns(c.max_ns)} = #{:erlang.float_to_binary(ratio, decimals: 2)}x " <>
          "machine.hiccup max #{Report.short_ns(hiccup.max_ns)} (target <= 2x: #{if ratio <= 2, do: "met", else: "NOT met"})"
      )
    end
  end

  defp print_targets(cases) do
    by = Bench.by_name(cases)

    rows =
      for {label, a, b, goal} <-
            [
              {"tachyon.memory get cost vs ets get", "tachyon.memory.get.256.1p",
               "ets.get.256.1p", {:le, 1.2}},
              {"tachyon.memory put cost vs ets put", "tachyon.memory.put.256.1p",
               "ets.put.256.1p", {:le, 2.0}}
            ] ++
              for(
                m <- ~w(memory mapped file),
                op <- ~w(put get),
                do:
                  {"tachyon.#{m} #{op} speed-up over bitcask", "bitcask.#{op}.256.1p",
                   "tachyon.#{m}.#{op}.256.1p", {:ge, 10.0}}
              ),
          by[a] && by[b] do
        # a's cost relative to b's: b's ops/s over a's.
        ratio = by[b].ops_per_sec / by[a].ops_per_sec

        met =
          case goal do
            {:le, g} -> ratio <= g
            {:ge, g} -> ratio >= g
          end

        {label, ratio, goal, met}
      end

    if rows != [] do
      IO.puts("\n== targets (256-byte values, 1 process; ratios of ops/s)")

      for {label, ratio, {dir, g}, met} <- rows do
        want = if dir == :le, do: "<= #{g}x", else: ">= #{g}x"

        IO.puts(
          "#{String.pad_trailing(label, 36)} #{:erlang.float_to_binary(ratio, decimals: 2)}x  (target #{want}: #{if met, do: "met", else: "NOT met"})"
        )
      end
    end

    Map.new(rows, fn {label, ratio, _, met} -> {label, %{"ratio" => ratio, "met" => met}} end)
  end
end

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
  # Options: spec/0 (`mix tachyon.bench --help`). The slow peers, DETS and
  # Bitcask, get --peer-records records (DETS takes ~70 us per put) and at
  # most that many gets.
  #
  # Cases are named <engine>.<put|get>.<size>.<procs>p. `ops/s` is
  # 1e9 / average latency for one process, and operations / wall time for
  # several (on this 2-core machine, 4 processes share 2 schedulers).

  alias Tachyon.Bench
  alias Tachyon.Bench.Report
  alias Tachyon.Bench.Table.{Engines, RocksDB, Scale}

  @engines ~w(tachyon.memory tachyon.mapped tachyon.file ets dets bitcask)

  @defaults [
    records: 1_000_000,
    peer_records: 100_000,
    messages: 500_000,
    warmup: 100_000,
    value_sizes: "256",
    procs: "1,4",
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

  @doc "The part's options, defaults and goals' run (Tachyon.Bench.CLI)."
  def spec do
    %{
      name: "table",
      summary:
        "Tachyon.Table (storage :memory, :mapped, :file) against ETS, DETS and Bitcask: " <>
          "put a table, then random gets; --messages is the gets per case",
      cases: nil,
      options: [
        {:records, :integer, "N", "records put into each Tachyon and ETS table"},
        {:peer_records, :integer, "N", "records for the slow peers, DETS and Bitcask"},
        {:value_sizes, :string, "LIST", "value sizes in bytes, comma-separated (--size N: one)"},
        {:procs, :string, "LIST", "numbers of concurrent processes, comma-separated"},
        {:engines, :string, "LIST",
         "a subset of #{Enum.join(@engines, ", ")} (comma-separated; default: all)"},
        {:shared_value, :boolean, nil,
         "put one value binary under every key (ETS's best case: a pointer per key)"},
        {:rocksdb, :boolean, nil,
         "also build and run native/bench_rocksdb: Tachyon's core table against RocksDB in Rust"},
        {:scale, :boolean, nil, "also the scale run: put, get, close and reopen"},
        {:scale_records, :integer, "N", "records of the scale run"},
        {:krati, :boolean, nil,
         "Krati's mixed workload instead: one writer and four readers at once, values 0.5-2 KB"},
        {:krati_seconds, :integer, "S", "seconds per engine of that workload (default 10)"},
        {:hiccup_ms, :integer, "MS", "how long machine.hiccup reads the clock"}
      ],
      defaults: @defaults,
      quick: @quick,
      full: [records: 1_000_000, messages: 500_000]
    }
  end

  def run(argv) do
    opts = Bench.parse!(argv, spec())

    if opts[:krati] do
      Report.print_machine()
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
    engines = String.split(opts[:engines] || Enum.join(@engines, ","), ",", trim: true)

    for e <- engines, e not in @engines, do: Tachyon.Bench.CLI.unknown!("engine", e, @engines)

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

    for size <- sizes do
      IO.puts("\n== value size #{size}")
      Report.print_table([noop | Enum.filter(cases, &(&1.size == size))], "ets.get.#{size}.1p")
    end

    rust = if opts[:rocksdb], do: RocksDB.run(opts, sizes, procs), else: RocksDB.skip()
    scale = if opts[:scale], do: Scale.run(opts), else: []
    all = [hiccup, noop | cases] ++ rust ++ scale
    goals = goals(cases, hiccup) ++ RocksDB.goals(rust)
    json = Bench.print_goals(goals, opts, spec())
    Report.write_json(opts[:json], "table", all, %{"goals" => json})
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

  # -- goals ---------------------------------------------------------------

  # An in-memory put's slowest call within 2x the longest gap of a loop
  # that only reads the clock (machine.hiccup), in the same run; and, at
  # 256-byte values and one process, time per call against ETS and
  # operations per second against Bitcask.
  defp goals(cases, hiccup) do
    by = Bench.by_name(cases)

    max_vs_hiccup =
      for c <- cases, String.starts_with?(c.name, "tachyon.memory.put.") do
        ratio = c.max_ns / max(hiccup.max_ns, 1)

        Bench.goal(
          "slowest put, #{c.name} (#{Report.short_ns(c.max_ns)}) / machine.hiccup's longest gap " <>
            "(#{Report.short_ns(hiccup.max_ns)})",
          Bench.x(ratio),
          "at most 2x",
          ratio <= 2
        )
      end

    ratios =
      [
        {"time per get, Tachyon.Table (:memory) / ETS", "tachyon.memory.get.256.1p",
         "ets.get.256.1p", :le, 1.2},
        {"time per put, Tachyon.Table (:memory) / ETS", "tachyon.memory.put.256.1p",
         "ets.put.256.1p", :le, 2.0}
      ] ++
        for m <- ~w(memory mapped file), op <- ~w(put get) do
          {"#{op}s per second, Tachyon.Table (:#{m}) / Bitcask", "bitcask.#{op}.256.1p",
           "tachyon.#{m}.#{op}.256.1p", :ge, 10.0}
        end

    for_ratios =
      for {what, a, b, cmp, bound} <- ratios, by[a] && by[b] do
        # a's cost relative to b's: b's ops/s over a's.
        ratio = by[b].ops_per_sec / by[a].ops_per_sec
        met = if cmp == :le, do: ratio <= bound, else: ratio >= bound
        goal = Bench.bound_text(cmp, bound)
        Bench.goal(what <> ", 256-byte values, 1 process", Bench.x(ratio), goal, met)
      end

    max_vs_hiccup ++ for_ratios
  end
end

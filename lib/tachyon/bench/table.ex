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
  #   --rocksdb            also build and run native/bench_rocksdb (Rust:
  #                        Tachyon's core table vs RocksDB, same workload)
  #   --scale              also the scale run: --scale-records records of
  #                        256 bytes (10,000,000), put, get, close, reopen
  #   --scale-records N
  #   --shared-value       put one value binary under every key instead of
  #                        one binary per key (ETS then stores a pointer per
  #                        key: its best case)
  #
  # Cases are named <engine>.<put|get>.<size>.<procs>p. `ops/s` is
  # 1e9 / average latency for one process, and operations / wall time for
  # several (on this 2-core machine, 4 processes share 2 schedulers).

  alias Tachyon.Bench
  alias Tachyon.Bench.Report
  alias Tachyon.Table

  @engines ~w(tachyon.memory tachyon.mapped tachyon.file ets dets bitcask)
  @bitcask_ebin "/usr/lib/erlang/lib/bitcask-2.1.0/ebin"
  @dets_max_bytes 1_800_000_000

  @switches [
    records: :integer,
    peer_records: :integer,
    value_sizes: :string,
    procs: :string,
    engines: :string,
    rocksdb: :boolean,
    scale: :boolean,
    scale_records: :integer,
    shared_value: :boolean
  ]

  @defaults [
    records: 1_000_000,
    peer_records: 100_000,
    messages: 500_000,
    warmup: 100_000,
    value_sizes: "256",
    procs: "1,4",
    engines: Enum.join(@engines, ","),
    scale_records: 10_000_000
  ]

  @quick [
    records: 20_000,
    peer_records: 5_000,
    messages: 20_000,
    warmup: 2_000,
    procs: "1",
    scale_records: 200_000
  ]

  def run(argv) do
    opts = Bench.parse!(argv, @switches, @defaults, @quick)
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

    cases =
      for size <- sizes, p <- procs, engine <- engines do
        run_engine(engine, size, p, opts)
      end
      |> List.flatten()

    for c <- [noop | cases], do: Report.print_report(c)

    for size <- sizes do
      IO.puts("\n== value size #{size}")
      Report.print_table([noop | Enum.filter(cases, &(&1.size == size))], "ets.get.#{size}.1p")
    end

    ratios = print_targets(cases)
    rust = if opts[:rocksdb], do: run_rocksdb(opts, sizes, procs), else: skip_rocksdb()
    scale = if opts[:scale], do: run_scale(opts), else: []
    all = [noop | cases] ++ rust ++ scale
    targets = Map.merge(ratios, rust_targets(rust))
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

  # -- engines -------------------------------------------------------------

  defp run_engine(engine, size, procs, opts) do
    slow? = engine in ["dets", "bitcask"]
    records = if slow?, do: opts[:peer_records], else: opts[:records]
    gets = if slow?, do: min(opts[:messages], records), else: opts[:messages]
    warmup = if slow?, do: min(opts[:warmup], div(records, 10)), else: opts[:warmup]
    # A base value; value_for/2 makes each key's own binary from it, unless
    # --shared-value (marked with a tuple).
    value = :crypto.strong_rand_bytes(size)
    value = if opts[:shared_value], do: {:shared, value}, else: value

    case setup(engine, opts, size, records) do
      {:skip, why} ->
        IO.puts("\n#{engine} (#{size} bytes, #{procs}p): skipped: #{why}")
        []

      {:ok, st} ->
        try do
          extra = %{engine: engine, records: records, procs: procs}

          put =
            if engine == "bitcask" and procs > 1 do
              IO.puts(
                "\nbitcask.put.#{size}.#{procs}p: skipped: bitcask has a single writer (one handle)"
              )

              fill(st, value, records)
              []
            else
              [measure_puts(st, engine, size, procs, records, value, extra)]
            end

          get = measure_gets(st, engine, size, procs, records, gets, warmup, extra)
          put ++ [get]
        after
          teardown(st)
        end
    end
  end

  defp setup("tachyon." <> mode, opts, size, records) do
    dir = Bench.tmp_dir(opts, "table-#{mode}")

    {:ok, t} =
      Table.open(dir,
        mode: String.to_existing_atom(mode),
        capacity: records,
        compaction_interval_ms: nil,
        max_value_size: max(size, 1_048_576)
      )

    {:ok, %{kind: :tachyon, t: t, dir: dir}}
  end

  defp setup("ets", _opts, _size, _records) do
    tab = :ets.new(:bench_table, [:set, :public, read_concurrency: true, write_concurrency: true])
    {:ok, %{kind: :ets, t: tab, dir: nil}}
  end

  defp setup("dets", opts, size, records) do
    if records * (size + 40) > @dets_max_bytes do
      {:skip, "#{records} records of #{size} bytes exceed DETS's 2 GB file limit"}
    else
      dir = Bench.tmp_dir(opts, "dets")
      name = :"bench_dets_#{System.unique_integer([:positive])}"
      {:ok, d} = :dets.open_file(name, file: to_charlist(Path.join(dir, "t.dets")), type: :set)
      {:ok, %{kind: :dets, t: d, dir: dir}}
    end
  end

  defp setup("bitcask", opts, _size, _records) do
    if File.dir?(@bitcask_ebin) do
      Code.prepend_path(@bitcask_ebin)

      case Application.ensure_all_started(:bitcask) do
        {:ok, _} ->
          # Handles belong to the process that opens them: each benchmark
          # process opens its own (see writer/1, reader/1).
          {:ok, %{kind: :bitcask, t: nil, dir: Bench.tmp_dir(opts, "bitcask")}}

        {:error, e} ->
          {:skip, "bitcask did not start: #{inspect(e)}"}
      end
    else
      {:skip, "Debian's erlang-bitcask is not installed (#{@bitcask_ebin}); run bin/setup"}
    end
  end

  defp teardown(%{kind: :tachyon, t: t, dir: dir}) do
    Table.close(t)
    File.rm_rf!(dir)
  end

  defp teardown(%{kind: :ets, t: t}), do: :ets.delete(t)

  defp teardown(%{kind: :dets, t: t, dir: dir}) do
    :dets.close(t)
    File.rm_rf!(dir)
  end

  defp teardown(%{kind: :bitcask, dir: dir}), do: File.rm_rf!(dir)

  # Bitcask (called through a variable: it is an optional peer, absent at
  # compile time) wants a handle per process: one writer, readers read-only.
  defp writer(%{kind: :bitcask, dir: dir} = st) do
    m = bitcask()
    %{st | t: {m, m.open(to_charlist(dir), [:read_write])}}
  end

  defp writer(st), do: st

  defp reader(%{kind: :bitcask, dir: dir} = st) do
    m = bitcask()
    %{st | t: {m, m.open(to_charlist(dir))}}
  end

  defp reader(st), do: st

  defp release(%{kind: :bitcask, t: {m, ref}}), do: m.close(ref)
  defp release(_), do: :ok

  defp bitcask, do: :persistent_term.get({__MODULE__, :bitcask}, :bitcask)

  defp fill(st, value, records) do
    {[:ok], _} =
      in_procs(1, fn _ -> writer(st) end, fn w ->
        put_loop(w.kind, w.t, value, 0, records, nil)
        release(w)
      end)
  end

  defp measure_puts(st, engine, size, procs, records, value, extra) do
    chunk = div(records + procs - 1, procs)

    {parts, wall} =
      in_procs(
        procs,
        fn i -> {writer(st), i * chunk, min(records, i * chunk + chunk)} end,
        fn {w, first, last} ->
          # First half timed call by call, second half timed as a whole.
          mid = first + div(last - first, 2)
          h = Bench.hist()
          {_, gcs} = Bench.timed(fn -> put_loop(w.kind, w.t, value, first, mid, h) end)
          ns = put_chunks(w.kind, w.t, value, mid, last, 0)
          release(w)
          {h, last - mid, ns, gcs}
        end
      )

    result("#{engine}.put.#{size}.#{procs}p", parts, wall, size, procs, extra)
  end

  defp measure_gets(st, engine, size, procs, records, gets, warmup, extra) do
    per = div(gets, procs)

    {parts, wall} =
      in_procs(
        procs,
        fn i ->
          r = reader(st)
          {r, get_loop(r.kind, r.t, 1 + i * 7919, records, div(warmup, procs), nil)}
        end,
        fn {r, seed} ->
          # A pass timed call by call, then one timed as a whole.
          h = Bench.hist()
          {seed, gcs} = Bench.timed(fn -> get_loop(r.kind, r.t, seed, records, per, h) end)
          t0 = System.monotonic_time(:nanosecond)
          get_loop(r.kind, r.t, seed, records, per, nil)
          ns = System.monotonic_time(:nanosecond) - t0
          release(r)
          {h, per, ns, gcs}
        end
      )

    result("#{engine}.get.#{size}.#{procs}p", parts, wall, size, procs, extra)
  end

  # Latency percentiles from the call-by-call pass (perf counter ticks);
  # ops/s from the pass timed as a whole (free of the clock reads), summed
  # over the processes.
  defp result(name, [{h, _, _, _} | _] = parts, _wall_ns, size, _procs, extra) do
    for {o, _, _, _} <- tl(parts), do: Tachyon.Native.hist_merge(h, o)

    rate =
      parts
      |> Enum.map(fn {_, ops, ns, _} -> if ns > 0, do: ops * 1.0e9 / ns, else: 0.0 end)
      |> Enum.sum()

    gcs = parts |> Enum.map(&elem(&1, 3)) |> Enum.sum()
    c = Bench.from_hist(name, h, size, %{unit: :perf_counter})
    per_call = if c.avg_ns > 0, do: 1.0e9 / c.avg_ns, else: 0.0

    c
    |> Map.merge(%{ops_per_sec: rate, throughput: rate, note: "#{gcs} minor GCs in timed loops"})
    |> Map.put(:json_extra, Map.merge(extra, %{latency_ops_per_sec: per_call, minor_gcs: gcs}))
  end

  # Runs prepare.(i) (untimed: opening handles, warm-up) in `n` processes
  # with a 2 MiB heap (see Tachyon.Bench.in_big_heap/1), then, once all are
  # ready, measure.(prepared) in all of them at once. Returns the results and
  # the wall time of the measured phase.
  defp in_procs(n, prepare, measure) do
    parent = self()

    pids =
      for i <- 0..(n - 1) do
        :erlang.spawn_opt(
          fn ->
            state = prepare.(i)
            :erlang.garbage_collect()
            send(parent, {:ready, self()})

            receive do
              :go -> send(parent, {:result, self(), measure.(state)})
            end
          end,
          [:link, min_heap_size: 262_144]
        )
      end

    for p <- pids do
      receive do
        {:ready, ^p} -> :ok
      after
        3_600_000 -> Mix.raise("benchmark process timed out")
      end
    end

    t0 = System.monotonic_time(:nanosecond)
    for p <- pids, do: send(p, :go)

    results =
      for p <- pids do
        receive do
          {:result, ^p, r} -> r
        after
          3_600_000 -> Mix.raise("benchmark process timed out")
        end
      end

    {results, System.monotonic_time(:nanosecond) - t0}
  end

  # Every key gets its own value binary (as in real use: a table of one
  # shared binary would let ETS store a pointer per key and nothing else),
  # built from `base` with the key's number in front.
  @compile {:inline, value_for: 2}
  defp value_for({:shared, v}, _i), do: v

  defp value_for(base, i) when byte_size(base) >= 8,
    do: <<i::64, binary_part(base, 8, byte_size(base) - 8)::binary>>

  defp value_for(base, _i), do: :binary.copy(base)

  # Only the call is timed; key and value are built before the clock starts.
  defp put_loop(_kind, _t, _v, i, last, _h) when i >= last, do: :ok

  defp put_loop(kind, t, base, i, last, h) do
    k = <<"key:", i::64>>
    v = value_for(base, i)
    t0 = :os.perf_counter()
    do_put(kind, t, k, v)
    t1 = :os.perf_counter()
    if h, do: Tachyon.Native.hist_record(h, t1 - t0)
    put_loop(kind, t, base, i + 1, last, h)
  end

  # Puts [i, last) timed as a whole, 10,000 at a time (keys and values made
  # between the timed chunks); returns the nanoseconds spent in puts.
  defp put_chunks(_kind, _t, _base, i, last, ns) when i >= last, do: ns

  defp put_chunks(kind, t, base, i, last, ns) do
    stop = min(last, i + 10_000)
    pairs = for j <- i..(stop - 1)//1, do: {<<"key:", j::64>>, value_for(base, j)}
    t0 = System.monotonic_time(:nanosecond)
    put_list(kind, t, pairs)
    put_chunks(kind, t, base, stop, last, ns + System.monotonic_time(:nanosecond) - t0)
  end

  defp put_list(_kind, _t, []), do: :ok

  defp put_list(kind, t, [{k, v} | rest]) do
    do_put(kind, t, k, v)
    put_list(kind, t, rest)
  end

  @compile {:inline, do_put: 4, do_get: 3}
  defp do_put(:tachyon, t, k, v), do: :ok = Table.put(t, k, v)
  defp do_put(:ets, t, k, v), do: true = :ets.insert(t, {k, v})
  defp do_put(:dets, t, k, v), do: :ok = :dets.insert(t, {k, v})
  defp do_put(:bitcask, {m, t}, k, v), do: :ok = m.put(t, k, v)

  defp do_get(:tachyon, t, k), do: {:ok, _} = Table.get(t, k)
  defp do_get(:ets, t, k), do: [_] = :ets.lookup(t, k)
  defp do_get(:dets, t, k), do: [_] = :dets.lookup(t, k)
  defp do_get(:bitcask, {m, t}, k), do: {:ok, _} = m.get(t, k)

  # Uniform random keys from a Park-Miller generator (small integers only).
  defp get_loop(_kind, _t, x, _records, 0, _h), do: x

  defp get_loop(kind, t, x, records, n, h) do
    x = rem(x * 48_271, 2_147_483_647)
    k = <<"key:", rem(x, records)::64>>
    t0 = :os.perf_counter()
    do_get(kind, t, k)
    t1 = :os.perf_counter()
    if h, do: Tachyon.Native.hist_record(h, t1 - t0)
    get_loop(kind, t, x, records, n - 1, h)
  end

  # -- targets -------------------------------------------------------------

  defp print_targets(cases) do
    by = Map.new(cases, &{&1.name, &1})

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

  # -- RocksDB (Rust) ------------------------------------------------------

  defp skip_rocksdb do
    IO.puts(
      "\nRust comparison with RocksDB: skipped (pass --rocksdb to build and run native/bench_rocksdb)"
    )

    []
  end

  defp run_rocksdb(opts, sizes, procs) do
    root = Path.expand("../../..", __DIR__)
    crate = Path.join(root, "native/bench_rocksdb")
    lib_dir = "/usr/lib/x86_64-linux-gnu"

    cond do
      not File.exists?(Path.join(lib_dir, "librocksdb.so")) ->
        IO.puts(
          "\nRust comparison with RocksDB: skipped (librocksdb-dev is not installed; run bin/setup)"
        )

        []

      true ->
        IO.puts("\n== Rust: Tachyon core table vs RocksDB (building native/bench_rocksdb)")

        {out, status} =
          System.cmd("cargo", ["build", "--release", "--quiet"],
            cd: crate,
            env: [{"ROCKSDB_LIB_DIR", lib_dir}, {"CARGO_TERM_COLOR", "never"}],
            stderr_to_stdout: true
          )

        if status != 0 do
          IO.puts(out)
          IO.puts("Rust comparison with RocksDB: skipped (the bench crate did not build)")
          []
        else
          bin = Path.join(crate, "target/release/bench_rocksdb")
          dir = Bench.tmp_dir(opts, "rocksdb")

          args = [
            "--records",
            to_string(opts[:records]),
            "--gets",
            to_string(opts[:messages]),
            "--value-sizes",
            Enum.join(sizes, ","),
            "--threads",
            Enum.join(procs, ","),
            "--dir",
            dir
          ]

          port =
            Port.open({:spawn_executable, bin}, [:binary, :exit_status, {:line, 4096}, args: args])

          cases = collect_rust(port, [])
          File.rm_rf!(dir)
          print_rust(cases)
          cases
        end
    end
  end

  defp collect_rust(port, acc) do
    receive do
      {^port, {:data, {:eol, "CASE " <> rest}}} ->
        collect_rust(port, [parse_case(rest) | acc])

      {^port, {:data, {:eol, line}}} ->
        IO.puts(line)
        collect_rust(port, acc)

      {^port, {:data, {:noeol, line}}} ->
        IO.write(line)
        collect_rust(port, acc)

      {^port, {:exit_status, 0}} ->
        Enum.reverse(acc)

      {^port, {:exit_status, s}} ->
        IO.puts("bench_rocksdb exited with status #{s}")
        Enum.reverse(acc)
    end
  end

  # "name=... size=256 threads=1 records=... count=... avg=... p50=... ops=..."
  defp parse_case(text) do
    {kv, report} = Bench.parse_result_line(text)
    ops = Bench.parse_number(kv["ops"])

    Bench.from_report(kv["name"], report, trunc(Bench.parse_number(kv["size"])), %{
      ops_per_sec: ops,
      throughput: ops,
      json_extra: %{
        engine: "rust." <> (kv["engine"] || "?"),
        records: trunc(Bench.parse_number(kv["records"])),
        procs: trunc(Bench.parse_number(kv["threads"]))
      }
    })
  end

  defp print_rust([]), do: :ok

  defp print_rust(cases) do
    Report.print_table(cases)
    IO.puts("\n== target: Tachyon core >= 5x RocksDB ops/s (Rust, 1 thread)")

    for {label, %{"ratio" => ratio, "met" => met}} <- Enum.sort(rust_targets(cases)) do
      IO.puts(
        "#{label}: #{:erlang.float_to_binary(ratio, decimals: 2)}x RocksDB " <>
          "(#{if met, do: "met", else: "NOT met"})"
      )
    end
  end

  defp rust_targets(cases) do
    by = Map.new(cases, &{&1.name, &1})

    for size <- Enum.uniq(Enum.map(cases, & &1.size)),
        op <- ~w(put get),
        mode <- ~w(memory mapped file),
        t = by["rust.tachyon.#{mode}.#{op}.#{size}.1t"],
        r = by["rust.rocksdb.#{op}.#{size}.1t"],
        into: %{} do
      ratio = t.ops_per_sec / r.ops_per_sec
      {"rust tachyon.#{mode} #{op} #{size}B vs rocksdb", %{"ratio" => ratio, "met" => ratio >= 5}}
    end
  end

  # -- scale ---------------------------------------------------------------

  defp run_scale(opts) do
    n = opts[:scale_records]
    IO.puts("\n== scale: #{Report.delimit(n)} records of 256 bytes (tachyon.mapped)")
    dir = Bench.tmp_dir(opts, "table-scale")
    value = :crypto.strong_rand_bytes(256)
    open_opts = [mode: :mapped, capacity: n, compaction_interval_ms: nil]
    {:ok, t} = Table.open(dir, open_opts)
    st = %{kind: :tachyon, t: t}
    h = Bench.hist()
    t0 = System.monotonic_time(:nanosecond)
    put_loop(:tachyon, t, value, 0, n, h)
    put_wall = System.monotonic_time(:nanosecond) - t0

    put =
      Bench.from_hist("scale.tachyon.mapped.put.256.1p", h, 256, %{
        unit: :perf_counter,
        json_extra: %{records: n, wall_ns: put_wall}
      })

    g = Bench.hist()
    get_loop(:tachyon, st.t, 17, n, min(n, opts[:messages]), g)

    get =
      Bench.from_hist("scale.tachyon.mapped.get.256.1p", g, 256, %{
        unit: :perf_counter,
        json_extra: %{records: n}
      })

    # Let the background thread write the hint files of sealed segments,
    # as it does in a running system, then close.
    wait_hints(dir, 120_000)
    :ok = Table.close(t)
    {:ok, %{size: bytes}} = dir_size(dir)
    t1 = System.monotonic_time(:nanosecond)
    {:ok, t} = Table.open(dir, open_opts)
    reopen_ns = System.monotonic_time(:nanosecond) - t1
    rec = t.recovery
    true = Table.count(t) == n
    {:ok, _} = Table.get(t, <<"key:", div(n, 2)::64>>)
    Table.close(t)
    File.rm_rf!(dir)

    IO.puts(
      "put: #{Report.delimit(round(n * 1.0e9 / put_wall))} ops/s (wall), get: avg #{Report.fmt_ns(get.avg_ns)}, " <>
        "#{Report.delimit(div(bytes, 1_048_576))} MiB on disk"
    )

    IO.puts(
      "reopen: #{:erlang.float_to_binary(reopen_ns / 1.0e9, decimals: 2)} s " <>
        "(#{rec.hinted_segments} segments from hints, #{rec.scanned_segments} scanned, #{Report.delimit(rec.keys)} keys)"
    )

    reopen = %{
      name: "scale.tachyon.mapped.reopen",
      messages: 1,
      size: 256,
      avg_ns: reopen_ns * 1.0,
      stdev_ns: 0.0,
      min_ns: reopen_ns * 1.0,
      max_ns: reopen_ns * 1.0,
      p50_ns: reopen_ns * 1.0,
      p75_ns: reopen_ns * 1.0,
      p90_ns: reopen_ns * 1.0,
      p99_ns: reopen_ns * 1.0,
      p999_ns: reopen_ns * 1.0,
      p9999_ns: reopen_ns * 1.0,
      p99999_ns: reopen_ns * 1.0,
      ops_per_sec: 1.0e9 / reopen_ns,
      tails: [],
      json_extra: %{
        records: n,
        disk_bytes: bytes,
        hinted_segments: rec.hinted_segments,
        scanned_segments: rec.scanned_segments
      }
    }

    [put, get, reopen]
  end

  defp wait_hints(dir, timeout_ms) do
    deadline = System.monotonic_time(:millisecond) + timeout_ms

    Stream.repeatedly(fn ->
      files = File.ls!(dir)
      segs = Enum.count(files, &String.ends_with?(&1, ".seg"))
      hints = Enum.count(files, &String.ends_with?(&1, ".hint"))

      cond do
        hints >= segs - 1 -> :done
        System.monotonic_time(:millisecond) > deadline -> :done
        true -> Process.sleep(50)
      end
    end)
    |> Enum.find(&(&1 == :done))
  end

  defp dir_size(dir) do
    bytes =
      dir
      |> File.ls!()
      |> Enum.map(&File.stat!(Path.join(dir, &1)).size)
      |> Enum.sum()

    {:ok, %{size: bytes}}
  end
end

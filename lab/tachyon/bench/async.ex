defmodule Tachyon.Bench.Async do
  @moduledoc false
  # `mix tachyon.bench async`: append latency of Tachyon.AsyncStore (a copy
  # into a ring drained by a writer thread) against a direct Tachyon.Store
  # append in the same run, modelled on CoralStore's AsyncBench.
  #
  # Cases:
  #   machine.hiccup                     a Rust loop that only reads the clock (--hiccup-ms, 1000):
  #                                      the machine's own tail, the floor of every tail below
  #   nif.noop                           an empty two-argument NIF: the floor of any Elixir call
  #   tachyon.store.append               Tachyon.Store.append/2, timed around each call
  #   tachyon.async_store.append         Tachyon.AsyncStore.append/2, timed around each call;
  #                                      like AsyncBench, the ring is drained (outside the timed
  #                                      region) before it could fill: this is latency, not
  #                                      throughput
  #   tachyon.async_store.append.native  the producer side in a Rust loop (Instant::now() around
  #                                      each append, drains likewise)
  #   tachyon.async_store.throughput     appends as fast as the producer can, never draining
  #                                      (a full ring spins, then retries); latency columns are
  #                                      per-message averages over chunks of 1000, ops/s is
  #                                      messages / (time to append all + final flush)
  #
  # The Elixir cases run their loops in a fresh process with a 2 MiB heap
  # (Bench.in_big_heap/1): a minor GC lands in a timed region about once per
  # 80,000 messages instead of once per few hundred with the default heap. A
  # heap big enough for the whole run would avoid GCs entirely but fault in
  # fresh pages as it fills, which measured worse. The notes report the minor
  # GCs of each timed loop.
  #
  # Extra options: see spec/0.

  alias Tachyon.{AsyncStore, Bench, Native}
  alias Tachyon.Bench.Report

  @defaults [messages: 200_000, warmup: 20_000, size: 256, hiccup_ms: 1000]
  @quick [messages: 20_000, warmup: 2_000, hiccup_ms: 200]
  @all ~w(machine.hiccup nif.noop tachyon.store.append tachyon.async_store.append tachyon.async_store.append.native tachyon.async_store.throughput)
  @chunk 1000

  @doc "The part's options, defaults and goals' run (Tachyon.Bench.CLI)."
  def spec do
    %{
      name: "async",
      summary:
        "Tachyon.AsyncStore.append/2 (a copy into a ring a writer thread drains) against " <>
          "Tachyon.Store.append/2, the producer side in a Rust loop, and throughput",
      cases: @all,
      options: [
        {:cases, :string, "LIST", "run only these cases (comma-separated)"},
        {:hiccup_ms, :integer, "MS", "how long machine.hiccup reads the clock"},
        {:wait, :string, "WAIT",
         "the writer thread's wait: busy_spin, yield, backoff or park (default: " <>
           "AsyncStore's for this machine's cores)"},
        {:core, :integer, "N", "pin the writer thread to core N (default: not pinned)"},
        {:ring_size, :integer, "BYTES", "the ring's size (default: AsyncStore's, 256 KiB)"}
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

    wait =
      case opts[:wait] do
        nil -> AsyncStore.default_wait()
        w when w in ~w(busy_spin yield backoff park) -> String.to_atom(w)
        other -> Mix.raise("--wait must be busy_spin, yield, backoff or park, got: #{other}")
      end

    async_opts = [
      wait: wait,
      core: opts[:core],
      ring_size: opts[:ring_size] || Tachyon.AsyncStore.default_ring_size(),
      stats_interval_ms: nil
    ]

    Report.print_machine()
    overhead = Bench.timer_overhead()

    IO.puts(
      "AsyncStore bench: #{Report.delimit(n)} messages of #{size} bytes after #{Report.delimit(warmup)} warm-up; " <>
        "writer wait #{wait}, core #{inspect(opts[:core])}, ring #{async_opts[:ring_size]} bytes. " <>
        "Timer overhead (two :os.perf_counter/0 calls, included in the Elixir cases): " <>
        "avg #{Report.fmt_ns(overhead.avg_ns)}, p50 #{Report.fmt_ns(overhead.p50_ns)}"
    )

    cases =
      Bench.run_cases(@all, wanted, opts, "async", fn name, dir ->
        run_case(name, dir, n, warmup, size, msg, async_opts)
      end)

    Report.print_table(cases, "tachyon.store.append")
    goals = print_goals(cases, opts)

    Report.write_json(opts[:json], "async", cases, %{
      "goals" => goals,
      "timer_overhead_ns" => overhead.avg_ns,
      "warmup" => warmup,
      "wait" => Atom.to_string(wait),
      "core" => opts[:core],
      "ring_size" => async_opts[:ring_size]
    })

    cases
  end

  # Sized for the burst it times right after open: segments all of 64 MiB
  # (see Tachyon.Bench.Store's store_opts/1).
  @store_opts [
    segment_size: 64 * 1024 * 1024,
    initial_segment_size: 64 * 1024 * 1024,
    pretouch: true
  ]

  defp run_case("nif.noop" = name, _dir, n, warmup, size, msg, _),
    do: Tachyon.Bench.Store.noop_case(name, n, warmup, size, msg)

  # The direct store, same run, same timing (64 MiB segments, pre-touch on).
  defp run_case("tachyon.store.append" = name, dir, n, warmup, size, msg, _),
    do: Tachyon.Bench.Store.elixir_append(name, dir, n, warmup, size, msg, true)

  defp run_case("tachyon.async_store.append" = name, dir, n, warmup, size, msg, async_opts) do
    {:ok, a} = AsyncStore.open(dir, @store_opts ++ async_opts)
    per_fill = div(async_opts[:ring_size], record_size(size)) - 1

    {h, drains, gcs} =
      Bench.in_big_heap(fn ->
        {0, _} = async_loop(warmup, a, msg, nil, per_fill, 0, 0)
        :ok = AsyncStore.drain(a, :infinity)
        h = Bench.hist()
        {{0, drains}, gcs} = Bench.timed(fn -> async_loop(n, a, msg, h, per_fill, 0, 0) end)
        {h, drains, gcs}
      end)

    :ok = AsyncStore.drain(a, :infinity)
    {:ok, st} = AsyncStore.stats(a)
    :ok = AsyncStore.close(a)

    Bench.from_hist(name, h, size, %{
      unit: :perf_counter,
      note:
        "drained every #{per_fill} messages outside the timed region (#{drains} drains), " <>
          "#{st.full_events} full events; #{gcs} GCs",
      json_extra: Map.put(async_extra(st, drains), :gcs, gcs)
    })
  end

  defp run_case("tachyon.async_store.append.native" = name, dir, n, warmup, size, _msg, opts) do
    {:ok, a} = AsyncStore.open(dir, @store_opts ++ opts)
    {:ok, h, drains} = Native.async_bench_native(a.ref, n, warmup, size)
    {:ok, st} = AsyncStore.stats(a)
    :ok = AsyncStore.close(a)

    Bench.from_hist(name, h, size, %{
      note: "Rust loop, Instant::now() around each append, #{drains} drains",
      json_extra: async_extra(st, drains)
    })
  end

  defp run_case("tachyon.async_store.throughput" = name, dir, n, warmup, size, msg, opts) do
    {:ok, a} = AsyncStore.open(dir, @store_opts ++ opts)

    {retries0, st0, h, retries, {t0, t_enq, t1}} =
      Bench.in_big_heap(fn ->
        {retries0, _} = async_loop(warmup, a, msg, nil, :never, 0, 0)
        :ok = AsyncStore.drain(a, :infinity)
        {:ok, st0} = AsyncStore.stats(a)
        h = Bench.hist()
        t0 = :os.perf_counter()
        retries = chunks(n, a, msg, h, 0)
        t_enq = :os.perf_counter()
        {:ok, _} = AsyncStore.flush(a, :infinity)
        t1 = :os.perf_counter()
        {retries0, st0, h, retries, {t0, t_enq, t1}}
      end)

    {:ok, st} = AsyncStore.stats(a)
    :ok = AsyncStore.close(a)
    tick = Bench.ns_per_tick()
    total_s = (t1 - t0) * tick / 1.0e9
    enq_s = (t_enq - t0) * tick / 1.0e9
    throughput = n / total_s
    full = st.full_events - st0.full_events

    c =
      Bench.from_hist(name, h, size, %{
        unit: :perf_counter,
        throughput: throughput,
        note:
          "never drained; #{full} full events, #{retries} retries after :full " <>
            "(warm-up #{retries0}); enqueue rate #{Report.delimit(round(n / enq_s))}/s",
        json_extra:
          Map.merge(async_extra(st, 0), %{
            throughput_per_sec: throughput,
            enqueue_per_sec: n / enq_s,
            full_events: full,
            retries: retries,
            chunk: @chunk
          })
      })

    %{c | messages: n}
  end

  defp async_extra(st, drains) do
    %{
      drains: drains,
      full_events: st.full_events,
      rejected: st.rejected,
      high_water_bytes: st.high_water_bytes,
      batches: st.batches,
      wait: st.wait
    }
  end

  defp record_size(size), do: div(8 + size + 7, 8) * 8

  # Returns {retries, drains}. `per_fill` messages fit in the ring from any
  # position: drain (outside the timed region) after that many. Untimed
  # loops (warm-up) retry an append refused with :full; timed ones never see
  # a full ring.
  defp async_loop(0, _a, _msg, _h, _per_fill, retries, drains), do: {retries, drains}

  defp async_loop(n, a, msg, h, per_fill, retries, drains) do
    drains =
      if per_fill != :never and rem(n, per_fill) == 0 do
        :ok = AsyncStore.drain(a, :infinity)
        drains + 1
      else
        drains
      end

    t0 = :os.perf_counter()
    result = AsyncStore.append(a, msg)
    t1 = :os.perf_counter()

    case result do
      {:ok, _} ->
        if h, do: Native.hist_record(h, t1 - t0)
        async_loop(n - 1, a, msg, h, per_fill, retries, drains)

      {:error, :full} when h == nil ->
        async_loop(n, a, msg, h, per_fill, retries + 1, drains)
    end
  end

  # The throughput loop: chunks of @chunk appends, each chunk timed once.
  defp chunks(n, _a, _msg, _h, retries) when n <= 0, do: retries

  defp chunks(n, a, msg, h, retries) do
    k = min(n, @chunk)
    t0 = :os.perf_counter()
    r = append_n(k, a, msg, 0)
    t1 = :os.perf_counter()
    Native.hist_record(h, div(t1 - t0, k))
    chunks(n - k, a, msg, h, retries + r)
  end

  defp append_n(0, _a, _msg, retries), do: retries

  defp append_n(k, a, msg, retries) do
    case AsyncStore.append(a, msg) do
      {:ok, _} -> append_n(k - 1, a, msg, retries)
      {:error, :full} -> append_n(k, a, msg, retries + 1)
    end
  end

  defp print_goals(cases, opts) do
    by = Bench.by_name(cases)
    a = by["tachyon.async_store.append"]
    s = by["tachyon.store.append"]
    nat = by["tachyon.async_store.append.native"]

    goals =
      [
        a && s &&
          Bench.goal(
            "average append, Tachyon.AsyncStore / Tachyon.Store (#{Report.short_ns(a.avg_ns)} / " <>
              "#{Report.short_ns(s.avg_ns)})",
            Bench.x(a.avg_ns / s.avg_ns),
            "under 1x",
            a.avg_ns < s.avg_ns
          ),
        a &&
          Bench.goal(
            "Tachyon.AsyncStore.append p99.9",
            Report.short_ns(a.p999_ns),
            "under 1 us",
            a.p999_ns < 1_000
          ),
        a &&
          Bench.goal(
            "Tachyon.AsyncStore.append slowest call",
            Report.short_ns(a.max_ns),
            "under 20 us",
            a.max_ns < 20_000
          ),
        nat &&
          Bench.goal(
            "average append in a Rust loop (the producer side alone)",
            Report.short_ns(nat.avg_ns),
            "at most 120 ns, twice CoralStore's 60 ns",
            nat.avg_ns <= 120
          )
      ]
      |> Enum.filter(& &1)

    json = Bench.print_goals(goals, opts, spec())
    Bench.print_hiccup_floor(cases)
    json
  end
end

defmodule Tachyon.Bench do
  @moduledoc false
  # The benchmark harness shared by every `mix tachyon.bench` case: option
  # parsing, timing loops, heap settling, HDR histograms (in Rust), case maps
  # and the cases every bench shares (machine.hiccup). Printing and the JSON
  # file are in Tachyon.Bench.Report.

  alias Tachyon.Bench.Report
  alias Tachyon.Native

  # Option parsing, usage text and "did you mean" are in
  # Tachyon.Bench.CLI; these are its two entry points the parts use.
  defdelegate parse!(argv, spec), to: Tachyon.Bench.CLI
  defdelegate cases!(opts, all), to: Tachyon.Bench.CLI

  @doc "A fresh histogram resource."
  def hist, do: Native.hist_new()

  @doc "Records one sample (ns)."
  def record(h, ns), do: Native.hist_record(h, ns)

  @doc """
  Nanoseconds per `:os.perf_counter/0` tick. The Elixir-side timing loops use
  the perf counter (RDTSC on x86-64: about 35 ns a call here) rather than
  `:erlang.monotonic_time/0` (about 100 ns a call on this VM's clock), so that
  the timer adds as little as possible to what is measured.
  """
  def ns_per_tick do
    case :persistent_term.get({__MODULE__, :ns_per_tick}, nil) do
      nil ->
        v = 1.0e9 / :erlang.convert_time_unit(1, :second, :perf_counter)
        :persistent_term.put({__MODULE__, :ns_per_tick}, v)
        v

      v ->
        v
    end
  end

  @doc """
  Measures the cost of the timer itself: two back-to-back
  `:os.perf_counter/0` calls, `n` times. Returns a case map (in ns).
  """
  def timer_overhead(n \\ 200_000) do
    h = hist()
    timer_loop(n, h)
    from_hist("timer.overhead", h, 0, %{unit: :perf_counter})
  end

  defp timer_loop(0, _h), do: :ok

  defp timer_loop(n, h) do
    t0 = :os.perf_counter()
    t1 = :os.perf_counter()
    Native.hist_record(h, t1 - t0)
    timer_loop(n - 1, h)
  end

  @doc """
  Times `fun.()` `warmup + n` times (warm-up samples discarded) and returns a
  case. For slow peers, where the closure call is noise; hot cases write
  their own loop so that only the API call sits inside the timed region.
  """
  def measure(name, n, warmup, size, fun) do
    h = hist()
    run_loop(warmup, fun, nil)

    if n >= 200_000 do
      p = Tachyon.Bench.Progress.new(name, n)
      chunk = div(n, 10)

      p =
        Enum.reduce(1..10, p, fn i, p ->
          run_loop(if(i == 10, do: n - 9 * chunk, else: chunk), fun, h)
          Tachyon.Bench.Progress.update(p, min(n, i * chunk))
        end)

      Tachyon.Bench.Progress.done(p)
    else
      run_loop(n, fun, h)
    end

    from_hist(name, h, size, %{unit: :perf_counter})
  end

  defp run_loop(0, _fun, _h), do: :ok

  defp run_loop(n, fun, nil) do
    fun.()
    run_loop(n - 1, fun, nil)
  end

  defp run_loop(n, fun, h) do
    t0 = :os.perf_counter()
    fun.()
    t1 = :os.perf_counter()
    Native.hist_record(h, t1 - t0)
    run_loop(n - 1, fun, h)
  end

  @doc """
  Runs `fun` in a fresh process with a 256K-word (2 MiB) heap and returns its
  result. A timed loop allocates a few words per call (`{:ok, index}`); with
  the default heap a minor GC lands in a timed region every few hundred
  calls, with this one about once per 80,000 (the counterpart of the large
  young generation in the seeds' JVM flags). The timed loops report the minor
  GCs they saw (`timed/1`, which also settles the heap first).
  """
  def in_big_heap(fun) do
    parent = self()
    ref = make_ref()

    {pid, mon} =
      :erlang.spawn_opt(fn -> send(parent, {ref, fun.()}) end, [:monitor, min_heap_size: 262_144])

    receive do
      {^ref, result} ->
        Process.demonitor(mon, [:flush])
        result

      {:DOWN, ^mon, :process, ^pid, reason} ->
        Mix.raise("benchmark loop failed: #{inspect(reason)}")
    end
  end

  @doc """
  Runs a timed loop `fun` in the calling process and returns `{result_of_fun,
  minor GCs of the process meanwhile}`.

  It first settles the heap (`settle_heap/0`): a full GC, then the young heap
  filled with garbage a few times over. Without that, the loop's own
  allocations (3 words per call for an `{:ok, index}` built by the NIF,
  inside the timed region) walk into heap pages that were never written:
  each first write is a page fault (about 2 us on this VM), one every ~170
  calls, and in a fresh VM that alone put 0.6% of the samples of
  `tachyon.store.append` at 2 us (p99.9 2.0-2.8 us instead of 0.8-0.9 us;
  see docs/BENCHMARK_HISTORY.md). After a few minor GCs the young heaps come from
  carriers the allocator keeps cached, whose pages are mapped already.
  """
  def timed(fun) do
    settle_heap()
    {:garbage_collection, gc0} = Process.info(self(), :garbage_collection)
    result = fun.()
    {:garbage_collection, gc1} = Process.info(self(), :garbage_collection)
    {result, gc1[:minor_gcs] - gc0[:minor_gcs]}
  end

  @doc """
  The warm-up and measured passes of a timed loop, in the calling process
  (run it in `in_big_heap/1`): `loop.(warmup, nil, acc)` (nothing recorded),
  then `loop.(n, hist, acc_after_warmup)` under `timed/1`. `loop` returns
  the accumulator (round trips lost, say). Returns `{hist, acc, minor_gcs}`.
  """
  def sample(warmup, n, loop, acc \\ nil) do
    acc = loop.(warmup, nil, acc)
    h = hist()
    # Long runs go in tenths, with the progress printed between them.
    {acc, gcs} =
      if n >= 200_000 do
        chunk = div(n, 10)
        p = Tachyon.Bench.Progress.new("measuring", n)

        {{acc, p}, gcs} =
          timed(fn ->
            Enum.reduce(1..10, {acc, p}, fn i, {acc, p} ->
              k = if i == 10, do: n - 9 * chunk, else: chunk
              acc = loop.(k, h, acc)
              {acc, Tachyon.Bench.Progress.update(p, min(n, i * chunk))}
            end)
          end)

        Tachyon.Bench.Progress.done(p)
        {acc, gcs}
      else
        timed(fn -> loop.(n, h, acc) end)
      end

    {h, acc, gcs}
  end

  @doc """
  Runs `fun` and returns `{result, utilization}`: how busy the normal
  schedulers were while it ran (`:scheduler.sample_all/0` before and after),
  as `%{"normal_pct" => [per scheduler], "total_pct" => all schedulers}`.
  What a polling case costs the VM.
  """
  def with_utilization(fun) do
    s1 = :scheduler.sample_all()
    result = fun.()
    u = :scheduler.utilization(s1, :scheduler.sample_all())
    normal = for {:normal, _id, f, _} <- u, do: Float.round(f * 100, 1)
    {:total, total, _} = List.keyfind(u, :total, 0)
    {result, %{"normal_pct" => normal, "total_pct" => Float.round(total * 100, 1)}}
  end

  @doc "`\"normal schedulers busy 97.0%/4.1%\"` for a utilization of `with_utilization/1`."
  def utilization_note(%{"normal_pct" => normal}),
    do: "normal schedulers busy " <> Enum.map_join(normal, "/", &"#{&1}%")

  @doc """
  The `machine.hiccup` case: a Rust loop on a dirty CPU scheduler that only
  reads the clock for `ms` milliseconds; each sample is the time between two
  reads. Its tail is the machine's (timer ticks, interrupts, the hypervisor
  taking the vCPU away): the floor of every tail measured in the same run.
  The note and `:json_extra` give the rate of gaps over 2, 20 and 100 us.
  """
  def hiccup_case(name \\ "machine.hiccup", ms) do
    {h, elapsed_ns} = Native.bench_hiccup(ms)
    secs = elapsed_ns / 1.0e9

    rates =
      for us <- [2, 20, 100], into: %{} do
        {"gaps_over_#{us}us_per_sec",
         Float.round(Native.hist_count_above(h, us * 1000) / secs, 1)}
      end

    from_hist(name, h, 0, %{
      note:
        "a clock-reading loop for #{ms} ms: gaps > 2 us #{rates["gaps_over_2us_per_sec"]}/s, " <>
          "> 20 us #{rates["gaps_over_20us_per_sec"]}/s, > 100 us #{rates["gaps_over_100us_per_sec"]}/s",
      json_extra: rates
    })
  end

  @doc """
  Runs the cases of `all` that are in `wanted`, in order, printing each
  report, and returns them. `machine.hiccup` is run by `hiccup_case/1`
  (`opts[:hiccup_ms]`); any other case by `run_case.(name, dir)` with a fresh
  temporary directory (`tmp_dir/2` under `label`), removed afterwards.
  """
  def run_cases(all, wanted, opts, label, run_case) do
    for name <- all, name in wanted do
      c =
        if name == "machine.hiccup" do
          hiccup_case(opts[:hiccup_ms])
        else
          dir = tmp_dir(opts, label)

          try do
            run_case.(name, dir)
          after
            File.rm_rf!(dir)
          end
        end

      Report.print_report(c, stdev: false)
      c
    end
  end

  @doc "The cases by name."
  def by_name(cases), do: Map.new(cases, &{&1.name, &1})

  @doc """
  A goal of a part, in the user's words: `what` was measured (`"average
  append, :disk_log.blog / Tachyon.Store"`), the `measured` value and the
  `goal` as text (`"19.05x"`, `"at least 40x"`), and whether it is `met`.
  """
  def goal(what, measured, goal, met),
    do: %{what: what, measured: measured, goal: goal, met: met}

  @doc "A goal's bound as text: `\"at most 1.5x\"`, `\"at least 8x\"` (`cmp`: `:le` or `:ge`)."
  def bound_text(:le, bound), do: "at most #{short(bound)}x"
  def bound_text(:ge, bound), do: "at least #{short(bound)}x"

  defp short(b) when b == trunc(b), do: Integer.to_string(trunc(b))
  defp short(b), do: :erlang.float_to_binary(b * 1.0, [:short])

  @doc "`19.05` -> `\"19.05x\"`."
  def x(ratio), do: :erlang.float_to_binary(ratio * 1.0, decimals: 2) <> "x"

  @doc """
  Prints a part's goals and returns them for its JSON (with `"checked"`).
  Goals are set for a full run (`Tachyon.Bench.CLI.full_run?/2`): on one,
  each line says met or not met; on a shorter run (the default sizes,
  `--quick`) the figures are shown for reference, with the flags of a full
  run, and nothing is claimed.
  """
  def print_goals(goals, opts, spec) do
    full? = Tachyon.Bench.CLI.full_run?(opts, spec)

    if goals != [] do
      IO.puts(
        if full?,
          do: "\nGoals (checked: this is a full run):",
          else:
            "\nGoals, set for a full run (mix tachyon.bench #{spec.name} " <>
              "#{Tachyon.Bench.CLI.full_flags(spec)}); this run is shorter, so they are shown, not checked:"
      )

      for g <- goals do
        IO.puts(
          if full?,
            do:
              "  #{g.what}: #{g.measured} (goal: #{g.goal}): #{if g.met, do: "met", else: "not met"}",
            else: "  #{g.what}: #{g.measured} (goal for a full run: #{g.goal})"
        )
      end
    end

    for g <- goals,
        do: %{
          "goal" => "#{g.what}: #{g.goal}",
          "measured" => g.measured,
          "checked" => full?,
          "met" => g.met
        }
  end

  @doc """
  Prints what the `machine.hiccup` case of `cases` (if any) says about a
  latency tail: the largest gap a loop doing nothing saw, and how often it
  saw gaps over 2, 20 and 100 us.
  """
  def print_hiccup_floor(cases) do
    case Enum.find(cases, &(&1.name == "machine.hiccup")) do
      nil ->
        :ok

      h ->
        r = h.json_extra

        IO.puts(
          "  machine floor (machine.hiccup, a loop that only reads the clock): max gap " <>
            "#{Report.short_ns(h.max_ns)}; gaps > 2 us #{r["gaps_over_2us_per_sec"]}/s, " <>
            "> 20 us #{r["gaps_over_20us_per_sec"]}/s, > 100 us #{r["gaps_over_100us_per_sec"]}/s"
        )
    end
  end

  @doc "A full GC, then the young heap filled with short-lived garbage four times over (four minor GCs)."
  def settle_heap do
    :erlang.garbage_collect()
    {:heap_size, words} = Process.info(self(), :heap_size)
    # 1,001-word tuples: enough of them to overflow the heap once per round.
    burn(4 * (div(words, 1001) + 2), nil)
  end

  defp burn(0, _last), do: :ok
  defp burn(n, _last), do: burn(n - 1, :erlang.make_tuple(1000, n))

  @doc """
  Builds a case map from a histogram resource. The histogram holds
  nanoseconds, or perf counter ticks when `extra` has `unit: :perf_counter`
  (what the Elixir timing loops record).
  """
  def from_hist(name, h, size, extra \\ %{}) do
    r = Native.hist_report(h)
    {unit, extra} = Map.pop(extra, :unit, :ns)
    scale = if unit == :perf_counter, do: ns_per_tick(), else: 1

    scaled =
      Map.new(r, fn
        {:count, v} ->
          {:count, v}

        {:tails, ts} ->
          {:tails, Enum.map(ts, fn {p, a, sd, m} -> {p, a * scale, sd * scale, m * scale} end)}

        {k, v} ->
          {k, v * scale}
      end)

    from_report(name, scaled, size, extra)
  end

  @doc """
  Builds a case map from a report in nanoseconds: a map with `:count`,
  `:avg`, `:stdev`, `:min`, `:max`, `:p50` .. `:p99999` and `:tails` (a list
  of `{percentile, avg, stdev, max}`), as `Tachyon.Native.hist_report/1`
  returns or a bench parses from a Rust binary's result line. Missing keys
  count as 0; `extra` is merged last.
  """
  def from_report(name, r, size, extra \\ %{}) do
    get = fn k -> Map.get(r, k, 0) end
    avg = get.(:avg)

    Map.merge(
      %{
        name: name,
        messages: trunc(get.(:count)),
        size: size,
        avg_ns: avg,
        stdev_ns: get.(:stdev),
        min_ns: get.(:min),
        max_ns: get.(:max),
        p50_ns: get.(:p50),
        p75_ns: get.(:p75),
        p90_ns: get.(:p90),
        p99_ns: get.(:p99),
        p999_ns: get.(:p999),
        p9999_ns: get.(:p9999),
        p99999_ns: get.(:p99999),
        ops_per_sec: if(avg > 0, do: 1.0e9 / avg, else: 0.0),
        tails: Map.get(r, :tails, [])
      },
      extra
    )
  end

  @report_keys ~w(count avg stdev min max p50 p75 p90 p99 p999 p9999 p99999)

  @doc """
  Parses the `key=value` tokens of a result line printed by a Rust bench
  binary. Returns `{strings, report}`: every token as strings, and the
  report keys (`count`, `avg`, ..., `p99999`) as numbers for `from_report/4`.
  """
  def parse_result_line(line) do
    kv =
      for token <- String.split(line, " ", trim: true),
          [k, v] <- [String.split(token, "=", parts: 2)],
          into: %{},
          do: {k, v}

    report =
      for k <- @report_keys, Map.has_key?(kv, k), into: %{} do
        {String.to_atom(k), parse_number(kv[k])}
      end

    {kv, report}
  end

  @doc "A number from text (`0.0` for what is not one)."
  def parse_number(text) do
    case Float.parse(text || "0") do
      {f, _} -> f
      :error -> 0.0
    end
  end

  @doc "A temporary directory under the system tmp dir (or `--dir`)."
  def tmp_dir(opts, label) do
    base = opts[:dir] || System.tmp_dir!()
    dir = Path.join(base, "tachyon-bench-#{label}-#{System.unique_integer([:positive])}")
    File.rm_rf!(dir)
    File.mkdir_p!(dir)
    dir
  end
end

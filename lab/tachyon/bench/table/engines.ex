defmodule Tachyon.Bench.Table.Engines do
  @moduledoc false
  # The engines of `mix tachyon.bench table` (Tachyon.Table in its three
  # modes, ETS, DETS, Bitcask) behind one put/get interface, and the timed
  # put and get passes run in one or several processes.

  alias Tachyon.Bench
  alias Tachyon.Table

  @bitcask_ebin "/usr/lib/erlang/lib/bitcask-2.1.0/ebin"
  @dets_max_bytes 1_800_000_000

  @doc """
  The put and get cases of `engine` for one value size and process count
  (none if the engine is skipped: not installed, over DETS's file limit).
  """
  def run(engine, size, procs, opts) do
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

  @doc false
  def setup("tachyon." <> mode, opts, size, records) do
    dir = Bench.tmp_dir(opts, "table-#{mode}")

    # Sized for the burst it times right after open (hundreds of MB of
    # puts): segments all of 64 MiB from the first, as Tachyon.Table's
    # "Disk use" advises for such a burst (with the defaults the first
    # segments are 2, 4, 8 ... MiB, and a roll may wait for the next one
    # while the prepare thread is still making it).
    {:ok, t} =
      Table.open(dir,
        storage: String.to_existing_atom(mode),
        capacity: records,
        compaction_interval_ms: nil,
        max_value_size: max(size, 1_048_576),
        segment_size: 64 * 1024 * 1024,
        initial_segment_size: 64 * 1024 * 1024
      )

    {:ok, %{kind: :tachyon, t: t, dir: dir}}
  end

  @doc false
  def setup("ets", _opts, _size, _records) do
    tab = :ets.new(:bench_table, [:set, :public, read_concurrency: true, write_concurrency: true])
    {:ok, %{kind: :ets, t: tab, dir: nil}}
  end

  @doc false
  def setup("dets", opts, size, records) do
    if records * (size + 40) > @dets_max_bytes do
      {:skip, "#{records} records of #{size} bytes exceed DETS's 2 GB file limit"}
    else
      dir = Bench.tmp_dir(opts, "dets")
      name = :"bench_dets_#{System.unique_integer([:positive])}"
      {:ok, d} = :dets.open_file(name, file: to_charlist(Path.join(dir, "t.dets")), type: :set)
      {:ok, %{kind: :dets, t: d, dir: dir}}
    end
  end

  @doc false
  def setup("bitcask", opts, _size, _records) do
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

  @doc false
  def teardown(%{kind: :tachyon, t: t, dir: dir}) do
    Table.close(t)
    File.rm_rf!(dir)
  end

  @doc false
  def teardown(%{kind: :ets, t: t}), do: :ets.delete(t)

  @doc false
  def teardown(%{kind: :dets, t: t, dir: dir}) do
    :dets.close(t)
    File.rm_rf!(dir)
  end

  @doc false
  def teardown(%{kind: :bitcask, dir: dir}), do: File.rm_rf!(dir)

  # Bitcask (called through a variable: it is an optional peer, absent at
  # compile time) wants a handle per process: one writer, readers read-only.
  @doc false
  def writer(%{kind: :bitcask, dir: dir} = st) do
    m = bitcask()
    %{st | t: {m, m.open(to_charlist(dir), [:read_write, {:open_timeout, 600}])}}
  end

  @doc false
  def writer(st), do: st

  @doc false
  def reader(%{kind: :bitcask, dir: dir} = st) do
    m = bitcask()
    %{st | t: {m, m.open(to_charlist(dir), [{:open_timeout, 600}])}}
  end

  @doc false
  def reader(st), do: st

  @doc false
  def release(%{kind: :bitcask, t: {m, ref}}), do: m.close(ref)
  @doc false
  def release(_), do: :ok

  defp bitcask, do: :persistent_term.get({Tachyon.Bench.Table, :bitcask}, :bitcask)

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

  @doc false
  # Only the call is timed; key and value are built before the clock starts.
  # (Also the scale run's put loop.)
  def put_loop(_kind, _t, _v, i, last, _h) when i >= last, do: :ok

  def put_loop(kind, t, base, i, last, h) do
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
  @doc false
  def do_put(:tachyon, t, k, v), do: :ok = Table.put(t, k, v)
  @doc false
  def do_put(:ets, t, k, v), do: true = :ets.insert(t, {k, v})
  @doc false
  def do_put(:dets, t, k, v), do: :ok = :dets.insert(t, {k, v})
  @doc false
  def do_put(:bitcask, {m, t}, k, v), do: :ok = m.put(t, k, v)

  @doc false
  def do_get(:tachyon, t, k), do: {:ok, _} = Table.get(t, k)
  @doc false
  def do_get(:ets, t, k), do: [_] = :ets.lookup(t, k)
  @doc false
  def do_get(:dets, t, k), do: [_] = :dets.lookup(t, k)
  @doc false
  def do_get(:bitcask, {m, t}, k), do: {:ok, _} = m.get(t, k)

  @doc false
  # Uniform random keys from a Park-Miller generator (small integers only).
  # (Also the scale run's get loop.)
  def get_loop(_kind, _t, x, _records, 0, _h), do: x

  def get_loop(kind, t, x, records, n, h) do
    x = rem(x * 48_271, 2_147_483_647)
    k = <<"key:", rem(x, records)::64>>
    t0 = :os.perf_counter()
    do_get(kind, t, k)
    t1 = :os.perf_counter()
    if h, do: Tachyon.Native.hist_record(h, t1 - t0)
    get_loop(kind, t, x, records, n - 1, h)
  end
end

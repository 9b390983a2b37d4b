# The timed loop of `mix tachyon.bench store` (CASE=store: 200,000 appends
# of 256 bytes after 20,000 warm-up ones) or of `mix tachyon.bench table
# --procs 1 --engines tachyon.memory` (CASE=table: 1,000,000 puts of
# 256-byte values, the first half timed), with the bench's options, after
# machine.hiccup as the bench runs it. Every call slower than SLOW_US
# (default 100) is listed, and, when the kernel's trace_marker is writable
# (root, tracefs mounted), marked in the kernel trace right after it
# returns ("tachyon-slow <call> <ns>"): bench/experiments/sched_trace.py
# then says which threads had the CPU meanwhile.
#
#     CASE=table mix run bench/experiments/slow_calls.exs
#     bench/experiments/sched_trace.sh /tmp/t.txt mix run bench/experiments/slow_calls.exs
alias Tachyon.Bench

defmodule SlowCalls do
  @marker "/sys/kernel/tracing/trace_marker"

  def marker do
    case File.open(@marker, [:write, :raw]) do
      {:ok, f} -> f
      _ -> nil
    end
  end

  def ns(ticks), do: :erlang.convert_time_unit(ticks, :perf_counter, :nanosecond)

  # Runs op.(i) for i in first..last-1, timing each when h is a histogram;
  # returns the slow ones as [{i, ns}], marking each in the trace.
  def loop(i, last, _op, _h, _slow, _m, acc) when i >= last, do: acc

  def loop(i, last, op, nil, slow, m, acc) do
    op.(i)
    loop(i + 1, last, op, nil, slow, m, acc)
  end

  def loop(i, last, op, h, slow, m, acc) do
    t0 = :os.perf_counter()
    op.(i)
    t1 = :os.perf_counter()
    Tachyon.Native.hist_record(h, t1 - t0)

    acc =
      if t1 - t0 > slow do
        d = ns(t1 - t0)
        if m, do: :file.write(m, "tachyon-slow #{i} #{d}\n")
        [{i, d} | acc]
      else
        acc
      end

    loop(i + 1, last, op, h, slow, m, acc)
  end
end

what = System.get_env("CASE", "store")
slow_ns = String.to_integer(System.get_env("SLOW_US", "100")) * 1000
slow = :erlang.convert_time_unit(slow_ns, :nanosecond, :perf_counter)
# (A raw file belongs to the process that opens it: the loops' own.)
marked = SlowCalls.marker() != nil
dir = Path.join(System.tmp_dir!(), "tachyon-slow-calls-#{System.unique_integer([:positive])}")
hiccup = Bench.hiccup_case(1000)

{name, h, slow_calls} =
  case what do
    "store" ->
      {:ok, s} =
        Tachyon.Store.open(dir,
          segment_size: 64 * 1024 * 1024,
          initial_segment_size: 64 * 1024 * 1024
        )

      msg = :binary.copy(<<0xA5>>, 256)
      op = fn _ -> {:ok, _} = Tachyon.Store.append(s, msg) end

      {h, calls} =
        Bench.in_big_heap(fn ->
          m = SlowCalls.marker()
          SlowCalls.loop(0, 20_000, op, nil, slow, m, [])
          h = Bench.hist()
          {calls, _gcs} = Bench.timed(fn -> SlowCalls.loop(0, 200_000, op, h, slow, m, []) end)
          {h, calls}
        end)

      Tachyon.Store.close(s)
      {"tachyon.store.append", h, calls}

    "table" ->
      {:ok, t} =
        Tachyon.Table.open(dir,
          storage: :memory,
          capacity: 1_000_000,
          compaction_interval_ms: nil,
          max_value_size: 1_048_576,
          segment_size: 64 * 1024 * 1024,
          initial_segment_size: 64 * 1024 * 1024
        )

      base = :crypto.strong_rand_bytes(256)

      op = fn i ->
        :ok =
          Tachyon.Table.put(t, <<"key:", i::64>>, <<i::64, binary_part(base, 8, 248)::binary>>)
      end

      {h, calls} =
        Bench.in_big_heap(fn ->
          m = SlowCalls.marker()
          h = Bench.hist()
          {calls, _gcs} = Bench.timed(fn -> SlowCalls.loop(0, 500_000, op, h, slow, m, []) end)
          SlowCalls.loop(500_000, 1_000_000, op, nil, slow, m, [])
          {h, calls}
        end)

      Tachyon.Table.close(t)
      {"tachyon.memory.put.256.1p", h, calls}
  end

File.rm_rf!(dir)
c = Bench.from_hist(name, h, 256, %{unit: :perf_counter})

IO.puts(
  "machine.hiccup max #{hiccup.max_ns} ns; #{name}: p50 #{c.p50_ns} p99.99 #{c.p9999_ns} " <>
    "max #{c.max_ns} ns; #{length(slow_calls)} calls over #{div(slow_ns, 1000)} us" <>
    if(marked, do: " (marked in the kernel trace)", else: "")
)

for {i, d} <- slow_calls |> Enum.sort_by(&(-elem(&1, 1))) |> Enum.take(10),
    do: IO.puts("  call #{i}: #{d} ns")

# p99.9 of Tachyon.Store.append/2 in a fresh VM depending on what is done to
# the timed loop's heap first (V=nogc | gc | cycle | gc+cycle).
defmodule HeapSettle do
  def loop(0, _s, _m, _h), do: :ok

  def loop(n, s, m, nil) do
    {:ok, _} = Tachyon.Store.append(s, m)
    loop(n - 1, s, m, nil)
  end

  def loop(n, s, m, h) do
    t0 = :os.perf_counter()
    {:ok, _} = Tachyon.Store.append(s, m)
    t1 = :os.perf_counter()
    Tachyon.Native.hist_record(h, t1 - t0)
    loop(n - 1, s, m, h)
  end

  # The young heap filled with garbage four times over (four minor GCs).
  def cycle do
    {:heap_size, words} = Process.info(self(), :heap_size)
    burn(4 * (div(words, 1001) + 2), nil)
  end

  defp burn(0, _), do: :ok
  defp burn(n, _), do: burn(n - 1, :erlang.make_tuple(1000, n))
end

v = System.get_env("V", "gc+cycle")
dir = Path.join(System.tmp_dir!(), "tachyon-heap-settle-#{System.unique_integer([:positive])}")
{:ok, s} = Tachyon.Store.open(dir, segment_size: 64 * 1024 * 1024)
m = :binary.copy(<<0xA5>>, 256)

h =
  Tachyon.Bench.in_big_heap(fn ->
    HeapSettle.loop(100_000, s, m, nil)
    if v in ["gc", "gc+cycle"], do: :erlang.garbage_collect()
    if v in ["cycle", "gc+cycle"], do: HeapSettle.cycle()
    h = Tachyon.Bench.hist()
    HeapSettle.loop(1_000_000, s, m, h)
    h
  end)

r = Tachyon.Native.hist_report(h)
IO.puts("#{v}: p99.9 #{r[:p999]} ns, p99.99 #{r[:p9999]} ns")
Tachyon.Store.close(s)
File.rm_rf!(dir)

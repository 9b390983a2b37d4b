# Records the iteration number of every Tachyon.Store.append/2 slower than
# 1.5 us over 1,000,000 calls (after 100,000 warm-up ones) and prints how many
# there were and the most common distances between them. Run it in a fresh
# VM; SETTLE=1 settles the heap first, as the bench does.
defmodule SlowSamples do
  def loop(0, _s, _m, _i, acc), do: acc

  def loop(n, s, m, i, acc) do
    t0 = :os.perf_counter()
    {:ok, _} = Tachyon.Store.append(s, m)
    t1 = :os.perf_counter()
    acc = if t1 - t0 > 1500, do: [i | acc], else: acc
    loop(n - 1, s, m, i + 1, acc)
  end
end

dir = Path.join(System.tmp_dir!(), "tachyon-slow-samples-#{System.unique_integer([:positive])}")
{:ok, s} = Tachyon.Store.open(dir, segment_size: 64 * 1024 * 1024)
m = :binary.copy(<<0xA5>>, 256)
settle? = System.get_env("SETTLE") == "1"

idx =
  Tachyon.Bench.in_big_heap(fn ->
    SlowSamples.loop(100_000, s, m, 0, [])
    if settle?, do: Tachyon.Bench.settle_heap()
    SlowSamples.loop(1_000_000, s, m, 0, []) |> Enum.reverse()
  end)

gaps =
  idx
  |> Enum.chunk_every(2, 1, :discard)
  |> Enum.map(fn [a, b] -> b - a end)
  |> Enum.frequencies()
  |> Enum.sort_by(&(-elem(&1, 1)))
  |> Enum.take(5)

IO.puts(
  "settled: #{settle?}; #{length(idx)} appends over 1.5 us; most common distances {iterations, count}: #{inspect(gaps)}"
)

Tachyon.Store.close(s)
File.rm_rf!(dir)

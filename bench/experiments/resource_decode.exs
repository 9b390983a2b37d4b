# An empty NIF with two plain arguments against one whose first argument is a
# store handle (decoded as a resource): the difference is the handle's decode.
defmodule ResourceDecode do
  def plain(0, _a, _b), do: :ok

  def plain(n, a, b) do
    :ok = Tachyon.Native.bench_noop(a, b)
    plain(n - 1, a, b)
  end

  def store(0, _a, _b), do: :ok

  def store(n, a, b) do
    :ok = Tachyon.Native.bench_noop_store(a, b)
    store(n - 1, a, b)
  end
end

dir =
  Path.join(System.tmp_dir!(), "tachyon-resource-decode-#{System.unique_integer([:positive])}")

{:ok, s} = Tachyon.Store.open(dir)
m = :binary.copy("x", 256)
n = 5_000_000

for _ <- 1..3 do
  {t1, _} = :timer.tc(fn -> ResourceDecode.plain(n, s.ref, m) end)
  {t2, _} = :timer.tc(fn -> ResourceDecode.store(n, s.ref, m) end)

  IO.puts(
    "empty NIF #{Float.round(t1 * 1000 / n, 1)} ns, with a store handle #{Float.round(t2 * 1000 / n, 1)} ns"
  )
end

Tachyon.Store.close(s)
File.rm_rf!(dir)

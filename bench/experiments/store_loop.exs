# One timed loop of Tachyon.Store.append/2, exactly as `mix tachyon.bench
# store` runs it (Tachyon.Bench.Store.elixir_append/7): N messages of 256
# bytes after 100,000 warm-up ones. Prints avg and percentiles in ns.
n = String.to_integer(System.get_env("N", "1000000"))
dir = Path.join(System.tmp_dir!(), "tachyon-store-loop-#{System.unique_integer([:positive])}")
File.mkdir_p!(dir)
msg = :binary.copy(<<0xA5>>, 256)
c = Tachyon.Bench.Store.elixir_append("store_loop", dir, n, 100_000, 256, msg, true)

IO.puts(
  "#{n} appends: avg #{Float.round(c.avg_ns, 1)} p50 #{c.p50_ns} p99 #{c.p99_ns} " <>
    "p99.9 #{c.p999_ns} p99.99 #{c.p9999_ns} max #{c.max_ns}"
)

File.rm_rf!(dir)

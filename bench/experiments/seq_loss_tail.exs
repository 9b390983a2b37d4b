# The bus round trip from the Rust member loop (no BEAM in the loop), with
# and without 1% of bus datagrams dropped on the member's side: what the gap
# fill adds to the tail, apart from the machine's own tail.
#
#   W=busy_spin mix run bench/experiments/seq_loss_tail.exs
#
# (W: the sequencer's wait strategy, default backoff; HA: its
# --heartbeat-after in microseconds, default 10.) On the 2-core KVM guest of
# docs/BENCHMARK_HISTORY.md, 2026-11-23, 50,000 round trips after 10,000, 256 bytes
# (ns):
#   W=busy_spin: no loss p50 11,559 p99.9 70,399; 1% loss p50 11,487 p99.9 71,487
#   W=backoff:   no loss p50 12,263 p99.9 71,679; 1% loss p50 11,015 p99.9 66,047
dir = Path.join(System.tmp_dir!(), "seq-loss-#{System.unique_integer([:positive])}")

{:ok, p} =
  Tachyon.Sequencer.OSProcess.start([
    "--path",
    dir,
    "--port",
    "0",
    "--wait",
    System.get_env("W", "backoff"),
    "--heartbeat-after",
    System.get_env("HA", "10")
  ])

for loss <- [0.0, 0.01] do
  {:ok, h} =
    Tachyon.Native.bench_seq_native(%{
      sequencer: p.address,
      kind: :roundtrip,
      count: 50_000,
      warmup: 10_000,
      size: 256,
      max_datagram: 1472,
      loss: loss
    })

  r = Tachyon.Native.hist_report(h)
  IO.inspect({loss, Map.take(r, [:p50, :p90, :p99, :p999, :p9999, :max])})
end

Tachyon.Sequencer.OSProcess.kill(p)
File.rm_rf!(dir)

# Where a bus member's fan-out to several processes belongs: in the
# member's Rust thread (it builds each message once and sends a copy to
# every receiver: what Tachyon.Bus.subscribe/1 does), or in a BEAM process
# that gets the messages and forwards them (a relay: what a Bus process
# re-sending to its subscribers would be). The round trip (publish, then
# receive the own message) of one process, against one sequencer OS
# process, in :messages mode:
#
#   owner         Tachyon.Bus.open/1, the process the owner (no fan-out)
#   subscriber    Tachyon.Bus.start_link/1 with no owner, the process its
#                 only subscriber (the thread's fan-out, one receiver)
#   subscriber.2  the same with a second subscriber that only receives
#                 (the thread sends each message twice)
#   relay         Tachyon.Bus.open/1 owned by a process that forwards every
#                 message to the measuring one (the fan-out in the BEAM)
#   relay.2       the same, the relay forwarding to a second process first
#                 (as subscriber.2: the measuring process is the second)
#
#   mix run bench/experiments/bus_fanout.exs
#
# (N: round trips per case, default 50,000, after N/5 of warm-up; R:
# rounds, default 2: the cases run in turn, R times, so that a noisy
# moment of the shared machine hits every case alike.) Prints p50, p99 and
# p99.9 in microseconds per case and round.
alias Tachyon.{Bench, Bus}

n = String.to_integer(System.get_env("N", "50000"))
rounds = String.to_integer(System.get_env("R", "2"))
dir = Path.join(System.tmp_dir!(), "bus-fanout-#{System.os_time()}")
{:ok, p} = Tachyon.Sequencer.OSProcess.start(["--path", dir, "--port", "0", "--wait", "backoff"])
msg = :binary.copy(<<0x5A>>, 256)

defmodule FanoutLoop do
  def run(_bus, _msg, 0, _h), do: nil

  def run(bus, msg, k, h) do
    t0 = :os.perf_counter()
    {:ok, _} = Bus.publish(bus, msg)

    receive do
      {:tachyon_bus, _, _seq, 1, _} -> :ok
    after
      5000 -> raise "no message in 5 s"
    end

    if h, do: Bench.record(h, :os.perf_counter() - t0)
    run(bus, msg, k - 1, h)
  end

  # A process that only receives (the second subscriber).
  def sink do
    receive do
      :stop -> :ok
      _ -> sink()
    end
  end

  # Forwards every bus message to each of `to`.
  def relay(to) do
    receive do
      {:tachyon_bus, _, _, _, _} = m ->
        Enum.each(to, &send(&1, m))
        relay(to)

      {:member, from} ->
        {:ok, bus} = Bus.open(sequencer: Process.get(:seq), member_id: 1)
        send(from, {:member, bus})
        relay(to)

      :stop ->
        :ok

      _ ->
        relay(to)
    end
  end
end

# {member to publish on, what to undo afterwards}; called in the measuring process.
setup = fn
  "owner" ->
    {:ok, bus} = Bus.open(sequencer: p.address, member_id: 1)
    {bus, fn -> Bus.close(bus) end}

  "subscriber" ->
    {:ok, pid} = Bus.start_link(sequencer: p.address, member_id: 1, stats_interval_ms: nil)
    :ok = Bus.subscribe(pid)
    {Bus.bus(pid), fn -> Bus.close(pid) end}

  "subscriber.2" ->
    {:ok, pid} = Bus.start_link(sequencer: p.address, member_id: 1, stats_interval_ms: nil)
    sink = spawn(&FanoutLoop.sink/0)
    :ok = Tachyon.Bus.Subscribers.subscribe({:pid, pid}, sink)
    :ok = Bus.subscribe(pid)
    {Bus.bus(pid), fn -> send(sink, :stop) && Bus.close(pid) end}

  "relay" <> more ->
    me = self()
    seq = p.address
    sink = spawn(&FanoutLoop.sink/0)
    to = if more == ".2", do: [sink, me], else: [me]

    relay =
      spawn(fn ->
        Process.put(:seq, seq)
        FanoutLoop.relay(to)
      end)

    send(relay, {:member, me})
    bus = receive do: ({:member, b} -> b), after: (10_000 -> raise("relay: no member"))
    {bus, fn -> Bus.close(bus) && send(relay, :stop) && send(sink, :stop) end}
end

cases = ["owner", "subscriber", "subscriber.2", "relay", "relay.2"]

for round <- 1..rounds, name <- cases do
  h =
    Bench.in_big_heap(fn ->
      {bus, undo} = setup.(name)
      {h, _, _} = Bench.sample(div(n, 5), n, fn k, h, _ -> FanoutLoop.run(bus, msg, k, h) end)
      undo.()
      h
    end)

  r = Tachyon.Native.hist_report(h)
  us = fn key -> Float.round(r[key] * Bench.ns_per_tick() / 1000, 2) end

  IO.puts(
    "round #{round} #{String.pad_trailing(name, 13)} p50 #{us.(:p50)} us  p99 #{us.(:p99)} us  p99.9 #{us.(:p999)} us"
  )
end

Tachyon.Sequencer.OSProcess.kill(p)
File.rm_rf!(dir)

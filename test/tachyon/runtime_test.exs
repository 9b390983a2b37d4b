defmodule Tachyon.RuntimeTest do
  # Counts process-wide joins: not async, so that no other test's threads
  # are joined meanwhile.
  use ExUnit.Case, async: false

  import Tachyon.TestHelpers

  alias Tachyon.{AsyncStore, Bus, Echo, Native, Sequencer, Store, Table, UDP}

  # Every thread a part starts is a tachyon_core::worker::Worker. A join
  # asked for on a normal scheduler (a resource destructor run by the
  # garbage collector, a monitor's down callback) is not waited for but
  # counted: the parts must never ask for one there (they drop the worker,
  # whose join goes to the reaper thread, or close on a dirty scheduler).
  defp refused_joins, do: Native.runtime_info().refused_joins

  # Opens handles in a process that then exits: their resources are
  # destroyed on the scheduler that runs the exit, a normal one.
  defp in_dying_process(fun) do
    parent = self()
    {pid, ref} = spawn_monitor(fn -> send(parent, {:opened, fun.()}) end)
    assert_receive {:opened, result}, 5_000
    assert_receive {:DOWN, ^ref, :process, ^pid, _}, 5_000
    result
  end

  test "collected handles and dead owners never make a normal scheduler wait for a thread" do
    before = refused_joins()
    dir = tmp_dir("runtime")

    threads =
      for t <- ~w(tachyon-seq tachyon-replay tachyon-bus), into: %{}, do: {t, threads_named(t)}

    {echo, seq} =
      in_dying_process(fn ->
        {:ok, s} = Store.open(Path.join(dir, "store"))
        {:ok, _} = Store.append(s, "x")
        {:ok, t} = Table.open(Path.join(dir, "table"))
        :ok = Table.put(t, "k", "v")
        {:ok, a} = AsyncStore.open(Path.join(dir, "async"))
        {:ok, _} = AsyncStore.append(a, "y")
        {:ok, u} = UDP.open(0, ip: :loopback)
        {:ok, e} = Echo.start_link([])
        Process.unlink(e)
        {:ok, q} = Sequencer.start_link(path: Path.join(dir, "seq"), wait: :park)
        Process.unlink(q)
        # A member whose owner (this process) dies: its monitor's down
        # callback closes it on a normal scheduler.
        {:ok, b} = Bus.open(sequencer: Sequencer.address(q), member_id: 1, wait: :park)
        {:ok, _} = Bus.publish(b, "m")
        _ = {s, t, a, u, b}
        {e, q}
      end)

    # An Echo server and a Sequencer killed: their resources are collected
    # with their heaps.
    Process.exit(echo, :kill)
    Process.exit(seq, :kill)

    # An AsyncStore whose owner is killed: its monitor's down callback runs
    # on a normal scheduler.
    {:ok, sup} = AsyncStore.start_link(name: :runtime_async, path: Path.join(dir, "owned"))
    Process.unlink(sup)
    {:ok, _} = AsyncStore.append(:runtime_async, "z")
    Process.exit(sup, :kill)

    # Let the collector and the reaper do their work.
    assert wait_until(fn -> threads_named("tachyon-async") == 0 end)
    assert wait_until(fn -> threads_named("tachyon-udp-rx") == 0 end)
    assert wait_until(fn -> threads_named("tachyon-echo") == 0 end)

    for {name, n} <- threads,
        do: assert(wait_until(fn -> threads_named(name) == n end), "#{name} threads left")

    # A refused join is counted when it is asked for, before the thread
    # goes: once every thread is gone, the count is final.
    assert refused_joins() == before
  end
end

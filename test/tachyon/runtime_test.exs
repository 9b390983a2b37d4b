defmodule Tachyon.RuntimeTest do
  # Counts process-wide joins: not async, so that no other test's threads
  # are joined meanwhile.
  use ExUnit.Case, async: false

  import Tachyon.TestHelpers

  alias Tachyon.{AsyncStore, Echo, Native, Store, Table, UDP}

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

    echo =
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
        _ = {s, t, a, u}
        e
      end)

    # An Echo server killed: its resource is collected with its heap.
    Process.exit(echo, :kill)

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
    :erlang.garbage_collect()
    Process.sleep(50)
    assert refused_joins() == before
  end
end

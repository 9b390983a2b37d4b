defmodule Tachyon.SchedulerLatenessTest do
  # Not async: it measures the schedulers, which other tests would load.
  use ExUnit.Case, async: false

  import Tachyon.TestHelpers, only: [tmp_dir: 1, wait_until: 1]

  alias Tachyon.{Bus, Sequencer, Store}

  # A ticker process bound to each normal scheduler (at high priority)
  # sleeps 1 ms in a loop and keeps the worst lateness of its wake-ups. Each
  # slow path runs while they tick; a NIF that holds a scheduler for D ms
  # makes that scheduler's ticker at least D ms late.
  #
  # On two cores the parts' own threads (a dirty scheduler sending
  # thousands of datagrams, the sequencer, the bus threads) keep the OS
  # from running a scheduler thread for tens of milliseconds at a time,
  # which is not a scheduler held by a NIF: each wake-up's lateness is
  # taken net of the time the scheduler's OS thread spent waiting for a
  # CPU over it (`run_delay` in /proc/self/task/TID/schedstat). A NIF that
  # runs, spins or sleeps on the scheduler is on the CPU or asleep, never
  # waiting for one: it is counted whole.
  #
  # The bound: a 1 ms sleep wakes up to ~1 ms late anyway (the VM's timers
  # round up to the next millisecond). Measured on a loaded 2-core VM over
  # 10 runs of every slow path: net worst 0.8-1.9 ms; a 4 MiB publish sent
  # from the caller's scheduler (before it moved to a dirty one): 11-13 ms.
  # A NIF that holds a scheduler for 2 ms or more goes over it.
  @bound_us 3_000

  # The large message: publishing it sends ~3,000 datagrams.
  @big 4 * 1024 * 1024

  # Set TACHYON_LATENESS_REPORT=1 to print each slow path's worst lateness.
  @report System.get_env("TACHYON_LATENESS_REPORT") in ["1", "true"]

  setup do
    tids = scheduler_tids()
    tickers = for s <- 1..System.schedulers_online(), do: start_ticker(s, Map.fetch!(tids, s))
    on_exit(fn -> Enum.each(tickers, &Process.exit(&1, :kill)) end)
    %{tickers: tickers}
  end

  # The OS thread ids of the normal schedulers ("1_scheduler", ...).
  defp scheduler_tids do
    for t <- File.ls!("/proc/self/task"),
        {:ok, comm} <- [File.read("/proc/self/task/#{t}/comm")],
        [n] <- [Regex.run(~r/^(\d+)_scheduler$/, String.trim(comm), capture: :all_but_first)],
        into: %{},
        do: {String.to_integer(n), t}
  end

  defp start_ticker(scheduler, tid) do
    path = "/proc/self/task/#{tid}/schedstat"
    opts = [:link, {:scheduler, scheduler}, {:priority, :high}]
    :erlang.spawn_opt(fn -> tick(path, {0, 0}, 0) end, opts)
  end

  # Microseconds the thread has waited for a CPU (its run queue delay).
  defp run_delay(path) do
    {:ok, st} = :prim_file.read_file(path)
    [_, delay | _] = :binary.split(st, " ", [:global])
    div(String.to_integer(delay), 1_000)
  end

  # `worst`: {net of the OS's run delay, wall clock}.
  defp tick(path, {net, wall} = worst, ticks) do
    d0 = run_delay(path)
    t0 = System.monotonic_time(:microsecond)

    receive do
      {:take, from, ref} ->
        send(from, {ref, worst, ticks})
        tick(path, {0, 0}, 0)

      {:ticks, from, ref} ->
        send(from, {ref, ticks})
        tick(path, worst, ticks)
    after
      1 ->
        late = System.monotonic_time(:microsecond) - t0 - 1_000
        os = run_delay(path) - d0
        tick(path, {max(net, late - os), max(wall, late)}, ticks + 1)
    end
  end

  defp ask(pid, tag) do
    ref = make_ref()
    send(pid, {tag, self(), ref})
    ref
  end

  defp ticks(pid) do
    ref = ask(pid, :ticks)

    receive do
      {^ref, n} -> n
    after
      5_000 -> flunk("ticker #{inspect(pid)} does not answer")
    end
  end

  defp take(pid) do
    ref = ask(pid, :take)

    receive do
      {^ref, worst, n} -> {worst, n}
    after
      5_000 -> flunk("ticker #{inspect(pid)} does not answer")
    end
  end

  # The tickers' worst lateness (us) while `fun` runs.
  defp worst_lateness(tickers, label, fun) do
    if @report, do: :erlang.system_monitor(self(), [{:long_schedule, 2}, {:long_gc, 2}])
    Enum.each(tickers, &take/1)
    assert wait_until(fn -> Enum.all?(tickers, &(ticks(&1) >= 5)) end)
    fun.()
    results = Enum.map(tickers, &take/1)
    worst = results |> Enum.map(fn {{net, _}, _} -> net end) |> Enum.max()

    if @report do
      IO.puts(
        "lateness #{label}: #{worst} us (per scheduler {{net, wall}, ticks}: #{inspect(results)})"
      )

      :erlang.system_monitor(:undefined)
      report_monitor()
    end

    assert Enum.all?(results, fn {_, n} -> n > 0 end), "a ticker never woke: #{inspect(results)}"
    worst
  end

  defp report_monitor do
    receive do
      {:monitor, who, what, info} ->
        IO.puts("  monitor: #{inspect(who)} #{what} #{inspect(info, limit: 12)}")
        report_monitor()
    after
      0 -> :ok
    end
  end

  # A NIF that holds a scheduler holds it every time its slow path runs;
  # what else makes a ticker late here (a scheduler thread waiting in the
  # kernel behind another thread's page-table work or page reclaim, which
  # `run_delay` does not count) comes and goes: measured with a busy loop
  # pinned on one core (bin/test 20 times), single runs of a slow path
  # reached 8-11 ms once in a few runs while the same path stayed under
  # 1.5 ms in every other. So a slow path over the bound is measured again
  # (from scratch: `measure` sets its scenario up anew), up to 3 times,
  # and the best run must be within the bound.
  defp bounded(label, measure, tries \\ 3) do
    worsts =
      Enum.reduce_while(1..tries, [], fn _, acc ->
        w = measure.()
        if w < @bound_us, do: {:halt, [w | acc]}, else: {:cont, [w | acc]}
      end)

    assert Enum.min(worsts) < @bound_us,
           "#{label}: a scheduler was held #{inspect(Enum.reverse(worsts))} us in #{length(worsts)} runs (bound #{@bound_us} us)"
  end

  defp assert_bounded(tickers, label, fun) do
    bounded(label, fn -> worst_lateness(tickers, label, fun) end)
  end

  # A sequencer under ExUnit's supervisor, as child `label`.
  defp sequencer(label) do
    opts = [path: tmp_dir(label), wait: :park, stats_interval_ms: nil]
    seq = start_supervised!(Supervisor.child_spec({Sequencer, opts}, id: label))
    {seq, Sequencer.address(seq)}
  end

  defp publish!(bus, data) do
    case Bus.publish(bus, data) do
      {:ok, n} ->
        n

      {:error, :busy} ->
        # Too many commands not yet seen on the bus: wait for the bus.
        assert wait_until(fn -> match?({:ok, %{pending: 0}}, Bus.stats(bus)) end)
        publish!(bus, data)
    end
  end

  # A process that publishes small messages on its own member until told
  # to stop (the owner of its member: it drops what it gets).
  defp loader(addr, id) do
    parent = self()

    pid =
      spawn_link(fn ->
        {:ok, bus} = Bus.open(sequencer: addr, member_id: id, wait: :park)
        send(parent, {:loading, self()})
        load(bus, 0)
      end)

    assert_receive {:loading, ^pid}, 10_000
    pid
  end

  defp load(bus, n) do
    receive do
      {:stop, from} ->
        Bus.close(bus)
        send(from, {:stopped, self(), n})
    after
      0 ->
        # Drop what was delivered (the owner's mailbox stays short).
        flush_bus(bus)
        _ = Bus.publish(bus, :binary.copy("x", 200))
        load(bus, n + 1)
    end
  end

  defp flush_bus(bus) do
    receive do
      {:tachyon_bus, ^bus, _, _, _} -> flush_bus(bus)
      {:tachyon_bus_event, ^bus, _, _} -> flush_bus(bus)
    after
      0 -> :ok
    end
  end

  defp stop_loader(pid) do
    send(pid, {:stop, self()})
    assert_receive {:stopped, ^pid, n}, 10_000
    assert n > 0
  end

  test "a large publish (max_message_size) and a long publish_many", %{tickers: t} do
    {_seq, addr} = sequencer("late-publish")
    size = @big
    {:ok, bus} = Bus.open(sequencer: addr, member_id: 1, max_message_size: size, wait: :park)
    big = :crypto.strong_rand_bytes(size)
    many = for i <- 1..2_000, do: :binary.copy(<<rem(i, 256)>>, 500)

    assert_bounded(t, "bus publish #{size} bytes", fn ->
      for _ <- 1..3 do
        publish!(bus, big)
        assert_receive {:tachyon_bus, ^bus, _, 1, ^big}, 30_000
      end
    end)

    assert_bounded(t, "bus publish_many 2000 x 500 bytes", fn ->
      {:ok, _} = Bus.publish_many(bus, many)
      last = List.last(many)

      assert wait_until(fn ->
               receive do
                 {:tachyon_bus, ^bus, _, 1, ^last} -> true
               after
                 0 -> false
               end
             end)
    end)

    Bus.close(bus)
  end

  test "stats under load", %{tickers: t} do
    {seq, addr} = sequencer("late-stats")
    {:ok, bus} = Bus.open(sequencer: addr, member_id: 1, max_message_size: @big, wait: :park)
    loaders = [loader(addr, 2)]
    # A large publish on a dirty scheduler holds the member's send lock.
    big = :crypto.strong_rand_bytes(@big)
    parent = self()

    publisher =
      spawn_link(fn ->
        for _ <- 1..3, do: publish!(bus, big)
        send(parent, {:published, self()})
      end)

    assert_bounded(t, "bus and sequencer stats under load", fn ->
      for _ <- 1..2_000 do
        {:ok, _} = Bus.stats(bus)
        {:ok, _} = Sequencer.stats(seq)
      end
    end)

    assert_receive {:published, ^publisher}, 30_000
    Enum.each(loaders, &stop_loader/1)
    Bus.close(bus)
  end

  test "garbage-collecting a Store with many segments", %{tickers: t} do
    bounded("collecting a store of 17 segments", fn -> collect_store(t) end)
  end

  # The worst lateness while a Store of 17 segments is collected.
  defp collect_store(t) do
    dir = tmp_dir("late-gc")
    seg = 8 * 1024 * 1024
    parent = self()

    {owner, mref} =
      spawn_monitor(fn ->
        {:ok, s} = Store.open(dir, segment_size: seg, max_message_size: 65_536)
        chunk = :binary.copy("y", 65_536)
        fill(s, chunk, 17)
        {:ok, %{segments: n}} = Store.stats(s)
        send(parent, {:filled, self(), n})

        receive do
          :exit -> :ok
        after
          60_000 -> :ok
        end
      end)

    assert_receive {:filled, ^owner, n}, 60_000
    assert n >= 17

    worst_lateness(t, "store GC, #{n} segments of #{seg} bytes", fn ->
      send(owner, :exit)
      assert_receive {:DOWN, ^mref, :process, ^owner, _}, 10_000
      :erlang.garbage_collect()
      # Reopened as a writer: the collected store released its lock.
      assert wait_until(fn ->
               case Store.open(dir, segment_size: seg, max_message_size: 65_536) do
                 {:ok, s} -> Store.close(s) == :ok
                 {:error, _} -> false
               end
             end)
    end)
  end

  defp fill(s, chunk, segments) do
    {:ok, %{segments: n}} = Store.stats(s)

    if n < segments do
      for _ <- 1..64, do: {:ok, _} = Store.append(s, chunk)
      fill(s, chunk, segments)
    end
  end

  test "closing under load", %{tickers: t} do
    # Explicit close, and the owner's death, while another process
    # publishes large messages on the same member (from a dirty scheduler).
    {_seq, addr} = sequencer("late-close")
    big = :crypto.strong_rand_bytes(@big)

    for how <- [:close, :owner_exit] do
      bounded("bus #{how} under a large publish", fn -> close_member(t, addr, big, how) end)
    end

    bounded("sequencer stop under load, stats readers", fn ->
      stop_sequencer(t, System.unique_integer([:positive]))
    end)
  end

  # The worst lateness while a member is closed (or its owner exits)
  # under a large publish.
  defp close_member(t, addr, big, how) do
    parent = self()

    owner =
      spawn(fn ->
        {:ok, bus} =
          Bus.open(sequencer: addr, member_id: 7, max_message_size: byte_size(big), wait: :park)

        send(parent, {:bus, self(), bus})
        receive do: (:exit -> :ok), after: (60_000 -> :ok)
      end)

    assert_receive {:bus, ^owner, bus}, 10_000

    publisher =
      spawn_link(fn ->
        send(parent, {:publishing, self()})
        publish_until_closed(bus, big)
        send(parent, {:closed, self()})
      end)

    assert_receive {:publishing, ^publisher}, 5_000
    # A publish is under way once the member has sent something.
    assert wait_until(fn -> match?({:ok, %{commands: c}} when c > 0, Bus.stats(bus)) end)

    worst =
      worst_lateness(t, "bus #{how} under a large publish", fn ->
        case how do
          :close ->
            :ok = Bus.close(bus)

          :owner_exit ->
            ref = Process.monitor(owner)
            send(owner, :exit)
            assert_receive {:DOWN, ^ref, :process, ^owner, _}, 5_000
        end

        assert_receive {:closed, ^publisher}, 30_000
      end)

    send(owner, :exit)
    # The member id is free again: the goodbye was said.
    assert wait_until(fn ->
             case Bus.open(sequencer: addr, member_id: 7, connect_timeout_ms: 1_000) do
               {:ok, b} -> Bus.close(b) == :ok
               {:error, _} -> false
             end
           end)

    worst
  end

  # The worst lateness while a loaded sequencer read by stats readers stops.
  defp stop_sequencer(t, n) do
    parent = self()
    {seq, addr} = sequencer("late-stop-#{n}")
    loaders = for id <- 2..3, do: loader(addr, id)

    readers =
      for _ <- 1..2 do
        spawn_link(fn -> read_stats_until_closed(seq, parent) end)
      end

    worst =
      worst_lateness(t, "sequencer stop under load, stats readers", fn ->
        :ok = stop_supervised("late-stop-#{n}")
        for r <- readers, do: assert_receive({:stats_closed, ^r}, 10_000)
      end)

    Enum.each(loaders, &Process.unlink/1)
    Enum.each(loaders, &Process.exit(&1, :kill))
    worst
  end

  defp publish_until_closed(bus, big) do
    case Bus.publish(bus, big) do
      {:error, :closed} ->
        :ok

      {:error, :busy} ->
        # Wait for the bus, or the close.
        wait_until(fn -> not match?({:ok, %{pending: p}} when p > 0, Bus.stats(bus)) end)
        publish_until_closed(bus, big)

      {:ok, _} ->
        publish_until_closed(bus, big)
    end
  end

  defp read_stats_until_closed(seq, parent) do
    case Sequencer.stats(seq) do
      {:ok, _} -> read_stats_until_closed(seq, parent)
      {:error, _} -> send(parent, {:stats_closed, self()})
    end
  catch
    :exit, _ -> send(parent, {:stats_closed, self()})
  end
end

defmodule Tachyon.LifecycleTest do
  # The named-handle lifecycle (Tachyon.Named) the same for every part:
  # child ids, restarts after a kill, close/1 that is final, unknown names.
  # Not async: it starts writer threads, and other modules count the VM's OS
  # threads; sync modules never overlap them.
  use ExUnit.Case, async: false

  import Tachyon.TestHelpers

  alias Tachyon.{AsyncStore, Bus, Echo, Sequencer, Store, Table}

  @store [segment_size: 65_536, pretouch: false]
  @table [
    storage: :memory,
    segment_size: 65_536,
    max_key_size: 256,
    max_value_size: 1024,
    pretouch: false
  ]

  defp unique(label), do: :"#{label}_#{System.unique_integer([:positive])}"

  # A supervisor of our own (the parts' child specs as a user writes them),
  # under the test's supervisor so that it is stopped with the test.
  defp start_sup!(children) do
    start_supervised!(%{
      id: make_ref(),
      start: {Supervisor, :start_link, [children, [strategy: :one_for_one]]},
      type: :supervisor
    })
  end

  test "a killed named Table is restarted by its supervisor and works" do
    name = unique(:killed_table)
    dir = tmp_dir("lifecycle-table")
    start_sup!([{Table, [name: name, path: dir, stats_interval_ms: nil] ++ @table}])
    :ok = Table.put(name, "k", "v1")
    pid = Process.whereis(name)
    ref = Process.monitor(pid)
    Process.exit(pid, :kill)
    assert_receive {:DOWN, ^ref, :process, ^pid, :killed}, 2000

    # The restart closed the orphaned handle (it held the directory lock)
    # and reopened the table.
    assert wait_until(fn -> match?(p when is_pid(p) and p != pid, Process.whereis(name)) end)
    # The name is registered before the new process's init has reopened
    # the table: until then the name resolves to the closed orphan.
    assert wait_until(fn -> match?({:ok, "v1"}, Table.get(name, "k")) end)
    assert :ok = Table.put(name, "k", "v2")
    assert {:ok, "v2"} = Table.get(name, "k")
  end

  test "a killed named Echo is restarted without leaking its thread" do
    name = unique(:killed_echo)
    before = threads_named("tachyon-echo")
    start_sup!([{Echo, name: name, wait: :park, stats_interval_ms: nil}])
    assert threads_named("tachyon-echo") == before + 1
    pid = Process.whereis(name)
    ref = Process.monitor(pid)
    Process.exit(pid, :kill)
    assert_receive {:DOWN, ^ref, :process, ^pid, :killed}, 2000

    # The restart stopped the orphan's thread before starting its own.
    assert wait_until(fn -> match?(p when is_pid(p) and p != pid, Process.whereis(name)) end)
    assert threads_named("tachyon-echo") == before + 1
    assert {:ok, %{packets_in: 0}} = Echo.stats(name)
  end

  test "two Stores under one supervisor need no explicit ids" do
    {a, b} = {unique(:store_a), unique(:store_b)}

    sup =
      start_sup!([
        {Store, [name: a, path: tmp_dir("lifecycle-a"), stats_interval_ms: nil] ++ @store},
        {Store, [name: b, path: tmp_dir("lifecycle-b"), stats_interval_ms: nil] ++ @store}
      ])

    ids = for {id, _, _, _} <- Supervisor.which_children(sup), do: id
    assert Enum.sort(ids) == Enum.sort([{Store, a}, {Store, b}])
    assert {:ok, 0} = Store.append(a, "x")
    assert {:ok, 0} = Store.append(b, "y")
  end

  test "child ids are {Module, name} for every part" do
    assert Store.child_spec(name: :x, path: "/tmp/x").id == {Store, :x}
    assert AsyncStore.child_spec(name: :x, path: "/tmp/x").id == {AsyncStore, :x}
    assert Table.child_spec(name: :x, path: "/tmp/x").id == {Table, :x}
    assert Echo.child_spec(name: :x).id == {Echo, :x}
    assert Sequencer.child_spec(name: :x, path: "/tmp/x").id == {Sequencer, :x}
    assert Bus.child_spec(name: :x, member_id: 1).id == {Bus, :x}

    for mod <- [Store, AsyncStore, Table, Echo, Sequencer, Bus],
        do: assert(mod.child_spec(name: :x, path: "/tmp/x").restart == :transient)
  end

  # A sequencer of one under the test's supervisor, and its address.
  defp sequencer!(opts \\ []) do
    dir = tmp_dir("lifecycle-seq")

    pid =
      start_supervised!(
        Supervisor.child_spec(
          {Sequencer, [path: dir, wait: :park, stats_interval_ms: nil] ++ opts},
          id: make_ref()
        )
      )

    {pid, Sequencer.address(pid)}
  end

  describe "close/1 on a supervised thread part is final" do
    test "Tachyon.Echo" do
      name = unique(:closed_echo)
      sup = start_sup!([{Echo, name: name, wait: :park, stats_interval_ms: nil}])
      assert_closed_for_good(Echo, name, sup)
    end

    test "Tachyon.Sequencer" do
      name = unique(:closed_seq)
      dir = tmp_dir("lifecycle-close-seq")
      sup = start_sup!([{Sequencer, name: name, path: dir, wait: :park, stats_interval_ms: nil}])
      assert {:ok, _} = Sequencer.await_primary(name, 5000)
      assert_closed_for_good(Sequencer, name, sup)
    end

    test "Tachyon.Bus" do
      {_seq, addr} = sequencer!()
      name = unique(:closed_bus)

      sup =
        start_sup!([
          {Bus, name: name, sequencer: addr, member_id: 3, owner: self(), stats_interval_ms: nil}
        ])

      assert {:ok, _} = Bus.publish(Bus.bus(name), "x")
      assert_closed_for_good(Bus, name, sup)
    end
  end

  defp assert_closed_for_good(mod, name, sup) do
    pid = Process.whereis(name)
    ref = Process.monitor(pid)
    assert :ok = mod.close(name)
    assert_receive {:DOWN, ^ref, :process, ^pid, :normal}, 5000
    assert [{{^mod, ^name}, :undefined, :worker, _}] = Supervisor.which_children(sup)
    assert {:error, :noproc} = mod.close(name)
  end

  test "a killed named Bus member is restarted and leaves the bus first" do
    {_seq, addr} = sequencer!()
    name = unique(:killed_bus)
    opts = [name: name, sequencer: addr, member_id: 5, owner: self(), stats_interval_ms: nil]
    start_sup!([{Bus, opts}])
    pid = Process.whereis(name)
    ref = Process.monitor(pid)
    Process.exit(pid, :kill)
    assert_receive {:DOWN, ^ref, :process, ^pid, :killed}, 2000

    # The restart closed the orphaned member (else its member_id would be
    # taken) and joined again.
    assert wait_until(fn -> match?(p when is_pid(p) and p != pid, Process.whereis(name)) end)
    bus = Bus.bus(name)
    assert {:ok, _} = Bus.publish(bus, "after")
    assert_receive {:tachyon_bus, ^bus, _seq, 5, "after"}, 5000
  end

  test "a Bus process checks :stats_interval_ms and its own options in the caller" do
    assert_raise ArgumentError, ~r/:stats_interval_ms option/, fn ->
      Bus.start_link(
        sequencer: {{127, 0, 0, 1}, 1},
        member_id: 1,
        owner: self(),
        stats_interval_ms: 0
      )
    end

    assert_raise ArgumentError, ~r/:delivery option/, fn ->
      Bus.start_link(sequencer: {{127, 0, 0, 1}, 1}, member_id: 1, owner: self(), delivery: :x)
    end
  end

  test "a table closed behind its process's back stops the process for good" do
    name = unique(:closed_behind)
    dir = tmp_dir("lifecycle-behind")
    sup = start_sup!([{Table, [name: name, path: dir, stats_interval_ms: 10] ++ @table}])
    pid = Process.whereis(name)
    ref = Process.monitor(pid)
    {:ok, t} = Table.whereis(name)
    :ok = Table.close(t)
    assert_receive {:DOWN, ^ref, :process, ^pid, :normal}, 2000
    assert [{{Table, ^name}, :undefined, :worker, _}] = Supervisor.which_children(sup)
  end

  test "the same for a store" do
    name = unique(:store_behind)
    dir = tmp_dir("lifecycle-store-behind")
    sup = start_sup!([{Store, [name: name, path: dir, stats_interval_ms: 10] ++ @store}])
    pid = Process.whereis(name)
    ref = Process.monitor(pid)
    {:ok, s} = Store.whereis(name)
    :ok = Store.close(s)
    assert_receive {:DOWN, ^ref, :process, ^pid, :normal}, 2000
    assert [{{Store, ^name}, :undefined, :worker, _}] = Supervisor.which_children(sup)
  end

  describe "close/1 on a supervised part is final" do
    for {mod, opts} <- [
          {Store, @store},
          {AsyncStore, [wait: :park] ++ @store},
          {Table, @table}
        ] do
      @mod mod
      @opts opts
      test "#{inspect(mod)}" do
        name = unique(:closed)
        dir = tmp_dir("lifecycle-close")
        sup = start_sup!([{@mod, [name: name, path: dir, stats_interval_ms: nil] ++ @opts}])
        pid = Process.whereis(name)
        assert {:ok, _} = @mod.whereis(name)
        ref = Process.monitor(pid)

        assert :ok = @mod.close(name)
        assert_receive {:DOWN, ^ref, :process, ^pid, :normal}, 2000

        # Not restarted: the supervisor keeps the child, stopped.
        assert [{{@mod, ^name}, :undefined, :worker, _}] = Supervisor.which_children(sup)
        assert Process.whereis(name) == nil
        assert {:error, :noproc} = @mod.whereis(name)
        assert {:error, :noproc} = @mod.close(name)
      end
    end
  end

  test "an unknown name is {:error, :noproc} for every part's calls" do
    name = unique(:nobody)

    assert {:error, :noproc} = Store.append(name, "x")
    assert {:error, :noproc} = Store.append_many(name, ["x"])
    assert {:error, :noproc} = Store.read(name, 0)
    assert {:error, :noproc} = Store.next_index(name)
    assert {:error, :noproc} = Store.sync(name)
    assert {:error, :noproc} = Store.stats(name)
    assert {:error, :noproc} = Store.close(name)
    assert {:error, :noproc} = Store.whereis(name)

    assert {:error, :noproc} = AsyncStore.append(name, "x")
    assert {:error, :noproc} = AsyncStore.flush(name)
    assert {:error, :noproc} = AsyncStore.drain(name)
    assert {:error, :noproc} = AsyncStore.stats(name)
    assert {:error, :noproc} = AsyncStore.store(name)
    assert {:error, :noproc} = AsyncStore.close(name)
    assert {:error, :noproc} = AsyncStore.whereis(name)

    assert {:error, :noproc} = Table.put(name, "k", "v")
    assert {:error, :noproc} = Table.get(name, "k")
    assert {:error, :noproc} = Table.delete(name, "k")
    assert {:error, :noproc} = Table.put_many(name, [{"k", "v"}])
    assert {:error, :noproc} = Table.count(name)
    assert {:error, :noproc} = Table.sync(name)
    assert {:error, :noproc} = Table.compact(name)
    assert {:error, :noproc} = Table.stats(name)
    assert {:error, :noproc} = Table.close(name)
    assert {:error, :noproc} = Table.whereis(name)

    assert {:error, :noproc} = Echo.stats(name)
    assert {:error, :noproc} = Echo.close(name)

    assert {:error, :noproc} = Sequencer.stats(name)
    assert {:error, :noproc} = Sequencer.close(name)
    assert {:error, :noproc} = Bus.close(name)
  end

  describe "bounds: nothing a caller passes can panic the NIF" do
    test "huge timeouts raise ArgumentError and the writer keeps working" do
      dir = tmp_dir("lifecycle-timeout")
      {:ok, a} = AsyncStore.open(dir, [wait: :park] ++ @store)

      for bad <- [2 ** 62, 4_294_967_296, -1, 1.5, :forever] do
        assert_raise ArgumentError, ~r/timeout must be :infinity or an integer/, fn ->
          AsyncStore.flush(a, bad)
        end

        assert_raise ArgumentError, ~r/timeout/, fn -> AsyncStore.drain(a, bad) end
      end

      assert {:ok, 0} = AsyncStore.append(a, "x")
      assert {:ok, 0} = AsyncStore.flush(a, :infinity)
      assert :ok = AsyncStore.drain(a, 4_294_967_295)

      # Called directly, the NIF clamps instead of overflowing a deadline.
      assert {:ok, 1} = Tachyon.Native.async_flush(a.ref, 2 ** 62)
      assert :ok = Tachyon.Native.async_drain(a.ref, 2 ** 63)
      assert :ok = AsyncStore.close(a)
    end

    test "huge :stats_interval raises ArgumentError in every part" do
      dir = tmp_dir("lifecycle-interval")
      huge = 2 ** 62

      assert_raise ArgumentError,
                   ~r/:stats_interval_ms option must be nil or an integer in 1..86400000/,
                   fn ->
                     AsyncStore.open(dir, [stats_interval_ms: huge] ++ @store)
                   end

      for {mod, opts} <- [{Store, @store}, {Table, @table}, {AsyncStore, @store}] do
        assert_raise ArgumentError, ~r/:stats_interval_ms option/, fn ->
          mod.start_link([name: unique(:iv), path: dir, stats_interval_ms: huge] ++ opts)
        end
      end

      assert_raise ArgumentError, ~r/:stats_interval_ms option/, fn ->
        Echo.start_link(stats_interval_ms: huge)
      end

      assert_raise ArgumentError, ~r/:sync_interval_ms option/, fn ->
        Table.open(dir, [sync_interval_ms: huge] ++ @table)
      end
    end

    test "a huge interval passed straight to the NIF is clamped, the writer thread lives" do
      dir = tmp_dir("lifecycle-nif-interval")
      {:ok, store} = Store.open(dir, @store)

      opts =
        AsyncStore.defaults()
        |> Map.merge(%{wait: :park, linger_us: 0, stats_interval_ms: 2 ** 62})
        |> Tachyon.AsyncStore.Options.to_nif()

      assert {:ok, ref, _max} = Tachyon.Native.async_open(store.ref, opts, self(), 1, nil, false)
      assert {:ok, 0} = Tachyon.Native.async_append(ref, "x")
      assert {:ok, 1} = Tachyon.Native.async_flush(ref, 1000)
      assert %{state: :running} = Tachyon.Native.async_stats(ref)
      assert :ok = Tachyon.Native.async_close(ref)
      Store.close(store)
    end
  end

  describe "the wait vocabulary" do
    test ":block is rejected with a pointer to :park" do
      for fun <- [
            fn -> Echo.start_link(wait: :block) end,
            fn -> Tachyon.UDP.open(0, wait: :block) end,
            fn -> AsyncStore.open(tmp_dir("lifecycle-block"), [wait: :block] ++ @store) end
          ] do
        assert_raise ArgumentError, ~r/use wait: :park/, fun
      end
    end

    test ":park is accepted and reported as :park" do
      {:ok, echo} = Echo.start_link(wait: :park)
      assert %{wait: :park} = Echo.info(echo)
      :ok = Echo.close(echo)
    end
  end

  describe "open! raises Tachyon.Error" do
    @tag :capture_log
    test "for every part" do
      dir = tmp_dir("lifecycle-open")
      {:ok, s} = Store.open(dir, @store)

      e = assert_raise Tachyon.Error, fn -> Store.open!(dir, @store) end
      assert %Tachyon.Error{reason: :locked, part: Store, target: ^dir} = e

      assert Exception.message(e) =~
               "Tachyon.Store could not open #{dir}: another handle has the directory open " <>
                 "for writing (locked). Close the other one first"

      assert %Tachyon.Error{reason: :locked, part: AsyncStore} =
               assert_raise(Tachyon.Error, fn -> AsyncStore.open!(dir, @store) end)

      Store.close(s)

      tdir = tmp_dir("lifecycle-open-table")
      t = Table.open!(tdir, @table)

      assert %Tachyon.Error{reason: :locked, part: Table} =
               assert_raise(Tachyon.Error, fn -> Table.open!(tdir, @table) end)

      Table.close(t)

      sock = Tachyon.UDP.open!(0, ip: :loopback, wait: :park)
      {:ok, port} = Tachyon.UDP.port(sock)

      assert %Tachyon.Error{reason: :eaddrinuse, part: Tachyon.UDP, target: ^port} =
               assert_raise(Tachyon.Error, fn ->
                 Tachyon.UDP.open!(port, ip: :loopback, wait: :park)
               end)

      Tachyon.UDP.close(sock)
    end
  end

  test "the defaults come from Rust" do
    native = Tachyon.Native.defaults()
    assert Store.defaults().segment_size == native.store.segment_size
    assert Table.defaults().shards == native.table.shards
    assert AsyncStore.defaults().ring_size == native.async_store.ring_size
    assert AsyncStore.default_ring_size() == native.async_store.ring_size
    assert Tachyon.UDP.defaults().batch == native.udp.batch
    assert Echo.defaults().batch == native.echo.batch
    assert AsyncStore.default_wait() == native.async_store.wait

    # Every default the Rust configs hold, Sequencer and Bus included.
    for {mod, part} <- [{Sequencer, :sequencer}, {Bus, :bus}], {key, v} <- native[part] do
      assert Map.fetch!(mod.defaults(), key) == v, "#{inspect(mod)} #{key}"
    end
  end
end

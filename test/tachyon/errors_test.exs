defmodule Tachyon.ErrorsTest do
  # What a part says when it cannot open or start: the {:error, atom} stays
  # matchable, the log (and Tachyon.Error's fields) say what, where and
  # what to do.
  use ExUnit.Case, async: true
  # (The logs the assertions do not capture: shown only on a failure.)
  @moduletag :capture_log

  import ExUnit.CaptureLog
  import Tachyon.TestHelpers, only: [tmp_dir: 1]

  alias Tachyon.{AsyncStore, Echo, Sequencer, Store, Table, UDP}

  @store [segment_size: 65_536, prepared_segments: 1]
  @table [segment_size: 65_536, max_key_size: 256, max_value_size: 4096]

  defp unique(label), do: :"#{label}_#{System.unique_integer([:positive])}"

  # A UDP port held by someone else.
  defp port_in_use do
    {:ok, s} = :gen_udp.open(0, [:binary, ip: {127, 0, 0, 1}])
    on_exit(fn -> :gen_udp.close(s) end)
    {:ok, port} = :inet.port(s)
    port
  end

  describe "a port in use names the port" do
    test "Tachyon.UDP" do
      port = port_in_use()

      log = capture_log(fn -> assert {:error, :eaddrinuse} = UDP.open(port, ip: :loopback) end)

      assert log =~
               "Tachyon.UDP could not bind 127.0.0.1:#{port}: address already in use (eaddrinuse)"

      assert log =~ "choose another :port"

      e = assert_raise Tachyon.Error, fn -> UDP.open!(port, ip: :loopback) end
      assert %Tachyon.Error{reason: :eaddrinuse, target: ^port, action: :bind} = e
      assert Exception.message(e) =~ "Tachyon.UDP could not bind port #{port}: address already"
    end

    test "Tachyon.Echo, alone and as a supervisor's child" do
      port = port_in_use()

      log = capture_log(fn -> assert {:error, :eaddrinuse} = Echo.start_link(port: port) end)
      assert log =~ "Tachyon.Echo could not bind 127.0.0.1:#{port}: address already in use"

      name = unique(:pong)
      # The supervisor's failed start is an exit signal to its caller too.
      Process.flag(:trap_exit, true)

      log =
        capture_log(fn ->
          assert {:error, {:shutdown, {:failed_to_start_child, {Echo, ^name}, :eaddrinuse}}} =
                   Supervisor.start_link([{Echo, name: name, port: port, wait: :park}],
                     strategy: :one_for_one
                   )
        end)

      assert log =~
               "Tachyon.Echo #{inspect(name)} could not bind 127.0.0.1:#{port}: " <>
                 "address already in use (eaddrinuse)"
    end

    test "Tachyon.Sequencer, alone and as a supervisor's child" do
      port = port_in_use()
      dir = tmp_dir("errors-seq-port")

      log =
        capture_log(fn ->
          assert {:error, :eaddrinuse} = Sequencer.start_link(path: dir, port: port, wait: :park)
        end)

      assert log =~ "Tachyon.Sequencer could not bind 127.0.0.1:#{port}: address already in use"

      name = unique(:seq)
      Process.flag(:trap_exit, true)

      log =
        capture_log(fn ->
          assert {:error, {:shutdown, {:failed_to_start_child, {Sequencer, ^name}, :eaddrinuse}}} =
                   Supervisor.start_link(
                     [{Sequencer, name: name, path: dir, port: port, wait: :park}],
                     strategy: :one_for_one
                   )
        end)

      assert log =~
               "Tachyon.Sequencer #{inspect(name)} could not bind 127.0.0.1:#{port}: " <>
                 "address already in use (eaddrinuse)"
    end
  end

  test "a bus member whose sequencer does not answer names the address" do
    port = port_in_use()
    name = unique(:silent_bus)
    Process.flag(:trap_exit, true)

    log =
      capture_log(fn ->
        assert {:error, :timeout} =
                 Tachyon.Bus.start_link(
                   name: name,
                   sequencer: {{127, 0, 0, 1}, port},
                   member_id: 1,
                   connect_timeout_ms: 100
                 )
      end)

    assert log =~
             "Tachyon.Bus #{inspect(name)} could not join 127.0.0.1:#{port}: no answer in time " <>
               "(timeout). Is a Tachyon.Sequencer running at that address"
  end

  describe "a path that cannot be made or written names the path" do
    # /proc takes no new directories: mkdir says ENOENT.
    @missing "/proc/tachyon-no-such-dir/data"

    test "missing: every part that takes a path" do
      opens = [
        {Store, fn -> Store.open(@missing, @store) end},
        {Table, fn -> Table.open(@missing, @table) end},
        {Store, fn -> AsyncStore.open(@missing, @store) end},
        {Sequencer, fn -> Sequencer.start_link(path: @missing, wait: :park) end}
      ]

      for {part, open} <- opens do
        log = capture_log(fn -> assert {:error, :enoent} = open.() end)

        assert log =~
                 "#{inspect(part)} could not open #{@missing}: no such file or directory (enoent)"

        assert log =~ "check the :path"
      end

      e = assert_raise Tachyon.Error, fn -> Store.open!(@missing, @store) end
      assert %Tachyon.Error{reason: :enoent, part: Store, target: @missing} = e
      assert Exception.message(e) =~ "#{@missing}: no such file or directory (enoent)"
    end

    @tag :tmpfs
    test "read-only: every part that takes a path" do
      dir = tmp_dir("errors-ro")
      {_, 0} = System.cmd("mount", ["-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", dir])
      path = Path.join(dir, "data")

      try do
        opens = [
          {Store, fn -> Store.open(path, @store) end},
          {Table, fn -> Table.open(path, @table) end},
          {Store, fn -> AsyncStore.open(path, @store) end},
          {Sequencer, fn -> Sequencer.start_link(path: path, wait: :park) end}
        ]

        for {part, open} <- opens do
          log = capture_log(fn -> assert {:error, :erofs} = open.() end)

          assert log =~
                   "#{inspect(part)} could not open #{path}: read-only file system (erofs). " <>
                     "That file system is mounted read-only"
        end
      after
        System.cmd("umount", [dir])
      end
    end
  end

  test "charlist paths work for every part" do
    dir = tmp_dir("errors-charlist")
    cl = fn name -> String.to_charlist(Path.join(dir, name)) end

    {:ok, s} = Store.open(cl.("store"), @store)
    assert s.path == Path.join(dir, "store")
    Store.close(s)

    {:ok, t} = Table.open(cl.("table"), @table)
    assert t.path == Path.join(dir, "table")
    Table.close(t)

    {:ok, a} = AsyncStore.open(cl.("async"), @store)
    assert a.path == Path.join(dir, "async")
    AsyncStore.close(a)

    names = for label <- [:s, :t, :a, :q], into: %{}, do: {label, unique(label)}

    start_supervised!({Store, [name: names.s, path: cl.("store2")] ++ @store})
    start_supervised!({Table, [name: names.t, path: cl.("table2")] ++ @table})
    start_supervised!({AsyncStore, [name: names.a, path: cl.("async2")] ++ @store})
    start_supervised!({Sequencer, name: names.q, path: cl.("seq"), wait: :park})

    assert {:ok, 0} = Store.append(names.s, "x")
    assert :ok = Table.put(names.t, "k", "v")
    assert {:ok, 0} = AsyncStore.append(names.a, "x")
    assert %{path: seq_path} = Sequencer.info(names.q)
    assert seq_path == Path.join(dir, "seq")

    assert_raise ArgumentError, ~r/the path must be a string or a charlist, got: 42/, fn ->
      Store.open(42)
    end

    assert_raise ArgumentError, ~r/:path option must be a string or a charlist/, fn ->
      Sequencer.start_link(path: :nope)
    end
  end

  test "Sequencer.address/1 and info/1 on a closed name: an ArgumentError naming it" do
    name = unique(:closed_seq)
    start_supervised!({Sequencer, name: name, path: tmp_dir("errors-closed"), wait: :park})
    assert {{127, 0, 0, 1}, _} = Sequencer.address(name)
    :ok = Sequencer.close(name)

    assert_raise ArgumentError, "no Tachyon.Sequencer named #{inspect(name)} is running", fn ->
      Sequencer.address(name)
    end

    assert_raise ArgumentError, "no Tachyon.Sequencer named #{inspect(name)} is running", fn ->
      Sequencer.info(name)
    end

    assert {:error, :noproc} = Sequencer.stats(name)
    assert {:error, :noproc} = Sequencer.close(name)
  end

  test "a misspelled option: ArgumentError naming it, with the close known one" do
    e =
      assert_raise ArgumentError, fn ->
        Tachyon.Bus.open(sequencer: {{127, 0, 0, 1}, 9}, member_id: 1, membr_id: 2)
      end

    assert Exception.message(e) =~
             "unknown Tachyon.Bus option(s) [:membr_id] (did you mean :member_id?)"

    e = assert_raise ArgumentError, fn -> Store.open(tmp_dir("errors-opt"), segmnt_size: 1) end
    assert Exception.message(e) =~ "(did you mean :segment_size?)"

    e = assert_raise ArgumentError, fn -> Store.open(tmp_dir("errors-opt2"), zzz: 1) end
    refute Exception.message(e) =~ "did you mean"
  end

  test "Bus: data that is not iodata raises an ArgumentError saying so" do
    {:ok, seq} = Sequencer.start_link(path: tmp_dir("errors-iodata"), wait: :park)
    {:ok, bus} = Tachyon.Bus.open(sequencer: Sequencer.address(seq), member_id: 1)
    iodata = "the data must be iodata (a binary, or a list of binaries, bytes 0..255"

    for data <- [42, :atom, [1000], ["a" | :b], %{}] do
      e = assert_raise ArgumentError, fn -> Tachyon.Bus.publish(bus, data) end
      assert e.message =~ "Tachyon.Bus.publish/2: #{iodata}"
      assert e.message =~ "got: #{inspect(data, charlists: :as_lists)}"
    end

    e = assert_raise ArgumentError, fn -> Tachyon.Bus.publish_snapshot(bus, 1, 42) end
    assert e.message =~ "Tachyon.Bus.publish_snapshot/4: #{iodata}"
    # Whatever the bus is: the data is the caller's mistake.
    assert_raise ArgumentError, ~r/publish\/2: the data must be iodata/, fn ->
      Tachyon.Bus.publish(:no_such_bus, 42)
    end

    for list <- [[42], ["a", ["b"]], "ab", []] do
      e = assert_raise ArgumentError, fn -> Tachyon.Bus.publish_many(bus, list) end
      assert e.message =~ "publish_many/2: the messages must be a non-empty list of binaries"
    end

    # Good ones still go.
    assert {:ok, _} = Tachyon.Bus.publish(bus, ["a", ?b, ["c"]])
    assert {:ok, _} = Tachyon.Bus.publish_many(bus, ["d", "e"])
    assert :ok = Tachyon.Bus.close(bus)
    assert :ok = Sequencer.close(seq)
  end

  test "a misspelled option of start_link/1: named with the one meant, a process's or its handle's" do
    dir = tmp_dir("errors-opt3")
    # (Each checks its own keys and its handle's at once: the misspelling is
    # named before the key it meant is found missing.)
    for {start, unknown, meant} <- [
          {&Store.start_link/1, [pth: dir], :path},
          {&Store.start_link/1, [name: unique(:s), pth: dir], :path},
          {&Store.start_link/1, [path: dir, nmae: unique(:s)], :name},
          {&Store.start_link/1, [name: unique(:s), path: dir, segmnt_size: 65_536],
           :segment_size},
          {&Table.start_link/1, [name: unique(:t), pth: dir], :path},
          {&AsyncStore.start_link/1, [pth: dir], :path},
          {&AsyncStore.start_link/1, [name: unique(:a), path: dir, ring_sise: 1024], :ring_size},
          {&Tachyon.Bus.start_link/1,
           [sequencer: {{127, 0, 0, 1}, 9}, member_id: 1, nme: unique(:b)], :name}
        ] do
      e = assert_raise ArgumentError, fn -> start.(unknown) end
      [{key, _} | _] = Keyword.drop(unknown, [:name, :path, :sequencer, :member_id])

      assert e.message =~ "option(s) [#{inspect(key)}] (did you mean #{inspect(meant)}?)",
             "#{inspect(unknown)}: #{e.message}"
    end

    assert File.ls!(dir) == [], "nothing opened"
  end
end

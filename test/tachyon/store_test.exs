defmodule Tachyon.StoreTest do
  use ExUnit.Case, async: true

  import Tachyon.TestHelpers
  import ExUnit.CaptureLog

  alias Tachyon.Store

  @seg 65_536

  defp open!(dir, opts \\ []) do
    {:ok, s} = Store.open(dir, Keyword.merge([segment_size: @seg], opts))
    s
  end

  defp msg(i), do: "message-#{i}-" <> :binary.copy(<<rem(i, 251)>>, rem(i, 300))

  # -- the on-disk layout, from docs/FORMAT.md --------------------------------

  defp data_start(seg_size) do
    slots = max(div(seg_size, 64), 1024)
    4096 + align(slots * 4, 4096)
  end

  defp align(n, to), do: div(n + to - 1, to) * to

  defp segment_files(dir),
    do: dir |> File.ls!() |> Enum.filter(&String.ends_with?(&1, ".seg")) |> Enum.sort()

  # (A file the pre-touch thread removes while we look is not one.)
  defp activated_segments(dir) do
    for f <- segment_files(dir),
        match?({:ok, <<"TACHLOG1", _::binary>>}, File.read(Path.join(dir, f))),
        do: f
  end

  # Offsets (in the file) of the records of a segment file.
  defp record_offsets(bytes, seg_size) do
    walk(bytes, data_start(seg_size), [])
  end

  defp walk(bytes, off, acc) do
    case bytes do
      <<_::binary-size(off), word::little-64, _::binary>> when word != 0 ->
        len = Bitwise.band(word, 0x7FFFFFFF)
        walk(bytes, off + 8 + align(len, 8), [off | acc])

      _ ->
        {Enum.reverse(acc), off}
    end
  end

  describe "the log" do
    test "append, read, stream and indices" do
      s = open!(tmp_dir("store-basic"))
      assert {:error, :empty} = Store.last_index(s)
      assert {:ok, 0} = Store.first_index(s)

      for i <- 0..1999, do: assert({:ok, ^i} = Store.append(s, msg(i)))

      assert {:ok, 0} = Store.first_index(s)
      assert {:ok, 1999} = Store.last_index(s)
      assert {:ok, 2000} = Store.next_index(s)
      for i <- [0, 1, 999, 1999], do: assert({:ok, msg(i)} == Store.read(s, i))
      assert {:error, :not_found} = Store.read(s, 2000)

      assert Enum.to_list(Store.stream(s, 1995)) == for(i <- 1995..1999, do: {i, msg(i)})
      assert Store.stream(s) |> Enum.count() == 2000

      assert Store.stream(s) |> Stream.map(&elem(&1, 1)) |> Enum.take(3) == [
               msg(0),
               msg(1),
               msg(2)
             ]

      assert {:ok, stats} = Store.stats(s)
      assert stats.appended == 2000
      assert stats.rolls > 0
      assert stats.next_index == 2000
      assert :ok = Store.sync(s)
      assert :ok = Store.close(s)
      assert :ok = Store.close(s)
    end

    test "iodata, empty messages and batches" do
      s = open!(tmp_dir("store-iodata"))
      assert {:ok, 0} = Store.append(s, ["he", [?l, ?l], "o"])
      assert {:ok, 1} = Store.append(s, "")
      assert {:ok, 2} = Store.append(s, [])
      assert {:ok, "hello"} = Store.read(s, 0)
      assert {:ok, ""} = Store.read(s, 1)
      assert {:ok, ""} = Store.read(s, 2)
      assert {:ok, 5} = Store.append_many(s, ["a", ["b"], "c"])
      assert {:error, :empty} = Store.append_many(s, [])
      assert {:ok, "b"} = Store.read(s, 4)

      # a batch large enough for the dirty scheduler path, across segments
      big = for i <- 1..5000, do: msg(i)
      assert {:ok, 5005} = Store.append_many(s, big)
      assert {:ok, msg(5000)} == Store.read(s, 5005)
      assert {:ok, msg(1)} == Store.read(s, 6)
    end

    test "bad input gets clear errors and loses nothing" do
      s = open!(tmp_dir("store-errors"), max_message_size: 1000)
      assert {:ok, 0} = Store.append(s, "kept")
      assert {:error, :too_large} = Store.append(s, :binary.copy("x", 1001))
      assert {:error, :too_large} = Store.append_many(s, ["ok", :binary.copy("x", 1001)])
      assert {:ok, 1} = Store.next_index(s)

      assert_raise ArgumentError, ~r/binary or iodata/, fn -> Store.append(s, 123) end
      assert_raise ArgumentError, fn -> Store.append(s, [:not_iodata]) end
      assert_raise ArgumentError, ~r/index/, fn -> Store.read(s, -1) end

      assert_raise ArgumentError, ~r/a Tachyon.Store or the name of one/, fn ->
        Store.read("nope", 0)
      end

      assert {:error, :noproc} = Store.append(:no_such_store, "x")

      assert {:ok, "kept"} = Store.read(s, 0)
      Store.close(s)
      assert {:error, :closed} = Store.append(s, "x")
      assert {:error, :closed} = Store.read(s, 0)
      assert {:error, :closed} = Store.sync(s)
      assert {:error, :closed} = Store.stats(s)
    end

    test "a handle of the wrong kind is a badarg, never a crash" do
      dir = tmp_dir("store-wrong-handle")
      {:ok, a} = Tachyon.AsyncStore.open(Path.join(dir, "async"))
      s = open!(Path.join(dir, "store"))
      h = Tachyon.Native.hist_new()

      # The hot NIFs of the store, async store and table decode their
      # resource without rustler's type lookup: another resource type, a
      # plain reference or another term must still be refused.
      for bad <- [a.ref, h, make_ref(), :atom, 1] do
        assert_raise ArgumentError, fn -> Tachyon.Native.store_append(bad, "x") end
        assert_raise ArgumentError, fn -> Tachyon.Native.bench_noop_store(bad, "x") end
      end

      for bad <- [s.ref, h, make_ref()] do
        assert_raise ArgumentError, fn -> Tachyon.Native.async_append(bad, "x") end
        assert_raise ArgumentError, fn -> Tachyon.Native.table_get(bad, "k") end
        assert_raise ArgumentError, fn -> Tachyon.Native.table_put(bad, "k", "v") end
      end

      assert {:ok, 0} = Store.append(s, "x")
      assert {:ok, 0} = Tachyon.AsyncStore.append(a, "y")
      :ok = Tachyon.AsyncStore.close(a)
      Store.close(s)
    end

    test "bad options raise ArgumentError naming the option" do
      dir = tmp_dir("store-opts")
      assert_raise ArgumentError, ~r/:segment_size/, fn -> Store.open(dir, segment_size: 1000) end
      assert_raise ArgumentError, ~r/:access/, fn -> Store.open(dir, access: :append) end
      assert_raise ArgumentError, ~r/:max_segments/, fn -> Store.open(dir, max_segments: 0) end

      assert_raise ArgumentError, ~r/:max_message_size/, fn ->
        Store.open(dir, segment_size: @seg, max_message_size: @seg)
      end

      assert_raise ArgumentError, ~r/unknown Tachyon.Store option\(s\) \[:bogus\]/, fn ->
        Store.open(dir, bogus: 1)
      end

      assert_raise ArgumentError, ~r/:name/, fn -> Store.start_link(path: dir) end
      assert_raise ArgumentError, ~r/:path/, fn -> Store.start_link(name: :x) end
    end

    test "one writer per directory; readers are read-only" do
      dir = tmp_dir("store-lock")
      s = open!(dir)
      assert {:error, :locked} = Store.open(dir, segment_size: @seg)
      {:ok, 0} = Store.append(s, "x")
      {:ok, r} = Store.open(dir, access: :read, segment_size: @seg)
      assert {:ok, "x"} = Store.read(r, 0)
      assert {:error, :read_only} = Store.append(r, "y")
      {:ok, 1} = Store.append(s, "y")
      assert {:ok, "y"} = Store.read(r, 1)
      Store.close(s)
      assert {:ok, _} = Store.open(dir, segment_size: @seg)
    end

    test "a reader on a missing directory is an error" do
      assert {:error, :enoent} =
               Store.open(Path.join(tmp_dir("store-missing"), "nope"), access: :read)
    end

    test "concurrent appenders keep each process's order" do
      s = open!(tmp_dir("store-concurrent"))
      parent = self()

      for p <- 1..8 do
        spawn_link(fn ->
          for i <- 1..1000, do: {:ok, _} = Store.append(s, <<p, i::32>>)
          send(parent, {:done, p})
        end)
      end

      for p <- 1..8, do: assert_receive({:done, ^p}, 10_000)
      assert {:ok, 8000} = Store.next_index(s)

      per_process =
        s
        |> Store.stream()
        |> Enum.group_by(fn {_, <<p, _::32>>} -> p end, fn {_, <<_, i::32>>} -> i end)

      for p <- 1..8, do: assert(per_process[p] == Enum.to_list(1..1000))
    end
  end

  describe "segments and retention" do
    test "max_segments deletes the oldest segments and their files" do
      dir = tmp_dir("store-retention")
      s = open!(dir, max_segments: 3)
      for i <- 0..4999, do: {:ok, _} = Store.append(s, msg(i))
      {:ok, stats} = Store.stats(s)
      assert stats.segments == 3
      assert stats.deleted_segments > 0
      # (The files of deleted segments are reused or removed by the
      # pre-touch thread.)
      assert wait_until(fn -> length(activated_segments(dir)) == 3 end)
      {:ok, first} = Store.first_index(s)
      assert first > 0
      assert {:error, {:trimmed, ^first}} = Store.read(s, first - 1)
      assert {:ok, msg(first)} == Store.read(s, first)
      assert Store.stream(s) |> Enum.count() == 5000 - first
      Store.close(s)

      # reopening keeps the same window
      s = open!(dir, max_segments: 3)
      assert {:ok, ^first} = Store.first_index(s)
      assert {:ok, 4999} = Store.last_index(s)
    end

    test "retention max_bytes bounds the disk use" do
      dir = tmp_dir("store-maxbytes")
      s = open!(dir, retention: [max_bytes: 4 * (data_start(@seg) + @seg)])
      for i <- 0..9999, do: {:ok, _} = Store.append(s, msg(i))
      {:ok, stats} = Store.stats(s)
      assert stats.segments <= 4
      assert stats.disk_bytes <= 4 * (data_start(@seg) + @seg)
    end

    test "rolls are reported by telemetry" do
      Tachyon.TelemetryHelpers.forward([[:tachyon, :store, :roll], [:tachyon, :store, :sync]])
      dir = tmp_dir("store-roll")
      s = open!(dir)
      for i <- 0..999, do: {:ok, _} = Store.append(s, msg(i))
      assert :ok = Store.sync(s)
      assert_receive {:telemetry, [:tachyon, :store, :sync], %{bytes: bytes}, %{path: _}}, 1000
      assert bytes > 0

      assert_receive {:telemetry, [:tachyon, :store, :roll], %{segment: 1, base_index: base}, _},
                     1000

      assert base > 0
    end

    test "the pre-touch thread is joined on close and when the handle is collected" do
      dir = tmp_dir("store-threads")
      # Other async test modules open and close stores meanwhile: ours is
      # the thread id that appears with the open (tried again if another
      # store's thread appeared at the same time), and it is gone as soon
      # as close/1 returns.
      {s, ours} = open_with_new_pretouch_thread(dir, 5)
      assert File.exists?("/proc/self/task/#{ours}")
      Store.close(s)
      refute File.exists?("/proc/self/task/#{ours}")

      # a handle dropped by a dead process: the store closes on GC, which
      # also releases the directory lock
      parent = self()

      spawn(fn ->
        {:ok, s} = Store.open(dir, segment_size: @seg)
        {:ok, _} = Store.append(s, "x")
        send(parent, :opened)
      end)

      assert_receive :opened, 5000

      assert wait_until(fn ->
               match?({:ok, _}, Store.open(dir, segment_size: @seg, pretouch: false))
             end)
    end
  end

  defp pretouch_tids do
    for t <- File.ls!("/proc/self/task"),
        match?({:ok, "tachyon-pretouc" <> _}, File.read("/proc/self/task/#{t}/comm")),
        into: MapSet.new(),
        do: t
  end

  defp open_with_new_pretouch_thread(dir, tries) do
    before = pretouch_tids()
    s = open!(dir)

    case MapSet.to_list(MapSet.difference(pretouch_tids(), before)) do
      [tid] ->
        {s, tid}

      [] ->
        flunk("opening a store started no pre-touch thread")

      _several when tries > 1 ->
        # Another store's thread started at the same time.
        Store.close(s)
        open_with_new_pretouch_thread(dir, tries - 1)

      several ->
        flunk("#{length(several)} new pre-touch threads at every try")
    end
  end

  describe "supervision" do
    test "start_link registers a name; close stops it for good" do
      dir = tmp_dir("store-sup")
      name = :"store_sup_#{System.unique_integer([:positive])}"

      {:ok, sup} =
        Supervisor.start_link([{Store, name: name, path: dir, segment_size: @seg}],
          strategy: :one_for_one
        )

      assert {:ok, 0} = Store.append(name, "a")
      assert {:ok, 1} = Store.append_many(name, ["b"])
      assert {:ok, "a"} = Store.read(name, 0)
      assert {:ok, %Store{}} = Store.whereis(name)
      assert Store.stream(name) |> Enum.to_list() == [{0, "a"}, {1, "b"}]
      assert :ok = Store.close(name)
      assert {:error, :noproc} = Store.append(name, "c")
      # :transient: a deliberate close is not restarted
      assert wait_until(fn -> match?([{_, :undefined, _, _}], Supervisor.which_children(sup)) end)
      Supervisor.stop(sup)
      s = open!(dir)
      assert {:ok, 1} = Store.last_index(s)
    end

    test "a store process that is killed is restarted and reopens the log" do
      dir = tmp_dir("store-restart")
      name = :"store_restart_#{System.unique_integer([:positive])}"

      {:ok, sup} =
        Supervisor.start_link([{Store, name: name, path: dir, segment_size: @seg}],
          strategy: :one_for_one
        )

      {:ok, 0} = Store.append(name, "a")
      pid = GenServer.whereis(name)
      Process.exit(pid, :kill)

      assert wait_until(fn ->
               GenServer.whereis(name) not in [nil, pid] and match?({:ok, _}, Store.whereis(name))
             end)

      assert wait_until(fn -> match?({:ok, 1}, Store.append(name, "b")) end)
      assert {:ok, "a"} = Store.read(name, 0)
      Supervisor.stop(sup)
    end
  end

  describe "recovery" do
    test "a torn tail is cut, returned, logged and reported" do
      Tachyon.TelemetryHelpers.forward([[:tachyon, :store, :recover]])
      dir = tmp_dir("store-torn")
      s = open!(dir)
      for i <- 0..9, do: {:ok, _} = Store.append(s, msg(i))
      Store.close(s)

      [file] = activated_segments(dir)
      path = Path.join(dir, file)
      bytes = File.read!(path)
      {_offs, end_off} = record_offsets(bytes, @seg)
      # a header that claims 100 bytes, with only part of the payload there
      header = <<100 + 0x80000000::little-32, 0xDEADBEEF::little-32>>
      torn = binary_part(bytes, 0, end_off) <> header <> :binary.copy("z", 40)

      File.write!(
        path,
        torn <> binary_part(bytes, byte_size(torn), byte_size(bytes) - byte_size(torn))
      )

      log =
        capture_log(fn ->
          s = open!(dir)
          send(self(), {:store, s})
        end)

      assert_received {:store, s}
      assert log =~ "torn_tail"
      {:ok, rec} = Store.recovery(s)
      assert rec.cut == :torn_tail
      assert rec.offset == end_off
      assert rec.truncated_bytes >= 48
      assert rec.lost_records == 0
      assert rec.messages == 10

      assert_receive {:telemetry, [:tachyon, :store, :recover], %{truncated_bytes: tb},
                      %{cut: :torn_tail}},
                     1000

      assert tb == rec.truncated_bytes
      for i <- 0..9, do: assert({:ok, msg(i)} == Store.read(s, i))
      assert {:ok, 10} = Store.append(s, "after")
      Store.close(s)
      assert {:ok, %{cut: nil}} = open!(dir) |> Store.recovery()
    end

    test "a bad checksum in the middle is an error unless repair: true" do
      dir = tmp_dir("store-corrupt")
      s = open!(dir)
      for i <- 0..19, do: {:ok, _} = Store.append(s, msg(i))
      Store.close(s)

      [file] = activated_segments(dir)
      path = Path.join(dir, file)
      bytes = File.read!(path)
      {offs, _} = record_offsets(bytes, @seg)
      bad = Enum.at(offs, 7)
      <<pre::binary-size(bad + 8 + 3), b, rest::binary>> = bytes
      File.write!(path, <<pre::binary, Bitwise.bxor(b, 0xFF), rest::binary>>)

      assert {:error, :corrupt} = Store.open(dir, segment_size: @seg)

      log =
        capture_log(fn ->
          {:ok, s} = Store.open(dir, segment_size: @seg, repair: true)
          send(self(), {:store, s})
        end)

      assert_received {:store, s}
      assert log =~ "repaired"
      {:ok, rec} = Store.recovery(s)
      assert rec.cut == :repaired
      assert rec.lost_records == 12
      assert {:ok, 7} = Store.next_index(s)
      assert {:ok, msg(6)} == Store.read(s, 6)
      assert {:ok, 7} = Store.append(s, "new")
      Store.close(s)
      s = open!(dir)
      assert {:ok, %{cut: nil}} = Store.recovery(s)
      assert {:ok, "new"} = Store.read(s, 7)
    end

    test "verify: :all checks sealed segments too" do
      dir = tmp_dir("store-verify-all")
      s = open!(dir)
      for i <- 0..999, do: {:ok, _} = Store.append(s, msg(i))
      Store.close(s)
      [first | _] = activated_segments(dir)
      path = Path.join(dir, first)
      bytes = File.read!(path)
      {offs, _} = record_offsets(bytes, @seg)
      bad = Enum.at(offs, 3)
      <<pre::binary-size(bad + 9), b, rest::binary>> = bytes
      File.write!(path, <<pre::binary, Bitwise.bxor(b, 1), rest::binary>>)

      # the default only scans the active segment; the damage shows on read
      s = open!(dir)
      assert {:error, :corrupt} = Store.read(s, 3)
      assert {:ok, _} = Store.read(s, 2)
      Store.close(s)
      assert {:error, :corrupt} = Store.open(dir, segment_size: @seg, verify: :all)
    end
  end

  @tag :tmpfs
  test "a full disk gives :enospc and the log stays valid" do
    dir = tmp_dir("store-enospc")
    {_, 0} = System.cmd("mount", ["-t", "tmpfs", "-o", "size=1m", "tmpfs", dir])

    try do
      {:ok, s} = Store.open(dir, segment_size: 256 * 1024, pretouch: false)

      result =
        Enum.reduce_while(0..100_000, nil, fn i, _ ->
          case Store.append(s, msg(i)) do
            {:ok, ^i} -> {:cont, nil}
            {:error, reason} -> {:halt, {i, reason}}
          end
        end)

      assert {n, :enospc} = result
      assert n > 1000
      # still readable and still refusing cleanly
      assert {:ok, msg(n - 1)} == Store.read(s, n - 1)
      assert {:error, :enospc} = Store.append(s, msg(n))
      Store.close(s)

      {:ok, s} = Store.open(dir, segment_size: 256 * 1024, pretouch: false)
      assert {:ok, %{cut: nil}} = Store.recovery(s)
      assert {:ok, ^n} = Store.next_index(s)
      for i <- [0, div(n, 2), n - 1], do: assert({:ok, msg(i)} == Store.read(s, i))
      Store.close(s)
    after
      System.cmd("umount", [dir])
    end
  end

  @tag :slow
  test "a reader in another OS process tails the writer across segments" do
    dir = tmp_dir("store-tail")
    s = open!(dir)
    {:ok, 0} = Store.append(s, msg(0))
    n = 5000

    code = """
    {:ok, r} = Tachyon.Store.open(#{inspect(dir)}, access: :read)
    IO.puts("ready")
    read = fn read, i, crc ->
      if i == #{n} do
        crc
      else
        case Tachyon.Store.read(r, i) do
          {:ok, m} -> read.(read, i + 1, :erlang.crc32(crc, m))
          {:error, :not_found} -> Process.sleep(1); read.(read, i, crc)
        end
      end
    end
    IO.puts("done \#{read.(read, 0, 0)}")
    """

    port = start_child(code)
    assert {:stopped, _} = collect(port, [], fn line, _ -> line == "ready" end)

    expected =
      Enum.reduce(1..(n - 1), :erlang.crc32(0, msg(0)), fn i, crc ->
        {:ok, ^i} = Store.append(s, msg(i))
        if rem(i, 500) == 0, do: Process.sleep(20)
        :erlang.crc32(crc, msg(i))
      end)

    assert {:stopped, lines} =
             collect(port, [], fn line, _ -> String.starts_with?(line, "done") end)

    assert List.last(lines) == "done #{expected}"
    {:ok, stats} = Store.stats(s)
    assert stats.rolls > 5
  end

  @tag :slow
  test "kill -9 of a writing OS process loses nothing that was acknowledged" do
    dir = tmp_dir("store-kill9")

    code = """
    {:ok, s} = Tachyon.Store.open(#{inspect(dir)}, segment_size: #{@seg})
    IO.puts("pid \#{System.pid()}")
    Enum.each(Stream.iterate(0, &(&1 + 1)), fn i ->
      {:ok, ^i} = Tachyon.Store.append(s, "m\#{i}-" <> :binary.copy(<<rem(i, 251)>>, rem(i, 300)))
      IO.puts("ack \#{i}")
    end)
    """

    port = start_child(code)

    {:stopped, [pid_line]} =
      collect(port, [], fn line, _ -> String.starts_with?(line, "pid ") end)

    "pid " <> os_pid = pid_line

    {:stopped, lines} = collect(port, [], fn line, _ -> line == "ack 8000" end)
    {_, 0} = System.cmd("kill", ["-9", os_pid])
    {{:exit, _}, more} = collect(port, [], fn _, _ -> false end)

    acked = for "ack " <> i <- lines ++ more, do: String.to_integer(i)

    last = List.last(acked)
    assert acked == Enum.to_list(0..last)
    assert last >= 8000

    {:ok, s} = Store.open(dir, segment_size: @seg)
    {:ok, next} = Store.next_index(s)
    assert next >= last + 1

    for {i, m} <- Store.stream(s) do
      assert m == "m#{i}-" <> :binary.copy(<<rem(i, 251)>>, rem(i, 300))
    end

    assert Store.stream(s) |> Enum.count() == next
  end
end

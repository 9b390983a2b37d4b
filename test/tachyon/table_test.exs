defmodule Tachyon.TableTest do
  # The API, options, supervision, telemetry (Tachyon.TableRecoveryTest has
  # recovery: torn tails, damaged headers, full disks, killed writers).
  use ExUnit.Case, async: true

  alias Tachyon.Table

  @modes [:memory, :mapped, :file]
  @small [segment_size: 64 * 1024, max_key_size: 256, max_value_size: 4096]

  setup context do
    dir =
      Path.join(
        System.tmp_dir!(),
        "tachyon-table-test-#{System.unique_integer([:positive])}-#{context.line}"
      )

    File.rm_rf!(dir)
    on_exit(fn -> File.rm_rf!(dir) end)
    {:ok, dir: dir}
  end

  defp key(i), do: "key-#{i}"

  defp val(i, version),
    do: "v#{version}-#{i}-" <> :binary.copy(<<rem(i, 251)>>, rem(i * 7 + version * 13, 300))

  describe "API in every mode" do
    for mode <- @modes do
      @tag mode: mode
      test "put/get/delete/put_many/fetch!/count/stream/reopen (#{mode})", %{dir: dir, mode: mode} do
        opts = [storage: mode, compaction_interval_ms: nil] ++ @small
        {:ok, t} = Table.open(dir, opts)
        assert t.storage == mode
        assert t.recovery.keys == 0

        assert :error = Table.get(t, "missing")
        for i <- 1..1000, do: assert(:ok = Table.put(t, key(i), val(i, 0)))
        for i <- 1..1000//3, do: :ok = Table.put(t, key(i), val(i, 1))
        for i <- 1..1000//5, do: assert(:ok = Table.delete(t, key(i)))
        assert :ok = Table.delete(t, "never there")
        assert :ok = Table.put_many(t, [{"a", "1"}, {"b", "2"}, {"a", "3"}])
        assert :ok = Table.put_many(t, [])
        assert :ok = Table.put(t, "", "empty key")
        assert :ok = Table.put(t, "empty value", "")

        expected =
          for i <- 1..1000, rem(i - 1, 5) != 0, into: %{} do
            {key(i), if(rem(i - 1, 3) == 0, do: val(i, 1), else: val(i, 0))}
          end
          |> Map.merge(%{"a" => "3", "b" => "2", "" => "empty key", "empty value" => ""})

        check = fn t ->
          for {k, v} <- expected, do: assert(Table.get(t, k) == {:ok, v})
          for i <- 1..1000//5, do: assert(Table.get(t, key(i)) == :error)
          assert {:ok, map_size(expected)} == Table.count(t)
          assert Table.fetch!(t, "a") == "3"
          assert_raise KeyError, fn -> Table.fetch!(t, "missing") end
          assert Map.new(Table.stream(t)) == expected
          assert Enum.count(Table.stream(t)) == map_size(expected)
        end

        check.(t)
        assert {:ok, %{keys: keys, segments: segs}} = Table.stats(t)
        assert keys == map_size(expected)
        assert segs > 1
        assert :ok = Table.sync(t)
        assert :ok = Table.close(t)
        assert :ok = Table.close(t)

        {:ok, t} = Table.open(dir, opts)
        assert t.recovery.keys == map_size(expected)
        assert t.recovery.cut == nil
        check.(t)
        Table.close(t)
      end
    end
  end

  test "a large put_many goes through the dirty scheduler path", %{dir: dir} do
    {:ok, t} = Table.open(dir, storage: :mapped)
    pairs = for i <- 1..5000, do: {key(i), val(i, 0)}
    assert :ok = Table.put_many(t, pairs)
    assert {:ok, 5000} == Table.count(t)
    assert Table.get(t, key(4999)) == {:ok, val(4999, 0)}
    Table.close(t)
  end

  test "closed table, size limits and bad input", %{dir: dir} do
    {:ok, t} = Table.open(dir, @small)
    assert {:error, :too_large} = Table.put(t, :binary.copy("k", 257), "v")
    assert {:error, :too_large} = Table.put(t, "k", :binary.copy("v", 4097))
    assert {:error, :too_large} = Table.put_many(t, [{"k", "v"}, {"k2", :binary.copy("v", 4097)}])
    assert Table.get(t, "k") == :error
    assert :ok = Table.put(t, :binary.copy("k", 256), :binary.copy("v", 4096))

    assert_raise ArgumentError, ~r/key must be a binary/, fn -> Table.put(t, :a, "v") end
    assert_raise ArgumentError, ~r/value must be a binary/, fn -> Table.put(t, "k", 1) end
    assert_raise ArgumentError, ~r/key must be a binary/, fn -> Table.get(t, 1) end
    assert_raise ArgumentError, ~r/key must be a binary/, fn -> Table.delete(t, [1]) end
    assert_raise ArgumentError, ~r/put_many/, fn -> Table.put_many(t, [{"a", 1}]) end
    assert_raise ArgumentError, ~r/put_many/, fn -> Table.put_many(t, :nope) end

    assert {:error, :noproc} = Table.get(:no_such_table, "k")

    # Another handle on the same directory.
    assert {:error, :locked} = Table.open(dir, @small)

    assert :ok = Table.close(t)
    assert {:error, :closed} = Table.put(t, "k", "v")
    assert {:error, :closed} = Table.get(t, "k")
    assert {:error, :closed} = Table.delete(t, "k")
    assert {:error, :closed} = Table.put_many(t, [{"k", "v"}])
    assert {:error, :closed} = Table.count(t)
    assert {:error, :closed} = Table.sync(t)
    assert {:error, :closed} = Table.compact(t)
    assert {:error, :closed} = Table.stats(t)
    assert_raise ArgumentError, ~r/closed/, fn -> Enum.to_list(Table.stream(t)) end
    # The lock went with close.
    assert {:ok, t2} = Table.open(dir, @small)
    Table.close(t2)
  end

  test "options are validated with clear messages", %{dir: dir} do
    assert_raise ArgumentError, ~r/:storage option must be one of/, fn ->
      Table.open(dir, storage: :disk)
    end

    assert_raise ArgumentError, ~r/:segment_size option/, fn ->
      Table.open(dir, segment_size: 10)
    end

    assert_raise ArgumentError, ~r/:sync_interval_ms option/, fn ->
      Table.open(dir, sync_interval_ms: 0)
    end

    assert_raise ArgumentError, ~r/:compaction_threshold option/, fn ->
      Table.open(dir, compaction_threshold: 2)
    end

    assert_raise ArgumentError, ~r/must fit in a segment/, fn ->
      Table.open(dir, segment_size: 65_536, max_value_size: 65_536)
    end

    assert_raise ArgumentError, ~r/unknown Tachyon.Table option/, fn ->
      Table.open(dir, colour: :red)
    end

    assert_raise ArgumentError, ~r/:path option/, fn -> Table.start_link(name: :x) end
    refute File.exists?(dir)
  end

  test "compaction returns disk space; deleted keys stay deleted after a restart", %{dir: dir} do
    for mode <- @modes do
      d = Path.join(dir, "#{mode}")
      opts = [storage: mode, compaction_interval_ms: nil] ++ @small
      {:ok, t} = Table.open(d, opts)
      v = :binary.copy("x", 1000)
      for i <- 1..2000, do: :ok = Table.put(t, key(i), v)
      for i <- 1..2000, rem(i, 10) != 0, do: :ok = Table.delete(t, key(i))
      {:ok, before} = Table.stats(t)
      assert {:ok, c} = Table.compact(t)
      assert c.segments_in > 20
      assert c.bytes_out < c.bytes_in / 5
      {:ok, after_} = Table.stats(t)
      assert after_.disk_bytes < before.disk_bytes / 4
      assert after_.compactions == 1
      Table.close(t)

      {:ok, t} = Table.open(d, opts)
      assert {:ok, 200} == Table.count(t)

      for i <- 1..2000 do
        expected = if rem(i, 10) == 0, do: {:ok, v}, else: :error
        assert Table.get(t, key(i)) == expected, "#{mode} #{i}"
      end

      Table.close(t)
    end
  end

  test "compaction under concurrent readers and writers: values always right", %{dir: dir} do
    {:ok, t} = Table.open(dir, [storage: :mapped, compaction_interval_ms: nil] ++ @small)
    keys = 300
    for i <- 1..keys, do: :ok = Table.put(t, key(i), val(i, 0))
    readers = for r <- 1..4, do: Task.async(fn -> read_loop(t, keys, r, 0) end)

    compactor =
      Task.async(fn ->
        Enum.reduce(1..20, 0, fn _, acc ->
          {:ok, c} = Table.compact(t)
          acc + c.segments_in
        end)
      end)

    model =
      Enum.reduce(1..30, %{}, fn version, model ->
        Enum.reduce(1..keys, model, fn i, model ->
          if rem(i * version, 11) == 0 do
            :ok = Table.delete(t, key(i))
            Map.put(model, i, :deleted)
          else
            :ok = Table.put(t, key(i), val(i, version))
            Map.put(model, i, val(i, version))
          end
        end)
      end)

    compacted = Task.await(compactor, 30_000)
    for r <- readers, do: send(r.pid, :stop)
    reads = Enum.map(readers, &Task.await(&1, 10_000))
    assert Enum.all?(reads, &(&1 > 0))
    assert compacted > 0

    for {i, v} <- model do
      expected = if v == :deleted, do: :error, else: {:ok, v}
      assert Table.get(t, key(i)) == expected
    end

    Table.close(t)
  end

  defp read_loop(t, keys, r, n) do
    receive do
      :stop -> n
    after
      0 ->
        i = rem(n * 31 + r, keys) + 1

        case Table.get(t, key(i)) do
          :error ->
            :ok

          {:ok, v} ->
            # The value names its version; it must be what was written.
            [<<"v", version::binary>> | _] = String.split(v, "-", parts: 2)
            assert v == val(i, String.to_integer(version))
        end

        read_loop(t, keys, r, n + 1)
    end
  end

  test "randomized model test against a Map, with concurrent readers, compaction and reopen",
       %{dir: dir} do
    for mode <- @modes do
      d = Path.join(dir, "#{mode}")
      opts = [storage: mode, compaction_interval_ms: nil] ++ @small
      {:ok, t} = Table.open(d, opts)
      :rand.seed(:exsss, {1, 2, :erlang.phash2(mode)})

      {t, model} =
        Enum.reduce(1..4000, {t, %{}}, fn step, {t, model} ->
          k = key(:rand.uniform(300))

          case :rand.uniform(100) do
            n when n <= 45 ->
              v = val(:rand.uniform(1000), step)
              :ok = Table.put(t, k, v)
              {t, Map.put(model, k, v)}

            n when n <= 60 ->
              :ok = Table.delete(t, k)
              {t, Map.delete(model, k)}

            n when n <= 65 ->
              pairs = for _ <- 1..:rand.uniform(6), do: {key(:rand.uniform(300)), val(step, step)}
              :ok = Table.put_many(t, pairs)
              {t, Enum.into(pairs, model)}

            66 ->
              {:ok, _} = Table.compact(t)
              {t, model}

            67 ->
              :ok = Table.close(t)
              {:ok, t} = Table.open(d, opts)
              assert t.recovery.cut == nil
              {t, model}

            _ ->
              # Several processes read at once: all see the model.
              results =
                Task.async_stream(1..3, fn _ -> Table.get(t, k) end, timeout: 5_000)
                |> Enum.map(fn {:ok, r} -> r end)

              expected = if Map.has_key?(model, k), do: {:ok, model[k]}, else: :error
              assert Enum.all?(results, &(&1 == expected)), "#{mode} step #{step}"
              {t, model}
          end
        end)

      assert {:ok, map_size(model)} == Table.count(t)
      assert Map.new(Table.stream(t)) == model
      Table.close(t)
      {:ok, t} = Table.open(d, opts)
      assert Map.new(Table.stream(t)) == model
      Table.close(t)
    end
  end

  defp wait_until(fun, tries \\ 500) do
    cond do
      fun.() -> :ok
      tries == 0 -> flunk("condition never became true")
      true -> Process.sleep(10) && wait_until(fun, tries - 1)
    end
  end

  test "supervised: start_link, name lookup, child_spec, close on stop", %{dir: dir} do
    name = :"table_test_#{System.unique_integer([:positive])}"
    Tachyon.TelemetryHelpers.forward([[:tachyon, :table, :stats]])
    spec = Table.child_spec(name: name, path: dir, storage: :memory, stats_interval_ms: 10)
    assert spec.id == {Table, name}
    pid = start_supervised!(spec)
    assert :ok = Table.put(name, "k", "v")
    assert {:ok, "v"} = Table.get(name, "k")
    assert %Table{name: ^name, storage: :memory} = Table.table(pid)
    assert {:ok, 1} == Table.count(name)
    # It keeps ticking (two stats events of this table), then stops.
    for _ <- 1..2,
        do:
          assert_receive(
            {:telemetry, [:tachyon, :table, :stats], %{keys: 1}, %{name: ^name}},
            2000
          )

    assert Process.alive?(pid)
    :ok = stop_supervised(spec.id)
    assert {:error, :noproc} = Table.get(name, "k")
    # Closed by the stop: the directory can be opened again.
    {:ok, t} = Table.open(dir, storage: :file)
    assert Table.get(t, "k") == {:ok, "v"}
    Table.close(t)
  end

  test "periodic sync and background compaction run", %{dir: dir} do
    {:ok, t} = Table.open(dir, [sync_interval_ms: 5, compaction_interval_ms: 5] ++ @small)

    for round <- 1..5, i <- 1..200, do: :ok = Table.put(t, key(i), val(i, round))
    :ok = Table.put(t, "x", "y")

    wait_until(fn ->
      {:ok, s} = Table.stats(t)
      s.syncs > 0 and s.compactions > 0
    end)

    for i <- 1..200, do: assert(Table.get(t, key(i)) == {:ok, val(i, 5)})
    Table.close(t)
  end

  test "telemetry: open, recover (with a torn tail), sync, compaction, stats", %{dir: dir} do
    Tachyon.TelemetryHelpers.forward([
      [:tachyon, :table, :open],
      [:tachyon, :table, :recover],
      [:tachyon, :table, :sync],
      [:tachyon, :table, :compaction],
      [:tachyon, :table, :stats]
    ])

    opts = [compaction_interval_ms: nil] ++ @small
    {:ok, t} = Table.open(dir, opts)
    path = t.path

    assert_receive {:telemetry, [:tachyon, :table, :open], %{keys: 0, duration: d},
                    %{path: ^path, storage: :mapped}},
                   1000

    assert d > 0

    assert_receive {:telemetry, [:tachyon, :table, :recover], %{truncated_bytes: 0}, %{cut: nil}},
                   1000

    for i <- 1..2000, do: :ok = Table.put(t, key(i), val(i, 0))
    for i <- 1..2000, rem(i, 2) == 0, do: :ok = Table.delete(t, key(i))
    :ok = Table.sync(t)
    assert_receive {:telemetry, [:tachyon, :table, :sync], %{duration: _}, %{path: ^path}}, 1000
    {:ok, c} = Table.compact(t)

    assert_receive {:telemetry, [:tachyon, :table, :compaction], m, %{path: ^path}}, 1000
    assert m.segments_in == c.segments_in and m.segments_in > 0
    assert m.bytes_in > m.bytes_out
    assert m.duration >= 0
    Table.close(t)

    # A torn tail is reported with where it was cut.
    [seg | _] =
      dir |> File.ls!() |> Enum.filter(&String.ends_with?(&1, ".seg")) |> Enum.sort(:desc)

    File.write!(Path.join(dir, seg), <<1, 2, 3, 4, 9, 0, 0, 0>> <> :binary.copy(<<7>>, 20), [
      :append
    ])

    {:ok, t} = Table.open(dir, opts)

    assert_receive {:telemetry, [:tachyon, :table, :recover], %{truncated_bytes: 28, records: r},
                    %{cut: {_, _}}},
                   1000

    assert r > 0
    assert_receive {:telemetry, [:tachyon, :table, :open], %{keys: 1000}, _}, 1000
    Table.close(t)

    # Periodic stats from a supervised table.
    name = :"table_telemetry_#{System.unique_integer([:positive])}"
    start_supervised!({Table, [name: name, path: dir, stats_interval_ms: 10] ++ opts})

    assert_receive {:telemetry, [:tachyon, :table, :stats], %{keys: 1000, segments: n},
                    %{name: ^name}},
                   2000

    assert n > 0
  end
end

defmodule Tachyon.TableResourceTest do
  # Not async: it counts the VM's file descriptors (and the table's threads,
  # by name: "tachyon-table" and "tachyon-table-prep").
  use ExUnit.Case, async: false

  import Tachyon.TestHelpers, only: [threads_named: 1]

  alias Tachyon.Table

  @modes [:memory, :mapped, :file]
  @small [segment_size: 64 * 1024, max_key_size: 256, max_value_size: 4096]

  setup do
    dir = Path.join(System.tmp_dir!(), "tachyon-table-res-#{System.unique_integer([:positive])}")
    on_exit(fn -> File.rm_rf!(dir) end)
    {:ok, dir: dir}
  end

  test "no thread or file descriptor is left after close or garbage collection", %{dir: dir} do
    {fds0, threads0} = {count_fds(dir), count_threads()}
    assert fds0 == 0

    for mode <- @modes do
      {:ok, t} = Table.open(Path.join(dir, "#{mode}"), [storage: mode] ++ @small)
      for i <- 1..2000, do: :ok = Table.put(t, "key-#{i}", :binary.copy("v", 100))
      assert count_fds(dir) > fds0
      assert count_threads() == threads0 + 2
      :ok = Table.close(t)
      assert {mode, count_fds(dir), count_maps(dir), count_threads()} == {mode, 0, 0, threads0}
    end

    # Never closed: the handle's garbage collection closes it.
    pid =
      spawn(fn ->
        {:ok, t} = Table.open(Path.join(dir, "gc"), @small)
        :ok = Table.put(t, "k", "v")
      end)

    ref = Process.monitor(pid)
    assert_receive {:DOWN, ^ref, :process, ^pid, _}, 5_000
    :erlang.garbage_collect()
    wait_until(fn -> count_fds(dir) == fds0 and count_threads() == threads0 end)
    {:ok, t} = Table.open(Path.join(dir, "gc"), @small)
    assert Table.get(t, "k") == {:ok, "v"}
    Table.close(t)
  end

  defp count_maps(dir) do
    "/proc/self/maps"
    |> File.read!()
    |> String.split("\n")
    |> Enum.count(&String.contains?(&1, dir))
  end

  # Descriptors open on the table's files (other tests' come and go).
  defp count_fds(dir) do
    "/proc/self/fd"
    |> File.ls!()
    |> Enum.count(fn fd ->
      case File.read_link("/proc/self/fd/" <> fd) do
        {:ok, target} -> String.starts_with?(target, dir)
        _ -> false
      end
    end)
  end

  defp count_threads, do: threads_named("tachyon-table")

  defp wait_until(fun, tries \\ 200) do
    cond do
      fun.() -> :ok
      tries == 0 -> flunk("condition never became true")
      true -> Process.sleep(10) && wait_until(fun, tries - 1)
    end
  end
end

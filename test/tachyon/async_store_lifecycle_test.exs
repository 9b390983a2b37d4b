defmodule Tachyon.AsyncStoreLifecycleTest do
  # An AsyncStore's writer failures, supervision, telemetry and threads
  # (Tachyon.AsyncStoreTest has appends, flushes, full rings and closes).
  # Not async: every test starts writer threads, and other modules count the
  # VM's OS threads (Tachyon.StoreTest); sync modules never overlap them.
  use ExUnit.Case, async: false

  import Tachyon.TestHelpers
  import Tachyon.AsyncStoreHelpers
  import ExUnit.CaptureLog

  alias Tachyon.{AsyncStore, Store}

  @seg seg_size()

  defp writer_threads, do: threads_named("tachyon-async")

  describe "writer failures" do
    test "a segment that cannot be created stops the writer; the log stays valid" do
      Tachyon.TelemetryHelpers.forward([[:tachyon, :async_store, :writer_failed]])
      dir = tmp_dir("async-fail")
      moved = dir <> "-moved"
      on_exit(fn -> File.rm_rf(moved) end)
      a = open!(dir)
      for i <- 0..49, do: {:ok, ^i} = AsyncStore.append(a, msg(i))
      assert {:ok, 49} = AsyncStore.flush(a)

      # The store's directory disappears: the next segment roll fails.
      File.rename!(dir, moved)

      log =
        capture_log(fn ->
          result =
            Enum.reduce_while(50..5000, nil, fn i, _ ->
              if rem(i, 100) == 0, do: Process.sleep(1)

              case AsyncStore.append(a, msg(i)) do
                {:ok, ^i} -> {:cont, nil}
                {:error, reason} -> {:halt, reason}
              end
            end)

          assert result in [nil, :enoent]
          assert {:error, :enoent} = AsyncStore.flush(a)
          assert {:error, :enoent} = AsyncStore.append(a, "more")

          assert_receive {:telemetry, [:tachyon, :async_store, :writer_failed],
                          %{enqueued: enq, written: written, lost: lost},
                          %{reason: :enoent, path: _, detail: detail}},
                         5000

          assert written + lost == enq and lost > 0 and written >= 50
          assert is_binary(detail)
        end)

      assert log =~ "the writer stopped"
      assert {:ok, %{state: :failed, written: written, pending: pending}} = AsyncStore.stats(a)
      assert pending > 0
      assert {:error, :enoent} = AsyncStore.close(a)

      File.rename!(moved, dir)
      {:ok, store} = Store.open(dir, segment_size: @seg)
      assert {:ok, %{cut: nil}} = Store.recovery(store)
      assert {:ok, ^written} = Store.next_index(store)
      assert read_all(store) == for(i <- 0..(written - 1), do: msg(i))
      Store.close(store)
    end

    @tag :tmpfs
    test "a full disk stops the writer with :enospc; the log stays valid" do
      dir = tmp_dir("async-enospc")
      {_, 0} = System.cmd("mount", ["-t", "tmpfs", "-o", "size=1m", "tmpfs", dir])

      try do
        Tachyon.TelemetryHelpers.forward([[:tachyon, :async_store, :writer_failed]])
        a = open!(dir, segment_size: 256 * 1024)

        capture_log(fn ->
          Enum.reduce_while(0..100_000, nil, fn i, _ ->
            if rem(i, 500) == 0, do: Process.sleep(1)

            case AsyncStore.append(a, msg(i)) do
              {:ok, ^i} -> {:cont, nil}
              {:error, reason} -> {:halt, reason}
            end
          end)

          assert {:error, :enospc} = AsyncStore.flush(a)
          assert {:error, :enospc} = AsyncStore.append(a, "more")
          assert {:error, :enospc} = AsyncStore.close(a)

          assert_receive {:telemetry, [:tachyon, :async_store, :writer_failed], _,
                          %{reason: :enospc}},
                         5000
        end)

        {:ok, %{written: written}} = AsyncStore.stats(a)
        assert written > 1000
        {:ok, store} = Store.open(dir, segment_size: 256 * 1024, pretouch: false)
        assert {:ok, %{cut: nil}} = Store.recovery(store)
        assert {:ok, ^written} = Store.next_index(store)

        for i <- [0, div(written, 2), written - 1],
            do: assert({:ok, msg(i)} == Store.read(store, i))

        Store.close(store)
      after
        System.cmd("umount", [dir])
      end
    end

    test "a direct append to the wrapped store is an index conflict" do
      Tachyon.TelemetryHelpers.forward([[:tachyon, :async_store, :writer_failed]])
      {:ok, store} = Store.open(tmp_dir("async-conflict"), segment_size: @seg)
      a = open!(store)
      assert {:ok, 0} = AsyncStore.append(a, "a")
      assert {:ok, 0} = AsyncStore.flush(a)

      capture_log(fn ->
        {:ok, 1} = Store.append(store, "sneaky")
        # The writer takes it within a nap and finds the store moved on.
        assert {:ok, 1} = AsyncStore.append(a, "b")
        assert {:error, :index_conflict} = AsyncStore.flush(a)
        assert {:error, :index_conflict} = AsyncStore.append(a, "c")

        assert_receive {:telemetry, [:tachyon, :async_store, :writer_failed],
                        %{written: 1, lost: 1}, %{reason: :index_conflict}},
                       5000
      end)

      assert read_all(store) == ["a", "sneaky"]
      Store.close(store)
    end
  end

  describe "supervision and telemetry" do
    test "start_link: name lookup, periodic stats, close" do
      Tachyon.TelemetryHelpers.forward([[:tachyon, :async_store, :stats]])
      dir = tmp_dir("async-sup")
      name = :"async_sup_#{System.unique_integer([:positive])}"

      {:ok, sup} =
        Supervisor.start_link(
          [
            {AsyncStore,
             name: name,
             path: dir,
             segment_size: @seg,
             pretouch: false,
             wait: :park,
             stats_interval_ms: 20}
          ],
          strategy: :one_for_one
        )

      assert {:ok, 0} = AsyncStore.append(name, "a")
      assert {:ok, 1} = AsyncStore.append(name, ["b"])
      assert {:ok, 1} = AsyncStore.flush(name)
      assert {:ok, %AsyncStore{name: ^name}} = AsyncStore.whereis(name)
      {:ok, store} = AsyncStore.store(name)
      assert read_all(store) == ["a", "b"]

      assert_receive {:telemetry, [:tachyon, :async_store, :stats],
                      %{enqueued: 2, written: 2, pending: 0, full_events: 0},
                      %{name: ^name, path: _}},
                     2000

      assert :ok = AsyncStore.close(name)
      assert {:error, :noproc} = AsyncStore.append(name, "c")
      assert {:error, :noproc} = AsyncStore.flush(name)
      Supervisor.stop(sup)
    end

    test "child ids follow the name; the writer can be pinned" do
      assert AsyncStore.child_spec(name: :a, path: "/x").id == {AsyncStore, :a}
      assert AsyncStore.child_spec(name: :b, path: "/y").id == {AsyncStore, :b}
      assert %{restart: :transient} = AsyncStore.child_spec(name: :a, path: "/x")

      a = open!(tmp_dir("async-pin"), core: 0)
      assert {:ok, %{pinned: true}} = AsyncStore.stats(a)
      assert {:ok, 0} = AsyncStore.append(a, "pinned")
      assert {:ok, 0} = AsyncStore.flush(a)
      AsyncStore.close(a)
      b = open!(tmp_dir("async-nopin"))
      assert {:ok, %{pinned: nil}} = AsyncStore.stats(b)
      AsyncStore.close(b)
    end

    test "start_link in front of a named store" do
      dir = tmp_dir("async-sup-store")
      store_name = :"async_store_log_#{System.unique_integer([:positive])}"
      name = :"async_front_#{System.unique_integer([:positive])}"

      {:ok, sup} =
        Supervisor.start_link(
          [
            {Store, name: store_name, path: dir, segment_size: @seg},
            {AsyncStore, name: name, store: store_name, wait: :park}
          ],
          strategy: :rest_for_one
        )

      assert {:ok, 0} = AsyncStore.append(name, "x")
      assert {:ok, 0} = AsyncStore.flush(name)
      assert {:ok, "x"} = Store.read(store_name, 0)
      Supervisor.stop(sup)
    end

    test "bad options raise ArgumentError naming the key" do
      dir = tmp_dir("async-badopts")

      for {opts, text} <- [
            {[ring_size: 1000], ":ring_size option must be a power of two"},
            {[wait: :sometimes], ":wait option must be"},
            {[on_full: :block], ":on_full option must be"},
            {[spin_timeout_us: 5000], ":spin_timeout_us option must be an integer in 0..1000"},
            {[batch_size: 0], ":batch_size option"},
            {[stats_interval_ms: 0], ":stats_interval_ms option"},
            {[core: -1], ":core option"},
            {[path: dir], ":path, :store and :name are not options of open/2"}
          ] do
        e = assert_raise ArgumentError, fn -> AsyncStore.open(dir, opts) end
        assert e.message =~ text
      end

      assert_raise ArgumentError, ~r/unknown Tachyon.AsyncStore option/, fn ->
        AsyncStore.open(dir, bogus: 1)
      end

      assert_raise ArgumentError, ~r/only valid with :path/, fn ->
        AsyncStore.start_link(name: :x, store: :some_store, segment_size: @seg)
      end

      assert_raise ArgumentError, ~r/either the :path or the :store/, fn ->
        AsyncStore.start_link(name: :x)
      end

      assert_raise ArgumentError, ~r/:name option is required/, fn ->
        AsyncStore.start_link(path: dir)
      end

      assert_raise ArgumentError, ~r/timeout must be/, fn ->
        AsyncStore.flush(:whatever, -1)
      end

      assert AsyncStore.default_wait() in [:busy_spin, :backoff]
    end
  end

  describe "threads" do
    test "the writer thread is joined by close and when the handle is collected" do
      before = writer_threads()
      a = open!(tmp_dir("async-threads"))
      assert writer_threads() == before + 1
      AsyncStore.close(a)
      assert writer_threads() == before

      parent = self()
      dir = tmp_dir("async-threads-gc")

      spawn(fn ->
        a = open!(dir)
        {:ok, _} = AsyncStore.append(a, "x")
        n = writer_threads()
        # (uses `a` after the count, so that a GC cannot collect it first)
        send(parent, {:opened, n, AsyncStore.max_message_size(a)})
      end)

      assert_receive {:opened, n, _}, 5000
      assert n == before + 1
      assert wait_until(fn -> writer_threads() == before end)
    end

    test "a killed owner process stops its writer and releases its store" do
      dir = tmp_dir("async-kill")
      name = :"async_kill_#{System.unique_integer([:positive])}"
      before = writer_threads()

      # Unlinked: the test kills it.
      {:ok, pid} =
        AsyncStore.start_link([name: name, path: dir, segment_size: @seg] ++ async_opts())

      Process.unlink(pid)

      assert writer_threads() == before + 1
      pause_by_name(name)
      for i <- 0..99, do: {:ok, ^i} = AsyncStore.append(name, msg(i))
      Process.exit(pid, :kill)

      # The resource monitors its owner: the writer writes what was queued,
      # stops, and the store it opened is closed (its lock released).
      assert wait_until(fn -> writer_threads() == before end)

      assert wait_until(fn ->
               case Store.open(dir, segment_size: @seg) do
                 {:ok, s} -> Store.close(s) == :ok
                 _ -> false
               end
             end)

      {:ok, store} = Store.open(dir, segment_size: @seg, access: :read)
      assert read_all(store) == for(i <- 0..99, do: msg(i))
      Store.close(store)

      # A successor under the same name takes over the orphaned handle.
      {:ok, pid2} =
        AsyncStore.start_link([name: name, path: dir, segment_size: @seg] ++ async_opts())

      Process.unlink(pid2)

      assert {:ok, 100} = AsyncStore.append(name, "next")
      :ok = AsyncStore.close(name)
      refute Process.alive?(pid2)
      assert writer_threads() == before
    end
  end

  defp async_opts do
    [
      ring_size: 65_536,
      wait: :park,
      core: nil,
      on_full: :spin,
      spin_timeout_us: 100,
      batch_size: 1024,
      linger_us: 0,
      stats_interval_ms: nil
    ]
  end

  defp pause_by_name(name) do
    {:ok, a} = AsyncStore.whereis(name)
    pause(a, true)
  end
end

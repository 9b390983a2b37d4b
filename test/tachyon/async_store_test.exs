defmodule Tachyon.AsyncStoreTest do
  # Not async: every test starts writer threads, and other modules count the
  # VM's OS threads (Tachyon.StoreTest); sync modules never overlap them.
  use ExUnit.Case, async: false

  import Tachyon.TestHelpers
  import ExUnit.CaptureLog

  alias Tachyon.{AsyncStore, Native, Store}

  @seg 65_536

  # Tests never let the writer busy-spin.
  defp open!(path_or_store, opts \\ []) do
    opts =
      if is_binary(path_or_store),
        do: Keyword.merge([segment_size: @seg, pretouch: false, wait: :park], opts),
        else: Keyword.merge([wait: :park], opts)

    {:ok, a} = AsyncStore.open(path_or_store, opts)
    a
  end

  defp msg(i), do: "message-#{i}-" <> :binary.copy(<<rem(i, 251)>>, rem(i, 200))

  defp pause(a, paused), do: :ok = Native.async_pause(a.ref, paused)

  defp read_all(store) do
    store |> Store.stream() |> Enum.map(fn {_i, m} -> m end)
  end

  defp writer_threads, do: threads_named("tachyon-async")

  # A producer that keeps trying when the ring is full (the 64 KiB rings of
  # some tests fill up while a parked writer wakes).
  defp append_retry(a, data, tries \\ 10_000) do
    case AsyncStore.append(a, data) do
      {:error, :full} when tries > 0 -> append_retry(a, data, tries - 1)
      other -> other
    end
  end

  # Appends until the ring refuses; returns the indices accepted.
  defp fill(a, payload, acc \\ []) do
    case AsyncStore.append(a, payload) do
      {:ok, i} -> fill(a, payload, [i | acc])
      {:error, :full} -> Enum.reverse(acc)
    end
  end

  describe "append and flush" do
    test "one producer: order, indices known at enqueue time, flush" do
      dir = tmp_dir("async-order")
      a = open!(dir, ring_size: 65_536)
      assert {:ok, nil} = AsyncStore.flush(a)

      for i <- 0..4999 do
        data = if rem(i, 2) == 0, do: msg(i), else: ["message-", Integer.to_string(i), ?-, []]
        assert {:ok, ^i} = append_retry(a, data)
      end

      assert {:ok, 4999} = AsyncStore.flush(a)
      {:ok, store} = AsyncStore.store(a)
      assert {:ok, 5000} = Store.next_index(store)

      expected = for i <- 0..4999, do: if(rem(i, 2) == 0, do: msg(i), else: "message-#{i}-")

      assert read_all(store) == expected

      assert {:ok, %{enqueued: 5000, written: 5000, pending: 0, state: :running} = st} =
               AsyncStore.stats(a)

      assert st.batches >= 1 and st.high_water_bytes > 0
      assert st.wait == :park
      assert :ok = AsyncStore.close(a)
      assert {:ok, %{state: :closed}} = AsyncStore.stats(a)
      # It owned the store: closed with it.
      assert {:error, :closed} = Store.read(store, 0)
    end

    test "wrapping an open store: indices follow its messages, it stays open" do
      dir = tmp_dir("async-wrap")
      {:ok, store} = Store.open(dir, segment_size: @seg)
      for i <- 0..2, do: {:ok, ^i} = Store.append(store, "direct-#{i}")

      a = open!(store)
      assert {:ok, 2} = AsyncStore.flush(a)
      assert {:ok, 3} = AsyncStore.append(a, "async-3")
      assert {:ok, 4} = AsyncStore.append(a, "async-4")
      assert {:ok, 4} = AsyncStore.flush(a)
      assert :ok = AsyncStore.close(a)

      assert read_all(store) == ["direct-0", "direct-1", "direct-2", "async-3", "async-4"]
      assert {:ok, 5} = Store.append(store, "direct-5")
      Store.close(store)
    end

    test "many processes: each one's messages keep their order" do
      a = open!(tmp_dir("async-many"), ring_size: 65_536)
      parent = self()

      pids =
        for p <- 1..8 do
          spawn_link(fn ->
            indices = for k <- 1..1500, do: elem(append_retry(a, "#{p}:#{k}"), 1)
            send(parent, {:done, p, indices})
          end)
        end

      got =
        for _ <- pids, into: %{} do
          assert_receive {:done, p, indices}, 30_000
          {p, indices}
        end

      assert {:ok, 11_999} = AsyncStore.flush(a)
      {:ok, store} = AsyncStore.store(a)
      stored = store |> Store.stream() |> Enum.to_list()
      assert length(stored) == 12_000

      by_producer =
        Enum.group_by(
          stored,
          fn {_i, m} -> m |> String.split(":") |> hd() |> String.to_integer() end,
          fn {i, m} -> {i, m |> String.split(":") |> List.last() |> String.to_integer()} end
        )

      for p <- 1..8 do
        {indices, ks} = Enum.unzip(by_producer[p])
        assert ks == Enum.to_list(1..1500), "producer #{p} out of order"
        assert indices == got[p], "returned indices are where the messages are"
      end

      AsyncStore.close(a)
    end

    test "flush waits for what was enqueued before it; drain empties the ring" do
      a = open!(tmp_dir("async-flush"))
      pause(a, true)
      for i <- 0..99, do: {:ok, ^i} = AsyncStore.append(a, msg(i))
      assert {:error, :timeout} = AsyncStore.flush(a, 50)
      assert {:ok, %{written: 0, pending: 100}} = AsyncStore.stats(a)

      spawn(fn ->
        Process.sleep(30)
        pause(a, false)
      end)

      assert {:ok, 99} = AsyncStore.flush(a, 5000)
      pause(a, true)
      for i <- 100..199, do: {:ok, ^i} = AsyncStore.append(a, msg(i))
      spawn(fn -> pause(a, false) end)
      assert :ok = AsyncStore.drain(a, 5000)
      assert {:ok, %{written: 200, pending: 0}} = AsyncStore.stats(a)
      assert :ok = AsyncStore.drain(a, :infinity)
      AsyncStore.close(a)
    end

    test "messages larger than the limit are refused; bad data raises" do
      a = open!(tmp_dir("async-limits"), ring_size: 4096, max_message_size: 60_000)
      assert {:ok, 2040} = AsyncStore.max_message_size(a)
      assert {:error, :too_large} = AsyncStore.append(a, :binary.copy("x", 2041))
      assert {:ok, 0} = AsyncStore.append(a, :binary.copy("x", 2040))
      assert_raise ArgumentError, fn -> AsyncStore.append(a, :not_iodata) end
      assert_raise ArgumentError, fn -> AsyncStore.append(a, [1000]) end
      assert_raise ArgumentError, fn -> AsyncStore.append(self(), "x") end
      assert {:ok, 0} = AsyncStore.flush(a)

      b = open!(tmp_dir("async-limits2"), ring_size: 1_048_576, max_message_size: 100)
      assert {:ok, 100} = AsyncStore.max_message_size(b)
      assert {:error, :too_large} = AsyncStore.append(b, :binary.copy("x", 101))
      AsyncStore.close(a)
      AsyncStore.close(b)
    end
  end

  describe "a full ring" do
    test "on_full: :error refuses at once" do
      a = open!(tmp_dir("async-full-error"), ring_size: 4096, on_full: :error)
      pause(a, true)
      payload = :binary.copy("e", 100)
      accepted = fill(a, payload)
      # 100 bytes + 8-byte header, rounded to 112: 36 records in 4096 bytes
      assert accepted == Enum.to_list(0..35)
      assert {:error, :full} = AsyncStore.append(a, payload)

      assert {:ok, %{full_events: 2, rejected: 2, written: 0, ring_used: used}} =
               AsyncStore.stats(a)

      assert used == 36 * 112
      pause(a, false)
      assert {:ok, 35} = AsyncStore.flush(a)
      assert {:ok, 36} = AsyncStore.append(a, "after")
      assert {:ok, 36} = AsyncStore.flush(a)
      {:ok, store} = AsyncStore.store(a)
      assert read_all(store) == List.duplicate(payload, 36) ++ ["after"]
      AsyncStore.close(a)
    end

    test "on_full: :spin waits a bounded time, then succeeds once there is room" do
      a =
        open!(tmp_dir("async-full-spin"), ring_size: 4096, on_full: :spin, spin_timeout_us: 1000)

      pause(a, true)
      payload = :binary.copy("s", 500)
      accepted = fill(a, payload)
      assert length(accepted) == 8

      t0 = System.monotonic_time(:microsecond)
      assert {:error, :full} = AsyncStore.append(a, payload)
      spent = System.monotonic_time(:microsecond) - t0
      assert spent >= 1000 and spent < 200_000

      # The writer resumes while we spin: the append gets room.
      spawn(fn -> pause(a, false) end)
      {result, tries} = retry_full(a, "late", 1)
      assert {:ok, 8} = result
      assert tries >= 1
      assert {:ok, %{rejected: rejected, full_events: fe}} = AsyncStore.stats(a)
      # the fill's last try, the timed one, and the retries before success
      assert rejected == 2 + (tries - 1)
      assert fe >= rejected
      assert {:ok, 8} = AsyncStore.flush(a)
      {:ok, store} = AsyncStore.store(a)
      assert read_all(store) == List.duplicate(payload, 8) ++ ["late"]
      AsyncStore.close(a)
    end
  end

  # Retries an append refused with :full (each try spins up to 1 ms).
  defp retry_full(a, data, tries) do
    case AsyncStore.append(a, data) do
      {:error, :full} when tries < 5000 -> retry_full(a, data, tries + 1)
      other -> {other, tries}
    end
  end

  describe "close" do
    test "writes everything queued, then refuses" do
      dir = tmp_dir("async-close")
      a = open!(dir)
      pause(a, true)
      for i <- 0..499, do: {:ok, ^i} = AsyncStore.append(a, msg(i))
      assert {:ok, %{written: 0}} = AsyncStore.stats(a)
      assert :ok = AsyncStore.close(a)
      assert {:ok, %{written: 500, pending: 0, state: :closed}} = AsyncStore.stats(a)
      assert {:error, :closed} = AsyncStore.append(a, "late")
      assert {:error, :closed} = AsyncStore.flush(a)
      assert {:error, :closed} = AsyncStore.drain(a)
      assert :ok = AsyncStore.close(a)

      {:ok, store} = Store.open(dir, segment_size: @seg)
      assert read_all(store) == for(i <- 0..499, do: msg(i))
      Store.close(store)
    end

    test "two AsyncStores cannot write to one store; a reader cannot be wrapped" do
      dir = tmp_dir("async-busy")
      {:ok, store} = Store.open(dir, segment_size: @seg)
      a = open!(store)
      assert {:error, :busy} = AsyncStore.open(store, wait: :park)
      AsyncStore.close(a)
      b = open!(store)
      AsyncStore.close(b)

      {:ok, reader} = Store.open(dir, access: :read)
      assert {:error, :read_only} = AsyncStore.open(reader, wait: :park)
      Store.close(store)
      assert {:error, :closed} = AsyncStore.open(store, wait: :park)
      assert {:error, :noproc} = AsyncStore.open(:no_such_store, wait: :park)
    end
  end

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

      assert_raise ArgumentError, ~r/unknown Tachyon.Store option/, fn ->
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

  describe "bench support" do
    test "the native producer loop returns a histogram" do
      a = open!(tmp_dir("async-bench"), ring_size: 65_536)
      assert {:ok, h, drains} = Native.async_bench_native(a.ref, 2000, 100, 256)
      assert drains >= 8
      c = Tachyon.Bench.from_hist("x", h, 256)
      assert c.messages == 2000 and c.min_ns > 0 and c.max_ns >= c.avg_ns
      assert {:ok, %{written: 2100, rejected: 0}} = AsyncStore.stats(a)
      AsyncStore.close(a)
    end
  end
end

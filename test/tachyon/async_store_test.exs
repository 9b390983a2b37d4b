defmodule Tachyon.AsyncStoreTest do
  # Not async: every test starts writer threads, and other modules count the
  # VM's OS threads (Tachyon.StoreTest); sync modules never overlap them.
  use ExUnit.Case, async: false

  import Tachyon.TestHelpers
  import Tachyon.AsyncStoreHelpers

  alias Tachyon.{AsyncStore, Native, Store}

  @seg seg_size()

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

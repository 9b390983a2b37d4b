defmodule Tachyon.UDPPollTest do
  use ExUnit.Case, async: true

  alias Tachyon.UDP

  defp open_poll(opts \\ []) do
    {:ok, sock} = UDP.open(0, [ip: :loopback, delivery: :poll] ++ opts)
    {:ok, addr} = UDP.sockname(sock)
    {sock, addr}
  end

  test "100,000 datagrams arrive in order, none lost" do
    {rx, addr} = open_poll(batch: 64)
    {:ok, tx} = :gen_udp.open(0, [:binary, active: false, ip: {127, 0, 0, 1}])
    n = 100_000
    # A window of datagrams in flight: the kernel buffer never overflows.
    got = pump(tx, addr, rx, 0, 0, n, [])
    :gen_udp.close(tx)
    assert length(got) == n
    assert got == Enum.to_list(0..(n - 1))
    {:ok, stats} = UDP.stats(rx)
    assert stats.received == n and stats.kernel_drops == 0 and stats.dropped == 0
    UDP.close(rx)
  end

  defp pump(_tx, _addr, _rx, _sent, got_n, n, acc) when got_n == n,
    do: acc |> Enum.reverse() |> List.flatten()

  defp pump(tx, {ip, port} = addr, rx, sent, got_n, n, acc) do
    sent =
      Enum.reduce_while(sent..(n - 1)//1, sent, fn i, s ->
        if i < got_n + 256 do
          :ok = :gen_udp.send(tx, ip, port, <<i::32>>)
          {:cont, s + 1}
        else
          {:halt, s}
        end
      end)

    {:ok, list} = UDP.recv_many(rx, 64, 5_000)
    assert length(list) <= 64
    ints = for {_from, <<i::32>>} <- list, do: i
    pump(tx, addr, rx, sent, got_n + length(ints), n, [ints | acc])
  end

  test "a datagram that comes while recv sleeps wakes it, and a late readiness message is dropped" do
    {sock, addr} = open_poll(wait: :park)
    # Each recv times out while the VM watches the socket; the readiness
    # message of that watch comes later, with the next datagram. The next
    # recv drops such a message: they never pile up (at most the last one
    # can still be on its way).
    for i <- 1..20 do
      assert {:error, :timeout} = UDP.recv(sock, 1)
      :ok = UDP.send(sock, addr, "n#{i}")
      assert {:ok, {_, "n" <> _}} = UDP.recv(sock, 1_000)
    end

    # (The sleep lets a readiness message still on its way arrive, which
    # makes the bound stricter, not looser.)
    Process.sleep(10)
    {:message_queue_len, stale} = Process.info(self(), :message_queue_len)
    assert stale <= 1
    parent = self()

    spawn(fn ->
      # Send once the recv below sleeps in `receive`.
      await_waiting(parent)
      UDP.send(sock, addr, "late")
      send(parent, :sent)
    end)

    assert {:ok, {_, "late"}} = UDP.recv(sock, 2_000)
    assert_receive :sent, 1_000
    UDP.close(sock)
  end

  test "close from another process wakes a recv, which returns :closed" do
    {sock, _} = open_poll(wait: :park)
    parent = self()
    task = Task.async(fn -> UDP.recv(sock, 10_000) end)
    await_waiting(task.pid)
    spawn(fn -> send(parent, {:closed, UDP.close(sock)}) end)
    assert {:error, :closed} = Task.await(task, 5_000)
    assert_receive {:closed, :ok}, 1_000
    assert {:error, :closed} = UDP.recv(sock, 0)
    assert {:error, :closed} = UDP.send(sock, {{127, 0, 0, 1}, 9}, "x")
  end

  test "the owner's death closes a poll socket and frees its port" do
    parent = self()

    owner =
      spawn(fn ->
        {sock, {_ip, port}} = open_poll(wait: :park)
        send(parent, {:sock, sock, port})
        Process.sleep(:infinity)
      end)

    assert_receive {:sock, sock, port}, 2_000
    task = Task.async(fn -> UDP.recv(sock, 10_000) end)
    await_waiting(task.pid)
    Process.exit(owner, :kill)
    assert {:error, :closed} = Task.await(task, 5_000)

    assert Tachyon.TestHelpers.wait_until(fn ->
             match?({:ok, _}, :gen_udp.open(port, ip: {127, 0, 0, 1}))
           end)
  end

  test "a connected socket sends with send/2 and hears only its peer" do
    {server, server_addr} = open_poll()
    {client, client_addr} = open_poll()
    {:ok, stranger} = :gen_udp.open(0, [:binary, active: false, ip: {127, 0, 0, 1}])

    assert {:error, :edestaddrreq} = UDP.send(client, "not yet")
    assert :ok = UDP.connect(client, server_addr)
    assert :ok = UDP.send(client, ["pi", "ng"])
    assert {:ok, {^client_addr, "ping"}} = UDP.recv(server, 5_000)

    # The kernel drops what the stranger sends; the peer's reply arrives.
    {ip, port} = client_addr
    :ok = :gen_udp.send(stranger, ip, port, "stranger")
    :ok = UDP.send(server, client_addr, "pong")
    assert {:ok, {^server_addr, "pong"}} = UDP.recv(client, 5_000)
    assert {:error, :timeout} = UDP.recv(client, 20)

    assert_raise ArgumentError, fn -> UDP.connect(client, :nowhere) end
    :gen_udp.close(stranger)
    UDP.close(client)
    assert {:error, :closed} = UDP.connect(client, server_addr)
    assert {:error, :closed} = UDP.send(client, "late")
    UDP.close(server)
  end

  test "bad arguments raise ArgumentError" do
    {sock, _} = open_poll()

    for max <- [0, -1, 1025, :many] do
      assert_raise ArgumentError, fn -> UDP.recv_many(sock, max, 0) end
    end

    assert_raise ArgumentError, fn -> UDP.recv(sock, -5) end
    assert_raise ArgumentError, fn -> UDP.recv(sock, :soon) end
    assert_raise ArgumentError, fn -> UDP.recv(make_ref(), 0) end
    assert_raise ArgumentError, fn -> UDP.recv(:not_a_socket, 0) end
    assert_raise ArgumentError, fn -> UDP.open(0, delivery: :poll, max_queue: 10) end
    assert_raise ArgumentError, fn -> UDP.open(0, delivery: :pull) end
    {:ok, threaded} = UDP.open(0, ip: :loopback)
    assert {:error, :not_poll} = UDP.recv(threaded, 0)
    UDP.close(threaded)
    UDP.close(sock)
  end

  test "stats and the open telemetry metadata say poll" do
    {sock, addr} = open_poll()
    :ok = UDP.send(sock, addr, "x")
    assert {:ok, {_, "x"}} = UDP.recv(sock, 1_000)
    assert {:ok, %{received: 1, delivered: 1, sent: 1}} = UDP.stats(sock)
    UDP.close(sock)
    assert {:error, :closed} = UDP.stats(sock)
  end

  # Until `pid` sleeps in `receive` (a recv waiting for readiness).
  defp await_waiting(pid) do
    assert Tachyon.TestHelpers.wait_until(fn ->
             Process.info(pid, :status) == {:status, :waiting}
           end)
  end
end

defmodule Tachyon.UDPPollTimeoutTest do
  # Timing: not async, so that no other test competes for the schedulers.
  use ExUnit.Case, async: false

  alias Tachyon.UDP

  defp open_poll(opts) do
    {:ok, sock} = UDP.open(0, [ip: :loopback, delivery: :poll] ++ opts)
    {:ok, addr} = UDP.sockname(sock)
    {sock, addr}
  end

  # Runs `measure` up to 3 times until `ok?` holds for its result; returns
  # every result (the last one the best try). A poll that overstays its
  # timeout, or starves the ticker, does so every time; a loaded machine's
  # preemptions (tens of ms with a busy loop pinned on one core, seen once
  # in a few runs) come and go.
  defp tries(measure, ok?) do
    Enum.reduce_while(1..3, [], fn _, acc ->
      r = measure.()
      if ok?.(r), do: {:halt, [r | acc]}, else: {:cont, [r | acc]}
    end)
  end

  test "a recv timeout is honoured within a millisecond, for every wait strategy" do
    for wait <- [:busy_spin, :yield, :backoff, :park], timeout <- [0, 5, 20] do
      took =
        tries(
          fn ->
            {sock, _} = open_poll(wait: wait)
            t0 = System.monotonic_time(:microsecond)
            assert {:error, :timeout} = UDP.recv(sock, timeout)
            took = System.monotonic_time(:microsecond) - t0
            UDP.close(sock)
            # Never early.
            assert took >= timeout * 1000, "#{wait} #{timeout} ms took #{took} us"
            took
          end,
          # Within 1 ms, plus scheduling slack on a 2-core machine, scaled
          # by its load (at load 20 a 5 ms wait took 140-156 ms).
          &(&1 <= timeout * 1000 + 1_000 + slack())
        )

      assert hd(took) <= timeout * 1000 + 1_000 + slack(),
             "#{wait} #{timeout} ms took #{inspect(Enum.reverse(took))} us in #{length(took)} tries"
    end
  end

  test "other processes keep running while every scheduler has a process polling" do
    # One busy-spinning poller per scheduler: whichever scheduler the ticker
    # lands on, it shares it with a process that never sleeps.
    n = System.schedulers_online()
    parent = self()

    runs = tries(fn -> ticker_beside_pollers(n, parent) end, &ticker_ok?/1)
    last = hd(runs)

    if System.get_env("TACHYON_TEST_VERBOSE"), do: IO.puts("ticker runs: #{inspect(runs)}")

    # The ticker sleeps 1 ms between ticks: it must keep being scheduled
    # (at least a quarter of the ticks it got alone), and not be late by
    # more than a few time slices beyond what it saw alone.
    assert ticker_ok?(last),
           "ticks, worst lateness (us) with pollers and alone, in #{length(runs)} tries: " <>
             inspect(Enum.reverse(runs))
  end

  defp ticker_ok?(%{ticks: t, worst: w, base_ticks: bt, base_worst: bw}),
    do: t >= div(bt, 4) and w < 20_000 * Tachyon.TestHelpers.load_factor() + 2 * bw

  defp slack, do: round(4_000 * Tachyon.TestHelpers.load_factor())

  defp ticker_beside_pollers(n, parent) do
    # The same ticker first runs 300 ms with no poller: what this machine
    # gives it now (another load may be running) sets the margins.
    base_ticker = spawn(fn -> tick(parent, System.monotonic_time(:microsecond), 0) end)
    Process.sleep(300)
    Process.exit(base_ticker, :kill)
    base = collect_ticks([])

    socks = for _ <- 1..n, do: elem(open_poll(wait: :busy_spin), 0)
    ticker = spawn(fn -> tick(parent, System.monotonic_time(:microsecond), 0) end)
    for s <- socks, do: spawn(fn -> send(parent, {:polled, UDP.recv(s, 300)}) end)
    for _ <- socks, do: assert_receive({:polled, {:error, :timeout}}, 5_000)
    Process.exit(ticker, :kill)
    ticks = collect_ticks([])
    Enum.each(socks, &UDP.close/1)

    %{
      ticks: length(ticks),
      worst: Enum.max(ticks, fn -> 0 end),
      base_ticks: length(base),
      base_worst: Enum.max(base, fn -> 0 end)
    }
  end

  defp tick(parent, last, n) do
    Process.sleep(1)
    now = System.monotonic_time(:microsecond)
    send(parent, {:tick, now - last - 1_000})
    tick(parent, now, n + 1)
  end

  defp collect_ticks(acc) do
    receive do
      {:tick, late} -> collect_ticks([late | acc])
    after
      0 -> acc
    end
  end
end

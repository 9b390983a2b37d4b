defmodule Tachyon.UDPTest do
  # Loopback only, ephemeral ports, and no busy-spinning receive threads.
  # Not async: every test starts threads, and other modules count the VM's OS
  # threads (Tachyon.StoreTest); sync modules never overlap them.
  use ExUnit.Case, async: false

  import Tachyon.TestHelpers, only: [wait_until: 1]

  alias Tachyon.{Echo, UDP}

  @lo {127, 0, 0, 1}

  defp open!(opts \\ []) do
    {:ok, sock} = UDP.open(0, Keyword.merge([ip: :loopback], opts))
    sock
  end

  defp addr!(sock) do
    {:ok, addr} = UDP.sockname(sock)
    addr
  end

  defp port_free?(port) do
    case :gen_udp.open(port, ip: @lo) do
      {:ok, s} ->
        :gen_udp.close(s)
        true

      {:error, :eaddrinuse} ->
        false
    end
  end

  defp stats!(sock) do
    {:ok, stats} = UDP.stats(sock)
    stats
  end

  # Receives every {:tachyon_udp, sock, _, data} already sent, in order.
  defp drain(sock, acc \\ []) do
    receive do
      {:tachyon_udp, ^sock, _, data} -> drain(sock, [data | acc])
    after
      50 -> Enum.reverse(acc)
    end
  end

  describe "open/2" do
    test "delivers datagrams to the owner as {:tachyon_udp, socket, {ip, port}, data}" do
      sock = open!()
      {:ok, peer} = :gen_udp.open(0, [:binary, ip: @lo])
      {:ok, peer_port} = :inet.port(peer)
      {ip, port} = addr!(sock)
      assert ip == @lo and port > 0
      assert {:ok, ^port} = UDP.port(sock)

      :ok = :gen_udp.send(peer, @lo, port, "hello")
      assert_receive {:tachyon_udp, ^sock, {@lo, ^peer_port}, "hello"}, 2000
      assert UDP.owner(sock) == self()
    end

    test "a port in use is {:error, :eaddrinuse}" do
      {:ok, holder} = :gen_udp.open(0, ip: @lo)
      {:ok, port} = :inet.port(holder)
      assert {:error, :eaddrinuse} = UDP.open(port, ip: :loopback)
      :gen_udp.close(holder)
    end

    test "an owner that is not alive is {:error, :badarg} and nothing stays bound" do
      dead = spawn(fn -> :ok end)
      ref = Process.monitor(dead)
      assert_receive {:DOWN, ^ref, _, _, _}, 1000
      assert {:error, :badarg} = UDP.open(0, ip: :loopback, owner: dead)
    end

    test "bad options raise ArgumentError naming the key" do
      for {port, opts, key} <- [
            {-1, [], ":port"},
            {65_536, [], ":port"},
            {:x, [], ":port"},
            {0, [ip: {1, 2, 3}], ":ip"},
            {0, [owner: :me], ":owner"},
            {0, [wait: :spin], ":wait"},
            {0, [core: 100_000], ":core"},
            {0, [max_queue: 0], ":max_queue"},
            {0, [max_queue: :unbounded], ":max_queue"},
            {0, [batch: 0], ":batch"},
            {0, [max_datagram_size: 0], ":max_datagram"},
            {0, [sndbuf: -1], ":sndbuf"},
            {0, [bogus: true], "bogus"}
          ] do
        error = assert_raise ArgumentError, fn -> UDP.open(port, opts) end
        assert error.message =~ key, "#{inspect({port, opts})}: #{error.message}"
      end
    end

    test "opens an IPv6 socket for an IPv6 address" do
      case :gen_udp.open(0, [:inet6, ip: {0, 0, 0, 0, 0, 0, 0, 1}]) do
        {:ok, probe} ->
          :gen_udp.close(probe)
          sock = open!(ip: "::1")
          {{0, 0, 0, 0, 0, 0, 0, 1}, _} = addr = addr!(sock)
          :ok = UDP.send(sock, addr, "v6")
          assert_receive {:tachyon_udp, ^sock, ^addr, "v6"}, 2000
          assert {:error, reason} = UDP.send(sock, {@lo, 9}, "v4 from v6")
          assert reason in [:eafnosupport, :enetunreach, :einval]

        {:error, _} ->
          # No IPv6 loopback on this machine: nothing to test.
          assert true
      end
    end
  end

  describe "send/3" do
    test "sends binaries and iodata from any process, not only the owner" do
      sock = open!()
      me = addr!(sock)
      :ok = UDP.send(sock, me, "binary")
      :ok = UDP.send(sock, me, ["io", ?d, ["at", "a"]])
      Task.async(fn -> :ok = UDP.send(sock, me, "from a task") end) |> Task.await()

      assert_receive {:tachyon_udp, ^sock, ^me, "binary"}, 2000
      assert_receive {:tachyon_udp, ^sock, ^me, "iodata"}, 2000
      assert_receive {:tachyon_udp, ^sock, ^me, "from a task"}, 2000
      # `received` is counted once the whole batch is handed over.
      assert wait_until(fn -> stats!(sock).received == 3 end)
      assert %{sent: 3, delivered: 3, send_errors: 0} = stats!(sock)
    end

    test "round trips every size from 0 to 65,507 bytes through Tachyon.Echo byte for byte" do
      {:ok, echo} = Echo.start_link(wait: :park)
      dest = Echo.address(echo)
      sock = open!()

      for size <- [0, 1, 63, 64, 65, 256, 1_472, 1_473, 8_192, 65_507] do
        data = :crypto.strong_rand_bytes(size)
        :ok = UDP.send(sock, dest, data)
        assert_receive {:tachyon_udp, ^sock, ^dest, ^data}, 2000
      end
    end

    test "kernel errors come back as POSIX atoms and the socket keeps working" do
      sock = open!()
      me = addr!(sock)
      assert {:error, :emsgsize} = UDP.send(sock, me, :binary.copy("x", 65_508))
      assert {:error, :einval} = UDP.send(sock, {@lo, 0}, "port 0")
      assert {:error, :eafnosupport} = UDP.send(sock, {{0, 0, 0, 0, 0, 0, 0, 1}, 9}, "v6")
      # Nobody listens there: UDP gives no error on an unconnected socket.
      {:ok, closed} = :gen_udp.open(0, ip: @lo)
      {:ok, closed_port} = :inet.port(closed)
      :gen_udp.close(closed)
      assert :ok = UDP.send(sock, {@lo, closed_port}, "into the void")

      :ok = UDP.send(sock, me, "still fine")
      assert_receive {:tachyon_udp, ^sock, ^me, "still fine"}, 2000
      assert %{send_errors: 3, sent: 2} = stats!(sock)
    end

    test "bad arguments raise ArgumentError" do
      sock = open!()
      me = addr!(sock)
      assert_raise ArgumentError, fn -> UDP.send(sock, me, :not_iodata) end
      assert_raise ArgumentError, fn -> UDP.send(sock, {{1, 2, 3}, 9}, "x") end
      assert_raise ArgumentError, fn -> UDP.send(sock, {{300, 0, 0, 1}, 9}, "x") end
      assert_raise ArgumentError, fn -> UDP.send(sock, {@lo, 65_536}, "x") end
      assert_raise ArgumentError, fn -> UDP.send(sock, "127.0.0.1:9", "x") end
      assert_raise ArgumentError, fn -> UDP.send(make_ref(), me, "x") end
    end
  end

  describe "receiving" do
    test "oversized datagrams are counted in :truncated, never delivered cut short" do
      sock = open!(max_datagram_size: 64)
      me = addr!(sock)
      :ok = UDP.send(sock, me, :binary.copy("a", 65))
      :ok = UDP.send(sock, me, :binary.copy("b", 64))
      assert_receive {:tachyon_udp, ^sock, ^me, data}, 2000
      assert data == :binary.copy("b", 64)
      assert wait_until(fn -> stats!(sock).received == 2 end)
      assert %{delivered: 1, truncated: 1} = stats!(sock)
    end

    test "many concurrent senders all get through" do
      sock = open!(recbuf: 1_048_576)
      me = addr!(sock)

      1..10
      |> Enum.map(fn t ->
        Task.async(fn ->
          {:ok, s} = UDP.open(0, ip: :loopback)
          for i <- 1..50, do: :ok = UDP.send(s, me, <<t, i>>)
          UDP.close(s)
        end)
      end)
      |> Task.await_many(10_000)

      got =
        for _ <- 1..500 do
          assert_receive {:tachyon_udp, ^sock, _from, <<t, i>>}, 2000
          {t, i}
        end

      assert Enum.sort(got) == for(t <- 1..10, i <- 1..50, do: {t, i})
      assert %{delivered: 500, kernel_drops: 0, dropped: 0} = stats!(sock)
    end

    test "every non-spinning wait strategy delivers" do
      for wait <- [:park, :backoff, :yield] do
        sock = open!(wait: wait)
        me = addr!(sock)
        :ok = UDP.send(sock, me, "#{wait}")
        expected = "#{wait}"
        assert_receive {:tachyon_udp, ^sock, ^me, ^expected}, 2000
        UDP.close(sock)
      end
    end

    test "a pinned receive thread delivers" do
      sock = open!(core: 0)
      me = addr!(sock)
      :ok = UDP.send(sock, me, "pinned")
      assert_receive {:tachyon_udp, ^sock, ^me, "pinned"}, 2000
    end
  end

  describe "backpressure" do
    test "without :max_queue every datagram is delivered, however long the mailbox" do
      sock = open!(recbuf: 1_048_576)
      me = addr!(sock)
      for i <- 1..300, do: :ok = UDP.send(sock, me, <<i::16>>)
      assert wait_until(fn -> stats!(sock).received == 300 end)
      assert %{delivered: 300, dropped: 0, in_flight: 300} = stats!(sock)
      assert drain(sock) == for(i <- 1..300, do: <<i::16>>)
    end

    test "with :max_queue the newest datagrams are dropped and counted until acked" do
      sock = open!(max_queue: 5)
      me = addr!(sock)
      for i <- 1..20, do: :ok = UDP.send(sock, me, <<i>>)
      assert wait_until(fn -> stats!(sock).received == 20 end)

      assert %{delivered: 5, dropped: 15, in_flight: 5, acked: 0} = stats!(sock)
      # Tail drop: the first five arrived, in order, and nothing else.
      assert drain(sock) == for(i <- 1..5, do: <<i>>)

      :ok = UDP.ack(sock, 3)
      for i <- 21..25, do: :ok = UDP.send(sock, me, <<i>>)
      assert wait_until(fn -> stats!(sock).received == 25 end)
      assert %{delivered: 8, dropped: 17, in_flight: 5, acked: 3} = stats!(sock)
      assert drain(sock) == for(i <- 21..23, do: <<i>>)

      :ok = UDP.ack(sock)
      :ok = UDP.ack(sock, 4)
      assert %{in_flight: 0, acked: 8} = stats!(sock)
    end

    test "ack/2 rejects a count that is not positive" do
      sock = open!()
      assert_raise FunctionClauseError, fn -> UDP.ack(sock, 0) end
    end
  end

  describe "ownership" do
    test "the owner's death closes the socket and frees its port" do
      parent = self()

      owner =
        spawn(fn ->
          {:ok, sock} = UDP.open(0, ip: :loopback)
          send(parent, {:sock, sock})
          Process.sleep(:infinity)
        end)

      assert_receive {:sock, sock}, 2000
      {_, port} = addr!(sock)
      refute port_free?(port)

      Process.exit(owner, :kill)
      assert wait_until(fn -> UDP.send(sock, {@lo, port}, "x") == {:error, :closed} end)
      assert wait_until(fn -> port_free?(port) end)
      assert UDP.owner(sock) == nil
      assert {:error, :closed} = UDP.stats(sock)
      assert {:error, :closed} = UDP.sockname(sock)
      assert :ok = UDP.close(sock)
    end

    test "the :owner option gives the socket to another process" do
      owner = spawn(fn -> Process.sleep(:infinity) end)
      {:ok, sock} = UDP.open(0, ip: :loopback, owner: owner)
      assert UDP.owner(sock) == owner
      :ok = UDP.send(sock, addr!(sock), "to the owner, not to me")

      assert wait_until(fn ->
               Process.info(owner, :message_queue_len) == {:message_queue_len, 1}
             end)

      refute_received {:tachyon_udp, _, _, _}
      assert {:error, :not_owner} = UDP.controlling_process(sock, self())
      Process.exit(owner, :kill)
      assert wait_until(fn -> UDP.owner(sock) == nil end)
    end

    test "controlling_process/2 hands the datagrams and the lifetime to the new owner" do
      sock = open!()
      me = addr!(sock)
      parent = self()

      new_owner =
        spawn(fn ->
          receive do
            :go ->
              receive do
                {:tachyon_udp, ^sock, _, data} -> send(parent, {:new_owner_got, data})
              after
                2000 -> send(parent, :new_owner_timeout)
              end

              Process.sleep(:infinity)
          end
        end)

      assert :ok = UDP.controlling_process(sock, new_owner)
      assert UDP.owner(sock) == new_owner
      assert {:error, :not_owner} = UDP.controlling_process(sock, self())

      # Only the owner may give it away.
      assert {:error, :not_owner} =
               Task.async(fn -> UDP.controlling_process(sock, self()) end) |> Task.await()

      send(new_owner, :go)
      :ok = UDP.send(sock, me, "for the new owner")
      assert_receive {:new_owner_got, "for the new owner"}, 2000
      refute_received {:tachyon_udp, _, _, _}

      # The old owner's exit no longer matters, the new one's does.
      {_, port} = me
      Process.exit(new_owner, :kill)
      assert wait_until(fn -> port_free?(port) end)
      assert {:error, :closed} = UDP.controlling_process(sock, self())
    end

    test "the previous owner's death does not close a socket it gave away" do
      parent = self()

      old =
        spawn(fn ->
          {:ok, sock} = UDP.open(0, ip: :loopback)
          :ok = UDP.controlling_process(sock, parent)
          send(parent, {:sock, sock})
        end)

      assert_receive {:sock, sock}, 2000
      ref = Process.monitor(old)
      assert_receive {:DOWN, ^ref, _, _, _}, 1000
      me = addr!(sock)
      :ok = UDP.send(sock, me, "alive")
      assert_receive {:tachyon_udp, ^sock, ^me, "alive"}, 2000
    end

    test "giving it to a dead process is {:error, :badarg} and changes nothing" do
      sock = open!()
      dead = spawn(fn -> :ok end)
      ref = Process.monitor(dead)
      assert_receive {:DOWN, ^ref, _, _, _}, 1000
      assert {:error, :badarg} = UDP.controlling_process(sock, dead)
      assert UDP.owner(sock) == self()
      assert :ok = UDP.controlling_process(sock, self())
    end
  end

  describe "close/1" do
    test "frees the port at once; later calls see :closed; it is idempotent" do
      sock = open!()
      {_, port} = me = addr!(sock)
      assert :ok = UDP.close(sock)
      assert port_free?(port)
      assert {:error, :closed} = UDP.send(sock, me, "x")
      assert {:error, :closed} = UDP.stats(sock)
      assert {:error, :closed} = UDP.port(sock)
      assert {:error, :closed} = UDP.controlling_process(sock, self())
      assert UDP.owner(sock) == nil
      assert :ok = UDP.close(sock)
      assert :ok = UDP.ack(sock, 1)
    end

    test "messages already delivered stay in the mailbox" do
      sock = open!()
      me = addr!(sock)
      :ok = UDP.send(sock, me, "before close")
      assert wait_until(fn -> stats!(sock).delivered == 1 end)
      :ok = UDP.close(sock)
      assert_receive {:tachyon_udp, ^sock, ^me, "before close"}, 1000
    end
  end

  describe "telemetry" do
    test "open and close events" do
      Tachyon.TelemetryHelpers.forward([[:tachyon, :udp, :open], [:tachyon, :udp, :close]])
      sock = open!(max_queue: 7, wait: :backoff)
      me = addr!(sock)
      me_pid = self()

      assert_receive {:telemetry, [:tachyon, :udp, :open], %{duration: _},
                      %{socket: ^sock, address: ^me, owner: ^me_pid, max_queue: 7, wait: :backoff}},
                     1000

      :ok = UDP.send(sock, me, "x")
      assert_receive {:tachyon_udp, ^sock, _, "x"}, 2000
      :ok = UDP.close(sock)

      assert_receive {:telemetry, [:tachyon, :udp, :close], %{sent: 1, delivered: 1},
                      %{socket: ^sock}},
                     1000
    end
  end
end

defmodule Tachyon.UDPThreadsTest do
  # Counts the VM's OS threads, so it must not run alongside other tests.
  use ExUnit.Case, async: false

  import Tachyon.TestHelpers, only: [os_threads: 0]

  alias Tachyon.{Echo, UDP}

  defp settle_to(expected) do
    deadline = System.monotonic_time(:millisecond) + 2000
    settle_to(expected, deadline)
  end

  defp settle_to(expected, deadline) do
    n = os_threads()

    cond do
      n == expected -> n
      System.monotonic_time(:millisecond) > deadline -> n
      true -> Process.sleep(5) && settle_to(expected, deadline)
    end
  end

  # Threads of earlier (async) tests may still be on their way out: sockets
  # whose owners just exited, servers whose links are being torn down,
  # resources not yet collected. Wait for a count that holds for 200 ms.
  defp stable_count do
    Enum.each(Process.list(), &:erlang.garbage_collect/1)
    stable_count(os_threads(), System.monotonic_time(:millisecond), 50)
  end

  defp stable_count(_n, _since, 0), do: os_threads()

  defp stable_count(n, since, tries) do
    Process.sleep(20)
    now = System.monotonic_time(:millisecond)

    case os_threads() do
      ^n when now - since >= 200 -> n
      ^n -> stable_count(n, since, tries - 1)
      m -> stable_count(m, now, tries - 1)
    end
  end

  test "no thread is left behind by echo servers, sockets, pings or dead owners" do
    before = stable_count()

    echoes = for _ <- 1..3, do: elem(Echo.start_link(wait: :park), 1)
    socks = for _ <- 1..4, do: elem(UDP.open(0, ip: :loopback), 1)
    parent = self()

    owner =
      spawn(fn ->
        {:ok, s} = UDP.open(0, ip: :loopback)
        send(parent, {:sock, s})
        Process.sleep(:infinity)
      end)

    assert_receive {:sock, _}, 2000
    assert settle_to(before + 8) == before + 8

    # A ping's thread lives only for the call.
    {ip, port} = Echo.address(hd(echoes))

    {:ok, _h, %{received: 20}} =
      Tachyon.Native.udp_ping(%{
        ip: ip,
        port: port,
        count: 10,
        warmup: 10,
        size: 64,
        wait: :park,
        core: nil,
        timeout_ms: 1000,
        max_lost: 1
      })

    assert os_threads() == before + 8

    Process.exit(owner, :kill)
    Enum.each(socks, &UDP.close/1)
    Enum.each(echoes, &Echo.close/1)
    assert settle_to(before) == before
  end
end

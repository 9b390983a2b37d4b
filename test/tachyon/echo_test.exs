defmodule Tachyon.EchoTest do
  # Loopback only, ephemeral ports, and never a busy-spinning thread: the
  # machine's cores are shared with other test suites. Not async: every test
  # starts threads, and other modules count the VM's OS threads
  # (Tachyon.StoreTest); sync modules never overlap them.
  use ExUnit.Case, async: false

  import Tachyon.TestHelpers, only: [wait_until: 1]

  alias Tachyon.Echo

  @lo {127, 0, 0, 1}

  defp start!(opts \\ []) do
    {:ok, echo} = Echo.start_link(Keyword.merge([wait: :park], opts))
    echo
  end

  defp ok!({:ok, v}), do: v

  defp client! do
    {:ok, sock} =
      :gen_udp.open(0, [:binary, ip: @lo, active: false, recbuf: 1_048_576, buffer: 70_000])

    on_exit(fn -> :gen_udp.close(sock) end)
    sock
  end

  defp echo_of(sock, {ip, port}, data, timeout \\ 2000) do
    :ok = :gen_udp.send(sock, ip, port, data)

    case :gen_udp.recv(sock, 0, timeout) do
      {:ok, {^ip, ^port, reply}} -> {:ok, reply}
      {:error, _} = error -> error
    end
  end

  describe "start_link/1" do
    test "binds an ephemeral loopback port by default and reports where it runs" do
      echo = start!()
      assert {@lo, port} = Echo.address(echo)
      assert port > 0
      assert Echo.port(echo) == port

      info = Echo.info(echo)
      assert %{wait: :park, core: nil, pinned: false, batch: 32, max_datagram_size: 65_507} = info
      assert info.recbuf > 0 and info.sndbuf > 0
    end

    test "the default wait strategy never busy-spins on a small machine" do
      {:ok, echo} = Echo.start_link()
      wait = Echo.info(echo).wait

      if Tachyon.UDP.Options.cores() > 2,
        do: assert(wait == :busy_spin),
        else: assert(wait == :backoff)
    end

    test "pins the thread to a core when asked" do
      echo = start!(core: 0)
      assert %{core: 0, pinned: true} = Echo.info(echo)
      assert {:ok, "pinned"} = echo_of(client!(), Echo.address(echo), "pinned")
    end

    test "a port in use is an error return, not an exit" do
      {:ok, holder} = :gen_udp.open(0, ip: @lo)
      {:ok, port} = :inet.port(holder)
      Process.flag(:trap_exit, true)
      assert {:error, :eaddrinuse} = Echo.start_link(port: port, wait: :park)
      refute_receive {:EXIT, _, _}, 50
      :gen_udp.close(holder)
    end

    test "an address that is not ours is :eaddrnotavail" do
      assert {:error, :eaddrnotavail} = Echo.start_link(ip: {192, 0, 2, 1}, wait: :park)
    end

    test "bad options raise ArgumentError naming the key" do
      for {opts, key} <- [
            {[port: -1], ":port"},
            {[port: 70_000], ":port"},
            {[ip: {300, 0, 0, 1}], ":ip"},
            {[ip: "not an address"], ":ip"},
            {[wait: :fast], ":wait"},
            {[core: 10_000], ":core"},
            {[core: -1], ":core"},
            {[batch: 0], ":batch"},
            {[batch: 5000], ":batch"},
            {[max_datagram_size: 65_508], ":max_datagram"},
            {[recbuf: 0], ":recbuf"},
            {[reuseaddr: :yes], ":reuseaddr"},
            {[stats_interval_ms: -5], ":stats_interval"},
            {[nonsense: 1], "nonsense"}
          ] do
        error = assert_raise ArgumentError, fn -> Echo.start_link(opts) end
        assert error.message =~ key, "#{inspect(opts)}: #{error.message}"
      end
    end

    test "accepts an address string and the :any address" do
      echo = start!(ip: "127.0.0.1")
      assert {@lo, _} = Echo.address(echo)
      echo = start!(ip: :any)
      assert {{0, 0, 0, 0}, port} = Echo.address(echo)
      assert {:ok, "any"} = echo_of(client!(), {@lo, port}, "any")
    end
  end

  describe "echoing" do
    test "every size from 0 to 65,507 bytes comes back byte for byte" do
      echo = start!()
      addr = Echo.address(echo)
      sock = client!()

      for size <- [0, 1, 2, 7, 8, 63, 64, 255, 256, 1_472, 1_473, 4_096, 9_000, 32_768, 65_507] do
        data = :crypto.strong_rand_bytes(size)
        assert {:ok, ^data} = echo_of(sock, addr, data), "size #{size}"
      end

      # The thread counts an echo after sending it.
      assert wait_until(fn -> elem(Echo.stats(echo), 1).packets_out == 15 end)
      stats = ok!(Echo.stats(echo))
      assert stats.packets_in == 15 and stats.packets_out == 15
      assert stats.bytes_in == stats.bytes_out
      assert stats.errors == 0
    end

    test "works with each non-spinning wait strategy" do
      for wait <- [:park, :backoff, :yield] do
        echo = start!(wait: wait)
        assert {:ok, "w"} = echo_of(client!(), Echo.address(echo), "w"), "#{wait}"
        Echo.close(echo)
      end
    end

    test "serves many concurrent clients, each getting its own datagrams back" do
      echo = start!(wait: :backoff)
      addr = Echo.address(echo)

      1..16
      |> Enum.map(fn c ->
        Task.async(fn ->
          {:ok, sock} = :gen_udp.open(0, [:binary, ip: @lo, active: false])

          for i <- 1..50 do
            data = "client #{c} datagram #{i} " <> :binary.copy(<<c>>, c * 10)
            assert {:ok, ^data} = echo_of(sock, addr, data)
          end

          :gen_udp.close(sock)
        end)
      end)
      |> Task.await_many(30_000)

      assert wait_until(fn -> elem(Echo.stats(echo), 1).packets_out == 800 end)
      stats = ok!(Echo.stats(echo))
      assert stats.packets_in == 800 and stats.packets_out == 800
      assert stats.batches in 1..800
    end

    test "a burst is echoed completely, in batches" do
      echo = start!(batch: 8)
      {ip, port} = Echo.address(echo)
      sock = client!()
      for i <- 1..200, do: :ok = :gen_udp.send(sock, ip, port, <<i::32>>)

      got =
        for _ <- 1..200 do
          {:ok, {_, _, <<i::32>>}} = :gen_udp.recv(sock, 0, 2000)
          i
        end

      assert Enum.sort(got) == Enum.to_list(1..200)
      assert wait_until(fn -> elem(Echo.stats(echo), 1).packets_out == 200 end)
      assert %{kernel_drops: 0} = ok!(Echo.stats(echo))
    end
  end

  describe "bad datagrams" do
    test "oversized datagrams are counted, not echoed, and the loop keeps running" do
      echo = start!(max_datagram_size: 100)
      addr = Echo.address(echo)
      sock = client!()

      assert {:error, :timeout} = echo_of(sock, addr, :binary.copy("x", 101), 100)
      assert wait_until(fn -> elem(Echo.stats(echo), 1).truncated == 1 end)
      assert {:ok, ""} = echo_of(sock, addr, "")
      exactly = :binary.copy("y", 100)
      assert {:ok, ^exactly} = echo_of(sock, addr, exactly)

      assert wait_until(fn -> elem(Echo.stats(echo), 1).packets_out == 2 end)
      assert %{packets_in: 3, packets_out: 2, truncated: 1, errors: 1} = ok!(Echo.stats(echo))
    end

    test "garbage is echoed like anything else and a vanished sender does not hurt" do
      echo = start!()
      {ip, port} = Echo.address(echo)

      {:ok, gone} = :gen_udp.open(0, [:binary, ip: @lo])
      :ok = :gen_udp.send(gone, ip, port, "the sender closes before the echo")
      :gen_udp.close(gone)

      sock = client!()

      for _ <- 1..20 do
        garbage = :crypto.strong_rand_bytes(:rand.uniform(2000))
        assert {:ok, ^garbage} = echo_of(sock, {ip, port}, garbage)
      end

      assert wait_until(fn -> elem(Echo.stats(echo), 1).packets_out == 21 end)
    end

    test "a datagram over 65,507 bytes cannot even be sent: the kernel refuses it" do
      echo = start!()
      {ip, port} = Echo.address(echo)
      sock = client!()
      assert {:error, :emsgsize} = :gen_udp.send(sock, ip, port, :binary.copy("z", 65_508))
      assert {:ok, "ok"} = echo_of(sock, {ip, port}, "ok")
    end
  end

  describe "stopping" do
    test "frees the port at once, so the same port can be bound again" do
      echo = start!()
      {_, port} = Echo.address(echo)
      :ok = Echo.close(echo)
      refute Process.alive?(echo)

      # Bound again immediately, with no SO_REUSEADDR.
      {:ok, sock} = :gen_udp.open(port, ip: @lo)
      :gen_udp.close(sock)
      echo2 = start!(port: port)
      assert {:ok, "again"} = echo_of(client!(), {@lo, port}, "again")
      :ok = Echo.close(echo2)
    end

    test "a supervised server starts by name and frees its port when the supervisor stops" do
      {:ok, sup} =
        Supervisor.start_link([{Echo, name: :tachyon_echo_test_sup, port: 0, wait: :park}],
          strategy: :one_for_one
        )

      [{{Echo, :tachyon_echo_test_sup}, pid, :worker, _}] = Supervisor.which_children(sup)
      assert Process.whereis(:tachyon_echo_test_sup) == pid
      {_, port} = Echo.address(:tachyon_echo_test_sup)
      assert {:ok, "sup"} = echo_of(client!(), {@lo, port}, "sup")

      :ok = Supervisor.stop(sup)
      {:ok, sock} = :gen_udp.open(port, ip: @lo)
      :gen_udp.close(sock)
    end

    test "a name already taken is an error and the socket is released" do
      echo = start!(name: :tachyon_echo_test_taken)
      {_, port} = Echo.address(echo)
      {:ok, holder} = :gen_udp.open(0, ip: @lo)
      {:ok, free} = :inet.port(holder)
      :gen_udp.close(holder)

      assert {:error, {:already_started, ^echo}} =
               Echo.start_link(name: :tachyon_echo_test_taken, port: free, wait: :park)

      {:ok, sock} = :gen_udp.open(free, ip: @lo)
      :gen_udp.close(sock)
      assert port != free
    end
  end

  describe "telemetry" do
    test "start, periodic stats and stop events" do
      Tachyon.TelemetryHelpers.forward([
        [:tachyon, :echo, :start],
        [:tachyon, :echo, :stats],
        [:tachyon, :echo, :stop]
      ])

      {:ok, echo} = Echo.start_link(wait: :park, stats_interval_ms: 20, name: :tachyon_echo_tel)
      addr = Echo.address(echo)

      assert_receive {:telemetry, [:tachyon, :echo, :start], %{duration: d},
                      %{name: :tachyon_echo_tel, address: ^addr, wait: :park}},
                     1000

      assert is_integer(d) and d >= 0
      assert {:ok, "tel"} = echo_of(client!(), addr, "tel")

      assert_receive {:telemetry, [:tachyon, :echo, :stats], %{packets_in: 1, packets_out: 1},
                      %{name: :tachyon_echo_tel}},
                     1000

      :ok = Echo.close(echo)

      assert_receive {:telemetry, [:tachyon, :echo, :stop], %{packets_out: 1, errors: 0},
                      %{name: :tachyon_echo_tel, address: ^addr}},
                     1000
    end
  end
end

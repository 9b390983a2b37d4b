defmodule Tachyon.Bench.Echo.Peers do
  @moduledoc false
  # Both ends of the round trips of `mix tachyon.bench echo`: the echo
  # servers (Tachyon.Echo, and BEAM processes on Tachyon.UDP, gen_udp and
  # :socket), the Rust ping client (a NIF) and the Elixir client loop.
  #
  # A round trip with no echo within @rt_timeout ms is lost (not recorded);
  # a run gives up after @max_lost of them.

  alias Tachyon.Native

  @loopback {127, 0, 0, 1}
  @rt_timeout 1000
  @max_lost 10

  # -- Rust ping ---------------------------------------------------------------

  @doc """
  Runs `fun.(echo, address)` against a fresh Tachyon.Echo (`opts`: more of
  its options), stopped afterwards.
  """
  def with_echo(core, wait, fun, opts \\ []) do
    {:ok, echo} = Tachyon.Echo.start_link([ip: :loopback, core: core, wait: wait] ++ opts)

    try do
      fun.(echo, Tachyon.Echo.address(echo))
    after
      Tachyon.Echo.close(echo)
    end
  end

  @doc "`warmup + n` round trips from the Rust ping thread (NIF); returns `{hist, info}`."
  def rust_ping!({ip, port}, n, warmup, cfg) do
    opts = %{
      ip: ip,
      port: port,
      count: n,
      warmup: warmup,
      size: cfg.size,
      wait: cfg.wait,
      core: cfg.ping_core,
      timeout_ms: @rt_timeout,
      max_lost: @max_lost
    }

    case Native.udp_ping(opts) do
      {:ok, h, info} -> {h, info}
      {:error, reason} -> Mix.raise("ping failed: #{inspect(reason)}")
    end
  end

  # -- Elixir client -----------------------------------------------------------

  @doc """
  The Elixir client loop: `n` round trips, each `rt.()` (send, wait for the
  echo: `:ok` or `:lost`) between two perf counter reads, recorded in `h`
  unless it is nil (warm-up). Returns the round trips lost so far.
  """
  def round_trips(0, _rt, _h, lost), do: lost

  def round_trips(n, rt, h, lost) do
    t0 = :os.perf_counter()

    case rt.() do
      :ok ->
        t1 = :os.perf_counter()
        if h, do: Native.hist_record(h, t1 - t0)
        round_trips(n - 1, rt, h, lost)

      :lost ->
        round_trips(n - 1, rt, h, lost!(lost))
    end
  end

  defp lost!(lost) when lost >= @max_lost,
    do: Mix.raise("more than #{@max_lost} round trips lost")

  defp lost!(lost), do: lost + 1

  @doc "A round trip on a Tachyon.UDP socket (the echo arrives as a message)."
  def udp_round_trip(sock, dest, payload) do
    fn ->
      :ok = Tachyon.UDP.send(sock, dest, payload)

      receive do
        {:tachyon_udp, ^sock, _from, _data} -> :ok
      after
        @rt_timeout -> :lost
      end
    end
  end

  @doc "A round trip on a connected poll-mode Tachyon.UDP socket (`send/2`, `recv/2`)."
  def udp_poll_round_trip(sock, payload) do
    fn ->
      :ok = Tachyon.UDP.send(sock, payload)

      case Tachyon.UDP.recv(sock, @rt_timeout) do
        {:ok, _} -> :ok
        {:error, :timeout} -> :lost
      end
    end
  end

  @doc "A round trip on a connected active gen_udp socket."
  def gen_udp_round_trip(sock, payload) do
    fn ->
      :ok = :gen_udp.send(sock, payload)

      receive do
        {:udp, ^sock, _ip, _port, _data} -> :ok
      after
        @rt_timeout -> :lost
      end
    end
  end

  @doc "A round trip on a passive gen_udp socket (`:gen_udp.recv/3`)."
  def passive_round_trip(sock, port, payload) do
    fn ->
      :ok = :gen_udp.send(sock, @loopback, port, payload)

      case :gen_udp.recv(sock, 0, @rt_timeout) do
        {:ok, {_ip, _port, _data}} -> :ok
        {:error, :timeout} -> :lost
      end
    end
  end

  @doc "A round trip on a :socket (sendto/recvfrom)."
  def socket_round_trip(sock, dest, payload) do
    fn ->
      :ok = :socket.sendto(sock, payload, dest)

      case :socket.recvfrom(sock, 0, [], @rt_timeout) do
        {:ok, {_src, _data}} -> :ok
        {:error, :timeout} -> :lost
      end
    end
  end

  # -- BEAM echo servers -------------------------------------------------------

  @doc "An echo process on Tachyon.UDP; returns `{pid, address}`."
  def tachyon_udp_echo(cfg) do
    spawn_echo(
      "Tachyon.UDP",
      fn ->
        {:ok, s} = Tachyon.UDP.open(0, ip: :loopback, wait: cfg.udp_wait, core: cfg.udp_core)
        {:ok, addr} = Tachyon.UDP.sockname(s)
        {s, addr}
      end,
      &tachyon_udp_echo_loop/1
    )
  end

  defp tachyon_udp_echo_loop(s) do
    receive do
      {:tachyon_udp, ^s, from, data} ->
        Tachyon.UDP.send(s, from, data)
        tachyon_udp_echo_loop(s)

      :stop ->
        Tachyon.UDP.close(s)
    end
  end

  @doc "An echo process polling a poll-mode Tachyon.UDP socket; returns `{pid, address}`."
  def tachyon_udp_poll_echo(cfg) do
    spawn_echo(
      "Tachyon.UDP (poll)",
      fn ->
        {:ok, s} = Tachyon.UDP.open(0, ip: :loopback, delivery: :poll, wait: cfg.udp_wait)
        {:ok, addr} = Tachyon.UDP.sockname(s)
        {s, addr}
      end,
      &tachyon_udp_poll_echo_loop/1
    )
  end

  defp tachyon_udp_poll_echo_loop(s) do
    case Tachyon.UDP.recv_many(s, 64, 200) do
      {:ok, list} ->
        for {from, data} <- list, do: Tachyon.UDP.send(s, from, data)
        tachyon_udp_poll_echo_loop(s)

      {:error, :timeout} ->
        stop_or(s, &Tachyon.UDP.close/1, &tachyon_udp_poll_echo_loop/1)
    end
  end

  @doc "A gen_udp echo process, `:active` (active: true) or `:passive` (recv/3); returns `{pid, port}`."
  def gen_udp_echo(mode \\ :active) do
    spawn_echo(
      "gen_udp",
      fn ->
        {:ok, s} = :gen_udp.open(0, [:binary, ip: @loopback, active: mode == :active])
        {:ok, port} = :inet.port(s)
        {s, port}
      end,
      if(mode == :active, do: &gen_udp_echo_loop/1, else: &gen_udp_passive_echo_loop/1)
    )
  end

  defp gen_udp_echo_loop(s) do
    receive do
      {:udp, ^s, ip, port, data} ->
        :gen_udp.send(s, ip, port, data)
        gen_udp_echo_loop(s)

      :stop ->
        :gen_udp.close(s)
    end
  end

  defp gen_udp_passive_echo_loop(s) do
    case :gen_udp.recv(s, 0, 200) do
      {:ok, {ip, port, data}} ->
        :gen_udp.send(s, ip, port, data)
        gen_udp_passive_echo_loop(s)

      {:error, :timeout} ->
        stop_or(s, &:gen_udp.close/1, &gen_udp_passive_echo_loop/1)
    end
  end

  @doc "A :socket echo process; returns `{pid, port}`."
  def socket_echo do
    spawn_echo(
      ":socket",
      fn ->
        {:ok, s} = :socket.open(:inet, :dgram, :udp)
        :ok = :socket.bind(s, %{family: :inet, addr: @loopback, port: 0})
        {:ok, %{port: port}} = :socket.sockname(s)
        {s, port}
      end,
      &socket_echo_loop/1
    )
  end

  defp socket_echo_loop(s) do
    case :socket.recvfrom(s, 0, [], 200) do
      {:ok, {src, data}} ->
        :socket.sendto(s, data, src)
        socket_echo_loop(s)

      {:error, :timeout} ->
        stop_or(s, &:socket.close/1, &socket_echo_loop/1)
    end
  end

  # A blocking echo loop that timed out: closes on a pending :stop, else
  # goes on.
  defp stop_or(s, close, loop) do
    receive do
      :stop -> close.(s)
    after
      0 -> loop.(s)
    end
  end

  # Spawns a linked echo process: `open.()` returns `{socket, address}`, the
  # address is sent back, then `loop.(socket)` echoes until `:stop`.
  defp spawn_echo(what, open, loop) do
    parent = self()

    pid =
      spawn_link(fn ->
        {s, addr} = open.()
        send(parent, {:echo_addr, self(), addr})
        loop.(s)
      end)

    receive do
      {:echo_addr, ^pid, addr} -> {pid, addr}
    after
      5000 -> Mix.raise("#{what} echo did not start")
    end
  end

  @doc "Stops an echo process (killed if it does not stop within 5 s)."
  def stop_proc(pid) do
    ref = Process.monitor(pid)
    send(pid, :stop)

    receive do
      {:DOWN, ^ref, _, _, _} -> :ok
    after
      5000 -> Process.exit(pid, :kill)
    end
  end
end

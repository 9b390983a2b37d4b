defmodule Tachyon.Echo do
  @moduledoc """
  A UDP echo (pong) server whose thread sends every datagram back to its
  sender without touching the BEAM.

  The thread polls a non-blocking socket, takes every waiting datagram with
  one `recvmmsg` and answers them with one `sendmmsg`; with `wait: :busy_spin`
  and a core of its own (`core:`) it answers in a few microseconds. It is the
  pong side of the round-trip benchmark (`mix tachyon.bench echo`), a test
  peer for UDP clients, and the loop later parts of Tachyon stand on.

  ## Starting

  Under your own supervisor:

      children = [
        {Tachyon.Echo, name: MyApp.Echo, port: 5555, core: 1, wait: :busy_spin}
      ]

  or directly:

      {:ok, echo} = Tachyon.Echo.start_link(port: 0)
      {ip, port} = Tachyon.Echo.address(echo)
      {:ok, sock} = :gen_udp.open(0, [:binary, active: false])
      :ok = :gen_udp.send(sock, ip, port, "ping")
      {:ok, {_, _, "ping"}} = :gen_udp.recv(sock, 0, 1000)

  The socket is bound before `start_link/1` returns, so binding errors come
  back from it (`{:error, :eaddrinuse}`) without an exit signal. Stopping the
  server (`stop/1`, or its supervisor) stops and joins the thread: the port is
  free when the call returns.

  ## Options

    * `:port` - UDP port, `0` (default) for one the kernel picks (see `address/1`).
    * `:ip` - address to bind: a tuple, `:loopback` (default), `:any` or a
      string such as `"::1"`.
    * `:wait` - what the thread does when no datagram is waiting:
      `:busy_spin` (lowest latency; burns its core), `:yield` (polls and
      yields the core between polls, forever), `:backoff` (polls and yields
      for a few hundred microseconds after each datagram, then blocks in
      `poll` until the next one), or `:block` (blocks in `poll` at once; no
      CPU while idle). Default: `:busy_spin` on machines with more than two
      cores, `:backoff` otherwise.
    * `:core` - pin the thread to this core (default `nil`: not pinned).
    * `:batch` - datagrams per `recvmmsg`/`sendmmsg`, 1..1024 (default 32).
    * `:max_datagram` - largest datagram echoed, 1..65507 (default 65507).
      A larger datagram is not echoed; it is counted in `:truncated`.
    * `:recbuf`, `:sndbuf` - `SO_RCVBUF` / `SO_SNDBUF` in bytes (default:
      the system's).
    * `:reuseaddr` - set `SO_REUSEADDR` (default `false`).
    * `:name` - register the process under this name.
    * `:stats_interval` - milliseconds between `[:tachyon, :echo, :stats]`
      telemetry events (default 1000; `nil` for none).

  Invalid options raise `ArgumentError`.

  ## Counters

  `stats/1` returns the thread's counters: `:packets_in`, `:bytes_in`,
  `:packets_out`, `:bytes_out`, `:batches` (receive calls that returned
  datagrams), `:truncated`, `:recv_errors`, `:send_errors` (an echo the
  kernel refused, e.g. to an unreachable sender), `:kernel_drops` (datagrams
  the kernel dropped on a full receive buffer) and `:errors` (the sum of
  truncated, receive and send errors). Garbage is echoed like anything else;
  nothing a peer sends stops the loop.

  ## Telemetry

  See `Tachyon.Telemetry` ("Echo and UDP events"): `[:tachyon, :echo, :start]`,
  `[:tachyon, :echo, :stats]` and `[:tachyon, :echo, :stop]`.
  """
  use GenServer

  alias Tachyon.Native
  alias Tachyon.UDP.Options

  @typedoc "A running echo server: its pid or registered name."
  @type server :: GenServer.server()

  @typedoc "Where the thread runs and how it waits, as started."
  @type info :: %{
          address: {:inet.ip_address(), :inet.port_number()},
          core: non_neg_integer() | nil,
          pinned: boolean(),
          wait: :busy_spin | :yield | :backoff | :block,
          batch: pos_integer(),
          max_datagram: pos_integer(),
          recbuf: non_neg_integer(),
          sndbuf: non_neg_integer()
        }

  @type stats :: %{
          packets_in: non_neg_integer(),
          bytes_in: non_neg_integer(),
          packets_out: non_neg_integer(),
          bytes_out: non_neg_integer(),
          batches: non_neg_integer(),
          truncated: non_neg_integer(),
          recv_errors: non_neg_integer(),
          send_errors: non_neg_integer(),
          kernel_drops: non_neg_integer(),
          errors: non_neg_integer()
        }

  @defaults [
    port: 0,
    ip: :loopback,
    wait: nil,
    core: nil,
    batch: 32,
    max_datagram: 65_507,
    recbuf: nil,
    sndbuf: nil,
    reuseaddr: false,
    name: nil,
    stats_interval: 1000
  ]

  @doc """
  Starts the server, linked to the caller. See the moduledoc for the options.

  Returns `{:error, reason}` (a POSIX atom such as `:eaddrinuse` or
  `:eaddrnotavail`) if the socket cannot be bound.

  ## Example

      {:ok, echo} = Tachyon.Echo.start_link(port: 0, wait: :block)
      {{127, 0, 0, 1}, port} = Tachyon.Echo.address(echo)
  """
  @spec start_link(keyword()) :: GenServer.on_start()
  def start_link(opts \\ []) do
    opts = Options.validate!(opts, @defaults, "Tachyon.Echo")
    opts = %{opts | wait: opts.wait || Options.default_wait()}
    {name, interval} = {opts.name, opts.stats_interval}
    nif_opts = Map.drop(opts, [:name, :stats_interval])
    t0 = System.monotonic_time()

    # Bind in the caller: a port in use is an {:error, _} return, not an exit.
    case Native.echo_start(nif_opts) do
      {:ok, ref, info} ->
        info =
          Map.merge(info, %{
            wait: Options.public_wait(info.wait),
            batch: opts.batch,
            max_datagram: opts.max_datagram
          })

        gen_opts = if name, do: [name: name], else: []

        case GenServer.start_link(__MODULE__, {ref, info, name, interval, t0}, gen_opts) do
          {:ok, _pid} = ok ->
            ok

          other ->
            Native.echo_stop(ref)
            other
        end

      {:error, _reason} = error ->
        error
    end
  end

  @doc """
  The child specification: `{Tachyon.Echo, opts}` in a supervisor. The child
  id is `{Tachyon.Echo, name}` when `:name` is given.

  ## Example

      Supervisor.start_link([{Tachyon.Echo, name: :pong, port: 0}], strategy: :one_for_one)
  """
  @spec child_spec(keyword()) :: Supervisor.child_spec()
  def child_spec(opts) do
    id = if opts[:name], do: {__MODULE__, opts[:name]}, else: __MODULE__
    %{id: id, start: {__MODULE__, :start_link, [opts]}, type: :worker, shutdown: 5000}
  end

  @doc """
  Stops the server. The thread is joined and the port is free on return.

  ## Example

      {:ok, echo} = Tachyon.Echo.start_link()
      :ok = Tachyon.Echo.stop(echo)
  """
  @spec stop(server(), timeout()) :: :ok
  def stop(server, timeout \\ 5000), do: GenServer.stop(server, :normal, timeout)

  @doc """
  The bound address `{ip, port}` (the actual port when `port: 0` was given).

  ## Example

      {:ok, echo} = Tachyon.Echo.start_link(port: 0)
      {{127, 0, 0, 1}, port} = Tachyon.Echo.address(echo)
      true = port > 0
  """
  @spec address(server()) :: {:inet.ip_address(), :inet.port_number()}
  def address(server), do: info(server).address

  @doc """
  The bound port.

  ## Example

      {:ok, echo} = Tachyon.Echo.start_link(port: 0)
      port = Tachyon.Echo.port(echo)
  """
  @spec port(server()) :: :inet.port_number()
  def port(server), do: address(server) |> elem(1)

  @doc """
  Where the thread runs and how it waits: `:address`, `:core`, `:pinned`
  (whether pinning succeeded), `:wait`, `:batch`, `:max_datagram` and the
  effective `:recbuf`/`:sndbuf`.

  ## Example

      {:ok, echo} = Tachyon.Echo.start_link(wait: :block)
      %{wait: :block, core: nil} = Tachyon.Echo.info(echo)
  """
  @spec info(server()) :: info()
  def info(server), do: GenServer.call(server, :info)

  @doc """
  The thread's counters (see the moduledoc).

  ## Example

      {:ok, echo} = Tachyon.Echo.start_link()
      %{packets_in: 0, errors: 0} = Tachyon.Echo.stats(echo)
  """
  @spec stats(server()) :: stats()
  def stats(server), do: GenServer.call(server, :stats)

  # -- GenServer ---------------------------------------------------------------

  @impl true
  def init({ref, info, name, interval, t0}) do
    # terminate/2 must run on a supervisor's shutdown, to join the thread.
    Process.flag(:trap_exit, true)

    state = %{ref: ref, info: info, name: name, interval: interval}

    Tachyon.Telemetry.execute(
      [:tachyon, :echo, :start],
      %{duration: System.monotonic_time() - t0},
      meta(state)
    )

    schedule(interval)
    {:ok, state}
  end

  @impl true
  def handle_call(:info, _from, state), do: {:reply, state.info, state}
  def handle_call(:stats, _from, state), do: {:reply, Native.echo_stats(state.ref), state}

  @impl true
  def handle_info(:stats, state) do
    Tachyon.Telemetry.execute(
      [:tachyon, :echo, :stats],
      Native.echo_stats(state.ref),
      meta(state)
    )

    schedule(state.interval)
    {:noreply, state}
  end

  # Exits of the parent are handled by GenServer itself (terminate/2 runs);
  # a crash of another linked process stops us as it would without trapping.
  def handle_info({:EXIT, _pid, :normal}, state), do: {:noreply, state}
  def handle_info({:EXIT, _pid, reason}, state), do: {:stop, reason, state}
  def handle_info(_other, state), do: {:noreply, state}

  @impl true
  def terminate(_reason, state) do
    Native.echo_stop(state.ref)
    Tachyon.Telemetry.execute([:tachyon, :echo, :stop], Native.echo_stats(state.ref), meta(state))
  end

  defp meta(state) do
    %{
      name: state.name,
      address: state.info.address,
      core: state.info.core,
      pinned: state.info.pinned,
      wait: state.info.wait
    }
  end

  defp schedule(nil), do: :ok
  defp schedule(ms), do: Process.send_after(self(), :stats, ms)
end

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
  server (`close/1`, or its supervisor) stops and joins the thread: the port is
  free when the call returns.

  ## Options

  Defaults "from Rust" are the Rust `EchoConfig::new`; `defaults/0` returns
  them.

  #{Tachyon.Options.docs(Tachyon.UDP.Options.echo_schema())}

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
  alias Tachyon.{Named, Native}
  alias Tachyon.UDP.Options

  @typedoc "A running echo server: its pid or registered name."
  @type server :: GenServer.server()

  @typedoc "Where the thread runs and how it waits, as started."
  @type info :: %{
          address: {:inet.ip_address(), :inet.port_number()},
          core: non_neg_integer() | nil,
          pinned: boolean(),
          wait: :busy_spin | :yield | :backoff | :park,
          batch: pos_integer(),
          max_datagram_size: pos_integer(),
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

  @doc """
  Starts the server, linked to the caller. See the moduledoc for the options.

  Returns `{:error, reason}` (a POSIX atom such as `:eaddrinuse` or
  `:eaddrnotavail`) if the socket cannot be bound.

  ## Example

      {:ok, echo} = Tachyon.Echo.start_link(port: 0, wait: :park)
      {{127, 0, 0, 1}, port} = Tachyon.Echo.address(echo)
  """
  @spec start_link(keyword()) :: GenServer.on_start()
  def start_link(opts \\ []) do
    opts = Options.validate!(opts, Options.echo_schema(), "Tachyon.Echo")
    nif_opts = opts |> Map.drop([:name, :stats_interval_ms]) |> Options.to_nif()

    # Bind in the caller: a port in use is an {:error, _} return, not an exit.
    Tachyon.PartServer.start_link(Tachyon.Echo.Server, {nif_opts, opts},
      module: __MODULE__,
      part: :echo,
      name: opts.name,
      interval: opts.stats_interval_ms,
      open: :in_caller,
      stop_event: true
    )
  end

  @doc """
  The child specification: `{Tachyon.Echo, opts}` in a supervisor. The child
  id is `{Tachyon.Echo, name}`; `:transient`, so `close/1` is final.

  ## Example

      Supervisor.start_link([{Tachyon.Echo, name: :pong, port: 0}], strategy: :one_for_one)
  """
  @spec child_spec(keyword()) :: Supervisor.child_spec()
  def child_spec(opts), do: Named.child_spec(__MODULE__, opts, shutdown: 5000)

  @doc """
  The defaults of the options on this machine (from the Rust
  `EchoConfig::new`, the port, address, name and stats interval aside).

  ## Example

      %{batch: 32, max_datagram_size: 65_507} = Tachyon.Echo.defaults()
  """
  @spec defaults() :: map()
  def defaults, do: Options.validate!([], Options.echo_schema(), "Tachyon.Echo")

  @doc """
  Closes the server for good (under a supervisor it is not restarted): the
  thread is joined and the port is free on return. `{:error, :noproc}` if
  no server runs under that name or pid.

  ## Example

      {:ok, echo} = Tachyon.Echo.start_link()
      :ok = Tachyon.Echo.close(echo)
      {:error, :noproc} = Tachyon.Echo.close(echo)
  """
  @spec close(server()) :: :ok | {:error, :noproc}
  def close(server) do
    case Named.close(server) do
      {:error, :noproc} = error -> error
      _ -> :ok
    end
  end

  @doc """
  Deprecated: use `close/1` (one lifecycle verb pair, `open`/`start_link`
  and `close`, for every part). Unlike the old `stop/2`, an unknown server
  is `{:error, :noproc}`, not an exit.

  ## Example

      {:ok, echo} = Tachyon.Echo.start_link()
      :ok = Tachyon.Echo.stop(echo)
  """
  @doc deprecated: "Use Tachyon.Echo.close/1"
  @spec stop(server(), timeout()) :: :ok | {:error, :noproc}
  def stop(server, _timeout \\ 5000) do
    Tachyon.Options.deprecated("Tachyon.Echo", "stop/2", "close/1")
    close(server)
  end

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
  (whether pinning succeeded), `:wait`, `:batch`, `:max_datagram_size` and the
  effective `:recbuf`/`:sndbuf`. A registered name is read without a call
  to the process; it raises `ArgumentError` if no server runs under it.

  ## Example

      {:ok, echo} = Tachyon.Echo.start_link(wait: :park)
      %{wait: :park, core: nil} = Tachyon.Echo.info(echo)
  """
  @spec info(server()) :: info()
  def info(name) when is_atom(name) do
    case Named.whereis(__MODULE__, name) do
      {:ok, %{info: info}} ->
        info

      {:error, :noproc} ->
        raise ArgumentError, "no Tachyon.Echo named #{inspect(name)} is running"
    end
  end

  def info(server), do: GenServer.call(server, :info)

  @doc """
  The thread's counters (see the moduledoc): `{:ok, stats}`, or
  `{:error, :noproc}` if no server runs under that name (a registered name
  is read without a call to the process).

  ## Example

      {:ok, echo} = Tachyon.Echo.start_link()
      {:ok, %{packets_in: 0, errors: 0}} = Tachyon.Echo.stats(echo)
  """
  @spec stats(server()) :: {:ok, stats()} | {:error, :noproc}
  def stats(name) when is_atom(name) do
    with {:ok, %{ref: ref}} <- Named.whereis(__MODULE__, name), do: {:ok, Native.echo_stats(ref)}
  end

  def stats(server) do
    GenServer.call(server, :stats)
  catch
    :exit, {:noproc, _} -> {:error, :noproc}
  end
end

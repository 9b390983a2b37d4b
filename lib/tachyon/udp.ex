defmodule Tachyon.UDP do
  @moduledoc """
  A UDP endpoint for BEAM processes: a sibling of gen_udp whose datagrams are
  read by a Rust thread and sent straight to the owner process, or (poll
  mode) read by the process itself on its own scheduler.

      {:ok, sock} = Tachyon.UDP.open(0)
      {:ok, {ip, port}} = Tachyon.UDP.sockname(sock)
      :ok = Tachyon.UDP.send(sock, {ip, port}, "hello")

      receive do
        {:tachyon_udp, ^sock, {_ip, _port}, data} -> data
      after
        1000 -> :timeout
      end
      #=> "hello"

  A Rust receive thread polls the non-blocking socket, takes every waiting
  datagram in one `recvmmsg` and sends each to the owner process as

      {:tachyon_udp, socket, {ip, port}, data}

  straight from the thread (no port, no driver queue, no intermediate
  process). `send/3` is a plain NIF call that sends from the calling process:
  any process may send on a socket, not only its owner.

  ## Performance

  Measured on a 2-core KVM guest (`docs/BENCHMARK_HISTORY.md`, "Poll mode", `mix
  tachyon.bench echo --messages 1000000 --warmup 500000`): a round trip from an
  Elixir process polling a poll-mode socket to `Tachyon.Echo` and back took
  4.36 us at p50, 1.22x the floor of two busy-polling Rust threads (3.57 us)
  and 1.8x faster than gen_udp's (7.89 us), with its scheduler busy while it
  polls. In the thread mode the same round trip took 5.82 us: the hand-over
  from the receive thread to the process costs about 1.5 us. An echo server
  process polling a poll-mode socket answered in 4.08 us, 5.5x faster than
  one on gen_udp. A burst of 100,000 datagrams into a thread-mode socket
  whose owner is not running reaches the mailbox whole where gen_udp's port
  lost 8% of it.

  ## How it differs from gen_udp

    * **Two receive modes instead of active/passive.** In the default
      thread mode every datagram becomes a message to the owner, as with
      `active: true`; flow control is `:max_queue` plus `ack/2` (below), not
      `{:active, n}`. In the poll mode (`delivery: :poll`, see "Poll mode") the
      process reads with `recv/2` / `recv_many/3`, as with `active: false`,
      but on its own scheduler.
    * **Backpressure.** A NIF thread cannot see the owner's mailbox, so by
      default (`max_queue: :infinity`) nothing bounds it: if the owner is
      slower than the senders, its mailbox grows (as with gen_udp's
      `active: true`), and the kernel only drops once the receive thread
      itself cannot keep up. With `max_queue: n`, the receive thread counts
      the datagrams it delivered and the owner acknowledges the ones it
      processed with `ack/2`; while `n` are delivered and not acknowledged,
      new datagrams are dropped (tail drop: the newest go) and counted in
      the `:dropped` stat. The kernel buffer keeps draining, so nothing stale
      piles up anywhere, and the owner's mailbox never holds more than `n`
      of this socket's messages. `docs/BENCHMARK_HISTORY.md` has the measurements
      (`tachyon.udp.flood` in `mix tachyon.bench echo`).
    * **Oversized datagrams** (over `:max_datagram_size`) are dropped and counted
      in `:truncated`, never delivered cut short.
    * **Messages carry the socket** as returned by `open/2` (a reference), so
      match on it with `^sock`.
    * **Closing** (`close/1`) stops and joins the receive thread: the port is
      free when it returns. The owner's death closes the socket too, as
      with gen_udp. A socket is not garbage-collected while open: it lives
      until it is closed or its owner exits.
    * **Errors** are `{:error, posix}` atoms from the kernel (`:emsgsize`,
      `:eaddrinuse`, `:econnrefused`, `:eagain` when the send buffer is
      full: sends never block), or `{:error, :closed}`.
    * Options are a keyword list validated up front (no gen_udp option
      list); bad options and bad arguments raise `ArgumentError`.

  ## Poll mode

  With `delivery: :poll` there is no receive thread: the owner (or any process)
  reads the socket itself, on its own scheduler, with `recv/2` or
  `recv_many/3`, the way a CoralReactor loop reads its socket on the thread
  that handles the data. Nothing has to wake a thread and then a sleeping
  scheduler between the datagram and the code that handles it.

      {:ok, sock} = Tachyon.UDP.open(0, ip: :loopback, delivery: :poll)
      {:ok, addr} = Tachyon.UDP.sockname(sock)
      :ok = Tachyon.UDP.send(sock, addr, "ping")
      {:ok, {_from, "ping"}} = Tachyon.UDP.recv(sock, 1000)

  A `recv` takes every datagram waiting (up to `max`) with one `recvmmsg`
  and returns them as one list (one binary for the batch, one copy). When
  nothing is waiting it polls the socket without blocking, in NIF calls of
  at most 100 us that report the time they used to the VM, so the process is
  scheduled out on time and the other processes on its scheduler keep
  running; how long it polls is `:wait` and `:spin_us`. Then it sleeps in
  `receive` until the VM's poll set says the socket is readable (no CPU, as
  gen_udp's passive mode). A timeout is honoured to the millisecond;
  `close/1` from another process wakes a waiting `recv`, which returns
  `{:error, :closed}`.

  Which mode: `:poll` for the lowest latency from the wire to a process
  (request/response, a bus member), at the cost of the CPU its scheduler
  spends polling (`:spin_us` per `recv` with `:backoff`, all of it with
  `:busy_spin`); `:messages` to have datagrams pushed to a process that does
  other work and receives them as messages, with `:max_queue` backpressure
  (no `:max_queue` in poll mode: the reader pulls what it can take).
  `docs/BENCHMARKS.md` has both measured (`mix tachyon.bench echo`).

  ## Options

  Defaults "from Rust" are the Rust `EndpointConfig::new`; `defaults/0`
  returns them.

  #{Tachyon.Options.docs(Tachyon.UDP.Options.udp_schema())}

  ## Stats

  `stats/1` returns counters: `:received`, `:received_bytes`, `:delivered`
  (messages sent to the owner), `:acked`, `:in_flight` (`delivered - acked`),
  `:dropped` (over `:max_queue`), `:undelivered` (the owner was gone),
  `:truncated`, `:recv_errors`, `:kernel_drops` (dropped by the kernel on a
  full receive buffer), `:batches`, `:sent`, `:sent_bytes`, `:send_errors`.

  ## Telemetry

  `[:tachyon, :udp, :open]` and `[:tachyon, :udp, :close]`; see
  `Tachyon.Telemetry` ("Echo and UDP events").
  """

  alias Tachyon.Native
  alias Tachyon.UDP.Options

  @typedoc "An open socket (a reference to the NIF resource)."
  @opaque socket :: reference()

  @type address :: {:inet.ip_address(), :inet.port_number()}

  @type reason :: :closed | :not_owner | :badarg | atom()

  @typedoc "Every counter of `stats/1`."
  @type stats :: %{
          received: non_neg_integer(),
          received_bytes: non_neg_integer(),
          delivered: non_neg_integer(),
          acked: non_neg_integer(),
          in_flight: non_neg_integer(),
          dropped: non_neg_integer(),
          undelivered: non_neg_integer(),
          truncated: non_neg_integer(),
          recv_errors: non_neg_integer(),
          kernel_drops: non_neg_integer(),
          batches: non_neg_integer(),
          sent: non_neg_integer(),
          sent_bytes: non_neg_integer(),
          send_errors: non_neg_integer()
        }

  @doc """
  Opens a socket on `port` (`0`: the kernel picks one; see `sockname/1`)
  and starts its receive thread. See the moduledoc for the options.

  Returns `{:error, posix}` if the socket cannot be bound (`:eaddrinuse`,
  `:eaddrnotavail`, `:eacces`), or `{:error, :badarg}` if the owner is not
  alive.

  ## Example

      {:ok, sock} = Tachyon.UDP.open(0, ip: :loopback, max_queue: 10_000)
  """
  @spec open(:inet.port_number(), keyword()) :: {:ok, socket()} | {:error, reason()}
  def open(port, opts \\ []) do
    opts =
      Options.validate!(
        [{:port, port} | opts],
        [{:port, Options.port()} | Options.udp_schema()],
        "Tachyon.UDP"
      )

    if opts.delivery == :poll and opts.max_queue not in [nil, :infinity] do
      raise ArgumentError,
            "Tachyon.UDP: :max_queue is for delivery: :messages; a poll-mode reader pulls " <>
              "what it can take (got: max_queue: #{inspect(opts.max_queue)}, delivery: :poll)"
    end

    owner = opts.owner || self()
    nif_opts = opts |> Map.delete(:owner) |> Options.to_nif()
    t0 = System.monotonic_time()

    case Native.udp_open(nif_opts, owner) do
      {:ok, sock, info} ->
        Tachyon.Telemetry.execute(
          [:tachyon, :udp, :open],
          %{duration: System.monotonic_time() - t0},
          %{
            socket: sock,
            address: info.address,
            owner: owner,
            core: info.core,
            pinned: info.pinned,
            wait: info.wait,
            delivery: Options.old_mode(info.mode),
            max_queue: opts.max_queue || :infinity
          }
        )

        {:ok, sock}

      {:error, _} = error ->
        Tachyon.Error.report(error, __MODULE__, target: {opts.ip, opts.port}, action: :bind)
    end
  end

  @doc """
  Like `open/2` but raises `Tachyon.Error` on error.

  ## Example

      sock = Tachyon.UDP.open!(0)
  """
  @spec open!(:inet.port_number(), keyword()) :: socket()
  def open!(port, opts \\ []) do
    case open(port, opts) do
      {:ok, sock} ->
        sock

      {:error, reason} ->
        raise Tachyon.Error, reason: reason, part: __MODULE__, target: port, action: :bind
    end
  end

  @doc """
  The defaults of the options (from the Rust `EndpointConfig::new`, the
  port and address aside).

  ## Example

      %{wait: :backoff, batch: 16} = Tachyon.UDP.defaults()
  """
  @spec defaults() :: map()
  def defaults, do: Map.new(Tachyon.Options.validate!([], Options.udp_schema(), "Tachyon.UDP"))

  @doc """
  Sends one datagram (a binary or iodata, at most 65,507 bytes over IPv4)
  to `{ip, port}` from the calling process. Never blocks: a full send buffer
  is `{:error, :eagain}`.

  ## Example

      {:ok, sock} = Tachyon.UDP.open(0)
      :ok = Tachyon.UDP.send(sock, {{127, 0, 0, 1}, 9}, ["hel", "lo"])
  """
  @spec send(socket(), address(), iodata()) :: :ok | {:error, reason()}
  def send(sock, {ip, port}, data) when is_tuple(ip) and is_integer(port) do
    Native.udp_send(sock, ip, port, data)
  end

  def send(_sock, dest, _data) do
    raise ArgumentError, "the destination must be {ip_tuple, port}, got: #{inspect(dest)}"
  end

  @doc """
  Sends one datagram to the peer of `connect/2` (see `send/3`);
  `{:error, :edestaddrreq}` if the socket is not connected.

  ## Example

      {:ok, sock} = Tachyon.UDP.open(0, ip: :loopback)
      :ok = Tachyon.UDP.connect(sock, {{127, 0, 0, 1}, 9})
      :ok = Tachyon.UDP.send(sock, "hello")
  """
  @spec send(socket(), iodata()) :: :ok | {:error, reason()}
  def send(sock, data), do: Native.udp_send_connected(sock, data)

  @doc """
  Connects the socket to one peer (`connect(2)`, as `:gen_udp.connect/3`):
  `send/2` goes there without naming it, and the kernel drops datagrams
  from anyone else. For a client that talks to one server: the kernel
  keeps the route instead of looking it up per datagram, which saves
  about 0.5-1 us per send on loopback (docs/BENCHMARK_HISTORY.md, "The
  poll path"). Connecting again changes the peer.

  ## Example

      {:ok, server} = Tachyon.UDP.open(0, ip: :loopback, delivery: :poll)
      {:ok, addr} = Tachyon.UDP.sockname(server)
      {:ok, client} = Tachyon.UDP.open(0, ip: :loopback)
      :ok = Tachyon.UDP.connect(client, addr)
      :ok = Tachyon.UDP.send(client, "ping")
      {:ok, {_from, "ping"}} = Tachyon.UDP.recv(server, 1000)
  """
  @spec connect(socket(), address()) :: :ok | {:error, reason()}
  def connect(sock, {ip, port}) when is_tuple(ip) and is_integer(port) do
    Native.udp_connect(sock, ip, port)
  end

  def connect(_sock, dest) do
    raise ArgumentError, "the peer must be {ip_tuple, port}, got: #{inspect(dest)}"
  end

  @doc """
  Makes `pid` the owner: it receives the datagrams from now on, and its exit
  closes the socket. Only the current owner may call it
  (`{:error, :not_owner}`); `{:error, :badarg}` if `pid` is not alive.

  ## Example

      {:ok, sock} = Tachyon.UDP.open(0)
      pid = spawn(fn -> Process.sleep(:infinity) end)
      :ok = Tachyon.UDP.controlling_process(sock, pid)
  """
  @spec controlling_process(socket(), pid()) :: :ok | {:error, reason()}
  def controlling_process(sock, pid) when is_pid(pid) do
    Native.udp_controlling_process(sock, pid)
  end

  @doc """
  Closes the socket: the receive thread is stopped and joined and the port
  is free on return. Datagrams already delivered stay in the owner's
  mailbox. Idempotent.

  ## Example

      {:ok, sock} = Tachyon.UDP.open(0)
      :ok = Tachyon.UDP.close(sock)
      {:error, :closed} = Tachyon.UDP.send(sock, {{127, 0, 0, 1}, 9}, "x")
  """
  @spec close(socket()) :: :ok
  def close(sock) do
    stats =
      case Native.udp_stats(sock) do
        {:ok, stats} -> stats
        {:error, :closed} -> nil
      end

    :ok = Native.udp_close(sock)

    if stats do
      Tachyon.Telemetry.execute([:tachyon, :udp, :close], stats, %{socket: sock})
    end

    :ok
  end

  @doc """
  The bound address.

  ## Example

      {:ok, sock} = Tachyon.UDP.open(0, ip: :loopback)
      {:ok, {{127, 0, 0, 1}, port}} = Tachyon.UDP.sockname(sock)
  """
  @spec sockname(socket()) :: {:ok, address()} | {:error, :closed}
  def sockname(sock), do: Native.udp_sockname(sock)

  @doc """
  The bound port.

  ## Example

      {:ok, sock} = Tachyon.UDP.open(0)
      {:ok, port} = Tachyon.UDP.port(sock)
  """
  @spec port(socket()) :: {:ok, :inet.port_number()} | {:error, :closed}
  def port(sock) do
    with {:ok, {_ip, port}} <- sockname(sock), do: {:ok, port}
  end

  @doc """
  The owner process, or `nil` once the socket is closed.

  ## Example

      {:ok, sock} = Tachyon.UDP.open(0)
      true = Tachyon.UDP.owner(sock) == self()
  """
  @spec owner(socket()) :: pid() | nil
  def owner(sock), do: Native.udp_owner(sock)

  @doc """
  The socket's counters (see the moduledoc).

  ## Example

      {:ok, sock} = Tachyon.UDP.open(0)
      {:ok, %{received: 0, dropped: 0}} = Tachyon.UDP.stats(sock)
  """
  @spec stats(socket()) :: {:ok, stats()} | {:error, :closed}
  def stats(sock), do: Native.udp_stats(sock)

  @doc """
  Poll mode: receives one datagram, waiting at most `timeout` milliseconds
  (or `:infinity`). Returns `{:ok, {from, data}}`, `{:error, :timeout}`,
  `{:error, :closed}` (closed before or during the call), or
  `{:error, :not_poll}` for a thread-mode socket. See "Poll mode".

  ## Example

      {:ok, sock} = Tachyon.UDP.open(0, ip: :loopback, delivery: :poll)
      {:error, :timeout} = Tachyon.UDP.recv(sock, 0)
  """
  @spec recv(socket(), timeout()) ::
          {:ok, {address(), binary()}} | {:error, :timeout | reason()}
  def recv(sock, timeout \\ :infinity) do
    case recv_many(sock, 1, timeout) do
      {:ok, [one]} -> {:ok, one}
      error -> error
    end
  end

  @doc """
  Poll mode: receives every datagram waiting, at most `max` (1..1024, and
  at most the socket's `:batch`), as a list in arrival order, waiting at
  most `timeout` milliseconds for the first one. Returns `{:ok, list}`
  (never empty) or the errors of `recv/2`.

  ## Example

      {:ok, sock} = Tachyon.UDP.open(0, ip: :loopback, delivery: :poll)
      {:ok, addr} = Tachyon.UDP.sockname(sock)
      :ok = Tachyon.UDP.send(sock, addr, "a")
      :ok = Tachyon.UDP.send(sock, addr, "b")
      Process.sleep(10)
      {:ok, [{_, "a"}, {_, "b"}]} = Tachyon.UDP.recv_many(sock, 16, 1000)
  """
  @spec recv_many(socket(), pos_integer(), timeout()) ::
          {:ok, [{address(), binary()}]} | {:error, :timeout | reason()}
  def recv_many(sock, max, timeout \\ :infinity)

  def recv_many(sock, max, timeout) when is_integer(max) and max >= 1 and max <= 1024 do
    Tachyon.Poll.recv(
      sock,
      timeout,
      &Native.udp_recv(sock, max, &1),
      fn -> Native.udp_select(sock) end,
      :tachyon_udp_ready
    )
  end

  def recv_many(_sock, max, _timeout) do
    raise ArgumentError,
          "Tachyon.UDP.recv_many/3: max must be an integer in 1..1024, got: #{inspect(max)}"
  end

  @doc """
  Acknowledges `count` processed datagrams, making room under `:max_queue`.
  A cheap NIF call (one atomic add); ack in batches if you like. Without
  `:max_queue` it only moves the `:acked` counter.

  ## Example

      {:ok, sock} = Tachyon.UDP.open(0, max_queue: 1000)

      receive do
        {:tachyon_udp, ^sock, _from, _data} -> Tachyon.UDP.ack(sock)
      after
        0 -> :ok
      end
  """
  @spec ack(socket(), pos_integer()) :: :ok
  def ack(sock, count \\ 1) when is_integer(count) and count > 0 do
    Native.udp_ack(sock, count)
  end
end

defmodule Tachyon.UDP.Options do
  @moduledoc false
  # The option schemas of Tachyon.Echo and Tachyon.UDP (checked and
  # documented by Tachyon.Options) and the helpers they share: address
  # parsing, the online cores, the wait strategies.

  alias Tachyon.Options

  @waits [:busy_spin, :yield, :backoff, :park]

  @doc "The wait strategies, as documented (the same for every part)."
  def waits, do: @waits

  @doc "The default wait for a thread that should be fast: busy-spin only with cores to spare."
  def default_wait do
    if cores() > 2, do: :busy_spin, else: :backoff
  end

  @doc "Online logical processors (not BEAM schedulers)."
  def cores do
    case :erlang.system_info(:logical_processors_online) do
      n when is_integer(n) and n > 0 -> n
      _ -> System.schedulers_online()
    end
  end

  @doc "Kept for callers of the old vocabulary: the NIF's wait atom is the public one."
  def public_wait(w), do: w

  @doc "The options of `Tachyon.Echo.start_link/1`."
  def echo_schema do
    [
      port: port(),
      ip: ip_spec(:loopback),
      wait: [
        type: :wait,
        default: {:native, :echo, :wait},
        default_doc: "`:busy_spin` on machines with more than two cores, `:backoff` otherwise",
        doc: """
        what the thread does when no datagram is waiting: `:busy_spin`
        (lowest latency; burns its core), `:yield` (polls and yields the core
        between polls, forever), `:backoff` (polls and yields for a few
        hundred microseconds after each datagram, then blocks in `poll` until
        the next one), or `:park` (blocks in `poll` at once; no CPU while
        idle).
        """
      ],
      core: core_spec(),
      batch: batch(:echo, "datagrams per `recvmmsg`/`sendmmsg`, 1..1024."),
      max_datagram_size:
        max_datagram(
          "largest datagram echoed, 1..65507. A larger datagram is not echoed; it is counted in `:truncated`."
        )
    ] ++
      socket(:echo) ++
      [
        name: [
          type:
            {:custom, &__MODULE__.gen_name/1,
             "nil, an atom, {:global, term} or {:via, module, term}"},
          default: nil,
          doc: "register the process under this name."
        ],
        stats_interval_ms: [
          type: :interval,
          default: 1000,
          formerly: [stats_interval: nil],
          doc: "milliseconds between `[:tachyon, :echo, :stats]` telemetry events (`nil`: none)."
        ]
      ]
  end

  @doc "The options of `Tachyon.UDP.open/2`."
  def udp_schema do
    [
      ip: ip_spec(:any),
      owner: [
        type: {:custom, &__MODULE__.owner/1, "a local pid or nil"},
        default: nil,
        doc:
          "the process that receives the datagrams (`nil`: the caller). Its exit closes the socket."
      ],
      delivery: [
        type: {:in, [:messages, :poll]},
        default: :messages,
        formerly: [mode: &__MODULE__.old_mode/1],
        doc: """
        how datagrams reach the owner: `:messages` (a receive thread sends
        each one as a message) or `:poll` (no thread: `recv/2` and
        `recv_many/3` read the socket on the caller's own scheduler; see
        "Poll mode"). The old `mode: :thread` is `delivery: :messages`.
        """
      ],
      spin_us: [
        type: {:integer, 0, 1_000_000},
        default: 50,
        formerly: [spin: nil],
        doc: """
        poll mode: microseconds a `recv` keeps polling an empty socket (with
        `wait: :backoff` or `:yield`) before it sleeps until the socket is
        readable.
        """
      ],
      wait: [
        type: :wait,
        default: {:native, :udp, :wait},
        doc: """
        `:messages`: what the receive thread does when no datagram is
        waiting; `:poll`: what `recv` does (`:busy_spin` polls until its
        timeout, `:backoff` and `:yield` poll for `:spin_us` microseconds then
        sleep, `:park` sleeps at once). With `delivery: :messages`: `:backoff`
        (after each datagram it keeps polling, yielding the core between
        polls, for up to 30 microseconds, or less when a yield shows the
        cores are busy, then blocks in `poll` until the next one: fast for
        request/response traffic, no CPU when idle),
        `:park` (blocks in `poll` at once: the least CPU, but the kernel must
        wake the thread for each datagram, which costs a few microseconds),
        `:yield` (never blocks: polls and yields forever), or `:busy_spin`
        (lowest latency; burns a whole core, so only with a core to spare,
        see `:core`).
        """
      ],
      core: core_spec(),
      max_queue: [
        type: {:or, [{:in, [:infinity]}, {:integer, 1, :infinity}]},
        default: :infinity,
        doc:
          "the most datagrams delivered and not yet acknowledged with `ack/2` (see \"Backpressure\")."
      ],
      batch: batch(:udp, "datagrams per `recvmmsg`, 1..1024."),
      max_datagram_size:
        max_datagram("""
        largest datagram delivered, 1..65507. Receive buffers are `batch *
        max_datagram` bytes of virtual memory; only the pages datagrams touch
        are ever resident.
        """)
    ] ++ socket(:udp)
  end

  @doc "The schema entry of a port."
  def port do
    [type: {:integer, 0, 65_535}, default: 0, doc: "UDP port, `0` for one the kernel picks."]
  end

  @doc "The schema entry of an address to bind."
  def ip_spec(default) do
    [
      type:
        {:custom, &__MODULE__.ip/1, "an IPv4 or IPv6 tuple, :loopback, :any or an address string"},
      default: default,
      doc: """
      address to bind: a tuple, `:loopback`, `:any` or a string such as
      `"::1"`. An IPv6 address opens an IPv6 socket.
      """
    ]
  end

  @doc "The schema entry of a core to pin a thread to."
  def core_spec do
    [
      type: {:custom, &__MODULE__.core/1, "nil or an integer in 0..(online cores - 1)"},
      default: nil,
      doc: "pin the thread to this core (`nil`: not pinned)."
    ]
  end

  defp batch(part, doc),
    do: [type: {:integer, 1, 1024}, default: {:native, part, :batch}, doc: doc]

  defp max_datagram(doc) do
    [
      type: {:integer, 1, 65_507},
      default: {:native, :udp, :max_datagram},
      formerly: [max_datagram: nil],
      doc: doc
    ]
  end

  @doc false
  # `mode: :thread | :poll` (UDP) and `mode: :messages | :poll` (Bus) were
  # one concept under two spellings: now `delivery: :messages | :poll`.
  def old_mode(:thread), do: :messages
  def old_mode(other), do: other

  @doc """
  The options as the NIFs name them (`udp_open/2`, `echo_start/1`): the
  receive mode is `mode: :thread | :poll`, sizes and times unsuffixed.
  """
  def to_nif(opts) do
    opts
    |> rename(:max_datagram_size, :max_datagram)
    |> rename(:spin_us, :spin)
    |> then(fn
      %{delivery: d} = o -> o |> Map.delete(:delivery) |> Map.put(:mode, nif_mode(d))
      o -> o
    end)
  end

  defp nif_mode(:messages), do: :thread
  defp nif_mode(:poll), do: :poll

  defp rename(map, from, to) do
    case Map.pop(map, from, :absent) do
      {:absent, map} -> map
      {value, map} -> Map.put(map, to, value)
    end
  end

  defp socket(part) do
    [
      recbuf: [
        type: {:or, [nil, {:integer, 1, :infinity}]},
        default: {:native, part, :recbuf},
        doc: "`SO_RCVBUF` in bytes (`nil`: the system's)."
      ],
      sndbuf: [
        type: {:or, [nil, {:integer, 1, :infinity}]},
        default: {:native, part, :sndbuf},
        doc: "`SO_SNDBUF` in bytes (`nil`: the system's)."
      ],
      reuseaddr: [
        type: :boolean,
        default: {:native, part, :reuseaddr},
        doc: "set `SO_REUSEADDR`."
      ]
    ]
  end

  @doc """
  Validates `opts` against `schema` and returns the map the NIFs decode
  (`max_queue: :infinity` becomes `nil`).
  """
  def validate!(opts, schema, label) do
    opts = opts |> Options.validate!(schema, label) |> Map.new()

    case opts do
      %{max_queue: :infinity} -> %{opts | max_queue: nil}
      _ -> opts
    end
  end

  # -- custom types (public: the schemas capture them) --------------------------

  @doc false
  def ip(value) do
    {:ok, ip!(value)}
  rescue
    ArgumentError -> :error
  end

  @doc false
  def core(nil), do: {:ok, nil}

  def core(value) when is_integer(value) do
    if value in 0..(cores() - 1), do: {:ok, value}, else: :error
  end

  def core(_value), do: :error

  @doc false
  def owner(nil), do: {:ok, nil}
  def owner(pid) when is_pid(pid) and node(pid) == node(), do: {:ok, pid}
  def owner(_), do: :error

  @doc false
  def gen_name(value) do
    if value == nil or is_atom(value) or match?({:via, _, _}, value) or
         match?({:global, _}, value),
       do: {:ok, value},
       else: :error
  end

  @doc """
  Normalises an address: a 4- or 8-tuple, `:loopback` (127.0.0.1), `:any`
  (0.0.0.0), or a string such as `"127.0.0.1"` or `"::1"`.
  """
  def ip!(value, key \\ :ip)
  def ip!(:loopback, _key), do: {127, 0, 0, 1}
  def ip!(:any, _key), do: {0, 0, 0, 0}

  def ip!(value, key) when is_binary(value) or is_list(value) do
    chars = if is_binary(value), do: String.to_charlist(value), else: value

    case :inet.parse_strict_address(chars) do
      {:ok, ip} -> ip
      {:error, _} -> bad!(key, "must be an IP address", value)
    end
  rescue
    ArgumentError -> bad!(key, "must be an IP address", value)
  end

  def ip!(value, key) do
    if :inet.is_ip_address(value) do
      value
    else
      bad!(key, "must be an IPv4 or IPv6 tuple, :loopback, :any or an address string", value)
    end
  end

  defp bad!(key, msg, value) do
    raise ArgumentError, "the #{inspect(key)} option #{msg}, got: #{inspect(value)}"
  end
end

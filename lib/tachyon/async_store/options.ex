defmodule Tachyon.AsyncStore.Options do
  @moduledoc false
  # Tachyon.AsyncStore's own option schema (checked and documented by
  # Tachyon.Options; the moduledoc of Tachyon.AsyncStore renders it). The
  # store options given with :path are Tachyon.Store's.

  alias Tachyon.Options

  @schema [
    ring_size: [
      type: {:power_of_two, 4096, 1_073_741_824},
      default: {:native, :async_store, :ring_size},
      doc: """
      ring bytes (the default holds about 990 messages of 256 bytes).
      Allocated and faulted in once, at open. A message takes its length plus
      an 8-byte header, rounded up to 8 bytes, and can be at most half the
      ring: give a bigger ring for bigger messages or longer bursts. A ring that stays in the cores' L2 caches is cheaper to write:
      with a 4 MiB ring the 256-byte append from Elixir cost about what a
      direct `Tachyon.Store.append/2` costs (0.82-1.09x in four runs), with
      256 KiB 0.65-0.86x (docs/BENCHMARK_HISTORY.md, "AsyncStore").
      """
    ],
    wait: [
      type: :wait,
      default: {:native, :async_store, :wait},
      default_doc:
        "`:busy_spin` with more than two cores, `:backoff` otherwise (`default_wait/0`)",
      doc: """
      what the writer thread does when the ring is empty: `:busy_spin`
      (lowest latency, burns a core), `:yield`, `:backoff` (spin, then yield,
      then naps up to 1 ms) or `:park` (sleeps until a producer wakes it,
      which costs that producer a system call). Except with `:park`,
      `append/2` never wakes a napping writer until the ring is half full: a
      message may wait up to one nap (`:linger_us`, or 1 ms after an idle spell)
      before the writer takes it; `flush/2` wakes it at once.
      """
    ],
    core: [
      type: {:or, [nil, {:integer, 0, :infinity}]},
      default: {:native, :async_store, :core},
      doc: "pin the writer thread to this core (`nil`: not pinned)."
    ],
    on_full: [
      type: {:in, [:spin, :error]},
      default: {:native, :async_store, :on_full},
      doc: """
      when the ring is full, `:spin` waits up to `:spin_timeout_us` microseconds
      for the writer to make room, then returns `{:error, :full}`; `:error`
      returns `{:error, :full}` at once.
      """
    ],
    spin_timeout_us: [
      type: {:integer, 0, 1000},
      default: {:native, :async_store, :spin_timeout},
      formerly: [spin_timeout: nil],
      doc: "microseconds. The spin runs on the caller's scheduler, so it is capped at 1 ms."
    ],
    batch_size: [
      type: {:integer, 1, 1_048_576},
      default: {:native, :async_store, :batch_size},
      doc: "at most this many messages per store batch."
    ],
    linger_us: [
      type: {:or, [nil, {:integer, 0, 1_000_000}]},
      default: nil,
      formerly: [linger: nil],
      default_doc: "50 with `:backoff` and `:park`, 0 otherwise",
      doc: """
      microseconds the writer naps after a batch smaller than `:batch_size`,
      so that messages accumulate into larger batches and a steady trickle
      does not keep a core busy. `flush/2`, `drain/2`, `close/1` and a ring
      past half full wake it early.
      """
    ],
    stats_interval_ms: [
      type: :interval,
      default: 1000,
      formerly: [stats_interval: nil],
      doc:
        "milliseconds between `[:tachyon, :async_store, :stats]` telemetry events (`nil`: none)."
    ]
  ]

  @doc "The AsyncStore's own options."
  def schema, do: @schema

  @doc "The keys of `schema/0` (deprecated names included)."
  def keys, do: Keyword.keys(@schema) ++ Keyword.keys(Options.renames(@schema))

  @doc "The options as the NIF names them (`async_open/6`)."
  def to_nif(opts) do
    opts
    |> Map.new()
    |> rename(:spin_timeout_us, :spin_timeout)
    |> rename(:linger_us, :linger)
    |> rename(:stats_interval_ms, :stats_interval)
  end

  defp rename(map, from, to) do
    {value, map} = Map.pop(map, from)
    Map.put(map, to, value)
  end

  @doc "Validates the AsyncStore's own options and fills in defaults."
  def validate!(opts) do
    opts = Options.validate!(opts, @schema, "Tachyon.AsyncStore")

    if opts[:linger_us] == nil,
      do: Keyword.put(opts, :linger_us, default_linger(opts[:wait])),
      else: opts
  end

  # Elixir's policy, not a Rust default: nap between small batches when the
  # writer does not spin anyway.
  defp default_linger(wait) when wait in [:backoff, :park], do: 50
  defp default_linger(_wait), do: 0
end

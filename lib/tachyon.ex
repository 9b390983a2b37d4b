defmodule Tachyon do
  @moduledoc """
  Low-latency messaging and storage for the BEAM.

  Tachyon's latency-critical paths are Rust NIFs (a pure-Rust core crate and a
  thin rustler crate in `native/`); Elixir provides configuration, supervision,
  telemetry and benchmarks. Each part is modelled on a published low-latency
  system and measured against what a BEAM user would otherwise use.

  ## Parts

  Each part is modelled on a published low-latency system; the figures
  against what a BEAM user would otherwise pick are in docs/BENCHMARKS.md.

    * `Tachyon.Store` - an append-only message log on memory-mapped segment
      files (after CoralStore's FileStore): `append/2` is one NIF call, a few
      hundred nanoseconds, against microseconds for `:disk_log`.
    * `Tachyon.AsyncStore` - a ring in front of a store, drained by a Rust
      writer thread (after CoralStore's AsyncStore): the caller pays for a
      copy; checksums, page faults and segment rolls leave its path.
    * `Tachyon.Echo` - a UDP echo server on a Rust thread that answers
      without touching the BEAM (after CoralReactor's UDP pong).
    * `Tachyon.UDP` - a UDP socket for BEAM processes, a sibling of
      `:gen_udp`: a Rust thread delivers datagrams as messages with a bounded
      mailbox, or the process polls the socket itself.
    * `Tachyon.Table` - a persistent key-value table: a hash index in memory
      over append-only segment files, reads as fast as ETS, every write in
      its log before the call returns (after Krati and Bitcask).
    * `Tachyon.Table.Replicated` - a `Tachyon.Table` kept identical on every
      replica by the sequencer's bus; reads are local.
    * `Tachyon.Sequencer` - the sequencer of a total-order message bus over
      UDP (after CoralSequencer): stamps, logs and broadcasts every message;
      one node, or a group of three or more that fails over.
    * `Tachyon.Bus` - a member of that bus: publishes, and receives every
      message of the bus in the same order as every other member, exactly
      once, with gap fill, resends and rewind.

  ## Supervision

  Every part has `child_spec/1` and `start_link/1`, so it goes in your own
  supervision tree:

      children = [
        {Tachyon.Store, name: :events, path: "/var/lib/my_app/events"}
      ]

      Supervisor.start_link(children, strategy: :one_for_one)

  Parts listed in the application environment are started by Tachyon's own
  application (none by default), stores first, under a `:rest_for_one`
  supervisor:

      config :tachyon,
        stores: [[name: :events_log, path: "/var/lib/my_app/events"]],
        async_stores: [[name: :events, store: :events_log]]

  ## Conventions

    * Expected failures are `{:error, reason}` with an atom reason (one
      atom per kind of error in every part: `:corrupt`, `:noproc`, ...);
      `!` variants raise. The names and their units are the same in every
      part (docs/VOCABULARY.md).
    * Bad options and wrong argument types raise `ArgumentError` naming the
      culprit.
    * Nothing blocks a scheduler for long: hot calls are regular NIFs that
      take well under a microsecond; opening, recovery and `sync` run on dirty
      I/O schedulers; background work runs in Rust threads that are stopped
      and joined when their resource is closed or garbage-collected.

  ## Telemetry

  See `Tachyon.Telemetry` for every event. Events are only emitted when the
  host application has the `:telemetry` package.

  ## Benchmarks

  `mix tachyon.bench` runs every benchmark (see `Mix.Tasks.Tachyon.Bench`);
  the summary of a recorded run is in `docs/BENCHMARKS.md`, earlier runs
  and investigations in `docs/BENCHMARK_HISTORY.md`.
  """

  @doc """
  The version of Tachyon.

  ## Example

      iex> is_binary(Tachyon.version())
      true
  """
  @spec version() :: String.t()
  def version, do: to_string(Application.spec(:tachyon, :vsn))
end

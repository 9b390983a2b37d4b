defmodule Tachyon do
  @moduledoc """
  Low-latency messaging and storage for the BEAM.

  Tachyon's latency-critical paths are Rust NIFs (a pure-Rust core crate and a
  thin rustler crate in `native/`); Elixir provides configuration, supervision,
  telemetry and benchmarks. Each part is modelled on a published low-latency
  system and measured against what a BEAM user would otherwise use.

  ## Parts

    * `Tachyon.Store` - an append-only message log on memory-mapped segment
      files (after CoralStore's FileStore). `append/2` is one regular NIF call
      that copies the message into the mapped segment: a few hundred
      nanoseconds from Elixir, against microseconds for `:disk_log`. It
      survives `kill -9` of the VM once `append/2` returns, and power loss
      after `sync/1`. Readers in other OS processes follow the writer.

    * `Tachyon.AsyncStore` - a front for a store (after CoralStore's
      AsyncStore): `append/2` copies the message into an SPSC ring and
      returns the index it will have; a Rust writer thread drains the ring
      into the store in batches, so checksums, page faults and segment rolls
      leave the caller's path. `flush/1` waits until it is in the store.

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
  recorded runs are in `docs/BENCHMARKS.md`.
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

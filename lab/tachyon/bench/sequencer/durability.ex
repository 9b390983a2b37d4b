defmodule Tachyon.Bench.Sequencer.Durability do
  @moduledoc false
  # `mix tachyon.bench sequencer --durability fsync`: each round-trip and
  # throughput case of the sequencer bench runs with `durability:
  # :replicated` (its usual name) and right after with `:fsync` (the same
  # name + ".fsync"), single node and, with --group N, the group's cases
  # likewise; beside them the floors of the same disk, in the same run:
  #
  #   raw.fdatasync                     a Rust loop writes one bus entry's
  #                                     worth (pwrite) on a file in the
  #                                     directory the sequencer logs to and
  #                                     fdatasyncs it, each timed
  #   raw.fdatasync.throughput          the same, a sequencer receive batch of
  #                                     entries (`batch`, 32 datagrams) per
  #                                     fdatasync: records/s
  #   raw.fdatasync.throughput.batched  the same, a batch of 64-message
  #                                     commands (32 x 64) per fdatasync
  #
  # (native/tachyon_core/src/bench/fsync.rs). The fsync round trips run
  # --fsync-messages round trips (a tenth more first as warm-up), the
  # floor's latency case as many; the throughput cases --messages. Each
  # fsync case asks every node for its stats before it stops
  # (OSProcess.stats/2): syncs done, the time they took, entries per sync.
  #
  # Printed: every pair side by side, each against the floor, and the
  # issue's goals: with :fsync, round trip p50 at most the floor's p50 plus
  # the :replicated p50; throughput at least 0.5x :replicated.

  alias Tachyon.Bench
  alias Tachyon.Bench.Report
  alias Tachyon.Native
  alias Tachyon.Sequencer.OSProcess

  @floors ~w(raw.fdatasync raw.fdatasync.throughput raw.fdatasync.throughput.batched)
  # The kinds whose fsync twin counts toward a goal, with their floor.
  @roundtrips [{"roundtrip", "Elixir member"}, {"roundtrip.native", "Rust member"}]
  @throughputs [
    {"throughput", "raw.fdatasync.throughput", "one per datagram, Elixir member"},
    {"throughput.batched", "raw.fdatasync.throughput.batched", "batched, Elixir member"},
    {"throughput.native", "raw.fdatasync.throughput", "one per datagram, Rust member"},
    {"throughput.batched.native", "raw.fdatasync.throughput.batched", "batched, Rust member"}
  ]

  @doc "The floor cases, in the order they run."
  def floor_names, do: @floors

  @doc """
  `cases` with each sequencer case of a kind in `kinds` followed by its
  `.fsync` twin, and the floors right before the first twin: as close in
  time to the fsync cases as they can be (on a shared machine the disk's
  latency changes from one minute to the next, see docs/BENCHMARKS.md).
  """
  def with_twins(cases, kinds) do
    twins =
      Enum.flat_map(cases, fn name ->
        if kind(name) in kinds, do: [name, name <> ".fsync"], else: [name]
      end)

    {before, rest} = Enum.split_while(twins, &(not String.ends_with?(&1, ".fsync")))
    before ++ @floors ++ rest
  end

  defp kind("tachyon.sequencer." <> rest), do: String.replace(rest, ~r/^group\d+\./, "")
  defp kind(_), do: nil

  @doc """
  A case's name without `.fsync`, and its durability: `{name, :fsync |
  :replicated}`.
  """
  def split(name) do
    case String.replace_suffix(name, ".fsync", "") do
      ^name -> {name, :replicated}
      base -> {base, :fsync}
    end
  end

  @doc "The arguments of `mix tachyon.sequencer` for `durability`."
  def seq_args(:fsync), do: ["--durability", "fsync"]
  def seq_args(_), do: []

  @doc """
  `cfg` for a case of `durability` and `kind`: a round trip with :fsync
  takes `cfg.fsync_n` round trips after a tenth as many.
  """
  def cfg_for(cfg, :fsync, "roundtrip" <> _),
    do: %{cfg | n: cfg.fsync_n, warmup: div(cfg.fsync_n, 10)}

  def cfg_for(cfg, _durability, _kind), do: cfg

  @doc """
  Adds the nodes' sync figures to case `c` of an fsync run (`nodes`: the
  OS processes, primary first), and its `warmup`: in its note and its JSON.
  """
  def with_sync_stats(c, nodes, warmup) do
    stats =
      for {p, role} <- nodes do
        case OSProcess.stats(p) do
          {:ok, st} -> sync_figures(st, role)
          {:error, _} -> %{"role" => role}
        end
      end

    text =
      Enum.map_join(stats, "; ", fn
        %{"syncs" => n} = s ->
          "#{s["role"]}: #{Report.delimit(n)} syncs, #{s["entries_per_sync"]} entries/sync, " <>
            "#{s["sync_avg_us"]} us/sync"

        s ->
          "#{s["role"]}: no stats"
      end)

    extra = Map.get(c, :json_extra, %{})

    %{c | note: c.note <> "; " <> text <> load_note()}
    |> Map.put(
      :json_extra,
      Map.merge(extra, %{"nodes" => stats, "loadavg_1m" => load(), "warmup" => warmup})
    )
    |> Map.put(:sync, hd(stats))
  end

  @doc """
  The machine's load average over the last minute (`/proc/loadavg`), or
  nil where there is none: with both cores busy, every wait for the disk
  also waits for a core (on the 2-core VM, a scheduler tick: 4 ms).
  """
  def load do
    with {:ok, text} <- File.read("/proc/loadavg"),
         [one | _] <- String.split(text, " "),
         {l, _} <- Float.parse(one) do
      l
    else
      _ -> nil
    end
  end

  defp load_note, do: if(l = load(), do: "; load average #{l}", else: "")

  defp sync_figures(st, role) do
    syncs = st[:syncs] || 0
    per = if syncs > 0, do: Float.round(st.next_seq / syncs, 1), else: 0
    avg = if syncs > 0, do: Float.round(st.sync_time_us / syncs, 1), else: 0

    %{
      "role" => role,
      "syncs" => syncs,
      "sync_requests" => st[:sync_requests] || 0,
      "sync_time_us" => st[:sync_time_us] || 0,
      "entries" => st.next_seq,
      "entries_per_sync" => per,
      "sync_avg_us" => avg
    }
  end

  @doc "Runs one floor case in `dir` (the directory the sequencer cases log in)."
  def run_case("raw.fdatasync" = name, dir, cfg) do
    n = cfg.fsync_n
    opts = %{path: dir, kind: :latency, count: n, warmup: div(n, 10), size: cfg.size}
    entry = entry_size(cfg.size)

    Bench.from_hist(name, floor!(name, opts), entry, %{
      note:
        "a Rust loop on a file in #{Path.dirname(dir)}: pwrite of #{entry} bytes (a bus entry " <>
          "of #{cfg.size} bytes), then fdatasync, each timed" <> load_note(),
      json_extra: %{"loadavg_1m" => load(), "warmup" => div(n, 10)}
    })
  end

  def run_case("raw.fdatasync.throughput" <> batched = name, dir, cfg) do
    per = batch() * if(batched == ".batched", do: 64, else: 1)
    entry = entry_size(cfg.size)
    opts = %{path: dir, kind: :throughput, count: cfg.n, size: cfg.size, per: per}
    t = floor!(name, opts)
    rate = t.records * 1.0e9 / max(t.elapsed_ns, 1)
    ns = t.elapsed_ns / max(t.records, 1)
    ks = [:avg, :min, :max, :p50, :p90, :p99, :p999, :p9999, :p99999]
    report = Map.merge(Map.new(ks, &{&1, ns}), %{count: t.records, stdev: 0, tails: []})

    Bench.from_report(name, report, entry, %{
      rate: rate,
      note:
        "#{per} entries of #{entry} bytes per pwrite and fdatasync (the sequencer's receive " <>
          "batch of #{batch()} datagrams#{if per > batch(), do: " of 64 messages", else: ""}); " <>
          "#{Report.delimit(round(rate))} records/s, #{Report.delimit(t.syncs)} syncs of " <>
          "#{Report.short_ns(t.elapsed_ns / max(t.syncs, 1))}; the latency columns are elapsed/records" <>
          load_note(),
      json_extra: %{
        "msgs_per_sec" => rate,
        "syncs" => t.syncs,
        "per_sync" => per,
        "loadavg_1m" => load()
      }
    })
  end

  defp floor!(name, opts) do
    case Native.bench_fsync_floor(opts) do
      {:ok, result} -> result
      {:error, reason} -> Mix.raise("#{name}: #{inspect(reason)} (in #{opts.path})")
    end
  end

  # A bus entry of a `size`-byte message: what one more message adds to a
  # bus datagram (the log entry is the message as the datagram carries it).
  defp entry_size(size),
    do: Native.bench_bus_datagram_size(size, 2) - Native.bench_bus_datagram_size(size, 1)

  # The sequencer's receive batch (datagrams per recvmmsg): one sync per
  # batch that appended, at most.
  defp batch, do: Tachyon.Sequencer.defaults().batch

  @doc "Prints each :fsync case beside its :replicated twin and the floor."
  def print_compare(cases) do
    by = Bench.by_name(cases)
    pairs = for c <- cases, {base, :fsync} <- [split(c.name)], r = by[base], do: {r, c}

    if pairs != [] do
      IO.puts("\ndurability: :fsync against :replicated and the disk (same run):")
      floor = by["raw.fdatasync"]
      rows = for {r, f} <- pairs, do: row(r, f, floor, by)

      Report.print_rows(
        ["case", "", "replicated", "fsync", "ratio", "floor", "floor+repl.", "fsync/that"] ++
          ["syncs", "entries/sync", "us/sync"],
        rows
      )

      IO.puts(
        "  (round trips: p50; throughput: msg/s, the floor of 32 entries per sync or 32 x 64. " <>
          "syncs, entries/sync, us/sync: the primary's, from its stats)"
      )
    end
  end

  defp row(r, f, floor, by) do
    {kind_name, _} = split(f.name)
    kind = String.replace_prefix(kind_name, "tachyon.sequencer.", "")
    s = f[:sync] || %{}

    sync_cols = [
      Report.delimit(s["syncs"] || 0),
      "#{s["entries_per_sync"] || "-"}",
      "#{s["sync_avg_us"] || "-"}"
    ]

    if f[:rate] do
      fl = by[floor_of(kind)]

      [kind, "msg/s", Report.delimit(round(r.rate)), Report.delimit(round(f.rate))] ++
        [Report.ratio(f.rate, r.rate), if(fl, do: Report.delimit(round(fl.rate)), else: "-")] ++
        ["", ""] ++ sync_cols
    else
      [kind, "p50", Report.short_ns(r.p50_ns), Report.short_ns(f.p50_ns)] ++
        [Report.ratio(f.p50_ns, r.p50_ns)] ++
        if(floor,
          do: [
            Report.short_ns(floor.p50_ns),
            Report.short_ns(floor.p50_ns + r.p50_ns),
            Report.ratio(f.p50_ns, floor.p50_ns + r.p50_ns)
          ],
          else: ["-", "-", "-"]
        ) ++ sync_cols
    end
  end

  defp floor_of(kind) do
    if String.contains?(kind, "batched"),
      do: "raw.fdatasync.throughput.batched",
      else: "raw.fdatasync.throughput"
  end

  @doc """
  The goals of an fsync run (those whose cases ran): for each round trip
  (single node and group), p50 with :fsync at most the floor's p50 plus
  the :replicated p50; for each throughput case, :fsync at least 0.5x
  :replicated.
  """
  def goals(cases, group) do
    by = Bench.by_name(cases)
    prefixes = [{"tachyon.sequencer.", "one node"}] ++ group_prefix(group)

    rts =
      for {pre, where} <- prefixes,
          {kind, who} <- @roundtrips,
          r = by[pre <> kind],
          f = by[pre <> kind <> ".fsync"],
          floor = by["raw.fdatasync"] do
        bound = floor.p50_ns + r.p50_ns

        Bench.goal(
          "bus round trip with durability: :fsync, #{who}, #{where} (p50) / raw.fdatasync p50 " <>
            "+ the :replicated round trip p50 (#{Report.short_ns(floor.p50_ns)} + " <>
            "#{Report.short_ns(r.p50_ns)})",
          Bench.x(f.p50_ns / bound),
          "at most 1x",
          f.p50_ns <= bound
        )
      end

    rates =
      for {pre, where} <- prefixes,
          {kind, _floor, who} <- @throughputs,
          r = by[pre <> kind],
          f = by[pre <> kind <> ".fsync"] do
        Bench.goal(
          "messages per second, #{who}, #{where}, durability: :fsync / :replicated",
          Bench.x(f.rate / r.rate),
          "at least 0.5x",
          f.rate >= 0.5 * r.rate
        )
      end

    rts ++ rates
  end

  defp group_prefix(nil), do: []
  defp group_prefix(n), do: [{"tachyon.sequencer.group#{n}.", "group of #{n}"}]
end

defmodule Tachyon.Bench.Sequencer do
  @moduledoc false
  # `mix tachyon.bench sequencer`: the bus round trip (publish, then wait
  # for the own message on the bus) against the UDP echo of the same run,
  # as CoralSequencer's pages show it; the sequencer runs in an OS process
  # of its own (`mix tachyon.sequencer`), the measuring member here.
  #
  # Cases:
  #   machine.hiccup                    the machine's own tail (--hiccup-ms)
  #   tachyon.echo                      Rust ping thread -> Tachyon.Echo (the seed's 1.5x reference)
  #   raw.relay.roundtrip, raw.relay.throughput, raw.relay.throughput.batched
  #                                     the floors: the same sockets, sizes and system calls,
  #                                     no sequencing, no log (Tachyon.Bench.Sequencer.Floors)
  #   tachyon.sequencer.roundtrip       an Elixir process (member in :poll mode) publishes
  #                                     --size bytes and waits for its own message
  #   tachyon.sequencer.roundtrip.loss  the same, 1% of bus datagrams dropped on the member's side
  #   tachyon.sequencer.roundtrip.messages  the same with the member in :messages mode: its
  #                                     thread sends each message to the process, which
  #                                     waits for its own in `receive`
  #   tachyon.sequencer.roundtrip.subscriber  the same with a member started by
  #                                     Tachyon.Bus.start_link/1 (no owner) and the
  #                                     process a subscriber (Tachyon.Bus.subscribe/1)
  #   tachyon.sequencer.throughput      publish --messages one per datagram (sequencer
  #                                     --no-batching) and receive them all: messages/s
  #   tachyon.sequencer.throughput.batched  the same, 64 messages per command, batching on
  #
  #   tachyon.sequencer.roundtrip.native  the same round trip from a Rust member loop
  #                                     (dirty scheduler, busy polling): this sequencer's floor
  #   beam.dist.roundtrip               the BEAM way: a GenServer sequencer on a second BEAM
  #                                     node (:peer) stamps, logs with :disk_log and sends to
  #                                     the members over distributed Erlang
  #   tachyon.sequencer.throughput.native, .throughput.batched.native
  #                                     the throughput cases with a Rust member loop
  #
  #   tachyon.sequencer.groupN.X        with --group N (3 to 7): each case X above but
  #                                     roundtrip.native .. throughput.batched.native against
  #                                     a group of N nodes, each an OS process of its own on
  #                                     loopback (OSProcess.start_group: majority commit before
  #                                     delivery), right after its single-node case; the table
  #                                     "group of N against one node" gives the ratios
  #
  #   X.auth                            with --auth mac|aead: each case X of @kinds
  #                                     again with keys (nodes and member), right
  #                                     after X (Tachyon.Bench.Sequencer.Keys)
  #
  #   X.fsync, raw.fdatasync*           with --durability fsync: each case X of @kinds
  #                                     again with durability: :fsync, right after X,
  #                                     and the floors of the disk
  #                                     (Tachyon.Bench.Sequencer.Durability)
  #
  # Options: spec/0. --failover runs Tachyon.Bench.Failover instead
  # (takeover times over kill -9s and SIGSTOPs of the primary of a group,
  # two-node takeovers, and the replicated table's put).

  alias Tachyon.{Bench, Bus}
  alias Tachyon.Bench.Echo.Peers
  alias Tachyon.Bench.Report
  alias Tachyon.Bench.Sequencer.{Cost, Durability, Floors, Goals, Keys, Messages}
  alias Tachyon.Sequencer.OSProcess

  @defaults [
    messages: 100_000,
    warmup: 20_000,
    size: 256,
    hiccup_ms: 1000,
    durability: "replicated",
    fsync_messages: 5_000
  ]
  @quick [messages: 5_000, warmup: 1_000, hiccup_ms: 200, fsync_messages: 500]
  @all ~w(machine.hiccup tachyon.echo raw.relay.roundtrip tachyon.sequencer.roundtrip.native tachyon.sequencer.roundtrip tachyon.sequencer.roundtrip.loss tachyon.sequencer.roundtrip.messages tachyon.sequencer.roundtrip.subscriber beam.dist.roundtrip raw.relay.throughput raw.relay.throughput.batched tachyon.sequencer.throughput tachyon.sequencer.throughput.batched tachyon.sequencer.throughput.native tachyon.sequencer.throughput.batched.native)
  # The cases that also run against a group (--group N), in this order.
  @kinds ~w(roundtrip.native roundtrip roundtrip.loss roundtrip.messages roundtrip.subscriber throughput throughput.batched throughput.native throughput.batched.native)

  @doc "The part's options, defaults and goals' run (Tachyon.Bench.CLI)."
  def spec do
    %{
      name: "sequencer",
      summary:
        "the bus round trip and throughput through a sequencer in its own OS process, " <>
          "against a GenServer sequencer over distributed Erlang and Rust floors " <>
          "(the same sockets, no sequencing)",
      cases: @all,
      options: [
        {:cases, :string, "LIST", "run only these cases (comma-separated)"},
        {:hiccup_ms, :integer, "MS", "how long machine.hiccup reads the clock"},
        {:wait, :string, "WAIT",
         "wait of every sequencer node's and the echo's thread: busy_spin, yield, backoff " <>
           "or park (default: backoff on 2 cores)"},
        {:heartbeat_after, :integer, "US", "the sequencer's --heartbeat-after, microseconds"},
        {:group, :integer, "N",
         "also run each case against a group of N nodes (3 to 7), each an OS process"},
        {:durability, :string, "MODE",
         "fsync: also run each round-trip and throughput case with durability: :fsync, " <>
           "right after the usual :replicated one (named X.fsync), beside raw.fdatasync " <>
           "floors of the disk the sequencer logs to (--dir); replicated: the usual cases only"},
        {:auth, :string, "MODE",
         "mac or aead: also run each round-trip and throughput case with keys (auth:, " <>
           "encrypt: MODE == aead) on every node and the member, right after the usual one " <>
           "(named X.auth)"},
        {:fsync_messages, :integer, "N",
         "with --durability fsync: round trips of each :fsync round-trip case and of " <>
           "raw.fdatasync (a tenth more first, as warm-up)"},
        {:failover, :boolean, nil,
         "measure failover instead: takeovers after kill -9 and SIGSTOP of the primary of " <>
           "a group, two-node takeovers, and Tachyon.Table.Replicated's put"},
        {:kills, :integer, "N", "with --failover: kill -9s of the primary (default 20)"},
        {:pauses, :integer, "N", "with --failover: SIGSTOPs of the primary (default: --kills)"},
        {:pause_ms, :integer, "MS", "with --failover: how long each SIGSTOP lasts (default 300)"},
        {:table_messages, :integer, "N",
         "with --failover: puts of the replicated table cases (default 20,000)"}
      ],
      defaults: @defaults,
      quick: @quick,
      full: [messages: 1_000_000]
    }
  end

  def run(argv) do
    opts = Bench.parse!(argv, spec())

    group = opts[:group]

    if group && !opts[:failover] && group not in 3..7,
      do: Mix.raise("--group N: a majority group of 3 to 7 nodes, got #{group}")

    durability =
      case opts[:durability] do
        d when d in [nil, "replicated"] -> :replicated
        "fsync" -> :fsync
        d -> Bench.CLI.unknown!("durability", d, ["replicated", "fsync"])
      end

    keys = Keys.setup(opts[:auth])
    all = all_cases(group, durability)
    all = if keys, do: Keys.with_twins(all, @kinds), else: all
    wanted = Bench.cases!(opts, all)

    wait =
      if opts[:wait], do: String.to_atom(opts[:wait]), else: Tachyon.UDP.Options.default_wait()

    cfg = %{
      n: opts[:messages],
      warmup: opts[:warmup],
      size: opts[:size],
      wait: wait,
      ping_core: nil,
      topo: :single,
      durability: :replicated,
      keys: keys,
      fsync_n: opts[:fsync_messages],
      seq_args:
        if(opts[:heartbeat_after],
          do: ["--heartbeat-after", "#{opts[:heartbeat_after]}"],
          else: []
        ),
      pong_core: nil
    }

    Report.print_machine()

    if opts[:failover],
      do: Tachyon.Bench.Failover.run(opts, cfg),
      else: run_cases(opts, all, wanted, cfg)
  end

  # Without --group: the cases of today. With --group N: each case of
  # @kinds followed by its group-of-N twin (beam.dist.roundtrip only when
  # asked for by --cases).
  defp all_cases(group, :fsync), do: Durability.with_twins(all_cases(group, nil), @kinds)
  defp all_cases(nil, _), do: @all

  defp all_cases(n, _) do
    paired =
      Enum.flat_map(@kinds, &["tachyon.sequencer.#{&1}", "tachyon.sequencer.group#{n}.#{&1}"])

    ["machine.hiccup", "tachyon.echo"] ++ Floors.names() ++ paired ++ ["beam.dist.roundtrip"]
  end

  defp run_cases(opts, all, wanted, cfg) do
    wanted =
      if opts[:group] && !opts[:cases],
        do: List.delete(wanted, "beam.dist.roundtrip"),
        else: wanted

    where =
      if opts[:group],
        do:
          "one sequencer node, then a group of #{opts[:group]}, each node in its own OS process",
        else: "sequencer in its own OS process"

    IO.puts(
      "Sequencer bench: #{Report.delimit(cfg.n)} messages of #{cfg.size} bytes after #{Report.delimit(cfg.warmup)} warm-up; " <>
        "#{where}, wait #{cfg.wait}" <>
        if(opts[:durability] == "fsync",
          do:
            "; each case again with durability: :fsync (round trips: #{Report.delimit(cfg.fsync_n)})",
          else: ""
        )
    )

    cases =
      Bench.run_cases(all, wanted, opts, "sequencer", fn name, dir ->
        run_case(name, dir, cfg)
      end)

    rates = for c <- cases, c[:rate], do: {c.name, c.rate}
    Report.print_table(cases, "tachyon.echo")
    for {name, r} <- rates, do: IO.puts("#{name}: #{Report.delimit(round(r))} msg/s")
    Floors.print_ratios(cases)
    if opts[:group], do: compare_group(cases, opts[:group], cfg.wait)
    Durability.print_compare(cases)
    Keys.print_compare(cases)

    goals = Bench.print_goals(Goals.goals(cases, opts[:group]) ++ Keys.goals(cases), opts, spec())

    Report.write_json(
      opts[:json],
      "sequencer",
      cases,
      %{
        "goals" => goals,
        "warmup" => cfg.warmup,
        "wait" => "#{cfg.wait}",
        "group" => opts[:group] || 1,
        "durability" => opts[:durability] || "replicated",
        "auth" => opts[:auth] || "none"
      }
    )

    cases
  end

  defp run_case("tachyon.echo" = name, _dir, cfg) do
    Peers.with_echo(nil, cfg.wait, fn _echo, addr ->
      {h, info} = Peers.rust_ping!(addr, cfg.n, cfg.warmup, cfg)

      Bench.from_hist(name, h, cfg.size, %{
        note: "Rust ping thread -> Tachyon.Echo, lost #{info.lost}"
      })
    end)
  end

  defp run_case("beam.dist.roundtrip" = name, dir, cfg), do: dist_case(name, dir, cfg)
  defp run_case("raw.relay." <> _ = name, _dir, cfg), do: Floors.run_case(name, cfg)
  defp run_case("raw.fdatasync" <> _ = name, dir, cfg), do: Durability.run_case(name, dir, cfg)

  defp run_case("tachyon.sequencer." <> _ = name, dir, cfg) do
    {base, keyed} = Keys.split(name)
    # cfg.keys: the run's keys; a case without ".auth" runs without them.
    cfg = %{cfg | keys: if(keyed, do: cfg.keys)}
    {"tachyon.sequencer." <> rest, durability} = Durability.split(base)

    {topo, kind} =
      case Regex.run(~r/^group(\d+)\.(.+)$/, rest) do
        [_, n, kind] -> {{:group, String.to_integer(n)}, kind}
        nil -> {:single, rest}
      end

    cfg = Durability.cfg_for(%{cfg | topo: topo, durability: durability}, durability, kind)
    run_kind(kind, name, dir, cfg)
  end

  defp run_kind("roundtrip", name, dir, cfg), do: roundtrip(name, dir, cfg, 0.0)
  defp run_kind("roundtrip.loss", name, dir, cfg), do: roundtrip(name, dir, cfg, 0.01)

  defp run_kind("roundtrip.messages", name, dir, cfg),
    do: with_sequencer(dir, cfg, [], &Messages.roundtrip(name, &1, cfg, :owner))

  defp run_kind("roundtrip.subscriber", name, dir, cfg),
    do: with_sequencer(dir, cfg, [], &Messages.roundtrip(name, &1, cfg, :subscriber))

  defp run_kind("throughput", name, dir, cfg),
    do: throughput(name, dir, cfg, 1, ["--no-batching"])

  defp run_kind("throughput.batched", name, dir, cfg),
    do: throughput(name, dir, cfg, 64, ["--max-datagram", "65000"])

  defp run_kind("throughput.native", name, dir, cfg),
    do: native_throughput(name, dir, cfg, 1, ["--no-batching"], 1472)

  defp run_kind("throughput.batched.native", name, dir, cfg),
    do: native_throughput(name, dir, cfg, 64, ["--max-datagram", "65000"], 65_000)

  defp run_kind("roundtrip.native", name, dir, cfg) do
    with_sequencer(dir, cfg, [], fn seq ->
      h =
        native!(name, seq, %{
          sequencer: seq.primary,
          kind: :roundtrip,
          count: cfg.n,
          warmup: cfg.warmup,
          size: cfg.size,
          max_datagram: 1472,
          loss: 0.0,
          auth: Keys.native_auth(cfg.keys)
        })

      Bench.from_hist(name, h, cfg.size, %{
        note: "Rust member loop on a dirty scheduler, busy polling" <> seq.note
      })
    end)
  end

  defp dist_case(name, dir, cfg) do
    alias Tachyon.Bench.DistSequencer
    {peer, node} = DistSequencer.start_peer(dir)

    try do
      msg = :binary.copy(<<0x5A>>, cfg.size)
      seq = {DistSequencer, node}
      n = cfg.n
      warmup = cfg.warmup

      h =
        Bench.in_big_heap(fn ->
          :ok = GenServer.call(seq, {:join, self()})
          {h, _, _} = Bench.sample(warmup, n, fn k, h, _ -> dist_loop(seq, msg, k, h) end)
          h
        end)

      Bench.from_hist(name, h, cfg.size, %{
        unit: :perf_counter,
        note:
          "GenServer.cast to a sequencer on a second BEAM node (:peer), :disk_log.blog, send back over distribution"
      })
    after
      DistSequencer.stop_peer(peer)
    end
  end

  defp dist_loop(_seq, _msg, 0, _h), do: nil

  defp dist_loop(seq, msg, k, h) do
    t0 = :os.perf_counter()
    GenServer.cast(seq, {:publish, 1, msg})

    receive do
      {:dist_bus, _, 1, _} -> :ok
    after
      5000 -> raise "beam.dist.roundtrip: no message in 5 s"
    end

    t1 = :os.perf_counter()
    if h, do: Bench.record(h, t1 - t0)
    dist_loop(seq, msg, k - 1, h)
  end

  # The Rust member loop's result, or a clear stop: a round trip over 5 s
  # (or no progress for 10 s) ends the loop with :timeout, which on this
  # machine means the nodes and the loop do not get the cores they spin on.
  defp native!(name, seq, opts) do
    case Tachyon.Native.bench_seq_native(opts) do
      {:ok, result} ->
        result

      {:error, why} ->
        Mix.raise(
          "#{name}: the Rust member loop stopped with #{inspect(why)}#{seq.note} " <>
            "(with a spinning wait, every node and the member need a core of their own: " <>
            "#{System.schedulers_online()} here)"
        )
    end
  end

  defp native_throughput(name, dir, cfg, per, extra, max_dg) do
    with_sequencer(dir, cfg, extra, fn seq ->
      n = cfg.n - rem(cfg.n, per)

      dt =
        native!(name, seq, %{
          sequencer: seq.primary,
          kind: :throughput,
          count: n,
          per: per,
          size: cfg.size,
          max_datagram: max_dg,
          loss: 0.0,
          auth: Keys.native_auth(cfg.keys)
        })

      rate = n * 1.0e9 / dt

      Bench.from_report(name, flat_report(dt / n, n), cfg.size, %{
        rate: rate,
        note:
          "Rust member loop; #{per} message(s) per command; the latency columns are elapsed/messages" <>
            seq.note,
        json_extra: %{"msgs_per_sec" => rate}
      })
    end)
  end

  # Runs `fun` against one sequencer node (an OS process) or a group of
  # them (cfg.topo), all with --wait cfg.wait: `fun.(%{bus: what Bus.open's
  # :sequencer takes, primary: the primary's address, note: for the case})`.
  defp with_sequencer(dir, %{topo: :single} = cfg, extra, fun) do
    {:ok, p} =
      OSProcess.start(
        ["--path", dir, "--port", "0", "--wait", "#{cfg.wait}"] ++
          cfg.seq_args ++ Durability.seq_args(cfg.durability) ++ Keys.seq_args(cfg.keys) ++ extra
      )

    try do
      cost = Cost.start([{p, "primary"}])

      fun.(%{bus: p.address, primary: p.address, note: "", auth: Keys.member_auth(cfg.keys)})
      |> Cost.finish(cost)
      |> sync_stats(cfg, [{p, "primary"}])
    after
      OSProcess.kill(p)
    end
  end

  defp with_sequencer(dir, %{topo: {:group, n}} = cfg, extra, fun) do
    dirs = for i <- 1..n, do: Path.join(dir, "node#{i}")
    # (start_group's own "--wait backoff" comes first: the last one counts.)
    args =
      ["--wait", "#{cfg.wait}"] ++
        cfg.seq_args ++ Durability.seq_args(cfg.durability) ++ Keys.seq_args(cfg.keys) ++ extra

    {primary, others, group} = OSProcess.start_group(dirs, args)

    try do
      nodes = [{primary, "primary"} | Enum.map(others, &{&1, "follower"})]
      cost = Cost.start(nodes)

      fun.(%{
        bus: group,
        primary: primary.address,
        note: "; group of #{n} OS processes, primary node #{primary.id}",
        auth: Keys.member_auth(cfg.keys)
      })
      |> Cost.finish(cost)
      |> sync_stats(cfg, nodes)
    after
      Enum.each([primary | others], &OSProcess.kill/1)
    end
  end

  # An fsync case: the nodes' syncs, in its note and JSON.
  defp sync_stats(c, %{durability: :fsync} = cfg, nodes),
    do: Durability.with_sync_stats(c, nodes, cfg.warmup)

  defp sync_stats(c, _cfg, _nodes), do: c

  defp roundtrip(name, dir, cfg, loss) do
    with_sequencer(dir, cfg, [], fn seq ->
      msg = :binary.copy(<<0x5A>>, cfg.size)

      {h, stats} =
        Bench.in_big_heap(fn ->
          {:ok, bus} =
            Bus.open(
              sequencer: seq.bus,
              member_id: 1,
              delivery: :poll,
              wait: :busy_spin,
              loss: loss,
              auth: seq.auth
            )

          {h, _, _gcs} =
            Bench.sample(cfg.warmup, cfg.n, fn k, h, _ -> rt_loop(bus, msg, k, h) end)

          {:ok, st} = Bus.stats(bus)
          Bus.close(bus)
          {h, st}
        end)

      Bench.from_hist(name, h, cfg.size, %{
        unit: :perf_counter,
        note:
          "member in :poll mode on this VM's scheduler; loss #{loss}: #{stats.injected_losses} datagrams dropped, " <>
            "#{stats.replay_requests} replay requests, #{stats.resent} resent" <> seq.note,
        json_extra: Map.take(stats, [:injected_losses, :replay_requests, :resent, :gaps])
      })
    end)
  end

  defp rt_loop(_bus, _msg, 0, _h), do: nil

  defp rt_loop(bus, msg, k, h) do
    t0 = :os.perf_counter()
    {:ok, ms} = Bus.publish(bus, msg)
    await_own(bus, ms)
    t1 = :os.perf_counter()
    if h, do: Bench.record(h, t1 - t0)
    rt_loop(bus, msg, k - 1, h)
  end

  # Only this member publishes: its message is the last one of the batch.
  defp await_own(bus, _ms) do
    {:ok, [_ | _]} = Bus.recv(bus, 5000)
  end

  defp throughput(name, dir, cfg, per_cmd, extra) do
    with_sequencer(dir, cfg, extra, fn seq ->
      msg = :binary.copy(<<0x33>>, cfg.size)
      batch = List.duplicate(msg, per_cmd)
      max_dg = if per_cmd > 1, do: 65_000, else: 1472

      {:ok, bus} =
        Bus.open(
          sequencer: seq.bus,
          member_id: 1,
          delivery: :poll,
          wait: :busy_spin,
          max_datagram_size: max_dg,
          auth: seq.auth
        )

      n = cfg.n - rem(cfg.n, per_cmd)
      t0 = System.monotonic_time(:nanosecond)
      pump(bus, batch, per_cmd, div(n, per_cmd), 0, n)
      dt = System.monotonic_time(:nanosecond) - t0
      {:ok, st} = Bus.stats(bus)
      Bus.close(bus)
      rate = n * 1.0e9 / dt

      Bench.from_report(name, flat_report(dt / n, n), cfg.size, %{
        rate: rate,
        note:
          "#{per_cmd} message(s) per command; #{Report.delimit(round(rate))} msg/s delivered; " <>
            "resent #{st.resent}, replay requests #{st.replay_requests}; the latency columns are elapsed/messages" <>
            seq.note,
        json_extra: %{"msgs_per_sec" => rate}
      })
    end)
  end

  # Publishes `cmds` commands of `per` messages while draining the bus, at
  # most 256 commands ahead of what came back; until `total` were received.
  defp pump(bus, batch, per, cmds, got, total) do
    cond do
      got >= total ->
        :ok

      cmds > 0 and total - cmds * per - got < 256 * per ->
        case publish(bus, batch, per) do
          :ok -> pump(bus, batch, per, cmds - 1, got, total)
          :busy -> pump(bus, batch, per, cmds, got + drain(bus), total)
        end

      true ->
        pump(bus, batch, per, cmds, got + drain(bus), total)
    end
  end

  defp publish(bus, [m], 1) do
    case Bus.publish(bus, m) do
      {:ok, _} -> :ok
      {:error, :busy} -> :busy
    end
  end

  defp publish(bus, batch, _) do
    case Bus.publish_many(bus, batch) do
      {:ok, _} -> :ok
      {:error, :busy} -> :busy
    end
  end

  defp drain(bus) do
    case Bus.recv(bus, 5000) do
      {:ok, l} -> length(l)
    end
  end

  defp flat_report(ns, n) do
    ks = [:avg, :min, :max, :p50, :p90, :p99, :p999, :p9999, :p99999]
    Map.merge(Map.new(ks, &{&1, ns}), %{count: n, stdev: 0, tails: []})
  end

  # Each case of @kinds that ran both ways, side by side: p50, p99 and
  # p99.9 (round trips) or msg/s (throughput), and group / single.
  defp compare_group(cases, n, wait) do
    by = Bench.by_name(cases)

    IO.puts(
      "\nA group of #{n} against one node (same run, wait #{wait}; ratio = group / single):"
    )

    rows =
      for kind <- @kinds,
          one = by["tachyon.sequencer.#{kind}"],
          grp = by["tachyon.sequencer.group#{n}.#{kind}"] do
        if one[:rate] do
          [kind, "msg/s", Report.delimit(round(one.rate)), Report.delimit(round(grp.rate))] ++
            [Report.ratio(grp.rate, one.rate)] ++ List.duplicate("", 6)
        else
          Enum.reduce([:p50_ns, :p99_ns, :p999_ns], [kind, "latency"], fn k, row ->
            row ++
              [
                Report.short_ns(Map.fetch!(one, k)),
                Report.short_ns(Map.fetch!(grp, k)),
                Report.ratio(Map.fetch!(grp, k), Map.fetch!(one, k))
              ]
          end)
        end
      end

    header =
      ["case", "", "p50 one", "p50 group", "ratio", "p99 one", "p99 group", "ratio"] ++
        ["p99.9 one", "p99.9 group", "ratio"]

    cpu =
      for kind <- @kinds,
          one = by["tachyon.sequencer.#{kind}"],
          grp = by["tachyon.sequencer.group#{n}.#{kind}"],
          one[:cpu_us_per_msg] && grp[:cpu_us_per_msg] do
        [kind, "cpu us/msg", "#{one.cpu_us_per_msg}", "#{grp.cpu_us_per_msg}"] ++
          [Report.ratio(grp.cpu_us_per_msg, one.cpu_us_per_msg)] ++ List.duplicate("", 6)
      end

    Report.print_rows(header, rows ++ cpu)

    IO.puts(
      "  (throughput rows: msg/s one, msg/s group, ratio in the p50 columns; cpu us/msg: " <>
        "the CPU time of every node's OS process and of this VM per committed message)"
    )
  end
end

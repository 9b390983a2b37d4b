defmodule Tachyon.Bench.Failover do
  @moduledoc false
  # `mix tachyon.bench sequencer --failover`: failover as a member sees it.
  # A group of --group N (3) sequencer nodes, each an OS process of its own
  # on loopback (Tachyon.Sequencer.OSProcess.start_group/2), and a member
  # here doing round trips throughout (Failover.Pinger):
  #
  #   1. --kills N (20) kill -9s of the primary, default options: the
  #      member's gap (the longest pause between two deliveries around the
  #      kill) and the time from the kill to the new primary's role line
  #      (its `at_us` minus the host clock at the kill); the killed node
  #      restarts on its log as a follower before the next kill.
  #   2. The election timeout's trade-off: the same with
  #      --election-timeout 20 and 100 ms, N/4 kills each (at least 3);
  #      "unprovoked": elections no fault caused (a short timeout takes a
  #      busy machine's stall for a dead primary).
  #   3. --pauses N (N) SIGSTOPs of the primary for --pause-ms (300) ms,
  #      longer than the election timeout, with two members: the time to a
  #      new primary, the resumed primary's step-down, and the check that
  #      nothing it did once resumed reached a member: every delivered
  #      entry is in the final logs (Failover.Check), no fork.
  #   4. Two nodes: `--two-nodes available` (the standby takes silence for
  #      death after the election timeout) under the same kill -9s, and
  #      `two_nodes: :safe` with its witness, the :nodedown of the
  #      primary's BEAM node (Failover.Witness: the primary on a :peer
  #      node, the standby in this VM watching it).
  #   5. The replicated table's put (publish until applied locally) against
  #      Tachyon.Table.put/3, with one sequencer node and with the group.
  #
  # Every series ends with Failover.Check over what its members delivered.
  # Extra options: --group N, --kills N, --pauses N, --pause-ms MS,
  # --table-messages N (20,000).

  alias Tachyon.{Bench, Table}
  alias Tachyon.Bench.Failover.{Check, Nodes, Pinger, Witness}
  alias Tachyon.Bench.Report
  alias Tachyon.Sequencer.OSProcess
  alias Tachyon.Table.Replicated

  def run(opts, cfg) do
    n = opts[:group] || 3
    if n < 3, do: Mix.raise("--failover --group N: a majority group, 3 or more nodes")
    kills = opts[:kills] || 20
    few = max(div(kills, 4), 3)
    pause_ms = opts[:pause_ms] || 300

    IO.puts(
      "\nFailover: a group of #{n} sequencer nodes, each an OS process on loopback (unicast bus, " <>
        "wait backoff); a member in this VM doing round trips throughout."
    )

    default = kill_series(opts, "default", n, kills, [])

    series =
      [default] ++
        for et <- [20, 100],
            do: kill_series(opts, "et#{et}", n, few, ["--election-timeout", "#{et}"])

    two = [
      kill_series(opts, "two-available", 2, few, ["--two-nodes", "available"]),
      Witness.run(opts, few)
    ]

    print_kills(n, series, two)
    pause = pause_series(opts, n, opts[:pauses] || kills, pause_ms)
    print_pause(pause, pause_ms)

    cases = table_cases(opts, cfg, n)
    Report.print_table(cases, "tachyon.table.put")
    goals = print_goals(opts, default, pause, [series, two])

    Report.write_json(opts[:json], "failover", cases, %{
      "goals" => goals,
      "group" => n,
      "takeovers" => Enum.map(series ++ two, &json_series/1),
      "pauses" => json_series(pause) |> Map.put("pause_ms", pause_ms)
    })

    cases
  end

  # -- kill -9 ------------------------------------------------------------------

  defp kill_series(opts, label, n, kills, extra) do
    # (On a failure the bench raises, keeping the logs; the nodes' OS
    # processes end with this VM.)
    base = Bench.tmp_dir(opts, "failover-#{label}")
    g = Nodes.start(base, n, extra)
    pinger = Pinger.start(g.group, 1)
    {g, _} = warm(g, [pinger])
    {samples, g} = Enum.map_reduce(1..kills, g, fn _, g -> kill_one(g, pinger) end)
    result = Pinger.stop(pinger)
    Nodes.stop(g)

    s = %{
      label: label,
      nodes: n,
      extra: extra,
      election_timeout: et(extra),
      samples: samples,
      unprovoked: g.unprovoked,
      check: Check.run([result], g.dirs, g.primary.id)
    }

    keep_if_bad(s, base)
  end

  defp keep_if_bad(s, base) do
    if Check.ok?(s.check) do
      File.rm_rf!(base)
      s
    else
      IO.puts("  #{s.label}: logs kept in #{base}; #{inspect(s.check.examples, limit: 20)}")
      Map.put(s, :kept, base)
    end
  end

  defp et(extra) do
    case Enum.drop_while(extra, &(&1 != "--election-timeout")) do
      [_, ms | _] -> String.to_integer(ms)
      [] -> 50
    end
  end

  # Lets the members run a little, forgets what the start looked like.
  defp warm(g, pingers) do
    Process.sleep(300)
    g = Nodes.settle(g)
    r = Pinger.report(hd(pingers))
    {%{g | unprovoked: 0, epoch: max(g.epoch, r.stats.epoch)}, r}
  end

  defp kill_one(g, pinger) do
    g = Nodes.settle(g)
    :ok = Pinger.mark(pinger)
    victim = g.primary
    at = Nodes.kill(victim)
    {took, g2} = new_primary!(g, "kill -9", pinger)
    r = settled_report(pinger, took, [])
    g2 = Nodes.restart(g2, victim)
    Process.sleep(300)

    {%{role_us: took.at_us - at, gap_us: r.max_gap_us, terms: took.epoch - g.epoch}, g2}
  end

  defp new_primary!(g, what, pinger, cleanup \\ fn -> :ok end) do
    case Nodes.await_new_primary(g, 10_000) do
      {:ok, took, g2} ->
        {took, g2}

      {:error, :timeout} ->
        cleanup.()

        Mix.raise(
          "failover bench: no new primary within 10 s after #{what} of node #{g.primary.id} " <>
            "(epoch #{g.epoch}) in #{inspect(g.group)}; the others' lines since: " <>
            "#{inspect(Nodes.lines(g))}; member: #{inspect(Pinger.report(pinger))}; " <>
            "logs kept in #{Path.dirname(hd(g.dirs))}"
        )
    end
  end

  # The member's report once it delivered after the new primary's line,
  # and 200 ms more (a resend or a gap fill after the first delivery counts).
  defp settled_report(pinger, took, others) do
    case Pinger.await_delivery_after(pinger, took.at_us, 10_000) do
      {:ok, _} ->
        Enum.each(others, &Pinger.await_delivery_after(&1, took.at_us, 10_000))
        Process.sleep(200)
        Pinger.report(pinger)

      {:error, r} ->
        Mix.raise(
          "failover bench: the member delivered nothing within 10 s of the new primary " <>
            "(node #{took.node.id}, epoch #{took.epoch}): #{inspect(r)}"
        )
    end
  end

  # -- SIGSTOP ------------------------------------------------------------------

  defp pause_series(opts, n, pauses, pause_ms) do
    base = Bench.tmp_dir(opts, "failover-pause")
    g = Nodes.start(base, n, [])
    pingers = [Pinger.start(g.group, 1), Pinger.start(g.group, 2)]
    {g, _} = warm(g, pingers)
    {samples, g} = Enum.map_reduce(1..pauses, g, fn _, g -> pause_one(g, pingers, pause_ms) end)
    results = Enum.map(pingers, &Pinger.stop/1)
    Nodes.stop(g)

    s = %{
      label: "sigstop",
      nodes: n,
      extra: [],
      election_timeout: 50,
      samples: samples,
      unprovoked: g.unprovoked,
      check: Check.run(results, g.dirs, g.primary.id)
    }

    keep_if_bad(s, base)
  end

  defp pause_one(g, [p1 | rest] = pingers, pause_ms) do
    g = Nodes.settle(g)
    Enum.each(pingers, &Pinger.mark/1)
    stale0 = stale(pingers)
    victim = g.primary
    at = Nodes.signal(victim, "STOP")
    cont = fn -> Nodes.signal(victim, "CONT") end
    {took, g2} = new_primary!(g, "SIGSTOP", p1, cont)
    Process.sleep(max(0, pause_ms - div(System.os_time(:microsecond) - at, 1000)))
    resumed = cont.()

    down =
      case OSProcess.await_role([victim], "follower", 10_000) do
        {:ok, down} ->
          down

        {:error, :timeout} ->
          Mix.raise(
            "failover bench: the resumed primary (node #{victim.id}) did not step down in 10 s; " <>
              "its lines: #{inspect(Nodes.lines(%{g2 | primary: victim, others: []}))}"
          )
      end

    r = settled_report(p1, took, rest)

    {%{
       role_us: took.at_us - at,
       gap_us: r.max_gap_us,
       terms: took.epoch - g.epoch,
       stepdown_us: down.at_us - resumed,
       stale: stale(pingers) - stale0
     }, g2}
  end

  defp stale(pingers), do: Enum.sum(for p <- pingers, do: Pinger.report(p).stats.stale_epoch)

  # -- printing -----------------------------------------------------------------

  defp print_kills(n, series, two) do
    IO.puts("""

    Takeover after kill -9 of the primary (a member in this VM doing round trips; ms):
      member gap: the longest pause between two deliveries around the kill;
      role line: from the kill to the new primary's role line (its at_us: the host's clock;
      the node polls its role every 1 ms);
      terms: elections per kill (1: the first one won); unprovoked: elections with no kill.
    """)

    header =
      ["nodes", "election_timeout", "kills", "member gap min / p50 / max"] ++
        ["role line min / p50 / max", "terms", "unprovoked", "check"]

    rows =
      for s <- series ++ two do
        what =
          case s do
            %{label: "default"} -> "#{n} (defaults)"
            %{label: "two-available"} -> "2, available"
            %{label: "two-safe"} -> "2, safe (witness)"
            _ -> "#{n}"
          end

        [what, "#{s.election_timeout}", "#{length(s.samples)}"] ++
          [triple(s.samples, :gap_us), triple(s.samples, :role_us)] ++
          [terms(s.samples), "#{s.unprovoked}", if(Check.ok?(s.check), do: "ok", else: "FORK")]
      end

    Report.print_rows(header, rows)
    for s <- series ++ two, do: IO.puts("  #{s.label}: " <> Check.summary(s.check))
  end

  defp print_pause(s, pause_ms) do
    IO.puts("""

    SIGSTOP of the primary for #{pause_ms} ms, #{length(s.samples)} times (two members in this VM doing round trips; ms):
      role line: from the SIGSTOP to the new primary's role line; step-down: from the SIGCONT to
      the resumed primary's follower line; stale: datagrams of an old term the members dropped.
    """)

    Report.print_rows(
      ["member gap min / p50 / max", "role line min / p50 / max", "step-down min / p50 / max"] ++
        ["terms", "stale", "unprovoked"],
      [
        [triple(s.samples, :gap_us), triple(s.samples, :role_us), triple(s.samples, :stepdown_us)] ++
          [terms(s.samples), "#{Enum.sum(Enum.map(s.samples, & &1.stale))}", "#{s.unprovoked}"]
      ]
    )

    IO.puts("  " <> Check.summary(s.check))
  end

  defp triple([], _key), do: "-"

  defp triple(samples, key) do
    sorted = samples |> Enum.map(&Map.fetch!(&1, key)) |> Enum.sort()
    ms = fn us -> :erlang.float_to_binary(us / 1000, decimals: 1) end

    "#{ms.(hd(sorted))} / #{ms.(Enum.at(sorted, div(length(sorted), 2)))} / #{ms.(List.last(sorted))}"
  end

  defp terms(samples) do
    ts = Enum.map(samples, & &1.terms)
    if ts == [], do: "-", else: "#{Enum.min(ts)}-#{Enum.max(ts)}"
  end

  defp p50(samples, key) do
    sorted = samples |> Enum.map(&Map.fetch!(&1, key)) |> Enum.sort()
    Enum.at(sorted, div(length(sorted), 2))
  end

  defp print_goals(opts, default, pause, all) do
    gap = p50(default.samples, :gap_us) / 1000
    checks = [pause.check | for(s <- List.flatten(all), do: s.check)]

    goals = [
      Bench.goal(
        "takeover as a member sees it after kill -9 of the primary, default options (p50)",
        :erlang.float_to_binary(gap, decimals: 1) <> " ms",
        "under 100 ms",
        gap < 100
      ),
      Bench.goal(
        "every series checked against the nodes' final logs",
        if(Enum.all?(checks, &Check.ok?/1), do: "no fork, nothing lost", else: "see above"),
        "no fork and nothing lost",
        Enum.all?(checks, &Check.ok?/1)
      )
    ]

    spec = %{Tachyon.Bench.Sequencer.spec() | name: "sequencer --failover", full: [kills: 20]}
    Bench.print_goals(goals, Keyword.put_new(opts, :kills, 20), spec)
  end

  defp json_series(s) do
    %{
      "label" => s.label,
      "nodes" => s.nodes,
      "args" => s.extra,
      "election_timeout_ms" => s.election_timeout,
      "unprovoked_elections" => s.unprovoked,
      "samples" =>
        Enum.map(s.samples, fn x -> Map.new(x, fn {k, v} -> {Atom.to_string(k), v} end) end),
      "check" => s.check |> Map.delete(:examples) |> Map.new(fn {k, v} -> {"#{k}", v} end)
    }
  end

  # -- the replicated table -----------------------------------------------------

  defp table_cases(opts, cfg, n) do
    count = opts[:table_messages] || 20_000
    base = Bench.tmp_dir(opts, "failover-table")
    value = :binary.copy("v", cfg.size)

    try do
      {:ok, p} =
        OSProcess.start(["--path", Path.join(base, "seq"), "--port", "0", "--wait", "backoff"])

      rep =
        try do
          replicated_put("tachyon.table.replicated.put", base, "rep", p.address, count, value)
        after
          OSProcess.kill(p)
        end

      g = Nodes.start(Path.join(base, "group"), n, [])

      rep_g =
        try do
          name = "tachyon.table.replicated.put.group#{n}"
          replicated_put(name, base, "rep-group", g.group, count, value)
        after
          Nodes.stop(g)
        end

      {:ok, t} = Table.open(Path.join(base, "local"))

      local =
        Bench.measure("tachyon.table.put", count, div(count, 10), cfg.size, fn ->
          :ok = Table.put(t, "k#{:rand.uniform(10_000)}", value)
        end)

      Table.close(t)
      [local, rep, rep_g]
    after
      File.rm_rf!(base)
    end
  end

  defp replicated_put(name, base, sub, sequencer, count, value) do
    {:ok, r} =
      Replicated.start_link(path: Path.join(base, sub), sequencer: sequencer, member_id: 1)

    c =
      Bench.measure(name, count, div(count, 10), byte_size(value), fn ->
        :ok = Replicated.put(r, "k#{:rand.uniform(10_000)}", value)
      end)

    GenServer.stop(r)
    c
  end
end

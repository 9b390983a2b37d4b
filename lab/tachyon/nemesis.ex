defmodule Tachyon.Nemesis do
  @moduledoc false
  # The nemesis (`mix tachyon.nemesis`, test/tachyon/nemesis_test.exs): a
  # group of three sequencer nodes and three members, each in a network
  # namespace of its own (`Tachyon.Nemesis.Cluster`), the members
  # publishing throughout and writing to replicated tables; every 1-2 s a
  # fault on a random node or link (`Tachyon.Nemesis.Faults`, a schedule
  # drawn from the seed). Then everything is healed, the members drain the
  # bus to the end of the nodes' logs, and `Tachyon.Nemesis.Check` judges
  # what they delivered against the logs.
  #
  # The soak (`Tachyon.Nemesis.Soak`) runs the same loop with `:hooks`, a
  # module called at its steps: `init(st)` (once the members publish: more
  # agenda entries `{at_ms, kind, data}` and its own state in `st.ext`),
  # `act(kind, data, st)` (an agenda entry of a kind of its own), `line(st,
  # port, line)` and `exited(st, port, status)` (of an OS process it
  # started; `port` is `{:member, id}` for a member's line, `{:node, id}`
  # for a node's stats line), `check(st,
  # logs, results)` (at the end: `{st, results, violations}`, the members'
  # results as the checks take them and more violations of its own; the
  # report's `ext` is `st.ext`).

  alias Tachyon.Nemesis.{Check, Cluster, Faults, Member, NetNS}
  alias Tachyon.Sequencer.OSProcess

  @members ["m1", "m2", "m3"]
  @ids [1, 2, 3]

  @defaults %{
    seconds: 60,
    seed: nil,
    rate: 500,
    election_timeout: nil,
    durability: nil,
    loss: true,
    auth: true,
    tables: true,
    dir: nil,
    keep: false,
    replace: true,
    kinds: nil,
    extra: [],
    member: %{},
    hooks: nil,
    out: &IO.puts/1
  }

  @doc """
  Runs the nemesis; returns `{:ok, report}` (see `format/1`; `report.violations`
  is empty when every check held) or `{:error, why}` where namespaces cannot
  be made. Options: `:seconds` (60), `:seed` (random), `:rate` (messages a
  second per member, 500), `:election_timeout` (ms, the nodes' default),
  `:durability` (`"fsync"` or `"replicated"`: the nodes' `--durability`;
  their default),
  `:loss` (true: lossy links among the faults), `:auth` (true: every
  node and member holds the group's key, made in `:dir`; false: none), `:replace` (true: host
  replacements among the faults), `:kinds` (only these kinds of
  fault; nil: all), `:tables` (true: replicated
  tables on the members), `:extra` (more `mix tachyon.sequencer` arguments
  for every node), `:member` (more `Tachyon.Nemesis.Member` configuration
  for every member), `:hooks` (see the moduledoc; nil), `:dir` (a temporary one), `:keep` (keep `:dir`;
  it is kept anyway after a violation or a failure, with the nodes' logs,
  the members' results and `report.txt`),
  `:out` (a function given each progress line; `IO.puts/1`).
  """
  def run(opts \\ []) do
    o = Map.merge(@defaults, Map.new(opts))
    o = %{o | seed: o.seed || :rand.uniform(1_000_000_000)}
    prefix = "nm#{rem(String.to_integer(System.pid()), 100_000)}"

    dir =
      o.dir ||
        Path.join(System.tmp_dir!(), "tachyon-nemesis-#{System.unique_integer([:positive])}")

    with :ok <- NetNS.probe(prefix) do
      loss = if o.loss, do: NetNS.loss_available?(prefix), else: {:error, "turned off"}
      kinds = if loss == :ok, do: Faults.kinds(), else: Faults.kinds() -- [:loss]
      kinds = if o.replace, do: kinds, else: kinds -- [:replace]
      kinds = if o.kinds, do: Enum.filter(kinds, &(&1 in o.kinds)), else: kinds

      extra =
        if(o.election_timeout, do: ["--election-timeout", "#{o.election_timeout}"], else: []) ++
          if(o.durability, do: ["--durability", "#{o.durability}"], else: []) ++ o.extra

      File.rm_rf!(dir)
      {:ok, c} = Cluster.up(prefix, 3, @members, dir, extra: extra, auth: o.auth)

      try do
        report = go(c, o, kinds, loss)
        File.write!(Path.join(dir, "report.txt"), Enum.join(format(report), "\n") <> "\n")
        if report.violations != [], do: o.out.("nemesis: violations: #{dir} is kept")
        {:ok, Map.put(report, :dir, dir)}
      rescue
        e ->
          o.out.("nemesis: failed: #{dir} is kept")
          reraise e, __STACKTRACE__
      else
        {:ok, %{violations: []}} = ok ->
          unless o.keep, do: File.rm_rf(dir)
          ok

        other ->
          other
      after
        Cluster.down(c)
      end
    end
  end

  defp go(c, o, kinds, loss) do
    sched = Faults.schedule(o.seed, o.seconds * 1000, kinds, 3, c.node_names ++ @members)

    o.out.(
      "nemesis: seed #{o.seed}, #{o.seconds} s, 3 nodes (durability: #{o.durability || "replicated"}) " <>
        "and 3 members (#{o.rate} messages/s each)" <>
        ", #{length(sched)} faults scheduled of #{inspect(kinds)}" <>
        case loss do
          :ok -> " (loss: tc htb + cBPF random drop on the veth)"
          {:error, why} -> " (no lossy links: #{why})"
        end
    )

    {:ok, nodes, view} = Cluster.start_nodes(c, 120_000)
    nodes = Map.new(nodes, &{&1.id, Map.put(&1, :state, :up)})
    mdir = Path.join(c.dir, "members")

    members =
      for {host, id} <- Enum.zip(@members, @ids), into: %{} do
        cfg = Map.merge(%{ids: [id], dir: mdir, rate: o.rate, table: o.tables}, o.member)
        {id, Cluster.spawn_members(c, host, cfg)}
      end

    for {id, m} <- members, do: :ok = Cluster.await_members(m, "member joined", [id], 120_000)
    Cluster.signal_file(Path.join(mdir, "go"))

    st = %{
      c: c,
      o: o,
      nodes: nodes,
      view: view,
      members: members,
      agenda: Enum.map(sched, &{&1.at, :inject, &1}),
      log: [],
      counts: %{},
      problems: [],
      replacements: [],
      ext: nil,
      t0: mono(),
      t0_os: System.os_time(:millisecond)
    }

    st = if o.hooks, do: o.hooks.init(st), else: st

    st = loop(st, st.t0 + o.seconds * 1000)
    o.out.("nemesis: #{o.seconds} s done; healing everything")
    st = st |> heal_all() |> await_nodes_up(mono() + 120_000)
    finish(st, mdir)
  end

  defp mono, do: System.monotonic_time(:millisecond)
  defp rel(st), do: mono() - st.t0

  # -- the run ------------------------------------------------------------------------

  defp loop(st, end_at) do
    st = due(st)

    if mono() >= end_at do
      st
    else
      next = Enum.min([end_at | Enum.map(st.agenda, fn {at, _, _} -> st.t0 + at end)])
      st |> receive_one(max(0, next - mono())) |> loop(end_at)
    end
  end

  # Acts on the agenda's entries that are due.
  defp due(st) do
    now = rel(st)
    {due, later} = Enum.split_with(st.agenda, fn {at, _, _} -> at <= now end)
    Enum.reduce(due, %{st | agenda: later}, &act/2)
  end

  @doc false
  # Adds an entry `{at_ms, kind, data}` to the agenda (for the hooks too).
  def schedule(st, entry), do: %{st | agenda: Enum.sort([entry | st.agenda])}

  defp act({_at, :inject, f}, st) do
    t = mono()

    case Faults.inject(f, st.c, st.nodes) do
      {:ok, nodes} ->
        st =
          note(st, :inject, f, Faults.describe(f) <> took(t))
          |> Map.put(:nodes, nodes)
          |> Map.update!(:counts, &Map.update(&1, f.kind, 1, fn n -> n + 1 end))

        if f.kind == :replace,
          do: act({0, :replace_ask, f.target}, st),
          else: schedule(st, {f.at + f.dur, :heal, f})

      {:skip, why} ->
        note(st, :skip, f, "skipped: #{Faults.describe(f)} (#{why})")
        |> Map.update!(:counts, &Map.update(&1, :skipped, 1, fn n -> n + 1 end))
    end
  end

  # Asks for a removal (again: after an error, or when no answer came in
  # 6 s, the asked node killed or stopped meanwhile; a change's own timeout
  # is 5 s).
  defp act({_at, :replace_ask, id}, st) do
    case st.nodes[id] do
      %{state: :replacing, replace: r} = n ->
        n = %{n | replace: Map.update(r, :asks, 1, &(&1 + 1))}
        st = %{st | nodes: Map.put(st.nodes, id, n)}

        case Faults.replace_ask(id, st.nodes, st.view) do
          :ok -> schedule(st, {rel(st) + 6000, :replace_unanswered, {id, n.replace.asks}})
          {:error, :no_node} -> schedule(st, {rel(st) + 200, :replace_ask, id})
        end

      _ ->
        st
    end
  end

  defp act({_at, :replace_unanswered, {id, asks}}, st) do
    case st.nodes[id] do
      %{state: :replacing, replace: %{asks: ^asks}} -> act({0, :replace_ask, id}, st)
      _ -> st
    end
  end

  defp act({_at, kind, data}, st) when kind not in [:heal],
    do: st.o.hooks.act(kind, data, st)

  defp act({_at, :heal, f}, st) do
    t = mono()
    nodes = Faults.heal(f, st.c, st.nodes)
    note(%{st | nodes: nodes}, :heal, f, "healed: #{Faults.describe(f)}#{took(t)}")
  end

  # How long an injection or a heal took, when it is long enough to tell.
  defp took(t) do
    case mono() - t do
      ms when ms >= 200 -> " (took #{ms} ms)"
      _ -> ""
    end
  end

  @doc false
  # A line of progress, `what` (`:inject`, `:heal`, `:up`, ...) with `f` in
  # the run's log (for the hooks too).
  def note(st, what, f, text) do
    t = rel(st)
    st.o.out.("  +#{:erlang.float_to_binary(t / 1000, decimals: 3)} s #{text}")
    %{st | log: [{t, what, f} | st.log]}
  end

  defp receive_one(st, timeout) do
    receive do
      {port, {:data, {:eol, line}}} -> line(st, port, line)
      {port, {:exit_status, status}} -> exited(st, port, status)
    after
      timeout -> st
    end
  end

  defp node_of(st, port), do: Enum.find(Map.values(st.nodes), &(&1.port == port))
  defp member_of(st, port), do: Enum.find(st.members, fn {_, m} -> m.port == port end)

  defp line(st, port, line) do
    case {node_of(st, port), member_of(st, port)} do
      {%{id: id}, _} ->
        st |> replace_line(id, line) |> node_line(id, line)

      {nil, {id, _}} ->
        if String.starts_with?(line, "member crashed"),
          do: problem(st, "member #{id}: #{line}"),
          else: member_line(st, id, line)

      _ ->
        if st.o.hooks, do: st.o.hooks.line(st, port, line), else: st
    end
  end

  defp member_line(%{o: %{hooks: nil}} = st, _id, _line), do: st
  defp member_line(st, id, line), do: st.o.hooks.line(st, {:member, id}, line)

  defp replace_line(st, id, line) do
    case Faults.replace_line(st.c, st.nodes, id, line) do
      {:ok, nodes} ->
        %{st | nodes: nodes}

      {:retry, nodes} ->
        target = Enum.find(Map.values(nodes), &(&1.state == :replacing)).id
        schedule(%{st | nodes: nodes}, {rel(st) + 200, :replace_ask, target})

      {:removed, nodes} ->
        n = Enum.find(Map.values(nodes), &(&1.state == :joining))

        text =
          "node #{n.id} removed (#{n.replace.removed_ms} ms after its kill), a new disk joins"

        note(%{st | nodes: nodes}, :removed, n.id, text)

      {:done, nodes, r} ->
        text =
          "node #{r.node} replaced: a voter, caught up, #{r.ms} ms after its kill " <>
            "(removed after #{r.removed_ms} ms)"

        note(%{st | nodes: nodes, replacements: st.replacements ++ [r]}, :up, r.node, text)
    end
  end

  defp node_line(st, id, line) do
    n = st.nodes[id]

    cond do
      String.starts_with?(line, "tachyon.sequencer ready") and n.state == :starting ->
        note(
          %{st | nodes: Map.put(st.nodes, id, %{n | state: :up})},
          :up,
          id,
          "node #{id} up"
        )

      String.starts_with?(line, "tachyon.sequencer stats ") and st.o.hooks != nil ->
        st.o.hooks.line(st, {:node, id}, line)

      true ->
        %{st | view: Cluster.role_line(st.view, id, line)}
    end
  end

  defp exited(st, port, status) do
    case {node_of(st, port), member_of(st, port)} do
      {%{id: id} = n, _} ->
        st = problem(st, "node #{id} exited by itself (status #{status}) at +#{rel(st)} ms")
        %{st | nodes: Map.put(st.nodes, id, %{n | state: :down})}

      {nil, {id, _}} ->
        problem(st, "member #{id}'s OS process exited (status #{status}) before the end")

      _ ->
        if st.o.hooks, do: st.o.hooks.exited(st, port, status), else: st
    end
  end

  @doc false
  # Something wrong seen during the run (for the hooks too): a violation.
  def problem(st, text) do
    st.o.out.("  problem: #{text}")
    %{st | problems: st.problems ++ [text]}
  end

  # Heals every fault still on, at once; restarts any node that is down.
  defp heal_all(st) do
    heals = for {_, :heal, f} <- st.agenda, do: f
    asks = for {_, k, _} = e <- st.agenda, k in [:replace_ask, :replace_unanswered], do: e
    st = Enum.reduce(heals, %{st | agenda: asks}, &act({0, :heal, &1}, &2))

    Enum.reduce(Map.values(st.nodes), st, fn
      %{state: :down, id: id}, st ->
        n = Cluster.spawn_node(st.c, id, false)
        %{st | nodes: Map.put(st.nodes, id, Map.put(n, :state, :starting))}

      _, st ->
        st
    end)
  end

  defp await_nodes_up(st, deadline) do
    cond do
      Enum.all?(Map.values(st.nodes), &(&1.state == :up)) ->
        st

      mono() > deadline ->
        problem(
          st,
          "nodes not up after healing: #{inspect(Map.new(st.nodes, &{elem(&1, 0), elem(&1, 1).state}))}"
        )

      true ->
        st |> due() |> receive_one(100) |> await_nodes_up(deadline)
    end
  end

  # -- the end: members drain to the end of the logs; the checks ------------------------

  defp finish(st, mdir) do
    Cluster.signal_file(Path.join(mdir, "stop"))
    st = await_members(st, "member quiet", 240_000)
    dirs = for id <- 0..2, do: Cluster.node_dir(st.c, id)

    st =
      case Cluster.await_logs_settled(dirs, 120_000) do
        {:ok, _} -> st
        {:error, lengths} -> problem(st, "the nodes' logs did not settle: #{inspect(lengths)}")
      end

    target =
      case Cluster.messages(Cluster.log(hd(dirs))) do
        [] -> 0
        msgs -> msgs |> List.last() |> elem(0)
      end

    Cluster.signal_file(Path.join(mdir, "final"), "#{target}")
    st = await_members(st, "member done", 240_000)
    OSProcess.kill_all(Map.values(st.nodes))
    {:ok, view} = Cluster.watch(Map.values(st.nodes), st.view, & &1, 0)
    logs = Enum.map(dirs, &Cluster.log/1)

    {results, missing} =
      Enum.reduce(@ids, {[], []}, fn id, {rs, miss} ->
        case Member.read_result(mdir, id) do
          {:ok, r} -> {rs ++ [r], miss}
          {:error, why} -> {rs, miss ++ ["member #{id} wrote no result (#{inspect(why)})"]}
        end
      end)

    {st, results, more} =
      if st.o.hooks, do: st.o.hooks.check(st, logs, results), else: {st, results, []}

    violations = Check.all(logs, results, @ids) ++ missing ++ more
    report(%{st | view: view}, logs, results, violations)
  end

  defp await_members(st, prefix, timeout) do
    Enum.reduce(st.members, st, fn {id, m}, st ->
      case Cluster.await_members(m, prefix, [id], timeout) do
        :ok -> st
        {:error, why} -> problem(st, "member #{id}: no \"#{prefix}\": #{inspect(why)}")
      end
    end)
  end

  defp report(st, logs, results, violations) do
    order = Cluster.messages(hd(logs))
    ok = Enum.reject(results, &Map.has_key?(&1, :crashed))

    gap =
      case Enum.max_by(ok, & &1.max_gap, fn -> nil end) do
        nil ->
          nil

        r ->
          ends = (r.gap_at || st.t0_os) - st.t0_os

          %{
            ms: r.max_gap,
            member: r.id,
            ends: ends,
            faults: faults_in(st, ends - r.max_gap, ends)
          }
      end

    %{
      seed: st.o.seed,
      seconds: st.o.seconds,
      durability: st.o.durability || "replicated",
      faults: Map.new(Faults.kinds(), &{&1, Map.get(st.counts, &1, 0)}),
      replacements: st.replacements,
      ext: st.ext,
      replacing: for(%{state: s, id: id} <- Map.values(st.nodes), s != :up, do: {id, s}),
      skipped: Map.get(st.counts, :skipped, 0),
      elections: MapSet.size(st.view.epochs),
      max_epoch: Enum.max(st.view.epochs, fn -> 0 end),
      log_entries: length(hd(logs)),
      log_ranges: Enum.map(logs, &{Cluster.first_index(&1), &1 |> List.last() |> elem(0)}),
      messages: length(order),
      gap: gap,
      members: Enum.map(results, &member_summary/1),
      table: table_summary(ok),
      problems: st.problems,
      violations: violations ++ st.problems,
      schedule: Enum.reverse(st.log)
    }
  end

  # The faults on between `from` and `to` (ms from the start).
  defp faults_in(st, from, to) do
    log = Enum.reverse(st.log)

    # A killed node's fault lasts until it is up again.
    over = fn f, healed ->
      if f.kind == :kill,
        do:
          Enum.find_value(log, to, fn {u, w, id} ->
            w == :up and id == f.target and u >= healed and u
          end),
        else: healed
    end

    healed = fn f ->
      over.(f, Enum.find_value(log, to, fn {h, w, g} -> w == :heal and g == f and h end))
    end

    for {t, :inject, f} <- log,
        t <= to and healed.(f) >= from,
        do: "+#{t} ms #{Faults.describe(f)}"
  end

  defp member_summary(%{crashed: why, id: id}), do: %{id: id, crashed: why}

  defp member_summary(r) do
    %{
      id: r.id,
      acked: r.acked,
      delivered: length(r.delivered),
      errors: r.errors,
      forks: r.stats.forks,
      renumbered: r.stats.renumbered,
      max_gap: r.max_gap,
      quiet: r.quiet_ok,
      final: r.final_ok,
      writes: r.writes
    }
  end

  defp table_summary(results) do
    case for %{table: %{} = t} <- results, do: t do
      [] -> nil
      [t | _] = ts -> %{keys: map_size(t.map), equal: Enum.all?(ts, &(&1.map == t.map))}
    end
  end

  defp replacements(%{replacements: [], replacing: []}), do: []

  defp replacements(r) do
    done =
      Enum.map_join(
        r.replacements,
        ", ",
        &"node #{&1.node} in #{&1.ms} ms (removed in #{&1.removed_ms})"
      )

    ["host replacements: #{length(r.replacements)} done (voter and caught up): #{done}"] ++
      for({id, s} <- r.replacing, do: "  node #{id} not done: #{s}")
  end

  @doc "The report as lines of text."
  def format(r) do
    faults = Enum.map_join(r.faults, ", ", fn {k, n} -> "#{k} #{n}" end)

    gap =
      case r.gap do
        nil ->
          "none"

        g ->
          "#{g.ms} ms (member #{g.member}, ending at +#{g.ends} ms; faults then: " <>
            if(g.faults == [], do: "none", else: Enum.join(g.faults, "; ")) <> ")"
      end

    members =
      for m <- r.members do
        if m[:crashed],
          do: "  member #{m.id}: crashed",
          else:
            "  member #{m.id}: #{m.acked} publishes acknowledged, #{m.delivered} delivered, " <>
              "errors #{inspect(m.errors)}, forks #{m.forks}, renumbered #{m.renumbered}, " <>
              "longest gap #{m.max_gap} ms, table writes #{inspect(m.writes)}"
      end

    table =
      case r.table do
        nil -> []
        t -> ["replicated tables: #{t.keys} keys, #{if t.equal, do: "equal", else: "NOT equal"}"]
      end

    result =
      case r.violations do
        [] -> ["result: OK, 0 violations"]
        vs -> ["result: #{length(vs)} VIOLATIONS"] ++ Enum.map(vs, &"  - #{&1}")
      end

    [
      "nemesis: seed #{r.seed}, #{r.seconds} s, durability #{r.durability}",
      "faults: #{faults} (skipped #{r.skipped})"
    ] ++
      [
        "elections: #{r.elections} (terms with a primary; highest epoch #{r.max_epoch})",
        "log: #{r.log_entries} entries, #{r.messages} messages; each node's first and last " <>
          "index: #{Enum.map_join(r.log_ranges, ", ", fn {a, b} -> "#{a}..#{b}" end)}",
        "longest member-seen gap: #{gap}"
      ] ++ replacements(r) ++ members ++ table ++ result
  end
end

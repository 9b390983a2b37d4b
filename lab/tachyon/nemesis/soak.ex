defmodule Tachyon.Nemesis.Soak do
  @moduledoc false
  # The soak (`mix tachyon.soak`, issue 29): the nemesis's run
  # (`Tachyon.Nemesis`, its loop, faults and checks) for minutes, with the
  # nodes' retention on, the members' replicated tables publishing
  # snapshots, a new member joining from the latest snapshot every minute
  # (in an OS process of its own on member 1's host: it catches up with the
  # log's end as it was when it started, and its deliveries are checked), a
  # node's host replaced every few minutes (the `:replace` fault), and the
  # nemesis's other faults throughout. This module is the nemesis's
  # `:hooks` (see `Tachyon.Nemesis`).
  #
  # Every minute a row: the log's bytes on disk per node (`du`), the RSS
  # (VmRSS, and RssAnon: VmRSS less the mapped files' pages, such as a
  # table's or a log's segments, which the kernel can drop) and open file
  # descriptors of every node's and members' OS
  # process, the messages delivered a second (per member), the longest gap
  # between a member's deliveries, the checks run and violated so far, the
  # replacements and joins done. The checks each minute are incremental,
  # on each node's log up to its commit index (from its stats line, every
  # second): the nodes' logs agree where they overlap; their messages are
  # recorded in a window (the order); each
  # member's deliveries since the last minute (spilled to a file by the
  # member) are exactly the window's messages from its last one on, no gap;
  # a joiner's are the window's from its snapshot's position on. At the
  # end, the nemesis's full check on the final logs.

  alias Tachyon.Nemesis
  alias Tachyon.Nemesis.{Check, Cluster, Member, SoakReport}
  alias Tachyon.Sequencer.OSProcess

  @defaults %{
    minutes: 30,
    minute_ms: 60_000,
    seed: nil,
    rate: 200,
    retention_bytes: 16 * 1024 * 1024,
    segment_size: 4 * 1024 * 1024,
    snapshot_every: 1000,
    replace_every: 5,
    durability: nil,
    out: "soak",
    print: &IO.puts/1
  }
  @members [1, 2, 3]

  # The members' replicated tables hold a few dozen keys: sized for that
  # (Tachyon.Table's "To size it"), as an operator would. With the defaults
  # (64 MiB segments, 4 prepared and pre-touched) a table's mapped segments
  # ramp up to ~320 MiB ahead of its data over the first half hour, all of
  # it resident: the soak's first run saw a member's VmRSS go from 81 to
  # 376 MiB in 30 minutes while its RssAnon stayed at 30-34 MiB.
  @table_opts [
    segment_size: 4 * 1024 * 1024,
    initial_segment_size: 1024 * 1024,
    prepared_segments: 1
  ]

  @doc """
  Runs the soak: `{:ok, summary}` (`summary.ok` false when anything
  failed) or `{:error, why}` (no namespaces here). Options: `:minutes`
  (30), `:minute_ms` (60,000: the row's period; shorter in tests),
  `:seed`, `:rate` (messages a second per member, 200), `:retention_bytes`
  (16 MiB), `:segment_size` (4 MiB), `:snapshot_every` (1000 writes),
  `:replace_every` (minutes, 5), `:durability`, `:out` (the directory of
  `soak.csv` and `soak.svg`), `:print` (each line).
  """
  def run(opts \\ []) do
    o = Map.merge(@defaults, Map.new(opts))
    File.mkdir_p!(o.out)

    nemesis = [
      seconds: div(o.minutes * o.minute_ms, 1000),
      seed: o.seed,
      rate: o.rate,
      durability: o.durability,
      replace: false,
      extra:
        ["--retention-bytes", "#{o.retention_bytes}", "--segment-size", "#{o.segment_size}"] ++
          ["--stats-interval", "1000"],
      member: %{
        spill: true,
        tick_ms: 1000,
        snapshot_every: o.snapshot_every,
        table_opts: @table_opts
      },
      hooks: __MODULE__,
      soak: o,
      out: o.print
    ]

    with {:ok, report} <- Nemesis.run(nemesis) do
      rows = Enum.reverse(report.ext.rows)
      SoakReport.write_csv(Path.join(o.out, "soak.csv"), rows)
      SoakReport.write_svg(Path.join(o.out, "soak.svg"), rows, SoakReport.caption(o, report))
      s = SoakReport.summary(o, report, rows)
      Enum.each(format(s), o.print)
      {:ok, s}
    end
  end

  # -- the hooks ----------------------------------------------------------------------

  @doc false
  def init(st) do
    o = st.o.soak
    m = o.minute_ms
    samples = for k <- 1..o.minutes, do: {k * m, :sample, k}
    joins = for k <- 1..o.minutes, do: {k * m - div(m, 2), :join, k}
    n = div(o.minutes, o.replace_every)
    replaces = for k <- 1..n//1, do: {k * o.replace_every * m - div(m, 2) + 5000, :replace, k}

    ext = %{
      rows: [],
      ticks: %{},
      prev_delivered: 0,
      window: %{},
      hi: 0,
      his: [],
      holes: [],
      commits: %{},
      erlang_kb: %{},
      unchecked: 0,
      members: Map.new(@members, &{&1, %{off: 0, last: nil, pending: []}}),
      checks: 0,
      violations: [],
      joiners: %{},
      joined: [],
      to_check: [],
      replaces: n
    }

    Enum.reduce(samples ++ joins ++ replaces, %{st | ext: ext}, &Nemesis.schedule(&2, &1))
  end

  @doc false
  def act(:sample, k, st), do: sample(st, k)

  def act(:join, k, st) do
    id = 10 + k
    target = log_end(st)
    mdir = Path.join(st.c.dir, "members")

    cfg = %{
      ids: [id],
      dir: mdir,
      per: 0,
      table: true,
      writer: false,
      from: :snapshot,
      until_seq: target,
      snapshot_every: st.o.soak.snapshot_every,
      table_opts: @table_opts
    }

    m = Cluster.spawn_members(st.c, "m1", cfg)
    j = %{id: id, m: m, t0: mono(), target: target}
    st = Nemesis.note(st, :join, id, "member #{id} joins from the latest snapshot (to #{target})")
    put_ext(st, :joiners, Map.put(st.ext.joiners, m.port, j))
  end

  def act(:replace, k, st) do
    at = mono() - st.t0
    # One replacement at a time: one whose injection is on the agenda but
    # not done yet counts as under way (a runner running late found two
    # due at once, and the second was skipped as its node was replacing).
    injecting = at - Map.get(st.ext, :replace_at, -10_000) < 2_000
    busy = injecting or Enum.any?(Map.values(st.nodes), &(&1.state in [:replacing, :joining]))
    up = for i <- 0..2, st.nodes[rem(k - 1 + i, 3)].state == :up, do: rem(k - 1 + i, 3)

    case {busy, up} do
      {false, [id | _]} ->
        f = %{at: at, kind: :replace, target: id, dur: 0, p: nil}
        st |> put_ext(:replace_at, at) |> Nemesis.schedule({at, :inject, f})

      _ ->
        Nemesis.schedule(st, {at + 1000, :replace, k})
    end
  end

  @doc false
  def line(st, {:member, id}, "member tick " <> rest) do
    case String.split(rest, " ") do
      [_, "delivered", n, "gap", g, "erlang_kb", kb] ->
        {n, g} = {String.to_integer(n), String.to_integer(g)}
        {_, gap} = Map.get(st.ext.ticks, id, {0, 0})
        st = put_ext(st, :erlang_kb, Map.put(st.ext.erlang_kb, id, String.to_integer(kb)))
        put_ext(st, :ticks, Map.put(st.ext.ticks, id, {n, max(gap, g)}))

      _ ->
        st
    end
  end

  def line(st, {:member, _}, _line), do: st

  # A node's stats (every second): its commit index, with its OS process.
  def line(st, {:node, id}, line) do
    case OSProcess.parse(line) do
      %{line: :stats, stats: %{commit: c}} ->
        put_ext(st, :commits, Map.put(st.ext.commits, id, {st.nodes[id].os_pid, c}))

      _ ->
        st
    end
  end

  def line(st, port, line) do
    case st.ext.joiners[port] do
      nil ->
        st

      j ->
        cond do
          String.starts_with?(line, "member done") -> joiner_done(st, port, j)
          String.starts_with?(line, "member crashed") -> joiner_failed(st, port, j, line)
          true -> st
        end
    end
  end

  @doc false
  def exited(st, port, status) do
    case st.ext.joiners[port] do
      nil -> st
      j -> joiner_failed(st, port, j, "its OS process exited (status #{status})")
    end
  end

  @doc false
  def check(st, logs, results) do
    st = st |> await_joiners(mono() + 180_000) |> check_minute()
    order = Check.order(logs)
    from = with [{s, _, _} | _] <- order, do: s, else: (_ -> 0)
    mdir = Path.join(st.c.dir, "members")

    results =
      for r <- results do
        if r[:spilled] do
          {all, _} = Member.read_spill(mdir, r.id, 0, &(elem(&1, 0) >= from))
          %{r | delivered: all}
        else
          r
        end
      end

    {st, results, st.ext.violations}
  end

  # -- joiners ------------------------------------------------------------------------

  defp joiner_done(st, port, j) do
    mdir = Path.join(st.c.dir, "members")

    st =
      case Member.read_result(mdir, j.id) do
        {:ok, %{crashed: why}} ->
          record_join(st, j, false, "crashed: #{why}")

        {:ok, r} ->
          ok = r.final_ok and r.snapshot != nil and r.table.synced == :ok

          why =
            "caught up #{r.final_ok}, snapshot #{inspect(r.snapshot)}, table #{inspect(r.table.synced)}"

          st = record_join(st, j, ok, why)
          last = with [_ | _] = d <- r.delivered, do: elem(List.last(d), 0), else: (_ -> 0)
          put_ext(st, :to_check, st.ext.to_check ++ [Map.put(r, :last_seq, last)])

        {:error, why} ->
          record_join(st, j, false, "no result: #{inspect(why)}")
      end

    put_ext(st, :joiners, Map.delete(st.ext.joiners, port))
  end

  defp joiner_failed(st, port, j, why) do
    st = record_join(st, j, false, why)
    put_ext(st, :joiners, Map.delete(st.ext.joiners, port))
  end

  defp record_join(st, j, ok, why) do
    ms = mono() - j.t0

    text =
      "member #{j.id} joined from a snapshot: #{if ok, do: "done", else: "FAILED"} in #{ms} ms (#{why})"

    st = Nemesis.note(st, :joined, j.id, text)
    st = if ok, do: st, else: Nemesis.problem(st, "joiner #{j.id}: #{why}")
    put_ext(st, :joined, st.ext.joined ++ [%{id: j.id, ok: ok, ms: ms}])
  end

  defp await_joiners(st, deadline) do
    if st.ext.joiners == %{} or mono() > deadline do
      Enum.reduce(st.ext.joiners, st, fn {port, j}, st ->
        joiner_failed(st, port, j, "not done")
      end)
    else
      receive do
        {port, {:data, {:eol, line}}} when is_map_key(st.ext.joiners, port) ->
          await_joiners(line(st, port, line), deadline)

        {port, {:exit_status, s}} when is_map_key(st.ext.joiners, port) ->
          await_joiners(exited(st, port, s), deadline)
      after
        1000 -> await_joiners(st, deadline)
      end
    end
  end

  # -- a minute's row and checks --------------------------------------------------------

  defp sample(st, k) do
    st = check_minute(st)
    nodes = for id <- 0..2, do: st.nodes[id]
    procs = Enum.map(nodes, & &1.os_pid) ++ Enum.map(@members, &st.members[&1].os_pid)
    delivered = st.ext.ticks |> Map.values() |> Enum.map(&elem(&1, 0)) |> Enum.sum()
    secs = st.o.soak.minute_ms / 1000

    row = %{
      minute: k,
      pids: procs,
      log_bytes: for(id <- 0..2, do: du(Cluster.node_dir(st.c, id))),
      rss_kb: Enum.map(procs, &proc_status(&1, "VmRSS")),
      anon_kb: Enum.map(procs, &proc_status(&1, "RssAnon")),
      fds: Enum.map(procs, &proc_fds/1),
      erlang_kb: for(id <- @members, do: st.ext.erlang_kb[id]),
      rate: round((delivered - st.ext.prev_delivered) / length(@members) / secs),
      gap_ms: st.ext.ticks |> Map.values() |> Enum.map(&elem(&1, 1)) |> Enum.max(fn -> 0 end),
      checks: st.ext.checks,
      violations: length(st.ext.violations),
      replaced: length(st.replacements),
      joined: Enum.count(st.ext.joined, & &1.ok)
    }

    ticks = Map.new(st.ext.ticks, fn {id, {n, _}} -> {id, {n, 0}} end)
    st.o.out.(SoakReport.format_row(row))

    %{
      st
      | ext: %{st.ext | rows: [row | st.ext.rows], ticks: ticks, prev_delivered: delivered}
    }
  end

  defp check_minute(st) do
    logs =
      for id <- 0..2,
          st.nodes[id].state not in [:replacing, :joining],
          l = read_log(st, id),
          l != [],
          do: l

    ext = %{st.ext | checks: st.ext.checks + 1}
    v = if length(logs) >= 2, do: Check.logs_equal(logs, ends: false), else: []
    ext = record(ext, logs)
    {ext, v} = Enum.reduce(@members, {ext, v}, &check_member(st, &1, &2))
    {ready, later} = Enum.split_with(ext.to_check, &(&1.last_seq <= ext.hi))
    v = v ++ Enum.flat_map(ready, &check_joiner(ext, &1))
    ext = prune(%{ext | to_check: later})
    Enum.each(v, &st.o.out.("  violation: #{&1}"))
    %{st | ext: %{ext | violations: ext.violations ++ v}}
  end

  # Node `id`'s log up to its commit index as its last stats line (of
  # this OS process) said: the entries it knows committed. (Past it a log
  # read while the nodes run may hold an entry a deposed primary appended,
  # which a later primary replaces.) Nil if it cannot be read or no stats
  # line came yet.
  defp read_log(st, id) do
    pid = st.nodes[id].os_pid

    case st.ext.commits[id] do
      {^pid, commit} ->
        Enum.take_while(Cluster.log(Cluster.node_dir(st.c, id), 3), &(elem(&1, 0) < commit))

      _ ->
        nil
    end
  rescue
    _ -> nil
  end

  # The messages the logs read hold (committed), added to the window. What
  # retention removed from every log before it could be recorded is a
  # hole: deliveries there are counted as not checked (the soak's retention
  # too small for its rate and period, not the protocol's fault).
  defp record(ext, []), do: ext

  defp record(ext, logs) do
    hi = logs |> Enum.map(fn l -> l |> List.last() |> elem(0) end) |> Enum.max()
    first = logs |> Enum.map(&Cluster.first_index/1) |> Enum.min()
    holes = if first > ext.hi + 1, do: [{ext.hi + 1, first - 1} | ext.holes], else: ext.holes
    new = for {s, m, d} <- Check.order(logs), s > ext.hi, s <= hi, into: %{}, do: {s, {m, d}}
    window = Map.merge(ext.window, new)
    %{ext | window: window, hi: max(hi, ext.hi), his: [ext.hi | ext.his], holes: holes}
  end

  # Keeps the window from the members' last checked message and the end of
  # two minutes ago (a joiner's snapshot is younger) on.
  defp prune(ext) do
    lasts = for {_, %{last: l}} <- ext.members, l != nil, do: l
    lo = Enum.min([Enum.at(ext.his, 1, 0) | lasts])
    %{ext | window: Map.reject(ext.window, fn {s, _} -> s < lo end)}
  end

  defp check_member(st, id, {ext, v}) do
    m = ext.members[id]
    {new, off} = Member.read_spill(Path.join(st.c.dir, "members"), id, m.off)
    {now, later} = Enum.split_with(m.pending ++ new, &(elem(&1, 0) <= ext.hi))
    {now, ext} = unholed(now, ext)
    {last, bad} = in_window(ext.window, m.last, now, "member #{id}")
    m = %{m | off: off, pending: later, last: last}
    {%{ext | members: Map.put(ext.members, id, m)}, v ++ bad}
  end

  defp check_joiner(ext, r) do
    {d, _} = unholed(Check.delivered(r.delivered), ext)
    from = if r.snapshot, do: r.snapshot - 1, else: nil

    {_, bad} =
      in_window(ext.window, from, d, "joiner #{r.id} (snapshot at #{inspect(r.snapshot)})")

    bad
  end

  # `d` without the messages in holes (counted).
  defp unholed(d, %{holes: []} = ext), do: {d, ext}

  defp unholed(d, ext) do
    {out, kept} =
      Enum.split_with(d, fn {s, _, _} ->
        Enum.any?(ext.holes, fn {a, b} -> s >= a and s <= b end)
      end)

    {kept, %{ext | unchecked: ext.unchecked + length(out)}}
  end

  # `d` (delivered, in order) is exactly the window's messages after `last`
  # (nil: from `d`'s first on) up to `d`'s last: `{new_last, violations}`.
  defp in_window(_w, last, [], _who), do: {last, []}

  defp in_window(w, last, d, who) do
    {first, _, _} = hd(d)
    {to, _, _} = List.last(d)
    from = if last, do: last + 1, else: first
    lo = w |> Map.keys() |> Enum.min(fn -> from end)

    want =
      for s <- Enum.sort(Map.keys(w)), s >= from, s <= to, do: {s, elem(w[s], 0), elem(w[s], 1)}

    cond do
      first < lo and last != nil ->
        {to, ["#{who}: deliveries after #{last} not checked (the window starts at #{lo})"]}

      d == want ->
        {to, []}

      true ->
        i =
          Enum.find_index(Enum.zip(d, want), fn {a, b} -> a != b end) ||
            min(length(d), length(want))

        {to,
         [
           "#{who}: delivered #{length(d)} messages #{from}..#{to}, the log has #{length(want)}; " <>
             "first difference: #{inspect(Enum.at(d, i))} against #{inspect(Enum.at(want, i))}"
         ]}
    end
  end

  # -- measuring ----------------------------------------------------------------------

  defp du(dir) do
    case System.cmd("du", ["-s", "-B1", dir], stderr_to_stdout: true) do
      {out, 0} -> out |> String.split() |> hd() |> String.to_integer()
      _ -> 0
    end
  end

  # The VM of an OS process started through `ip netns exec` and `elixir`
  # (each of which may exec or fork): the first beam.smp at or below it.
  defp beam(pid, depth \\ 0) do
    case File.read("/proc/#{pid}/comm") do
      {:ok, "beam" <> _} ->
        pid

      {:ok, _} when depth < 4 ->
        case File.read("/proc/#{pid}/task/#{pid}/children") do
          {:ok, kids} ->
            kids |> String.split() |> Enum.find_value(&beam(&1, depth + 1))

          _ ->
            nil
        end

      _ ->
        nil
    end
  end

  defp proc_status(os_pid, field) do
    with p when p != nil <- beam(os_pid),
         {:ok, status} <- File.read("/proc/#{p}/status"),
         [_, kb] <- Regex.run(~r/#{field}:\s+(\d+) kB/, status) do
      String.to_integer(kb)
    else
      _ -> nil
    end
  end

  defp proc_fds(os_pid) do
    with p when p != nil <- beam(os_pid), {:ok, fds} <- File.ls("/proc/#{p}/fd") do
      length(fds)
    else
      _ -> nil
    end
  end

  defp log_end(st) do
    0..2
    |> Enum.map(&Cluster.next_index(Cluster.node_dir(st.c, &1)))
    |> Enum.reject(&is_nil/1)
    |> Enum.max(fn -> 1 end)
    |> Kernel.-(1)
  end

  defp mono, do: System.monotonic_time(:millisecond)
  defp put_ext(st, k, v), do: %{st | ext: Map.put(st.ext, k, v)}

  @doc "The summary as lines of text."
  defdelegate format(s), to: SoakReport
end

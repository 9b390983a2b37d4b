defmodule Tachyon.Nemesis.Member do
  @moduledoc false
  # Bus members for the across-hosts tests and the nemesis, run in an OS
  # process of their own (in a member's namespace) by `code/1`. Each member
  # id of `cfg.ids` is a task that joins the bus (poll mode), prints
  # "member joined ID", waits for the file `go` in `cfg.dir`, then publishes
  # "ID:1", "ID:2", ... (`cfg.rate` a second, or as fast as it can) until
  # `cfg.per` messages or the file `stop`, recording every publish's
  # result and every delivered message. It then drains the bus until all
  # its acknowledged publishes are delivered ("member quiet ID"), and on
  # until `cfg.expect` messages are delivered or, without `:expect`, up to
  # the sequence number written in the file `final`. It writes what it saw
  # to `out-ID` (`read_result/2`) and prints "member done ID".
  #
  # With `cfg.table`, each member also runs a `Tachyon.Table.Replicated`
  # replica (member id 100 + ID) written every 20 ms until `stop`; its
  # final contents go in the result.
  #
  # `cfg`: `ids`, `group` (the nodes' `{ip, port}`), `bus` (`{group_ip,
  # port}`), `ip` (this host's), `dir`; optional `per`, `rate`, `expect`,
  # `table`, `timeline` (record `{first_seq, last_seq, os_ms}` per
  # delivered batch), `drain_timeout` (ms, default 120 s).
  #
  # For the soak (`Tachyon.Nemesis.Soak`), which runs for hours: `spill`
  # (the delivered messages appended to the file `deliv-ID`, `read_spill/3`,
  # instead of kept: the result's `delivered` is empty), `tick_ms` (every so
  # often a line "member tick ID delivered N gap G erlang_kb M": N delivered
  # so far, G the longest gap between deliveries since the last tick, ms,
  # M the VM's `:erlang.memory(:total)` in KiB),
  # `snapshot_every` (of the replicated table), `table_opts` (its
  # `Tachyon.Table` options), `writer: false` (no writes
  # to the table), `from: :snapshot` (the bus opened from the latest
  # snapshot: the result's `snapshot` is its position) and `until_seq` (drain
  # up to that sequence number rather than the file `final`).

  alias Tachyon.Bus
  alias Tachyon.Table.Replicated

  @doc "The Elixir code that runs `run(cfg)` (for `Tachyon.Sequencer.OSProcess.spawn_elixir/2`)."
  def code(cfg),
    do:
      "Tachyon.Nemesis.Member.run(#{inspect(cfg, limit: :infinity, printable_limit: :infinity)})"

  @doc "Reads what member `id` wrote in `dir` (`{:ok, map}` or `{:error, reason}`)."
  def read_result(dir, id) do
    with {:ok, bin} <- File.read(Path.join(dir, "out-#{id}")),
         do: {:ok, :erlang.binary_to_term(bin)}
  end

  @doc "Runs the members of `cfg` (see the moduledoc); returns when all are done."
  def run(cfg) do
    Application.ensure_all_started(:tachyon)
    defaults = %{per: nil, rate: nil, expect: nil, table: nil, timeline: false, writer: true}
    cfg = Map.merge(defaults, cfg)

    cfg =
      Map.merge(
        %{
          spill: false,
          tick_ms: nil,
          snapshot_every: nil,
          table_opts: [],
          from: nil,
          until_seq: nil,
          key_file: nil
        },
        cfg
      )

    cfg = Map.put_new(cfg, :drain_timeout, 120_000)

    tasks =
      for id <- cfg.ids do
        Task.async(fn ->
          try do
            member(cfg, id)
          catch
            kind, reason ->
              why = Exception.format(kind, reason, __STACKTRACE__)
              File.write!(out(cfg, id), :erlang.term_to_binary(%{id: id, crashed: why}))
              IO.puts("member crashed #{id} #{inspect(why)}")
          end

          IO.puts("member done #{id}")
        end)
      end

    Enum.each(tasks, &Task.await(&1, :infinity))
  end

  defp out(cfg, id), do: Path.join(cfg.dir, "out-#{id}")
  defp mono, do: System.monotonic_time(:millisecond)

  defp member(cfg, id) do
    {b, info} = open_bus(cfg, id, mono() + 120_000)
    table = cfg.table && start_table(cfg, id)
    IO.puts("member joined #{id}")
    wait_file(Path.join(cfg.dir, "go"))
    writer = table && cfg.writer && spawn_link(fn -> writer(table, id, 0, 0) end)

    spill =
      if cfg.spill,
        do: elem({:ok, _} = File.open(spill_path(cfg.dir, id), [:append, :binary, :raw]), 1)

    s = %{
      b: b,
      id: id,
      cfg: cfg,
      t0: mono(),
      i: 1,
      acked: 0,
      errors: %{},
      error_list: [],
      dead: nil,
      delivered: [],
      n: 0,
      last_seq: 0,
      own_max: 0,
      last_at: mono(),
      max_gap: 0,
      gap_at: nil,
      batches: [],
      half: false,
      stop_at: mono(),
      stopped: false,
      report_at: mono() + 5000,
      publishing: true,
      spill: spill,
      buf: [],
      tick_at: mono() + (cfg.tick_ms || 0),
      tick_gap: 0
    }

    s = publish_loop(s)
    s = %{s | publishing: false}
    quiet_deadline = mono() + cfg.drain_timeout
    s = drain_until(s, &(&1.own_max >= &1.acked), quiet_deadline)
    writes = if writer, do: stop_writer(writer, quiet_deadline), else: nil
    quiet_ok = s.own_max >= s.acked
    IO.puts("member quiet #{id}#{if quiet_ok, do: "", else: " timed out"}")
    {s, target, final_ok} = final(s, cfg)
    s = flush_spill(s)
    {:ok, stats} = Bus.stats(b)
    events = events(b, [])

    tab =
      if table do
        synced = Replicated.sync(table, target, 60_000)
        %{synced: synced, map: Replicated.to_map(table), applied: Replicated.applied(table)}
      end

    result = %{
      id: id,
      delivered: Enum.reverse(s.delivered),
      acked: s.acked,
      attempted: s.i - 1,
      errors: s.errors,
      error_list: Enum.reverse(s.error_list),
      dead: s.dead,
      stats: stats,
      events: events,
      max_gap: s.max_gap,
      gap_at: s.gap_at,
      batches: Enum.reverse(s.batches),
      quiet_ok: quiet_ok,
      final_ok: final_ok,
      target: target,
      writes: writes,
      table: tab,
      snapshot: info[:snapshot],
      spilled: s.spill != nil
    }

    File.write!(out(cfg, id), :erlang.term_to_binary(result))
    if table, do: GenServer.stop(table, :normal, 30_000)
    Bus.close(b)
  end

  defp open_bus(cfg, id, deadline) do
    {g, port} = cfg.bus

    opts = [
      sequencer: cfg.group,
      member_id: id,
      bus: {:multicast, {g, port}, interface: cfg.ip, ttl: 1},
      ip: cfg.ip,
      auth: auth(cfg),
      delivery: :poll,
      connect_timeout_ms: 20_000
    ]

    opts = if cfg.from, do: [{:from, cfg.from} | opts], else: opts

    case Bus.open_info(opts) do
      {:ok, b, info} ->
        {b, info}

      {:error, why} ->
        if mono() > deadline, do: raise("member #{id} cannot join: #{inspect(why)}")
        Process.sleep(100)
        open_bus(cfg, id, deadline)
    end
  end

  # The group's key file (members derive their credentials from it), or
  # no keys at all.
  defp auth(%{key_file: nil}), do: :none
  defp auth(%{key_file: path}), do: [key_file: path]

  defp start_table(cfg, id) do
    {g, port} = cfg.bus

    {:ok, t} =
      Replicated.start_link(
        path: Path.join(cfg.dir, "table-#{id}"),
        sequencer: cfg.group,
        member_id: 100 + id,
        bus: {:multicast, {g, port}, interface: cfg.ip, ttl: 1},
        snapshot_every: cfg.snapshot_every,
        auth: auth(cfg),
        table: cfg.table_opts
      )

    t
  end

  defp wait_file(f) do
    unless File.exists?(f) do
      Process.sleep(5)
      wait_file(f)
    end
  end

  # -- publishing -------------------------------------------------------------------

  defp publish_loop(s) do
    now = mono()
    s = check_stop(s, now)

    if s.stopped do
      status(s)
      s
    else
      s = if now > s.report_at, do: %{status(s) | report_at: now + 5000}, else: s
      s = s |> half() |> publish_some(now)
      behind = s.cfg.rate == nil or due(s, mono()) > 0
      publish_loop(recv(s, if(behind and s.dead == nil, do: 0, else: 1)))
    end
  end

  defp check_stop(s, now) do
    cond do
      s.cfg.per != nil and s.i > s.cfg.per ->
        %{s | stopped: true}

      now >= s.stop_at ->
        %{s | stopped: File.exists?(Path.join(s.cfg.dir, "stop")), stop_at: now + 50}

      true ->
        s
    end
  end

  defp half(%{half: false, cfg: %{per: per}, i: i} = s) when per != nil and i >= div(per, 2) do
    IO.puts("member half #{s.id}")
    %{s | half: true}
  end

  defp half(s), do: s

  defp due(s, now), do: div((now - s.t0) * s.cfg.rate, 1000) - (s.i - 1)

  defp publish_some(%{dead: nil} = s, now) do
    want = if s.cfg.rate, do: min(64, due(s, now)), else: 16
    want = if s.cfg.per, do: min(want, s.cfg.per - s.i + 1), else: want
    publish_n(s, want)
  end

  defp publish_some(s, _now), do: s

  defp publish_n(s, n) when n <= 0, do: s

  defp publish_n(s, n) do
    case Bus.publish(s.b, "#{s.id}:#{s.i}") do
      {:ok, _} ->
        publish_n(%{s | acked: s.i, i: s.i + 1}, n - 1)

      {:error, :busy} ->
        count_error(s, :busy)

      {:error, why} ->
        s = count_error(s, why)
        s = %{s | error_list: [{s.i, why, System.os_time(:millisecond)} | s.error_list]}
        if why in [:closed, :member_id_taken], do: %{s | dead: why}, else: s
    end
  end

  defp count_error(s, why), do: %{s | errors: Map.update(s.errors, why, 1, &(&1 + 1))}

  # -- receiving --------------------------------------------------------------------

  defp recv(s, timeout) do
    s =
      case Bus.recv(s.b, timeout) do
        {:ok, list} -> got(s, list)
        {:error, :timeout} -> s
        {:error, why} -> count_error(s, {:recv, why})
      end

    if s.cfg.tick_ms && mono() >= s.tick_at, do: tick(s), else: s
  end

  defp tick(s) do
    mem = div(:erlang.memory(:total), 1024)
    # A gap still open counts too: a tick with nothing delivered shows how
    # long nothing was (not 0, and not only once a delivery ends it).
    open = if s.publishing, do: mono() - s.last_at, else: 0
    gap = max(s.tick_gap, open)
    IO.puts("member tick #{s.id} delivered #{s.n} gap #{gap} erlang_kb #{mem}")
    %{flush_spill(s) | tick_at: mono() + s.cfg.tick_ms, tick_gap: 0}
  end

  # -- the spill file: what was delivered, in frames of a length and a term ----------

  defp spill_path(dir, id), do: Path.join(dir, "deliv-#{id}")

  defp flush_spill(%{spill: nil} = s), do: s
  defp flush_spill(%{buf: []} = s), do: s

  defp flush_spill(s) do
    bin = :erlang.term_to_binary(Enum.reverse(s.buf))
    :ok = :file.write(s.spill, [<<byte_size(bin)::32>>, bin])
    %{s | buf: []}
  end

  @doc """
  The messages member `id` delivered and spilled to `dir` from byte
  `offset` on (whole frames only), those `keep` is true of:
  `{list, next_offset}`.
  """
  def read_spill(dir, id, offset, keep \\ fn _ -> true end) do
    case File.open(spill_path(dir, id), [:read, :binary, :raw]) do
      {:ok, f} ->
        {:ok, _} = :file.position(f, offset)
        {list, off} = frames(f, offset, keep, [])
        File.close(f)
        {Enum.concat(Enum.reverse(list)), off}

      {:error, _} ->
        {[], offset}
    end
  end

  defp frames(f, off, keep, acc) do
    with {:ok, <<n::32>>} <- :file.read(f, 4),
         {:ok, bin} when byte_size(bin) == n <- :file.read(f, n) do
      frames(f, off + 4 + n, keep, [Enum.filter(:erlang.binary_to_term(bin), keep) | acc])
    else
      _ -> {acc, off}
    end
  end

  defp got(s, list) do
    now = mono()
    {first, _, _} = hd(list)
    {last, _, _} = List.last(list)

    own =
      Enum.reduce(list, s.own_max, fn
        {_, id, d}, acc when id == s.id -> max(acc, own_index(d))
        _, acc -> acc
      end)

    gap = now - s.last_at

    s =
      if s.publishing and gap > s.max_gap,
        do: %{s | max_gap: gap, gap_at: System.os_time(:millisecond)},
        else: s

    s = if s.publishing and gap > s.tick_gap, do: %{s | tick_gap: gap}, else: s

    batches =
      if s.cfg.timeline,
        do: [{first, last, System.os_time(:millisecond)} | s.batches],
        else: s.batches

    {delivered, buf} =
      if s.spill,
        do: {s.delivered, Enum.reverse(list, s.buf)},
        else: {Enum.reverse(list, s.delivered), []}

    %{
      s
      | delivered: delivered,
        buf: buf,
        n: s.n + length(list),
        last_seq: last,
        own_max: own,
        last_at: now,
        batches: batches
    }
  end

  defp own_index(d) do
    case Integer.parse(d |> String.split(":") |> List.last()) do
      {i, ""} -> i
      _ -> 0
    end
  end

  defp drain_until(s, done, deadline, report \\ nil) do
    now = mono()

    cond do
      done.(s) ->
        s

      now > deadline ->
        status(s)
        s

      report == nil or now > report ->
        status(s)
        drain_until(recv(s, 20), done, deadline, now + 5000)

      true ->
        drain_until(recv(s, 20), done, deadline, report)
    end
  end

  defp status(s) do
    {:ok, st} = Bus.stats(s.b)

    IO.puts(
      "member status #{s.id} acked #{s.acked} own_max #{s.own_max} delivered #{s.n} " <>
        "last_seq #{s.last_seq} errors #{inspect(s.errors)} stats #{inspect(st)}"
    )

    s
  end

  # Up to `cfg.expect` messages, or to the sequence number in `final`
  # (written elsewhere and renamed into place: whole once it exists).
  defp final(s, %{until_seq: n} = cfg) when n != nil do
    s = drain_until(s, &(&1.last_seq >= n), mono() + cfg.drain_timeout)
    {s, n, s.last_seq >= n}
  end

  defp final(s, %{expect: n} = cfg) when n != nil do
    s = drain_until(s, &(&1.n >= n), mono() + cfg.drain_timeout)
    {s, s.last_seq, s.n >= n}
  end

  defp final(s, cfg) do
    deadline = mono() + cfg.drain_timeout
    f = Path.join(cfg.dir, "final")
    s = drain_until(s, fn _ -> File.exists?(f) end, deadline)

    case File.read(f) do
      {:ok, text} ->
        target = String.to_integer(String.trim(text))
        s = drain_until(s, &(&1.last_seq >= target), deadline)
        {s, target, s.last_seq >= target}

      _ ->
        {s, s.last_seq, false}
    end
  end

  defp events(b, acc) do
    receive do
      {:tachyon_bus_event, ^b, kind, fields} -> events(b, [{kind, fields} | acc])
    after
      0 -> Enum.reverse(acc)
    end
  end

  # -- the replicated table's writer --------------------------------------------------

  defp writer(t, id, ok, timeouts) do
    receive do
      {:stop, from} ->
        final_put(t, id, 60)
        send(from, {:writer_done, %{ok: ok, timeouts: timeouts}})
    after
      20 ->
        key = "k#{:rand.uniform(64)}"

        result =
          try do
            if :rand.uniform(8) == 1,
              do: Replicated.delete(t, key, 2000),
              else: Replicated.put(t, key, "#{id}:#{ok + timeouts}", 2000)
          catch
            :exit, _ -> :timeout
          end

        if result == :ok,
          do: writer(t, id, ok + 1, timeouts),
          else: writer(t, id, ok, timeouts + 1)
    end
  end

  # The last write of this replica, applied here once every earlier one is.
  defp final_put(_t, _id, 0), do: :error

  defp final_put(t, id, tries) do
    Replicated.put(t, "final-#{id}", "done", 5000)
  catch
    :exit, _ -> final_put(t, id, tries - 1)
  end

  defp stop_writer(w, deadline) do
    send(w, {:stop, self()})

    receive do
      {:writer_done, counts} -> counts
    after
      max(0, deadline - mono()) + 5000 -> %{timed_out: true}
    end
  end
end

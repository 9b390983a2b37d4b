defmodule Tachyon.Bench.Failover do
  @moduledoc false
  # `mix tachyon.bench sequencer --failover`: takeover time over repeated
  # kill -9s of the primary's OS process (a standby in another OS process,
  # a member here publishing round trips all along), for a few values of
  # `:takeover_after`; and the replicated table's put latency (publish until
  # applied locally) against `Tachyon.Table.put/3`.
  #
  # Extra options: --kills N (20), --messages N (table puts, 20,000).

  alias Tachyon.{Bench, Bus, Table}
  alias Tachyon.Bench.Report
  alias Tachyon.Sequencer.OSProcess
  alias Tachyon.Table.Replicated

  def run(opts, cfg) do
    kills = opts[:kills] || 20

    takeovers =
      for after_ms <- [50, 20, 100] do
        n = if after_ms == 50, do: kills, else: max(div(kills, 4), 3)
        {after_ms, for(i <- 1..n, do: kill_once(opts, after_ms, i))}
      end

    IO.puts(
      "\nTakeover after kill -9 of the primary (standby in its own OS process, unicast bus, heartbeat 10 ms):"
    )

    IO.puts(
      "  takeover_after  kills  standby: min / p50 / max          member: min / p50 / max   (ms)"
    )

    rows =
      for {after_ms, samples} <- takeovers do
        s = Enum.map(samples, &elem(&1, 0)) |> Enum.sort()
        m = Enum.map(samples, &elem(&1, 1)) |> Enum.sort()

        IO.puts("  #{pad(after_ms, 14)}  #{pad(length(s), 5)}  #{triple(s)}      #{triple(m)}")

        %{"takeover_after_ms" => after_ms, "standby_ms" => s, "member_gap_ms" => m}
      end

    IO.puts("""
      standby: from the old primary's last datagram to the new primary running (its own clock);
      member: the longest pause between two deliveries of a member publishing round trips
      throughout (includes its hello to the standby, 20 ms after silence).
      A lower takeover_after fails over sooner, and takes over from a primary that is only
      paused (a GC, a stalled VM) for longer than it: the standby's clock cannot tell the two apart.
    """)

    cases = table_cases(opts, cfg)
    Report.print_table(cases, "tachyon.table.put")
    Report.write_json(opts[:json], "failover", cases, %{"takeovers" => rows})
    cases
  end

  defp pad(x, n), do: String.pad_leading("#{x}", n)

  defp triple(sorted) do
    ms = fn us -> :erlang.float_to_binary(us / 1000, decimals: 1) end
    p50 = Enum.at(sorted, div(length(sorted), 2))
    pad("#{ms.(hd(sorted))} / #{ms.(p50)} / #{ms.(List.last(sorted))}", 28)
  end

  defp kill_once(opts, after_ms, i) do
    base = Bench.tmp_dir(opts, "failover-#{after_ms}-#{i}")
    {pdir, sdir} = {Path.join(base, "p"), Path.join(base, "s")}
    {p, s} = OSProcess.start_pair(pdir, sdir, ["--takeover-after", "#{after_ms}"])
    {_, sport} = s.address

    {:ok, bus} =
      Bus.open(
        sequencer: [p.address, {{127, 0, 0, 1}, sport}],
        member_id: 1,
        mode: :poll,
        hello_after: 20
      )

    parent = self()

    pinger =
      spawn_link(fn ->
        receive do: (:go -> :ok)
        send(parent, {:gap, ping(bus, :os.perf_counter(), 0, 0)})
      end)

    send(pinger, :go)
    Process.sleep(200)
    OSProcess.kill(p)
    {:ok, line} = OSProcess.await_line(s, "tachyon.sequencer took over ", 10_000)
    [_, "epoch", _, "next_seq", _, "takeover_us", us] = String.split(line, " ")
    Process.sleep(300)
    send(pinger, :stop)
    gap = receive do: ({:gap, g} -> g), after: (10_000 -> raise("member stuck"))
    Bus.close(bus)
    OSProcess.kill(s)
    File.rm_rf!(base)
    {String.to_integer(us), :erlang.convert_time_unit(gap, :perf_counter, :microsecond)}
  end

  # Round trips until told to stop; returns the longest pause between two
  # deliveries (perf counter ticks).
  defp ping(bus, last, max_gap, n) do
    receive do
      :stop -> max_gap
    after
      0 ->
        {:ok, _} = Bus.publish(bus, "ping #{n}")

        case Bus.recv(bus, 2000) do
          {:ok, _} ->
            now = :os.perf_counter()
            ping(bus, now, max(max_gap, now - last), n + 1)

          {:error, :timeout} ->
            ping(bus, last, max_gap, n + 1)
        end
    end
  end

  defp table_cases(opts, cfg) do
    n = opts[:table_messages] || 20_000
    base = Bench.tmp_dir(opts, "failover-table")

    {:ok, p} =
      OSProcess.start(["--path", Path.join(base, "seq"), "--port", "0", "--wait", "backoff"])

    value = :binary.copy("v", cfg.size)

    try do
      {:ok, r} =
        Replicated.start_link(path: Path.join(base, "rep"), sequencer: p.address, member_id: 1)

      rep =
        Bench.measure("tachyon.table.replicated.put", n, div(n, 10), cfg.size, fn ->
          :ok = Replicated.put(r, "k#{:rand.uniform(10_000)}", value)
        end)

      GenServer.stop(r)
      {:ok, t} = Table.open(Path.join(base, "local"))

      local =
        Bench.measure("tachyon.table.put", n, div(n, 10), cfg.size, fn ->
          :ok = Table.put(t, "k#{:rand.uniform(10_000)}", value)
        end)

      Table.close(t)
      [local, rep]
    after
      OSProcess.kill(p)
      File.rm_rf!(base)
    end
  end
end

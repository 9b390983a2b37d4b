defmodule Tachyon.NetNSTest do
  # Across hosts: one network namespace per host (sequencer, standby,
  # members) on a bridge, multicast bus. Not async; skipped with a message
  # where namespaces cannot be created.
  use ExUnit.Case, async: false

  import Tachyon.TestHelpers, only: [tmp_dir: 1]

  alias Tachyon.NetNS
  alias Tachyon.Sequencer.OSProcess

  @moduletag :slow
  @prefix "tq"
  @hosts ["seq", "sby", "mem"]

  setup do
    case NetNS.up(@prefix, @hosts) do
      {:ok, hosts} ->
        on_exit(fn -> NetNS.down(@prefix, @hosts) end)
        {:ok, hosts: hosts}

      {:error, why} ->
        IO.puts("\n  skipped: cannot create network namespaces here (#{why})")
        :skip
    end
  end

  defp ipstr({a, b, c, d}), do: "#{a}.#{b}.#{c}.#{d}"

  defp seq(h, dir, port, bus_port, extra) do
    OSProcess.start(
      [
        "--path",
        dir,
        "--ip",
        ipstr(h.ip),
        "--port",
        "#{port}",
        "--bus",
        "multicast:239.77.0.1:#{bus_port}",
        "--interface",
        ipstr(h.ip),
        "--wait",
        "backoff"
      ] ++ extra,
      30_000,
      netns: h.ns
    )
  end

  defp log(dir) do
    {:ok, s} = Tachyon.Store.open(dir, mode: :read)
    entries = Tachyon.Store.stream(s) |> Enum.to_list()
    Tachyon.Store.close(s)
    entries
  end

  test "across hosts: kill -9 of the primary during 100,000 messages; the standby takes over; the old primary rejoins; a partition",
       %{hosts: hosts} = ctx do
    if ctx[:skip], do: :ok, else: run(hosts)
  end

  defp run(%{"seq" => hs, "sby" => hb, "mem" => hm}) do
    {pdir, sdir, mdir} = {tmp_dir("ns-primary"), tmp_dir("ns-standby"), tmp_dir("ns-members")}
    bus_port = 7101
    {:ok, p} = seq(hs, pdir, 7100, bus_port, [])

    {:ok, s} =
      seq(hb, sdir, 7100, bus_port, ["--role", "standby", "--primary", "#{ipstr(hs.ip)}:7100"])

    assert {:ok, _} = OSProcess.await_line(s, "tachyon.sequencer following", 20_000)

    per = 33_334
    seqs = "#{ipstr(hs.ip)}:7100,#{ipstr(hb.ip)}:7100"

    m =
      OSProcess.spawn_elixir(
        "Tachyon.NetNS.Members.run(#{inspect([seqs, "#{bus_port}", ipstr(hm.ip), "3", "#{per}", mdir])})",
        netns: hm.ns
      )

    assert {:ok, _} = OSProcess.await_line(m, "members joined", 30_000)
    File.write!(Path.join(mdir, "go"), "")
    assert {:ok, _} = OSProcess.await_line(m, "members half", 60_000)
    OSProcess.kill(p)
    assert {:ok, line} = OSProcess.await_line(s, "tachyon.sequencer took over ", 10_000)
    [_, "epoch", "1", "next_seq", n, "takeover_us", us] = String.split(line, " ")
    IO.puts("\n  across hosts: takeover #{us} us (standby's clock), new epoch starts at #{n}")
    assert {:ok, _} = OSProcess.await_line(m, "members done", 120_000)

    results = :erlang.binary_to_term(File.read!(Path.join(mdir, "out")))
    [{_, a, _} | _] = results
    assert length(a) == 3 * per

    for {_id, got, st} <- results do
      assert got == a
      assert st.epoch == 1 and st.forks == 0
    end

    for id <- 1..3, do: assert(for({_, ^id, d} <- a, do: d) == for(i <- 1..per, do: "#{id}:#{i}"))

    # The old primary restarted: a standby of the new one, its log the same.
    {:ok, r} =
      seq(hs, pdir, 7100, bus_port, [
        "--role",
        "standby",
        "--primary",
        "#{ipstr(hb.ip)}:7100",
        "--takeover-after",
        "60000"
      ])

    assert {:ok, _} = OSProcess.await_line(r, "tachyon.sequencer following", 20_000)
    want = length(log(sdir))

    assert Enum.any?(1..200, fn _ ->
             Process.sleep(50)
             length(log(pdir)) >= want
           end)

    assert log(pdir) == log(sdir)

    # A partition: the new primary's standby (the old primary) is cut off.
    # It takes over in its own partition (epoch 2) while the members, on
    # the other side, keep following epoch 1: no member accepts both.
    OSProcess.kill(r)

    {:ok, r2} =
      seq(hs, pdir, 7100, bus_port, [
        "--role",
        "standby",
        "--primary",
        "#{ipstr(hb.ip)}:7100",
        "--takeover-after",
        "50"
      ])

    assert {:ok, _} = OSProcess.await_line(r2, "tachyon.sequencer following", 20_000)
    :ok = NetNS.link(hs, :down)
    assert {:ok, line} = OSProcess.await_line(r2, "tachyon.sequencer took over ", 10_000)
    IO.puts("  partition: the cut-off standby took over on its side: #{line}")

    # A member on the primary's side publishes during the partition: it
    # follows epoch 1 only. When the partition heals it hears epoch 2 and
    # follows it, and counts the fork (epoch 2 starts before messages it
    # delivered from epoch 1).
    healed = Path.join(mdir, "healed")

    code = """
    Application.ensure_all_started(:tachyon)
    ip = #{inspect(hm.ip)}
    bus = {:multicast, {{239, 77, 0, 1}, #{bus_port}}, interface: ip, ttl: 1}
    {:ok, b} = Tachyon.Bus.open(sequencer: [#{inspect({hb.ip, 7100})}, #{inspect({hs.ip, 7100})}],
      member_id: 9, bus: bus, ip: ip, mode: :poll)
    for i <- 1..50, do: {:ok, _} = Tachyon.Bus.publish(b, "p" <> Integer.to_string(i))
    drain = fn f, n -> if n >= 50, do: n, else: (case Tachyon.Bus.recv(b, 100) do
      {:ok, l} -> f.(f, n + length(l)); _ -> f.(f, n) end) end
    drain.(drain, 0)
    show = fn what -> {:ok, st} = Tachyon.Bus.stats(b)
      IO.puts("member " <> what <> " epoch " <> Integer.to_string(st.epoch) <> " forks " <> Integer.to_string(st.forks)) end
    show.("partitioned")
    wait = fn f -> if File.exists?(#{inspect(healed)}), do: :ok, else: (Process.sleep(10); f.(f)) end
    wait.(wait)
    Enum.each(1..30, fn _ -> Tachyon.Bus.recv(b, 20) end)
    show.("healed")
    """

    pm = OSProcess.spawn_elixir(code, netns: hm.ns)
    assert {:ok, "partitioned epoch 1 forks 0"} = OSProcess.await_line(pm, "member ", 30_000)
    :ok = NetNS.link(hs, :up)
    File.write!(healed, "")
    assert {:ok, after_heal} = OSProcess.await_line(pm, "member ", 30_000)
    IO.puts("  partition healed, the member: #{after_heal}")
    assert after_heal == "healed epoch 2 forks 1"
    OSProcess.kill(r2)
    OSProcess.kill(s)
    for d <- Path.wildcard(pdir <> ".epoch*"), do: File.rm_rf!(d)
  end
end

defmodule Tachyon.FailoverTest do
  # Not async: OS processes, and thread counts elsewhere.
  use ExUnit.Case, async: false

  import Tachyon.TestHelpers, only: [tmp_dir: 1]

  alias Tachyon.Bus
  alias Tachyon.Sequencer.OSProcess

  @moduletag :slow

  # Publishes "id:1".."id:n" while draining the bus; returns everything
  # received once all 3 * n messages are in.
  defp member(addrs, id, n, total, parent) do
    {:ok, bus} =
      Bus.open(
        sequencer: addrs,
        member_id: id,
        mode: :poll,
        hello_after: 20,
        resend_after: 20,
        connect_timeout: 10_000
      )

    send(parent, {:joined, id})
    receive do: (:go -> :ok), after: (10_000 -> raise "no go")

    acc =
      Enum.reduce(1..n, [], fn i, acc ->
        if i == div(n, 2), do: send(parent, {:half, id})
        publish!(bus, "#{id}:#{i}")
        if rem(i, 16) == 0, do: drain(bus, acc, 0), else: acc
      end)

    got = finish(bus, acc, total, System.monotonic_time(:millisecond) + 60_000)
    {:ok, stats} = Bus.stats(bus)
    Bus.close(bus)
    {Enum.reverse(got), stats}
  end

  defp publish!(bus, data) do
    case Bus.publish(bus, data) do
      {:ok, _} -> :ok
      {:error, :busy} -> Process.sleep(1) && publish!(bus, data)
    end
  end

  defp drain(bus, acc, timeout) do
    case Bus.recv(bus, timeout) do
      {:ok, l} -> Enum.reverse(l, acc)
      {:error, :timeout} -> acc
    end
  end

  # Until every message is in and the member follows the new primary.
  defp finish(bus, acc, total, deadline) do
    cond do
      length(acc) >= total and match?({:ok, %{epoch: 1}}, Bus.stats(bus)) -> acc
      System.monotonic_time(:millisecond) > deadline -> flunk("only #{length(acc)} of #{total}")
      true -> finish(bus, drain(bus, acc, 100), total, deadline)
    end
  end

  defp log(dir) do
    {:ok, s} = Tachyon.Store.open(dir, mode: :read)
    entries = Tachyon.Store.stream(s) |> Enum.to_list()
    Tachyon.Store.close(s)
    entries
  end

  test "kill -9 of the primary during 100,000 messages from three members: the standby takes over, nothing lost or twice; the old primary rejoins with an identical log" do
    {pdir, sdir} = {tmp_dir("primary"), tmp_dir("standby")}
    {p, s} = OSProcess.start_pair(pdir, sdir)
    {_, sport} = s.address
    addrs = [p.address, {{127, 0, 0, 1}, sport}]
    per = String.to_integer(System.get_env("FAILOVER_PER", "33334"))
    total = 3 * per
    parent = self()

    tasks =
      for id <- 1..3,
          do: Task.async(fn -> member(addrs, id, per, total, parent) end)

    for id <- 1..3, do: assert_receive({:joined, ^id}, 15_000)
    for t <- tasks, do: send(t.pid, :go)
    assert_receive {:half, 1}, 60_000
    OSProcess.kill(p)
    assert {:ok, line} = OSProcess.await_line(s, "tachyon.sequencer took over ", 10_000)
    [_addr, "epoch", "1", "next_seq", n, "takeover_us", us] = String.split(line, " ")
    IO.puts("  new primary next_seq #{n}")

    IO.puts(
      "\n  takeover (standby: last datagram of the old primary to the new one running): #{us} us"
    )

    assert String.to_integer(us) < 1_000_000

    results = Enum.map(tasks, &Task.await(&1, 120_000))
    [{a, _} | _] = results

    for {got, stats} <- results do
      assert length(got) == total
      assert got == a
      assert stats.epoch == 1 and stats.forks == 0
    end

    assert Enum.map(a, &elem(&1, 0)) |> Enum.uniq() |> length() == total

    for id <- 1..3,
        do: assert(for({_, ^id, d} <- a, do: d) == for(i <- 1..per, do: "#{id}:#{i}"))

    # The old primary comes back as a standby of the new one.
    {:ok, r} =
      OSProcess.start([
        "--path",
        pdir,
        "--port",
        "#{OSProcess.free_port()}",
        "--role",
        "standby",
        "--primary",
        "127.0.0.1:#{sport}",
        "--takeover-after",
        "60000"
      ])

    want = log(sdir) |> length()
    assert {:ok, _} = OSProcess.await_line(r, "tachyon.sequencer following", 10_000)

    assert Enum.any?(1..200, fn _ ->
             Process.sleep(50)
             length(log(pdir)) >= want
           end)

    OSProcess.kill(r)
    OSProcess.kill(s)
    assert log(pdir) == log(sdir)
    assert [_] = Path.wildcard(pdir <> ".epoch0.*")
    for d <- Path.wildcard(pdir <> ".epoch0.*"), do: File.rm_rf!(d)
  end
end

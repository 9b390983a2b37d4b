defmodule Tachyon.NetNSTest do
  # Across hosts: a group of three sequencer nodes, each in a network
  # namespace of its own, and members in namespaces of their own, on a
  # bridge; the bus is multicast. Every node and every members' host is an
  # OS process. Not async; skipped with a message where namespaces cannot
  # be made (not root, no `ip`).
  use ExUnit.Case, async: false

  import Tachyon.TestHelpers, only: [tmp_dir: 1]

  alias Tachyon.Nemesis.{Check, Cluster, Member, NetNS}
  alias Tachyon.Sequencer.OSProcess

  @moduletag :slow
  @moduletag timeout: 900_000

  @prefix "nt#{rem(String.to_integer(System.pid()), 100_000)}"

  case NetNS.probe(@prefix) do
    :ok ->
      :ok

    {:error, why} ->
      IO.puts("\n  Tachyon.NetNSTest skipped: cannot create network namespaces here (#{why})")
      @moduletag skip: "cannot create network namespaces here (#{why})"
  end

  setup do
    dir = tmp_dir("netns")
    {:ok, c} = Cluster.up(@prefix, 3, ["mem"], dir)
    on_exit(fn -> Cluster.down(c) end)
    {:ok, cluster: c}
  end

  defp dirs(c), do: for(id <- 0..2, do: Cluster.node_dir(c, id))

  defp results(mdir, ids) do
    for id <- ids do
      assert {:ok, r} = Member.read_result(mdir, id)
      refute Map.has_key?(r, :crashed), "member #{id} crashed: #{r[:crashed]}"
      r
    end
  end

  # Waits until node `id`'s latest role line satisfies `fun.(role, epoch)`.
  defp await_node(nodes, view, id, fun, timeout) do
    node = Enum.find(nodes, &(&1.id == id))

    done = fn v ->
      case v.roles[id] do
        {role, e} -> fun.(role, e)
        nil -> false
      end
    end

    assert {:ok, view} = Cluster.watch([node], view, done, timeout)
    view
  end

  test "across hosts: kill -9 of the primary of three during 100,000 messages; a new primary; the killed node rejoins on its log",
       %{cluster: c} do
    assert {:ok, nodes, view} = Cluster.start_nodes(c)
    mdir = Path.join(c.dir, "members")
    per = 33_334
    ids = [1, 2, 3]
    m = Cluster.spawn_members(c, "mem", %{ids: ids, dir: mdir, per: per, expect: 3 * per})
    assert :ok = Cluster.await_members(m, "member joined", ids, 120_000)
    Cluster.signal_file(Path.join(mdir, "go"))
    assert :ok = Cluster.await_members(m, "member half", [1], 300_000)

    # The primary now, from the nodes' role lines.
    {:ok, view} = Cluster.watch(nodes, view, & &1, 0)
    assert {pid, epoch} = view.primary
    p = Enum.find(nodes, &(&1.id == pid))
    others = List.delete(nodes, p)
    killed_at = System.os_time(:microsecond)
    OSProcess.kill(p)

    assert {:ok, view} =
             Cluster.watch(others, view, &match?({_, e} when e > epoch, &1.primary), 30_000)

    [{_, _, _, at_us} | _] = view.lines
    {new_id, new_epoch} = view.primary

    IO.puts(
      "\n  across hosts: node #{pid} (primary, epoch #{epoch}) killed; node #{new_id} primary " <>
        "of epoch #{new_epoch} #{at_us - killed_at} us later"
    )

    assert :ok = Cluster.await_members(m, "member done", ids, 600_000)
    [a | _] = rs = results(mdir, ids)
    total = 3 * per

    for r <- rs do
      assert length(r.delivered) == total, "member #{r.id}: #{length(r.delivered)} of #{total}"
      assert r.delivered == a.delivered
      assert r.acked == per
      assert r.stats.forks == 0
      assert r.stats.epoch >= new_epoch
      refute Enum.any?(r.events, &match?({:fork, _}, &1))
    end

    seqs = Enum.map(a.delivered, &elem(&1, 0))
    assert seqs == Enum.sort(seqs) and length(Enum.uniq(seqs)) == total
    assert Check.senders(a.delivered, ids) == []
    assert Check.acked_delivered(a.delivered, rs) == []

    # The killed node restarts on its log, a follower; it catches up and
    # every log is the same.
    r = Cluster.spawn_node(c, pid, false)
    assert :ok = Cluster.await_ready(r, 60_000)
    nodes = [r | others]
    assert {:ok, _} = Cluster.await_logs_settled(dirs(c), 60_000)
    logs = Enum.map(dirs(c), &Cluster.log/1)
    assert Check.logs_equal(logs) == []
    assert Check.in_every_log(logs, rs) == []
    assert Check.one_order(Cluster.messages(hd(logs)), rs) == []
    IO.puts("  the killed node rejoined: three equal logs of #{length(hd(logs))} entries")
    OSProcess.kill_all(nodes)
  end

  test "across hosts: the primary cut off: the other two elect a new one; nothing from the isolated side is delivered that the majority lacks; heal, converge",
       %{cluster: c} do
    assert {:ok, nodes, view} = Cluster.start_nodes(c)
    mdir = Path.join(c.dir, "members")
    # A member on the members' host, and one on each node's host: whichever
    # node is primary when the link is cut, one member is cut off with it.
    plan = [{"mem", 11}, {"n1", 21}, {"n2", 22}, {"n3", 23}]
    ids = Enum.map(plan, &elem(&1, 1))

    ms =
      for {host, id} <- plan do
        Cluster.spawn_members(c, host, %{ids: [id], dir: mdir, rate: 300, timeline: true})
      end

    for {m, id} <- Enum.zip(ms, ids),
        do: assert(:ok = Cluster.await_members(m, "member joined", [id], 120_000))

    Cluster.signal_file(Path.join(mdir, "go"))
    grow(dirs(c), 1000, 60_000)

    {:ok, view} = Cluster.watch(nodes, view, & &1, 0)
    assert {pid, epoch} = view.primary
    p = Enum.find(nodes, &(&1.id == pid))
    h = Cluster.node_host(c, pid)
    cut_off = 21 + pid
    cut_at = System.os_time(:millisecond)
    :ok = NetNS.link(h, :down)

    # The other two elect a new primary; the old one, alone, steps down.
    assert {:ok, view} =
             Cluster.watch(
               List.delete(nodes, p),
               view,
               &match?({id, e} when id != pid and e > epoch, &1.primary),
               30_000
             )

    {new_id, new_epoch} = view.primary
    view = await_node(nodes, view, pid, fn role, _ -> role != "primary" end, 30_000)

    # Traffic on the majority's side meanwhile; the old primary's log now.
    majority = for id <- 0..2, id != pid, do: Cluster.node_dir(c, id)
    grow(majority, 500, 60_000)
    isolated = Cluster.log(Cluster.node_dir(c, pid))
    tail = Cluster.messages(isolated -- Cluster.log(hd(majority)))
    heal_at = System.os_time(:millisecond)
    :ok = NetNS.link(h, :up)

    IO.puts(
      "\n  partition: node #{pid} (primary of epoch #{epoch}) cut off for #{heal_at - cut_at} ms; " <>
        "node #{new_id} primary of epoch #{new_epoch}; the isolated node held #{length(tail)} messages the majority lacked"
    )

    # Healed: the old primary follows the new term; traffic goes on.
    _view =
      await_node(
        nodes,
        view,
        pid,
        fn role, e -> role == "follower" and e >= new_epoch end,
        60_000
      )

    grow(dirs(c), 500, 60_000)
    Cluster.signal_file(Path.join(mdir, "stop"))

    for {m, id} <- Enum.zip(ms, ids),
        do: assert(:ok = Cluster.await_members(m, "member quiet", [id], 180_000))

    assert {:ok, _} = Cluster.await_logs_settled(dirs(c), 60_000)
    logs = Enum.map(dirs(c), &Cluster.log/1)
    {target, _, _} = List.last(Cluster.messages(hd(logs)))
    Cluster.signal_file(Path.join(mdir, "final"), "#{target}")

    for {m, id} <- Enum.zip(ms, ids),
        do: assert(:ok = Cluster.await_members(m, "member done", [id], 180_000))

    rs = results(mdir, ids)
    assert Check.all(logs, rs, ids) == []

    # What the member on the isolated host delivered while cut off: all of
    # it in the majority's log (checked above for every delivery), nothing
    # of the old primary's uncommitted tail.
    r = Enum.find(rs, &(&1.id == cut_off))
    during = for {f, l, t} <- r.batches, t >= cut_at and t <= heal_at, do: l - f + 1
    final = MapSet.new(Cluster.messages(hd(logs)))

    # The old primary's uncommitted entries were not kept: the indices they
    # had hold the majority's messages.
    assert Enum.filter(tail, &(&1 in final)) == []

    for x <- rs,
        m <- tail,
        m in x.delivered,
        do: assert(m in final, "member #{x.id} delivered #{inspect(m)} of the isolated side")

    IO.puts(
      "  the cut-off member #{cut_off} delivered #{Enum.sum(during)} messages while cut off, " <>
        "#{length(r.delivered)} in all; final logs #{length(hd(logs))} entries, forks 0"
    )

    OSProcess.kill_all(nodes)
  end

  # Until every log of `dirs` holds `n` more entries than the longest now.
  defp grow(dirs, n, timeout) do
    start = Enum.max(Enum.map(dirs, &(Cluster.next_index(&1) || 0)))
    deadline = System.monotonic_time(:millisecond) + timeout
    wait_growth(dirs, start + n, deadline)
  end

  defp wait_growth(dirs, want, deadline) do
    now = Enum.min(Enum.map(dirs, &(Cluster.next_index(&1) || 0)))

    cond do
      now >= want ->
        :ok

      System.monotonic_time(:millisecond) > deadline ->
        flunk("the logs did not reach #{want} (at #{now})")

      true ->
        Process.sleep(50)
        wait_growth(dirs, want, deadline)
    end
  end
end

defmodule Tachyon.MembershipTest do
  # Membership changes (Tachyon.Sequencer.add_node/3, remove_node/3, the
  # :join option): their errors on a group of three in this VM; and a host
  # replaced on real sockets, nodes as OS processes (`mix tachyon.sequencer`,
  # Tachyon.Sequencer.OSProcess) under member traffic (Tachyon.Traffic): a
  # node killed -9, removed, a fresh node on an empty directory joins
  # through a follower, catches up and is made a voter; then the primary's
  # kill: the group with the new node elects, and every acknowledged
  # publish is delivered in one order. Not async: ports and OS processes.
  use ExUnit.Case, async: false

  import Tachyon.TestHelpers, only: [tmp_dir: 1]

  alias Tachyon.Nemesis.Cluster
  alias Tachyon.Sequencer
  alias Tachyon.Sequencer.OSProcess
  alias Tachyon.Traffic

  defp hostport({_ip, port}), do: "127.0.0.1:#{port}"

  # Calls `fun` until it returns a truthy value (every 20 ms, at most
  # `timeout` ms): the value, or nil.
  defp eventually(fun, timeout) do
    deadline = System.monotonic_time(:millisecond) + timeout

    Stream.repeatedly(fn ->
      fun.() ||
        if System.monotonic_time(:millisecond) < deadline do
          Process.sleep(20)
          nil
        else
          :gave_up
        end
    end)
    |> Enum.find(& &1)
    |> case do
      :gave_up -> nil
      v -> v
    end
  end

  describe "errors" do
    # A group of two in this VM (`two_nodes: :safe`: the primary, `s0`
    # in the tests, commits
    # nothing its standby lacks, and keeps its role when the standby is
    # gone: a change it appends then cannot commit).
    setup do
      group = for _ <- 1..2, do: {{127, 0, 0, 1}, OSProcess.free_port()}

      # Node 0, eager, last: its election at start finds the others up.
      seqs =
        for {{ip, port}, i} <- Enum.reverse(Enum.with_index(group)) do
          {:ok, s} =
            Sequencer.start_link(
              path: tmp_dir("memb#{i}"),
              ip: ip,
              port: port,
              group: group,
              wait: :park,
              eager: i == 0,
              stats_interval_ms: nil
            )

          s
        end
        |> Enum.reverse()

      # Either may win (node 1 may campaign while node 0 starts).
      primary =
        eventually(fn -> Enum.find(seqs, &(Sequencer.info(&1).role == :primary)) end, 30_000)

      assert primary != nil
      [standby] = seqs -- [primary]
      # (Linked to the test's process: they close when it exits.)
      %{seqs: [primary, standby], group: group, primary: Enum.find_index(seqs, &(&1 == primary))}
    end

    test "bad addresses raise; a follower answers with the primary; one change at a time",
         %{seqs: [s0, s1], group: group, primary: i} do
      for bad <- ["nope", "127.0.0.1", "127.0.0.1:0", {{127, 0, 0, 1}, 70_000}, :x] do
        assert_raise ArgumentError, ~r/add_node\/3 takes a node's address/, fn ->
          Sequencer.add_node(s0, bad)
        end
      end

      assert_raise ArgumentError,
                   ~r/remove_node\/3 takes a node's id \(0..63\), or its address/,
                   fn ->
                     Sequencer.remove_node(s0, 64)
                   end

      # A follower refuses, naming the primary (once it has heard it).
      primary = Enum.at(group, i)

      assert eventually(
               fn ->
                 Sequencer.add_node(s1, "127.0.0.1:9") == {:error, {:not_primary, primary}}
               end,
               10_000
             )

      # An address of the group is its id: no change.
      assert Sequencer.add_node(s0, Enum.at(group, 1 - i)) == {:ok, 1 - i}
      assert Sequencer.remove_node(s0, 7) == {:error, :not_found}
      assert {:ok, %{node_id: standby, nodes: nodes}} = Sequencer.membership(s1)
      assert standby == 1 - i

      assert Enum.map(nodes, &{&1.id, &1.address, &1.voter}) ==
               for({a, i} <- Enum.with_index(group), do: {i, a, true})

      # The standby gone: a change is appended and never committed; the
      # next one waits for it.
      :ok = Sequencer.close(s1)
      assert Sequencer.add_node(s0, "127.0.0.1:9", 300) == {:error, :timeout}
      assert Sequencer.remove_node(s0, 1 - i, 300) == {:error, :change_in_progress}
      assert {:ok, %{nodes: nodes}} = Sequencer.membership(s0)
      assert %{id: 2, address: {{127, 0, 0, 1}, 9}, voter: false} in nodes

      assert Sequencer.add_node(s1, "127.0.0.1:9") == {:error, :noproc}
      assert Sequencer.membership(s1) == {:error, :noproc}
    end
  end

  test "the :join option is checked" do
    dir = tmp_dir("membjoin")
    base = [path: dir, ip: {127, 0, 0, 1}, port: OSProcess.free_port(), wait: :park]

    assert_raise ArgumentError, ~r/:join/, fn -> Sequencer.start_link(base ++ [join: "x:y"]) end

    assert_raise ArgumentError, ~r/:join or :group, not both/, fn ->
      Sequencer.start_link(base ++ [join: "127.0.0.1:9", group: [{{127, 0, 0, 1}, base[:port]}]])
    end

    assert_raise ArgumentError, ~r/non-zero :port/, fn ->
      Sequencer.start_link(Keyword.put(base, :port, 0) ++ [join: "127.0.0.1:9"])
    end

    assert_raise ArgumentError, ~r/own address/, fn ->
      Sequencer.start_link(base ++ [join: {{127, 0, 0, 1}, base[:port]}])
    end
  end

  describe "replacing a host" do
    @describetag :slow
    @describetag timeout: 240_000
    @election_timeout 250

    test "a fresh node joins through a follower, becomes a voter, and the group with it fails over" do
      ds = for i <- 0..2, do: tmp_dir("replace#{i}")
      new_dir = tmp_dir("replace_new")
      extra = ["--election-timeout", "#{@election_timeout}"]
      {first, rest, group} = OSProcess.start_group(ds, extra)
      new_addr = {{127, 0, 0, 1}, OSProcess.free_port()}
      # The members list the new host's address too: a member takes bus
      # datagrams from the nodes it lists (and learns others only from
      # their datagrams).
      ms = Traffic.start_all(group ++ [new_addr], 1..3)
      Traffic.await_more(ms, 200, 30_000)

      {p, [dead, f], _} = OSProcess.current_primary([first | rest], first)
      OSProcess.kill(dead)
      Traffic.await_more(ms, 100, 30_000)

      t0 = System.monotonic_time(:millisecond)
      {p, [f], _} = OSProcess.current_primary([p, f], p)

      assert OSProcess.change(f, "remove_node #{dead.id}") ==
               {:error, "not_primary #{hostport(p.address)}"}

      assert OSProcess.change(p, "remove_node #{dead.id}") == {:ok, dead.id}
      removed_ms = System.monotonic_time(:millisecond) - t0

      # The fresh node asks the follower, which passes the request on.
      started = System.monotonic_time(:millisecond)

      {:ok, new} =
        OSProcess.start(
          ["--path", new_dir, "--ip", "127.0.0.1", "--port", "#{elem(new_addr, 1)}"] ++
            ["--join", hostport(f.address), "--wait", "backoff", "--no-eager"] ++ extra
        )

      ready_ms = System.monotonic_time(:millisecond) - started

      voter =
        eventually(
          fn ->
            with {:ok, %{nodes: nodes}} <- OSProcess.membership(p),
                 %{voter: true, id: id} <- Enum.find(nodes, &(&1.address == hostport(new_addr))) do
              id
            else
              _ -> nil
            end
          end,
          60_000
        )

      voter_ms = System.monotonic_time(:millisecond) - started
      assert voter == dead.id, "the new node is a voter, with the free id"
      new = Map.put(new, :id, voter)

      # Its own account: a learner (a new disk) until it caught up. (Its
      # events are printed from its ready line on: their times say nothing
      # of how long the catch-up took.)
      caught_up? = fn _, l -> l.line == :event and l.kind == :caught_up end
      assert {:ok, _, _caught, seen} = OSProcess.await([new], caught_up?, 10_000)

      learner =
        Enum.find_value(seen, fn {_, l} -> l.line == :event and l.kind == :learner and l end)

      assert learner.fields.reason == "new_disk"
      # Every node says so (the follower that passed the request on too).
      assert {:ok, _, _} =
               OSProcess.await_event(
                 [f],
                 :membership,
                 10_000,
                 &(&1.voters == 3 and &1.nodes == 3)
               )

      assert {:ok, %{node_id: ^voter, nodes: nodes}} = OSProcess.membership(new)
      assert length(nodes) == 3 and Enum.all?(nodes, & &1.voter)
      Traffic.await_more(ms, 200, 30_000)

      # The primary of now dies: the other two (the new one among them) elect.
      {p, others, _} = OSProcess.current_primary([p, f, new], p)
      killed_at = System.monotonic_time(:millisecond)
      OSProcess.kill(p)
      assert {:ok, took} = OSProcess.await_role(others, "primary", 60_000, p.epoch)
      elected_ms = System.monotonic_time(:millisecond) - killed_at
      Traffic.await_more(ms, 300, 60_000)

      results = Traffic.finish(ms)
      order = Traffic.assert_one_order(results)
      assert Enum.all?(results, &(&1.failed == [] and &1.close == :ok))

      IO.puts(
        "\n  replacing a host: node #{dead.id} killed, removed in #{removed_ms} ms; the fresh " <>
          "node (id #{voter}) ready #{ready_ms} ms after its start (a VM's boot), a voter " <>
          "#{voter_ms} ms after its start; primary #{p.id} " <>
          "(epoch #{p.epoch}) killed, node #{took.node.id} primary of epoch #{took.epoch} " <>
          "#{elected_ms} ms later; #{length(order)} messages in one order"
      )

      # Both survivors' logs hold exactly the order.
      dirs = Map.new(others, &{&1.id, if(&1.id == new.id, do: new_dir, else: Enum.at(ds, &1.id))})
      assert {:ok, _} = Cluster.await_logs_settled(Map.values(dirs), 30_000)
      OSProcess.kill_all(others)

      for n <- others do
        got = Cluster.messages(Cluster.log(Map.fetch!(dirs, n.id)))
        assert got == order, "node #{n.id}'s log: #{Traffic.first_difference(got, order)}"
      end
    end
  end
end

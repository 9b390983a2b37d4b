defmodule Tachyon.SequencerTest do
  # Not async: it counts the VM's OS threads (see lifecycle_test.exs).
  use ExUnit.Case, async: false

  import Tachyon.TestHelpers, only: [tmp_dir: 1, wait_until: 1, threads_named: 1]

  alias Tachyon.{Bus, Sequencer}
  alias Tachyon.Sequencer.OSProcess

  # Under ExUnit's supervisor: stopped (thread joined) before the next test
  # module, which may count threads.
  defp sup(opts), do: start_supervised!(Supervisor.child_spec({Sequencer, opts}, id: make_ref()))

  defp start_seq(label, opts \\ []) do
    dir = tmp_dir(label)
    {sup([path: dir, wait: :park, stats_interval_ms: nil] ++ opts), dir}
  end

  # Receives `n` bus messages for `bus` (messages mode), in arrival order.
  defp collect(bus, n, acc \\ [])
  defp collect(_bus, 0, acc), do: Enum.reverse(acc)

  defp collect(bus, n, acc) do
    receive do
      {:tachyon_bus, ^bus, seq, id, data} -> collect(bus, n - 1, [{seq, id, data} | acc])
    after
      20_000 -> flunk("only #{length(acc)} messages, #{n} missing")
    end
  end

  defp own_in_order(got, id, n) do
    assert for({_, ^id, d} <- got, do: d) == for(i <- 1..n, do: "#{id}:#{i}")
  end

  # Members 1..3 each publish `per` messages at once; each member's owner
  # returns everything it received.
  defp three_members(addr, per, extra \\ []) do
    parent = self()

    tasks =
      for id <- 1..3 do
        Task.async(fn ->
          {:ok, bus} = Bus.open([sequencer: addr, member_id: id] ++ extra)
          send(parent, {:joined, id})
          receive do: (:go -> :ok), after: (10_000 -> flunk("no go"))

          for i <- 1..per, do: publish!(bus, "#{id}:#{i}")
          got = collect(bus, 3 * per)
          Bus.close(bus)
          got
        end)
      end

    for id <- 1..3, do: assert_receive({:joined, ^id}, 10_000)
    for t <- tasks, do: send(t.pid, :go)
    Enum.map(tasks, &Task.await(&1, 60_000))
  end

  defp publish!(bus, data) do
    case Bus.publish(bus, data) do
      {:ok, _} -> :ok
      {:error, :busy} -> Process.sleep(1) && publish!(bus, data)
    end
  end

  test "three members publishing at once see one order, their own in publish order, nothing twice or missing" do
    {seq, _} = start_seq("three")
    per = 2000
    [a, b, c] = three_members(Sequencer.address(seq), per)
    assert :erlang.md5(:erlang.term_to_binary(a)) == :erlang.md5(:erlang.term_to_binary(b))
    assert a == c
    # 0: the session record, 1: the first term's epoch record.
    assert Enum.map(a, &elem(&1, 0)) == Enum.to_list(2..(3 * per + 1))
    for id <- 1..3, do: own_in_order(a, id, per)
    # Duplicates are possible (a resend under load) and dropped: 6000 stamped.
    assert {:ok, %{messages: 6000}} = Sequencer.stats(seq)
  end

  test "multicast bus: two members on the group see one order" do
    {:ok, probe} = :gen_udp.open(0)
    {:ok, gport} = :inet.port(probe)
    :gen_udp.close(probe)
    bus = {:multicast, {{239, 255, 42, 9}, gport}, ttl: 0}
    {seq, _} = start_seq("mcast", bus: bus)
    addr = Sequencer.address(seq)
    {:ok, a} = Bus.open(sequencer: addr, member_id: 1, bus: bus, delivery: :poll)
    {:ok, b} = Bus.open(sequencer: addr, member_id: 2, bus: bus, delivery: :poll)
    for i <- 1..50, do: {:ok, _} = Bus.publish(a, "1:#{i}")
    for i <- 1..50, do: {:ok, _} = Bus.publish(b, "2:#{i}")
    ga = recv_all(a, 100)
    assert ga == recv_all(b, 100)
    own_in_order(ga, 1, 50)
    own_in_order(ga, 2, 50)
    assert {:ok, %{members: 0}} = Sequencer.stats(seq)
  end

  test "messages mode with max_queue: the member pauses until acknowledged, nothing lost" do
    {seq, _} = start_seq("max-queue")
    {:ok, bus} = Bus.open(sequencer: Sequencer.address(seq), member_id: 3, max_queue: 10)
    for i <- 1..200, do: {:ok, _} = Bus.publish(bus, "m#{i}")
    # At the bound (give or take one datagram's messages), it waits.
    first = collect_for(bus, 300)
    assert length(first) >= 10 and length(first) < 200
    assert {:ok, %{in_flight: n}} = Bus.stats(bus)
    assert n == length(first)
    got = ack_all(bus, first, 200)
    assert Enum.map(got, &elem(&1, 2)) == for(i <- 1..200, do: "m#{i}")
    assert {:ok, %{in_flight: 0, acked: 200}} = Bus.stats(bus)
  end

  # What arrives within `ms` (messages mode).
  defp collect_for(bus, ms, acc \\ []) do
    receive do
      {:tachyon_bus, ^bus, seq, id, data} -> collect_for(bus, ms, [{seq, id, data} | acc])
    after
      ms -> Enum.reverse(acc)
    end
  end

  # Acknowledges what came, collects what comes next, until `total`.
  defp ack_all(bus, got, total) do
    {:ok, %{acked: acked}} = Bus.stats(bus)
    if length(got) > acked, do: :ok = Bus.ack(bus, length(got) - acked)
    if length(got) >= total, do: got, else: ack_all(bus, got ++ collect_for(bus, 50), total)
  end

  test "poll mode: recv delivers in order; fragments of a large message are reassembled" do
    {seq, _} = start_seq("poll")
    {:ok, bus} = Bus.open(sequencer: Sequencer.address(seq), member_id: 9, delivery: :poll)
    big = :crypto.strong_rand_bytes(100_000)
    {:ok, 1} = Bus.publish(bus, "a")
    {:ok, last} = Bus.publish(bus, big)
    assert last > 2, "fragmented into several commands"
    assert [{2, 9, "a"}, {_, 9, ^big}] = recv_all(bus, 2)
    assert {:error, :timeout} = Bus.recv(bus, 20)
    assert {:error, :too_large} = Bus.publish(bus, :binary.copy("x", 2_000_000))
    Bus.close(bus)
    assert {:error, :closed} = Bus.recv(bus, 10)
    assert {:error, :closed} = Bus.publish(bus, "x")
  end

  defp recv_all(bus, n, acc \\ []) do
    if length(acc) >= n do
      acc
    else
      {:ok, l} = Bus.recv(bus, 5000)
      recv_all(bus, n, acc ++ l)
    end
  end

  test "a lossy relay (5% dropped both ways, duplicates, reordering) changes nothing" do
    {seq, _} = start_seq("lossy")

    {:ok, relay} =
      Tachyon.LossyRelay.start_link(Sequencer.address(seq), drop: 0.05, dup: 0.02, reorder: 0.02)

    per = 500
    [a, b, c] = three_members(Tachyon.LossyRelay.address(relay), per, resend_after_ms: 10)
    assert a == b and b == c
    assert Enum.map(a, &elem(&1, 0)) == Enum.to_list(2..(3 * per + 1))
    for id <- 1..3, do: own_in_order(a, id, per)
    stats = Tachyon.LossyRelay.stats(relay)
    assert stats.dropped > 0 and stats.duplicated > 0 and stats.reordered > 0
    {:ok, st} = Sequencer.stats(seq)
    assert st.messages == 3 * per
    assert st.duplicates > 0 or st.out_of_order > 0
  end

  @tag :slow
  test "a member rewinding from 0 after 100,000 messages, while traffic continues, sees the same sequence" do
    {seq, _} = start_seq("rewind")
    addr = Sequencer.address(seq)
    {:ok, live} = Bus.open(sequencer: addr, member_id: 1, delivery: :poll)

    for chunk <- Enum.chunk_every(1..100_000, 100),
        do: {:ok, _} = Bus.publish_many(live, Enum.map(chunk, &"m#{&1}"))

    first = recv_all(live, 100_000)
    assert length(first) == 100_000
    {:ok, late} = Bus.open(sequencer: addr, member_id: 2, delivery: :poll, from: 0)
    # Traffic continues while the late member catches up.
    for i <- 1..2000, do: {:ok, _} = Bus.publish(live, "t#{i}")
    all = first ++ recv_all(live, 2000)
    assert recv_all(late, 102_000) == all
    assert {:ok, %{replay_requests: r}} = Bus.stats(late)
    assert r >= 100
  end

  test "kill -9 of the sequencer's OS process and a restart on the same log: numbering continues, resent commands sequenced once" do
    dir = tmp_dir("kill")
    {:ok, p} = OSProcess.start(["--path", dir, "--port", "0", "--wait", "park"])
    {ip, port} = p.address
    {:ok, bus} = Bus.open(sequencer: {ip, port}, member_id: 4, resend_after_ms: 20)
    for i <- 1..100, do: publish!(bus, "4:#{i}")
    got = collect(bus, 100)
    OSProcess.kill(p)
    # Published while no sequencer runs: resent after the restart.
    for i <- 101..150, do: publish!(bus, "4:#{i}")
    {:ok, p2} = OSProcess.start(["--path", dir, "--port", "#{port}", "--wait", "park"])
    assert p2.session == p.session and p.session != 0
    # 0 session, 1 epoch record, 2..101 the messages, 102 the restarted
    # node's epoch record. Its ready line may come after it sequenced some
    # of the member's resends (a loaded machine): the numbers below tell.
    assert p2.next_seq in 103..153
    got = got ++ collect(bus, 50)
    own_in_order(got, 4, 150)
    assert Enum.map(got, &elem(&1, 0)) == Enum.to_list(2..101) ++ Enum.to_list(103..152)
    refute_receive {:tachyon_bus, ^bus, _, _, _}, 100
    {:ok, st} = Bus.stats(bus)
    assert st.resent > 0
    OSProcess.kill(p2)
  end

  test "mix tachyon.sequencer --durability fsync: its stats, asked on its stdin, count the syncs and their time" do
    dir = tmp_dir("os-fsync")

    {:ok, p} =
      OSProcess.start(["--path", dir, "--port", "0", "--wait", "park", "--durability", "fsync"])

    {:ok, bus} = Bus.open(sequencer: p.address, member_id: 5)
    for i <- 1..20, do: publish!(bus, "5:#{i}")
    # Delivered only once on the node's disk: every one was synced.
    assert length(collect(bus, 20)) == 20
    assert {:ok, st} = OSProcess.stats(p)
    assert st.messages == 20
    assert st.syncs >= 1 and st.syncs <= st.sync_requests
    assert st.durable >= 22 and st.durable <= st.next_seq
    assert st.sync_time_us >= 0 and st.sync_errors == 0
    # Asked again: the same counters, still answering.
    assert {:ok, %{messages: 20}} = OSProcess.stats(p)
    Bus.close(bus)
    OSProcess.kill(p)
    # An unknown mode stops the task with a message (in this VM: Mix.raise).
    assert_raise Mix.Error, ~r/--durability must be replicated or fsync, got disk/, fn ->
      Mix.Tasks.Tachyon.Sequencer.run(["--path", dir, "--durability", "disk"])
    end
  end

  test "garbage on both ports is counted and dropped; a dead owner closes its member; stop frees the port and the thread" do
    before = threads_named("tachyon-seq")
    {seq, dir} = start_seq("garbage")
    assert threads_named("tachyon-seq") == before + 1
    {_, port} = addr = Sequencer.address(seq)
    {:ok, bus} = Bus.open(sequencer: addr, member_id: 1, delivery: :poll)
    {:ok, sock} = :gen_udp.open(0, [:binary])
    {:ok, %{address: _}} = {:ok, %{address: nil}}

    for len <- [0, 1, 19, 20, 27, 28, 64, 1400] do
      :ok = :gen_udp.send(sock, {127, 0, 0, 1}, port, :crypto.strong_rand_bytes(len))
    end

    {:ok, 1} = Bus.publish(bus, "after")
    assert {:ok, [{2, 1, "after"}]} = Bus.recv(bus, 5000)
    {:ok, st} = Sequencer.stats(seq)
    assert st.malformed >= 7

    # The member's own socket: garbage from a stranger.
    member_threads = threads_named("tachyon-bus")
    owner = spawn(fn -> receive do: (:stop -> :ok) end)
    {:ok, m} = Bus.open(sequencer: addr, member_id: 2, owner: owner)
    assert threads_named("tachyon-bus") == member_threads + 1
    Process.exit(owner, :kill)
    assert wait_until(fn -> threads_named("tachyon-bus") == member_threads end)
    assert {:error, :closed} = Bus.publish(m, "x")

    :ok = Sequencer.close(seq)
    assert threads_named("tachyon-seq") == before
    {:ok, again} = :gen_udp.open(port, [:binary, ip: {127, 0, 0, 1}])
    :gen_udp.close(again)
    seq2 = sup(path: dir, port: 0, wait: :park)
    # 0 session, 1 epoch record, 2 "after", 3 the restart's epoch record.
    assert %{next_seq: 4, recovered_members: 1} = Sequencer.info(seq2)
  end

  test ":events_to gets the node's events as messages from its start on; anything but a local pid raises" do
    {seq, _} = start_seq("events", events_to: self())
    # A group of one elects itself before start_link returns.
    assert_receive {:tachyon_sequencer_event, ^seq, :role, %{role: :primary, epoch: e}}, 5000
    assert %{role: :primary, epoch: ^e} = Sequencer.info(seq)

    assert_raise ArgumentError, ~r/:events_to/, fn ->
      Sequencer.start_link(path: tmp_dir("events-bad"), events_to: :me)
    end
  end

  test "bad options raise ArgumentError; no sequencer answers: timeout" do
    assert_raise ArgumentError, fn -> Sequencer.start_link(port: 1) end
    assert_raise ArgumentError, fn -> Bus.open(sequencer: {{127, 0, 0, 1}, 9}, member_id: 0) end

    assert_raise ArgumentError, fn ->
      Bus.open(
        sequencer: {{127, 0, 0, 1}, 9},
        member_id: 1,
        bus: {:multicast, {{10, 0, 0, 1}, 5}}
      )
    end

    {:ok, s} = :gen_udp.open(0)
    {:ok, p} = :inet.port(s)

    assert {:error, :timeout} =
             Bus.open(sequencer: {{127, 0, 0, 1}, p}, member_id: 1, connect_timeout_ms: 100)
  end
end

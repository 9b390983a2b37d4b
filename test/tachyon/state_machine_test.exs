defmodule Tachyon.StateMachineTest do
  use ExUnit.Case, async: true

  import Tachyon.TestHelpers, only: [tmp_dir: 1, wait_until: 1]

  alias Tachyon.{Sequencer, StateMachine}

  defmodule KV do
    # A key-value map: "put k v" / "del k"; the state also counts the
    # messages it holds (a restored state included), so that two runners
    # compare on more than the map.
    @behaviour Tachyon.StateMachine

    @impl true
    def init(_), do: %{map: %{}, count: 0}

    @impl true
    def apply(_meta, data, s) do
      s = %{s | count: s.count + 1}

      case String.split(data, " ", parts: 3) do
        ["put", k, v] -> {:ok, %{s | map: Map.put(s.map, k, v)}}
        ["del", k] -> {Map.get(s.map, k), %{s | map: Map.delete(s.map, k)}}
        _ -> {:ignored, s}
      end
    end

    @impl true
    def snapshot(s), do: :erlang.term_to_binary(s)

    @impl true
    def restore(bin, _initial), do: :erlang.binary_to_term(bin)
  end

  defp sequencer(dir) do
    {:ok, seq} =
      start_supervised(
        {Sequencer, path: Path.join(dir, "seq"), wait: :park, stats_interval_ms: nil}
      )

    Sequencer.address(seq)
  end

  defp runner(addr, id, opts \\ []) do
    opts = [module: KV, bus: [sequencer: addr, member_id: id]] ++ opts
    start_supervised!({StateMachine, opts}, id: {:sm, id})
  end

  defp put_all(sm, range) do
    for i <- range, do: assert({:ok, :ok} = StateMachine.command(sm, "put k#{rem(i, 97)} v#{i}"))
  end

  defp stats(sm) do
    {:ok, st} = StateMachine.stats(sm)
    st
  end

  test "commands are applied in order, with replies; a runner started later restores the latest snapshot, applies the rest, ends equal" do
    addr = sequencer(tmp_dir("sm-restore"))
    a = runner(addr, 1, snapshot_every: 50)
    put_all(a, 1..230)
    assert {:ok, "v230"} = StateMachine.command(a, "del k#{rem(230, 97)}")
    assert stats(a).snapshots >= 4

    b = runner(addr, 2)
    # Its own command goes through the same order, after the restore.
    assert {:ok, :ok} = StateMachine.command(b, "put late yes")
    assert :ok = StateMachine.sync(a, stats(b).applied)

    sb = stats(b)
    assert sb.restored != nil and sb.restored > 150
    assert sb.messages < 60, "applied #{sb.messages} messages after a snapshot at #{sb.restored}"
    {:ok, state_a} = StateMachine.state(a)
    assert {:ok, ^state_a} = StateMachine.state(b)
    assert state_a.count == 232
    assert state_a.map["late"] == "yes"
    assert {:ok, 232} = StateMachine.query(b, & &1.count)
  end

  test "snapshot_interval_ms: a snapshot of what was applied, without counting messages" do
    addr = sequencer(tmp_dir("sm-interval"))
    a = runner(addr, 1, snapshot_interval_ms: 20)
    put_all(a, 1..10)
    # A tick after the last command: a snapshot of all ten.
    assert wait_until(fn -> stats(a).last_snapshot == stats(a).applied + 1 end)
    as_of = stats(a).last_snapshot
    # One more round trip: the snapshot's messages, sequenced before it, are committed.
    assert {:ok, :ok} = StateMachine.command(a, "put x y")

    b = runner(addr, 2)
    assert :ok = StateMachine.sync(b, stats(a).applied)
    assert %{restored: r, messages: m} = stats(b)
    assert is_integer(r) and r >= as_of and m <= 1
    assert StateMachine.state(a) == StateMachine.state(b)
  end

  test "without a snapshot, a runner reads the whole log" do
    addr = sequencer(tmp_dir("sm-nosnap"))
    a = runner(addr, 1)
    put_all(a, 1..40)
    b = runner(addr, 2)
    assert :ok = StateMachine.sync(b, stats(a).applied)
    assert %{restored: nil, messages: 40} = stats(b)
    assert StateMachine.state(a) == StateMachine.state(b)
  end

  test "a runner killed and restarted by its supervisor restores and catches up" do
    addr = sequencer(tmp_dir("sm-kill"))
    a = runner(addr, 1, snapshot_every: 20)
    b = runner(addr, 2, name: :sm_killed)
    put_all(a, 1..100)
    assert :ok = StateMachine.sync(b, stats(a).applied)

    Process.exit(b, :kill)

    assert wait_until(fn ->
             is_pid(Process.whereis(:sm_killed)) and Process.whereis(:sm_killed) != b
           end)

    put_all(a, 101..130)
    assert :ok = StateMachine.sync(:sm_killed, stats(a).applied)
    assert %{restored: restored} = stats(:sm_killed)
    assert is_integer(restored) and restored >= 80
    assert StateMachine.state(a) == StateMachine.state(:sm_killed)
  end

  test "a snapshot larger than a datagram (1 MB) round-trips" do
    addr = sequencer(tmp_dir("sm-big"))
    a = runner(addr, 1)
    # 1.6 MB of state, in four messages (each under max_message_size).
    bigs = for i <- 1..4, do: {"big#{i}", Base.encode64(:crypto.strong_rand_bytes(300_000))}
    for {k, v} <- bigs, do: assert({:ok, :ok} = StateMachine.command(a, "put #{k} #{v}"))
    assert {:ok, as_of} = StateMachine.publish_snapshot(a)
    put_all(a, 1..5)

    b = runner(addr, 2)
    assert :ok = StateMachine.sync(b, stats(a).applied)
    assert %{restored: ^as_of, restored_size: size, messages: 5} = stats(b)
    assert size > 1_600_000
    {:ok, state_a} = StateMachine.state(a)
    assert {:ok, ^state_a} = StateMachine.state(b)
    for {k, v} <- bigs, do: assert(state_a.map[k] == v)
  end

  test "Bus: a snapshot of several chunks, delivered to members opened from: :snapshot only (messages and poll)" do
    alias Tachyon.Bus
    addr = sequencer(tmp_dir("bus-snap"))
    {:ok, a} = Bus.open(sequencer: addr, member_id: 1, delivery: :poll)
    {:ok, _} = Bus.publish(a, "before")
    {:ok, [{s1, 1, "before"}]} = Bus.recv(a, 5000)
    state = :crypto.strong_rand_bytes(150_000)
    assert {:ok, _member_seq} = Bus.publish_snapshot(a, s1 + 1, [state, "!"])
    {:ok, _} = Bus.publish(a, "after")
    assert {:ok, _} = Bus.recv(a, 5000)

    {:ok, b, %{snapshot: as_of, joined_seq: joined}} =
      Bus.open_info(sequencer: addr, member_id: 2, from: :snapshot)

    assert as_of == s1 + 1 and joined > as_of

    chunks = receive_snapshot(b, [])
    assert length(chunks) == 3
    assert Enum.all?(chunks, &match?({_, 1, ^as_of, _, _}, &1))
    assert [false, false, true] == Enum.map(chunks, &elem(&1, 4))
    assert IO.iodata_to_binary(Enum.map(chunks, &elem(&1, 3))) == state <> "!"
    assert_receive {:tachyon_bus, ^b, _, 1, "after"}, 5000
    refute_received {:tachyon_bus, ^b, _, _, "before"}

    {:ok, p} = Bus.open(sequencer: addr, member_id: 3, from: :snapshot, delivery: :poll)
    items = recv_until(p, "after", [])

    assert [
             {:snapshot, ^as_of, _, false},
             {:snapshot, ^as_of, _, false},
             {:snapshot, ^as_of, _, true}
           ] = for({_, 1, {:snapshot, _, _, _} = x} <- items, do: x)

    # A member not opened from: :snapshot never sees one.
    {:ok, c} = Bus.open(sequencer: addr, member_id: 4, from: 1, delivery: :poll)
    assert Enum.all?(recv_until(c, "after", []), &is_binary(elem(&1, 2)))
  end

  defp receive_snapshot(b, acc) do
    receive do
      {:tachyon_bus_snapshot, ^b, seq, id, as_of, chunk, true} ->
        Enum.reverse([{seq, id, as_of, chunk, true} | acc])

      {:tachyon_bus_snapshot, ^b, seq, id, as_of, chunk, false} ->
        receive_snapshot(b, [{seq, id, as_of, chunk, false} | acc])
    after
      5000 -> flunk("no snapshot after #{length(acc)} chunks")
    end
  end

  defp recv_until(bus, last, acc) do
    {:ok, l} = Tachyon.Bus.recv(bus, 5000)
    acc = acc ++ l
    if Enum.any?(l, &(elem(&1, 2) == last)), do: acc, else: recv_until(bus, last, acc)
  end

  test "bad options raise ArgumentError naming the option" do
    bus = [sequencer: {{127, 0, 0, 1}, 1}, member_id: 1]

    for {opts, pattern} <- [
          {[bus: bus], ~r/:module/},
          {[module: String, bus: bus], ~r/:module/},
          {[module: KV], ~r/:bus/},
          {[module: KV, bus: [{:from, 3} | bus]], ~r/:bus/},
          {[module: KV, bus: bus, snapshot_every: 0], ~r/:snapshot_every/},
          {[module: KV, bus: bus, snapshot_evry: 5], ~r/snapshot_every/},
          {[module: KV, bus: [member_id: 0, sequencer: {{127, 0, 0, 1}, 1}]], ~r/:member_id/},
          {:garbage, ~r/keyword/}
        ] do
      assert_raise ArgumentError, pattern, fn -> StateMachine.start_link(opts) end
    end
  end

  test "calls on a name no runner runs under" do
    assert {:error, :noproc} = StateMachine.state(:no_such_machine)
    assert {:error, :noproc} = StateMachine.close(:no_such_machine)
  end
end

defmodule Tachyon.ReplicatedTableTest do
  use ExUnit.Case, async: false

  import Tachyon.TestHelpers, only: [tmp_dir: 1]

  alias Tachyon.{Bus, Sequencer}
  alias Tachyon.Table.Replicated, as: R

  defp replica(dir, addr, id) do
    {:ok, pid} = R.start_link(path: Path.join(dir, "r#{id}"), sequencer: addr, member_id: id)
    pid
  end

  # The model: every write of the log, in sequence order, folded.
  defp model(addr, upto) do
    {:ok, bus} = Bus.open(sequencer: addr, member_id: 99, delivery: :poll, from: 0)
    entries = read(bus, upto, [])
    Bus.close(bus)

    Enum.reduce(entries, %{}, fn {_seq, _id, data}, m ->
      case :erlang.binary_to_term(data) do
        {_, {:put, k, v}} -> Map.put(m, k, v)
        {_, {:delete, k}} -> Map.delete(m, k)
      end
    end)
  end

  defp read(bus, upto, acc) do
    case acc do
      [{seq, _, _} | _] when seq >= upto ->
        Enum.reverse(acc)

      _ ->
        {:ok, l} = Bus.recv(bus, 5000)
        read(bus, upto, Enum.reverse(l, acc))
    end
  end

  defp writes(r, id, n) do
    :rand.seed(:exsss, {id, 7, 11})

    for _ <- 1..n do
      k = "k#{:rand.uniform(50)}"

      if :rand.uniform(4) == 1,
        do: :ok = R.delete(r, k),
        else: :ok = R.put(r, k, "#{id}-#{:rand.uniform(1000)}")
    end
  end

  test "random puts and deletes from three replicas, one killed and restarted, one started late: all equal to the model" do
    dir = tmp_dir("replicated")

    {:ok, seq} =
      start_supervised(
        {Sequencer, path: Path.join(dir, "seq"), wait: :park, stats_interval_ms: nil}
      )

    addr = Sequencer.address(seq)
    [r1, r2, r3] = for id <- 1..3, do: replica(dir, addr, id)
    Process.unlink(r3)

    w1 = Task.async(fn -> writes(r1, 1, 400) end)
    w2 = Task.async(fn -> writes(r2, 2, 400) end)
    writes(r3, 3, 100)
    # Killed mid-stream, then restarted on the same table: it resumes
    # from the last sequence number it applied.
    Process.exit(r3, :kill)
    r3 = replica(dir, addr, 3)
    writes(r3, 3, 100)
    Task.await(w1, 60_000)
    Task.await(w2, 60_000)

    {:ok, %{next_seq: next}} = Sequencer.stats(seq)
    last = next - 1
    late = replica(dir, addr, 4)

    for r <- [r1, r2, r3, late], do: assert(:ok = R.sync(r, last, 10_000))

    want = model(addr, last)
    assert map_size(want) > 10

    for r <- [r1, r2, r3, late] do
      assert R.to_map(r) == want
      assert R.applied(r) == last
    end
  end

  test "a replica started after writes and snapshots restores the latest snapshot, applies the rest, has every key" do
    dir = tmp_dir("replicated-snap")

    {:ok, seq} =
      start_supervised(
        {Sequencer, path: Path.join(dir, "seq"), wait: :park, stats_interval_ms: nil}
      )

    addr = Sequencer.address(seq)

    {:ok, a} =
      R.start_link(path: Path.join(dir, "a"), sequencer: addr, member_id: 1, snapshot_every: 100)

    for i <- 1..350, do: :ok = R.put(a, "k#{i}", "v#{i}")
    :ok = R.delete(a, "k7")

    late = replica(dir, addr, 2)
    :ok = R.put(late, "late", "yes")
    assert :ok = R.sync(a, R.applied(late))

    {:ok, st} = Tachyon.StateMachine.stats(late)
    assert st.restored != nil and st.restored > 300
    assert st.messages < 60, "applied #{st.messages} writes after a snapshot at #{st.restored}"

    want = Map.new(1..350, &{"k#{&1}", "v#{&1}"}) |> Map.delete("k7") |> Map.put("late", "yes")
    assert R.to_map(late) == want
    assert R.to_map(a) == want
    assert R.applied(late) == R.applied(a)

    # Restarted on its table: it resumes from its own position (no restore).
    GenServer.stop(late)
    late = replica(dir, addr, 2)
    assert :ok = R.sync(late, R.applied(a))
    assert {:ok, %{restored: nil, messages: 0}} = Tachyon.StateMachine.stats(late)
    assert R.to_map(late) == want
  end

  test "bad options raise ArgumentError" do
    assert_raise ArgumentError, ~r/:member_id/, fn ->
      R.start_link(path: "/tmp/x", sequencer: {{127, 0, 0, 1}, 1})
    end

    assert_raise ArgumentError, ~r/:snapshot_every/, fn ->
      R.start_link(
        path: "/tmp/x",
        sequencer: {{127, 0, 0, 1}, 1},
        member_id: 1,
        snapshot_every: -1
      )
    end
  end
end

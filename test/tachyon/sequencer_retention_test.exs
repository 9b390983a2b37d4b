defmodule Tachyon.SequencerRetentionTest do
  use ExUnit.Case, async: true

  import Tachyon.TestHelpers, only: [tmp_dir: 1, wait_until: 2]

  alias Tachyon.{Bus, Sequencer}

  @seg 65_536
  # A segment file of the log: header page, index (1024 slots), data.
  @file_len 4096 + 4096 + @seg
  @limit 4 * @file_len

  defp start(dir) do
    opts = [
      path: dir,
      port: 0,
      wait: :park,
      stats_interval_ms: nil,
      segment_size: @seg,
      retention: [max_bytes: @limit]
    ]

    id = make_ref()
    {start_supervised!(Supervisor.child_spec({Sequencer, opts}, id: id)), id}
  end

  defp du(dir) do
    # (A file removed while du looks is a complaint, and du's total is
    # still on its last line.)
    {out, _} = System.cmd("du", ["-s", "-B1", dir], stderr_to_stdout: true)

    out
    |> String.split("\n", trim: true)
    |> List.last()
    |> String.split()
    |> hd()
    |> String.to_integer()
  end

  defp payload(i), do: "m#{i}-" <> :binary.copy("x", 200)

  # The next `n` messages for `bus`, in order.
  defp collect(bus, n, acc \\ [])
  defp collect(_bus, 0, acc), do: Enum.reverse(acc)

  defp collect(bus, n, acc) do
    receive do
      {:tachyon_bus, ^bus, seq, _id, data} -> collect(bus, n - 1, [{seq, data} | acc])
    after
      20_000 -> flunk("#{n} messages missing after #{length(acc)}")
    end
  end

  test "a node with retention keeps its directory bounded; a member from 1 is told where it starts, then reads the rest; a restart goes on" do
    dir = tmp_dir("seq-retention")
    {seq, id} = start(dir)
    {:ok, live} = Bus.open(sequencer: Sequencer.address(seq), member_id: 1)
    n = 20_000

    for chunk <- Enum.chunk_every(1..n, 100) do
      {:ok, _} = Bus.publish_many(live, Enum.map(chunk, &payload/1))
    end

    # The live member reads everything (the node keeps what a member
    # heard lately still has to read): 0 is the session record, 1 the
    # first epoch's.
    got = collect(live, n)
    assert List.last(got) == {n + 1, payload(n)}
    # About 70 segments written; retention runs every second.
    assert wait_until(fn -> du(dir) <= @limit + 3 * @file_len + 64 * 1024 end, 500),
           "du #{du(dir)} bytes"

    # Opened from below the first message kept: refused with where the
    # log starts now (`Tachyon.Bus`, "Events", `:trimmed`); from there on,
    # every message kept, in order.
    addr = Sequencer.address(seq)
    assert {:error, {:trimmed, first}} = Bus.open(sequencer: addr, member_id: 2, from: 1)
    assert first > n / 2
    {:ok, late} = Bus.open(sequencer: addr, member_id: 4, from: first)
    rest = collect(late, n + 2 - first)
    assert rest == Enum.drop(got, first - 2)
    Bus.close(late)
    Bus.close(live)

    # Restarted on the directory: the log opens from its first entry kept.
    :ok = stop_supervised!(id)
    {seq, _} = start(dir)
    {:ok, again} = Bus.open(sequencer: Sequencer.address(seq), member_id: 3)
    {:ok, _} = Bus.publish(again, "after the restart")
    assert_receive {:tachyon_bus, ^again, at, 3, "after the restart"}, 20_000
    # (After the log kept, and the new term's epoch record.)
    assert at > n + 1
    Bus.close(again)
  end
end

defmodule Tachyon.Bench.Sequencer.Messages do
  @moduledoc false
  # tachyon.sequencer.roundtrip.messages and .subscriber: the bus round trip
  # with the member's thread delivering (`delivery: :messages`, its default
  # wait): what a process that receives from a member sees, the thread's
  # hand-off included. `:owner`: a member of `Bus.open/1`, the process its
  # owner; `:subscriber`: a member of `Bus.start_link/1` with no owner, the
  # process its one subscriber.

  alias Tachyon.{Bench, Bus}

  @doc "The case against the sequencer `seq` (what `with_sequencer` gives)."
  def roundtrip(name, seq, cfg, how) do
    msg = :binary.copy(<<0x5A>>, cfg.size)

    h =
      Bench.in_big_heap(fn ->
        {bus, member} = member(seq, how)
        {h, _, _gcs} = Bench.sample(cfg.warmup, cfg.n, fn k, h, _ -> loop(bus, msg, k, h) end)
        Bus.close(member)
        h
      end)

    Bench.from_hist(name, h, cfg.size, %{
      unit: :perf_counter,
      note:
        "member in :messages mode: its thread sends each message to this process (its #{how})" <>
          seq.note
    })
  end

  # {the member, what to close}.
  defp member(seq, :owner) do
    {:ok, bus} = Bus.open(sequencer: seq.bus, member_id: 1, auth: seq.auth)
    {bus, bus}
  end

  defp member(seq, :subscriber) do
    {:ok, pid} =
      Bus.start_link(
        sequencer: seq.bus,
        member_id: 1,
        stats_interval_ms: nil,
        auth: seq.auth
      )

    :ok = Bus.subscribe(pid)
    {Bus.bus(pid), pid}
  end

  defp loop(_bus, _msg, 0, _h), do: nil

  defp loop(bus, msg, k, h) do
    t0 = :os.perf_counter()
    {:ok, ms} = Bus.publish(bus, msg)

    receive do
      {:tachyon_bus, ^bus, _seq, 1, _data} -> :ok
    after
      5000 -> raise "tachyon.sequencer.roundtrip.messages: no message in 5 s (member_seq #{ms})"
    end

    if h, do: Bench.record(h, :os.perf_counter() - t0)
    loop(bus, msg, k - 1, h)
  end
end

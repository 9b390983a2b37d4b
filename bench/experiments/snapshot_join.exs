# A member joining a bus with a large log: from the latest state machine
# snapshot (Tachyon.StateMachine's restore, then the tail after it)
# against reading the whole log from its start and applying every message.
#
#   mix run bench/experiments/snapshot_join.exs
#
# Environment: LOG_MB (the log's size in MiB of message data, default
# 256), SIZE (bytes per message, default 1024), KEYS (distinct keys the
# messages overwrite, default 10,000: the state is about KEYS * SIZE
# bytes), TAIL (messages after the snapshot, default 10,000).
#
# One sequencer (in this VM, `wait: :park`, its log on /tmp). A runner
# (the "writer") applies every message as it is sequenced; once the log is
# filled it publishes a snapshot of its state, then the tail is
# published. Then, timed:
#
#   replay     a Tachyon.Bus member opened `from: 1`, `delivery: :poll`,
#              folding every message into the same map (the fast path of
#              the bus: no process hand-off), until the log's last message
#   snapshot   a Tachyon.StateMachine runner started on the bus: it opens
#              `from: :snapshot`, restores, applies the tail; until it has
#              applied the log's last message (start_link and sync)
#
# and checks that both ended at the writer's state.
alias Tachyon.{Bus, Sequencer, StateMachine}

mb = String.to_integer(System.get_env("LOG_MB", "256"))
size = String.to_integer(System.get_env("SIZE", "1024"))
keys = String.to_integer(System.get_env("KEYS", "10000"))
tail = String.to_integer(System.get_env("TAIL", "10000"))
n = div(mb * 1024 * 1024, size)

defmodule SnapKV do
  @behaviour Tachyon.StateMachine
  def init(_), do: %{}
  def apply(_meta, <<k::32, _::binary>> = v, m), do: {:ok, Map.put(m, k, v)}
  def apply(_meta, _other, m), do: {:ignored, m}
  def snapshot(m), do: :erlang.term_to_binary(m)
  def restore(bin, _), do: :erlang.binary_to_term(bin)

  # The fold of the replay, the same as apply/3.
  def fold([], m), do: m
  def fold([{_seq, _id, <<k::32, _::binary>> = v} | rest], m), do: fold(rest, Map.put(m, k, v))
  def fold([_ | rest], m), do: fold(rest, m)
end

defmodule SnapJoin do
  def msg(i, keys, pad), do: <<rem(i, keys)::32, i::64, pad::binary>>

  # Publishes messages from..to in batches; a :busy publish drains the
  # member's own deliveries first (a :poll member: nobody else does).
  def fill(bus, from, to, keys, pad) when from <= to do
    last = min(from + 63, to)
    batch = for i <- from..last, do: msg(i, keys, pad)

    case Bus.publish_many(bus, batch) do
      {:ok, _} ->
        drain(bus, 0)
        fill(bus, last + 1, to, keys, pad)

      {:error, :busy} ->
        drain(bus, 10)
        fill(bus, from, to, keys, pad)
    end
  end

  # Every message published is sequenced (a :poll member hears it by polling).
  def fill(bus, _from, _to, _keys, _pad) do
    case Bus.stats(bus) do
      {:ok, %{pending: 0}} ->
        :ok

      _ ->
        drain(bus, 10)
        fill(bus, 1, 0, nil, nil)
    end
  end

  defp drain(bus, timeout) do
    case Bus.recv(bus, timeout) do
      {:ok, _} -> drain(bus, 0)
      {:error, :timeout} -> :ok
    end
  end

  def replay(bus, last, m) do
    {:ok, l} = Bus.recv(bus, 10_000)
    m = SnapKV.fold(l, m)
    {seq, _, _} = List.last(l)
    if seq >= last, do: m, else: replay(bus, last, m)
  end

  def secs(us), do: :erlang.float_to_binary(us / 1_000_000, decimals: 2)
  def mib(b), do: :erlang.float_to_binary(b / 1_048_576, decimals: 1)
end

dir = Path.join(System.tmp_dir!(), "snapshot-join-#{System.os_time()}")
{:ok, seq} = Sequencer.start_link(path: dir, wait: :park, stats_interval_ms: nil)
addr = Sequencer.address(seq)
pad = :binary.copy(<<0x5A>>, max(size - 12, 0))

{:ok, writer} =
  StateMachine.start_link(module: SnapKV, bus: [sequencer: addr, member_id: 1, wait: :park])

{:ok, pub} = Bus.open(sequencer: addr, member_id: 2, delivery: :poll, wait: :park)

IO.puts("log: #{n} messages of #{size} bytes (#{mb} MiB), #{keys} keys, tail #{tail}")
{fill_us, :ok} = :timer.tc(fn -> SnapJoin.fill(pub, 1, n, keys, pad) end)
{:ok, %{next_seq: next}} = Sequencer.stats(seq)
:ok = StateMachine.sync(writer, next - 1, 600_000)
IO.puts("filled in #{SnapJoin.secs(fill_us)} s")

{snap_us, {:ok, as_of}} = :timer.tc(fn -> StateMachine.publish_snapshot(writer, 600_000) end)
:ok = SnapJoin.fill(pub, n + 1, n + tail, keys, pad)
{:ok, %{next_seq: next}} = Sequencer.stats(seq)
last = next - 1
:ok = StateMachine.sync(writer, last, 600_000)
{:ok, want} = StateMachine.state(writer)

IO.puts(
  "snapshot as of #{as_of} published in #{SnapJoin.secs(snap_us)} s; log's last seq #{last}"
)

{replay_us, replayed} =
  :timer.tc(fn ->
    {:ok, r} = Bus.open(sequencer: addr, member_id: 3, delivery: :poll, from: 1, wait: :park)
    m = SnapJoin.replay(r, last, %{})
    Bus.close(r)
    m
  end)

{join_us, joined} =
  :timer.tc(fn ->
    {:ok, j} =
      StateMachine.start_link(module: SnapKV, bus: [sequencer: addr, member_id: 4, wait: :park])

    :ok = StateMachine.sync(j, last, 600_000)
    j
  end)

{:ok, st} = StateMachine.stats(joined)
{:ok, got} = StateMachine.state(joined)
true = replayed == want and got == want

IO.puts("""
replay    #{SnapJoin.secs(replay_us)} s  (#{last} entries read, every message applied)
snapshot  #{SnapJoin.secs(join_us)} s  (restored #{SnapJoin.mib(st.restored_size)} MiB as of #{st.restored}, then #{st.messages} messages applied)
both ended at the writer's state (#{map_size(want)} keys)
""")

StateMachine.close(joined)
StateMachine.close(writer)
Bus.close(pub)
Sequencer.close(seq)
File.rm_rf!(dir)

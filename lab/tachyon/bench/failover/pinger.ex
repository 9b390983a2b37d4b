defmodule Tachyon.Bench.Failover.Pinger do
  @moduledoc false
  # A member of the bus for the failover bench: a process doing round trips
  # (publishes "m<id>:<k>", k = 1, 2, ..., one at a time, and waits for it
  # on the bus) until stopped, keeping every entry it delivered. `mark/1`
  # opens a window; `report/1` gives the longest pause between two
  # deliveries since the mark, the host time of the last delivery and the
  # member's counters. `stop/1` waits for the last own message and returns
  # everything delivered, the counters and the bus events.

  alias Tachyon.Bus

  @doc "Starts a member (`id`) of the bus `sequencer` (a list of nodes); returns once welcomed."
  def start(sequencer, id, bus_opts \\ []) do
    parent = self()
    pid = spawn_link(fn -> init(parent, sequencer, id, bus_opts) end)

    receive do
      {^pid, :ready} -> pid
    after
      20_000 -> raise "failover bench: member #{id} not welcomed in 20 s"
    end
  end

  @doc "Opens a window: the longest pause is counted from here."
  def mark(pid) do
    send(pid, {:mark, self()})
    receive do: ({^pid, :marked} -> :ok), after: (5000 -> raise("member stuck"))
  end

  @doc """
  `%{max_gap_us, last_us (os time of the last delivery), since_mark
  (deliveries), stats}`.
  """
  def report(pid) do
    send(pid, {:report, self()})
    receive do: ({^pid, :report, r} -> r), after: (5000 -> raise("member stuck"))
  end

  @doc """
  Waits until the member delivered something after host time `at_us`;
  `{:ok, report}` or `{:error, report}` after `timeout` ms.
  """
  def await_delivery_after(pid, at_us, timeout) do
    r = report(pid)

    cond do
      r.last_us > at_us ->
        {:ok, r}

      timeout <= 0 ->
        {:error, r}

      true ->
        Process.sleep(5)
        await_delivery_after(pid, at_us, timeout - 5)
    end
  end

  @doc """
  Stops publishing, waits (10 s at most) for the last own message and
  closes the member: `%{id, entries: [{seq, member_id, data}] in order,
  published, stats, events: [{kind, fields}]}`.
  """
  def stop(pid) do
    send(pid, {:stop, self()})

    receive do
      {^pid, :result, r} -> r
    after
      30_000 -> raise "failover bench: member did not stop"
    end
  end

  defp init(parent, sequencer, id, bus_opts) do
    {:ok, bus} =
      Bus.open(
        [sequencer: sequencer, member_id: id, delivery: :poll, connect_timeout_ms: 15_000] ++
          bus_opts
      )

    send(parent, {self(), :ready})

    loop(%{
      bus: bus,
      id: id,
      k: 0,
      out: false,
      entries: [],
      last: mono(),
      last_us: System.os_time(:microsecond),
      max_gap: 0,
      since_mark: 0,
      events: []
    })
  end

  defp loop(st) do
    receive do
      {:mark, from} ->
        send(from, {self(), :marked})
        loop(%{st | max_gap: 0, since_mark: 0})

      {:report, from} ->
        {:ok, stats} = Bus.stats(st.bus)
        r = %{max_gap_us: st.max_gap, last_us: st.last_us, since_mark: st.since_mark}
        send(from, {self(), :report, Map.put(r, :stats, stats)})
        loop(st)

      {:tachyon_bus_event, _bus, kind, fields} ->
        loop(%{st | events: [{kind, fields} | st.events]})

      {:stop, from} ->
        finish(st, from, System.monotonic_time(:millisecond) + 10_000)
    after
      0 -> loop(step(publish(st), 20))
    end
  end

  defp publish(%{out: true} = st), do: st

  defp publish(st) do
    case Bus.publish(st.bus, "m#{st.id}:#{st.k + 1}") do
      {:ok, _} -> %{st | k: st.k + 1, out: true}
      {:error, :busy} -> st
    end
  end

  defp step(st, timeout) do
    case Bus.recv(st.bus, timeout) do
      {:ok, l} ->
        now = mono()
        mine? = Enum.any?(l, fn {_, id, _} -> id == st.id end)

        %{
          st
          | entries: Enum.reverse(l, st.entries),
            out: st.out and not mine?,
            last: now,
            last_us: System.os_time(:microsecond),
            max_gap: max(st.max_gap, now - st.last),
            since_mark: st.since_mark + length(l)
        }

      {:error, :timeout} ->
        st
    end
  end

  defp finish(st, from, deadline) do
    if st.out and System.monotonic_time(:millisecond) < deadline do
      finish(step(st, 20), from, deadline)
    else
      {:ok, stats} = Bus.stats(st.bus)
      events = collect_events(st.bus, st.events)
      Bus.close(st.bus)

      send(
        from,
        {self(), :result,
         %{
           id: st.id,
           entries: Enum.reverse(st.entries),
           published: st.k,
           unconfirmed: st.out,
           stats: stats,
           events: Enum.reverse(events)
         }}
      )
    end
  end

  defp collect_events(bus, acc) do
    receive do
      {:tachyon_bus_event, ^bus, kind, fields} -> collect_events(bus, [{kind, fields} | acc])
    after
      0 -> acc
    end
  end

  defp mono, do: System.monotonic_time(:microsecond)
end

defmodule Tachyon.Traffic do
  @moduledoc false
  # Bus members for the tests that kill, replace and starve sequencer nodes
  # (test/tachyon/trust_test.exs): each member a process of its own (a
  # `delivery: :poll` member), publishing "ID:I:" padded to `:size` bytes
  # every `:every_us` microseconds (nil: never) while it delivers, and
  # recording every publish's result (with the monotonic time just before
  # the call), every delivery and every bus event. The test waits on their
  # progress (`await/4`, `await_more/4`), then `finish/2` drains every member to the same
  # point of the bus and returns what each saw; `assert_one_order/2`
  # checks it.

  import ExUnit.Assertions

  alias Tachyon.Bus

  @doc """
  Opens member `id` on `group` and starts it publishing: `%{pid, id,
  opened_at}` (`opened_at`: `System.monotonic_time(:microsecond)` when
  `open` returned). Options: `:every_us` (1000; nil: no publishing),
  `:size` (bytes per message, 16), `:hold` (true: publishing starts at
  `:go`, see `start_all/3`).
  """
  def start(group, id, opts \\ []) do
    parent = self()
    pid = spawn_link(fn -> init(parent, group, id, opts) end)

    receive do
      {^pid, :opened, at} -> %{pid: pid, id: id, opened_at: at}
      {^pid, :open_failed, reason} -> flunk("member #{id}: open: #{inspect(reason)}")
    after
      30_000 -> flunk("member #{id}: open took over 30 s")
    end
  end

  @doc """
  Opens members `ids` on `group`, then starts them publishing (none
  publishes before every one is open: each delivers every message).
  """
  def start_all(group, ids, opts \\ []) do
    ms = for id <- ids, do: start(group, id, [hold: true] ++ opts)
    for m <- ms, do: send(m.pid, :go)
    ms
  end

  @doc """
  What `m` has done so far: `%{acked, failed, delivered, last_seq, from}`
  (`from`: deliveries per sender).
  """
  def progress(m) do
    send(m.pid, {:progress, self()})

    receive do
      {:progress, pid, p} when pid == m.pid -> p
    after
      10_000 -> flunk("member #{m.id} does not answer")
    end
  end

  @doc """
  Waits until `fun.(id, progress)` holds for every member of `ms` (polled
  every 10 ms); returns their progress then, or flunks with `what` and
  their progress after `timeout` ms.
  """
  def await(ms, fun, timeout, what \\ "the members' progress") do
    await_until(ms, fun, System.monotonic_time(:millisecond) + timeout, what)
  end

  defp await_until(ms, fun, deadline, what) do
    ps = Enum.map(ms, &{&1.id, progress(&1)})

    cond do
      Enum.all?(ps, fn {id, p} -> fun.(id, p) end) ->
        Map.new(ps)

      System.monotonic_time(:millisecond) > deadline ->
        flunk("timed out waiting for #{what}: #{inspect(ps)}")

      true ->
        Process.sleep(10)
        await_until(ms, fun, deadline, what)
    end
  end

  @doc """
  Waits until each member of `ms` has `n` more acknowledged publishes and
  `n` more deliveries than it has now (publishes only if `deliveries` is
  false); returns their progress then.
  """
  def await_more(ms, n, timeout, deliveries \\ true) do
    base = Map.new(ms, &{&1.id, progress(&1)})

    await(
      ms,
      fn id, p ->
        p.acked >= base[id].acked + n and
          (not deliveries or p.delivered >= base[id].delivered + n)
      end,
      timeout,
      "#{n} more publishes#{if deliveries, do: " and deliveries"} per member"
    )
  end

  @doc """
  Closes `m`'s member with `Bus.close(bus, timeout)` now (publishing
  stops); returns what it saw, as `finish/2` does, with `:close` the
  result.
  """
  def close(m, timeout) do
    send(m.pid, {:close, timeout, self()})

    receive do
      {:done, pid, r} when pid == m.pid -> r
    after
      timeout + 30_000 -> flunk("member #{m.id}: close did not return")
    end
  end

  @doc """
  Stops every member of `ms` publishing, waits until each has delivered
  all it published (or `timeout` ms), then until each delivered up to the
  furthest sequence number any delivered; closes them (`Bus.close/2`).
  Returns per member `%{id, opened_at, got: [{seq, member_id, data}],
  acked: [{data, t_us}], failed: [{data, reason}], events, settled,
  close}` (`settled`: false if the member timed out waiting for its own
  publishes).
  """
  def finish(ms, timeout \\ 60_000) do
    for m <- ms, do: send(m.pid, {:settle, self(), timeout})

    last =
      for m <- ms do
        receive do
          {:settled, pid, seq} when pid == m.pid -> seq
        after
          timeout + 10_000 -> flunk("member #{m.id} does not settle")
        end
      end

    to = Enum.max(last)
    for m <- ms, do: send(m.pid, {:drain_to, to, self(), timeout})

    for m <- ms do
      receive do
        {:done, pid, r} when pid == m.pid -> r
      after
        timeout + 10_000 -> flunk("member #{m.id} does not drain")
      end
    end
  end

  @doc """
  Checks what `finish/2` returned: the members in `full` (there from the
  start) delivered one order, the same for all, each message once, each
  sender's acknowledged publishes all, in publish order, and nothing that
  failed; each member in `late` delivered a contiguous part of that order
  up to its end that holds every publish (of any member) made after its
  `open` returned; no `:fork` event. Returns the order.
  """
  def assert_one_order(full, late \\ []) do
    [a | rest] = full
    order = a.got

    for r <- rest do
      assert r.got == order,
             "member #{r.id} differs from member #{a.id}: #{first_difference(r.got, order)}"
    end

    seqs = Enum.map(order, &elem(&1, 0))
    assert seqs == Enum.sort(seqs) and length(Enum.uniq(seqs)) == length(seqs)
    datas = Enum.map(order, &elem(&1, 2))
    assert length(Enum.uniq(datas)) == length(datas), "a message delivered twice"

    for r <- full ++ late do
      own = for {_, id, d} <- order, id == r.id, do: d
      acked = Enum.map(r.acked, &elem(&1, 0))

      assert own == acked,
             "member #{r.id}: #{length(acked)} acknowledged, #{length(own)} delivered: " <>
               first_difference(own, acked)
    end

    for r <- late do
      start = Enum.find_index(order, &(&1 == hd(r.got)))
      assert start != nil, "member #{r.id}'s first delivery is not in the order"

      assert r.got == Enum.drop(order, start),
             "late member #{r.id}: #{first_difference(r.got, Enum.drop(order, start))}"

      mine = MapSet.new(r.got, &elem(&1, 2))

      after_open = for m <- full ++ late, {d, t} <- m.acked, t > r.opened_at, do: d

      missed = Enum.reject(after_open, &MapSet.member?(mine, &1))

      assert missed == [],
             "late member #{r.id} missed #{length(missed)} of the #{length(after_open)} " <>
               "messages published after its open returned, such as #{inspect(Enum.take(missed, 3))}"
    end

    for r <- full ++ late do
      forks = for {:fork, f} <- r.events, do: f
      assert forks == [], "member #{r.id}: fork events #{inspect(forks)}"
    end

    order
  end

  @doc "Where two lists first differ, for a failure message."
  def first_difference(a, b) do
    i = Enum.zip(a, b) |> Enum.find_index(fn {x, y} -> x != y end)

    case i do
      nil ->
        "lengths #{length(a)} and #{length(b)}, " <>
          "#{inspect(Enum.take(Enum.drop(a, length(b)), 2) ++ Enum.take(Enum.drop(b, length(a)), 2))} beyond"

      i ->
        "first difference at #{i}: #{inspect(Enum.at(a, i))} against #{inspect(Enum.at(b, i))}"
    end
  end

  # -- the member's process -------------------------------------------------------

  defp init(parent, group, id, opts) do
    opened =
      Bus.open(
        sequencer: group,
        member_id: id,
        delivery: :poll,
        hello_after_ms: 20,
        resend_after_ms: 20,
        connect_timeout_ms: 20_000
      )

    case opened do
      {:ok, bus} ->
        at = now_us()
        send(parent, {self(), :opened, at})
        rate = Keyword.get(opts, :every_us, 1000)

        loop(%{
          bus: bus,
          id: id,
          opened_at: at,
          rate: rate,
          every: if(Keyword.get(opts, :hold, false), do: nil, else: rate),
          size: Keyword.get(opts, :size, 16),
          next_at: at,
          i: 0,
          acked: [],
          n_acked: 0,
          failed: [],
          outstanding: MapSet.new(),
          got: [],
          n_got: 0,
          from: %{},
          last_seq: 0,
          events: [],
          phase: :run
        })

      {:error, reason} ->
        send(parent, {self(), :open_failed, reason})
    end
  end

  defp now_us, do: System.monotonic_time(:microsecond)

  defp loop(st) do
    st = st |> control() |> publish() |> deliver(1)

    case phase(st) do
      {:done, r} -> r
      st -> loop(st)
    end
  end

  defp control(st) do
    receive do
      {:progress, from} ->
        p = %{
          acked: st.n_acked,
          failed: length(st.failed),
          delivered: st.n_got,
          last_seq: st.last_seq,
          from: st.from
        }

        send(from, {:progress, self(), p})
        control(st)

      :go ->
        control(%{st | every: st.rate, next_at: now_us()})

      {:settle, from, timeout} ->
        control(%{st | every: nil, phase: {:settle, from, deadline(timeout)}})

      {:drain_to, seq, from, timeout} ->
        control(%{st | phase: {:drain, seq, from, deadline(timeout)}})

      {:close, timeout, from} ->
        control(%{st | every: nil, phase: {:close, timeout, from}})

      {:tachyon_bus_event, bus, kind, fields} when bus == st.bus ->
        control(%{st | events: [{kind, fields} | st.events]})
    after
      0 -> st
    end
  end

  defp deadline(ms), do: System.monotonic_time(:millisecond) + ms

  defp publish(%{every: nil} = st), do: st

  defp publish(st) do
    t = now_us()

    if t < st.next_at do
      st
    else
      data = pad("#{st.id}:#{st.i}:", st.size)
      st = %{st | i: st.i + 1, next_at: max(st.next_at + st.every, t - 10 * st.every)}

      case Bus.publish(st.bus, data) do
        {:ok, _} ->
          %{
            st
            | acked: [{data, t} | st.acked],
              n_acked: st.n_acked + 1,
              outstanding: MapSet.put(st.outstanding, data)
          }

        {:error, reason} ->
          %{st | failed: [{data, reason} | st.failed]}
      end
    end
  end

  defp pad(s, size) when byte_size(s) >= size, do: s
  defp pad(s, size), do: s <> :binary.copy("x", size - byte_size(s))

  defp deliver(st, timeout) do
    case Bus.recv(st.bus, timeout) do
      {:ok, entries} -> Enum.reduce(entries, st, &delivered/2)
      {:error, :timeout} -> st
    end
  end

  defp delivered({seq, mid, data} = e, st) do
    outstanding = if mid == st.id, do: MapSet.delete(st.outstanding, data), else: st.outstanding

    %{
      st
      | got: [e | st.got],
        n_got: st.n_got + 1,
        last_seq: seq,
        outstanding: outstanding,
        from: Map.update(st.from, mid, 1, &(&1 + 1))
    }
  end

  defp phase(%{phase: {:settle, from, dl}} = st) do
    settled = MapSet.size(st.outstanding) == 0

    if settled or System.monotonic_time(:millisecond) > dl do
      send(from, {:settled, self(), st.last_seq})
      %{st | phase: :wait}
    else
      st
    end
  end

  defp phase(%{phase: {:drain, seq, from, dl}} = st) do
    if st.last_seq >= seq or System.monotonic_time(:millisecond) > dl do
      settled = MapSet.size(st.outstanding) == 0
      r = result(st, settled, Bus.close(st.bus, 5000))
      send(from, {:done, self(), r})
      {:done, r}
    else
      st
    end
  end

  defp phase(%{phase: {:close, timeout, from}} = st) do
    r = result(st, MapSet.size(st.outstanding) == 0, Bus.close(st.bus, timeout))
    send(from, {:done, self(), r})
    {:done, r}
  end

  defp phase(st), do: st

  defp result(st, settled, close) do
    %{
      id: st.id,
      opened_at: st.opened_at,
      got: Enum.reverse(st.got),
      acked: Enum.reverse(st.acked),
      failed: Enum.reverse(st.failed),
      events: Enum.reverse(st.events),
      settled: settled,
      close: close
    }
  end
end

defmodule Tachyon.Bench.Failover.Check do
  @moduledoc false
  # What the members of a failover run delivered against the nodes' final
  # logs (read once every node is stopped): the bus must not have forked.
  #
  # Checks: every member delivered in strictly increasing sequence order;
  # every member's own messages came back once each, in publish order;
  # members agree on every sequence number both delivered; every delivered
  # entry is, at its sequence number, in the final log of the last primary
  # (same member_id, same data) and in every other node's log that reaches
  # that far; no member counted a fork (`forks`) or sent a `:fork` event.
  # A paused primary that resumed and sequenced in its old term, had any
  # member delivered that, shows up here as a mismatch with the final logs.

  @doc """
  `results`: `Pinger.stop/1` maps; `dirs`: every node's log; `ref`: the
  index in `dirs` of the last primary. Returns a map of counts (all zero
  but `:delivered`, `:checked`, `:stale_epoch` and `:log_entries` on a
  good run) and `:examples` of what went wrong.
  """
  def run(results, dirs, ref) do
    logs = Enum.map(dirs, &read_log/1)
    ref_log = Enum.at(logs, ref)

    max_seq =
      results |> Enum.flat_map(& &1.entries) |> Enum.map(&elem(&1, 0)) |> Enum.max(fn -> 0 end)

    acc = %{
      delivered: 0,
      checked: 0,
      out_of_order: 0,
      own_wrong: 0,
      members_disagree: 0,
      not_in_log: 0,
      logs_disagree: 0,
      forks: 0,
      fork_events: 0,
      stale_epoch: 0,
      unconfirmed: 0,
      log_entries: map_size(ref_log),
      examples: []
    }

    acc = Enum.reduce(results, acc, &member(&1, &2, ref_log))
    acc = members_agree(results, acc)
    acc = logs_agree(logs, ref_log, max_seq, acc)
    Map.update!(acc, :examples, &Enum.take(Enum.reverse(&1), 10))
  end

  @doc "The checks of several runs as one (counts added, examples kept)."
  def merge([c | rest]) do
    Enum.reduce(rest, c, fn c, acc ->
      Map.merge(acc, c, fn
        :examples, a, b -> Enum.take(a ++ b, 10)
        _, a, b -> a + b
      end)
    end)
  end

  @doc "Whether `run/3` found nothing wrong."
  def ok?(c) do
    Enum.all?(
      [
        :out_of_order,
        :own_wrong,
        :members_disagree,
        :not_in_log,
        :logs_disagree,
        :forks,
        :fork_events
      ],
      &(c[&1] == 0)
    )
  end

  @doc "One line for the report."
  def summary(c) do
    verdict = if ok?(c), do: "no fork", else: "FORK OR LOSS"

    "#{verdict}: #{c.delivered} deliveries checked against the final logs (#{c.log_entries} entries); " <>
      "out of order #{c.out_of_order}, own messages wrong #{c.own_wrong}, members disagree #{c.members_disagree}, " <>
      "not in the log #{c.not_in_log}, logs disagree #{c.logs_disagree}, forks #{c.forks}, " <>
      "fork events #{c.fork_events}; stale-epoch datagrams dropped by members #{c.stale_epoch}"
  end

  defp member(r, acc, ref_log) do
    seqs = Enum.map(r.entries, &elem(&1, 0))
    disorder = seqs |> Enum.chunk_every(2, 1, :discard) |> Enum.count(fn [a, b] -> b <= a end)
    own = for {_, id, d} <- r.entries, id == r.id, do: d
    want = for k <- 1..r.published//1, do: "m#{r.id}:#{k}"
    want = if r.unconfirmed, do: Enum.drop(want, -1), else: want
    own = if r.unconfirmed, do: Enum.take(own, length(want)), else: own

    {bad, examples} =
      Enum.reduce(r.entries, {0, acc.examples}, fn {seq, id, d} = e, {n, ex} ->
        case Map.fetch(ref_log, seq) do
          {:ok, {^id, ^d}} -> {n, ex}
          other -> {n + 1, [{:not_in_log, r.id, e, other} | ex]}
        end
      end)

    events = Enum.count(r.events, &match?({:fork, _}, &1))
    ex = for({:fork, f} <- r.events, do: {:fork_event, r.id, f}) ++ examples
    ex = if own != want, do: [{:own_wrong, r.id, first_diff(own, want)} | ex], else: ex

    %{
      acc
      | delivered: acc.delivered + length(r.entries),
        checked: acc.checked + length(r.entries) - bad,
        out_of_order: acc.out_of_order + disorder,
        own_wrong: acc.own_wrong + if(own == want, do: 0, else: 1),
        not_in_log: acc.not_in_log + bad,
        forks: acc.forks + Map.get(r.stats, :forks, 0),
        fork_events: acc.fork_events + events,
        stale_epoch: acc.stale_epoch + Map.get(r.stats, :stale_epoch, 0),
        unconfirmed: acc.unconfirmed + if(r.unconfirmed, do: 1, else: 0),
        examples: ex
    }
  end

  defp first_diff(own, want) do
    i = Enum.zip(own, want) |> Enum.find_index(fn {a, b} -> a != b end)
    i = i || min(length(own), length(want))

    %{
      at: i,
      got: Enum.at(own, i),
      want: Enum.at(want, i),
      got_n: length(own),
      want_n: length(want)
    }
  end

  defp members_agree(results, acc) do
    maps = Enum.map(results, fn r -> Map.new(r.entries, fn {s, id, d} -> {s, {id, d}} end) end)

    case maps do
      [a | rest] ->
        Enum.reduce(rest, acc, fn b, acc ->
          bad = for {s, v} <- b, Map.has_key?(a, s), a[s] != v, do: {s, a[s], v}

          %{
            acc
            | members_disagree: acc.members_disagree + length(bad),
              examples: Enum.map(Enum.take(bad, 3), &{:members_disagree, &1}) ++ acc.examples
          }
        end)

      [] ->
        acc
    end
  end

  # Every log agrees with the last primary's on every index up to the last
  # one a member delivered (the committed prefix), where it has one.
  defp logs_agree(logs, ref_log, max_seq, acc) do
    Enum.reduce(logs, acc, fn log, acc ->
      bad = for {i, v} <- log, i <= max_seq, Map.has_key?(ref_log, i), ref_log[i] != v, do: {i, v}

      %{
        acc
        | logs_disagree: acc.logs_disagree + length(bad),
          examples:
            Enum.map(Enum.take(bad, 3), fn {i, v} -> {:logs_disagree, i, v, ref_log[i]} end) ++
              acc.examples
      }
    end)
  end

  @doc """
  A node's log as `%{index => {member_id, data}}` (messages only: control
  entries, the session and epoch records, have member_id 0 and are kept
  as `{0, flags}`).
  """
  def read_log(dir) do
    {:ok, s} = Tachyon.Store.open(dir, access: :read)

    try do
      s |> Tachyon.Store.stream() |> Map.new(fn {i, bin} -> {i, decode(bin)} end)
    after
      Tachyon.Store.close(s)
    end
  end

  defp decode(<<0::little-32, mseq::little-64, flags, 0, _::binary>>), do: {0, {flags, mseq}}

  defp decode(<<id::little-32, _mseq::little-64, _flags, 0, len::little-16, data::binary>>)
       when byte_size(data) == len,
       do: {id, data}

  defp decode(other), do: {:malformed, other}
end

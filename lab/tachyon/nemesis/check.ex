defmodule Tachyon.Nemesis.Check do
  @moduledoc false
  # The checks of a run, on the nodes' final logs and what each member
  # delivered (`Tachyon.Nemesis.Member` results). Every check returns a
  # list of violations (strings, empty when it holds); `all/3` runs them
  # all.
  #
  # With retention a node's log starts at a first retained index above 0,
  # not the same on every node (a node that joined on a new disk starts
  # where the primary's log did then): logs are compared on the range they
  # share, and deliveries against the union of the logs (`order/1`), from
  # where it starts; a member opened from a snapshot delivers from the
  # snapshot's position on (its first delivery), and the snapshot's own
  # messages it sees are not the order's (`delivered/1`).

  alias Tachyon.Nemesis.Cluster

  @doc """
  Every check: `logs` (each node's `[{index, entry}]`), `results` (the
  members' result maps), `senders` (the member ids that published "ID:i").
  Returns the violations.
  """
  def all(logs, results, senders) do
    order = order(logs)
    {crashed, ok} = Enum.split_with(results, &Map.has_key?(&1, :crashed))
    ok = Enum.map(ok, &%{&1 | delivered: delivered(&1.delivered)})

    logs_equal(logs) ++
      Enum.flat_map(crashed, &crashed/1) ++
      one_order(order, ok) ++
      in_every_log(logs, ok) ++
      senders(order, senders) ++
      acked_delivered(order, ok, Enum.any?(logs, &((Cluster.first_index(&1) || 0) > 0))) ++
      no_forks(ok) ++
      tables_equal(ok)
  end

  @doc """
  The order: the messages of the union of `logs` (`[{seq, member_id,
  data}]`, in sequence order; `logs_equal/1` checks that they agree where
  they overlap).
  """
  def order(logs) do
    logs
    |> Enum.flat_map(&Cluster.messages/1)
    |> Map.new(fn {s, m, d} -> {s, {m, d}} end)
    |> Enum.sort()
    |> Enum.map(fn {s, {m, d}} -> {s, m, d} end)
  end

  @doc "A member's deliveries without the snapshot messages (`{:snapshot, ...}` data) it saw."
  def delivered(list), do: for({_, _, d} = x <- list, is_binary(d), do: x)

  defp crashed(%{crashed: why, id: id}), do: ["member #{id} crashed: #{why}"]
  defp crashed(_), do: []

  @doc """
  The nodes' logs are equal from where both start (`ends: false`: also
  where one ends before the other, for logs read while the nodes run).
  """
  def logs_equal([l0 | rest], opts \\ []) do
    rest
    |> Enum.with_index(1)
    |> Enum.flat_map(fn {l, i} ->
      {l0, l} = shared(l0, l, Keyword.get(opts, :ends, true))

      if l == l0 do
        []
      else
        d = first_difference(l0, l)

        [
          "the logs of node 0 and node #{i} differ (lengths #{length(l0)}, #{length(l)}) from #{d}"
        ]
      end
    end)
  end

  defp shared(a, b, ends) do
    from = max(Cluster.first_index(a) || 0, Cluster.first_index(b) || 0)

    {a, b} =
      {Enum.drop_while(a, &(elem(&1, 0) < from)), Enum.drop_while(b, &(elem(&1, 0) < from))}

    if ends do
      {a, b}
    else
      n = min(length(a), length(b))
      {Enum.take(a, n), Enum.take(b, n)}
    end
  end

  defp first_difference([x | a], [x | b]), do: first_difference(a, b)
  defp first_difference([{i, _} | _], _), do: "index #{i}"
  defp first_difference([], [{i, _} | _]), do: "index #{i}"
  defp first_difference([], []), do: "nowhere"

  @doc """
  Each member's delivered sequence is the order (`[{seq, member_id,
  data}]`) from its first delivered message on: a prefix of it, and the
  whole of it (converged). What it delivered below the order's first
  message (gone from every log) is not judged here.
  """
  def one_order(order, results) do
    from = with [{s, _, _} | _] <- order, do: s, else: (_ -> 0)

    Enum.flat_map(results, fn r ->
      d = Enum.drop_while(r.delivered, fn {s, _, _} -> s < from end)

      case d do
        [] ->
          if order == [], do: [], else: ["member #{r.id} delivered nothing"]

        [{first, _, _} | _] ->
          tail = Enum.drop_while(order, fn {s, _, _} -> s < first end)

          cond do
            d == tail ->
              []

            List.starts_with?(tail, d) ->
              ["member #{r.id} did not converge: #{length(d)} of #{length(tail)} delivered"]

            true ->
              [
                "member #{r.id}'s delivered sequence is not a prefix of the order: " <>
                  diff(d, tail)
              ]
          end
      end
    end)
  end

  defp diff(d, tail) do
    case Enum.find_index(Enum.zip(d, tail), fn {a, b} -> a != b end) do
      nil ->
        "#{length(d)} delivered, #{length(tail)} in the order"

      i ->
        "at its message #{i}: delivered #{inspect(Enum.at(d, i))}, the log has #{inspect(Enum.at(tail, i))}"
    end
  end

  @doc """
  Every message a member delivered is at its sequence number in every
  node's log that still holds it (from the log's first index on).
  """
  def in_every_log(logs, results) do
    maps =
      Enum.map(logs, fn l ->
        {Cluster.first_index(l) || 0,
         Map.new(Cluster.messages(l), fn {s, m, d} -> {s, {m, d}} end)}
      end)

    for r <- results, {{first, m}, node} <- Enum.with_index(maps), reduce: [] do
      acc ->
        missing =
          Enum.reject(r.delivered, fn {s, mid, d} -> s < first or Map.get(m, s) == {mid, d} end)

        case missing do
          [] ->
            acc

          [x | _] ->
            acc ++
              [
                "member #{r.id} delivered #{length(missing)} messages not in node #{node}'s log " <>
                  "(the first: #{inspect(x)}, the log has #{inspect(Map.get(m, elem(x, 0)))})"
              ]
        end
    end
  end

  @doc "Each sender's messages (\"ID:i\") are in the order once each, `i` increasing."
  def senders(order, ids) do
    by = Enum.group_by(order, fn {_, m, _} -> m end, fn {s, _, d} -> {s, index(d)} end)

    Enum.flat_map(ids, fn id ->
      is = Enum.map(Map.get(by, id, []), &elem(&1, 1))
      dups = length(is) - length(Enum.uniq(is))

      bad =
        is
        |> Enum.chunk_every(2, 1, :discard)
        |> Enum.find(fn [a, b] -> b <= a end)

      if(dups > 0, do: ["member #{id}'s messages: #{dups} delivered twice"], else: []) ++
        if bad,
          do: ["member #{id}'s messages out of publish order: #{inspect(bad)}"],
          else: []
    end)
  end

  defp index(d) do
    case Integer.parse(d |> String.split(":") |> List.last()) do
      {i, ""} -> i
      _ -> -1
    end
  end

  @doc """
  Every publish that returned `{:ok, _}` (1..acked of each member) is in
  the order (a member that got an error other than :busy says so); with
  `trimmed: true` (the logs' start removed) from the member's first
  message the order still holds on.
  """
  def acked_delivered(order, results, trimmed \\ false) do
    have = MapSet.new(order, fn {_, m, d} -> {m, index(d)} end)

    Enum.flat_map(results, fn r ->
      from =
        if trimmed,
          do: Enum.min(for({_, m, d} <- order, m == r.id, do: index(d)), fn -> r.acked + 1 end),
          else: 1

      lost = for i <- from..r.acked//1, not MapSet.member?(have, {r.id, i}), do: i

      cond do
        lost == [] ->
          []

        r.error_list != [] ->
          [
            "member #{r.id}: #{length(lost)} acknowledged publishes not delivered " <>
              "(it got errors: #{inspect(Enum.take(r.error_list, 3))})"
          ]

        true ->
          [
            "member #{r.id}: #{length(lost)} acknowledged publishes not delivered, " <>
              "the first #{inspect(Enum.take(lost, 5))}"
          ]
      end
    end)
  end

  @doc "No member saw a fork."
  def no_forks(results) do
    Enum.flat_map(results, fn r ->
      forks = for {:fork, f} <- r.events, do: f

      if r.stats.forks == 0 and forks == [],
        do: [],
        else: ["member #{r.id}: forks #{r.stats.forks}, events #{inspect(forks)}"]
    end)
  end

  @doc "The members' replicated tables are equal (where they ran one)."
  def tables_equal(results) do
    case for(%{table: %{} = t, id: id} <- results, do: {id, t}) do
      [] ->
        []

      [{id0, t0} | rest] ->
        unsynced = for {id, t} <- [{id0, t0} | rest], t.synced != :ok, do: id

        if(unsynced == [],
          do: [],
          else: ["replicated tables of members #{inspect(unsynced)} did not sync"]
        ) ++
          for {id, t} <- rest, t.map != t0.map do
            "replicated tables of members #{id0} and #{id} differ " <>
              "(#{map_size(t0.map)} and #{map_size(t.map)} keys)"
          end
    end
  end
end

defmodule Tachyon.Nemesis.Check do
  @moduledoc false
  # The checks of a run, on the nodes' final logs and what each member
  # delivered (`Tachyon.Nemesis.Member` results). Every check returns a
  # list of violations (strings, empty when it holds); `all/3` runs them
  # all.

  alias Tachyon.Nemesis.Cluster

  @doc """
  Every check: `logs` (each node's `[{index, entry}]`), `results` (the
  members' result maps), `senders` (the member ids that published "ID:i").
  Returns the violations.
  """
  def all(logs, results, senders) do
    order = Cluster.messages(hd(logs))
    {crashed, ok} = Enum.split_with(results, &Map.has_key?(&1, :crashed))

    logs_equal(logs) ++
      Enum.flat_map(crashed, &crashed/1) ++
      one_order(order, ok) ++
      in_every_log(logs, ok) ++
      senders(order, senders) ++
      acked_delivered(order, ok) ++
      no_forks(ok) ++
      tables_equal(ok)
  end

  defp crashed(%{crashed: why, id: id}), do: ["member #{id} crashed: #{why}"]
  defp crashed(_), do: []

  @doc "The nodes' logs are equal."
  def logs_equal([l0 | rest]) do
    rest
    |> Enum.with_index(1)
    |> Enum.flat_map(fn {l, i} ->
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

  defp first_difference([x | a], [x | b]), do: first_difference(a, b)
  defp first_difference([{i, _} | _], _), do: "index #{i}"
  defp first_difference([], [{i, _} | _]), do: "index #{i}"
  defp first_difference([], []), do: "nowhere"

  @doc """
  Each member's delivered sequence is the order (`[{seq, member_id,
  data}]`) from its first delivered message on: a prefix of it, and the
  whole of it (converged).
  """
  def one_order(order, results) do
    Enum.flat_map(results, fn r ->
      d = r.delivered

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

  @doc "Every message a member delivered is at its sequence number in every node's log."
  def in_every_log(logs, results) do
    maps = Enum.map(logs, &Map.new(Cluster.messages(&1), fn {s, m, d} -> {s, {m, d}} end))

    for r <- results, {m, node} <- Enum.with_index(maps), reduce: [] do
      acc ->
        missing = Enum.reject(r.delivered, fn {s, mid, d} -> Map.get(m, s) == {mid, d} end)

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
  the order (a member that got an error other than :busy says so).
  """
  def acked_delivered(order, results) do
    have = MapSet.new(order, fn {_, m, d} -> {m, index(d)} end)

    Enum.flat_map(results, fn r ->
      lost = for i <- 1..r.acked//1, not MapSet.member?(have, {r.id, i}), do: i

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

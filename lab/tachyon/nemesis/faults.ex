defmodule Tachyon.Nemesis.Faults do
  @moduledoc false
  # The nemesis's faults: a schedule drawn from a seed before the run (the
  # same seed, the same schedule), and how each fault is injected and
  # healed on a `Tachyon.Nemesis.Cluster`.
  #
  # Kinds: `:kill` (kill -9 of a node, restarted on its log `dur` ms
  # later), `:stop` (SIGSTOP of a node, SIGCONT `dur` ms later), `:cut`
  # (a node's link down, up `dur` ms later), `:loss` (the share `p` of the
  # datagrams dropped both ways on one host's link, nodes' and members'
  # alike, for `dur` ms), `:replace` (a host replaced, its disk with it:
  # docs/FAILOVER.md, "Replacing a host"; below).
  #
  # A replacement takes several steps, each taken when the one before is
  # done, as lines of the nodes come to the runner's loop: `inject/3` kills
  # the node (-9); `replace_ask/3` asks a surviving node to remove it
  # (`remove_node ID` on its standard input: the primary, as the group's
  # view knows it, or another); `replace_line/4` takes the answer (`change
  # remove_node ID ok ...`: its directory is wiped and a fresh node started
  # at the same address with `--join`; an error: ask again) and then the
  # new node's lines (`event caught_up`, `event membership` with its id
  # among 3 voters): the replacement is done when it is a voter, caught up.

  alias Tachyon.Nemesis.{Cluster, NetNS}
  alias Tachyon.Sequencer.OSProcess

  @kinds [:kill, :stop, :cut, :loss, :replace]
  # A killed node is counted busy this much longer than its restart delay
  # (the VM starting), so that the schedule rarely picks it before it is up.
  @restart_allowance 4000
  # One replacement at a time (FAILOVER.md): the next is drawn this long
  # after one starts at the earliest (a VM's boot and the log's copy).
  @replace_allowance 20_000

  @doc "Every kind of fault."
  def kinds, do: @kinds

  @doc """
  The schedule for `seed` over `ms` milliseconds: a fault every 1-2 s,
  `[%{at, kind, target, dur, p}]` (`at` from the start, ms; `target`: a
  node id for `:kill`, `:stop` and `:cut`, a host name for `:loss`). A
  fault whose drawn target still has one finds another free target, or
  is left out (a `:replace` too while another may still be running). `kinds`: those to draw from; `hosts`: every host's name;
  `nodes`: the nodes' count.
  """
  def schedule(seed, ms, kinds, nodes, hosts) do
    {first, rng} = uniform(:rand.seed_s(:exsss, {seed, 7919, 104_729}), 1000, 2000)
    draw(rng, first, ms, kinds, nodes, hosts, %{}, [])
  end

  defp draw(rng, at, ms, kinds, nodes, hosts, busy, acc) when at < ms do
    {kind, rng} = pick(rng, kinds)
    targets = if kind == :loss, do: hosts, else: Enum.to_list(0..(nodes - 1))
    {target, rng} = pick(rng, targets)

    {{dur, p}, rng} =
      case kind do
        :kill -> with_p(uniform(rng, 300, 1500))
        :stop -> with_p(uniform(rng, 100, 800))
        :cut -> with_p(uniform(rng, 300, 2000))
        :loss -> loss(rng)
        :replace -> {{0, nil}, rng}
      end

    {next, rng} = uniform(rng, 1000, 2000)
    # Rotate from the drawn target to the first one free at `at`.
    i = Enum.find_index(targets, &(&1 == target))
    {before, from} = Enum.split(targets, i)
    free = Enum.find(from ++ before, &(Map.get(busy, {kind == :loss, &1}, 0) <= at))
    free = if kind == :replace and Map.get(busy, :replace, 0) > at, do: nil, else: free

    {busy, acc} =
      if free == nil do
        {busy, acc}
      else
        until =
          at + dur +
            case kind do
              :kill -> @restart_allowance
              :replace -> @replace_allowance
              _ -> 0
            end

        fault = %{at: at, kind: kind, target: free, dur: dur, p: p}
        busy = Map.put(busy, {kind == :loss, free}, until)
        busy = if kind == :replace, do: Map.put(busy, :replace, until), else: busy
        {busy, [fault | acc]}
      end

    draw(rng, at + next, ms, kinds, nodes, hosts, busy, acc)
  end

  defp draw(_rng, _at, _ms, _kinds, _nodes, _hosts, _busy, acc), do: Enum.reverse(acc)

  defp uniform(rng, lo, hi) do
    {x, rng} = :rand.uniform_s(hi - lo + 1, rng)
    {lo + x - 1, rng}
  end

  defp pick(rng, list) do
    {i, rng} = :rand.uniform_s(length(list), rng)
    {Enum.at(list, i - 1), rng}
  end

  defp with_p({dur, rng}), do: {{dur, nil}, rng}

  defp loss(rng) do
    {dur, rng} = uniform(rng, 1000, 4000)
    {pct, rng} = uniform(rng, 5, 20)
    {{dur, pct / 100}, rng}
  end

  @doc "One line for a fault."
  def describe(%{kind: kind, target: t, dur: dur, p: p}) do
    case kind do
      :kill -> "kill -9 node #{t}, restarted #{dur} ms later"
      :stop -> "SIGSTOP node #{t} for #{dur} ms"
      :cut -> "cut node #{t}'s link for #{dur} ms"
      :loss -> "#{round(p * 100)}% loss on #{t}'s link for #{dur} ms"
      :replace -> "replace node #{t}'s host (kill -9, remove, a new disk, join)"
    end
  end

  @doc """
  Injects `fault` on `c` given the nodes now (`%{id => node}`, each with
  `:state` `:up`, `:starting` or `:down`): `{:ok, nodes}` or `{:skip,
  why}` (a node not up).
  """
  def inject(%{kind: :loss} = f, c, nodes) do
    case NetNS.loss(c.hosts[f.target], f.p) do
      :ok -> {:ok, nodes}
      {:error, why} -> {:skip, why}
    end
  end

  def inject(%{kind: kind, target: id} = f, c, nodes) do
    node = nodes[id]

    if node.state != :up do
      {:skip, "node #{id} is #{node.state}"}
    else
      case kind do
        :kill ->
          OSProcess.kill(node)
          {:ok, Map.put(nodes, id, %{node | state: :down})}

        :replace ->
          OSProcess.kill(node)

          r = %{
            fault: f,
            t0: System.monotonic_time(:millisecond),
            removed_ms: nil,
            caught_up: false,
            voter: false
          }

          {:ok, Map.put(nodes, id, node |> Map.put(:state, :replacing) |> Map.put(:replace, r))}

        :stop ->
          signal(node, "STOP", nodes, id, :stopped)

        :cut ->
          :ok = NetNS.link(Cluster.node_host(c, f.target), :down)
          {:ok, Map.put(nodes, id, %{node | state: :cut})}
      end
    end
  end

  defp signal(node, sig, nodes, id, state) do
    OSProcess.signal(node, sig)
    {:ok, Map.put(nodes, id, %{node | state: state})}
  rescue
    e -> {:skip, "kill -#{sig}: #{Exception.message(e)}"}
  end

  @doc """
  Asks a surviving node to remove node `id` (being replaced) from the
  group: the primary of `view` if it is up, else another node up. `:ok`
  (the answer comes as a line: `replace_line/4`) or `{:error, :no_node}`
  (none up now: ask again later).
  """
  def replace_ask(id, nodes, view) do
    up = for {i, n} <- nodes, i != id, n.state == :up, do: n

    ask =
      case view.primary do
        {p, _} -> Enum.find(up, List.first(up), &(&1.id == p))
        nil -> List.first(up)
      end

    if ask do
      Port.command(ask.port, "remove_node #{id}\n")
      :ok
    else
      {:error, :no_node}
    end
  end

  @doc """
  A line of node `from` while node `id` is being replaced: `{:ok, nodes}`
  (nothing to do), `{:retry, nodes}` (the removal failed: ask again
  later), `{:removed, nodes}` (removed: the new node started) or
  `{:done, nodes, replacement}` (`%{node, removed_ms, ms}`: the new node is
  a voter and caught up, `ms` after the kill).
  """
  def replace_line(c, nodes, from, line) do
    case Enum.find(Map.values(nodes), &(&1.state in [:replacing, :joining])) do
      nil -> {:ok, nodes}
      n -> replace_step(c, nodes, n, from, line)
    end
  end

  defp replace_step(c, nodes, %{state: :replacing, id: id} = n, _from, line) do
    case String.split(line, " ") do
      ["tachyon.sequencer", "change", "remove_node", what, result | rest] ->
        cond do
          what != "#{id}" ->
            {:ok, nodes}

          result == "ok" or (result == "error" and hd(rest) == "not_found") ->
            File.rm_rf!(Cluster.node_dir(c, id))
            new = Cluster.spawn_node(c, id, false, join: true)
            ms = System.monotonic_time(:millisecond) - n.replace.t0
            r = %{n.replace | removed_ms: ms}
            {:removed, Map.put(nodes, id, new |> Map.merge(%{state: :joining, replace: r}))}

          true ->
            {:retry, nodes}
        end

      _ ->
        {:ok, nodes}
    end
  end

  defp replace_step(c, nodes, %{state: :joining, id: id} = n, from, line) do
    r = n.replace

    case from == id && OSProcess.parse(line) do
      %{line: :event, kind: :caught_up} ->
        finish_replace(nodes, n, %{r | caught_up: true})

      %{line: :event, kind: :membership, fields: %{node_id: ^id} = f} ->
        voter = f.voters == length(c.group) and f.nodes == f.voters
        finish_replace(nodes, n, %{r | voter: voter})

      _ ->
        {:ok, nodes}
    end
  end

  defp finish_replace(nodes, n, r) do
    if r.caught_up and r.voter do
      ms = System.monotonic_time(:millisecond) - r.t0
      n = n |> Map.delete(:replace) |> Map.put(:state, :up)
      {:done, Map.put(nodes, n.id, n), %{node: n.id, removed_ms: r.removed_ms, ms: ms}}
    else
      {:ok, Map.put(nodes, n.id, %{n | replace: r})}
    end
  end

  @doc "Heals `fault` (injected): returns the nodes."
  def heal(%{kind: :loss} = f, c, nodes) do
    NetNS.clear_loss(c.hosts[f.target])
    nodes
  end

  # A replacement ends by itself (`replace_line/4`).
  def heal(%{kind: :replace}, _c, nodes), do: nodes

  def heal(%{kind: :kill, target: id}, c, nodes) do
    node = Cluster.spawn_node(c, id, false)
    Map.put(nodes, id, Map.put(node, :state, :starting))
  end

  def heal(%{kind: :stop, target: id}, _c, nodes) do
    case signal(nodes[id], "CONT", nodes, id, :up) do
      {:ok, nodes} -> nodes
      {:skip, _} -> nodes
    end
  end

  def heal(%{kind: :cut, target: id}, c, nodes) do
    :ok = NetNS.link(Cluster.node_host(c, id), :up)
    Map.put(nodes, id, %{nodes[id] | state: :up})
  end
end

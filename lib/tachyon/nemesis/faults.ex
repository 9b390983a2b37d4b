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
  # alike, for `dur` ms).

  alias Tachyon.Nemesis.{Cluster, NetNS}
  alias Tachyon.Sequencer.OSProcess

  @kinds [:kill, :stop, :cut, :loss]
  # A killed node is counted busy this much longer than its restart delay
  # (the VM starting), so that the schedule rarely picks it before it is up.
  @restart_allowance 4000

  @doc "Every kind of fault."
  def kinds, do: @kinds

  @doc """
  The schedule for `seed` over `ms` milliseconds: a fault every 1-2 s,
  `[%{at, kind, target, dur, p}]` (`at` from the start, ms; `target`: a
  node id for `:kill`, `:stop` and `:cut`, a host name for `:loss`). A
  fault whose drawn target still has one finds another free target, or
  is left out. `kinds`: those to draw from; `hosts`: every host's name;
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
      end

    {next, rng} = uniform(rng, 1000, 2000)
    # Rotate from the drawn target to the first one free at `at`.
    i = Enum.find_index(targets, &(&1 == target))
    {before, from} = Enum.split(targets, i)
    free = Enum.find(from ++ before, &(Map.get(busy, {kind == :loss, &1}, 0) <= at))

    {busy, acc} =
      if free == nil do
        {busy, acc}
      else
        until = at + dur + if(kind == :kill, do: @restart_allowance, else: 0)
        fault = %{at: at, kind: kind, target: free, dur: dur, p: p}
        {Map.put(busy, {kind == :loss, free}, until), [fault | acc]}
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

  @doc "Heals `fault` (injected): returns the nodes."
  def heal(%{kind: :loss} = f, c, nodes) do
    NetNS.clear_loss(c.hosts[f.target])
    nodes
  end

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

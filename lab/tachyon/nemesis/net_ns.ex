defmodule Tachyon.Nemesis.NetNS do
  @moduledoc false
  # A small cluster of network namespaces ("hosts") on one machine, for the
  # across-hosts tests and `mix tachyon.nemesis`: a switch namespace holding
  # a bridge (multicast flooded, no snooping) and one namespace per host,
  # each with a veth pair whose host end (eth0, 10.<net>.0.<n>/24, a
  # multicast route) lives inside the host's namespace.
  #
  # Faults on a host's link: `link/2` cuts it (the bridge end goes down);
  # `loss/2` drops a share of its IPv4 datagrams both ways, with `tc`
  # (this kernel has no netem): an htb qdisc on each end of the veth whose
  # classifier, a classic BPF program reading the kernel's random number,
  # sends that share to a class whose queue holds nothing (pfifo limit 0).

  @doc """
  Creates `prefix`sw and one namespace per name in `hosts`: returns
  `{:ok, %{name => %{ns, ip, link, dev, switch}}}` (`link`: the bridge end
  of its veth, in the switch namespace) or `{:error, why}` where namespaces
  cannot be created (not root, no `ip`). Names: `prefix` plus at most 4
  characters stay within the 15 bytes of an interface name.
  """
  def up(prefix, hosts, net \\ 77) do
    down(prefix, hosts)
    sw = "#{prefix}sw"

    with :ok <- ip(["netns", "add", sw]),
         :ok <- ip(["-n", sw, "link", "add", "br0", "type", "bridge", "mcast_snooping", "0"]),
         :ok <- ip(["-n", sw, "link", "set", "br0", "up"]) do
      hosts
      |> Enum.with_index(1)
      |> Enum.reduce_while({:ok, %{}}, fn {h, i}, {:ok, acc} ->
        case host(prefix, sw, h, i, net) do
          {:ok, info} -> {:cont, {:ok, Map.put(acc, h, info)}}
          error -> {:halt, error}
        end
      end)
      |> case do
        {:ok, _} = ok ->
          ok

        error ->
          down(prefix, hosts)
          error
      end
    end
  end

  defp host(prefix, sw, h, i, net) do
    ns = "#{prefix}#{h}"
    link = "#{prefix}#{i}b"

    steps = [
      ["netns", "add", ns],
      ["link", "add", "#{prefix}#{i}h", "type", "veth", "peer", "name", link],
      ["link", "set", "#{prefix}#{i}h", "netns", ns],
      ["link", "set", link, "netns", sw],
      ["-n", sw, "link", "set", link, "master", "br0"],
      ["-n", sw, "link", "set", link, "up"],
      ["-n", ns, "link", "set", "#{prefix}#{i}h", "name", "eth0"],
      ["-n", ns, "addr", "add", "10.#{net}.0.#{i}/24", "dev", "eth0"],
      ["-n", ns, "link", "set", "eth0", "up"],
      ["-n", ns, "link", "set", "lo", "up"],
      ["-n", ns, "route", "add", "224.0.0.0/4", "dev", "eth0"]
    ]

    case run_all(&ip/1, steps) do
      :ok -> {:ok, %{ns: ns, ip: {10, net, 0, i}, link: link, dev: "eth0", switch: sw}}
      error -> error
    end
  end

  @doc """
  Whether network namespaces can be made here (one is made and removed):
  `:ok` or `{:error, why}`.
  """
  def probe(prefix) do
    ns = "#{prefix}probe"
    ip(["netns", "del", ns])

    with :ok <- ip(["netns", "add", ns]) do
      ip(["netns", "del", ns])
    end
  end

  @doc "Removes the namespaces (their veths go with them)."
  def down(prefix, hosts) do
    for h <- hosts, do: ip(["netns", "del", "#{prefix}#{h}"])
    ip(["netns", "del", "#{prefix}sw"])
    :ok
  end

  @doc "Cuts (`:down`) or restores (`:up`) a host's link to the bridge."
  def link(%{link: link, switch: sw}, state) when state in [:up, :down],
    do: ip(["-n", sw, "link", "set", link, Atom.to_string(state)])

  @doc """
  Drops the share `p` (0 < p < 1) of the IPv4 datagrams on a host's link,
  both ways (`clear_loss/1` undoes it): `:ok` or `{:error, why}` where
  `tc` cannot (no htb, no BPF classifier).
  """
  def loss(%{ns: ns, dev: dev, link: link, switch: sw} = h, p) when p > 0 and p < 1 do
    threshold = trunc(p * 4_294_967_295)

    with :ok <- loss_on(ns, dev, threshold), :ok <- loss_on(sw, link, threshold) do
      :ok
    else
      error ->
        clear_loss(h)
        error
    end
  end

  @doc "Removes `loss/2` from a host's link."
  def clear_loss(%{ns: ns, dev: dev, link: link, switch: sw}) do
    tc(["-n", ns, "qdisc", "del", "dev", dev, "root"])
    tc(["-n", sw, "qdisc", "del", "dev", link, "root"])
    :ok
  end

  @doc "Whether `loss/2` works here (tried on a namespace of its own): `:ok` or `{:error, why}`."
  def loss_available?(prefix) do
    ns = "#{prefix}lp"
    ip(["netns", "del", ns])

    result =
      with :ok <- ip(["netns", "add", ns]),
           :ok <- ip(["-n", ns, "link", "set", "lo", "up"]),
           do: loss_on(ns, "lo", 1)

    ip(["netns", "del", ns])
    result
  end

  # Egress of `dev` in `ns`: class 1:1 passes everything, class 1:2 drops
  # everything; a cBPF classifier sends a datagram to 1:2 when the random
  # number (ld #rand, SKF_AD_OFF + SKF_AD_RANDOM) is at most `threshold`.
  defp loss_on(ns, dev, threshold) do
    prog = "4,32 0 0 4294963256,37 1 0 #{threshold},6 0 0 4294967295,6 0 0 0"
    base = ["-n", ns]
    tc(base ++ ["qdisc", "del", "dev", dev, "root"])

    run_all(&tc/1, [
      base ++ ["qdisc", "add", "dev", dev, "root", "handle", "1:", "htb", "default", "1"],
      base ++
        ["class", "add", "dev", dev, "parent", "1:", "classid", "1:1", "htb", "rate", "10gbit"],
      base ++
        ["class", "add", "dev", dev, "parent", "1:", "classid", "1:2", "htb", "rate", "10gbit"],
      base ++
        ["qdisc", "add", "dev", dev, "parent", "1:2", "handle", "20:", "pfifo", "limit", "0"],
      base ++
        ["filter", "add", "dev", dev, "parent", "1:", "protocol", "ip", "prio", "1"] ++
        ["bpf", "bytecode", prog, "classid", "1:2"]
    ])
  end

  defp run_all(fun, steps) do
    Enum.reduce_while(steps, :ok, fn args, :ok ->
      case fun.(args) do
        :ok -> {:cont, :ok}
        error -> {:halt, error}
      end
    end)
  end

  defp ip(args), do: cmd("ip", args)
  defp tc(args), do: cmd("tc", args)

  defp cmd(name, args) do
    case System.find_executable(name) do
      nil ->
        {:error, "no #{name} command"}

      exe ->
        case System.cmd(exe, args, stderr_to_stdout: true) do
          {_, 0} -> :ok
          {out, _} -> {:error, "#{name} #{Enum.join(args, " ")}: #{String.trim(out)}"}
        end
    end
  end
end

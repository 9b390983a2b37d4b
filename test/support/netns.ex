defmodule Tachyon.NetNS do
  @moduledoc false
  # A small cluster of network namespaces ("hosts") on one machine, for the
  # across-hosts tests and `bin/cluster`: a switch namespace holding a
  # bridge (multicast flooded, no snooping) and one namespace per host,
  # each with a veth pair whose host end (eth0, 10.77.<net>.<n>/24, a
  # multicast route) lives inside the host's namespace only.

  @doc """
  Creates `prefix`sw and one namespace per name in `hosts`: returns
  `{:ok, %{name => %{ns, ip, link}}}` (`link`: the bridge end of its veth,
  in the switch namespace, for cutting it) or `{:error, why}` where
  namespaces cannot be created (not root, no `ip`).
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
    end
  end

  defp host(prefix, sw, h, i, net) do
    ns = "#{prefix}#{h}"
    link = "#{prefix}#{i}b"
    addr = {10, net, 0, i}

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

    Enum.reduce_while(steps, :ok, fn args, :ok ->
      case ip(args) do
        :ok -> {:cont, :ok}
        error -> {:halt, error}
      end
    end)
    |> case do
      :ok -> {:ok, %{ns: ns, ip: addr, link: link, switch: sw}}
      error -> error
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

  defp ip(args) do
    case System.find_executable("ip") do
      nil ->
        {:error, "no ip command"}

      exe ->
        case System.cmd(exe, args, stderr_to_stdout: true) do
          {_, 0} -> :ok
          {out, _} -> {:error, "ip #{Enum.join(args, " ")}: #{String.trim(out)}"}
        end
    end
  end
end

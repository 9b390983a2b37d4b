defmodule Tachyon.Bench.Failover.Nodes do
  @moduledoc false
  # A group of sequencer nodes in OS processes for the failover bench
  # (Tachyon.Sequencer.OSProcess.start_group/2), kept up across faults: the
  # current primary, the others, restarts of a killed node on its own log
  # and port, and the role lines (`tachyon.sequencer role ...`) seen
  # between two faults (an election nobody caused).

  alias Tachyon.Sequencer.OSProcess

  @doc """
  Starts `n` nodes with logs under `base` (`extra`: more `mix
  tachyon.sequencer` arguments for every node); returns once one is primary.
  """
  def start(base, n, extra) do
    dirs = for i <- 0..(n - 1), do: Path.join(base, "node#{i}")
    {primary, others, group} = OSProcess.start_group(dirs, extra)

    %{
      dirs: dirs,
      group: group,
      extra: extra,
      primary: primary,
      others: others,
      epoch: primary.epoch,
      unprovoked: 0
    }
  end

  @doc "Every node."
  def all(g), do: [g.primary | g.others]

  @doc "kill -9 of every node."
  def stop(g), do: OSProcess.kill_all(all(g))

  @doc """
  Reads the role lines waiting from every node (after a fault has been
  measured, before the next): a `primary` line of a newer epoch than the
  one known is an election no fault caused; the group follows it.
  """
  def settle(g) do
    known = Map.put(g.primary, :epoch, g.epoch)
    {primary, others, elections} = OSProcess.current_primary(all(g), known)

    %{
      g
      | primary: primary,
        others: others,
        epoch: primary.epoch,
        unprovoked: g.unprovoked + elections
    }
  end

  @doc """
  kill -9 of `node`; returns the host time (us) just before the signal
  went (`signal/2`), then waits for the exit.
  """
  def kill(%{port: port} = node) do
    at = signal(node, "KILL")

    receive do
      {^port, {:exit_status, _}} -> at
    after
      5000 -> at
    end
  end

  @doc """
  Sends `sig` ("KILL", "STOP", "CONT") to `node` (or an OS pid) and
  returns the host time (us) just before. The signal goes through a shell
  kept open for it (its `kill` builtin: no fork and exec of a command,
  which takes milliseconds on a busy machine, between the time taken and
  the signal); returns once the shell has sent it.
  """
  def signal(%{os_pid: pid}, sig), do: signal(pid, sig)

  def signal(pid, sig) when is_integer(pid) do
    sh = shell()
    at = System.os_time(:microsecond)
    Port.command(sh, "kill -#{sig} #{pid} 2>/dev/null; echo done\n")

    receive do
      {^sh, {:data, {:eol, "done"}}} -> at
    after
      5000 -> raise "failover bench: the shell sending signals did not answer"
    end
  end

  defp shell do
    case Process.get({__MODULE__, :shell}) do
      nil ->
        sh = Port.open({:spawn_executable, "/bin/sh"}, [:binary, {:line, 256}, args: ["-s"]])
        Process.put({__MODULE__, :shell}, sh)
        sh

      sh ->
        sh
    end
  end

  @doc "Every line waiting from the nodes, as `{node id, line}` (for an error report)."
  def lines(g) do
    ports = Map.new(all(g), &{&1.port, &1.id})

    Stream.repeatedly(fn ->
      receive do
        {port, {:data, {:eol, line}}} when is_map_key(ports, port) -> {ports[port], line}
      after
        0 -> nil
      end
    end)
    |> Enum.take_while(& &1)
  end

  @doc """
  Waits for a new primary among the others (after a fault of the primary):
  `{:ok, took, g}` (`took` as `OSProcess.await_role/3`; in `g` the new
  primary, the old one among the others) or `{:error, :timeout}`.
  """
  def await_new_primary(g, timeout) do
    case OSProcess.await_role(g.others, "primary", timeout) do
      {:ok, took} ->
        others = [g.primary | Enum.reject(g.others, &(&1.port == took.node.port))]
        {:ok, took, %{g | primary: took.node, others: others, epoch: took.epoch}}

      {:error, :timeout} ->
        {:error, :timeout}
    end
  end

  @doc """
  Starts `node` again (after a kill -9) on its own log and port,
  `--no-eager`, and waits for its first role line; returns `g` with it
  in place of the old one.
  """
  def restart(g, node) do
    {_, port} = Enum.at(g.group, node.id)
    arg = Enum.map_join(g.group, ",", fn {_, p} -> "127.0.0.1:#{p}" end)

    args =
      ["--path", Enum.at(g.dirs, node.id), "--port", "#{port}", "--group", arg] ++
        ["--wait", "backoff", "--no-eager"] ++ g.extra

    {:ok, r} = OSProcess.start(args)
    r = Map.put(r, :id, node.id)
    {:ok, _} = OSProcess.await_role([r], "follower", 15_000)
    swap = fn n -> if n.port == node.port, do: r, else: n end
    %{g | primary: swap.(g.primary), others: Enum.map(g.others, swap)}
  end
end

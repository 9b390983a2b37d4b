defmodule Tachyon.Bench.Failover.Witness do
  @moduledoc false
  # The failover bench's `two_nodes: :safe` series: the standby takes over
  # only on a witness's word, here the :nodedown of the primary's BEAM node
  # (`:watch_nodes`). `mix tachyon.sequencer` nodes have no distribution,
  # so the primary runs on a :peer node (its own OS process and VM) and the
  # standby in this VM, watching it; the member (Failover.Pinger) here too.
  # Each kill -9 of the peer's OS process is a fresh pair; the time is from
  # the kill to the standby's stats saying primary (polled every 1 ms, as
  # `mix tachyon.sequencer` prints its role lines).

  alias Tachyon.Bench
  alias Tachyon.Bench.Failover.{Check, Nodes, Pinger}
  alias Tachyon.Sequencer
  alias Tachyon.Sequencer.OSProcess

  @primary :tachyon_bench_safe_primary

  @doc "`kills` takeovers; a series map as `Tachyon.Bench.Failover` prints them."
  def run(opts, kills) do
    ensure_distributed()
    runs = for _ <- 1..kills, do: kill_once(opts)

    %{
      label: "two-safe",
      nodes: 2,
      extra: ["two_nodes: :safe", "watch_nodes: the primary's BEAM node"],
      election_timeout: 50,
      samples: Enum.map(runs, &elem(&1, 0)),
      unprovoked: 0,
      check: Check.merge(Enum.map(runs, &elem(&1, 1)))
    }
  end

  defp kill_once(opts) do
    base = Bench.tmp_dir(opts, "failover-safe")
    [pdir, sdir] = for d <- ["primary", "standby"], do: Path.join(base, d)
    {peer, node, os_pid, s, group, epoch} = start_pair(pdir, sdir, 5)
    pinger = Pinger.start(group, 1)
    Process.sleep(300)
    :ok = Pinger.mark(pinger)
    parent = self()
    watcher = spawn_link(fn -> watch(s, parent) end)
    at = Nodes.signal(List.to_integer(os_pid), "KILL")

    {took_us, e} =
      receive do
        {^watcher, :primary, t, e} ->
          {t, e}
      after
        10_000 ->
          Mix.raise(
            "failover bench: the :safe standby did not take over within 10 s of the kill -9 of " <>
              "the primary's VM (nodedown seen: #{node not in Node.list()}); standby: " <>
              "#{inspect(Sequencer.stats(s))}; member: #{inspect(Pinger.report(pinger))}"
          )
      end

    r =
      case Pinger.await_delivery_after(pinger, took_us, 10_000) do
        {:ok, _} ->
          Process.sleep(200)
          Pinger.report(pinger)

        {:error, r} ->
          Mix.raise(
            "failover bench: the member delivered nothing within 10 s of the :safe standby's " <>
              "takeover: #{inspect(r)}"
          )
      end

    result = Pinger.stop(pinger)
    :ok = Sequencer.close(s)
    catch_exit(fn -> :peer.stop(peer) end)
    check = Check.run([result], [pdir, sdir], 1)
    if Check.ok?(check), do: File.rm_rf!(base)
    {%{role_us: took_us - at, gap_us: r.max_gap_us, terms: e - epoch}, check}
  end

  # The standby (in this VM) first, then the primary on a fresh peer: the
  # primary asks for votes at start and the standby is there to give its
  # own. Should the standby be elected all the same (the primary too slow
  # to start), the pair starts again: only the peer's VM can be killed.
  defp start_pair(pdir, sdir, tries) do
    group = for _ <- 1..2, do: {{127, 0, 0, 1}, OSProcess.free_port()}
    [{_, pport}, {_, sport}] = group
    {peer, node} = start_peer()
    os_pid = :erpc.call(node, :os, :getpid, [])
    common = [group: group, two_nodes: :safe, wait: :backoff, stats_interval_ms: nil]

    {:ok, s} =
      Sequencer.start_link(
        [path: sdir, port: sport, watch_nodes: [node, nil], eager: false] ++ common
      )

    :ok =
      :erpc.call(node, __MODULE__, :start_primary, [
        [name: @primary, path: pdir, port: pport, watch_nodes: [nil, Node.self()]] ++ common
      ])

    case :erpc.call(node, Sequencer, :await_primary, [@primary, 5000]) do
      {:ok, epoch} ->
        {peer, node, os_pid, s, group, epoch}

      {:error, :timeout} when tries > 1 ->
        :ok = Sequencer.close(s)
        catch_exit(fn -> :peer.stop(peer) end)
        Enum.each([pdir, sdir], &File.rm_rf!/1)
        start_pair(pdir, sdir, tries - 1)

      {:error, :timeout} ->
        Mix.raise(
          "failover bench: the peer's node not primary in a :safe pair within 5 s (5 tries); " <>
            "primary (peer): #{inspect(:erpc.call(node, Sequencer, :stats, [@primary]))}; " <>
            "standby: #{inspect(Sequencer.stats(s))}"
        )
    end
  end

  # The node's counters straight from its thread (not through its
  # process, which handles the :nodedown meanwhile).
  defp watch(s, parent), do: watch_ref(GenServer.call(s, :handle).ref, parent)

  defp watch_ref(ref, parent) do
    case Tachyon.Native.seq_stats(ref) do
      {:ok, %{role: :primary, epoch: e}} ->
        send(parent, {self(), :primary, System.os_time(:microsecond), e})

      _ ->
        Process.sleep(1)
        watch_ref(ref, parent)
    end
  end

  defp catch_exit(fun) do
    fun.()
  catch
    :exit, _ -> :ok
  end

  @doc false
  # On the peer: starts the primary under a process that stays.
  def start_primary(opts) do
    {:ok, _} = Application.ensure_all_started(:tachyon)
    parent = self()

    spawn(fn ->
      {:ok, _} = Sequencer.start_link(opts)
      send(parent, {self(), :started})
      Process.sleep(:infinity)
    end)

    receive do
      {_, :started} -> :ok
    after
      20_000 -> {:error, :timeout}
    end
  end

  defp ensure_distributed do
    unless Node.alive?() do
      System.cmd("epmd", ["-daemon"])

      {:ok, _} =
        Node.start(:"tachyon_bench_#{System.unique_integer([:positive])}@127.0.0.1", :longnames)
    end
  end

  defp start_peer do
    paths = Enum.flat_map([:tachyon, :elixir, :logger], &[~c"-pa", :code.lib_dir(&1, :ebin)])

    {:ok, peer, node} =
      :peer.start(%{
        name: :"tachyon_safe_#{System.unique_integer([:positive])}",
        host: ~c"127.0.0.1",
        longnames: true,
        args: paths
      })

    {peer, node}
  end
end

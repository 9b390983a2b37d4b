defmodule Tachyon.SequencerTaskTest do
  # `mix tachyon.sequencer` as an operator runs it: `mix` in this
  # repository, an OS process with its own standard input (docs/FAILOVER.md,
  # "Replacing a host"), not `Tachyon.Sequencer.OSProcess.start/3` (whose
  # `elixir -e` halts when its standard input closes). Not async: OS
  # processes and ports.
  use ExUnit.Case, async: false

  import Tachyon.TestHelpers, only: [tmp_dir: 1]

  alias Mix.Tasks.Tachyon.Sequencer, as: SequencerTask
  alias Tachyon.Sequencer.OSProcess

  @commands "stats, membership, add_node IP:PORT, remove_node ID|IP:PORT"

  # `mix tachyon.sequencer ARGS` in this repository (this run's MIX_ENV,
  # the NIF as built). `stdin`: `:port` (this test writes its lines) or
  # `:null` (`< /dev/null`, as under nohup). Returns `%{port, os_pid,
  # address, node_id}` once it printed its ready line, and the lines before
  # it; killed -9 when the test ends.
  defp operator_start(args, stdin \\ :port) do
    mix = System.find_executable("mix") || flunk("mix not found")

    {exe, argv} =
      case stdin do
        :port ->
          {mix, ["tachyon.sequencer" | args]}

        :null ->
          sh = System.find_executable("sh")
          {sh, ["-c", ~s(exec "$0" tachyon.sequencer "$@" < /dev/null), mix | args]}
      end

    port =
      Port.open({:spawn_executable, exe}, [
        :binary,
        :exit_status,
        :stderr_to_stdout,
        {:line, 4096},
        args: argv,
        cd: File.cwd!(),
        env: [{~c"MIX_ENV", ~c"#{Mix.env()}"}, {~c"TACHYON_SKIP_CARGO", ~c"1"}]
      ])

    {:os_pid, os_pid} = Port.info(port, :os_pid)
    # (The exec chain sh, mix, elixir, erl ends in the VM: this pid is it.)
    on_exit(fn -> System.cmd("kill", ["-9", "#{os_pid}"], stderr_to_stdout: true) end)
    %{port: port, os_pid: os_pid}
  end

  # Waits for the ready line of `node` (from `operator_start/2`): the node
  # with `:address` and `:node_id`, and the lines before it.
  defp await_ready(node, timeout \\ 60_000) do
    assert {:ok, line, seen} = await_text(node, "tachyon.sequencer ready ", timeout)
    [hostport, "session", _, "next_seq", _, "node", id] = String.split(line, " ")
    {Map.merge(node, %{address: hostport, node_id: String.to_integer(id)}), seen}
  end

  # The next line of `node` that starts with `prefix`: `{:ok, rest, seen}`
  # (`seen`: the lines before it), `{:error, {:exit_status, s}, seen}` if
  # the process exits first, `{:error, :timeout, seen}`.
  defp await_text(%{port: port}, prefix, timeout, seen \\ []) do
    receive do
      {^port, {:data, {:eol, line}}} ->
        if String.starts_with?(line, prefix),
          do: {:ok, String.replace_prefix(line, prefix, ""), Enum.reverse(seen)},
          else: await_text(%{port: port}, prefix, timeout, [line | seen])

      {^port, {:exit_status, s}} ->
        {:error, {:exit_status, s}, Enum.reverse(seen)}
    after
      timeout -> {:error, :timeout, Enum.reverse(seen)}
    end
  end

  # Calls `fun` until it returns a truthy value (every 20 ms, at most
  # `timeout` ms): the value, or nil.
  defp eventually(fun, timeout) do
    deadline = System.monotonic_time(:millisecond) + timeout

    Stream.repeatedly(fn ->
      fun.() ||
        if System.monotonic_time(:millisecond) < deadline do
          Process.sleep(20)
          nil
        else
          :gave_up
        end
    end)
    |> Enum.find(& &1)
    |> case do
      :gave_up -> nil
      v -> v
    end
  end

  describe "its command line" do
    test "--help: the moduledoc, every option's name, exit status 0" do
      mix = System.find_executable("mix") || flunk("mix not found")

      {out, status} =
        System.cmd(mix, ["tachyon.sequencer", "--help"],
          cd: File.cwd!(),
          env: [{"MIX_ENV", "#{Mix.env()}"}, {"TACHYON_SKIP_CARGO", "1"}],
          stderr_to_stdout: true
        )

      assert status == 0, out
      assert out =~ "Runs one `Tachyon.Sequencer` in its own OS process"

      for flag <-
            ~w(--max-datagram-size --heartbeat-ms --heartbeat-after-us --election-timeout-ms) ++
              ~w(--stats-interval-ms --help),
          do: assert(out =~ ~r/`#{flag}[ `]/, "#{flag} missing")

      # Anywhere on the line, whatever else is on it.
      assert SequencerTask.options(["-h"]) == :help
      assert SequencerTask.options(~w(--port x --bogus --help)) == :help
    end

    test "the options are named as Tachyon.Sequencer's, `-` for `_`; the former names still work" do
      new =
        ~w(--path /p --max-datagram-size 9000 --heartbeat-ms 5 --heartbeat-after-us 20) ++
          ~w(--election-timeout-ms 300 --stats-interval-ms 50)

      old =
        ~w(--path /p --max-datagram 9000 --heartbeat 5 --heartbeat-after 20) ++
          ~w(--election-timeout 300 --stats-interval 50)

      opts = [
        path: "/p",
        port: 0,
        max_datagram_size: 9000,
        heartbeat_ms: 5,
        heartbeat_after_us: 20,
        election_timeout_ms: 300
      ]

      assert SequencerTask.options(new) == {opts, 50}
      assert SequencerTask.options(old) == {opts, 50}
      schema = Tachyon.Sequencer.Options.sequencer_schema()
      assert Keyword.keys(opts) -- Keyword.keys(schema) == []

      assert_raise Mix.Error, "give --heartbeat-ms only (--heartbeat is its former name)", fn ->
        SequencerTask.options(~w(--path /p --heartbeat 5 --heartbeat-ms 6))
      end

      assert_raise Mix.Error, ~r/unknown or bad options.*mix tachyon.sequencer --help/, fn ->
        SequencerTask.options(~w(--path /p --heartbeet 5))
      end
    end
  end

  test "its standard input: the commands, and an error line for any other" do
    {node, _} =
      ["--path", tmp_dir("task_stdin"), "--port", "0", "--wait", "park"]
      |> operator_start()
      |> await_ready()

    assert {:ok, %{node_id: 0, nodes: [%{id: 0, voter: true, address: addr}]}} =
             OSProcess.membership(node)

    assert addr == node.address
    assert {:ok, %{role: "primary"}} = OSProcess.stats(node)

    Port.command(node.port, "frobnicate now\n\n  \nadd_node\n")
    error = "tachyon.sequencer error unknown command "

    assert {:ok, ~s("frobnicate now": the commands are #{@commands} at_us ) <> t, _} =
             await_text(node, error, 10_000)

    assert {_, ""} = Integer.parse(t)
    # Empty lines are ignored; a command without its argument is unknown.
    assert {:ok, ~s("add_node": the commands are ) <> _, []} = await_text(node, error, 10_000)
    # One that fails says why.
    assert OSProcess.change(node, "remove_node 7") == {:error, "not_found"}
    OSProcess.kill(node)
  end

  test "its standard input closed (< /dev/null, nohup): the node keeps running" do
    node =
      operator_start(
        ["--path", tmp_dir("task_eof"), "--port", "0", "--wait", "park"] ++
          ["--stats-interval-ms", "50"],
        :null
      )

    closed = "tachyon.sequencer stdin closed: no more commands are read; the node keeps running"
    assert {:ok, "", _} = await_text(node, closed, 60_000)
    # It goes on: its stats, every 50 ms, after it read the end of its input.
    assert {:ok, _, _} = await_text(node, "tachyon.sequencer stats ", 10_000)
    assert {:ok, _, _} = await_text(node, "tachyon.sequencer stats ", 10_000)
    refute_received {_, {:exit_status, _}}
    OSProcess.kill(node)
  end

  @tag :slow
  @tag timeout: 240_000
  test "replacing a host as docs/FAILOVER.md says, through the primary's standard input" do
    dirs = for i <- 0..2, do: tmp_dir("task_replace#{i}")
    ports = for _ <- dirs, do: OSProcess.free_port()
    group = Enum.map_join(ports, ",", &"127.0.0.1:#{&1}")

    # A group of three on loopback, the three VMs booting at once.
    nodes =
      for {{dir, port}, i} <- Enum.with_index(Enum.zip(dirs, ports)) do
        args = ["--path", dir, "--port", "#{port}", "--group", group, "--wait", "backoff"]
        {operator_start(args ++ if(i == 0, do: [], else: ["--no-eager"])), i}
      end
      |> Enum.map(fn {node, i} -> node |> await_ready() |> elem(0) |> Map.put(:id, i) end)

    assert Enum.map(nodes, & &1.node_id) == [0, 1, 2]
    assert {:ok, %{node: primary}} = OSProcess.await_role(nodes, "primary", 60_000)
    [dead, survivor] = nodes -- [primary]

    # The host of a follower is gone for good.
    OSProcess.kill(dead)

    # 1. Remove the dead node, on the primary: a line on its standard input.
    # (Right after an election the primary may answer change_in_progress:
    # ask again, as the guide says.)
    removed =
      eventually(
        fn ->
          case OSProcess.change(primary, "remove_node #{dead.id}") do
            {:error, "change_in_progress"} -> nil
            other -> other
          end
        end,
        30_000
      )

    assert removed == {:ok, dead.id}
    assert {:ok, %{nodes: two}} = OSProcess.membership(primary)
    assert Enum.map(two, & &1.id) |> Enum.sort() == Enum.sort([primary.id, survivor.id])

    # 2. The new host on an empty directory with --join (the guide's
    # command line), its standard input closed as under nohup.
    new_port = OSProcess.free_port()

    new =
      operator_start(
        ["--path", tmp_dir("task_replace_new"), "--ip", "127.0.0.1", "--port", "#{new_port}"] ++
          ["--join", primary.address],
        :null
      )

    {new, seen} = await_ready(new)
    assert new.node_id == -1, "a new node has no id until it is added"

    closed? = &String.starts_with?(&1, "tachyon.sequencer stdin closed")

    unless Enum.any?(seen, closed?),
      do: assert({:ok, _, _} = await_text(new, "tachyon.sequencer stdin closed", 10_000))

    # Back as a voter, with the free id (the dead node's), in the primary's
    # membership line.
    voter =
      eventually(
        fn ->
          with {:ok, %{nodes: ns}} <- OSProcess.membership(primary),
               %{voter: true, id: id} <- Enum.find(ns, &(&1.address == "127.0.0.1:#{new_port}")) do
            id
          else
            _ -> nil
          end
        end,
        60_000
      )

    assert voter == dead.id
    assert {:ok, %{nodes: three}} = OSProcess.membership(primary)
    assert length(three) == 3 and Enum.all?(three, & &1.voter)
    refute_received {_, {:exit_status, _}}
    OSProcess.kill_all([primary, survivor, new])
  end
end

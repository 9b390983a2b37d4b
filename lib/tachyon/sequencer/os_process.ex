defmodule Tachyon.Sequencer.OSProcess do
  @moduledoc false
  # A sequencer in an OS process of its own (`mix tachyon.sequencer` run by
  # `elixir` with this node's code path): for the benchmark (as the seed
  # runs it) and the kill -9 tests.

  @doc """
  Starts one; returns `%{port, os_pid, address: {ip, port}, session, args}`
  once it listens. `opts`: `netns: name` runs it in that network namespace.
  """
  def start(args, timeout \\ 30_000, opts \\ []) do
    p = spawn_elixir("Mix.Tasks.Tachyon.Sequencer.run(#{inspect(args)})", opts)
    p = Map.put(p, :args, args)
    await_ready(p, System.monotonic_time(:millisecond) + timeout)
  end

  @doc """
  Starts `node` (a `start/3` or `start_group/2` node, killed) again with
  its arguments (its log, port and group), `--no-eager` (it waits an
  election timeout for a primary before it campaigns); `{:ok, node}` with
  the new process, its `:id` kept.
  """
  def restart(node, timeout \\ 30_000) do
    args = if "--no-eager" in node.args, do: node.args, else: node.args ++ ["--no-eager"]

    with {:ok, p} <- start(args, timeout), do: {:ok, Map.put(p, :id, node.id)}
  end

  @doc """
  A group of `length(dirs)` nodes on loopback (free ports), each in its own
  OS process with its own log; returns `{nodes, group}` once one of them is
  primary (`nodes`: the `start/3` maps, each with `:id`). `extra`: more
  arguments for every node. Returns `{primary, others, group}`.
  """
  def start_group(dirs, extra \\ []) do
    group = for _ <- dirs, do: {{127, 0, 0, 1}, free_port()}
    arg = Enum.map_join(group, ",", fn {_, port} -> "127.0.0.1:#{port}" end)

    nodes =
      for {{dir, {_, port}}, i} <- Enum.with_index(Enum.zip(dirs, group)) do
        args =
          ["--path", dir, "--port", "#{port}", "--group", arg, "--wait", "backoff"] ++
            if(i == 0, do: [], else: ["--no-eager"]) ++ extra

        {:ok, p} = start(args)
        Map.put(p, :id, i)
      end

    {:ok, %{node: primary, epoch: e}} = await_role(nodes, "primary", 20_000)
    {Map.put(primary, :epoch, e), List.delete(nodes, primary), group}
  end

  @doc """
  The primary now, of `nodes`: `known` (a node with its `:epoch`) unless a
  role line received since says another node became primary of a later
  epoch (a loaded machine can starve a node past its election timeout
  before any fault is injected). Consumes the lines received so far.
  Returns the node (with `:epoch`), the others, and how many elections of
  a later epoch the lines told of.
  """
  def current_primary(nodes, known) do
    ports = Map.new(nodes, &{&1.port, &1})
    {primary, n} = latest_primary(ports, known, 0)
    {primary, Enum.reject(nodes, &(&1.id == primary.id)), n}
  end

  defp latest_primary(ports, known, n) do
    receive do
      {port, {:data, {:eol, "tachyon.sequencer role primary epoch " <> rest}}}
      when is_map_key(ports, port) ->
        [e | _] = String.split(rest, " ")
        e = String.to_integer(e)

        if e > known.epoch,
          do: latest_primary(ports, Map.put(Map.fetch!(ports, port), :epoch, e), n + 1),
          else: latest_primary(ports, known, n)

      {port, {:data, _}} when is_map_key(ports, port) ->
        latest_primary(ports, known, n)
    after
      0 -> {known, n}
    end
  end

  @doc """
  Waits for a `tachyon.sequencer role ROLE ...` line from any of `nodes`
  of an epoch after `after_epoch` (earlier ones are skipped):
  `{:ok, %{node: node, epoch: e, next_seq: n, commit: c, at_us: t}}`.
  """
  def await_role(nodes, role, timeout, after_epoch \\ 0) do
    ports = Map.new(nodes, &{&1.port, &1})
    deadline = System.monotonic_time(:millisecond) + timeout

    Stream.repeatedly(fn ->
      await_role_until(ports, "tachyon.sequencer role #{role} ", deadline)
    end)
    |> Enum.find(&(not match?({:ok, %{epoch: e}} when e <= after_epoch, &1)))
  end

  defp await_role_until(ports, prefix, deadline) do
    left = max(0, deadline - System.monotonic_time(:millisecond))

    receive do
      {port, {:data, {:eol, line}}} when is_map_key(ports, port) ->
        if String.starts_with?(line, prefix) do
          ["epoch", e, "leader", _, "next_seq", n, "commit", c, "at_us", t] =
            line |> String.replace_prefix(prefix, "") |> String.split(" ")

          {:ok,
           %{
             node: Map.fetch!(ports, port),
             epoch: String.to_integer(e),
             next_seq: String.to_integer(n),
             commit: String.to_integer(c),
             at_us: String.to_integer(t)
           }}
        else
          await_role_until(ports, prefix, deadline)
        end
    after
      left -> {:error, :timeout}
    end
  end

  @doc """
  Receives the lines of `nodes`, parsed (`parse/1`), until `fun.(node,
  line)` is true for one: `{:ok, node, line, seen}` (`seen`: the lines
  before it, `{node, line}` in order of arrival), or `{:error, :timeout,
  seen}` after `timeout` ms.
  """
  def await(nodes, fun, timeout) do
    ports = Map.new(nodes, &{&1.port, &1})
    await_until(ports, fun, System.monotonic_time(:millisecond) + timeout, [])
  end

  defp await_until(ports, fun, deadline, seen) do
    left = max(0, deadline - System.monotonic_time(:millisecond))

    receive do
      {port, {:data, {:eol, text}}} when is_map_key(ports, port) ->
        node = Map.fetch!(ports, port)
        line = parse(text)

        if fun.(node, line),
          do: {:ok, node, line, Enum.reverse(seen)},
          else: await_until(ports, fun, deadline, [{node, line} | seen])
    after
      left -> {:error, :timeout, Enum.reverse(seen)}
    end
  end

  @doc """
  Waits for an event line of `kind` (an atom: `:learner`, `:caught_up`,
  `:disk_full`, ...) from any of `nodes` whose fields satisfy `fun`:
  `{:ok, node, line}` (see `parse/1`) or `{:error, :timeout}`. Other lines
  of `nodes` received meanwhile are dropped.
  """
  def await_event(nodes, kind, timeout, fun \\ fn _ -> true end) do
    match = fn _node, l -> l.line == :event and l.kind == kind and fun.(l.fields) end

    case await(nodes, match, timeout) do
      {:ok, node, line, _} -> {:ok, node, line}
      {:error, :timeout, _} -> {:error, :timeout}
    end
  end

  @doc """
  A line of `mix tachyon.sequencer`: `%{line: :role, role: "primary",
  epoch: e, leader: l, next_seq: n, commit: c, at_us: t}`, `%{line:
  :event, kind: atom, fields: map, at_us: t}`, `%{line: :stats, stats:
  map, at_us: t}` or `%{line: :other, text: text}` (field values: an
  integer, `true`, `false`, `nil` or a string).
  """
  def parse("tachyon.sequencer role " <> rest) do
    [role | pairs] = String.split(rest, " ")
    fields = pairs(pairs, %{})

    Map.merge(fields, %{
      line: :role,
      role: role,
      leader: if(fields.leader != -1, do: fields.leader)
    })
  end

  def parse("tachyon.sequencer event " <> rest) do
    [kind | pairs] = String.split(rest, " ")
    {at, fields} = Map.pop(pairs(pairs, %{}), :at_us)
    %{line: :event, kind: String.to_atom(kind), fields: fields, at_us: at}
  end

  def parse("tachyon.sequencer stats " <> rest) do
    {at, stats} = Map.pop(pairs(String.split(rest, " "), %{}), :at_us)
    %{line: :stats, stats: stats, at_us: at}
  end

  def parse(text), do: %{line: :other, text: text}

  # (The keys are the node's own field names: a small fixed set of atoms.)
  defp pairs([k, v | rest], acc), do: pairs(rest, Map.put(acc, String.to_atom(k), value(v)))
  defp pairs(_, acc), do: acc

  defp value("true"), do: true
  defp value("false"), do: false
  defp value("nil"), do: nil

  defp value(v) do
    case Integer.parse(v) do
      {i, ""} -> i
      _ -> v
    end
  end

  @doc "Drops the output lines of `nodes` received so far (role lines of the past)."
  def flush_lines(nodes), do: flush_ports(Map.new(nodes, &{&1.port, true}))

  defp flush_ports(ports) do
    receive do
      {port, {:data, _}} when is_map_key(ports, port) -> flush_ports(ports)
    after
      0 -> :ok
    end
  end

  @doc "A UDP port free on loopback now."
  def free_port do
    {:ok, s} = :gen_udp.open(0, ip: {127, 0, 0, 1})
    {:ok, p} = :inet.port(s)
    :gen_udp.close(s)
    p
  end

  @doc """
  Runs `code` in a new `elixir` OS process with this node's code path
  (halting when its stdin closes: when this VM dies, so does it; its
  standard input's reader is `Tachyon.Sequencer.StdinReader`, which `mix
  tachyon.sequencer` then keeps); its output comes as port messages
  (`await_line/3`).
  """
  def spawn_elixir(code, opts \\ []) do
    elixir = System.find_executable("elixir") || raise "elixir not found"

    paths =
      Enum.flat_map([:tachyon], fn app -> ["-pa", List.to_string(:code.lib_dir(app, :ebin))] end)

    code = "Tachyon.Sequencer.StdinReader.ensure_started(:halt); " <> code
    # Its schedulers have nothing to do: no busy-waiting that would take a
    # core from the threads.
    args = ["--erl", "+sbwt none +sbwtdcpu none +sbwtdio none"] ++ paths ++ ["-e", code]

    {exe, args} =
      case opts[:netns] do
        nil -> {elixir, args}
        ns -> {System.find_executable("ip"), ["netns", "exec", ns, elixir | args]}
      end

    port =
      Port.open({:spawn_executable, exe}, [
        :binary,
        :exit_status,
        :stderr_to_stdout,
        {:line, 4096},
        args: args
      ])

    {:os_pid, os_pid} = Port.info(port, :os_pid)
    %{port: port, os_pid: os_pid}
  end

  defp await_ready(p, deadline) do
    left = max(0, deadline - System.monotonic_time(:millisecond))

    receive do
      {port, {:data, {:eol, "tachyon.sequencer ready " <> rest}}} when port == p.port ->
        [hostport, "session", s, "next_seq", n | _node] = String.split(rest, " ")
        [host, portno] = String.split(hostport, ":")
        {:ok, ip} = :inet.parse_address(String.to_charlist(host))

        {:ok,
         Map.merge(p, %{
           address: {ip, String.to_integer(portno)},
           session: String.to_integer(s),
           next_seq: String.to_integer(n)
         })}

      {port, {:data, _other}} when port == p.port ->
        await_ready(p, deadline)

      {port, {:exit_status, st}} when port == p.port ->
        {:error, {:exit_status, st}}
    after
      left ->
        kill(p)
        {:error, :timeout}
    end
  end

  @doc "Waits for a line starting with `prefix` from the process; returns the rest."
  def await_line(%{port: port}, prefix, timeout \\ 30_000) do
    receive do
      {^port, {:data, {:eol, line}}} ->
        if String.starts_with?(line, prefix),
          do: {:ok, String.replace_prefix(line, prefix, "")},
          else: await_line(%{port: port}, prefix, timeout)
    after
      timeout -> {:error, :timeout}
    end
  end

  @doc """
  The numbers of `Tachyon.Sequencer.stats/1` of the node in `p` (a
  `mix tachyon.sequencer` process), asked on its standard input:
  `{:ok, %{messages: n, syncs: n, ...}}` or `{:error, :timeout}`. Drops
  the process's other output lines received meanwhile.
  """
  def stats(p, timeout \\ 5000) do
    Port.command(p.port, "stats\n")

    with {:ok, rest} <- await_line(p, "tachyon.sequencer stats ", timeout) do
      {:ok, parse("tachyon.sequencer stats " <> rest).stats}
    end
  end

  @doc """
  A membership change on the node in `p` (`"add_node 127.0.0.1:7003"`,
  `"remove_node 2"`), asked on its standard input: `{:ok, id}`, `{:error,
  reason}` (a string: `"not_primary 127.0.0.1:7001"`, `"change_in_progress"`,
  ...) or `{:error, :no_answer}` after `timeout` ms. Drops the process's
  other output lines received meanwhile.
  """
  def change(p, command, timeout \\ 10_000) do
    Port.command(p.port, command <> "\n")
    [op, what] = String.split(command, " ", parts: 2)

    case await_line(p, "tachyon.sequencer change #{op} #{what} ", timeout) do
      {:ok, "ok " <> rest} -> {:ok, rest |> String.split(" ") |> hd() |> String.to_integer()}
      {:ok, "error " <> rest} -> {:error, rest |> String.split(" at_us ") |> hd()}
      {:error, :timeout} -> {:error, :no_answer}
    end
  end

  @doc """
  The group as the node in `p` knows it, asked on its standard input:
  `{:ok, %{node_id: id | -1, nodes: [%{id, address: "ip:port", voter}]}}`
  or `{:error, :timeout}`.
  """
  def membership(p, timeout \\ 5000) do
    Port.command(p.port, "membership\n")

    with {:ok, rest} <- await_line(p, "tachyon.sequencer membership ", timeout) do
      ["node_id", me, "nodes", list | _] = String.split(rest, " ")

      nodes =
        for n <- String.split(list, ",", trim: true) do
          [id, ip, port, kind] = String.split(n, ":")
          %{id: String.to_integer(id), address: "#{ip}:#{port}", voter: kind == "voter"}
        end

      {:ok, %{node_id: String.to_integer(me), nodes: nodes}}
    end
  end

  @doc "Sends signal `sig` (\"STOP\", \"CONT\", ...) to the process."
  def signal(%{os_pid: os_pid}, sig) do
    {_, 0} = System.cmd("kill", ["-#{sig}", Integer.to_string(os_pid)], stderr_to_stdout: true)
    :ok
  end

  @doc """
  Stops every node in `nodes` at one instant (one `kill -STOP` for all),
  then kills each (-9) and waits for the exits: their logs end as they
  were at that instant. Killing one after the other instead would leave
  the last ones time to elect a new primary (an epoch record the first
  ones never see).
  """
  def kill_all(nodes) do
    pids = Enum.map(nodes, &Integer.to_string(&1.os_pid))
    if pids != [], do: System.cmd("kill", ["-STOP" | pids], stderr_to_stdout: true)
    Enum.each(nodes, &kill/1)
  end

  @doc "kill -9, and waits for the exit."
  def kill(%{port: port, os_pid: os_pid}) do
    System.cmd("kill", ["-9", Integer.to_string(os_pid)], stderr_to_stdout: true)

    receive do
      {^port, {:exit_status, _}} -> :ok
    after
      5000 -> :ok
    end
  end
end

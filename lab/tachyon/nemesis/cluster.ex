defmodule Tachyon.Nemesis.Cluster do
  @moduledoc false
  # A sequencer group across hosts on one machine: one network namespace
  # per sequencer node ("n1", "n2", ...) and per members' host, a
  # multicast bus, each node an OS process (`mix tachyon.sequencer`) with
  # its own log under `dir`. Used by the across-hosts test and the nemesis.
  #
  # The port messages of the nodes' OS processes come to the process that
  # started them; `watch/4` (or `role_line/3` in a receive loop of one's
  # own) folds their role lines into a view: the latest primary, the
  # epochs that had one and each node's latest role.

  alias Tachyon.Nemesis.{Member, NetNS}
  alias Tachyon.Sequencer.OSProcess

  @port 7100
  @bus {{239, 77, 0, 1}, 7101}

  defstruct [:prefix, :hosts, :node_names, :member_names, :group, :dir, :extra, :key_file]

  @doc """
  Creates the namespaces: `nodes` sequencer hosts and the member hosts
  named in `members` (strings); `{:ok, cluster}` or `{:error, why}`.
  `opts`: `:extra` (more `mix tachyon.sequencer` arguments for every node),
  `:auth` (`true`, the default: a group key file in `dir`, given to every
  node and member; `false`: `--no-auth`, no keys).
  """
  def up(prefix, nodes, members, dir, opts \\ []) do
    node_names = for i <- 1..nodes, do: "n#{i}"

    case NetNS.up(prefix, node_names ++ members) do
      {:ok, hosts} ->
        group = for n <- node_names, do: {hosts[n].ip, @port}
        File.mkdir_p!(dir)
        key_file = if Keyword.get(opts, :auth, true), do: make_key(dir)

        {:ok,
         %__MODULE__{
           prefix: prefix,
           hosts: hosts,
           node_names: node_names,
           member_names: members,
           group: group,
           dir: dir,
           extra: Keyword.get(opts, :extra, []),
           key_file: key_file
         }}

      error ->
        error
    end
  end

  # The group's key file, made once per cluster directory (nodes that
  # restart read the same one).
  defp make_key(dir) do
    path = Path.join(dir, "group.key")

    unless File.exists?(path) do
      {:ok, text} = Tachyon.Auth.generate()
      :ok = Tachyon.Auth.write_file(path, text)
    end

    path
  end

  @doc "Removes the namespaces."
  def down(c), do: NetNS.down(c.prefix, c.node_names ++ c.member_names)

  @doc "The multicast bus `{group_ip, port}`."
  def bus, do: @bus

  @doc "Node `id`'s (0-based) host: `%{ns, ip, link, ...}`."
  def node_host(c, id), do: c.hosts[Enum.at(c.node_names, id)]

  @doc "Node `id`'s log directory."
  def node_dir(c, id), do: Path.join(c.dir, "node#{id}")

  @doc "Node `id`'s address as \"ip:port\"."
  def node_address(c, id), do: hostport(Enum.at(c.group, id))

  @doc "The id of the node at address \"ip:port\" (nil if none)."
  def node_at(c, address), do: Enum.find_index(c.group, &(hostport(&1) == address))

  @doc """
  The `mix tachyon.sequencer` arguments of node `id`: with the group's
  addresses (`--group`), or, with `join: true`, a new node on an empty
  directory that joins through the other nodes (`--join`: docs/FAILOVER.md,
  "Replacing a host"), at the same address.
  """
  def node_args(c, id, eager, opts \\ []) do
    h = node_host(c, id)
    ip = ipstr(h.ip)
    {g, bus_port} = @bus

    others = for {a, i} <- Enum.with_index(c.group), i != id, do: hostport(a)

    group =
      if opts[:join],
        do: ["--join", Enum.join(others, ",")],
        else: ["--group", Enum.map_join(c.group, ",", &hostport/1)]

    ["--path", node_dir(c, id), "--ip", ip, "--port", "#{@port}"] ++
      group ++
      ["--bus", "multicast:#{ipstr(g)}:#{bus_port}", "--interface", ip, "--wait", "backoff"] ++
      if(eager, do: [], else: ["--no-eager"]) ++
      if(c.key_file, do: ["--key-file", c.key_file], else: ["--no-auth"]) ++ c.extra
  end

  @doc """
  Starts node `id` in its namespace and returns at once:
  `%{id, port, os_pid}` (its "ready" line comes later: `await_ready/2`).
  `opts`: as `node_args/4`.
  """
  def spawn_node(c, id, eager, opts \\ []) do
    code = "Mix.Tasks.Tachyon.Sequencer.run(#{inspect(node_args(c, id, eager, opts))})"
    OSProcess.spawn_elixir(code, netns: node_host(c, id).ns) |> Map.put(:id, id)
  end

  @doc """
  Waits for a node's ready line: `:ok` or `{:error, why}` (with its last
  lines of output).
  """
  def await_ready(node, timeout),
    do: await_ready(node, System.monotonic_time(:millisecond) + timeout, [])

  defp await_ready(%{port: port} = node, deadline, seen) do
    receive do
      {^port, {:data, {:eol, "tachyon.sequencer ready " <> _}}} ->
        :ok

      {^port, {:data, {_, line}}} ->
        await_ready(node, deadline, Enum.take([line | seen], 20))

      {^port, {:exit_status, st}} ->
        {:error, {:exit_status, st, Enum.reverse(seen)}}
    after
      max(0, deadline - System.monotonic_time(:millisecond)) ->
        {:error, {:timeout, Enum.reverse(seen)}}
    end
  end

  @doc """
  Starts every node (node 0 eager, the others not) and waits until one is
  primary: `{:ok, nodes, view}` or `{:error, why}`.
  """
  def start_nodes(c, timeout \\ 60_000) do
    nodes = for id <- 0..(length(c.node_names) - 1), do: spawn_node(c, id, id == 0)

    with :ok <- Enum.find(Enum.map(nodes, &await_ready(&1, timeout)), :ok, &(&1 != :ok)),
         {:ok, view} <- watch(nodes, new_view(), &(&1.primary != nil), timeout) do
      {:ok, nodes, view}
    else
      error ->
        Enum.each(nodes, &OSProcess.kill/1)
        error
    end
  end

  @doc "Starts a members' OS process in `host`'s namespace running `Member.run(cfg)`."
  def spawn_members(c, host, cfg) do
    h = c.hosts[host]
    cfg = Map.merge(%{group: c.group, bus: @bus, ip: h.ip, key_file: c.key_file}, cfg)
    File.mkdir_p!(cfg.dir)
    OSProcess.spawn_elixir(Member.code(cfg), netns: h.ns) |> Map.put(:cfg, cfg)
  end

  @doc """
  Waits for a line `prefix ID` from the members' process for every id of
  `ids` (its other lines are skipped): `:ok`, `{:error, line}` if a member
  crashed, or `{:error, {:timeout, ids_left}}`.
  """
  def await_members(%{port: port}, prefix, ids, timeout) do
    deadline = System.monotonic_time(:millisecond) + timeout
    await_members_until(port, prefix <> " ", MapSet.new(ids, &to_string/1), deadline, [])
  end

  defp await_members_until(port, prefix, left, deadline, seen) do
    if MapSet.size(left) == 0 do
      :ok
    else
      receive do
        {^port, {:data, {:eol, "member crashed " <> _ = line}}} ->
          {:error, line}

        {^port, {:data, {:eol, line}}} ->
          id = line |> String.replace_prefix(prefix, "") |> String.split(" ") |> hd()
          left = if String.starts_with?(line, prefix), do: MapSet.delete(left, id), else: left
          await_members_until(port, prefix, left, deadline, Enum.take([line | seen], 3))

        {^port, {:exit_status, st}} ->
          {:error, {:exit_status, st, MapSet.to_list(left), Enum.reverse(seen)}}
      after
        max(0, deadline - System.monotonic_time(:millisecond)) ->
          {:error, {:timeout, MapSet.to_list(left), Enum.reverse(seen)}}
      end
    end
  end

  @doc """
  Writes `content` to `path` whole (a temporary file renamed into place):
  the members poll for their signal files and read them at once.
  """
  def signal_file(path, content \\ "") do
    tmp = path <> ".tmp"
    File.write!(tmp, content)
    File.rename!(tmp, path)
  end

  # -- roles ----------------------------------------------------------------------

  @doc "An empty view of the group's roles."
  def new_view, do: %{primary: nil, epochs: MapSet.new(), roles: %{}, lines: []}

  @doc """
  Parses a role line: `{role, epoch, at_us}` (role a string) or nil.
  """
  def parse_role("tachyon.sequencer role " <> rest) do
    case String.split(rest, " ") do
      [role, "epoch", e, "leader", _, "next_seq", _, "commit", _, "at_us", t] ->
        {role, String.to_integer(e), String.to_integer(t)}

      _ ->
        nil
    end
  end

  def parse_role(_), do: nil

  @doc "Folds a line of node `id` into `view`."
  def role_line(view, id, line) do
    case parse_role(line) do
      nil ->
        view

      {role, epoch, at} ->
        view = %{
          view
          | roles: Map.put(view.roles, id, {role, epoch}),
            lines: [{id, role, epoch, at} | view.lines]
        }

        cond do
          role == "primary" ->
            primary =
              if view.primary == nil or elem(view.primary, 1) <= epoch,
                do: {id, epoch},
                else: view.primary

            %{view | primary: primary, epochs: MapSet.put(view.epochs, epoch)}

          match?({^id, _}, view.primary) ->
            %{view | primary: nil}

          true ->
            view
        end
    end
  end

  @doc """
  Receives the lines of `nodes` into `view` until `done.(view)` is true
  (`{:ok, view}`) or `timeout` ms pass (`{:error, :timeout}`; 0: only
  what is already there, then `{:ok, view}`).
  """
  def watch(nodes, view, done, timeout) do
    ports = Map.new(nodes, &{&1.port, &1.id})
    deadline = System.monotonic_time(:millisecond) + timeout
    watch_until(ports, view, done, deadline, timeout == 0)
  end

  defp watch_until(ports, view, done, deadline, drain) do
    if not drain and done.(view) do
      {:ok, view}
    else
      receive do
        {port, {:data, {:eol, line}}} when is_map_key(ports, port) ->
          watch_until(ports, role_line(view, ports[port], line), done, deadline, drain)
      after
        max(0, deadline - System.monotonic_time(:millisecond)) ->
          if drain, do: {:ok, view}, else: {:error, :timeout}
      end
    end
  end

  # -- logs ---------------------------------------------------------------------------

  @doc """
  A node's log as `[{index, entry}]` (read with a reader of its own, while
  the node may be running; retried if it is being truncated).
  """
  def log(dir, tries \\ 50) do
    {:ok, s} = Tachyon.Store.open(dir, access: :read)

    try do
      Tachyon.Store.stream(s) |> Enum.to_list()
    after
      Tachyon.Store.close(s)
    end
  rescue
    e ->
      if tries == 0, do: reraise(e, __STACKTRACE__)
      Process.sleep(50)
      log(dir, tries - 1)
  end

  @doc "The index a node's log appends next (nil if it cannot be read now)."
  def next_index(dir) do
    case Tachyon.Store.open(dir, access: :read) do
      {:ok, s} ->
        n = Tachyon.Store.next_index(s)
        Tachyon.Store.close(s)
        with {:ok, i} <- n, do: i, else: (_ -> nil)

      _ ->
        nil
    end
  end

  @doc """
  Waits until the logs in `dirs` have the same length, the same on two
  reads `settle` ms apart: `{:ok, next_index}` or `{:error, lengths}`.
  """
  def await_logs_settled(dirs, timeout, settle \\ 300) do
    deadline = System.monotonic_time(:millisecond) + timeout
    settled(dirs, nil, deadline, settle)
  end

  defp settled(dirs, prev, deadline, settle) do
    now = Enum.map(dirs, &next_index/1)

    cond do
      now == prev and length(Enum.uniq(now)) == 1 and hd(now) != nil ->
        {:ok, hd(now)}

      System.monotonic_time(:millisecond) > deadline ->
        {:error, now}

      true ->
        Process.sleep(settle)
        settled(dirs, now, deadline, settle)
    end
  end

  @doc """
  The messages of a log (control entries and state machine snapshots'
  messages left out: members see neither): `[{seq, member_id, data}]`.
  """
  def messages(log) do
    for {i,
         <<mid::little-32, _ms::little-64, flags, 0, len::little-16, _term::little-32,
           d::binary-size(len)>>} <- log,
        Bitwise.band(flags, 0x88) == 0,
        do: {i, mid, d}
  end

  @doc """
  The index of a log's first entry (retention removes the oldest; nil:
  empty).
  """
  def first_index([{i, _} | _]), do: i
  def first_index([]), do: nil

  @doc "The epochs whose records a log holds, in order."
  def epochs(log) do
    for {_, <<0::little-32, e::little-64, flags, _::binary>>} <- log,
        Bitwise.band(flags, 0xC0) == 0xC0,
        do: e
  end

  defp hostport({a, p}), do: "#{ipstr(a)}:#{p}"

  @doc "`{a, b, c, d}` as \"a.b.c.d\"."
  def ipstr({a, b, c, d}), do: "#{a}.#{b}.#{c}.#{d}"
end

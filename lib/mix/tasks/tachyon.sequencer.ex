defmodule Mix.Tasks.Tachyon.Sequencer do
  @shortdoc "Runs a Tachyon.Sequencer in this OS process until killed"
  @moduledoc """
  Runs one `Tachyon.Sequencer` in its own OS process (the way the seeds run
  CoralSequencer), until the process is stopped.

      mix tachyon.sequencer --port 7000 --path /var/lib/app/seq
      mix tachyon.sequencer --port 7000 --path DIR --bus multicast:239.1.2.3:7001 --wait busy_spin --core 1

  Options (named as the `Tachyon.Sequencer` options they set, `-` for
  `_`): `--port P` (0: any; the chosen one is printed), `--ip ADDR`,
  `--path DIR` (required), `--bus unicast | multicast:GROUP:PORT`,
  `--interface ADDR` (multicast), `--wait busy_spin|yield|backoff|park`,
  `--core N`, `--max-datagram-size BYTES`, `--no-batching`,
  `--heartbeat-ms MS`, `--heartbeat-after-us US`, `--group
  IP:PORT,IP:PORT,...` (every node's address, this one's included, the
  same list on every node), `--join IP:PORT[,IP:PORT]` (a new node of a
  running group, on an empty `--path`, instead of `--group`: see `:join`;
  give `--ip` and `--port`), `--election-timeout-ms MS`, `--two-nodes
  safe|available`, `--no-eager`, `--durability replicated|fsync`
  (`:durability`: what a node's acknowledgement promises, the same on
  every node of a group; `fsync`: committed messages are on the disk of a
  majority and survive the power loss of every host), `--segment-size
  BYTES` (of the log's segment files), `--retention-bytes N` and
  `--retention-age-ms N` (`:retention`: the log keeps about `N` bytes of
  segment files, or segments sealed at most `N` ms ago),
  `--stats-interval-ms MS` (print the stats every `MS`), `--key-file PATH`
  (the group's key file: every datagram sealed and checked,
  `Tachyon.Auth`; payloads encrypted, `--no-encrypt`: in the clear, authenticated only), `--no-auth` (no
  keys, on a network you trust: needed for an `--ip` that is not a
  loopback address when no key file is given), `--help` (`-h`: this text).

  The names the options had before the renaming (README.md, "One
  vocabulary") still work: `--max-datagram`, `--heartbeat`,
  `--heartbeat-after`, `--election-timeout`, `--stats-interval`.

      mix tachyon.gen_key /etc/app/group.key
      mix tachyon.sequencer --port 7000 --path DIR --durability fsync \\
        --key-file /etc/app/group.key --ip 10.0.0.1 \\
        --group 10.0.0.1:7000,10.0.0.2:7000,10.0.0.3:7000

  It prints `tachyon.sequencer ready IP:PORT session S next_seq N node I`
  once it listens, then `tachyon.sequencer role ROLE epoch E leader L
  next_seq N commit C at_us T` at every change of role or epoch, and
  `tachyon.sequencer event KIND KEY VALUE ... at_us T` for every event of
  the node as it happens (`learner reason new_disk`, `caught_up epoch E`,
  `voted epoch E candidate I`, `disk_full primary true`, `disk_space`,
  `campaign`, `role`, `truncated`: the `[:tachyon, :sequencer, KIND]`
  telemetry events and their measurements, see `Tachyon.Telemetry`);
  with `--stats-interval-ms MS`, `tachyon.sequencer stats KEY VALUE ...
  at_us T` (every counter of `Tachyon.Sequencer.stats/1`) every `MS`. `T` is
  the host's clock, `System.os_time(:microsecond)`, comparable between OS
  processes of one host.

  ## Commands on its standard input

  One a line (run the membership changes on the primary; docs/FAILOVER.md,
  "Replacing a host"):

    * `stats` prints a stats line at once (`Tachyon.Sequencer.stats/1`);
    * `membership` prints `tachyon.sequencer membership node_id I nodes
      ID:IP:PORT:voter|nonvoter,... at_us T` (`Tachyon.Sequencer.membership/1`);
    * `add_node IP:PORT`, `remove_node ID` or `remove_node IP:PORT` print
      `tachyon.sequencer change OP WHAT ok ID at_us T` once the change is
      committed, or `tachyon.sequencer change OP WHAT error REASON [LEADER]
      at_us T` (`Tachyon.Sequencer.add_node/3`, `remove_node/3`; on a
      follower `error not_primary IP:PORT`, the primary's address).

  Any other line prints `tachyon.sequencer error unknown command "LINE": the
  commands are ...`; an empty line is ignored. When its standard input
  closes (`< /dev/null`, `nohup`, the end of a pipe) it prints
  `tachyon.sequencer stdin closed: ...` and the node keeps running, until
  the process is stopped (a signal).
  """
  use Mix.Task

  alias Tachyon.Sequencer.StdinReader

  @commands "stats, membership, add_node IP:PORT, remove_node ID|IP:PORT"

  @switches [
    port: :integer,
    ip: :string,
    path: :string,
    bus: :string,
    interface: :string,
    wait: :string,
    core: :integer,
    max_datagram_size: :integer,
    batching: :boolean,
    heartbeat_ms: :integer,
    heartbeat_after_us: :integer,
    group: :string,
    join: :string,
    election_timeout_ms: :integer,
    two_nodes: :string,
    eager: :boolean,
    durability: :string,
    segment_size: :integer,
    retention_bytes: :integer,
    retention_age_ms: :integer,
    stats_interval_ms: :integer,
    key_file: :string,
    encrypt: :boolean,
    auth: :boolean,
    help: :boolean
  ]

  # The flags' names before the renaming (README.md, "One vocabulary"),
  # still taken: `{old, new}`.
  @formerly [
    max_datagram: :max_datagram_size,
    heartbeat: :heartbeat_ms,
    heartbeat_after: :heartbeat_after_us,
    election_timeout: :election_timeout_ms,
    stats_interval: :stats_interval_ms
  ]

  @formerly_switches for {old, new} <- @formerly, do: {old, Keyword.fetch!(@switches, new)}

  defp auth(opts) do
    cond do
      opts[:key_file] -> [key_file: opts[:key_file], encrypt: Keyword.get(opts, :encrypt, true)]
      opts[:auth] == false -> :none
      true -> nil
    end
  end

  @impl true
  def run(args) do
    case options(args) do
      :help ->
        Mix.shell().info(Mix.Task.moduledoc(__MODULE__))

      {seq_opts, stats_ms} ->
        Application.ensure_all_started(:tachyon)
        # The operator's commands, queued from now on (a join may take a while).
        Process.register(self(), StdinReader.target_name())
        StdinReader.ensure_started(:continue)
        start([stats_interval_ms: nil, events_to: self()] ++ seq_opts, stats_ms)
    end
  end

  @doc """
  The `Tachyon.Sequencer.start_link/1` options of a command line, with
  the milliseconds between its stats lines (`--stats-interval-ms`, `nil`:
  none): `{opts, stats_ms}`; `:help` for `--help` or `-h` anywhere on it.
  Raises `Mix.Error` for a bad or missing one.

  ## Example

      {[path: "/tmp/seq", port: 7000, heartbeat_ms: 5], nil} =
        Mix.Tasks.Tachyon.Sequencer.options(~w(--path /tmp/seq --port 7000 --heartbeat-ms 5))
  """
  @spec options([String.t()]) :: :help | {keyword(), pos_integer() | nil}
  def options(args) do
    {opts, _, bad} =
      OptionParser.parse(args, strict: @switches ++ @formerly_switches, aliases: [h: :help])

    cond do
      opts[:help] ->
        :help

      bad != [] ->
        Mix.raise(
          "unknown or bad options: #{inspect(bad)} (the options: mix tachyon.sequencer --help)"
        )

      true ->
        opts = renamed(opts)
        {sequencer_options(opts), opts[:stats_interval_ms]}
    end
  end

  defp renamed(opts) do
    Enum.reduce(@formerly, opts, fn {old, new}, opts ->
      case Keyword.pop(opts, old) do
        {nil, opts} ->
          opts

        {value, opts} ->
          if Keyword.has_key?(opts, new),
            do: Mix.raise("give #{flag(new)} only (#{flag(old)} is its former name)")

          Keyword.put(opts, new, value)
      end
    end)
  end

  defp flag(key), do: "--" <> String.replace(Atom.to_string(key), "_", "-")

  defp sequencer_options(opts) do
    path = opts[:path] || Mix.raise("--path DIR is required")

    [path: path, port: opts[:port] || 0]
    |> put(:ip, opts[:ip])
    |> put(:wait, opts[:wait] && String.to_atom(opts[:wait]))
    |> put(:core, opts[:core])
    |> put(:max_datagram_size, opts[:max_datagram_size])
    |> put(:batching, opts[:batching])
    |> put(:heartbeat_ms, opts[:heartbeat_ms])
    |> put(:heartbeat_after_us, opts[:heartbeat_after_us])
    |> put(:group, opts[:group] && Enum.map(String.split(opts[:group], ","), &address/1))
    |> put(:join, opts[:join] && String.split(opts[:join], ","))
    |> put(:election_timeout_ms, opts[:election_timeout_ms])
    |> put(:two_nodes, opts[:two_nodes] && String.to_atom(opts[:two_nodes]))
    |> put(:eager, opts[:eager])
    |> put(:durability, opts[:durability] && durability(opts[:durability]))
    |> put(:segment_size, opts[:segment_size])
    |> put(:retention, retention(opts[:retention_bytes], opts[:retention_age_ms]))
    |> put(:bus, bus(opts[:bus], opts[:interface]))
    |> put(:auth, auth(opts))
  end

  defp start(seq_opts, stats_ms) do
    {:ok, seq} = Tachyon.Sequencer.start_link(seq_opts)
    # (A group of one is primary, its session known, when start_link returns.)
    %{address: {ip, port}, session: s, next_seq: n} = info = Tachyon.Sequencer.info(seq)

    IO.puts(
      "tachyon.sequencer ready #{:inet.ntoa(ip)}:#{port} session #{s || 0} next_seq #{n} node #{info.node_id || -1}"
    )

    now = System.monotonic_time(:millisecond)
    watch(%{seq: seq, role: nil, stats_ms: stats_ms, stats_at: now})
  end

  # Prints the node's events as they come, and a role line at every change
  # of role or epoch (the stats polled every millisecond: the line is for
  # tests and benchmarks that watch the OS process; in-VM users get
  # telemetry), and the stats every --stats-interval-ms.
  defp watch(%{seq: seq} = w) do
    w =
      receive do
        {:tachyon_sequencer_event, ^seq, kind, fields} ->
          IO.puts("tachyon.sequencer event #{kind}#{pairs(fields)} at_us #{now_us()}")
          w

        {:stdin, :eof} ->
          IO.puts(
            "tachyon.sequencer stdin closed: no more commands are read; the node keeps running"
          )

          w

        {:stdin, line} ->
          command(w.seq, String.split(line))
          w
      after
        1 -> poll(w)
      end

    watch(w)
  end

  # A line of the standard input (split on whitespace).
  defp command(_seq, []), do: :ok
  defp command(seq, ["stats"]), do: print_stats(seq)
  defp command(seq, ["membership"]), do: print_membership(seq)

  defp command(seq, ["add_node", addr]),
    do: change(seq, "add_node", addr, &Tachyon.Sequencer.add_node(&1, addr))

  defp command(seq, ["remove_node", which]) do
    node = if which =~ ~r/^[0-9]+$/, do: String.to_integer(which), else: which
    change(seq, "remove_node", which, &Tachyon.Sequencer.remove_node(&1, node))
  end

  defp command(_seq, words) do
    IO.puts(
      "tachyon.sequencer error unknown command #{inspect(Enum.join(words, " "))}: " <>
        "the commands are #{@commands} at_us #{now_us()}"
    )
  end

  defp poll(w) do
    case Tachyon.Sequencer.stats(w.seq) do
      {:ok, st} ->
        if {st.role, st.epoch} != w.role do
          IO.puts(
            "tachyon.sequencer role #{st.role} epoch #{st.epoch} leader #{st.leader || -1} " <>
              "next_seq #{st.next_seq} commit #{st.commit} at_us #{now_us()}"
          )
        end

        now = System.monotonic_time(:millisecond)

        if w.stats_ms && now >= w.stats_at do
          print_stats(st)
          %{w | role: {st.role, st.epoch}, stats_at: now + w.stats_ms}
        else
          %{w | role: {st.role, st.epoch}}
        end

      _ ->
        w
    end
  end

  defp print_stats(%{} = st), do: IO.puts("tachyon.sequencer stats#{pairs(st)} at_us #{now_us()}")

  defp print_stats(seq) do
    with {:ok, st} <- Tachyon.Sequencer.stats(seq), do: print_stats(st)
  end

  defp now_us, do: System.os_time(:microsecond)

  # A change waits for its commit (on a dirty scheduler): in a process of
  # its own, so that the events go on being printed meanwhile.
  defp change(seq, op, what, fun) do
    spawn(fn ->
      result =
        try do
          case fun.(seq) do
            {:ok, id} -> "ok #{id}"
            {:error, {:not_primary, leader}} -> "error not_primary #{hostport(leader)}"
            {:error, reason} -> "error #{reason}"
          end
        rescue
          e in ArgumentError -> "error badarg #{inspect(Exception.message(e))}"
        end

      IO.puts("tachyon.sequencer change #{op} #{what} #{result} at_us #{now_us()}")
    end)
  end

  defp print_membership(seq) do
    with {:ok, %{node_id: me, nodes: nodes}} <- Tachyon.Sequencer.membership(seq) do
      list =
        Enum.map_join(nodes, ",", fn n ->
          "#{n.id}:#{hostport(n.address)}:#{if n.voter, do: "voter", else: "nonvoter"}"
        end)

      IO.puts("tachyon.sequencer membership node_id #{me || -1} nodes #{list} at_us #{now_us()}")
    end
  end

  defp hostport(nil), do: "nil"
  defp hostport({ip, port}), do: "#{:inet.ntoa(ip)}:#{port}"

  # " key value key value ...", keys sorted.
  defp pairs(map) do
    map |> Enum.sort() |> Enum.map_join(fn {k, v} -> " #{k} #{value(v)}" end)
  end

  defp value(nil), do: "nil"
  defp value(v), do: to_string(v)

  defp durability(d) when d in ["replicated", "fsync"], do: String.to_atom(d)
  defp durability(d), do: Mix.raise("--durability must be replicated or fsync, got #{d}")

  defp address(s) do
    [host, port] = String.split(s, ":")
    {:ok, ip} = :inet.parse_address(String.to_charlist(host))
    {ip, String.to_integer(port)}
  end

  defp retention(nil, nil), do: nil
  defp retention(bytes, age_ms), do: [max_bytes: bytes, max_age_ms: age_ms]

  defp put(kw, _k, nil), do: kw
  defp put(kw, k, v), do: kw ++ [{k, v}]

  defp bus(nil, _), do: nil
  defp bus("unicast", _), do: :unicast

  defp bus("multicast:" <> rest, iface) do
    [group, port] = String.split(rest, ":")
    {:ok, g} = :inet.parse_ipv4_address(String.to_charlist(group))
    {:multicast, {g, String.to_integer(port)}, interface: iface || :any}
  end

  defp bus(other, _), do: Mix.raise("--bus must be unicast or multicast:GROUP:PORT, got #{other}")
end

defmodule Mix.Tasks.Tachyon.Sequencer do
  @shortdoc "Runs a Tachyon.Sequencer in this OS process until killed"
  @moduledoc """
  Runs one `Tachyon.Sequencer` in its own OS process (the way the seeds run
  CoralSequencer), until the process is stopped.

      mix tachyon.sequencer --port 7000 --path /var/lib/app/seq
      mix tachyon.sequencer --port 7000 --path DIR --bus multicast:239.1.2.3:7001 --wait busy_spin --core 1

  Options: `--port P` (0: any; the chosen one is printed), `--ip ADDR`,
  `--path DIR` (required), `--bus unicast | multicast:GROUP:PORT`,
  `--interface ADDR` (multicast), `--wait busy_spin|yield|backoff|park`,
  `--core N`, `--max-datagram BYTES`, `--no-batching`, `--heartbeat MS`,
  `--heartbeat-after US`, `--group IP:PORT,IP:PORT,...` (every node's
  address, this one's included, the same list on every node),
  `--election-timeout MS`, `--two-nodes safe|available`, `--no-eager`,
  `--durability replicated|fsync`.

  It prints `tachyon.sequencer ready IP:PORT session S next_seq N node I`
  once it listens, then `tachyon.sequencer role ROLE epoch E leader L
  next_seq N commit C at_us T` at every change of role or epoch (`T`: the
  host's clock, `System.os_time(:microsecond)`, comparable between OS
  processes of one host). A line `stats` on its standard input (from
  `Tachyon.Sequencer.OSProcess.stats/2`) prints `tachyon.sequencer stats
  KEY=VALUE ...`: the node's `Tachyon.Sequencer.stats/1`, its numbers.
  """
  use Mix.Task

  @switches [
    port: :integer,
    ip: :string,
    path: :string,
    bus: :string,
    interface: :string,
    wait: :string,
    core: :integer,
    max_datagram: :integer,
    batching: :boolean,
    heartbeat: :integer,
    heartbeat_after: :integer,
    group: :string,
    election_timeout: :integer,
    two_nodes: :string,
    eager: :boolean,
    durability: :string
  ]

  @impl true
  def run(args) do
    {opts, _, bad} = OptionParser.parse(args, strict: @switches)
    if bad != [], do: Mix.raise("unknown or bad options: #{inspect(bad)}")
    path = opts[:path] || Mix.raise("--path DIR is required")
    Application.ensure_all_started(:tachyon)

    seq_opts =
      [path: path, port: opts[:port] || 0, stats_interval_ms: nil]
      |> put(:ip, opts[:ip])
      |> put(:wait, opts[:wait] && String.to_atom(opts[:wait]))
      |> put(:core, opts[:core])
      |> put(:max_datagram_size, opts[:max_datagram])
      |> put(:batching, opts[:batching])
      |> put(:heartbeat_ms, opts[:heartbeat])
      |> put(:heartbeat_after_us, opts[:heartbeat_after])
      |> put(:group, opts[:group] && Enum.map(String.split(opts[:group], ","), &address/1))
      |> put(:election_timeout_ms, opts[:election_timeout])
      |> put(:two_nodes, opts[:two_nodes] && String.to_atom(opts[:two_nodes]))
      |> put(:eager, opts[:eager])
      |> put(:durability, opts[:durability] && durability(opts[:durability]))
      |> put(:bus, bus(opts[:bus], opts[:interface]))

    {:ok, seq} = Tachyon.Sequencer.start_link(seq_opts)
    # (A group of one is primary, its session known, when start_link returns.)
    %{address: {ip, port}, session: s, next_seq: n} = info = Tachyon.Sequencer.info(seq)

    IO.puts(
      "tachyon.sequencer ready #{:inet.ntoa(ip)}:#{port} session #{s || 0} next_seq #{n} node #{info.node_id}"
    )

    Process.register(self(), Tachyon.Sequencer.OSProcess.stdin_name())
    report_roles(seq, nil)
  end

  # One line per change of role or epoch (polled: the line is for tests and
  # benchmarks that watch the OS process; in-VM users get telemetry).
  defp report_roles(seq, last) do
    now =
      case Tachyon.Sequencer.stats(seq) do
        {:ok, st} ->
          now = {st.role, st.epoch}

          if now != last do
            IO.puts(
              "tachyon.sequencer role #{st.role} epoch #{st.epoch} leader #{st.leader || -1} " <>
                "next_seq #{st.next_seq} commit #{st.commit} at_us #{System.os_time(:microsecond)}"
            )
          end

          now

        _ ->
          last
      end

    receive do
      {:stdin, "stats"} -> print_stats(seq)
    after
      1 -> :ok
    end

    report_roles(seq, now)
  end

  defp print_stats(seq) do
    {:ok, st} = Tachyon.Sequencer.stats(seq)
    pairs = for {k, v} <- Enum.sort(st), is_integer(v), do: "#{k}=#{v}"
    IO.puts("tachyon.sequencer stats " <> Enum.join(pairs, " "))
  end

  defp durability(d) when d in ["replicated", "fsync"], do: String.to_atom(d)
  defp durability(d), do: Mix.raise("--durability must be replicated or fsync, got #{d}")

  defp address(s) do
    [host, port] = String.split(s, ":")
    {:ok, ip} = :inet.parse_address(String.to_charlist(host))
    {ip, String.to_integer(port)}
  end

  defp put(kw, _k, nil), do: kw
  defp put(kw, k, v), do: Keyword.put(kw, k, v)

  defp bus(nil, _), do: nil
  defp bus("unicast", _), do: :unicast

  defp bus("multicast:" <> rest, iface) do
    [group, port] = String.split(rest, ":")
    {:ok, g} = :inet.parse_ipv4_address(String.to_charlist(group))
    {:multicast, {g, String.to_integer(port)}, interface: iface || :any}
  end

  defp bus(other, _), do: Mix.raise("--bus must be unicast or multicast:GROUP:PORT, got #{other}")
end

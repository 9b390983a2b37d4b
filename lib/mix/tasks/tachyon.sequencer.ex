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
  `--heartbeat-after US`, `--role primary|standby`, `--primary IP:PORT`
  (standby), `--takeover-after MS`. A standby prints `tachyon.sequencer took
  over IP:PORT epoch E next_seq N takeover_us T` when it takes over.
  It prints `tachyon.sequencer ready ip:port session S next_seq N` once
  it listens.
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
    role: :string,
    primary: :string,
    takeover_after: :integer
  ]

  @impl true
  def run(args) do
    {opts, _, bad} = OptionParser.parse(args, strict: @switches)
    if bad != [], do: Mix.raise("unknown or bad options: #{inspect(bad)}")
    path = opts[:path] || Mix.raise("--path DIR is required")
    Application.ensure_all_started(:tachyon)

    seq_opts =
      [path: path, port: opts[:port] || 0, stats_interval: nil]
      |> put(:ip, opts[:ip])
      |> put(:wait, opts[:wait] && String.to_atom(opts[:wait]))
      |> put(:core, opts[:core])
      |> put(:max_datagram, opts[:max_datagram])
      |> put(:batching, opts[:batching])
      |> put(:heartbeat, opts[:heartbeat])
      |> put(:heartbeat_after, opts[:heartbeat_after])
      |> put(:role, opts[:role] && String.to_atom(opts[:role]))
      |> put(:primary, opts[:primary] && address(opts[:primary]))
      |> put(:takeover_after, opts[:takeover_after])
      |> put(:bus, bus(opts[:bus], opts[:interface]))

    {:ok, seq} = Tachyon.Sequencer.start_link(seq_opts)
    %{address: {ip, port}, session: s, next_seq: n, role: role} = Tachyon.Sequencer.info(seq)

    IO.puts(
      "tachyon.sequencer ready #{:inet.ntoa(ip)}:#{port} session #{s || 0} next_seq #{n} role #{role}"
    )

    if role == :standby, do: report_takeover(seq, false)
    Process.sleep(:infinity)
  end

  # A standby prints one line when it follows its primary, one when it
  # takes over.
  defp report_takeover(seq, following?) do
    Process.sleep(5)

    following? =
      following? or
        case Tachyon.Sequencer.stats(seq) do
          {:ok, %{following: true, next_seq: n}} ->
            IO.puts("tachyon.sequencer following next_seq #{n}")
            true

          _ ->
            false
        end

    case Tachyon.Sequencer.info(seq) do
      %{role: :primary, address: {ip, port}, epoch: e} ->
        {:ok, st} = Tachyon.Sequencer.stats(seq)

        IO.puts(
          "tachyon.sequencer took over #{:inet.ntoa(ip)}:#{port} epoch #{e} next_seq #{st.next_seq} " <>
            "takeover_us #{div(st.takeover_ns, 1000)}"
        )

      _ ->
        report_takeover(seq, following?)
    end
  end

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

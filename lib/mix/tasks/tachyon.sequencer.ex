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
  `--heartbeat-after US`.
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
    heartbeat_after: :integer
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
      |> put(:bus, bus(opts[:bus], opts[:interface]))

    {:ok, seq} = Tachyon.Sequencer.start_link(seq_opts)
    %{address: {ip, port}, session: s, next_seq: n} = Tachyon.Sequencer.info(seq)
    IO.puts("tachyon.sequencer ready #{:inet.ntoa(ip)}:#{port} session #{s} next_seq #{n}")
    Process.sleep(:infinity)
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

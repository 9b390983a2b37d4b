defmodule Mix.Tasks.Tachyon.Soak do
  @shortdoc "Runs the sequencer group for minutes with retention, snapshot joins, host replacements and faults"
  @moduledoc """
  A soak (issue 29; root: network namespaces, as `mix tachyon.nemesis`):
  the nemesis's group of three sequencer nodes and three members, for
  `--minutes`, with the nodes' retention on (`--retention-bytes`, segments
  of `--segment-size`), the members publishing at a fixed rate and writing
  to replicated tables that publish snapshots, a new member joining from
  the latest snapshot every minute (it must catch up with the log's end,
  and what it delivered is checked), a node's host replaced every
  `--replace-every` minutes (kill -9, removed through a survivor, a new
  disk joins at the same address: docs/FAILOVER.md, "Replacing a host"),
  and the nemesis's faults throughout (kill -9, SIGSTOP, a link cut, a
  lossy link).

  Every minute it prints a row: the log's bytes on disk per node, the RSS
  and open file descriptors of every node's and members' OS process, the
  messages delivered a second (per member), the longest gap between a
  member's deliveries in that minute, the checks run and violated so far
  (the logs agree where they overlap; every member delivered the log's
  messages in order, no gap, from where it started), the replacements and
  joins done. At the end: the nemesis's full check, a summary (the most
  log bytes per node against the retention, RSS and fd drift from minute
  5 on, violations, replacements and joins done), `soak.csv` and
  `soak.svg` in `--out`; exit status 1 if anything failed.

      mix tachyon.soak --minutes 30
      mix tachyon.soak --minutes 3 --replace-every 1 --out /tmp/soak

  Options: `--minutes N` (30), `--seed N` (random; the faults' schedule),
  `--rate N` (messages a second per member, 200), `--retention-bytes N`
  (16 MiB: at the default rate, about 2.2 MB of log a minute, computed
  from docs/FORMAT.md at about 44 bytes a message and 70 a table write,
  the log passes it after about 8 minutes and a segment is trimmed
  every 2 minutes or so from then on; the report prints each node's
  first and last index at the end), `--segment-size N` (4 MiB), `--replace-every M`
  (minutes, 5), `--snapshot-every N` (table writes, 1000), `--durability
  fsync|replicated`, `--out DIR` (`soak`).
  """
  use Mix.Task

  @switches [
    minutes: :integer,
    seed: :integer,
    rate: :integer,
    retention_bytes: :integer,
    segment_size: :integer,
    replace_every: :integer,
    snapshot_every: :integer,
    durability: :string,
    out: :string,
    help: :boolean
  ]

  @impl true
  def run(args) do
    {opts, _, bad} = OptionParser.parse(args, strict: @switches)
    if bad != [], do: Mix.raise("unknown or bad options: #{inspect(bad)}")

    if opts[:help] do
      Mix.shell().info(@moduledoc)
    else
      soak(Keyword.delete(opts, :help))
    end
  end

  defp soak(opts) do
    if opts[:durability] not in [nil, "fsync", "replicated"],
      do: Mix.raise("--durability must be fsync or replicated, got #{opts[:durability]}")

    for k <- [:minutes, :rate, :retention_bytes, :segment_size, :replace_every, :snapshot_every],
        opts[k] != nil and opts[k] < 1,
        do: Mix.raise("--#{String.replace("#{k}", "_", "-")} must be at least 1")

    Mix.Task.run("app.start")

    case Tachyon.Nemesis.Soak.run(opts) do
      {:ok, %{ok: true}} ->
        :ok

      {:ok, _} ->
        exit({:shutdown, 1})

      {:error, why} ->
        Mix.raise("cannot create network namespaces here (#{why}): the soak needs root and ip")
    end
  end
end

defmodule Mix.Tasks.Tachyon.Nemesis do
  @shortdoc "Runs the sequencer group under faults across network namespaces and checks the bus"
  @moduledoc """
  A nemesis test across hosts on one machine (root; network namespaces):
  three sequencer nodes and three members, each in a namespace of its
  own, the members publishing throughout (and writing to replicated
  tables); every 1-2 s a random fault on a random node or link: kill -9
  (restarted a little later on its log), SIGSTOP then SIGCONT after
  100-800 ms, a link cut then healed, a lossy link (`tc`), or a host
  replaced (kill -9, removed from the group through a survivor, its
  directory wiped, a new node at the same address with `--join`: done
  once it is a voter and caught up, its time printed; one at a time;
  docs/FAILOVER.md, "Replacing a host"). Then
  everything is healed and checked: every member's delivered sequence is
  the one order and all converge to it; every delivered message is in
  every node's final log; each sender's messages in order, none twice;
  every acknowledged publish delivered; no forks; the replicated tables
  equal.

      mix tachyon.nemesis
      mix tachyon.nemesis --seconds 120 --seed 42 --rate 1000
      mix tachyon.nemesis --durability fsync

  Options: `--seconds S` (60), `--seed N` (random; printed: the same
  seed draws the same fault schedule), `--rate N` (messages a second per
  member, 500), `--election-timeout MS` (the nodes'), `--durability
  fsync|replicated` (the nodes' `durability:`, as `mix tachyon.sequencer`
  takes it; default `replicated`), `--no-auth` (no keys: by default a
  group key is made in the directory and every node and member holds
  it), `--no-loss`, `--no-replace`,
  `--no-tables`, `--dir DIR` and `--keep` (keep the logs and results).
  Exits with status 1 on any violation.
  """
  use Mix.Task

  @switches [
    seconds: :integer,
    seed: :integer,
    rate: :integer,
    election_timeout: :integer,
    durability: :string,
    loss: :boolean,
    auth: :boolean,
    replace: :boolean,
    tables: :boolean,
    dir: :string,
    keep: :boolean
  ]

  @impl true
  def run(args) do
    {opts, _, bad} = OptionParser.parse(args, strict: @switches)
    if bad != [], do: Mix.raise("unknown or bad options: #{inspect(bad)}")

    if opts[:durability] not in [nil, "fsync", "replicated"],
      do: Mix.raise("--durability must be fsync or replicated, got #{opts[:durability]}")

    Mix.Task.run("app.start")

    case Tachyon.Nemesis.run(opts) do
      {:ok, report} ->
        IO.puts("")
        Enum.each(Tachyon.Nemesis.format(report), &IO.puts/1)
        if report.violations != [], do: exit({:shutdown, 1})

      {:error, why} ->
        Mix.raise("cannot create network namespaces here (#{why}): the nemesis needs root and ip")
    end
  end
end

defmodule Mix.Tasks.Tachyon.Bench do
  @shortdoc "Runs Tachyon's latency benchmarks (store, async, echo, table, sequencer)"
  @moduledoc """
  Runs Tachyon's benchmarks and prints latency percentiles in the format of the
  systems Tachyon is modelled on, each case side by side with the BEAM's own
  alternatives and a pure-Rust floor.

      mix tachyon.bench                 # every part, default sizes (about 3 minutes on 2 idle cores)
      mix tachyon.bench store           # one part
      mix tachyon.bench store --messages 1000000 --warmup 100000 --size 256 --json store.json
      mix tachyon.bench store --quick   # CI-sized
      mix tachyon.bench --help          # every part and option, with defaults

  Parts: `store`, `async`, `echo`, `table`, `sequencer`. Common options:

    * `--messages N` - measured messages (round trips, operations)
    * `--warmup N` - messages run first and not measured
    * `--size BYTES` - message size
    * `--json PATH` - also write the results as JSON (with no part named,
      `PATH` is a directory and each part writes `PATH/<part>.json`)
    * `--quick` - small CI-sized run
    * `--dir PATH` - where temporary files go (default: the system tmp dir)
    * `--plot DIR` - also write the run's percentile plot (SVG, every case
      as an HdrHistogram-style curve) into `DIR`, and `DIR/index.html`
      showing every run's plot there next to its summary table

  `mix tachyon.bench --summary DIR` runs nothing: it prints, as Markdown,
  one summary table per part (Tachyon, its peers and its floor, with
  ratios, the machine and the command) from the JSON files a run wrote with
  `--json DIR`, and links the plots `--plot DIR` wrote there. That is how
  the tables of docs/BENCHMARKS.md are made.

  Each part has options of its own, and goals set for a full run (for
  `store`, `--messages 1000000`): a full run says whether each goal is met;
  a shorter one shows the figures for reference. `mix tachyon.bench --help`
  lists them all. A misspelled part or option stops the task before it runs
  anything, with a suggestion.
  """
  use Mix.Task

  alias Tachyon.Bench.CLI

  @benches [
    {"store", Tachyon.Bench.Store},
    {"async", Tachyon.Bench.Async},
    {"echo", Tachyon.Bench.Echo},
    {"table", Tachyon.Bench.Table},
    {"sequencer", Tachyon.Bench.Sequencer}
  ]

  @doc false
  def benches, do: @benches

  @impl true
  def run(argv) do
    case plan(argv) do
      :help ->
        IO.write(CLI.usage(specs()))

      {:summary, dir} ->
        IO.write(Tachyon.Bench.Summary.markdown(dir))

      {:error, message} ->
        Mix.raise(message)

      {:run, part, rest, plot_dir} ->
        command = Enum.join(["mix tachyon.bench" | argv], " ")
        Mix.Task.run("app.start")
        Tachyon.Bench.Report.put_command(command)
        run_parts(part, rest, plot_dir, command)
    end
  end

  @doc false
  # What argv asks for, checked before anything runs: :help, {:summary,
  # dir}, {:error, message} or {:run, part | nil, argv of the part, plot dir}.
  def plan(argv) do
    {plot_dir, argv_rest} = pop_opt(argv, "--plot")
    {summary_dir, argv_rest} = pop_opt(argv_rest, "--summary")

    cond do
      Enum.any?(argv, &(&1 in ["--help", "-h", "help"])) ->
        :help

      "--summary" in argv and summary_dir in [nil, ""] ->
        {:error, "--summary expects a directory (where a run wrote its JSON with --json DIR)"}

      summary_dir != nil ->
        if File.dir?(summary_dir),
          do: {:summary, summary_dir},
          else: {:error, "--summary DIR: #{inspect(summary_dir)} is not a directory"}

      "--plot" in argv and plot_dir in [nil, ""] ->
        {:error, "--plot expects a directory"}

      true ->
        plan_run(argv_rest, plot_dir)
    end
  end

  defp plan_run([name | rest], plot_dir) when binary_part(name, 0, 1) != "-" do
    case List.keyfind(@benches, name, 0) do
      {^name, mod} ->
        with :ok <- CLI.check(rest, mod.spec(), specs()), do: {:run, name, rest, plot_dir}

      nil ->
        {:error,
         "unknown part #{inspect(name)}" <>
           CLI.did_you_mean(name, Enum.map(@benches, &elem(&1, 0))) <>
           "\n(mix tachyon.bench --help lists every part and option)"}
    end
  end

  defp plan_run(rest, plot_dir) do
    with :ok <- CLI.check(rest, nil, specs()), do: {:run, nil, rest, plot_dir}
  end

  defp specs, do: Enum.map(@benches, fn {_, mod} -> mod.spec() end)

  defp run_parts(nil, rest, plot_dir, command) do
    {json_dir, rest} = pop_opt(rest, "--json")

    for {name, mod} <- @benches do
      IO.puts("\n##### mix tachyon.bench #{name}")
      json = if json_dir, do: ["--json", Path.join(json_dir, "#{name}.json")], else: []
      (rest ++ json) |> mod.run() |> plot(plot_dir, name, command)
    end
  end

  defp run_parts(name, rest, plot_dir, command) do
    {^name, mod} = List.keyfind(@benches, name, 0)
    # The failover run's plot is named as its JSON's bench is.
    plot_name = if "--failover" in rest, do: "failover", else: name
    rest |> mod.run() |> plot(plot_dir, plot_name, command)
  end

  defp plot(cases, nil, _name, _command), do: cases

  defp plot(cases, dir, name, command) when is_list(cases) do
    Tachyon.Bench.Plot.write(dir, name, cases, command)
    cases
  end

  defp plot(other, _dir, _name, _command), do: other

  defp pop_opt(argv, flag) do
    case Enum.find_index(argv, &(&1 == flag)) do
      nil -> {nil, argv}
      i -> {Enum.at(argv, i + 1), List.delete_at(List.delete_at(argv, i), i)}
    end
  end
end

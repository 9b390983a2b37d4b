defmodule Mix.Tasks.Tachyon.Bench do
  @shortdoc "Runs Tachyon's latency benchmarks (store, async, echo, table, ...)"
  @moduledoc """
  Runs Tachyon's benchmarks and prints latency percentiles in the format of the
  systems Tachyon is modelled on, each case side by side with the BEAM's own
  alternatives and a pure-Rust floor.

      mix tachyon.bench                 # every benchmark, short default mode
      mix tachyon.bench store           # one benchmark
      mix tachyon.bench store --messages 1000000 --warmup 100000 --size 256 --json store.json
      mix tachyon.bench store --quick   # CI-sized

  Common options:

    * `--messages N` - measured messages (round trips, operations)
    * `--warmup N` - messages run first and discarded
    * `--size BYTES` - message size
    * `--json PATH` - also write the results as JSON (with no bench name,
      `PATH` is a directory and each bench writes `PATH/<bench>.json`)
    * `--quick` - small CI-sized run
    * `--dir PATH` - where temporary files go (default: the system tmp dir)
    * `--plot DIR` - also write the run's percentile plot (SVG, every case
      as an HdrHistogram-style curve) into `DIR`, and `DIR/index.html`
      showing every run's plot there next to its summary table

  Benchmarks: #{Enum.map_join(["store", "async", "echo", "table", "sequencer"], ", ", &"`#{&1}`")}. Each bench documents its
  own extra options in its module (`Tachyon.Bench.Store`, `Tachyon.Bench.Table`, ...).
  """
  use Mix.Task

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
    Mix.Task.run("app.start")

    {plot_dir, argv_rest} = pop_opt(argv, "--plot")
    command = Enum.join(["mix tachyon.bench" | argv], " ")

    case argv_rest do
      [name | rest] when is_binary(name) and binary_part(name, 0, 1) != "-" ->
        case List.keyfind(@benches, name, 0) do
          {^name, mod} ->
            rest |> mod.run() |> plot(plot_dir, name, command)

          nil ->
            Mix.raise(
              "unknown bench #{inspect(name)}; known: #{Enum.map_join(@benches, ", ", &elem(&1, 0))}"
            )
        end

      rest ->
        {json_dir, rest} = pop_opt(rest, "--json")

        for {name, mod} <- @benches do
          IO.puts("\n##### mix tachyon.bench #{name}")
          json = if json_dir, do: ["--json", Path.join(json_dir, "#{name}.json")], else: []
          (rest ++ json) |> mod.run() |> plot(plot_dir, name, command)
        end
    end
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

defmodule Tachyon.Bench.CLI do
  @moduledoc false
  # The command line of `mix tachyon.bench`: the options every part takes,
  # each part's own (from its `spec/0`), parsing with defaults, the usage
  # text of `--help`, and "did you mean" suggestions for a misspelled part,
  # option or case. Nothing here runs a benchmark.
  #
  # A part's spec/0 returns:
  #
  #   %{
  #     name: "store",
  #     summary: "one line: what it measures",
  #     cases: ["case", ...] | nil,
  #     options: [{key, type, arg_placeholder | nil, doc}],   # its own options
  #     defaults: [key: value],       # full-run defaults of any option
  #     quick: [key: value],          # what --quick changes
  #     full: [key: minimum]          # what a run needs for its goals to be checked
  #   }

  @common [
    {:messages, :integer, "N", "measured messages (round trips, operations)"},
    {:warmup, :integer, "N", "messages run first and not measured"},
    {:size, :integer, "BYTES", "message size"},
    {:quick, :boolean, nil, "a small run: seconds per part (what CI runs)"},
    {:json, :string, "PATH",
     "also write the results as JSON to PATH (without PART: PATH is a directory, one PART.json per part)"},
    {:plot, :string, "DIR",
     "also write each part's percentile plot (SVG) into DIR, and DIR/index.html showing every plot there"},
    {:dir, :string, "DIR", "where temporary files go (default: the system's tmp dir)"}
  ]

  # Options of the task itself, not of a part.
  @task [
    {:summary, :string, "DIR",
     "print the summary tables (Markdown) of the JSON files a run wrote into DIR (--json DIR), run nothing"},
    {:help, :boolean, nil, "print this text, run nothing"}
  ]

  @doc "The options every part takes, as OptionParser switches."
  def common_switches, do: switches(@common)

  @doc "OptionParser switches of `options` (`{key, type, arg, doc}` tuples)."
  def switches(options), do: for({key, type, _arg, _doc} <- options, do: {key, type})

  @doc """
  Parses a part's argv with the common options plus the part's own, applying
  its `defaults` (or `quick` with `--quick`). Raises `Mix.Error` (a non-zero
  exit) on anything unknown or malformed, with a suggestion.
  """
  def parse!(argv, spec) do
    allowed = @common ++ spec.options
    {opts, rest, invalid} = OptionParser.parse(argv, strict: switches(allowed))

    with [bad | _] <- invalid, do: Mix.raise(invalid_message(bad, allowed, spec.name))

    if rest != [] do
      Mix.raise("unexpected arguments for the #{spec.name} part: #{Enum.join(rest, " ")}")
    end

    base = if opts[:quick], do: Keyword.merge(spec.defaults, spec.quick), else: spec.defaults
    opts = Keyword.merge(base, opts)

    for key <- [:messages, :size], opts[key] != nil and opts[key] < 0 do
      Mix.raise("--#{key} must be a non-negative integer")
    end

    opts
  end

  @doc """
  Checks argv for `part` (a spec) or for every part (`nil`: the common
  options only) without keeping the result: `:ok` or `{:error, message}`.
  The task calls it before running anything.
  """
  def check(argv, spec, all_specs) do
    allowed = @common ++ if(spec, do: spec.options, else: [])
    {opts, rest, invalid} = OptionParser.parse(argv, strict: switches(allowed))

    cond do
      invalid != [] ->
        bad = hd(invalid)

        {:error,
         invalid_message(bad, allowed, spec && spec.name) <> part_hint(bad, spec, all_specs)}

      rest != [] ->
        {:error, "unexpected arguments: #{Enum.join(rest, " ")} (the part goes first)"}

      # (--group and --durability add cases of their own: those are checked
      # when the part starts.)
      spec && spec.cases && opts[:cases] && !opts[:group] && !opts[:durability] && !opts[:auth] ->
        case Enum.reject(String.split(opts[:cases], ","), &(&1 in spec.cases)) do
          [] -> :ok
          [bad | _] -> {:error, "unknown case #{inspect(bad)}" <> did_you_mean(bad, spec.cases)}
        end

      true ->
        :ok
    end
  end

  defp invalid_message({switch, value}, allowed, part) do
    known = for {key, _, _, _} <- allowed, do: flag(key)
    where = if part, do: " of the #{part} part", else: ""

    case Enum.find(allowed, fn {key, _, _, _} -> flag(key) == switch end) do
      {_key, type, _, _} ->
        "#{switch} expects #{type_words(type)}, got: #{inspect(value)}"

      nil ->
        "unknown option #{switch}#{where}" <> did_you_mean(switch, known)
    end
  end

  # An option another part has: say which.
  defp part_hint({switch, _}, spec, all_specs) do
    owners =
      for s <- all_specs,
          s != spec,
          Enum.any?(s.options, fn o -> flag(elem(o, 0)) == switch end),
          do: s.name

    case owners do
      [] ->
        ""

      names ->
        "\n#{switch} is an option of the #{Enum.join(names, ", ")} part" <>
          if(length(names) > 1, do: "s", else: "") <>
          ": mix tachyon.bench #{hd(names)} #{switch} ..."
    end
  end

  defp type_words(:integer), do: "an integer"
  defp type_words(:boolean), do: "no value"
  defp type_words(_), do: "a value"

  @doc """
  `"; did you mean \\"x\\"?"`-style tail for `given` among `known` (closest by
  `String.jaro_distance/2`, if close enough), then the known values.
  """
  def did_you_mean(given, known) do
    best =
      known
      |> Enum.map(&{String.jaro_distance(given, &1), &1})
      |> Enum.max(fn -> {0.0, nil} end)

    case best do
      {d, name} when d >= 0.8 -> "; did you mean #{name}?"
      _ -> ""
    end <> "\nknown: #{Enum.join(known, ", ")}"
  end

  @doc "Raises for a value of a list option (a case, an engine) that is not one of `known`."
  @spec unknown!(String.t(), String.t(), [String.t()]) :: no_return()
  def unknown!(what, given, known) do
    Mix.raise("unknown #{what} #{inspect(given)}" <> did_you_mean(given, known))
  end

  @doc """
  The cases to run: `--cases a,b` (each one of `all`) or all of them.
  """
  def cases!(opts, all) do
    wanted = if opts[:cases], do: String.split(opts[:cases], ","), else: all
    for c <- wanted, c not in all, do: unknown!("case", c, all)
    wanted
  end

  @doc """
  Whether `opts` is a full run of `spec`: not `--quick`, and every option
  of `spec.full` at least its minimum. A part's goals are checked only then.
  """
  def full_run?(opts, spec) do
    not Keyword.get(opts, :quick, false) and
      Enum.all?(spec.full, fn {key, min} -> (opts[key] || 0) >= min end)
  end

  @doc "The options a full run of `spec` takes, as flags: `--messages 1000000`."
  def full_flags(spec), do: Enum.map_join(spec.full, " ", fn {k, v} -> "#{flag(k)} #{v}" end)

  @doc "`:hiccup_ms` -> `\"--hiccup-ms\"`."
  def flag(key), do: "--" <> String.replace(Atom.to_string(key), "_", "-")

  # -- usage -------------------------------------------------------------------

  @doc "The text of `mix tachyon.bench --help`, from every part's spec."
  def usage(specs) do
    names = Enum.map_join(specs, ", ", & &1.name)

    [
      """
      mix tachyon.bench [PART] [OPTIONS]

      Runs Tachyon's latency benchmarks and prints, for each case, latency
      percentiles in the format of the systems Tachyon is modelled on, a
      side-by-side table of Tachyon, the BEAM's own alternatives and a
      pure-Rust floor, and the part's goals.

      PART is one of: #{names}. Without PART, every part
      runs in turn with its defaults (about 3 minutes on 2 idle cores, longer
      on a busy machine); then only the options for every part apply.

      Examples:

          mix tachyon.bench                          # every part, default sizes
          mix tachyon.bench store --quick            # one part, CI-sized
          mix tachyon.bench --json results/ --plot results/
          mix tachyon.bench --summary results/       # the summary tables of that run

      Options for every part:

      """,
      option_lines(@common, [], []),
      "\nOptions of the task:\n\n",
      option_lines(@task, [], []),
      "\nParts (defaults are those of a run without --quick; --quick changes the ones in brackets):\n",
      Enum.map(specs, &part_usage/1)
    ]
    |> IO.iodata_to_binary()
  end

  defp part_usage(spec) do
    common =
      for {key, _, _, _} <- @common, Keyword.has_key?(spec.defaults, key) do
        quick = if Keyword.has_key?(spec.quick, key), do: " [#{fmt(spec.quick[key])}]", else: ""
        "#{flag(key)} #{fmt(spec.defaults[key])}#{quick}"
      end

    goals =
      if spec.full == [],
        do: "",
        else: "  Its goals are checked on a full run (#{full_flags(spec)} or more).\n"

    cases =
      if spec.cases,
        do: wrap("  Cases: ", Enum.join(spec.cases, ", ") <> ".", "    "),
        else: ""

    [
      "\n",
      wrap("#{spec.name}: ", spec.summary, "  "),
      "  Defaults: #{Enum.join(common, ", ")}.\n",
      cases,
      goals,
      option_lines(spec.options, spec.defaults, spec.quick)
    ]
  end

  defp option_lines(options, defaults, quick) do
    for {key, _type, arg, doc} <- options do
      left = "  " <> flag(key) <> if(arg, do: " " <> arg, else: "")

      default =
        case {Keyword.fetch(defaults, key), Keyword.fetch(quick, key)} do
          {{:ok, d}, {:ok, q}} -> " (default #{fmt(d)} [#{fmt(q)}])"
          {{:ok, d}, :error} -> " (default #{fmt(d)})"
          _ -> ""
        end

      indent = String.duplicate(" ", 24)

      if String.length(left) < 23,
        do: wrap(String.pad_trailing(left, 24), doc <> default, indent),
        else: [left, "\n", wrap(indent, doc <> default, indent)]
    end
  end

  defp fmt(n) when is_integer(n), do: Tachyon.Bench.Report.delimit(n)
  defp fmt(v), do: to_string(v)

  # `prefix` then the words of `text`, wrapped at 80 columns; continuation
  # lines start with `indent`.
  defp wrap(prefix, text, indent) do
    text
    |> String.split(" ", trim: true)
    |> Enum.reduce({[], prefix, true}, fn word, {done, line, first?} ->
      cond do
        first? -> {done, line <> word, false}
        String.length(line) + 1 + String.length(word) <= 80 -> {done, line <> " " <> word, false}
        true -> {[line | done], indent <> word, false}
      end
    end)
    |> then(fn {done, line, _} -> Enum.reverse([line | done]) end)
    |> Enum.map_join("", &(&1 <> "\n"))
  end
end

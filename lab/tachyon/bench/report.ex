defmodule Tachyon.Bench.Report do
  @moduledoc false
  # What every bench prints and writes: the seeds' report format, the
  # side-by-side table, the machine line and the JSON file.

  @doc "Prints one case in the seeds' format."
  def print_report(c, opts \\ []) do
    stdev? = Keyword.get(opts, :stdev, true)
    IO.puts("")
    IO.puts("== #{c.name}" <> if(c[:note], do: "  (#{c.note})", else: ""))
    size = if c.size, do: " (#{c.size} bytes)", else: ""
    IO.puts("Messages: #{delimit(c.messages)}#{size}")
    IO.puts("Avg Time: #{fmt_ns(c.avg_ns)}")
    if stdev?, do: IO.puts("StDev: #{fmt_ns(c.stdev_ns)}")
    IO.puts("Min Time: #{fmt_ns(c.min_ns)}")
    IO.puts("Max Time: #{fmt_ns(c.max_ns)}")

    for {p, avg, sd, max} <- c.tails do
      sd_part = if stdev?, do: ", stdev: #{fmt_ns(sd)}", else: ""
      IO.puts("#{fmt_pct(p)}% = [avg: #{fmt_ns(avg)}#{sd_part}, max: #{fmt_ns(max)}]")
    end

    if c[:throughput], do: IO.puts("Messages per second: #{delimit(round(c.throughput))}")
    :ok
  end

  @doc """
  Prints the side-by-side table. `baseline` names the case the `x` column is
  relative to (avg / baseline avg).
  """
  def print_table(cases, baseline \\ nil) do
    base = Enum.find(cases, &(&1.name == baseline))
    IO.puts("")

    header =
      ["case", "messages", "avg", "p50", "p99", "p99.9", "p99.99", "max", "ops/s"] ++
        if(base, do: ["avg vs #{baseline}"], else: [])

    rows =
      for c <- cases do
        [
          c.name,
          delimit(c.messages),
          short_ns(c.avg_ns),
          short_ns(c.p50_ns),
          short_ns(c.p99_ns),
          short_ns(c.p999_ns),
          short_ns(c.p9999_ns),
          short_ns(c.max_ns),
          delimit(round(c[:throughput] || c.ops_per_sec))
        ] ++ if(base, do: [ratio(c.avg_ns, base.avg_ns)], else: [])
      end

    print_rows(header, rows)
  end

  @doc "Prints a table: the first column left-aligned, the others right-aligned."
  def print_rows(header, rows) do
    widths =
      Enum.reduce([header | rows], List.duplicate(0, length(header)), fn row, acc ->
        Enum.zip_with(row, acc, fn cell, w -> max(String.length(cell), w) end)
      end)

    line = fn row ->
      row
      |> Enum.zip(widths)
      |> Enum.with_index()
      |> Enum.map_join("  ", fn {{cell, w}, i} ->
        if i == 0, do: String.pad_trailing(cell, w), else: String.pad_leading(cell, w)
      end)
    end

    IO.puts(line.(header))
    IO.puts(String.duplicate("-", Enum.sum(widths) + 2 * (length(widths) - 1)))
    Enum.each(rows, &IO.puts(line.(&1)))
    :ok
  end

  @doc """
  Records the command line of this run (the task sets it): every JSON file
  the run writes carries it, for `Tachyon.Bench.Summary`.
  """
  def put_command(command), do: :persistent_term.put({__MODULE__, :command}, command)

  @doc "Writes the JSON report."
  def write_json(nil, _bench, _cases, _extra), do: :ok

  def write_json(path, bench, cases, extra) do
    doc =
      Map.merge(
        %{
          "bench" => bench,
          "command" => :persistent_term.get({__MODULE__, :command}, nil),
          "machine" => machine(),
          "cases" => Enum.map(cases, &json_case/1)
        },
        extra
      )

    File.mkdir_p!(Path.dirname(Path.expand(path)))
    File.write!(path, Tachyon.Bench.JSON.encode(doc) <> "\n")
    IO.puts("\nJSON written to #{path}")
  end

  defp json_case(c) do
    base =
      Map.take(c, [
        :name,
        :messages,
        :size,
        :avg_ns,
        :stdev_ns,
        :min_ns,
        :max_ns,
        :p50_ns,
        :p75_ns,
        :p90_ns,
        :p99_ns,
        :p999_ns,
        :p9999_ns,
        :p99999_ns,
        :ops_per_sec
      ])

    extra = Map.get(c, :json_extra, %{})
    Map.merge(base, extra) |> Map.new(fn {k, v} -> {to_string(k), v} end)
  end

  @doc "What the benchmark ran on."
  def machine do
    cpu =
      case File.read("/proc/cpuinfo") do
        {:ok, text} ->
          case Regex.run(~r/model name\s*:\s*(.+)/, text) do
            [_, model] -> String.trim(model)
            _ -> "unknown"
          end

        _ ->
          "unknown"
      end

    mem_gib =
      case File.read("/proc/meminfo") do
        {:ok, text} ->
          case Regex.run(~r/MemTotal:\s+(\d+) kB/, text) do
            [_, kb] -> Float.round(String.to_integer(kb) / 1_048_576, 1)
            _ -> nil
          end

        _ ->
          nil
      end

    {kernel, 0} = System.cmd("uname", ["-r"])

    %{
      "cpu" => cpu,
      "cores" => System.schedulers_online(),
      "memory_gib" => mem_gib,
      "kernel" => String.trim(kernel),
      "otp" => System.otp_release(),
      "elixir" => System.version(),
      "date" => DateTime.utc_now() |> DateTime.truncate(:second) |> DateTime.to_iso8601()
    }
  end

  @doc "Prints the machine line that every bench starts with."
  def print_machine do
    m = machine()

    IO.puts(
      "Machine: #{m["cpu"]}, #{m["cores"]} cores, #{m["memory_gib"]} GiB, Linux #{m["kernel"]}, OTP #{m["otp"]}, Elixir #{m["elixir"]}"
    )
  end

  # -- formatting ------------------------------------------------------------

  @doc "Formats ns like the seeds: `159.06 nanos`, `25.571 micros`."
  def fmt_ns(ns) when is_number(ns) do
    cond do
      ns < 1_000 -> "#{trim3(ns)} nanos"
      ns < 1_000_000 -> "#{trim3(ns / 1_000)} micros"
      ns < 1_000_000_000 -> "#{trim3(ns / 1_000_000)} millis"
      true -> "#{trim3(ns / 1_000_000_000)} secs"
    end
  end

  @doc "Short form for tables: `159ns`, `25.6us`, `2.12ms`."
  def short_ns(ns) when is_number(ns) do
    cond do
      ns < 1_000 -> "#{round(ns)}ns"
      ns < 1_000_000 -> "#{:erlang.float_to_binary(ns / 1_000, decimals: 2)}us"
      ns < 1_000_000_000 -> "#{:erlang.float_to_binary(ns / 1_000_000, decimals: 2)}ms"
      true -> "#{:erlang.float_to_binary(ns / 1_000_000_000, decimals: 2)}s"
    end
  end

  def ratio(_a, b) when b == 0, do: "-"
  def ratio(a, b), do: "#{:erlang.float_to_binary(a / b, decimals: 2)}x"

  defp trim3(v) do
    s = :erlang.float_to_binary(v * 1.0, decimals: 3)
    s = String.trim_trailing(s, "0")
    if String.ends_with?(s, "."), do: s <> "0", else: s
  end

  defp fmt_pct(p) do
    if p == trunc(p), do: Integer.to_string(trunc(p)), else: trim_pct(p)
  end

  defp trim_pct(p) do
    p |> :erlang.float_to_binary(decimals: 3) |> String.trim_trailing("0")
  end

  @doc "1234567 -> \"1,234,567\""
  def delimit(n) when is_integer(n) do
    n
    |> Integer.to_string()
    |> String.reverse()
    |> String.graphemes()
    |> Enum.chunk_every(3)
    |> Enum.map_join(",", &Enum.join/1)
    |> String.reverse()
  end

  def delimit(n) when is_float(n), do: delimit(round(n))
end

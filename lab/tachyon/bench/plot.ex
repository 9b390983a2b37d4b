defmodule Tachyon.Bench.Plot do
  @moduledoc false
  # `mix tachyon.bench NAME --plot DIR`: one SVG per run, every case of the
  # run as a percentile curve in the HdrHistogram style (latency against
  # 1/(1 - percentile), both axes logarithmic), with a legend and the
  # machine and command in the caption; and DIR/index.html, which shows the
  # plots of every run written to DIR next to their summary tables. Plain
  # Elixir: the SVG is written by hand.

  alias Tachyon.Bench.Report

  @w 1040
  @h 560
  @left 100
  @right 330
  @top 50
  @bottom 110
  # x: 1 / (1 - p): 0% -> 1 ... 99.999% -> 1e5, max drawn at 1e6.
  @points [
    {:min_ns, 1.0},
    {:p50_ns, 2.0},
    {:p75_ns, 4.0},
    {:p90_ns, 10.0},
    {:p99_ns, 100.0},
    {:p999_ns, 1.0e3},
    {:p9999_ns, 1.0e4},
    {:p99999_ns, 1.0e5},
    {:max_ns, 1.0e6}
  ]
  @x_ticks [
    {1.0, "0%"},
    {10.0, "90%"},
    {100.0, "99%"},
    {1.0e3, "99.9%"},
    {1.0e4, "99.99%"},
    {1.0e5, "99.999%"},
    {1.0e6, "max"}
  ]
  @colors ~w(#1f77b4 #d62728 #2ca02c #ff7f0e #9467bd #8c564b #e377c2 #17becf #7f7f7f #bcbd22 #393b79 #637939)

  @doc """
  Plots a run recorded with `--json` (its machine as recorded) into `dir`:
  `mix run -e 'Tachyon.Bench.Plot.from_json("bench/results/store.json", "docs/plots", "mix tachyon.bench store ...")'`.
  """
  def from_json(path, dir, command) do
    doc = path |> File.read!() |> Tachyon.Bench.JSON.decode!()

    cases =
      for c <- doc["cases"], is_number(c["p50_ns"]) do
        Map.new(c, fn {k, v} -> {String.to_atom(k), v} end)
      end

    m = doc["machine"] || %{}

    machine =
      "#{m["cpu"]}, #{m["cores"]} cores, #{m["memory_gib"]} GiB, Linux #{m["kernel"]}, " <>
        "OTP #{m["otp"]}, Elixir #{m["elixir"]}, #{m["date"]}"

    write(dir, doc["bench"] || Path.basename(path, ".json"), cases, command, machine)
  end

  @doc "Writes the run's SVG and table into `dir` and rebuilds `dir/index.html`; returns the SVG's path."
  def write(dir, bench, cases, command, machine \\ nil) do
    File.mkdir_p!(dir)
    stamp = Calendar.strftime(DateTime.utc_now(), "%Y%m%dT%H%M%S")
    base = Path.join(dir, "#{bench}-#{stamp}")
    caption = [machine || machine_line(), command]
    File.write!(base <> ".svg", svg(bench, cases, caption))
    File.write!(base <> ".table.html", table(cases))
    File.write!(Path.join(dir, "index.html"), index(dir))
    IO.puts("\nPlot written to #{base}.svg (#{Path.join(dir, "index.html")})")
    base <> ".svg"
  end

  defp machine_line do
    m = Report.machine()

    "#{m["cpu"]}, #{m["cores"]} cores, #{m["memory_gib"]} GiB, Linux #{m["kernel"]}, " <>
      "OTP #{m["otp"]}, Elixir #{m["elixir"]}, #{m["date"]}"
  rescue
    _ -> "this machine"
  end

  @doc """
  The SVG of a run: one `polyline.curve` per latency case (throughput
  cases, whose rows are elapsed time / messages and so flat, are listed
  under the plot instead). `caption`: lines of text.
  """
  def svg(title, all_cases, caption) do
    {cases, flat} = Enum.split_with(all_cases, &(Map.get(&1, :min_ns) != Map.get(&1, :max_ns)))
    caption = List.wrap(caption)

    caption =
      if flat == [],
        do: caption,
        else:
          caption ++
            [
              "not plotted (throughput, no distribution): " <>
                Enum.map_join(flat, ", ", & &1.name)
            ]

    h = max(@h, @top + 20 + length(cases) * 18 + @bottom)
    values = for c <- cases, {k, _} <- @points, v = Map.get(c, k), is_number(v), v > 0, do: v
    {ymin, ymax} = y_range(values)
    pw = @w - @left - @right
    ph = h - @top - @bottom
    x = fn v -> @left + :math.log10(v) / 6 * pw end
    y = fn v -> @top + ph - (:math.log10(v) - ymin) / (ymax - ymin) * ph end

    curves =
      cases
      |> Enum.with_index()
      |> Enum.map(fn {c, i} ->
        color = Enum.at(@colors, rem(i, length(@colors)))
        # Past the palette, the same colours dashed.
        dash = if i >= length(@colors), do: ~s| stroke-dasharray="6 3"|, else: ""

        pts =
          for {k, xv} <- @points,
              v = Map.get(c, k),
              is_number(v),
              v > 0,
              do: "#{f(x.(xv))},#{f(y.(v))}"

        ly = @top + 8 + i * 18

        [
          ~s|<polyline class="curve" data-case="#{esc(c.name)}" fill="none" stroke="#{color}" stroke-width="2"#{dash} points="#{Enum.join(pts, " ")}"/>\n|,
          ~s|<line x1="#{@w - @right + 12}" y1="#{ly}" x2="#{@w - @right + 36}" y2="#{ly}" stroke="#{color}" stroke-width="3"#{dash}/>\n|,
          ~s|<text x="#{@w - @right + 42}" y="#{ly + 4}" font-size="11">#{esc(c.name)}</text>\n|
        ]
      end)

    xgrid =
      for {v, label} <- @x_ticks do
        xv = f(x.(v))

        [
          ~s|<line x1="#{xv}" y1="#{@top}" x2="#{xv}" y2="#{@top + ph}" stroke="#ddd"/>\n|,
          ~s|<text x="#{xv}" y="#{@top + ph + 18}" font-size="12" text-anchor="middle">#{label}</text>\n|
        ]
      end

    ygrid =
      for e <- ceil(ymin)..floor(ymax)//1 do
        yv = f(y.(:math.pow(10, e)))

        [
          ~s|<line x1="#{@left}" y1="#{yv}" x2="#{@left + pw}" y2="#{yv}" stroke="#ddd"/>\n|,
          ~s|<text x="#{@left - 6}" y="#{yv}" font-size="12" text-anchor="end" dominant-baseline="middle">#{Report.fmt_ns(:math.pow(10, e))}</text>\n|
        ]
      end

    IO.iodata_to_binary([
      ~s|<?xml version="1.0" encoding="UTF-8"?>\n|,
      ~s|<svg xmlns="http://www.w3.org/2000/svg" width="#{@w}" height="#{h}" viewBox="0 0 #{@w} #{h}" font-family="sans-serif">\n|,
      ~s|<rect width="#{@w}" height="#{h}" fill="white"/>\n|,
      ~s|<text x="#{@left}" y="28" font-size="18" font-weight="bold">#{esc(title)}: latency by percentile</text>\n|,
      xgrid,
      ygrid,
      ~s|<rect x="#{@left}" y="#{@top}" width="#{pw}" height="#{ph}" fill="none" stroke="#333"/>\n|,
      ~s|<text x="#{@left + pw / 2}" y="#{@top + ph + 40}" font-size="13" text-anchor="middle">percentile (1/(1-p) on a log axis)</text>\n|,
      ~s|<text x="16" y="#{@top + ph / 2}" font-size="13" text-anchor="middle" transform="rotate(-90 16 #{@top + ph / 2})">latency (log axis)</text>\n|,
      curves,
      caption
      |> Enum.flat_map(&chunks(&1, 150))
      |> Enum.with_index()
      |> Enum.map(fn {line, i} ->
        ~s|<text x="#{@left}" y="#{h - @bottom + 62 + i * 14}" font-size="11" fill="#555">#{esc(line)}</text>\n|
      end),
      ~s|</svg>\n|
    ])
  end

  defp chunks(text, n) do
    if String.length(text) <= n,
      do: [text],
      else: [String.slice(text, 0, n) | chunks(String.slice(text, n..-1//1), n)]
  end

  defp y_range([]), do: {0.0, 1.0}

  defp y_range(values) do
    lo = values |> Enum.min() |> :math.log10() |> floor()
    hi = values |> Enum.max() |> :math.log10() |> ceil()
    {lo * 1.0, max(hi, lo + 1) * 1.0}
  end

  defp f(v), do: :erlang.float_to_binary(v * 1.0, decimals: 1)

  defp esc(s) do
    s
    |> to_string()
    |> String.replace("&", "&amp;")
    |> String.replace("<", "&lt;")
    |> String.replace(">", "&gt;")
    |> String.replace("\"", "&quot;")
  end

  defp table(cases) do
    rows =
      for c <- cases do
        cells =
          [c.name, Report.delimit(c.messages)] ++
            for(
              k <- [:avg_ns, :p50_ns, :p99_ns, :p999_ns, :p9999_ns, :max_ns],
              do: Report.fmt_ns(Map.get(c, k, 0))
            )

        ["<tr>", Enum.map(cells, &"<td>#{esc(&1)}</td>"), "</tr>\n"]
      end

    IO.iodata_to_binary([
      "<table><tr><th>case</th><th>messages</th><th>avg</th><th>p50</th><th>p99</th><th>p99.9</th><th>p99.99</th><th>max</th></tr>\n",
      rows,
      "</table>\n"
    ])
  end

  @doc "Rebuilds `dir/index.html` from the runs in `dir`."
  def rebuild_index(dir), do: File.write!(Path.join(dir, "index.html"), index(dir))

  defp index(dir) do
    runs =
      dir
      |> Path.join("*.svg")
      |> Path.wildcard()
      |> Enum.sort()
      |> Enum.map(fn svg ->
        base = Path.rootname(svg)

        t =
          case File.read(base <> ".table.html") do
            {:ok, t} -> t
            _ -> ""
          end

        name = Path.basename(svg)

        ~s|<section><h2>#{esc(Path.basename(base))}</h2><div class="run"><img src="#{esc(name)}" alt="#{esc(name)}">\n#{t}</div></section>\n|
      end)

    """
    <!DOCTYPE html>
    <html><head><meta charset="utf-8"><title>Tachyon benchmarks</title>
    <style>
    body { font-family: sans-serif; margin: 24px; }
    .run { display: flex; gap: 24px; align-items: flex-start; flex-wrap: wrap; }
    img { width: 1040px; max-width: 100%; border: 1px solid #ccc; }
    table { border-collapse: collapse; font-size: 13px; }
    td, th { border: 1px solid #ccc; padding: 3px 8px; text-align: right; }
    td:first-child, th:first-child { text-align: left; }
    </style></head><body>
    <h1>Tachyon benchmarks</h1>
    #{runs}
    </body></html>
    """
  end
end

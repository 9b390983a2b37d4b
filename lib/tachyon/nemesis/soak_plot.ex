defmodule Tachyon.Nemesis.SoakPlot do
  @moduledoc false
  # The soak's plot (`mix tachyon.soak --out DIR`: DIR/soak.svg): five
  # panels against minutes, one polyline per series: the log's bytes on
  # disk per node, the RSS of every OS process, their open file
  # descriptors, the messages delivered a second, the longest member-seen
  # gap. Plain Elixir: the SVG is written by hand (as Tachyon.Bench.Plot's).

  @w 900
  @panel 170
  @left 90
  @right 150
  @top 40
  @procs ~w(node0 node1 node2 m1 m2 m3)
  @colors ~w(#1f77b4 #d62728 #2ca02c #ff7f0e #9467bd #8c564b)

  @doc "Writes the SVG of `rows` (the soak's, one a minute) to `path`."
  def write(path, rows, caption), do: File.write!(path, svg(rows, caption))

  @doc "The SVG of `rows`."
  def svg(rows, caption) do
    col = fn key, i -> Enum.map(rows, &{&1.minute, Enum.at(Map.fetch!(&1, key), i)}) end
    one = fn key -> [{"all", Enum.map(rows, &{&1.minute, Map.fetch!(&1, key)})}] end
    mib = fn pts -> for {m, v} <- pts, do: {m, v && v / 1_048_576} end
    kib = fn pts -> for {m, v} <- pts, do: {m, v && v / 1024} end

    panels = [
      {"log on disk per node (MiB)", for(i <- 0..2, do: {"node#{i}", mib.(col.(:log_bytes, i))})},
      {"RSS (MiB)", for({p, i} <- Enum.with_index(@procs), do: {p, kib.(col.(:rss_kb, i))})},
      {"open file descriptors", for({p, i} <- Enum.with_index(@procs), do: {p, col.(:fds, i)})},
      {"delivered messages/s (per member)", one.(:rate)},
      {"longest member-seen gap (ms)", one.(:gap_ms)}
    ]

    h = @top + length(panels) * (@panel + 40) + 30
    max_x = rows |> Enum.map(& &1.minute) |> Enum.max(fn -> 1 end) |> max(1)

    body =
      panels
      |> Enum.with_index()
      |> Enum.map(fn {{title, series}, k} ->
        panel(title, series, @top + k * (@panel + 40), max_x)
      end)

    [
      ~s(<svg xmlns="http://www.w3.org/2000/svg" width="#{@w}" height="#{h}" font-family="sans-serif" font-size="12">\n),
      ~s(<rect width="100%" height="100%" fill="white"/>\n),
      ~s(<text x="#{@left}" y="20" font-size="14">#{esc(caption)}</text>\n),
      body,
      ~s(<text x="#{@left + div(@w - @left - @right, 2)}" y="#{h - 8}">minutes</text>\n),
      "</svg>\n"
    ]
    |> IO.iodata_to_binary()
  end

  defp panel(title, series, y0, max_x) do
    values = for {_, pts} <- series, {_, v} <- pts, v != nil, do: v
    max_y = Enum.max([1 | values]) * 1.1
    pw = @w - @left - @right
    x = fn m -> @left + m / max_x * pw end
    y = fn v -> y0 + @panel - v / max_y * @panel end

    lines =
      for {{name, pts}, i} <- Enum.with_index(series) do
        c = Enum.at(@colors, rem(i, length(@colors)))
        xy = for {m, v} <- pts, v != nil, do: "#{f(x.(m))},#{f(y.(v))}"

        [
          ~s(<polyline fill="none" stroke="#{c}" stroke-width="1.5" points="#{Enum.join(xy, " ")}"/>\n),
          ~s(<text x="#{@w - @right + 10}" y="#{y0 + 14 + i * 15}" fill="#{c}">#{esc(name)}</text>\n)
        ]
      end

    ticks =
      for t <- [0, 0.5, 1] do
        ~s(<text x="#{@left - 6}" y="#{f(y.(t * max_y) + 4)}" text-anchor="end">#{f(t * max_y)}</text>\n)
      end

    xticks =
      for m <- Enum.uniq([0, div(max_x, 2), max_x]) do
        ~s(<text x="#{f(x.(m))}" y="#{y0 + @panel + 14}" text-anchor="middle">#{m}</text>\n)
      end

    [
      ~s(<text x="#{@left}" y="#{y0 - 6}" font-weight="bold">#{esc(title)}</text>\n),
      ~s(<rect x="#{@left}" y="#{y0}" width="#{pw}" height="#{@panel}" fill="none" stroke="#999"/>\n),
      ticks,
      xticks,
      lines
    ]
  end

  defp f(v), do: :erlang.float_to_binary(v * 1.0, decimals: 1)

  defp esc(s),
    do:
      s
      |> String.replace("&", "&amp;")
      |> String.replace("<", "&lt;")
      |> String.replace(">", "&gt;")
end

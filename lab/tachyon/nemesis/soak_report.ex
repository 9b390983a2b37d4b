defmodule Tachyon.Nemesis.SoakReport do
  @moduledoc false
  # The soak's output (`Tachyon.Nemesis.Soak`): its rows as lines and CSV
  # (DIR/soak.csv), its summary, and its plot (DIR/soak.svg): five
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

  alias Tachyon.Nemesis

  @doc "A row as a line of text."
  def format_row(r) do
    mb = Enum.map_join(r.log_bytes, " ", &"#{Float.round(&1 / 1_048_576, 1)}")

    rss =
      Enum.zip(r.rss_kb, r.anon_kb)
      |> Enum.map_join(" ", fn
        {nil, _} -> "-"
        {kb, anon} -> "#{div(kb, 1024)}/#{div(anon || 0, 1024)}"
      end)

    fds = Enum.map_join(r.fds, " ", &"#{&1 || "-"}")
    erl = Enum.map_join(r.erlang_kb, " ", &"#{if &1, do: div(&1, 1024), else: "-"}")

    "soak: minute #{r.minute}: log MiB #{mb} | RSS/anon MiB #{rss} | fds #{fds} | " <>
      "members' VM MiB #{erl} | #{r.rate} msg/s | gap #{r.gap_ms} ms | checks #{r.checks} violated #{r.violations} | " <>
      "replaced #{r.replaced} joined #{r.joined}"
  end

  @csv_header ["minute"] ++
                for(i <- 0..2, do: "log_bytes_node#{i}") ++
                for(p <- @procs, do: "rss_kb_#{p}") ++
                for(p <- @procs, do: "rss_anon_kb_#{p}") ++
                for(p <- @procs, do: "fds_#{p}") ++
                ~w(delivered_per_s max_gap_ms checks violations replaced joined)

  @doc "Writes the rows as CSV to `path`."
  def write_csv(path, rows) do
    lines =
      for r <- rows do
        [r.minute] ++
          r.log_bytes ++
          r.rss_kb ++
          r.anon_kb ++ r.fds ++ [r.rate, r.gap_ms, r.checks, r.violations, r.replaced, r.joined]
      end

    text = Enum.map_join([@csv_header | lines], "\n", &Enum.map_join(&1, ",", fn v -> "#{v}" end))
    File.write!(path, text <> "\n")
  end

  @doc "The plot's caption: the command."
  def caption(o, report) do
    "mix tachyon.soak --minutes #{o.minutes} --seed #{report.seed} --rate #{o.rate} " <>
      "--retention-bytes #{o.retention_bytes} --replace-every #{o.replace_every}" <>
      if(o.durability, do: " --durability #{o.durability}", else: "") <>
      " (#{Date.utc_today()})"
  end

  @doc "The summary of the run (`ok`: nothing failed)."
  def summary(o, report, rows) do
    minute_rows = Enum.filter(rows, &is_integer(&1.minute))
    settle = min(5, max(1, div(o.minutes, 2)))

    max_bytes =
      for i <- 0..2,
          do: minute_rows |> Enum.map(&Enum.at(&1.log_bytes, i)) |> Enum.max(fn -> 0 end)

    bound = o.retention_bytes + 6 * o.segment_size

    # Per process, over the rows of one OS process (a node killed or
    # replaced comes back as a new VM) from minute `settle` on, less that
    # OS process's first row (a VM started shortly before it, still
    # warming up): the largest (max - min) / min, in percent.
    drift = fn key ->
      for {p, i} <- Enum.with_index(@procs), into: %{} do
        runs =
          minute_rows
          |> Enum.map(&{Enum.at(&1.pids, i), &1.minute, Enum.at(Map.fetch!(&1, key), i)})
          |> Enum.reject(&(elem(&1, 2) == nil))
          |> Enum.chunk_by(&elem(&1, 0))
          |> Enum.map(fn run -> run |> Enum.drop(1) |> Enum.filter(&(elem(&1, 1) >= settle)) end)
          |> Enum.filter(&(length(&1) >= 2))
          |> Enum.map(fn run ->
            vs = Enum.map(run, &elem(&1, 2))
            Float.round(100 * (Enum.max(vs) - Enum.min(vs)) / max(Enum.min(vs), 1), 1)
          end)

        {p, Enum.max(runs, fn -> nil end)}
      end
    end

    joined = report.ext.joined
    replaced = length(report.replacements)

    s = %{
      seed: report.seed,
      minutes: o.minutes,
      retention_bytes: o.retention_bytes,
      bound: bound,
      max_log_bytes: max_bytes,
      settle: settle,
      rss_drift: drift.(:rss_kb),
      anon_drift: drift.(:anon_kb),
      fd_drift: drift.(:fds),
      violations: report.violations,
      replacements: {replaced, report.ext.replaces},
      joins: {Enum.count(joined, & &1.ok), o.minutes},
      unchecked: report.ext.unchecked,
      report: report
    }

    # Flat: within 10% from minute 5 on, judged on runs of 10 minutes or more.
    flat = fn d -> Enum.all?(Map.values(d), &(&1 == nil or &1 <= 10.0)) end
    flat_ok = if o.minutes >= 10, do: flat.(s.rss_drift) and flat.(s.fd_drift), else: nil

    ok =
      report.violations == [] and Enum.all?(max_bytes, &(&1 <= bound)) and
        replaced == report.ext.replaces and Enum.count(joined, & &1.ok) == o.minutes and
        flat_ok != false

    s = Map.put(s, :flat, flat_ok)

    Map.put(s, :ok, ok)
  end

  @doc "The summary as lines of text."
  def format(s) do
    mib = &Float.round(&1 / 1_048_576, 1)
    {rd, rn} = s.replacements
    {jd, jn} = s.joins

    Nemesis.format(s.report) ++
      [
        "soak: #{s.minutes} minutes, seed #{s.seed}",
        "log bytes on disk, max per node (MiB): #{Enum.map_join(s.max_log_bytes, ", ", &mib.(&1))} " <>
          "(retention #{mib.(s.retention_bytes)} MiB; bound with the active and prepared segments " <>
          "#{mib.(s.bound)} MiB)",
        "RSS drift from minute #{s.settle} on (max-min over min, %, within one OS process, " <>
          "its first row left out): " <>
          inspect(s.rss_drift),
        "RSS less mapped files (RssAnon) drift, the same way (%): #{inspect(s.anon_drift)}",
        "RSS and open fds flat (within 10%): " <>
          case s.flat do
            nil -> "not judged (a run shorter than 10 minutes)"
            true -> "yes"
            false -> "NO"
          end,
        "open fds drift from minute #{s.settle} on (%): #{inspect(s.fd_drift)}",
        "host replacements: #{rd} of #{rn} done; snapshot joins: #{jd} of #{jn} done",
        "deliveries not checked (removed by retention before a minute's check recorded them): " <>
          "#{s.unchecked}",
        "violations: #{length(s.violations)}",
        "soak: #{if s.ok, do: "OK", else: "FAILED"}"
      ]
  end

  # -- the plot -----------------------------------------------------------------------

  @doc "Writes the SVG of `rows` (the soak's, one a minute) to `path`."
  def write_svg(path, rows, caption), do: File.write!(path, svg(rows, caption))

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

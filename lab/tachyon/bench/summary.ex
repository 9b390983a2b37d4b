defmodule Tachyon.Bench.Summary do
  @moduledoc false
  # `mix tachyon.bench --summary DIR`: the summary tables of docs/BENCHMARKS.md,
  # as Markdown, from the JSON files one run wrote (`--json DIR`): per part,
  # Tachyon's cases, the peers a BEAM user would otherwise pick and the
  # floors, with the part's command, machine and date, each row's ratio to
  # the table's first row, and a link to the part's plot if `--plot DIR`
  # wrote one into the same directory. Runs nothing.

  alias Tachyon.Bench.{JSON, Report}

  # {title, json file, kind, rows: [{role, case, what}], the reference row is the first}.
  # kind: :latency (p50 .. max, and p50 against the first row) or :rate
  # (messages per second, against the first row).
  @parts [
    {"Store", "store", :latency,
     [
       {"Tachyon", "tachyon.store.append",
        "`Tachyon.Store.append/2` (64 MiB segments, pre-touch on)"},
       {"peer", "disk_log.blog", "`:disk_log.blog/2` on a halt log"},
       {"peer", "file.write.raw",
        "`:file.write/2` on a raw append fd: one `write(2)` per message"},
       {"floor", "tachyon.store.append.native", "the same append in a Rust loop, no BEAM"},
       {"floor", "nif.noop", "an empty NIF, timed the same way: any Elixir call costs this"},
       {"machine", "machine.hiccup",
        "a Rust loop that only reads the clock: its max is the machine's own stall"}
     ]},
    {"AsyncStore", "async", :latency,
     [
       {"Tachyon", "tachyon.async_store.append",
        "`Tachyon.AsyncStore.append/2`: a copy into the ring a writer thread drains"},
       {"Tachyon", "tachyon.store.append", "`Tachyon.Store.append/2`, the direct store"},
       {"peer", {"store", "disk_log.blog"},
        "`:disk_log.blog/2` (from the store part of the same run)"},
       {"floor", "tachyon.async_store.append.native", "the same append in a Rust loop, no BEAM"},
       {"floor", "nif.noop", "an empty NIF, timed the same way"}
     ]},
    {"AsyncStore throughput", "async", :rate,
     [
       {"Tachyon", "tachyon.async_store.throughput",
        "appends as fast as one process can, then a flush: messages in the store per second"}
     ]},
    {"UDP round trip from an Elixir process (`Tachyon.UDP`)", "echo", :latency,
     [
       {"Tachyon", "tachyon.udp.roundtrip.poll",
        "`Tachyon.UDP`, `delivery: :poll` (the process polls its socket), to `Tachyon.Echo`"},
       {"Tachyon", "tachyon.udp.roundtrip",
        "`Tachyon.UDP`, `delivery: :messages` (a receive thread sends to the process)"},
       {"Tachyon", "tachyon.udp.roundtrip.block",
        "the same, the receive thread blocking (`wait: :park`)"},
       {"peer", "gen_udp.roundtrip", "`:gen_udp` (`active: true`) to a gen_udp echo process"},
       {"peer", "gen_udp.roundtrip.passive",
        "`:gen_udp` (`active: false`, `recv/3`) on both sides"},
       {"peer", "socket.roundtrip", "`:socket` on both sides"},
       {"floor", "raw.rust", "two Rust threads in a standalone binary, no BEAM"}
     ]},
    {"UDP echo server (`Tachyon.Echo`, `Tachyon.UDP`), pinged by a Rust thread", "echo", :latency,
     [
       {"Tachyon", "tachyon.echo", "`Tachyon.Echo`: the echo loop on a Rust thread"},
       {"Tachyon", "tachyon.udp.echo.poll", "an Elixir process polling `Tachyon.UDP` echoes"},
       {"Tachyon", "tachyon.udp.echo",
        "an Elixir process with `Tachyon.UDP` (`delivery: :messages`) echoes"},
       {"peer", "gen_udp.echo", "an Elixir process with `:gen_udp` (`active: true`) echoes"},
       {"floor", "raw.rust", "two Rust threads in a standalone binary, no BEAM"}
     ]},
    {"Table: get", "table", :table,
     [
       {"Tachyon", "tachyon.memory.get", "`Tachyon.Table.get/2`, `storage: :memory`"},
       {"Tachyon", "tachyon.mapped.get", "the same, `storage: :mapped`"},
       {"Tachyon", "tachyon.file.get", "the same, `storage: :file`"},
       {"peer", "ets.get", "`:ets.lookup/2` (a `:set`, read and write concurrency)"},
       {"peer", "dets.get", "`:dets.lookup/2`"},
       {"peer", "bitcask.get", "`:bitcask.get/2` (Debian's erlang-bitcask)"},
       {"floor", "nif.noop", "an empty NIF, timed the same way"}
     ]},
    {"Table: put", "table", :table,
     [
       {"Tachyon", "tachyon.memory.put",
        "`Tachyon.Table.put/3`, `storage: :memory`, in the log when it returns"},
       {"Tachyon", "tachyon.mapped.put", "the same, `storage: :mapped`"},
       {"Tachyon", "tachyon.file.put", "the same, `storage: :file`"},
       {"peer", "ets.put", "`:ets.insert/2` (in RAM only)"},
       {"peer", "dets.put", "`:dets.insert/2`"},
       {"peer", "bitcask.put", "`:bitcask.put/3`"}
     ]},
    {"Sequencer and Bus: round trip", "sequencer", :latency,
     [
       {"Tachyon", "tachyon.sequencer.roundtrip",
        "an Elixir process publishes on the bus (`delivery: :poll`) and waits for its own message"},
       {"Tachyon", "tachyon.sequencer.roundtrip.loss",
        "the same, 1% of the bus's datagrams dropped"},
       {"Tachyon", "tachyon.sequencer.roundtrip.native", "the same from a Rust member loop"},
       {"peer", "beam.dist.roundtrip",
        "a GenServer sequencer on a second BEAM node: `:disk_log`, then sends over distribution"},
       {"floor", "raw.relay.roundtrip",
        "the same datagrams through a Rust relay: no sequencing, no log"},
       {"floor", "tachyon.echo", "a UDP echo (`Tachyon.Echo`) of the message"}
     ]},
    {"Sequencer and Bus: throughput", "sequencer", :rate,
     [
       {"Tachyon", "tachyon.sequencer.throughput",
        "an Elixir member publishes and receives, one message per datagram"},
       {"Tachyon", "tachyon.sequencer.throughput.batched", "the same, 64 messages per command"},
       {"Tachyon", "tachyon.sequencer.throughput.native",
        "a Rust member, one message per datagram"},
       {"Tachyon", "tachyon.sequencer.throughput.batched.native",
        "a Rust member, 64 messages per command"},
       {"floor", "raw.relay.throughput",
        "the same datagrams through a Rust relay: no sequencing, no log"},
       {"floor", "raw.relay.throughput.batched", "the same, batched"}
     ]},
    {"Sequencer and Bus with `durability: :fsync`: round trip", "sequencer", :latency,
     [
       {"Tachyon", "tachyon.sequencer.roundtrip.fsync",
        "the round trip from an Elixir process with `durability: :fsync`: delivered once on the disk"},
       {"Tachyon", "tachyon.sequencer.roundtrip.native.fsync",
        "the same from a Rust member loop"},
       {"Tachyon", "tachyon.sequencer.group3.roundtrip.fsync",
        "through a group of three nodes: on the disks of two"},
       {"Tachyon", "tachyon.sequencer.group3.roundtrip.native.fsync",
        "the same from a Rust member loop"},
       {"Tachyon", "tachyon.sequencer.roundtrip",
        "one node, `durability: :replicated` (the default): in its page cache"},
       {"Tachyon", "tachyon.sequencer.group3.roundtrip",
        "a group of three, `:replicated`: in the page cache of two"},
       {"floor", "raw.fdatasync",
        "a Rust loop on the same disk: one bus entry written (`pwrite`), then `fdatasync`"}
     ]},
    {"Sequencer and Bus with `durability: :fsync`: throughput", "sequencer", :rate,
     [
       {"Tachyon", "tachyon.sequencer.throughput.fsync",
        "an Elixir member publishes and receives, one message per datagram, `durability: :fsync`"},
       {"Tachyon", "tachyon.sequencer.throughput.batched.fsync",
        "the same, 64 messages per command"},
       {"Tachyon", "tachyon.sequencer.throughput.native.fsync",
        "a Rust member, one message per datagram"},
       {"Tachyon", "tachyon.sequencer.throughput.batched.native.fsync",
        "a Rust member, 64 messages per command"},
       {"Tachyon", "tachyon.sequencer.group3.throughput.fsync",
        "through a group of three, one message per datagram"},
       {"Tachyon", "tachyon.sequencer.group3.throughput.batched.fsync",
        "through a group of three, 64 messages per command"},
       {"Tachyon", "tachyon.sequencer.throughput",
        "one node, `durability: :replicated`, one message per datagram"},
       {"Tachyon", "tachyon.sequencer.throughput.batched",
        "one node, `:replicated`, 64 messages per command"},
       {"Tachyon", "tachyon.sequencer.group3.throughput",
        "a group of three, `:replicated`, one message per datagram"},
       {"Tachyon", "tachyon.sequencer.group3.throughput.batched",
        "a group of three, `:replicated`, 64 messages per command"},
       {"floor", "raw.fdatasync.throughput",
        "the same disk: 32 entries (a receive batch) per `pwrite` and `fdatasync`"},
       {"floor", "raw.fdatasync.throughput.batched", "the same, 32 x 64 entries per `fdatasync`"}
     ]},
    {"Table.Replicated: put", "failover", :latency,
     [
       {"Tachyon", "tachyon.table.replicated.put",
        "`Tachyon.Table.Replicated.put/3` through one sequencer node: publish, sequence, apply locally"},
       {"Tachyon", "tachyon.table.replicated.put.group3",
        "the same through a group of three nodes"},
       {"floor", "tachyon.table.put", "`Tachyon.Table.put/3` on a local table, not replicated"}
     ]}
  ]

  @doc """
  The Markdown of every part whose JSON file is in `dir`. Plot links are
  relative to `docs/` when `dir` is inside the current directory.
  """
  def markdown(dir) do
    docs = load(dir)

    if docs == %{} do
      Mix.raise("--summary #{dir}: no JSON file of a run there (mix tachyon.bench --json #{dir})")
    end

    # The tables whose first row (the case they are about, and the one
    # their ratios are to) ran; each part's goals and plot after its last.
    tables =
      for {title, bench, kind, [{_, first, _} | _] = rows} <- @parts,
          doc = docs[bench],
          find(docs, bench, first, doc),
          found =
            for({role, name, what} <- rows, c = find(docs, bench, name, doc), do: {role, c, what}),
          do: {title, bench, kind, found}

    last = for {_, bench, _, _} = t <- tables, into: %{}, do: {bench, t}

    parts =
      for {_, bench, _, _} = t <- tables do
        part(t, docs[bench], dir, last[bench] == t)
      end

    IO.iodata_to_binary(Enum.intersperse(parts, "\n"))
  end

  defp load(dir) do
    for path <- Path.wildcard(Path.join(dir, "*.json")), into: %{} do
      doc = path |> File.read!() |> JSON.decode!()
      {doc["bench"] || Path.basename(path, ".json"), doc}
    end
  end

  defp part({title, bench, kind, [{_, ref, _} | _] = found}, doc, dir, last?) do
    [
      "### #{title}\n\n",
      header(doc, ref),
      "\n",
      table(kind, found, ref, doc),
      if(last?, do: [goals(doc), plot_link(bench, dir)], else: [])
    ]
  end

  # A row's case: by name in its own part (or another part's, `{bench, name}`);
  # Table's cases carry the value size and processes, 256-byte and 1 process
  # preferred.
  defp find(docs, _bench, {other, name}, _doc), do: docs[other] && find_case(docs[other], name)

  defp find(_docs, "table", name, doc) do
    if name == "nif.noop", do: find_case(doc, name), else: table_case(doc, name, "1p")
  end

  defp find(_docs, _bench, name, doc), do: find_case(doc, name)

  defp find_case(doc, name), do: Enum.find(doc["cases"], &(&1["name"] == name))

  defp table_case(doc, prefix, procs) do
    cases =
      Enum.filter(doc["cases"], &(&1["name"] =~ ~r/^#{Regex.escape(prefix)}\.\d+\.#{procs}$/))

    Enum.find(cases, &(&1["size"] == 256)) || List.first(cases)
  end

  defp header(doc, ref) do
    m = doc["machine"] || %{}
    command = if doc["command"], do: "`#{doc["command"]}`", else: "(not recorded in the JSON)"
    # (A case may say its own warm-up: the fsync round trips run fewer.)
    w = ref["warmup"] || doc["warmup"]
    warmup = if w, do: " after #{Report.delimit(w)} warm-up", else: ""

    size =
      if is_number(ref["size"]) and ref["size"] > 0, do: ", #{ref["size"]} bytes each", else: ""

    [
      "Command: #{command} (part `#{doc["bench"]}`); ",
      "first row: #{Report.delimit(ref["messages"])} measured#{size}#{warmup}.\n",
      "Machine: #{m["cpu"]}, #{m["cores"]} cores, #{m["memory_gib"]} GiB, Linux #{m["kernel"]}, ",
      "OTP #{m["otp"]}, Elixir #{m["elixir"]}; part finished #{m["date"]}.\n"
    ]
  end

  defp table(:rate, rows, ref, _doc) do
    [
      "| | case | what | messages | messages/s | vs first row |\n",
      "|---|---|---|---:|---:|---:|\n",
      for {role, c, what} <- rows do
        "| #{role} | `#{c["name"]}` | #{what} | #{Report.delimit(c["messages"])} | " <>
          "#{Report.delimit(round(rate(c)))} | #{ratio(rate(c), rate(ref))} |\n"
      end
    ]
  end

  defp table(:latency, rows, ref, _doc) do
    [
      "| | case | what | messages | p50 | p99 | p99.9 | max | p50 vs first row |\n",
      "|---|---|---|---:|---:|---:|---:|---:|---:|\n",
      for {role, c, what} <- rows do
        "| #{role} | `#{c["name"]}` | #{what} | #{Report.delimit(c["messages"])} | " <>
          latencies(c) <> " | #{p50_ratio(role, c, ref)} |\n"
      end
    ]
  end

  defp table(:table, rows, ref, doc) do
    [
      "| | case | what | records | p50 | p99 | p99.9 | max | p50 vs first row | ops/s, 1 process | ops/s, 4 processes |\n",
      "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n",
      for {role, c, what} <- rows do
        name = c["name"]

        four =
          String.ends_with?(name, ".1p") &&
            find_case(doc, String.replace_suffix(name, ".1p", ".4p"))

        "| #{role} | `#{c["name"]}` | #{what} | #{records(c)} | " <>
          latencies(c) <>
          " | #{ratio(c["p50_ns"], ref["p50_ns"])} | #{Report.delimit(round(c["ops_per_sec"]))} | " <>
          if(four, do: Report.delimit(round(four["ops_per_sec"])), else: "") <> " |\n"
      end
    ]
  end

  # A loop that only reads the clock has no p50 to compare: its max counts.
  defp p50_ratio("machine", _c, _ref), do: "-"
  defp p50_ratio(_role, c, ref), do: ratio(c["p50_ns"], ref["p50_ns"])

  # Report.ratio/2, with "< 0.01x" rather than a ratio that rounds to 0.
  defp ratio(a, b) when is_number(a) and is_number(b) and b > 0 and a / b < 0.01, do: "< 0.01x"
  defp ratio(a, b), do: Report.ratio(a, b)

  defp records(%{"records" => r}) when is_number(r), do: Report.delimit(r)
  defp records(_), do: ""

  defp latencies(c) do
    Enum.map_join(~w(p50_ns p99_ns p999_ns max_ns), " | ", &Report.short_ns(c[&1]))
  end

  defp rate(c), do: c["throughput_per_sec"] || c["msgs_per_sec"] || c["ops_per_sec"]

  # The part's goals as the run printed them (user words; checked or not).
  defp goals(%{"goals" => [_ | _] = goals}) do
    lines =
      for g <- goals do
        verdict =
          cond do
            not g["checked"] -> "not checked: a shorter run than the goal was set for"
            g["met"] -> "met"
            true -> "not met"
          end

        "- #{g["goal"]}: measured #{g["measured"]} (#{verdict})\n"
      end

    ["\nGoals of the part, as the run printed them:\n\n" | lines]
  end

  defp goals(_doc), do: []

  # The part's plot, if the run wrote one into dir.
  defp plot_link(bench, dir) do
    case dir |> Path.join("#{bench}-*.svg") |> Path.wildcard() |> Enum.sort() do
      [] -> ""
      svgs -> "\n![#{bench}: every case, latency by percentile](#{link(List.last(svgs))})\n"
    end
  end

  defp link(path) do
    abs = Path.expand(path)
    cwd = File.cwd!()

    if String.starts_with?(abs, cwd <> "/"),
      do: "../" <> Path.relative_to(abs, cwd),
      else: abs
  end
end

defmodule Tachyon.Bench.Table.Krati do
  @moduledoc false
  # `mix tachyon.bench table --krati`: Krati's published workload (see
  # ../shared/seeds/002_*): `--records` members (1,000,000 by default),
  # values of 0.5-2 KB (1 KB on average), then one writer and four readers
  # at once on random keys for `--krati-seconds` (10); reports reads per
  # reader per millisecond and writes per millisecond next to Krati's
  # figures, for each Tachyon mode, ETS and Bitcask.

  alias Tachyon.Bench.Report
  alias Tachyon.Bench.Progress
  alias Tachyon.Bench.Table.Engines

  @engines ~w(tachyon.memory tachyon.mapped tachyon.file ets bitcask)
  @readers 4
  # Krati's pages: reads per reader thread per ms, writes per ms.
  @krati %{
    "tachyon.memory" => "~1,000 reads (MemorySegment), 10-30 writes",
    "tachyon.mapped" => "~100 reads (MappedSegment), 10-30 writes",
    "tachyon.file" => "~100 reads (ChannelSegment), 10-30 writes"
  }

  def run(opts) do
    members = opts[:records]
    seconds = opts[:krati_seconds] || 10
    engines = String.split(opts[:engines] || Enum.join(@engines, ","), ",", trim: true)
    engines = Enum.filter(engines, &(&1 in @engines))

    IO.puts(
      "\nKrati workload: #{Report.delimit(members)} members, values 0.5-2 KB (1 KB average), " <>
        "then 1 writer + #{@readers} readers for #{seconds} s on random keys"
    )

    rows =
      for e <- engines do
        case Engines.setup(e, opts, 2048, members) do
          {:skip, why} ->
            IO.puts("  #{e}: skipped: #{why}")
            nil

          {:ok, st} ->
            try do
              load(st, e, members)
              mixed(st, e, members, seconds)
            after
              Engines.teardown(st)
            end
        end
      end
      |> Enum.reject(&is_nil/1)

    IO.puts(
      "\n  engine            reads/ms per reader (each)           writes/ms   Krati's figures"
    )

    for r <- rows do
      IO.puts(
        "  #{String.pad_trailing(r.engine, 16)}  #{String.pad_trailing(Enum.map_join(r.reads_per_ms, " ", &fmt/1), 34)}" <>
          "  #{String.pad_leading(fmt(r.writes_per_ms), 9)}   #{@krati[r.engine] || "-"}"
      )
    end

    rows
  end

  defp fmt(x), do: :erlang.float_to_binary(x * 1.0, decimals: 1)

  # A value of 512..2048 bytes, 1 KB on average (512 + 1536 * u^2).
  defp value(base, i) do
    u = :rand.uniform()
    n = 512 + trunc(1536 * u * u)
    <<i::64, binary_part(base, 0, n - 8)::binary>>
  end

  defp load(st, engine, members) do
    base = :crypto.strong_rand_bytes(2048)
    w = Engines.writer(st)
    p = Progress.new("#{engine} load", members)

    Enum.reduce(0..(members - 1)//1, p, fn i, p ->
      Engines.do_put(w.kind, w.t, <<"member:", i::64>>, value(base, i))
      if rem(i, 10_000) == 0, do: Progress.update(p, i), else: p
    end)
    |> Progress.done()

    Engines.release(w)
  end

  defp mixed(st, engine, members, seconds) do
    parent = self()
    base = :crypto.strong_rand_bytes(2048)
    deadline = System.monotonic_time(:millisecond) + seconds * 1000

    writer =
      spawn_link(fn ->
        w = Engines.writer(st)
        n = write_until(w, base, members, deadline, 0)
        Engines.release(w)
        send(parent, {:writes, n})
      end)

    readers =
      for r <- 1..@readers do
        spawn_link(fn ->
          rd = Engines.reader(st)
          n = read_until(rd, members, deadline, r * 7919, 0)
          Engines.release(rd)
          send(parent, {:reads, self(), n})
        end)
      end

    writes = receive do: ({:writes, n} -> n)
    reads = for pid <- readers, do: receive(do: ({:reads, ^pid, n} -> n))
    _ = writer
    ms = seconds * 1000

    row = %{
      engine: engine,
      reads_per_ms: Enum.map(reads, &(&1 / ms)),
      writes_per_ms: writes / ms
    }

    IO.puts(
      "  #{engine}: reads/ms per reader #{Enum.map_join(row.reads_per_ms, ", ", &fmt/1)}; writes/ms #{fmt(row.writes_per_ms)}"
    )

    row
  end

  # Checks the clock every 256 operations.
  defp write_until(w, base, members, deadline, n) do
    if rem(n, 256) == 0 and System.monotonic_time(:millisecond) >= deadline do
      n
    else
      i = :rand.uniform(members) - 1
      Engines.do_put(w.kind, w.t, <<"member:", i::64>>, value(base, i))
      write_until(w, base, members, deadline, n + 1)
    end
  end

  defp read_until(r, members, deadline, x, n) do
    if rem(n, 256) == 0 and System.monotonic_time(:millisecond) >= deadline do
      n
    else
      x = rem(x * 48_271, 2_147_483_647)
      Engines.do_get(r.kind, r.t, <<"member:", rem(x, members)::64>>)
      read_until(r, members, deadline, x, n + 1)
    end
  end
end

defmodule Tachyon.Bench.Table.Scale do
  @moduledoc false
  # `mix tachyon.bench table --scale`: --scale-records records of 256 bytes
  # in a mapped Tachyon.Table: put, get, close, reopen (recovery time).

  alias Tachyon.Bench
  alias Tachyon.Bench.Report
  alias Tachyon.Bench.Table.Engines
  alias Tachyon.Table

  @doc "The scale run; returns its put, get and reopen cases."
  def run(opts) do
    n = opts[:scale_records]
    IO.puts("\n== scale: #{Report.delimit(n)} records of 256 bytes (tachyon.mapped)")
    dir = Bench.tmp_dir(opts, "table-scale")
    value = :crypto.strong_rand_bytes(256)
    open_opts = [storage: :mapped, capacity: n, compaction_interval_ms: nil]
    {:ok, t} = Table.open(dir, open_opts)
    st = %{kind: :tachyon, t: t}
    h = Bench.hist()
    t0 = System.monotonic_time(:nanosecond)
    Engines.put_loop(:tachyon, t, value, 0, n, h)
    put_wall = System.monotonic_time(:nanosecond) - t0

    put =
      Bench.from_hist("scale.tachyon.mapped.put.256.1p", h, 256, %{
        unit: :perf_counter,
        json_extra: %{records: n, wall_ns: put_wall}
      })

    g = Bench.hist()
    Engines.get_loop(:tachyon, st.t, 17, n, min(n, opts[:messages]), g)

    get =
      Bench.from_hist("scale.tachyon.mapped.get.256.1p", g, 256, %{
        unit: :perf_counter,
        json_extra: %{records: n}
      })

    # Let the background thread write the hint files of sealed segments,
    # as it does in a running system, then close.
    wait_hints(dir, 120_000)
    :ok = Table.close(t)
    {:ok, %{size: bytes}} = dir_size(dir)
    t1 = System.monotonic_time(:nanosecond)
    {:ok, t} = Table.open(dir, open_opts)
    reopen_ns = System.monotonic_time(:nanosecond) - t1
    rec = t.recovery
    {:ok, ^n} = Table.count(t)
    {:ok, _} = Table.get(t, <<"key:", div(n, 2)::64>>)
    Table.close(t)
    File.rm_rf!(dir)

    IO.puts(
      "put: #{Report.delimit(round(n * 1.0e9 / put_wall))} ops/s (wall), get: avg #{Report.fmt_ns(get.avg_ns)}, " <>
        "#{Report.delimit(div(bytes, 1_048_576))} MiB on disk"
    )

    IO.puts(
      "reopen: #{:erlang.float_to_binary(reopen_ns / 1.0e9, decimals: 2)} s " <>
        "(#{rec.hinted_segments} segments from hints, #{rec.scanned_segments} scanned, #{Report.delimit(rec.keys)} keys)"
    )

    ns = reopen_ns * 1.0
    one = for k <- ~w(avg min max p50 p75 p90 p99 p999 p9999 p99999)a, into: %{}, do: {k, ns}

    reopen =
      Bench.from_report(
        "scale.tachyon.mapped.reopen",
        Map.merge(one, %{count: 1, stdev: 0.0}),
        256,
        %{
          json_extra: %{
            records: n,
            disk_bytes: bytes,
            hinted_segments: rec.hinted_segments,
            scanned_segments: rec.scanned_segments
          }
        }
      )

    [put, get, reopen]
  end

  defp wait_hints(dir, timeout_ms) do
    deadline = System.monotonic_time(:millisecond) + timeout_ms

    Stream.repeatedly(fn ->
      files = File.ls!(dir)
      segs = Enum.count(files, &String.ends_with?(&1, ".seg"))
      hints = Enum.count(files, &String.ends_with?(&1, ".hint"))

      cond do
        hints >= segs - 1 -> :done
        System.monotonic_time(:millisecond) > deadline -> :done
        true -> Process.sleep(50)
      end
    end)
    |> Enum.find(&(&1 == :done))
  end

  defp dir_size(dir) do
    bytes =
      dir
      |> File.ls!()
      |> Enum.map(&File.stat!(Path.join(dir, &1)).size)
      |> Enum.sum()

    {:ok, %{size: bytes}}
  end
end

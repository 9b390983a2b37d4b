defmodule Tachyon.Bench.Table.RocksDB do
  @moduledoc false
  # `mix tachyon.bench table --rocksdb`: Tachyon's core table against RocksDB
  # in Rust (native/bench_rocksdb, built by the bench), same workload; its
  # `CASE` lines are parsed into cases.

  alias Tachyon.Bench
  alias Tachyon.Bench.Report

  @doc "Says the comparison was skipped; no cases."
  def skip do
    IO.puts(
      "\nRust comparison with RocksDB: skipped (pass --rocksdb to build and run native/bench_rocksdb)"
    )

    []
  end

  @doc "Builds and runs native/bench_rocksdb; returns its cases (none if it cannot)."
  def run(opts, sizes, procs) do
    root = Path.expand("../../../..", __DIR__)
    crate = Path.join(root, "native/bench_rocksdb")
    lib_dir = "/usr/lib/x86_64-linux-gnu"

    cond do
      not File.exists?(Path.join(lib_dir, "librocksdb.so")) ->
        IO.puts(
          "\nRust comparison with RocksDB: skipped (librocksdb-dev is not installed; run bin/setup)"
        )

        []

      true ->
        IO.puts("\n== Rust: Tachyon core table vs RocksDB (building native/bench_rocksdb)")

        {out, status} =
          System.cmd("cargo", ["build", "--release", "--quiet"],
            cd: crate,
            env: [{"ROCKSDB_LIB_DIR", lib_dir}, {"CARGO_TERM_COLOR", "never"}],
            stderr_to_stdout: true
          )

        if status != 0 do
          IO.puts(out)
          IO.puts("Rust comparison with RocksDB: skipped (the bench crate did not build)")
          []
        else
          bin = Path.join(crate, "target/release/bench_rocksdb")
          dir = Bench.tmp_dir(opts, "rocksdb")

          args = [
            "--records",
            to_string(opts[:records]),
            "--gets",
            to_string(opts[:messages]),
            "--value-sizes",
            Enum.join(sizes, ","),
            "--threads",
            Enum.join(procs, ","),
            "--dir",
            dir
          ]

          port =
            Port.open({:spawn_executable, bin}, [:binary, :exit_status, {:line, 4096}, args: args])

          cases = collect_rust(port, [])
          File.rm_rf!(dir)
          print_rust(cases)
          cases
        end
    end
  end

  defp collect_rust(port, acc) do
    receive do
      {^port, {:data, {:eol, "CASE " <> rest}}} ->
        collect_rust(port, [parse_case(rest) | acc])

      {^port, {:data, {:eol, line}}} ->
        IO.puts(line)
        collect_rust(port, acc)

      {^port, {:data, {:noeol, line}}} ->
        IO.write(line)
        collect_rust(port, acc)

      {^port, {:exit_status, 0}} ->
        Enum.reverse(acc)

      {^port, {:exit_status, s}} ->
        IO.puts("bench_rocksdb exited with status #{s}")
        Enum.reverse(acc)
    end
  end

  # "name=... size=256 threads=1 records=... count=... avg=... p50=... ops=..."
  defp parse_case(text) do
    {kv, report} = Bench.parse_result_line(text)
    ops = Bench.parse_number(kv["ops"])

    Bench.from_report(kv["name"], report, trunc(Bench.parse_number(kv["size"])), %{
      ops_per_sec: ops,
      throughput: ops,
      json_extra: %{
        engine: "rust." <> (kv["engine"] || "?"),
        records: trunc(Bench.parse_number(kv["records"])),
        procs: trunc(Bench.parse_number(kv["threads"]))
      }
    })
  end

  defp print_rust([]), do: :ok
  defp print_rust(cases), do: Report.print_table(cases)

  @doc """
  The goals of the Rust cases: Tachyon's core table at least 5x RocksDB's
  operations per second, one thread, each value size and mode.
  """
  def goals(cases) do
    by = Bench.by_name(cases)

    for size <- Enum.uniq(Enum.map(cases, & &1.size)),
        op <- ~w(put get),
        mode <- ~w(memory mapped file),
        t = by["rust.tachyon.#{mode}.#{op}.#{size}.1t"],
        r = by["rust.rocksdb.#{op}.#{size}.1t"] do
      ratio = t.ops_per_sec / r.ops_per_sec

      Bench.goal(
        "Rust, #{op}s per second, Tachyon's core table (#{mode}) / RocksDB, #{size}-byte values",
        Bench.x(ratio),
        "at least 5x",
        ratio >= 5
      )
    end
  end
end

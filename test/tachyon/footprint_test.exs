defmodule Tachyon.FootprintTest do
  # What an application's directories cost on disk before it writes
  # anything, and what a full disk says.
  use ExUnit.Case, async: true

  import ExUnit.CaptureLog
  import Tachyon.TestHelpers

  alias Tachyon.{Sequencer, Store, Table}

  @mb 1_000_000

  # {allocated, apparent} bytes of every file under `root`: the sum of
  # st_blocks * 512 and of st_size.
  defp usage(root) do
    files =
      for f <- Path.wildcard(Path.join(root, "**"), match_dot: true), File.regular?(f), do: f

    {out, 0} = System.cmd("stat", ["-c", "%b %B %s" | files])

    out
    |> String.split("\n", trim: true)
    |> Enum.map(fn line ->
      [blocks, unit, size] = line |> String.split() |> Enum.map(&String.to_integer/1)
      {blocks * unit, size}
    end)
    |> Enum.reduce({0, 0}, fn {a, s}, {ta, ts} -> {ta + a, ts + s} end)
  end

  test "an empty app with a Store, a Table and a Sequencer takes under 50 MB" do
    root = tmp_dir("footprint")
    id = System.unique_integer([:positive])
    events = :"fp_events_#{id}"
    users = :"fp_users_#{id}"
    seq = :"fp_seq_#{id}"

    start_supervised!({Store, name: events, path: Path.join(root, "events")})
    start_supervised!({Table, name: users, path: Path.join(root, "users")})
    start_supervised!({Sequencer, name: seq, path: Path.join(root, "seq"), port: 0})

    # Each made its first segment and one prepared segment during its open.
    for dir <- ~w(events users seq) do
      segs = root |> Path.join(dir) |> File.ls!() |> Enum.filter(&String.ends_with?(&1, ".seg"))
      assert length(segs) == 2, "#{dir}: #{inspect(segs)}"
    end

    {allocated, apparent} = usage(root)
    assert allocated < 50 * @mb, "allocated #{allocated}"
    assert apparent < 50 * @mb, "apparent #{apparent}"
    # (2 + 4 MiB of data for each, with a store segment's header and index.)
    assert apparent > 18 * @mb

    # Written to, the parts grow their segments (and keep more ready).
    big = :binary.copy("x", 512 * 1024)
    for _ <- 1..40, do: {:ok, _} = Store.append(events, big)
    {:ok, %{segments: n}} = Store.stats(events)
    assert n in 4..5
  end

  @tag :tmpfs
  test "a full disk is :enospc, and says how much was asked for, and where" do
    dir = tmp_dir("enospc-detail")
    {_, 0} = System.cmd("mount", ["-t", "tmpfs", "-o", "size=4m", "tmpfs", dir])
    on_exit(fn -> System.cmd("umount", [dir]) end)
    big = 8 * 1024 * 1024

    # A store's first segment of 8 MiB of data: 8.5 MiB with its header
    # page and index.
    store = Path.join(dir, "store")

    log =
      capture_log(fn ->
        assert {:error, :enospc} = Store.open(store, initial_segment_size: big)
      end)

    assert log =~
             ~r"Tachyon.Store could not create a 8.5 MiB segment in #{store} \(no space left on device, [34]\.\d MiB free\)"

    e =
      capture_log_result(fn ->
        assert_raise Tachyon.Error, fn -> Store.open!(store, initial_segment_size: big) end
      end)

    assert %Tachyon.Error{reason: :enospc, part: Store, target: ^store} = e
    assert %{asked_bytes: 8_916_992, free_bytes: free} = e.details
    assert free > 3 * 1024 * 1024 and free <= 4 * 1024 * 1024
    assert e.message =~ "could not create a 8.5 MiB segment in #{store} (no space left on device"

    table = Path.join(dir, "table")

    log =
      capture_log(fn ->
        assert {:error, :enospc} = Table.open(table, initial_segment_size: big)
      end)

    assert log =~ "Tachyon.Table could not create a 8 MiB segment in #{table}"

    # The sequencer's log starts with 2 MiB of data: fill the disk first.
    File.write!(Path.join(dir, "filler"), :binary.copy(<<0>>, 3 * 1024 * 1024))
    seq = Path.join(dir, "seq")

    log =
      capture_log(fn ->
        assert {:error, :enospc} = Sequencer.start_link(path: seq, port: 0, wait: :park)
      end)

    assert log =~ ~r"Tachyon.Sequencer could not create a 2.1 MiB segment in #{seq} \("
  end

  defp capture_log_result(fun) do
    parent = self()
    capture_log(fn -> send(parent, {:result, fun.()}) end)
    assert_received {:result, result}
    result
  end
end

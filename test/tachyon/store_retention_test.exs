defmodule Tachyon.StoreRetentionTest do
  use ExUnit.Case, async: true

  import Tachyon.TestHelpers

  alias Tachyon.Store

  @seg 65_536
  # A segment file: its header page, its index (a slot per 64 bytes of
  # data, 1024 at least) and its data (docs/FORMAT.md).
  @file_len 4096 + 4096 + @seg

  defp msg(i), do: "message-#{i}-" <> :binary.copy(<<rem(i, 251)>>, 200)

  defp fill(s, from, to), do: for(i <- from..to, do: {:ok, ^i} = Store.append(s, msg(i)))

  # What `du` says the directory takes, in bytes (allocated blocks: the
  # segment files are allocated whole).
  defp du(dir) do
    # (A file removed while du looks is a complaint, and du's total is
    # still on its last line.)
    {out, _} = System.cmd("du", ["-s", "-B1", dir], stderr_to_stdout: true)

    out
    |> String.split("\n", trim: true)
    |> List.last()
    |> String.split()
    |> hd()
    |> String.to_integer()
  end

  test "retention by bytes keeps the disk bounded, reads below the first are trimmed, a reopen keeps the first" do
    dir = tmp_dir("retention-bytes")
    limit = 4 * @file_len

    opts = [
      segment_size: @seg,
      initial_segment_size: @seg,
      prepared_segments: 1,
      retention: [max_bytes: limit]
    ]

    {:ok, s} = Store.open(dir, opts)
    # About 300 segments' worth of messages.
    fill(s, 0, 79_999)
    {:ok, stats} = Store.stats(s)
    assert stats.disk_bytes <= limit
    assert stats.deleted_segments > 250
    {:ok, first} = Store.first_index(s)
    assert first == stats.first_index
    assert first > 70_000
    assert {:error, {:trimmed, ^first}} = Store.read(s, 0)
    assert {:error, {:trimmed, ^first}} = Store.read(s, first - 1)
    assert {:ok, msg(first)} == Store.read(s, first)
    assert {:error, :not_found} = Store.read(s, 80_000)
    # The directory: the segments kept, the active one's prepared next one
    # and the retired files not yet reused or removed (the pre-touch
    # thread's work): bounded, far below the 20 MB written.
    assert wait_until(fn -> du(dir) <= limit + 2 * @file_len + 64 * 1024 end), "du #{du(dir)}"
    :ok = Store.close(s)

    {:ok, s} = Store.open(dir, opts)
    assert {:ok, ^first} = Store.first_index(s)
    assert {:error, {:trimmed, ^first}} = Store.read(s, first - 1)
    assert {:ok, msg(79_999)} == Store.read(s, 79_999)
    assert Store.stream(s) |> Enum.count() == 80_000 - first
    :ok = Store.close(s)
  end

  test "retention by age deletes the segments sealed longer ago than max_age_ms" do
    dir = tmp_dir("retention-age")
    # Data that cannot wait for the age: a second is plenty on a loaded
    # machine and still a short test.
    opts = [segment_size: @seg, initial_segment_size: @seg, retention: [max_age_ms: 1000]]
    {:ok, s} = Store.open(dir, opts)
    fill(s, 0, 999)
    {:ok, before} = Store.stats(s)
    assert before.segments > 2
    assert {:ok, 0} = Store.first_index(s)
    # The pre-touch thread applies the age as time passes, with no append.
    assert wait_until(fn -> match?({:ok, %{segments: 1}}, Store.stats(s)) end, 500)
    {:ok, first} = Store.first_index(s)
    assert first > 0
    assert {:error, {:trimmed, ^first}} = Store.read(s, 0)
    assert {:ok, msg(999)} == Store.read(s, 999)
    :ok = Store.close(s)
  end

  test "retention is reported by telemetry" do
    Tachyon.TelemetryHelpers.forward([[:tachyon, :store, :retention]])
    dir = tmp_dir("retention-telemetry")
    {:ok, s} = Store.open(dir, segment_size: @seg, retention: [max_bytes: 2 * @file_len])
    fill(s, 0, 4999)
    :ok = Store.sync(s)

    assert_receive {:telemetry, [:tachyon, :store, :retention],
                    %{deleted_segments: n, deleted_bytes: b, first_index: f},
                    %{reason: :max_bytes}},
                   1000

    assert n > 0 and b > 0 and f > 0
    :ok = Store.close(s)
  end

  test "garbage retention options raise ArgumentError naming the option" do
    dir = tmp_dir("retention-opts")

    for bad <- [
          [max_bytes: 0],
          [max_bytes: -1],
          [max_age_ms: :soon],
          [max_bytes: 1, bogus: 2],
          :forever,
          [1, 2]
        ] do
      assert_raise ArgumentError, ~r/:retention/, fn -> Store.open(dir, retention: bad) end
    end

    assert Store.defaults().retention == [max_bytes: nil, max_age_ms: nil]
    # The former top-level spelling is still taken (deprecated).
    ExUnit.CaptureIO.capture_io(:stderr, fn ->
      {:ok, s} = Store.open(dir, max_bytes: 10 * @file_len)
      :ok = Store.close(s)
    end)
  end
end

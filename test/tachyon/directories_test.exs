defmodule Tachyon.DirectoriesTest do
  # Every directory knows what it holds (tachyon.meta): a part opening a
  # directory of another kind, or of a newer format, gets an error and the
  # directory is left exactly as it was (every file's bytes and the
  # listing, hidden files included, compared before and after).
  use ExUnit.Case, async: true

  import Bitwise
  import ExUnit.CaptureLog
  import Tachyon.TestHelpers

  alias Tachyon.{AsyncStore, Sequencer, Store, Table}

  @seg 64 * 1024

  # -- the directories -------------------------------------------------------

  defp store_dir(root) do
    dir = Path.join(root, "store")
    {:ok, s} = Store.open(dir, segment_size: @seg)
    for i <- 1..50, do: {:ok, _} = Store.append(s, "message #{i}")
    :ok = Store.close(s)
    dir
  end

  # A table of one key (its segment is cut to a few bytes at close: shorter
  # than a store's header page, which a store used to take for a leftover
  # of its own and delete), or of several segments.
  defp table_dir(root, name, keys) do
    dir = Path.join(root, name)

    {:ok, t} =
      Table.open(dir,
        segment_size: @seg,
        initial_segment_size: @seg,
        max_key_size: 100,
        max_value_size: 2000
      )

    for i <- 1..keys, do: :ok = Table.put(t, "key #{i}", :binary.copy("v", 1000))
    :ok = Table.close(t)
    dir
  end

  defp sequencer_dir(root) do
    dir = Path.join(root, "seq")
    {:ok, seq} = Sequencer.start_link(path: dir, port: 0, wait: :park)
    :ok = Sequencer.close(seq)
    dir
  end

  defp async_dir(root) do
    dir = Path.join(root, "async")
    {:ok, a} = AsyncStore.open(dir, segment_size: @seg)
    {:ok, _} = AsyncStore.append(a, "hello")
    {:ok, _} = AsyncStore.flush(a, 5000)
    :ok = AsyncStore.close(a)
    dir
  end

  # Every entry of `dir` (hidden ones too): its name, type, size and a hash
  # of its bytes.
  defp snapshot(dir) do
    for name <- Enum.sort(File.ls!(dir)) do
      path = Path.join(dir, name)
      st = File.stat!(path)
      bytes = if st.type == :regular, do: :erlang.md5(File.read!(path))
      {name, st.type, st.size, bytes}
    end
  end

  # Runs `fun` (an open expected to fail) and asserts it returned `error`
  # and changed nothing in `dir`.
  defp refused(dir, error, fun) do
    before = snapshot(dir)
    assert before != []
    capture_log(fn -> assert fun.() == error end)
    assert snapshot(dir) == before
  end

  defp manifest(dir), do: File.read!(Path.join(dir, "tachyon.meta"))

  # -- one part on another's directory ---------------------------------------

  test "a Store on a Table's directory, small or large, is refused and the Table keeps its data" do
    root = tmp_dir("dirs-store-on-table")

    for {name, keys} <- [{"small", 1}, {"large", 300}] do
      dir = table_dir(root, name, keys)
      assert length(Enum.filter(File.ls!(dir), &String.ends_with?(&1, ".seg"))) >= 1
      refused(dir, {:error, {:wrong_kind, :table}}, fn -> Store.open(dir) end)
      refused(dir, {:error, {:wrong_kind, :table}}, fn -> Store.open(dir, repair: true) end)
      refused(dir, {:error, {:wrong_kind, :table}}, fn -> Store.open(dir, access: :read) end)

      {:ok, t} = Table.open(dir)
      assert {:ok, ^keys} = Table.count(t)
      assert {:ok, _} = Table.get(t, "key #{keys}")
      :ok = Table.close(t)
    end
  end

  test "a Table on a Store's (or an AsyncStore's) directory is refused" do
    root = tmp_dir("dirs-table-on-store")

    for dir <- [store_dir(root), async_dir(root)] do
      refused(dir, {:error, {:wrong_kind, :store}}, fn -> Table.open(dir) end)

      capture_log(fn ->
        assert_raise Tachyon.Error, ~r/is a Tachyon.Store's directory/, fn ->
          Table.open!(dir)
        end
      end)

      # An AsyncStore writes a store: the Store opens it.
      {:ok, s} = Store.open(dir)
      assert {:ok, _} = Store.read(s, 0)
      :ok = Store.close(s)
    end
  end

  test "a Sequencer on a Store's or a Table's directory is refused" do
    root = tmp_dir("dirs-seq-on-others")
    store = store_dir(root)
    table = table_dir(root, "table", 1)

    for {dir, kind} <- [{store, :store}, {table, :table}] do
      refused(dir, {:error, {:wrong_kind, kind}}, fn ->
        Sequencer.start_link(path: dir, port: 0, wait: :park)
      end)
    end
  end

  test "a Store, a Table and an AsyncStore on a Sequencer's directory are refused; a reader reads its log" do
    root = tmp_dir("dirs-others-on-seq")
    dir = sequencer_dir(root)
    assert manifest(dir) =~ "kind=sequencer\n"
    error = {:error, {:wrong_kind, :sequencer}}

    refused(dir, error, fn -> Store.open(dir) end)
    refused(dir, error, fn -> Table.open(dir) end)
    refused(dir, error, fn -> AsyncStore.open(dir) end)

    # A store reader reads a sequencer's log (it is a store); nothing is
    # written.
    before = snapshot(dir)
    {:ok, r} = Store.open(dir, access: :read)
    assert {:ok, _} = Store.read(r, 0)
    :ok = Store.close(r)
    assert snapshot(dir) == before

    {:ok, seq} = Sequencer.start_link(path: dir, port: 0, wait: :park)
    :ok = Sequencer.close(seq)
  end

  test "an AsyncStore on a Table's directory is refused" do
    root = tmp_dir("dirs-async-on-table")
    dir = table_dir(root, "table", 3)
    refused(dir, {:error, {:wrong_kind, :table}}, fn -> AsyncStore.open(dir) end)
  end

  # -- formats, manifests, directories of no part -----------------------------

  # CRC32C (Castagnoli), bit by bit: the manifest's checksum.
  defp crc32c(bin) do
    bin
    |> :binary.bin_to_list()
    |> Enum.reduce(0xFFFFFFFF, fn byte, crc ->
      Enum.reduce(1..8, bxor(crc, byte), fn _, c ->
        if band(c, 1) == 1, do: bxor(c >>> 1, 0x82F63B78), else: c >>> 1
      end)
    end)
    |> bxor(0xFFFFFFFF)
  end

  defp signed(body) do
    crc = crc32c(body) |> Integer.to_string(16) |> String.downcase() |> String.pad_leading(8, "0")
    body <> "crc32c=" <> crc <> "\n"
  end

  test "our own manifest is what a CRC32C of its lines says" do
    dir = store_dir(tmp_dir("dirs-crc"))
    [body, _] = String.split(manifest(dir), ~r/(?=crc32c=)/)
    assert signed(body) == manifest(dir)
  end

  test "a directory of a newer format is refused, unchanged, by every part of its kind" do
    root = tmp_dir("dirs-newer")
    store = store_dir(root)
    File.write!(Path.join(store, "tachyon.meta"), signed("kind=store\nformat=3\n"))
    refused(store, {:error, {:unsupported_format, 3}}, fn -> Store.open(store) end)
    refused(store, {:error, {:unsupported_format, 3}}, fn -> Store.open(store, access: :read) end)
    refused(store, {:error, {:unsupported_format, 3}}, fn -> AsyncStore.open(store) end)

    table = table_dir(root, "table", 1)
    File.write!(Path.join(table, "tachyon.meta"), signed("kind=table\nformat=7\nnew_key=1\n"))
    refused(table, {:error, {:unsupported_format, 7}}, fn -> Table.open(table) end)
    # Another kind is that kind, whatever its format.
    refused(table, {:error, {:wrong_kind, :table}}, fn -> Store.open(table) end)

    seq = sequencer_dir(root)
    File.write!(Path.join(seq, "tachyon.meta"), signed("kind=sequencer\nformat=3\n"))

    refused(seq, {:error, {:unsupported_format, 3}}, fn ->
      Sequencer.start_link(path: seq, port: 0, wait: :park)
    end)

    capture_log(fn ->
      assert_raise Tachyon.Error, ~r/format 3, newer than this release/, fn ->
        Store.open!(store)
      end
    end)
  end

  test "a manifest that does not verify, or files of no part, are refused" do
    root = tmp_dir("dirs-garbage")
    dir = store_dir(root)
    meta = Path.join(dir, "tachyon.meta")
    File.write!(meta, String.replace(File.read!(meta), "kind=store", "kind=table"))

    log =
      capture_log(fn ->
        before = snapshot(dir)
        assert {:error, :corrupt} = Store.open(dir)
        assert {:error, :corrupt} = Table.open(dir)
        assert snapshot(dir) == before
      end)

    # (Other tests run meanwhile and log too: only this directory's lines.)
    log = log |> String.split("\n") |> Enum.filter(&(&1 =~ dir)) |> Enum.join("\n")
    assert log =~ "tachyon.meta does not verify"
    refute log =~ "repair: true"

    # A directory holding something else: no part claims it.
    other = Path.join(root, "other")
    File.mkdir_p!(other)
    File.write!(Path.join(other, "notes.txt"), "mine")
    refused(other, {:error, {:wrong_kind, :unknown}}, fn -> Store.open(other) end)
    refused(other, {:error, {:wrong_kind, :unknown}}, fn -> Table.open(other) end)

    refused(other, {:error, {:wrong_kind, :unknown}}, fn ->
      Sequencer.start_link(path: other, port: 0, wait: :park)
    end)
  end

  test "a new or empty directory becomes the opener's" do
    root = tmp_dir("dirs-new")

    {:ok, s} = Store.open(Path.join(root, "a/b/store"))
    :ok = Store.close(s)
    assert manifest(Path.join(root, "a/b/store")) =~ "kind=store\nformat=2\n"

    empty = Path.join(root, "empty")
    File.mkdir_p!(Path.join(empty, "lost+found"))
    {:ok, t} = Table.open(empty)
    :ok = Table.close(t)
    assert manifest(empty) =~ "kind=table\nformat=1\n"
  end

  # -- the release before manifests -------------------------------------------

  test "directories without a manifest open as their files' kind, and get one; others are refused" do
    root = tmp_dir("dirs-legacy")

    legacy = fn dir ->
      File.rm!(Path.join(dir, "tachyon.meta"))
      dir
    end

    store = legacy.(store_dir(root))
    table = legacy.(table_dir(root, "table", 300))
    seq = legacy.(sequencer_dir(root))

    refused(store, {:error, {:wrong_kind, :store}}, fn -> Table.open(store) end)

    refused(store, {:error, {:wrong_kind, :store}}, fn ->
      Sequencer.start_link(path: store, port: 0, wait: :park)
    end)

    refused(table, {:error, {:wrong_kind, :table}}, fn -> Store.open(table) end)
    refused(table, {:error, {:wrong_kind, :table}}, fn -> AsyncStore.open(table) end)
    # The vote file says it is a sequencer's, not a store's.
    refused(seq, {:error, {:wrong_kind, :sequencer}}, fn -> Store.open(seq) end)
    refused(seq, {:error, {:wrong_kind, :sequencer}}, fn -> Table.open(seq) end)

    {:ok, s} = Store.open(store)
    assert {:ok, "message 1"} = Store.read(s, 0)
    :ok = Store.close(s)
    assert manifest(store) =~ "kind=store\n"

    {:ok, t} = Table.open(table)
    assert {:ok, 300} = Table.count(t)
    :ok = Table.close(t)
    assert manifest(table) =~ "kind=table\n"

    {:ok, q} = Sequencer.start_link(path: seq, port: 0, wait: :park)
    :ok = Sequencer.close(q)
    assert manifest(seq) =~ "kind=sequencer\n"

    # Files of two kinds: ambiguous.
    mixed = Path.join(root, "mixed")
    File.mkdir_p!(mixed)

    for f <- File.ls!(store),
        f != "tachyon.meta",
        do: File.cp!(Path.join(store, f), Path.join(mixed, f))

    File.write!(Path.join(mixed, "00000000000000000009.hint"), "x")
    refused(mixed, {:error, {:wrong_kind, :unknown}}, fn -> Store.open(mixed) end)
    refused(mixed, {:error, {:wrong_kind, :unknown}}, fn -> Table.open(mixed) end)
  end

  # -- repair advice ----------------------------------------------------------

  test "repair is advised only for damage a repair cuts, with what it cuts, and not again with repair: true" do
    root = tmp_dir("dirs-damage")
    dir = Path.join(root, "store")
    {:ok, s} = Store.open(dir, segment_size: @seg)
    for i <- 0..199, do: {:ok, ^i} = Store.append(s, :binary.copy(<<i>>, 100))
    :ok = Store.close(s)

    # Record 10's payload: data starts after the header page and a page of
    # index slots; records are 8 + 104 bytes.
    file = Path.join(dir, "00000000000000000000.seg")
    off = 4096 + 4096 + 10 * 112 + 8 + 5
    bytes = File.read!(file)
    <<head::binary-size(off), b, rest::binary>> = bytes
    File.write!(file, <<head::binary, bxor(b, 0xFF), rest::binary>>)

    # (Other tests run meanwhile and log too: only this directory's lines.)
    mine = fn log -> log |> String.split("\n") |> Enum.filter(&(&1 =~ dir)) |> Enum.join("\n") end

    log =
      mine.(
        capture_log(fn -> assert {:error, :corrupt} = Store.open(dir, segment_size: @seg) end)
      )

    assert log =~ "in segment 0 at offset #{4096 + 4096 + 10 * 112}"
    assert log =~ "Opening with repair: true cuts the log there: 189 records"
    assert log =~ "(20.8 KiB) from segment 0"

    log =
      mine.(
        capture_log(fn ->
          {:ok, s} = Store.open(dir, segment_size: @seg, repair: true)
          assert {:ok, %{cut: :repaired, lost_records: 189}} = Store.recovery(s)
          :ok = Store.close(s)
        end)
      )

    refute log =~ "Opening with repair"
    assert log =~ "189 records lost"

    # A damaged segment header: a repair would not help, none is advised.
    <<h::binary-size(20), b, rest::binary>> = File.read!(file)
    File.write!(file, <<h::binary, bxor(b, 1), rest::binary>>)

    for opts <- [[], [repair: true]] do
      log = mine.(capture_log(fn -> assert {:error, :corrupt} = Store.open(dir, opts) end))
      assert log =~ "does not verify in segment 0 at offset 0"
      refute log =~ "repair: true"
    end
  end
end

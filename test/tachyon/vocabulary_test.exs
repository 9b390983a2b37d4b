defmodule Tachyon.VocabularyTest do
  # The names of the previous release still work for one release, each
  # with one deprecation warning (docs/VOCABULARY.md), and mean what the
  # new names mean. Not async: it captures the VM's standard error and
  # starts threads (see lifecycle_test.exs).
  use ExUnit.Case, async: false

  import ExUnit.CaptureIO
  import Tachyon.TestHelpers, only: [tmp_dir: 1]

  alias Tachyon.{AsyncStore, Bus, Echo, Options, Sequencer, Store, Table, UDP}

  setup do
    Options.reset_deprecations()
    on_exit(&Options.reset_deprecations/0)
  end

  # Runs `fun`, returns {its result, what it wrote to standard error}.
  defp warned(fun) do
    me = self()
    err = capture_io(:stderr, fn -> send(me, {:result, fun.()}) end)
    assert_receive {:result, result}, 1000
    {result, err}
  end

  test "Store: mode -> access, stats_interval -> stats_interval_ms" do
    dir = tmp_dir("vocab-store")
    {:ok, w} = Store.open(dir, segment_size: 65_536)

    {{:ok, r}, err} = warned(fn -> Store.open(dir, mode: :read) end)
    assert err =~ "Tachyon.Store: :mode is deprecated"
    assert err =~ "use :access"
    assert r.access == :read

    # Once per VM.
    {{:ok, r2}, ""} = warned(fn -> Store.open(dir, mode: :read) end)
    Enum.each([r, r2, w], &Store.close/1)

    name = :"vocab_store_#{System.unique_integer([:positive])}"

    {{:ok, _pid}, err} =
      warned(fn -> Store.start_link(name: name, path: tmp_dir("vocab-s2"), stats_interval: 50) end)

    assert err =~ ":stats_interval is deprecated"
    assert :ok = Store.close(name)
  end

  test "Table: mode -> storage" do
    {{:ok, t}, err} = warned(fn -> Table.open(tmp_dir("vocab-table"), mode: :memory) end)
    assert err =~ "Tachyon.Table: :mode is deprecated" and err =~ "use :storage"
    assert t.storage == :memory
    Table.close(t)
  end

  test "UDP: mode: :thread | :poll -> delivery: :messages | :poll, spin -> spin_us" do
    {{:ok, s}, err} = warned(fn -> UDP.open(0, ip: :loopback, mode: :thread, wait: :park) end)
    assert err =~ "Tachyon.UDP: :mode is deprecated" and err =~ "use :delivery"
    {:ok, addr} = UDP.sockname(s)
    :ok = UDP.send(s, addr, "m")
    assert_receive {:tachyon_udp, ^s, _, "m"}, 2000
    UDP.close(s)

    {{:ok, p}, err} = warned(fn -> UDP.open(0, ip: :loopback, mode: :poll, spin: 10) end)
    assert err =~ ":spin is deprecated"
    {:ok, addr} = UDP.sockname(p)
    :ok = UDP.send(p, addr, "p")
    assert {:ok, {_, "p"}} = UDP.recv(p, 2000)
    UDP.close(p)
  end

  test "AsyncStore: spin_timeout, linger and stats_interval carry their unit" do
    {{:ok, a}, err} =
      warned(fn ->
        AsyncStore.open(tmp_dir("vocab-async"),
          spin_timeout: 100,
          linger: 0,
          stats_interval: nil,
          wait: :park
        )
      end)

    assert err =~ ":spin_timeout is deprecated" and err =~ "use :spin_timeout_us"
    assert err =~ ":linger is deprecated" and err =~ "use :linger_us"
    assert {:ok, 0} = AsyncStore.append(a, "x")
    assert {:ok, 0} = AsyncStore.flush(a)
    :ok = AsyncStore.close(a)
  end

  test "giving a new name and its old one raises" do
    assert_raise ArgumentError, ~r/give :access only/, fn ->
      Store.open(tmp_dir("vocab-both"), mode: :read, access: :read)
    end
  end

  test "Echo and Sequencer: stop/2 -> close/1; an unknown server is {:error, :noproc}" do
    {:ok, echo} = Echo.start_link(wait: :park, stats_interval_ms: nil)
    {:ok, err} = warned(fn -> Echo.stop(echo) end)
    assert err =~ "Tachyon.Echo: stop/2 is deprecated" and err =~ "close/1"
    assert {:error, :noproc} = Echo.close(echo)
    assert {:error, :noproc} = Echo.close(:"vocab_nobody_#{System.unique_integer([:positive])}")

    dir = tmp_dir("vocab-seq")

    {{:ok, seq}, err} =
      warned(fn ->
        Sequencer.start_link(
          path: dir,
          wait: :park,
          heartbeat: 10,
          heartbeat_after: 10,
          election_timeout: 50,
          max_datagram: 1472,
          stats_interval: nil
        )
      end)

    for old <- [:heartbeat, :heartbeat_after, :election_timeout, :max_datagram, :stats_interval],
        do: assert(err =~ "#{inspect(old)} is deprecated")

    addr = Sequencer.address(seq)

    {{:ok, bus}, err} =
      warned(fn ->
        Bus.open(
          sequencer: addr,
          member_id: 1,
          mode: :poll,
          spin: 10,
          resend_after: 20,
          retransmit_after: 1000,
          hello_after: 30,
          connect_timeout: 5000
        )
      end)

    for old <- [:resend_after, :retransmit_after, :hello_after, :connect_timeout],
        do: assert(err =~ "#{inspect(old)} is deprecated")

    assert {:ok, _} = Bus.publish(bus, "v")
    assert {:ok, [{_, 1, "v"}]} = Bus.recv(bus, 5000)
    Bus.close(bus)

    {:ok, err} = warned(fn -> Sequencer.stop(seq) end)
    assert err =~ "Tachyon.Sequencer: stop/2 is deprecated"
    assert {:error, :noproc} = Sequencer.close(seq)
  end

  test "every deprecated option is listed in docs/VOCABULARY.md" do
    vocabulary = File.read!(Path.join(File.cwd!(), "docs/VOCABULARY.md"))

    schemas = [
      Store.Options.open_schema() ++ Store.Options.server_schema(),
      Table.Options.open_schema() ++ Table.Options.server_schema(),
      AsyncStore.Options.schema(),
      UDP.Options.udp_schema(),
      UDP.Options.echo_schema(),
      Sequencer.Options.sequencer_schema(),
      Sequencer.Options.bus_schema() ++ Sequencer.Options.bus_server_schema()
    ]

    for schema <- schemas, {old, new} <- Options.renames(schema) do
      assert vocabulary =~ "`#{inspect(old)}`", "#{inspect(old)} is not in VOCABULARY.md"
      assert vocabulary =~ "`#{inspect(new)}`", "#{inspect(new)} is not in VOCABULARY.md"
    end
  end
end

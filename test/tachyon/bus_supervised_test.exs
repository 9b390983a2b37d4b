defmodule Tachyon.BusSupervisedTest.Consumer do
  @moduledoc false
  # What a user writes: a process in the same static child list as the bus
  # that subscribes in its init/1 and handles the messages (here: forwards
  # them to the test).
  use GenServer

  def start_link(opts), do: GenServer.start_link(__MODULE__, opts, name: opts[:name])

  @impl true
  def init(opts) do
    if opts[:bus], do: :ok = Tachyon.Bus.subscribe(opts[:bus])
    {:ok, opts[:to]}
  end

  @impl true
  def handle_info({:tachyon_bus, _bus, _seq, _id, _data} = msg, to) do
    send(to, {:got, self(), msg})
    {:noreply, to}
  end

  def handle_info(_other, to), do: {:noreply, to}
end

defmodule Tachyon.BusSupervisedTest.App do
  @moduledoc false
  # An application that does what docs/FAILOVER.md used to show: a bus
  # started in Application.start/2 with `owner: self()`.
  use Application

  @impl true
  def start(_type, {test, seq, bus}) do
    send(test, {:app_self, self()})

    Supervisor.start_link(
      [{Tachyon.Bus, name: bus, sequencer: seq, member_id: 1, wait: :park, owner: self()}],
      strategy: :one_for_one
    )
  end
end

defmodule Tachyon.BusSupervisedTest do
  use ExUnit.Case, async: true

  import ExUnit.CaptureLog
  import Tachyon.TestHelpers, only: [tmp_dir: 1, wait_until: 1]

  alias Tachyon.{Bus, Sequencer}
  alias Tachyon.BusSupervisedTest.Consumer

  defp unique(label), do: :"#{label}_#{System.unique_integer([:positive])}"

  # A sequencer under the test's supervisor, by name (the bus takes it as
  # `sequencer: name`).
  defp start_seq do
    name = unique(:seq)
    start_supervised!({Sequencer, name: name, path: tmp_dir("bus-sup"), wait: :park})
    name
  end

  defp bus_spec(name, seq, id, extra \\ []),
    do: {Bus, [name: name, sequencer: seq, member_id: id, wait: :park] ++ extra}

  defp consumer(id, opts), do: Supervisor.child_spec({Consumer, opts}, id: id)

  # The user's tree (under the test's supervisor, stopped after the test).
  defp start_tree(children) do
    start_supervised!(%{
      id: make_ref(),
      start: {Supervisor, :start_link, [children, [strategy: :one_for_one]]},
      type: :supervisor
    })
  end

  defp got(from, data) do
    receive do
      {:got, ^from, {:tachyon_bus, _bus, _seq, _id, ^data}} -> :ok
    after
      5000 -> flunk("#{inspect(from)} did not get #{inspect(data)}")
    end
  end

  test "a static child list: the bus with no :owner, then a subscriber that receives" do
    seq = start_seq()
    bus = unique(:orders)
    test = self()
    sup = start_tree([bus_spec(bus, seq, 1), consumer(:c, name: unique(:c), bus: bus, to: test)])
    [c] = for {:c, pid, _, _} <- Supervisor.which_children(sup), do: pid

    {:ok, _} = Bus.publish(bus, "hello")
    got(c, "hello")
    assert {:ok, %{subscribers: 1, unheard: 0}} = Bus.stats(bus)
  end

  test "two subscribers both receive every message, in the same order" do
    seq = start_seq()
    bus = unique(:orders)
    test = self()

    start_tree([
      bus_spec(bus, seq, 1),
      consumer(:a, name: unique(:a), bus: bus, to: test),
      consumer(:b, name: unique(:b), bus: bus, to: test)
    ])

    {:ok, _} = Bus.publish_many(bus, ["1", "2", "3"])

    for _ <- 1..2 do
      assert_receive {:got, from, {:tachyon_bus, _, s1, 1, "1"}}, 5000
      assert_receive {:got, ^from, {:tachyon_bus, _, s2, 1, "2"}}, 5000
      assert_receive {:got, ^from, {:tachyon_bus, _, s3, 1, "3"}}, 5000
      assert s1 < s2 and s2 < s3
    end

    refute_received {:got, _, _}
  end

  test "a subscriber that exits is dropped; unsubscribe/1 stops the messages" do
    seq = start_seq()
    bus = unique(:orders)
    start_tree([bus_spec(bus, seq, 1)])
    test = self()

    sub =
      spawn(fn ->
        :ok = Bus.subscribe(bus)
        send(test, :subscribed)
        receive do: (:stop -> :ok), after: (10_000 -> :ok)
      end)

    :ok = Bus.subscribe(bus)
    assert_receive :subscribed, 5000
    assert {:ok, %{subscribers: 2}} = Bus.stats(bus)

    send(sub, :stop)
    assert wait_until(fn -> match?({:ok, %{subscribers: 1}}, Bus.stats(bus)) end)
    {:ok, _} = Bus.publish(bus, "still here")
    assert_receive {:tachyon_bus, _, _, 1, "still here"}, 5000

    :ok = Bus.unsubscribe(bus)
    assert {:ok, %{subscribers: 0}} = Bus.stats(bus)
    :ok = Bus.unsubscribe(bus)
  end

  test "owner: a registered name, looked up at start and again after the owner restarts" do
    seq = start_seq()
    bus = unique(:orders)
    owner = unique(:owner)
    test = self()

    # The owner first: the bus looks its name up when it starts. :rest_for_one
    # is not needed: the owner's exit restarts the bus on its own.
    sup =
      start_tree([consumer(:owner, name: owner, to: test), bus_spec(bus, seq, 1, owner: owner)])

    first = Process.whereis(owner)
    {:ok, _} = Bus.publish(bus, "to the owner")
    got(first, "to the owner")

    bus_pid = Process.whereis(bus)

    log =
      capture_log(fn ->
        Process.exit(first, :kill)

        # (The name is registered before init/1 runs: wait for the member.)
        assert wait_until(fn ->
                 Process.whereis(owner) not in [nil, first] and
                   Process.whereis(bus) not in [nil, bus_pid] and
                   match?({:ok, _}, Bus.stats(bus))
               end)
      end)

    assert log =~ "{:owner_down, #{inspect(owner)}, :killed}"

    second = Process.whereis(owner)
    assert {:ok, _} = Bus.publish(bus, "to the new owner")
    got(second, "to the new owner")
    assert Process.alive?(sup)
  end

  test "an owner given as a name that no process has: the start fails and says why" do
    seq = start_seq()
    # start_link/1's process exits with the reason it returns.
    Process.flag(:trap_exit, true)

    log =
      capture_log(fn ->
        assert {:error, :noproc} =
                 Bus.start_link(sequencer: seq, member_id: 1, owner: :nobody_by_that_name)
      end)

    assert log =~ "no process is registered as its owner :nobody_by_that_name"
  end

  test "publish, publish_many, stats, ack and close by name and by pid" do
    seq = start_seq()
    bus = unique(:orders)
    start_tree([bus_spec(bus, seq, 1)])
    pid = Process.whereis(bus)
    :ok = Bus.subscribe(bus)

    assert {:ok, 1} = Bus.publish(bus, "by name")
    assert {:ok, 2} = Bus.publish(pid, ["by ", "pid"])
    assert {:ok, 4} = Bus.publish_many(pid, ["a", "b"])
    assert_receive {:tachyon_bus, member, _, 1, "by name"}, 5000
    assert_receive {:tachyon_bus, ^member, _, 1, "by pid"}, 5000
    assert member == Bus.bus(bus)
    assert :ok = Bus.ack(bus, 1)
    assert {:ok, %{published: 4}} = Bus.stats(bus)
    assert {:ok, %{published: 4}} = Bus.stats(pid)

    assert :ok = Bus.close(pid)
    refute Process.alive?(pid)
    assert {:error, :noproc} = Bus.publish(bus, "gone")
    assert {:error, :noproc} = Bus.publish(pid, "gone")
    assert {:error, :noproc} = Bus.stats(bus)
    assert {:error, :noproc} = Bus.close(bus)
    assert {:error, :noproc} = Bus.publish(:no_such_bus, "x")
  end

  test "messages delivered to nobody: a warning naming the bus and what to do" do
    Tachyon.TelemetryHelpers.forward([[:tachyon, :bus, :unheard]])
    seq = start_seq()
    bus = unique(:orders)
    start_tree([bus_spec(bus, seq, 1)])

    log =
      capture_log(fn ->
        {:ok, _} = Bus.publish(bus, "into the void")
        assert_receive {:telemetry, [:tachyon, :bus, :unheard], %{count: 1}, %{name: ^bus}}, 5000
      end)

    assert log =~ "Tachyon.Bus #{inspect(bus)} (member 1) delivered 1 message(s) to nobody"
    assert log =~ "no process subscribed and it has no :owner"
    assert log =~ "Tachyon.Bus.subscribe(#{inspect(bus)})"
    assert {:ok, %{unheard: 1}} = Bus.stats(bus)

    # Once per period: more messages now are counted, not warned about.
    {:ok, _} = Bus.publish(bus, "again")
    assert wait_until(fn -> match?({:ok, %{unheard: 2}}, Bus.stats(bus)) end)
    refute_receive {:telemetry, [:tachyon, :bus, :unheard], _, _}, 200
  end

  test "an owner that is a supervisor drops the messages: not a receiver, and a warning" do
    Tachyon.TelemetryHelpers.forward([[:tachyon, :bus, :unheard]])
    seq = start_seq()
    bus = unique(:orders)
    # What `owner: self()` in a supervisor's init/1 gives.
    sup = start_tree([])
    {:ok, _} = Supervisor.start_child(sup, bus_spec(bus, seq, 1, owner: sup))

    log =
      capture_log(fn ->
        {:ok, _} = Bus.publish(bus, "x")
        assert_receive {:telemetry, [:tachyon, :bus, :unheard], %{count: 1}, _}, 5000
      end)

    assert log =~ "its owner #{inspect(sup)} is a supervisor, which drops every message"
  end

  test "owner: self() in Application.start/2 is the application master: a warning" do
    Tachyon.TelemetryHelpers.forward([[:tachyon, :bus, :unheard]])
    seq = start_seq()
    bus = unique(:orders)
    app = unique(:tachyon_bus_test_app)
    mod = Tachyon.BusSupervisedTest.App
    spec = [description: ~c"test", vsn: ~c"0", modules: [mod], registered: [], applications: []]
    :ok = :application.load({:application, app, spec ++ [mod: {mod, {self(), seq, bus}}]})
    on_exit(fn -> :application.unload(app) end)
    :ok = Application.start(app)
    on_exit(fn -> Application.stop(app) end)
    assert_receive {:app_self, master}, 5000

    log =
      capture_log(fn ->
        {:ok, _} = Bus.publish(bus, "x")
        assert_receive {:telemetry, [:tachyon, :bus, :unheard], %{count: 1}, _}, 5000
      end)

    assert log =~ "its owner #{inspect(master)} is the application master"
  end

  test "a restart of the bus's process (a kill, a crash) keeps its subscribers" do
    seq = start_seq()
    bus = unique(:orders)
    test = self()

    sup =
      start_tree([
        bus_spec(bus, seq, 1),
        consumer(:a, name: unique(:a), bus: bus, to: test),
        consumer(:b, name: unique(:b), bus: bus, to: test)
      ])

    [a, b] = for id <- [:a, :b], {^id, pid, _, _} <- Supervisor.which_children(sup), do: pid

    for {how, n} <- [{:kill, 1}, {:boom, 2}] do
      old = Process.whereis(bus)

      capture_log(fn ->
        Process.exit(old, how)
        # (The name is registered before init/1 runs: wait for the member.)
        assert wait_until(fn ->
                 Process.whereis(bus) not in [nil, old] and
                   match?({:ok, %{subscribers: 2}}, Bus.stats(bus))
               end)
      end)

      {:ok, _} = Bus.publish(bus, "after #{n}")
      got(a, "after #{n}")
      got(b, "after #{n}")
    end
  end

  test "a subscription by name may come before the bus starts" do
    seq = start_seq()
    bus = unique(:orders)
    :ok = Bus.subscribe(bus)
    start_tree([bus_spec(bus, seq, 1)])
    {:ok, _} = Bus.publish(bus, "early bird")
    assert_receive {:tachyon_bus, _, _, 1, "early bird"}, 5000
    :ok = Bus.unsubscribe(bus)
  end

  test ":poll keeps the owner-only semantics: subscribe is refused, :owner required" do
    seq = start_seq()
    bus = unique(:orders)

    assert_raise ArgumentError, ~r/delivery: :poll needs :owner/, fn ->
      Bus.start_link(name: bus, sequencer: seq, member_id: 1, delivery: :poll)
    end

    {:ok, _} =
      Bus.start_link(name: bus, sequencer: seq, member_id: 1, delivery: :poll, owner: self())

    assert {:error, :not_messages} = Bus.subscribe(bus)
    {:ok, _} = Bus.publish(bus, "polled")
    assert {:ok, [{_, 1, "polled"}]} = Bus.recv(bus, 5000)
    :ok = Bus.close(bus)
  end

  test "the defaults, from Rust where the other parts take theirs" do
    d = Bus.defaults()
    assert %{max_datagram_size: 1472, max_message_size: 1_048_576, resend_after_ms: 20} = d
    assert %{delivery: :messages, owner: nil, name: nil, stats_interval_ms: 1000} = d
    refute Map.has_key?(d, :sequencer)
  end
end

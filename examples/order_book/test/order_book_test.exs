defmodule OrderBookTest do
  use ExUnit.Case

  alias OrderBook.Desk

  test "Tachyon's parts run under this app's own supervisor" do
    for {id, _pid, _type, _mods} <- Supervisor.which_children(OrderBook.Supervisor) do
      assert id in [
               {Tachyon.Store, :order_audit_log},
               {Tachyon.AsyncStore, :order_audit},
               {Tachyon.Echo, :order_health},
               {Tachyon.Table, :trader_counts},
               {Tachyon.Sequencer, :order_sequencer},
               {Tachyon.Bus, :order_feed},
               OrderBook.Tape,
               :desk_a,
               :desk_b
             ]
    end

    # The health-check echo answers.
    {ip, port} = Tachyon.Echo.address(:order_health)
    {:ok, sock} = :gen_udp.open(0, [:binary, active: false])
    :ok = :gen_udp.send(sock, ip, port, "ping")
    assert {:ok, {_, _, "ping"}} = :gen_udp.recv(sock, 0, 2000)
  end

  test "orders placed on two desks end in the same book on both" do
    :ok = Desk.place(:desk_a, "ACME", :buy, 100, "alice")
    :ok = Desk.place(:desk_b, "ACME", :buy, 101, "bob")
    :ok = Desk.place(:desk_a, "ACME", :sell, 105, "alice")
    :ok = Desk.place(:desk_b, "ACME", :sell, 104, "bob")
    :ok = Desk.place(:desk_a, "INIT", :buy, 7, "carol")

    # Desk b has applied everything desk a has (and the reverse).
    book_a = Desk.book(:desk_a)
    {:ok, %{applied: last}} = Tachyon.StateMachine.stats(GenServer.call(:desk_a, :book))
    :ok = Tachyon.StateMachine.sync(GenServer.call(:desk_b, :book), last)
    assert Desk.book(:desk_b) == book_a
    assert book_a[{"ACME", :buy}] == 101
    assert book_a[{"ACME", :sell}] == 104
    assert Desk.best(:desk_b, "INIT", :buy) == 7

    # The tape (a subscriber of the bus member in the static child list)
    # saw every write of both desks, in sequence order.
    :ok = OrderBook.Tape.await(last)
    tape = OrderBook.Tape.seen()
    seqs = for {seq, _} <- tape, do: seq
    assert seqs == Enum.sort(Enum.uniq(seqs))
    assert length(for {_, id} <- tape, id in [1, 2], do: id) >= 5

    # Anyone publishes on the member by its name; the tape sees it too.
    # (Nothing else is published meanwhile: it is sequenced right after
    # the desks' last write.)
    {:ok, _} = Tachyon.Bus.publish(:order_feed, "market open")
    :ok = OrderBook.Tape.await(last + 1)
    assert {_, 3} = List.last(OrderBook.Tape.seen())

    # Every order is in the audit log, and counted per trader.
    {:ok, _} = Tachyon.AsyncStore.flush(:order_audit)
    assert {:ok, <<2::64>>} = Tachyon.Table.get(:trader_counts, "alice")
  end
end

defmodule OrderBook.Desk do
  @moduledoc """
  A trading desk: places orders on the bus and keeps the book (best price
  per instrument and side) in a `Tachyon.StateMachine` (`OrderBook.Book`),
  so every desk holds the same book, built in the same order of events.
  """
  use GenServer

  alias Tachyon.StateMachine

  def start_link(opts), do: GenServer.start_link(__MODULE__, opts, name: opts[:name])

  @doc "Places a limit order: `side` is :buy or :sell. Returns once on this desk's book."
  def place(desk, instrument, side, price, trader) when side in [:buy, :sell] do
    GenServer.call(desk, {:place, instrument, side, price, trader})
  end

  @doc "The best price for `instrument` and `side` on this desk's book."
  def best(desk, instrument, side) do
    {:ok, price} =
      StateMachine.query(GenServer.call(desk, :book), &Map.get(&1, {instrument, side}))

    price
  end

  @doc "The whole book: %{{instrument, side} => price}."
  def book(desk) do
    {:ok, book} = StateMachine.state(GenServer.call(desk, :book))
    book
  end

  @impl true
  def init(opts) do
    addr = Tachyon.Sequencer.address(:order_sequencer)

    # Desk a snapshots the book every 1000 orders: a desk started later
    # restores it and applies only the orders after it.
    {:ok, book} =
      StateMachine.start_link(
        module: OrderBook.Book,
        bus: [sequencer: addr, member_id: opts[:member_id]],
        snapshot_every: if(opts[:member_id] == 1, do: 1000)
      )

    {:ok, %{book: book}}
  end

  @impl true
  def handle_call(:book, _from, s), do: {:reply, s.book, s}

  def handle_call({:place, instrument, side, price, trader}, _from, s) do
    # The audit log gets every order; the counter table counts per trader.
    {:ok, _} =
      Tachyon.AsyncStore.append(
        :order_audit,
        :erlang.term_to_binary({instrument, side, price, trader})
      )

    count =
      case Tachyon.Table.get(:trader_counts, trader) do
        {:ok, <<n::64>>} -> n
        :error -> 0
      end

    :ok = Tachyon.Table.put(:trader_counts, trader, <<count + 1::64>>)

    # The book decides, in the bus's order, whether the price is better.
    {:ok, :ok} =
      StateMachine.command(s.book, OrderBook.Book.encode(instrument, side, price, trader))

    {:reply, :ok, s}
  end
end

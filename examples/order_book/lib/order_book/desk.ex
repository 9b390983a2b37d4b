defmodule OrderBook.Desk do
  @moduledoc """
  A trading desk: places orders on the bus and keeps the book (best price
  per instrument and side) in a replicated table, so every desk holds the
  same book in the same order of events.
  """
  use GenServer

  alias Tachyon.Table.Replicated

  def start_link(opts), do: GenServer.start_link(__MODULE__, opts, name: opts[:name])

  @doc "Places a limit order: `side` is :buy or :sell. Returns once on this desk's book."
  def place(desk, instrument, side, price, trader) when side in [:buy, :sell] do
    GenServer.call(desk, {:place, instrument, side, price, trader})
  end

  @doc "The best price for `instrument` and `side` on this desk's book."
  def best(desk, instrument, side) do
    case Replicated.get(GenServer.call(desk, :book), key(instrument, side)) do
      {:ok, <<price::64>>} -> price
      :error -> nil
    end
  end

  @doc "The whole book: %{{instrument, side} => price}."
  def book(desk) do
    GenServer.call(desk, :book)
    |> Replicated.to_map()
    |> Map.new(fn {k, <<p::64>>} -> {:erlang.binary_to_term(k), p} end)
  end

  @impl true
  def init(opts) do
    addr = Tachyon.Sequencer.address(:order_sequencer)

    {:ok, book} =
      Replicated.start_link(
        path: Path.join(opts[:dir], "book-#{opts[:member_id]}"),
        sequencer: addr,
        member_id: opts[:member_id]
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

    better? = fn old -> if side == :buy, do: price > old, else: price < old end

    reply =
      case Replicated.get(s.book, key(instrument, side)) do
        {:ok, <<old::64>>} ->
          if better?.(old),
            do: Replicated.put(s.book, key(instrument, side), <<price::64>>),
            else: :ok

        :error ->
          Replicated.put(s.book, key(instrument, side), <<price::64>>)
      end

    {:reply, reply, s}
  end

  defp key(instrument, side), do: :erlang.term_to_binary({instrument, side})
end

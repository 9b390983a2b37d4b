defmodule OrderBook.Book do
  @moduledoc """
  The book (best price per instrument and side) as a `Tachyon.StateMachine`:
  every order on the bus is applied, in sequence order, by every desk's
  runner, so every desk holds the same book; the best price is decided in
  `apply/3` from the order of the bus, never from a desk's read of its own
  copy (two desks placing at once cannot lose the better price). A desk
  started later restores the latest snapshot of the book and applies the
  orders after it.
  """
  @behaviour Tachyon.StateMachine

  @doc "An order, as published on the bus."
  def encode(instrument, side, price, trader),
    do: :erlang.term_to_binary({:order, instrument, side, price, trader})

  @impl true
  def init(_args), do: %{}

  @impl true
  def apply(_meta, data, book) do
    case decode(data) do
      {:order, instrument, side, price, _trader} ->
        key = {instrument, side}
        better? = fn old -> if side == :buy, do: price > old, else: price < old end

        case book do
          %{^key => old} -> if better?.(old), do: {:ok, %{book | key => price}}, else: {:ok, book}
          _ -> {:ok, Map.put(book, key, price)}
        end

      # Something else on the bus (the tape's notes, "market open"): not an order.
      :other ->
        {:ignored, book}
    end
  end

  @impl true
  def snapshot(book), do: :erlang.term_to_binary(book)

  @impl true
  def restore(bin, _initial), do: :erlang.binary_to_term(bin, [:safe])

  defp decode(data) do
    case :erlang.binary_to_term(data, [:safe]) do
      {:order, _, side, price, _} = order when side in [:buy, :sell] and is_integer(price) ->
        order

      _ ->
        :other
    end
  rescue
    ArgumentError -> :other
  end
end

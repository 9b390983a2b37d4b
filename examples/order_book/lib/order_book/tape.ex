defmodule OrderBook.Tape do
  @moduledoc """
  The tape: every message of the order bus, in sequence order, as the bus
  member `:order_feed` delivers it. That member is a `Tachyon.Bus` in the
  application's static child list, with no owner: the tape subscribes to
  it by name in `init/1` (any number of processes could), and the
  subscription holds if the member's process restarts.
  """
  use GenServer

  def start_link(opts), do: GenServer.start_link(__MODULE__, opts, name: __MODULE__)

  @doc "Every `{seq, member_id}` seen, oldest first."
  def seen, do: GenServer.call(__MODULE__, :seen)

  @doc "Returns once the tape has seen sequence number `seq` or a later one."
  def await(seq, timeout \\ 5000), do: GenServer.call(__MODULE__, {:await, seq}, timeout)

  @impl true
  def init(opts) do
    :ok = Tachyon.Bus.subscribe(Keyword.fetch!(opts, :bus))
    {:ok, %{seen: [], last: 0, waiting: []}}
  end

  @impl true
  def handle_info({:tachyon_bus, _bus, seq, member_id, _data}, s) do
    {ready, waiting} = Enum.split_with(s.waiting, fn {n, _from} -> n <= seq end)
    for {_n, from} <- ready, do: GenServer.reply(from, :ok)
    {:noreply, %{s | seen: [{seq, member_id} | s.seen], last: seq, waiting: waiting}}
  end

  # The bus's events ({:tachyon_bus_event, ...}): nothing to do here.
  def handle_info(_other, s), do: {:noreply, s}

  @impl true
  def handle_call(:seen, _from, s), do: {:reply, Enum.reverse(s.seen), s}

  def handle_call({:await, n}, from, s) do
    if s.last >= n,
      do: {:reply, :ok, s},
      else: {:noreply, %{s | waiting: [{n, from} | s.waiting]}}
  end
end

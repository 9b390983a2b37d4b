defmodule Tachyon.LossyRelay do
  @moduledoc false
  # A UDP relay between members and a sequencer that drops, duplicates and
  # reorders datagrams both ways (this kernel has no netem). Members send
  # to `address/1`; each member gets its own upstream socket, so the
  # sequencer's unicast fan-out comes back through the relay.

  use GenServer

  def start_link(upstream, opts), do: GenServer.start_link(__MODULE__, {upstream, opts})
  def address(r), do: GenServer.call(r, :address)
  def stats(r), do: GenServer.call(r, :stats)

  @impl true
  def init({upstream, opts}) do
    {:ok, front} =
      :gen_udp.open(0, [:binary, ip: {127, 0, 0, 1}, active: true, recbuf: 4_000_000])

    :rand.seed(:exsss, {1, 2, 3})

    {:ok,
     %{
       front: front,
       up: upstream,
       socks: %{},
       peers: %{},
       held: nil,
       p: Map.new(opts),
       stats: %{dropped: 0, duplicated: 0, reordered: 0, relayed: 0}
     }}
  end

  @impl true
  def handle_call(:address, _from, s) do
    {:ok, port} = :inet.port(s.front)
    {:reply, {{127, 0, 0, 1}, port}, s}
  end

  def handle_call(:stats, _from, s), do: {:reply, s.stats, s}

  @impl true
  def handle_info({:udp, front, ip, port, data}, %{front: front} = s) do
    {sock, s} = upstream_for(s, {ip, port})
    {:noreply, forward(s, sock, s.up, data)}
  end

  def handle_info({:udp, sock, _ip, _port, data}, s) do
    case Map.fetch(s.peers, sock) do
      {:ok, member} -> {:noreply, forward(s, s.front, member, data)}
      :error -> {:noreply, s}
    end
  end

  def handle_info(_, s), do: {:noreply, s}

  defp upstream_for(s, member) do
    case Map.fetch(s.socks, member) do
      {:ok, sock} ->
        {sock, s}

      :error ->
        {:ok, sock} =
          :gen_udp.open(0, [:binary, ip: {127, 0, 0, 1}, active: true, recbuf: 4_000_000])

        {sock,
         %{s | socks: Map.put(s.socks, member, sock), peers: Map.put(s.peers, sock, member)}}
    end
  end

  defp forward(s, sock, {ip, port} = to, data) do
    r = :rand.uniform()

    cond do
      r < s.p.drop ->
        bump(s, :dropped)

      r < s.p.drop + s.p.dup ->
        :gen_udp.send(sock, ip, port, data)
        :gen_udp.send(sock, ip, port, data)
        bump(s, :duplicated)

      r < s.p.drop + s.p.dup + s.p.reorder and s.held == nil ->
        # Held back and sent after the next datagram.
        bump(%{s | held: {sock, to, data}}, :reordered)

      true ->
        :gen_udp.send(sock, ip, port, data)

        case s.held do
          {hs, {hip, hport}, hd} -> :gen_udp.send(hs, hip, hport, hd)
          nil -> :ok
        end

        bump(%{s | held: nil}, :relayed)
    end
  end

  defp bump(s, k), do: %{s | stats: Map.update!(s.stats, k, &(&1 + 1))}
end

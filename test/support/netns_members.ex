defmodule Tachyon.NetNS.Members do
  @moduledoc false
  # The members of the across-hosts tests, run in their own OS process (in
  # the members' namespace): `run/1` opens `count` members on a multicast
  # bus, prints "members joined", waits for "go" on stdin... no: stdin is
  # the watchdog; it starts when the file `go` exists in `dir`, publishes
  # `per` messages each ("id:i"), prints "members half" when member 1 is
  # halfway, and writes what each received (and its stats) to `dir/out`.

  alias Tachyon.Bus

  def run([seqs, bus_port, iface, count, per, dir]) do
    Application.ensure_all_started(:tachyon)
    seqs = for a <- String.split(seqs, ","), do: addr(a)
    {:ok, ip} = :inet.parse_address(String.to_charlist(iface))
    bus = {:multicast, {{239, 77, 0, 1}, String.to_integer(bus_port)}, interface: ip, ttl: 1}
    {count, per} = {String.to_integer(count), String.to_integer(per)}
    parent = self()

    tasks =
      for id <- 1..count do
        Task.async(fn ->
          {:ok, b} =
            Bus.open(
              sequencer: seqs,
              member_id: id,
              bus: bus,
              ip: ip,
              mode: :poll,
              connect_timeout: 20_000
            )

          send(parent, {:joined, id})
          wait_file(Path.join(dir, "go"))
          got = publish(b, id, per, count * per, [])
          {:ok, st} = Bus.stats(b)
          {id, Enum.reverse(got), st}
        end)
      end

    for id <- 1..count, do: receive(do: ({:joined, ^id} -> :ok))
    IO.puts("members joined")
    results = Enum.map(tasks, &Task.await(&1, :infinity))
    File.write!(Path.join(dir, "out"), :erlang.term_to_binary(results))
    IO.puts("members done")
  end

  defp addr(s) do
    [h, p] = String.split(s, ":")
    {:ok, ip} = :inet.parse_address(String.to_charlist(h))
    {ip, String.to_integer(p)}
  end

  defp wait_file(f) do
    unless File.exists?(f) do
      Process.sleep(5)
      wait_file(f)
    end
  end

  defp publish(b, id, per, total, acc) do
    acc =
      Enum.reduce(1..per, acc, fn i, acc ->
        if id == 1 and i == div(per, 2), do: IO.puts("members half")
        pub(b, "#{id}:#{i}")
        if rem(i, 16) == 0, do: drain(b, acc, 0), else: acc
      end)

    finish(b, acc, total)
  end

  defp pub(b, d) do
    case Bus.publish(b, d) do
      {:ok, _} ->
        :ok

      {:error, :busy} ->
        Process.sleep(1)
        pub(b, d)
    end
  end

  defp drain(b, acc, t) do
    case Bus.recv(b, t) do
      {:ok, l} -> Enum.reverse(l, acc)
      {:error, :timeout} -> acc
    end
  end

  defp finish(b, acc, total) do
    if length(acc) >= total and match?({:ok, %{epoch: e}} when e >= 1, Bus.stats(b)),
      do: acc,
      else: finish(b, drain(b, acc, 100), total)
  end
end

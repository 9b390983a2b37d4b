defmodule Tachyon.Bench.Echo.Flood do
  @moduledoc false
  # The `tachyon.udp.flood` case of `mix tachyon.bench echo`: backpressure,
  # not latency. A burst into a Tachyon.UDP socket whose owner is not reading,
  # with max_queue :infinity and bounded, and gen_udp (active: true) for
  # comparison.

  alias Tachyon.Bench.Report

  @loopback {127, 0, 0, 1}
  # Receive buffers of the flood sockets (capped by net.core.rmem_max): big
  # enough that a burst waits in the kernel rather than being dropped while
  # the receiving side catches up.
  @flood_recbuf 4 * 1024 * 1024

  @doc "Runs the flood and prints its table; returns the runs (the JSON's `backpressure`)."
  def run(cfg) do
    IO.puts(
      "\n== tachyon.udp.flood: #{Report.delimit(cfg.flood)} datagrams of #{cfg.size} bytes sent as fast as " <>
        "one process can (Tachyon.UDP.send) to a socket (recbuf #{div(@flood_recbuf, 1_048_576)} MiB) whose " <>
        "owner is suspended (not scheduled, not reading); then the owner is resumed and drains its mailbox " <>
        "(acking each message)."
    )

    runs = [
      flood_tachyon("tachyon.udp max_queue: :infinity", :infinity, cfg),
      flood_tachyon("tachyon.udp max_queue: #{cfg.max_queue}", cfg.max_queue, cfg),
      flood_gen_udp("gen_udp active: true", cfg)
    ]

    header = [
      "socket",
      "sent",
      "delivered",
      "dropped",
      "kernel drops",
      "owner mailbox",
      "owner heap",
      "binaries",
      "drain"
    ]

    rows =
      for r <- runs do
        [
          r["socket"],
          Report.delimit(r["sent"]),
          Report.delimit(r["delivered"]),
          Report.delimit(r["dropped"]),
          Report.delimit(r["kernel_drops"]),
          Report.delimit(r["mailbox"]),
          mb(r["owner_memory"]),
          mb(r["binary_memory"]),
          Report.short_ns(r["drain_ns"])
        ]
      end

    Report.print_rows(header, rows)

    IO.puts(
      "(delivered: messages put in the owner's mailbox; dropped: over max_queue; kernel drops: " <>
        "receive buffer full; owner heap: Process.info(:memory) with the mailbox; binaries: " <>
        "growth of :erlang.memory(:binary); drain: time for the owner to receive them all)"
    )

    runs
  end

  defp mb(bytes), do: "#{:erlang.float_to_binary(bytes / 1_048_576, decimals: 1)} MB"

  defp flood_tachyon(label, max_queue, cfg) do
    owner = spawn_owner()

    {:ok, rx} =
      Tachyon.UDP.open(0,
        ip: :loopback,
        owner: owner,
        max_queue: max_queue,
        recbuf: @flood_recbuf
      )

    {:ok, tx} = Tachyon.UDP.open(0, ip: :loopback)
    {:ok, dest} = Tachyon.UDP.sockname(rx)
    payload = :binary.copy(<<0x5A>>, cfg.size)
    bin0 = :erlang.memory(:binary)
    :erlang.suspend_process(owner)
    t0 = System.monotonic_time()
    sent = flood_send(cfg.flood, fn -> Tachyon.UDP.send(tx, dest, payload) end, 0)
    send_ns = System.convert_time_unit(System.monotonic_time() - t0, :native, :nanosecond)

    settle(fn ->
      {:ok, s} = Tachyon.UDP.stats(rx)
      s.received + s.kernel_drops
    end)

    {:ok, s} = Tachyon.UDP.stats(rx)
    {mailbox, mem} = owner_info(owner)
    bin = :erlang.memory(:binary) - bin0
    drain_ns = drain(owner, {:tachyon, rx}, mailbox)
    Tachyon.UDP.close(rx)
    Tachyon.UDP.close(tx)
    Process.exit(owner, :kill)

    %{
      "socket" => label,
      "sent" => sent,
      "send_ns" => send_ns,
      "received" => s.received,
      "delivered" => s.delivered,
      "dropped" => s.dropped,
      "kernel_drops" => s.kernel_drops,
      "mailbox" => mailbox,
      "owner_memory" => mem,
      "binary_memory" => max(bin, 0),
      "drain_ns" => drain_ns
    }
  end

  defp flood_gen_udp(label, cfg) do
    owner = spawn_owner()
    {:ok, rx} = :gen_udp.open(0, [:binary, ip: @loopback, active: true, recbuf: @flood_recbuf])

    :ok = :gen_udp.controlling_process(rx, owner)
    {:ok, port} = :inet.port(rx)
    {:ok, tx} = Tachyon.UDP.open(0, ip: :loopback)
    payload = :binary.copy(<<0x5A>>, cfg.size)
    bin0 = :erlang.memory(:binary)
    :erlang.suspend_process(owner)
    t0 = System.monotonic_time()
    sent = flood_send(cfg.flood, fn -> Tachyon.UDP.send(tx, {@loopback, port}, payload) end, 0)
    send_ns = System.convert_time_unit(System.monotonic_time() - t0, :native, :nanosecond)
    settle(fn -> owner_info(owner) |> elem(0) end)
    {mailbox, mem} = owner_info(owner)
    bin = :erlang.memory(:binary) - bin0
    drops = udp_drops(port)
    drain_ns = drain(owner, :gen_udp, mailbox)
    :gen_udp.close(rx)
    Tachyon.UDP.close(tx)
    Process.exit(owner, :kill)

    %{
      "socket" => label,
      "sent" => sent,
      "send_ns" => send_ns,
      "received" => mailbox,
      "delivered" => mailbox,
      "dropped" => 0,
      "kernel_drops" => drops,
      "mailbox" => mailbox,
      "owner_memory" => mem,
      "binary_memory" => max(bin, 0),
      "drain_ns" => drain_ns
    }
  end

  defp flood_send(0, _fun, sent), do: sent

  defp flood_send(n, fun, sent) do
    case fun.() do
      :ok -> flood_send(n - 1, fun, sent + 1)
      {:error, :eagain} -> flood_send(n - 1, fun, sent)
    end
  end

  # Waits until `fun` stops changing for 50 ms (the receiving side drained
  # the kernel buffer), at most 10 s.
  defp settle(fun, last \\ nil, since \\ nil, t0 \\ System.monotonic_time(:millisecond)) do
    now = System.monotonic_time(:millisecond)
    v = fun.()

    cond do
      now - t0 > 10_000 -> :ok
      v == last and now - since >= 50 -> :ok
      v == last -> settle_later(fun, last, since, t0)
      true -> settle_later(fun, v, now, t0)
    end
  end

  defp settle_later(fun, v, since, t0) do
    Process.sleep(5)
    settle(fun, v, since, t0)
  end

  # The owner is suspended during the flood (a consumer that does not get to
  # run: its mailbox grows, and no message reschedules it); once resumed it
  # receives every message (acking Tachyon.UDP ones) and reports the time.
  defp spawn_owner do
    spawn(fn ->
      receive do
        {:drain, from, kind, count} ->
          t0 = System.monotonic_time()
          owner_drain(kind, count)
          send(from, {:drained, System.monotonic_time() - t0})
      end
    end)
  end

  defp owner_drain(_kind, 0), do: :ok

  defp owner_drain({:tachyon, sock} = kind, n) do
    receive do
      {:tachyon_udp, ^sock, _, _} ->
        Tachyon.UDP.ack(sock)
        owner_drain(kind, n - 1)
    after
      5000 -> :timeout
    end
  end

  defp owner_drain(:gen_udp, n) do
    receive do
      {:udp, _, _, _, _} -> owner_drain(:gen_udp, n - 1)
    after
      5000 -> :timeout
    end
  end

  defp drain(owner, kind, count) do
    # The :drain message queues behind the datagrams: selective receive
    # finds it after scanning them once, so the scan is in the time too.
    :erlang.resume_process(owner)
    send(owner, {:drain, self(), kind, count})

    receive do
      {:drained, native} -> System.convert_time_unit(native, :native, :nanosecond)
    after
      60_000 -> Mix.raise("the flood owner did not drain its mailbox")
    end
  end

  defp owner_info(pid) do
    case Process.info(pid, [:message_queue_len, :memory]) do
      [message_queue_len: len, memory: mem] -> {len, mem}
      nil -> {0, 0}
    end
  end

  # Kernel drops of a gen_udp socket, from /proc/net/udp (the last column).
  defp udp_drops(port) do
    hex = port |> Integer.to_string(16) |> String.pad_leading(4, "0")

    with {:ok, text} <- File.read("/proc/net/udp"),
         line when is_binary(line) <-
           text |> String.split("\n") |> Enum.find(&String.contains?(&1, ":#{hex} ")) do
      line |> String.split() |> List.last() |> String.to_integer()
    else
      _ -> 0
    end
  end
end

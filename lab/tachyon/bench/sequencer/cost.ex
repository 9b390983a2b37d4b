defmodule Tachyon.Bench.Sequencer.Cost do
  @moduledoc false
  # What a committed message costs, wherever the work runs: the CPU time of
  # every node's OS process and of this VM (the member: its thread, the
  # bench loop and the BEAM around them), from /proc/<pid>/stat before and
  # after a case, divided by the messages the primary sequenced meanwhile
  # (its `messages` stat); and the UDP datagrams this host sent per message
  # (/proc/net/snmp `Udp: OutDatagrams`: every process of the host counts,
  # so it is exact on an otherwise quiet machine only).
  #
  # A case's `note` gains "cpu/msg: primary X us, follower Y us, member Z
  # us, total T us; D datagrams/msg"; its JSON `cpu_us_per_msg` (by
  # process and "total") and `datagrams_per_msg`.

  alias Tachyon.Sequencer.OSProcess

  @doc "Counters before a case: `nodes` is `[{os_process, role}]`."
  def start(nodes) do
    %{
      nodes: nodes,
      cpu: Enum.map(nodes, fn {p, _} -> ticks(p.os_pid) end),
      self: ticks(System.pid()),
      udp: out_datagrams(),
      messages: sequenced(nodes)
    }
  end

  @doc "The case `c` with what it cost since `t0` (`start/1`)."
  def finish(c, t0) do
    msgs = sequenced(t0.nodes) - t0.messages

    if msgs <= 0 do
      c
    else
      per = fn ticks -> Float.round(ticks * 1.0e6 / tick_hz() / msgs, 2) end

      procs =
        Enum.zip(t0.nodes, t0.cpu)
        |> Enum.with_index()
        |> Enum.map(fn {{{p, role}, before}, i} ->
          {"#{role} #{i}", per.(ticks(p.os_pid) - before)}
        end)

      procs = procs ++ [{"member (bench VM)", per.(ticks(System.pid()) - t0.self)}]
      total = Float.round(Enum.sum(Enum.map(procs, &elem(&1, 1))), 2)
      dgrams = Float.round((out_datagrams() - t0.udp) / msgs, 2)

      text =
        "; cpu/msg: " <>
          Enum.map_join(procs, ", ", fn {who, us} -> "#{who} #{us} us" end) <>
          ", total #{total} us; #{dgrams} datagrams/msg (host)"

      extra = Map.get(c, :json_extra, %{})

      %{c | note: c.note <> text}
      |> Map.put(
        :json_extra,
        Map.merge(extra, %{
          "cpu_us_per_msg" => Map.new([{"total", total} | procs]),
          "datagrams_per_msg" => dgrams,
          "committed" => msgs
        })
      )
      |> Map.put(:cpu_us_per_msg, total)
    end
  end

  # The primary's sequenced messages (the first node given is the primary).
  defp sequenced([{p, _} | _]) do
    case OSProcess.stats(p) do
      {:ok, %{messages: n}} when is_integer(n) -> n
      _ -> 0
    end
  end

  # utime + stime of a process (all its threads, those gone included), in
  # clock ticks: fields 14 and 15 of /proc/<pid>/stat, counted after the
  # command's closing parenthesis (the command may hold spaces).
  defp ticks(pid) do
    with {:ok, text} <- File.read("/proc/#{pid}/stat"),
         [_, rest] <- :binary.split(text, ") ", [:trim]) do
      fields = String.split(rest, " ")
      String.to_integer(Enum.at(fields, 11)) + String.to_integer(Enum.at(fields, 12))
    else
      _ -> 0
    end
  end

  defp tick_hz do
    case :persistent_term.get({__MODULE__, :hz}, nil) do
      nil ->
        hz =
          case System.cmd("getconf", ["CLK_TCK"], stderr_to_stdout: true) do
            {out, 0} -> String.to_integer(String.trim(out))
            _ -> 100
          end

        :persistent_term.put({__MODULE__, :hz}, hz)
        hz

      hz ->
        hz
    end
  end

  defp out_datagrams do
    with {:ok, text} <- File.read("/proc/net/snmp"),
         [names, values | _] <- for("Udp: " <> l <- String.split(text, "\n"), do: l),
         i when i != nil <- Enum.find_index(String.split(names), &(&1 == "OutDatagrams")) do
      String.to_integer(Enum.at(String.split(values), i))
    else
      _ -> 0
    end
  end
end

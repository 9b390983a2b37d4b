defmodule Tachyon.Sequencer.OSProcess do
  @moduledoc false
  # A sequencer in an OS process of its own (`mix tachyon.sequencer` run by
  # `elixir` with this node's code path): for the benchmark (as the seed
  # runs it) and the kill -9 tests.

  @doc """
  Starts one; returns `%{port, os_pid, address: {ip, port}, session}` once
  it listens. `opts`: `netns: name` runs it in that network namespace.
  """
  def start(args, timeout \\ 30_000, opts \\ []) do
    p = spawn_elixir("Mix.Tasks.Tachyon.Sequencer.run(#{inspect(args)})", opts)
    await_ready(p, System.monotonic_time(:millisecond) + timeout)
  end

  @doc """
  A primary on loopback (any port) and a standby following it on a free
  port, each in its own OS process; returns `{primary, standby}` once the
  standby follows. `extra`: more arguments for the standby.
  """
  def start_pair(pdir, sdir, extra \\ []) do
    {:ok, p} = start(["--path", pdir, "--port", "0", "--wait", "backoff"])
    {_, pport} = p.address
    sport = free_port()

    {:ok, s} =
      start(
        ["--path", sdir, "--port", "#{sport}", "--role", "standby"] ++
          ["--primary", "127.0.0.1:#{pport}", "--wait", "backoff"] ++ extra
      )

    {:ok, _} = await_line(s, "tachyon.sequencer following", 20_000)
    {p, Map.put(s, :address, {{127, 0, 0, 1}, sport})}
  end

  @doc "A UDP port free on loopback now."
  def free_port do
    {:ok, s} = :gen_udp.open(0, ip: {127, 0, 0, 1})
    {:ok, p} = :inet.port(s)
    :gen_udp.close(s)
    p
  end

  @doc """
  Runs `code` in a new `elixir` OS process with this node's code path
  (halting when its stdin closes: when this VM dies, so does it); its
  output comes as port messages (`await_line/3`).
  """
  def spawn_elixir(code, opts \\ []) do
    elixir = System.find_executable("elixir") || raise "elixir not found"

    paths =
      Enum.flat_map([:tachyon], fn app -> ["-pa", List.to_string(:code.lib_dir(app, :ebin))] end)

    code = "spawn(fn -> IO.read(:stdio, :eof); System.halt(0) end); " <> code
    # Its schedulers have nothing to do: no busy-waiting that would take a
    # core from the threads.
    args = ["--erl", "+sbwt none +sbwtdcpu none +sbwtdio none"] ++ paths ++ ["-e", code]

    {exe, args} =
      case opts[:netns] do
        nil -> {elixir, args}
        ns -> {System.find_executable("ip"), ["netns", "exec", ns, elixir | args]}
      end

    port =
      Port.open({:spawn_executable, exe}, [
        :binary,
        :exit_status,
        :stderr_to_stdout,
        {:line, 4096},
        args: args
      ])

    {:os_pid, os_pid} = Port.info(port, :os_pid)
    %{port: port, os_pid: os_pid}
  end

  defp await_ready(p, deadline) do
    left = max(0, deadline - System.monotonic_time(:millisecond))

    receive do
      {port, {:data, {:eol, "tachyon.sequencer ready " <> rest}}} when port == p.port ->
        [hostport, "session", s, "next_seq", n | _role] = String.split(rest, " ")
        [host, portno] = String.split(hostport, ":")
        {:ok, ip} = :inet.parse_address(String.to_charlist(host))

        {:ok,
         Map.merge(p, %{
           address: {ip, String.to_integer(portno)},
           session: String.to_integer(s),
           next_seq: String.to_integer(n)
         })}

      {port, {:data, _other}} when port == p.port ->
        await_ready(p, deadline)

      {port, {:exit_status, st}} when port == p.port ->
        {:error, {:exit_status, st}}
    after
      left ->
        kill(p)
        {:error, :timeout}
    end
  end

  @doc "Waits for a line starting with `prefix` from the process; returns the rest."
  def await_line(%{port: port}, prefix, timeout \\ 30_000) do
    receive do
      {^port, {:data, {:eol, line}}} ->
        if String.starts_with?(line, prefix),
          do: {:ok, String.replace_prefix(line, prefix, "")},
          else: await_line(%{port: port}, prefix, timeout)
    after
      timeout -> {:error, :timeout}
    end
  end

  @doc "kill -9, and waits for the exit."
  def kill(%{port: port, os_pid: os_pid}) do
    System.cmd("kill", ["-9", Integer.to_string(os_pid)], stderr_to_stdout: true)

    receive do
      {^port, {:exit_status, _}} -> :ok
    after
      5000 -> :ok
    end
  end
end

defmodule Tachyon.TestHelpers do
  @moduledoc false

  @doc "A fresh temporary directory, removed when the test exits."
  def tmp_dir(label) do
    dir =
      Path.join(System.tmp_dir!(), "tachyon-test-#{label}-#{System.unique_integer([:positive])}")

    File.rm_rf!(dir)
    File.mkdir_p!(dir)
    ExUnit.Callbacks.on_exit(fn -> File.rm_rf!(dir) end)
    dir
  end

  @doc """
  How much busier than its cores the machine has been over the last
  minute: the 1-minute load average over the online schedulers, at least
  1.0 (1.0 where /proc/loadavg is missing). A bound on elapsed time that a
  test derives from work it waits for is multiplied by it: on a 2-core
  machine with a load average of 10, every runnable thread waits for a core
  about five times as long.
  """
  def load_factor do
    case Tachyon.Bench.Sequencer.Durability.load() do
      nil -> 1.0
      l -> max(1.0, l / System.schedulers_online())
    end
  end

  @doc "Polls `fun` every 20 ms (collecting garbage first) until it is true; false after `tries`."
  def wait_until(fun, tries \\ 150) do
    cond do
      fun.() ->
        true

      tries == 0 ->
        false

      true ->
        :erlang.garbage_collect()
        Process.sleep(20)
        wait_until(fun, tries - 1)
    end
  end

  @doc """
  Number of this VM's OS threads whose name starts with `prefix` (Linux
  truncates thread names to 15 bytes: "tachyon-pretouch" reads "tachyon-pretouc").
  """
  def threads_named(prefix) do
    case File.ls("/proc/self/task") do
      {:ok, tasks} ->
        Enum.count(tasks, fn t ->
          case File.read("/proc/self/task/#{t}/comm") do
            {:ok, name} -> String.starts_with?(name, prefix)
            _ -> false
          end
        end)

      _ ->
        0
    end
  end

  @doc "Number of OS threads of this VM."
  def os_threads do
    case File.ls("/proc/self/task") do
      {:ok, tasks} -> length(tasks)
      _ -> 0
    end
  end

  @doc "The code path arguments that let a child `elixir` load Tachyon."
  def child_code_path do
    ebin = :code.lib_dir(:tachyon) |> Path.join("ebin")
    ["-pa", ebin]
  end

  @doc """
  Starts `elixir -e code` in a child OS process with Tachyon on its code path,
  as a port delivering lines.
  """
  def start_child(code) do
    elixir = System.find_executable("elixir")

    Port.open({:spawn_executable, elixir}, [
      :binary,
      :exit_status,
      :stderr_to_stdout,
      {:line, 4096},
      args: child_code_path() ++ ["-e", code]
    ])
  end

  @doc "Collects the port's lines until `fun` says stop or the port exits."
  def collect(port, acc, fun, timeout \\ 30_000) do
    receive do
      {^port, {:data, {:eol, line}}} ->
        acc = [line | acc]

        if fun.(line, acc),
          do: {:stopped, Enum.reverse(acc)},
          else: collect(port, acc, fun, timeout)

      {^port, {:data, {:noeol, line}}} ->
        collect(port, [line | acc], fun, timeout)

      {^port, {:exit_status, status}} ->
        {{:exit, status}, Enum.reverse(acc)}
    after
      timeout -> {:timeout, Enum.reverse(acc)}
    end
  end

  @doc "Whether this machine lets us mount a small tmpfs (root in a sandbox)."
  def can_mount_tmpfs? do
    dir =
      Path.join(System.tmp_dir!(), "tachyon-mount-probe-#{System.unique_integer([:positive])}")

    File.mkdir_p!(dir)

    ok =
      case System.cmd("mount", ["-t", "tmpfs", "-o", "size=1m", "tmpfs", dir],
             stderr_to_stdout: true
           ) do
        {_, 0} ->
          System.cmd("umount", [dir], stderr_to_stdout: true)
          true

        _ ->
          false
      end

    File.rm_rf(dir)
    ok
  rescue
    _ -> false
  end
end

defmodule Tachyon.Sequencer.StdinReader do
  @moduledoc false
  # The one reader of an OS process's standard input: `mix tachyon.sequencer`
  # starts it for the operator's commands (its standard input closing does
  # not stop the node: `< /dev/null`, nohup), and every OS process
  # `Tachyon.Sequencer.OSProcess.spawn_elixir/2` starts runs it first, to
  # halt when its standard input closes (when the VM that started it dies).
  # One reader per OS process: the task started by `spawn_elixir/2` finds
  # the one already running and keeps it.

  @reader :tachyon_stdin_reader
  @target :tachyon_os_process_stdin

  @doc """
  The name of the process the reader sends each line to, trimmed, as
  `{:stdin, line}`, and `{:stdin, :eof}` when the standard input closes
  (with `on_eof: :continue`). Lines read while no process has the name are
  dropped.
  """
  def target_name, do: @target

  @doc """
  Starts the reader of this OS process's standard input unless one runs;
  returns its pid. `on_eof`: `:halt` (the OS process halts, status 0,
  when its standard input closes) or `:continue` (the target is told, and
  the reader stops: the OS process goes on).
  """
  def ensure_started(on_eof) when on_eof in [:halt, :continue] do
    case Process.whereis(@reader) do
      nil ->
        # Registered before it reads: it cannot have stopped by then.
        pid =
          spawn(fn ->
            receive do
              :read -> loop(on_eof)
            end
          end)

        Process.register(pid, @reader)
        send(pid, :read)
        pid

      pid ->
        pid
    end
  end

  defp loop(on_eof) do
    case IO.gets(:stdio, "") do
      line when is_binary(line) ->
        tell(String.trim(line))
        loop(on_eof)

      _eof_or_error when on_eof == :halt ->
        System.halt(0)

      _eof_or_error ->
        tell(:eof)
    end
  end

  defp tell(what) do
    if pid = Process.whereis(@target), do: send(pid, {:stdin, what})
  end
end

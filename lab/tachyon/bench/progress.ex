defmodule Tachyon.Bench.Progress do
  @moduledoc false
  # How far a long bench is: one line that updates in place in a terminal
  # (`\r`), plain lines (at most one per 10% and 5 s) when the output is a
  # file or a pipe. Printed between chunks of work, never inside a timed
  # region.

  @doc "A progress report for `total` units of work named `label`."
  def new(label, total) do
    t0 = System.monotonic_time(:millisecond)

    # (Monotonic time may be negative: "never printed" is a time long ago.)
    %{
      label: label,
      total: max(total, 1),
      t0: t0,
      last: t0 - 60_000,
      last_pct: -100,
      tty: tty?()
    }
  end

  @doc "Reports `done` units; returns the updated state."
  def update(p, 0), do: p

  def update(p, done) do
    now = System.monotonic_time(:millisecond)
    pct = div(done * 100, p.total)

    cond do
      p.tty and now - p.last >= 200 ->
        IO.write("\r  #{p.label}: #{pct}% (#{done}/#{p.total}, #{div(now - p.t0, 1000)} s)")
        %{p | last: now, last_pct: pct}

      not p.tty and pct - p.last_pct >= 10 and now - p.last >= 5000 ->
        IO.puts("  #{p.label}: #{pct}% (#{done}/#{p.total}, #{div(now - p.t0, 1000)} s)")
        %{p | last: now, last_pct: pct}

      true ->
        p
    end
  end

  @doc "Ends the report (clears the terminal line)."
  def done(p) do
    if p.tty and p.last >= p.t0, do: IO.write("\r\e[K")
    :ok
  end

  defp tty? do
    match?({:ok, _}, :io.columns()) and System.get_env("TERM") not in [nil, "dumb"]
  end
end

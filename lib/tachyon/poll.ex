defmodule Tachyon.Poll do
  @moduledoc false
  # The poll-mode receive loop of Tachyon.UDP and Tachyon.Bus: poll the
  # handle on the caller's scheduler (by its :wait and :spin, in the NIF),
  # yield between empty polls, then sleep until the VM says the descriptor
  # is readable (`select`), or at most `max_sleep` ms when the handle has
  # timers of its own to run (the bus's resends and gap requests).

  @doc """
  `recv.(polled_ns)` returns `{:ok, list}`, `:empty`, `:sleep` or
  `{:error, reason}`; `select.()` arms a one-shot `{tag, handle}` message.
  """
  def recv(handle, timeout, recv, select, tag, max_sleep \\ :infinity) do
    timeout = Tachyon.Options.timeout!(timeout)
    t0 = System.monotonic_time(:nanosecond)

    # The first poll before anything else: when it finds data (the common
    # case for a busy reader, and a ping-pong reader whose reply comes
    # within the NIF's spin) nothing more is paid. Measured on the 2-core
    # VM: about 0.35 us less per received datagram than setting up the
    # loop first.
    case recv.(0) do
      {:ok, _list} = ok ->
        ok

      {:error, _} = error ->
        error

      idle ->
        # timeout!/1 made :infinity the longest finite timeout.
        deadline = t0 + timeout * 1_000_000
        p = %{h: handle, recv: recv, select: select, tag: tag, max_sleep: max_sleep}
        # A readiness message left by an earlier recv that timed out is
        # dropped before this one may sleep on its own.
        flush_stale_ready(handle, tag)
        idle(p, idle, t0, System.monotonic_time(:nanosecond), deadline)
    end
  end

  defp poll(p, t0, deadline) do
    now = System.monotonic_time(:nanosecond)

    case p.recv.(now - t0) do
      {:ok, _list} = ok ->
        ok

      {:error, _} = error ->
        error

      idle ->
        idle(p, idle, t0, now, deadline)
    end
  end

  defp idle(p, result, t0, now, deadline) do
    case result do
      :empty ->
        if past?(deadline, now) do
          {:error, :timeout}
        else
          :erlang.yield()
          poll(p, t0, deadline)
        end

      :sleep ->
        if past?(deadline, now), do: {:error, :timeout}, else: sleep(p, deadline, now)
    end
  end

  defp sleep(%{h: h, tag: tag} = p, deadline, now) do
    case p.select.() do
      :ok ->
        wait = min_ms(remaining_ms(deadline, now), p.max_sleep)

        receive do
          {^tag, ^h} ->
            # Polled "forever" already: one try, then sleep again if it was
            # a spurious wake-up.
            poll(p, now - 1_000_000_000_000, deadline)
        after
          wait ->
            # The readiness message may still come: the next recv drops it.
            Process.put({__MODULE__, :armed, h}, true)

            if past?(deadline, System.monotonic_time(:nanosecond)) do
              {:error, :timeout}
            else
              flush_stale_ready(h, tag)
              poll(p, now - 1_000_000_000_000, deadline)
            end
        end

      {:error, _} = error ->
        error
    end
  end

  defp past?(deadline, now), do: now >= deadline

  defp remaining_ms(deadline, now), do: max(0, div(deadline - now + 999_999, 1_000_000))

  defp min_ms(a, :infinity), do: a
  defp min_ms(a, b), do: min(a, b)

  # After a recv that timed out while the VM watched the descriptor, its
  # readiness message may arrive later: drop it (only then, so a recv never
  # scans a large mailbox otherwise).
  defp flush_stale_ready(h, tag) do
    if Process.delete({__MODULE__, :armed, h}) do
      receive do
        {^tag, ^h} -> :ok
      after
        0 -> :ok
      end
    end

    :ok
  end
end

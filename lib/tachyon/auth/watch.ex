defmodule Tachyon.Auth.Watch do
  @moduledoc false
  # What packet protection rejected, from a node's or a member's stats at
  # each stats tick (Tachyon.PartServer): `[:tachyon, part, :rejected]`
  # with what was rejected since the last tick, and a warning logged at
  # most once every @log_every_ms (with everything since the last one).

  require Logger

  @kinds [:rejected_forged, :rejected_replayed, :rejected_unsealed, :rejected_forbidden]
  @log_every_ms 10_000

  @doc false
  def new, do: %{seen: %{}, logged_at: nil, unlogged: %{}}

  @doc false
  # `emit.(measurements)` sends the event; `label` names the part in the log.
  def note(watch, %{rejected: total} = m, label, emit) when is_integer(total) do
    last = Map.get(watch.seen, :rejected, 0)

    if total > last do
      delta = Map.new([:rejected | @kinds], &{&1, Map.get(m, &1, 0) - Map.get(watch.seen, &1, 0)})

      emit.(%{
        count: delta.rejected,
        forged: delta.rejected_forged,
        replayed: delta.rejected_replayed,
        unsealed: delta.rejected_unsealed,
        forbidden: delta.rejected_forbidden,
        total: total
      })

      unlogged = Map.merge(watch.unlogged, delta, fn _, a, b -> a + b end)
      now = System.monotonic_time(:millisecond)
      seen = Map.new([:rejected | @kinds], &{&1, Map.get(m, &1, 0)})

      if watch.logged_at == nil or now - watch.logged_at >= @log_every_ms do
        log(label, unlogged, watch.logged_at && now - watch.logged_at)
        %{watch | seen: seen, logged_at: now, unlogged: %{}}
      else
        %{watch | seen: seen, unlogged: unlogged}
      end
    else
      watch
    end
  end

  def note(watch, _m, _label, _emit), do: watch

  defp log(label, d, since) do
    span = if since, do: "in the last #{div(since, 1000)} s", else: "since it started"

    Logger.warning(
      "#{label}: #{d.rejected} datagrams rejected #{span} (#{d.rejected_forged} forged, " <>
        "#{d.rejected_replayed} replayed, #{d.rejected_unsealed} without keys, " <>
        "#{d.rejected_forbidden} forbidden): strangers, or nodes and members with other keys " <>
        "(docs/SECURITY.md)"
    )
  end
end

defmodule Tachyon.StateMachine.Runner do
  @moduledoc false
  # The process of a Tachyon.StateMachine: one bus member it owns (opened
  # in init/1, `delivery: :messages`, the runner the owner: the member's
  # thread sends it every message), the machine's state, and:
  #
  #   * the start: a machine that knows its position (`last_applied/1`, a state
  #     on disk) reads the log after it; otherwise (or if retention removed
  #     that part: `{:error, {:trimmed, _}}`) the member opens
  #     `from: :snapshot`. With a snapshot (`info.snapshot`, its position
  #     `as_of`), the runner RESTORES: messages (all at or above `as_of`)
  #     are held until the snapshot's chunks (of the first member seen with
  #     that `as_of`) end, then `restore/2`, then the held messages in
  #     order. Without one the member reads from the log's start.
  #   * replies: what this runner publishes (`command/3`) is delivered back
  #     to it in publish order, at or above `info.joined_seq` (below it,
  #     messages of its member id are an earlier incarnation's). So the
  #     callers wait in a FIFO queue, and each message of its own id from
  #     `joined_seq` on answers the oldest.
  #   * snapshots every `snapshot_every` messages applied, or at a
  #     `:snapshot_tick` every `snapshot_interval_ms` if any was applied
  #     since the last, as of the next sequence number, published from this
  #     process (a dirty NIF).
  #   * `:trimmed` and `:fork` events: the state is not the log's any more;
  #     the process stops with `{:lost, kind}` (a supervisor restarts it:
  #     it restores the latest snapshot).

  use GenServer

  require Logger

  alias Tachyon.Bus

  @bus_reserved [:from, :owner, :delivery]

  @doc "The options of `Tachyon.StateMachine.start_link/1`."
  def schema do
    [
      module: [
        type: {:custom, &__MODULE__.machine/1, "a module implementing Tachyon.StateMachine"},
        required: true,
        doc: "the module implementing `Tachyon.StateMachine`."
      ],
      args: [
        type: {:custom, &{:ok, &1}, "any term"},
        default: nil,
        doc: "the argument of the module's `c:init/1`."
      ],
      bus: [
        type: {:custom, &__MODULE__.bus/1, "a keyword list of Tachyon.Bus.open/1's options"},
        required: true,
        doc: """
        the member's options, as `Tachyon.Bus.open/1`'s (`:sequencer` and
        `:member_id` at least) but `:from`, `:owner` and `:delivery`, which
        the runner sets. Restoring members need a `:max_message_size` of
        64 KiB + 8 at least (the default is 1 MiB).
        """
      ],
      snapshot_every: [
        type: {:or, [nil, {:integer, 1, :infinity}]},
        default: nil,
        doc: """
        publish a snapshot every this many messages applied (`nil`: only
        when `publish_snapshot/2` asks). One or two runners of a group
        snapshotting is enough: every snapshot is in the log, and every
        runner started from a snapshot receives the later ones too.
        """
      ],
      snapshot_interval_ms: [
        type: :interval,
        default: nil,
        doc: """
        also publish a snapshot every this many milliseconds, if messages
        were applied since the last snapshot (`nil`: no timer).
        """
      ],
      name: [
        type:
          {:custom, &Tachyon.UDP.Options.gen_name/1,
           "nil, an atom, {:global, term} or {:via, module, term}"},
        default: nil,
        doc: "register the process under this name."
      ]
    ]
  end

  @doc false
  def machine(mod) when is_atom(mod) do
    if Code.ensure_loaded?(mod) and function_exported?(mod, :init, 1) and
         function_exported?(mod, :apply, 3) and function_exported?(mod, :snapshot, 1) and
         function_exported?(mod, :restore, 2),
       do: {:ok, mod},
       else: :error
  end

  def machine(_), do: :error

  @doc false
  def bus(opts) do
    if Keyword.keyword?(opts) and not Enum.any?(@bus_reserved, &Keyword.has_key?(opts, &1)),
      do: {:ok, opts},
      else: :error
  end

  @doc "Validates the options (the bus's too): raises `ArgumentError` naming the bad one."
  def validate!(opts) do
    opts = Tachyon.Options.validate!(opts, schema(), "Tachyon.StateMachine")
    Tachyon.Options.validate!(opts[:bus], Tachyon.Sequencer.Options.bus_schema(), "Tachyon.Bus")
    opts
  end

  @impl true
  def init(opts) do
    Process.flag(:trap_exit, true)
    mod = opts[:module]
    mstate = mod.init(opts[:args])
    applied = if function_exported?(mod, :last_applied, 1), do: mod.last_applied(mstate), else: 0

    case open(opts[:bus], applied) do
      {:ok, bus, info, from} ->
        s = %{
          mod: mod,
          mstate: mstate,
          bus: bus,
          me: info.member_id,
          joined_seq: info.joined_seq,
          applied: if(from == :snapshot, do: 0, else: applied),
          restoring: nil,
          every: opts[:snapshot_every],
          interval: opts[:snapshot_interval_ms],
          since: 0,
          callers: :queue.new(),
          syncs: [],
          stats: %{
            messages: 0,
            restored: nil,
            restored_size: 0,
            snapshots: 0,
            last_snapshot: nil
          }
        }

        tick(s.interval)
        {:ok, restoring(s, from, info.snapshot)}

      {:error, reason} ->
        if function_exported?(mod, :terminate, 1), do: mod.terminate(mstate)
        {:stop, reason}
    end
  end

  # A machine at `applied` > 0 reads the log after it, unless retention
  # removed that part.
  defp open(bus, applied) when applied > 0 do
    case Bus.open_info(bus ++ [from: applied + 1]) do
      {:ok, b, info} -> {:ok, b, info, applied + 1}
      {:error, {:trimmed, _}} -> open(bus, 0)
      {:error, _} = e -> e
    end
  end

  defp open(bus, _) do
    with {:ok, b, info} <- Bus.open_info(bus ++ [from: :snapshot]), do: {:ok, b, info, :snapshot}
  end

  defp restoring(s, :snapshot, as_of) when is_integer(as_of),
    do: %{s | restoring: %{as_of: as_of, from: nil, chunks: [], held: []}}

  defp restoring(s, _from, _as_of), do: s

  @impl true
  def handle_call({:command, data}, from, s) do
    case Bus.publish(s.bus, data) do
      {:ok, _} -> {:noreply, %{s | callers: :queue.in(from, s.callers)}}
      {:error, _} = e -> {:reply, e, s}
    end
  end

  def handle_call(:state, _from, %{restoring: nil} = s), do: {:reply, {:ok, s.mstate}, s}

  def handle_call({:query, fun}, _from, %{restoring: nil} = s),
    do: {:reply, {:ok, fun.(s.mstate)}, s}

  def handle_call(:state, _from, s), do: {:reply, {:error, :restoring}, s}
  def handle_call({:query, _}, _from, s), do: {:reply, {:error, :restoring}, s}

  def handle_call({:sync, seq, timeout}, from, s) do
    if s.restoring == nil and s.applied >= seq do
      {:reply, :ok, s}
    else
      ref =
        if timeout != :infinity, do: Process.send_after(self(), {:sync_timeout, from}, timeout)

      {:noreply, %{s | syncs: [{seq, from, ref} | s.syncs]}}
    end
  end

  def handle_call(:publish_snapshot, _from, s) do
    case snapshot(s) do
      {:ok, as_of, s} -> {:reply, {:ok, as_of}, s}
      {:error, _} = e -> {:reply, e, s}
    end
  end

  def handle_call(:stats, _from, s) do
    stats = Map.merge(s.stats, %{applied: s.applied, restoring: s.restoring != nil})
    {:reply, {:ok, stats}, s}
  end

  def handle_call(:tachyon_close, _from, s) do
    result = close(s)
    {:stop, :normal, result, %{s | bus: nil}}
  end

  @impl true
  def handle_info({:tachyon_bus, bus, seq, id, data}, %{bus: bus, restoring: nil} = s),
    do: {:noreply, s |> apply_one(seq, id, data) |> after_apply()}

  def handle_info({:tachyon_bus, bus, seq, id, data}, %{bus: bus, restoring: r} = s),
    do: {:noreply, %{s | restoring: %{r | held: [{seq, id, data} | r.held]}}}

  def handle_info({:tachyon_bus_snapshot, bus, _seq, id, as_of, chunk, last}, %{bus: bus} = s) do
    case s.restoring do
      %{as_of: ^as_of, from: from} = r when from in [nil, id] ->
        r = %{r | from: id, chunks: [chunk | r.chunks]}
        if last, do: {:noreply, restore(s, r)}, else: {:noreply, %{s | restoring: r}}

      # A later snapshot, or another member's: not the one started from.
      _ ->
        {:noreply, s}
    end
  end

  def handle_info({:tachyon_bus_event, bus, kind, fields}, %{bus: bus} = s)
      when kind in [:trimmed, :fork] do
    Logger.error(
      "Tachyon.StateMachine #{inspect(s.mod)} (member #{s.me}) lost its place in the log " <>
        "(#{kind}: #{inspect(fields)}); stopping, to restart from the latest snapshot"
    )

    {:stop, {:lost, kind}, s}
  end

  def handle_info(:snapshot_tick, s) do
    tick(s.interval)

    if s.since > 0 and s.restoring == nil do
      case snapshot(s) do
        {:ok, _, s} -> {:noreply, s}
        {:error, _} -> {:noreply, s}
      end
    else
      {:noreply, s}
    end
  end

  def handle_info({:sync_timeout, from}, s) do
    {gone, syncs} = Enum.split_with(s.syncs, fn {_, f, _} -> f == from end)
    if gone != [], do: GenServer.reply(from, {:error, :timeout})
    {:noreply, %{s | syncs: syncs}}
  end

  def handle_info({:EXIT, _pid, :normal}, s), do: {:noreply, s}
  def handle_info({:EXIT, _pid, reason}, s), do: {:stop, reason, s}
  def handle_info(_msg, s), do: {:noreply, s}

  @impl true
  def terminate(_reason, s), do: close(s)

  defp close(%{bus: nil}), do: :ok

  defp close(s) do
    result =
      case Bus.close(s.bus, 5000) do
        :ok -> :ok
        {:error, _} -> :ok
      end

    if function_exported?(s.mod, :terminate, 1), do: s.mod.terminate(s.mstate)
    result
  end

  defp tick(nil), do: :ok
  defp tick(ms), do: Process.send_after(self(), :snapshot_tick, ms)

  defp restore(s, r) do
    bin = r.chunks |> Enum.reverse() |> IO.iodata_to_binary()
    mstate = s.mod.restore(bin, s.mstate)
    stats = %{s.stats | restored: r.as_of, restored_size: byte_size(bin)}
    s = %{s | mstate: mstate, applied: r.as_of - 1, restoring: nil, stats: stats}

    r.held
    |> Enum.reverse()
    |> Enum.reduce(s, fn {seq, id, data}, s -> apply_one(s, seq, id, data) end)
    |> after_apply()
  end

  defp apply_one(s, seq, _id, _data) when seq <= s.applied, do: s

  defp apply_one(s, seq, id, data) do
    {reply, mstate} = s.mod.apply(%{seq: seq, member_id: id}, data, s.mstate)

    callers =
      if id == s.me and seq >= s.joined_seq do
        case :queue.out(s.callers) do
          {{:value, from}, rest} ->
            GenServer.reply(from, {:ok, reply})
            rest

          {:empty, q} ->
            q
        end
      else
        s.callers
      end

    stats = %{s.stats | messages: s.stats.messages + 1}
    %{s | mstate: mstate, applied: seq, since: s.since + 1, callers: callers, stats: stats}
  end

  # Answers the syncs reached; a snapshot if one is due.
  defp after_apply(s) do
    {done, waiting} = Enum.split_with(s.syncs, fn {n, _, _} -> n <= s.applied end)

    for {_, from, ref} <- done do
      if ref, do: Process.cancel_timer(ref)
      GenServer.reply(from, :ok)
    end

    s = %{s | syncs: waiting}

    if s.every != nil and s.since >= s.every do
      case snapshot(s) do
        {:ok, _, s} -> s
        {:error, _} -> %{s | since: 0}
      end
    else
      s
    end
  end

  defp snapshot(%{restoring: r}) when r != nil, do: {:error, :restoring}

  defp snapshot(s) do
    as_of = s.applied + 1

    case Bus.publish_snapshot(s.bus, as_of, s.mod.snapshot(s.mstate), 30_000) do
      {:ok, _} ->
        stats = %{s.stats | snapshots: s.stats.snapshots + 1, last_snapshot: as_of}
        {:ok, as_of, %{s | since: 0, stats: stats}}

      {:error, reason} = e ->
        Logger.warning(
          "Tachyon.StateMachine #{inspect(s.mod)} (member #{s.me}) could not publish " <>
            "its snapshot as of #{as_of}: #{inspect(reason)}"
        )

        e
    end
  end
end

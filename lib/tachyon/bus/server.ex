defmodule Tachyon.Bus.Server do
  @moduledoc false
  # The part callbacks of a member started with Tachyon.Bus.start_link/1
  # (Tachyon.PartServer runs the process): joins the bus in the server (an
  # orphan member left under the name by a killed incarnation leaves the
  # bus first, so the restart does not find its member_id taken), emits
  # `[:tachyon, :bus, :stats]` at each tick, leaves the bus when the
  # process stops. The member's events go to its receivers and to
  # Tachyon.Bus.Events (the `[:tachyon, :bus, kind]` telemetry).
  #
  # Who gets the messages (`:messages` mode): this process owns the member
  # (its exit closes it) but does not read them; its receivers do: the
  # subscribers of its name (Tachyon.Bus.Subscribers, kept across
  # restarts) and the `:owner` if one was given (a pid, or a registered
  # name resolved here, at each start). The owner is monitored: a pid's
  # exit stops this process for good (`:normal`), a named owner's exit
  # restarts it (the name is resolved again). An owner that drops every
  # message (a supervisor, the application master) is not a receiver.
  # Messages delivered to nobody are reported by the member's thread
  # (`{:tachyon_report, :bus, id, :unheard, %{count: n}}`, at most once per
  # 10 s): a warning naming the bus and what to do.
  #
  # `:poll` mode: the owner (required) polls; it owns the member.

  @behaviour Tachyon.PartServer

  require Logger

  alias Tachyon.{Bus, Native, Telemetry}
  alias Tachyon.Bus.{Owner, Subscribers}
  alias Tachyon.Sequencer.Options

  @impl true
  def open({opts, name}) do
    key = name || {:pid, self()}

    # (Validated again by open_info/2: the checks normalise some values.)
    checked = Tachyon.Options.validate!(opts, Options.bus_schema(), "Tachyon.Bus")

    with {:ok, owner} <- resolve_owner(checked[:owner], key) do
      kind = if owner, do: Owner.dropper(owner)
      poll = checked[:delivery] == :poll

      who =
        if poll,
          do: %{owner: owner, owner_receives: true, receivers: [], report: nil, name: name},
          else: %{
            owner: self(),
            owner_receives: false,
            receivers: Subscribers.list(key) ++ if(owner && !kind, do: [owner], else: []),
            report: self(),
            name: name
          }

      case Bus.open_info(Keyword.delete(opts, :owner), who) do
        {:ok, bus, info} ->
          data = %{
            info: info,
            key: key,
            poll: poll,
            owner: owner,
            owner_name: if(is_atom(checked[:owner]), do: checked[:owner]),
            owner_kind: kind,
            owner_ref: nil
          }

          {:ok, bus, data}

        {:error, _} = error ->
          error
      end
    end
  end

  defp resolve_owner(nil, _key), do: {:ok, nil}

  defp resolve_owner(owner, key) do
    Owner.resolve(
      owner,
      describe(key),
      ". Start the owner before the bus (list it first among the children), or leave " <>
        ":owner out and have the process call Tachyon.Bus.subscribe(#{subscribe_arg(key)})"
    )
  end

  @impl true
  def init_handle(%{data: data} = state) do
    # (A :poll member refuses the subscribers; attach also watches this
    # process, whose handle is published under its pid.)
    Subscribers.attach(data.key, state.handle, self())
    ref = if data.owner, do: Process.monitor(data.owner)
    put_in(state.data.owner_ref, ref)
  end

  # A shutdown waits a second at most for what the member published to be
  # delivered (the child spec's shutdown is 5 s).
  @impl true
  def close(bus), do: Native.bus_drain_close(bus, 1000)

  @impl true
  def stats(bus, _data), do: Native.bus_stats(bus)

  @impl true
  def meta(%{name: name, data: %{info: info}}), do: %{member_id: info.member_id, name: name}

  # The member's thread delivered messages to nobody: the warning, and
  # `[:tachyon, :bus, :unheard]`.
  @impl true
  def report(:unheard, %{count: n} = fields, state) do
    Logger.warning(unheard_warning(n, state.data))
    Telemetry.execute([:tachyon, :bus, :unheard], fields, meta(state))
    state
  end

  def report(_kind, _fields, state), do: state

  @impl true
  def message({:DOWN, ref, :process, _pid, reason}, %{data: %{owner_ref: ref}} = state) do
    case state.data.owner_name do
      # Given as a pid: its exit closes the member, for good.
      nil -> {:stop, :normal, state}
      # Given as a name: start again, and find the name's new process.
      name -> {:stop, {:owner_down, name, reason}, state}
    end
  end

  def message(_msg, state), do: state

  defp unheard_warning(n, data) do
    why =
      case data.owner_kind do
        nil ->
          "no process subscribed and it has no :owner"

        kind ->
          "its owner #{inspect(data.owner)} is #{Owner.kind_words(kind)}, which drops every " <>
            "message (owner: self() evaluated in a supervisor's init/1 or in Application.start/2 " <>
            "names that process, not the one that handles the messages)"
      end

    "#{describe(data.key)} (member #{data.info.member_id}) delivered #{n} message(s) to nobody " <>
      "(warned at most once every 10 s): #{why}. Call Tachyon.Bus.subscribe(#{subscribe_arg(data.key)}) " <>
      "in the process that handles them (in its init/1, say), or give the bus " <>
      "owner: that process's registered name"
  end

  defp describe({:pid, pid}), do: "Tachyon.Bus #{inspect(pid)}"
  defp describe(name), do: "Tachyon.Bus #{inspect(name)}"

  defp subscribe_arg({:pid, pid}), do: inspect(pid)
  defp subscribe_arg(name), do: inspect(name)
end

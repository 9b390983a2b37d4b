defmodule Tachyon.Bus.Owner do
  @moduledoc false
  # Who a member delivers to, decided when it opens (Tachyon.Bus.open/1 and
  # Tachyon.Bus.Server): the `:owner` given as a pid or a registered name
  # (looked up now), whether that process would drop the messages (a
  # supervisor, the application master), and the `:sequencer` given as the
  # name of a local Tachyon.Sequencer (its address, looked up now).

  require Logger

  alias Tachyon.Named

  @typedoc "What the NIF's bus_open needs to know of who gets the messages."
  @type who :: %{
          owner: pid(),
          owner_receives: boolean(),
          receivers: [pid()],
          report: pid() | nil,
          name: atom() | nil
        }

  @doc """
  `Tachyon.Bus.open/1` (`who` nil): the owner (`:owner`, or the caller)
  owns the member and gets its messages; warns if it would drop them.
  A `who` already made (the bus's process) is kept.
  """
  @spec who(who() | nil, pid() | atom()) :: {:ok, who()} | {:error, :noproc}
  def who(nil, owner) do
    with {:ok, pid} <- resolve(owner || self(), "Tachyon.Bus") do
      if kind = dropper(pid) do
        Logger.warning(
          "Tachyon.Bus: the owner #{inspect(pid)} of a member is #{kind_words(kind)}, which " <>
            "drops every message: open the member in the process that handles them, or start " <>
            "it in your tree ({Tachyon.Bus, name: ...}) and call Tachyon.Bus.subscribe/1 there"
        )
      end

      {:ok, %{owner: pid, owner_receives: true, receivers: [], report: nil, name: nil}}
    end
  end

  def who(who, _owner), do: {:ok, who}

  @doc """
  An owner given as a pid or a registered name: `{:ok, pid}`, or
  `{:error, :noproc}` (logged, naming `label` and what to do) when no
  process has the name.
  """
  @spec resolve(pid() | atom(), String.t(), String.t()) :: {:ok, pid()} | {:error, :noproc}
  def resolve(owner, label, advice \\ "")
  def resolve(pid, _label, _advice) when is_pid(pid), do: {:ok, pid}

  def resolve(name, label, advice) when is_atom(name) do
    case Process.whereis(name) do
      nil ->
        Logger.error(
          "#{label} could not start: no process is registered as its owner #{inspect(name)}" <>
            advice
        )

        {:error, :noproc}

      pid ->
        {:ok, pid}
    end
  end

  @doc "`:sequencer` given as the name of a local Tachyon.Sequencer: its address."
  @spec sequencer_addresses(atom() | [tuple()]) :: {:ok, [tuple()]} | {:error, :noproc}
  def sequencer_addresses(name) when is_atom(name) do
    case Named.whereis(Tachyon.Sequencer, name) do
      {:ok, %{info: %{address: address}}} ->
        {:ok, [address]}

      {:error, :noproc} = error ->
        Logger.error(
          "Tachyon.Bus could not start: no Tachyon.Sequencer named #{inspect(name)} (its " <>
            ":sequencer option) runs on this node; start it first (before the bus among " <>
            "the children), or give its address"
        )

        error
    end
  end

  def sequencer_addresses(addresses), do: {:ok, addresses}

  @doc """
  What an owner that drops every message is: a supervisor, the application
  master (or the process that runs `Application.start/2`), or nil.
  """
  @spec dropper(pid()) :: :supervisor | :application_master | nil
  def dropper(pid) do
    case Process.info(pid, [:initial_call, :dictionary]) do
      [initial_call: call, dictionary: dict] ->
        case {call, Keyword.get(dict, :"$initial_call")} do
          {_, {:supervisor, _, _}} -> :supervisor
          {{:application_master, _, _}, _} -> :application_master
          {_, {:application_master, _, _}} -> :application_master
          _ -> nil
        end

      nil ->
        nil
    end
  end

  @doc "A dropper, in words."
  def kind_words(:supervisor), do: "a supervisor"
  def kind_words(:application_master), do: "the application master"
end

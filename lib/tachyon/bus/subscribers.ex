defmodule Tachyon.Bus.Subscribers do
  @moduledoc false
  # The subscriptions to supervised bus members (`Tachyon.Bus.subscribe/1`),
  # held by one process of the :tachyon application rather than by the
  # members, so that they outlive a member's process:
  #
  #   * a subscription is to a KEY: the member's registered name, or
  #     `{:pid, pid}` for a member's process started without one;
  #   * each subscriber is monitored (once, whatever it subscribed to); its
  #     exit removes it from every member it was a receiver of;
  #   * a subscription by name holds across restarts of the member and may
  #     come before the member starts: a member's process asks for the
  #     subscribers of its name when it opens the member (`list/1`, the
  #     member's first receivers), then again once its handle is published
  #     (`attach/3`: whoever subscribed in between). Every change of a
  #     member's receivers goes through this process, so the two cannot
  #     miss a subscriber;
  #   * the members' processes are monitored too: a killed one (whose
  #     terminate/2 did not run) leaves its handle under `{Tachyon.Bus,
  #     pid}`, erased here, and its `{:pid, pid}` subscriptions end.
  #
  # The member itself keeps the pids its thread delivers to
  # (`Tachyon.Native.bus_subscribe/2`, tachyon_core's `receivers`).

  use GenServer

  alias Tachyon.{Named, Native}

  @doc "A subscription's key: the member's name (given, or that of its pid)."
  def key!(name) when is_atom(name) and name != nil, do: name

  def key!(pid) when is_pid(pid) do
    case Process.info(pid, :registered_name) do
      {:registered_name, name} when is_atom(name) -> name
      _ -> {:pid, pid}
    end
  end

  def key!(other),
    do:
      raise(
        ArgumentError,
        "subscribe/1 takes the name or pid of a Tachyon.Bus process, got: #{inspect(other)}"
      )

  def start_link(_opts), do: GenServer.start_link(__MODULE__, nil, name: __MODULE__)

  @doc "Subscribes `pid` to `key`: `:ok`, `{:error, :noproc}` or `{:error, :not_messages}`."
  def subscribe(key, pid), do: GenServer.call(__MODULE__, {:subscribe, key, pid}, :infinity)

  @doc "Ends `pid`'s subscription to `key` (`:ok` also if it had none)."
  def unsubscribe(key, pid), do: GenServer.call(__MODULE__, {:unsubscribe, key, pid}, :infinity)

  @doc "The subscribers of `key` (none when the :tachyon application is not running)."
  def list(key) do
    GenServer.call(__MODULE__, {:list, key}, :infinity)
  catch
    :exit, {:noproc, _} -> []
  end

  @doc """
  For a member's process once its handle is published: makes every
  subscriber of `key` a receiver of `handle` and watches `bus_pid`.
  """
  def attach(key, handle, bus_pid) do
    GenServer.call(__MODULE__, {:attach, key, handle, bus_pid}, :infinity)
  catch
    :exit, {:noproc, _} -> :ok
  end

  @impl true
  def init(nil), do: {:ok, %{keys: %{}, pids: %{}, buses: %{}}}

  @impl true
  def handle_call({:subscribe, key, pid}, _from, s) do
    case member(key) do
      {:ok, bus} ->
        case Native.bus_subscribe(bus, pid) do
          {:error, :not_messages} = error -> {:reply, error, s}
          # :ok, or {:error, :closed}: a member closing (or restarting) keeps
          # the subscription for the next one.
          _ -> {:reply, :ok, add(s, key, pid)}
        end

      {:error, :noproc} when is_atom(key) ->
        {:reply, :ok, add(s, key, pid)}

      {:error, :noproc} = error ->
        {:reply, error, s}
    end
  end

  def handle_call({:unsubscribe, key, pid}, _from, s) do
    detach(key, pid)
    {:reply, :ok, remove(s, key, pid)}
  end

  def handle_call({:list, key}, _from, s), do: {:reply, subscribers(s, key), s}

  def handle_call({:attach, key, handle, bus_pid}, _from, s) do
    for pid <- subscribers(s, key), do: Native.bus_subscribe(handle, pid)
    ref = Process.monitor(bus_pid)
    {:reply, :ok, put_in(s.buses[ref], bus_pid)}
  end

  @impl true
  def handle_info({:DOWN, ref, :process, pid, _reason}, s) do
    case Map.pop(s.buses, ref) do
      {nil, _} ->
        {_ref, keys} = Map.get(s.pids, pid, {nil, MapSet.new()})
        for key <- keys, do: detach(key, pid)
        s = Enum.reduce(keys, s, &remove(&2, &1, pid))
        {:noreply, s}

      {bus_pid, buses} ->
        # Gone without its terminate/2 (killed): its handle under its pid.
        :persistent_term.erase(Named.key(Tachyon.Bus, bus_pid))
        key = {:pid, bus_pid}
        s = %{s | buses: buses}
        s = Enum.reduce(subscribers(s, key), s, &remove(&2, key, &1))
        {:noreply, s}
    end
  end

  def handle_info(_other, s), do: {:noreply, s}

  defp member({:pid, pid}), do: Named.whereis(Tachyon.Bus, pid)
  defp member(name) when is_atom(name), do: Named.whereis(Tachyon.Bus, name)

  defp detach(key, pid) do
    with {:ok, bus} <- member(key), do: Native.bus_unsubscribe(bus, pid)
  end

  defp subscribers(s, key), do: s.keys |> Map.get(key, MapSet.new()) |> MapSet.to_list()

  defp add(s, key, pid) do
    {ref, keys} =
      case Map.fetch(s.pids, pid) do
        {:ok, entry} -> entry
        :error -> {Process.monitor(pid), MapSet.new()}
      end

    %{
      s
      | keys: Map.update(s.keys, key, MapSet.new([pid]), &MapSet.put(&1, pid)),
        pids: Map.put(s.pids, pid, {ref, MapSet.put(keys, key)})
    }
  end

  defp remove(s, key, pid) do
    keys =
      case Map.fetch(s.keys, key) do
        {:ok, set} ->
          set = MapSet.delete(set, pid)
          if MapSet.size(set) == 0, do: Map.delete(s.keys, key), else: Map.put(s.keys, key, set)

        :error ->
          s.keys
      end

    pids =
      case Map.fetch(s.pids, pid) do
        {:ok, {ref, ks}} ->
          ks = MapSet.delete(ks, key)

          if MapSet.size(ks) == 0 do
            Process.demonitor(ref, [:flush])
            Map.delete(s.pids, pid)
          else
            Map.put(s.pids, pid, {ref, ks})
          end

        :error ->
          s.pids
      end

    %{s | keys: keys, pids: pids}
  end
end

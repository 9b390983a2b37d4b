defmodule Tachyon.Named do
  @moduledoc false
  # The life of a named handle, the same for every part that a process can
  # own under a name (Tachyon.Store, Tachyon.AsyncStore, Tachyon.Table,
  # Tachyon.Echo, Tachyon.Sequencer, Tachyon.Bus; their process is
  # Tachyon.PartServer):
  #
  #   * the child spec: id `{Module, name}` (two parts of one kind under one
  #     supervisor never collide) and `restart: :transient`, so that a
  #     deliberate `close/1` (a `:normal` stop) is final while a crash or a
  #     kill is restarted;
  #   * `open/4` in `init/1`: traps exits (so `terminate/2` runs on a
  #     supervisor's shutdown), closes an ORPHAN first (a handle left in
  #     `:persistent_term` by an incarnation that was killed, which never ran
  #     `terminate/2` and may still hold the directory lock or the port),
  #     opens, and publishes the handle under `{Module, name}`;
  #   * `release/3` in `terminate/2`: unpublishes and closes;
  #   * `close/2`: stops the owning process with `:normal` (so it is not
  #     restarted) and returns what closing the handle returned;
  #   * `whereis/2` and `resolve/2` for calls by name: one
  #     `:persistent_term` lookup, no message to the process. A part whose
  #     functions also take the pid of its process (Tachyon.Bus) publishes
  #     its handle under `{Module, pid}` too (`Tachyon.PartServer`'s
  #     `:by_pid`), erased when the process stops (and, for a killed one,
  #     by `Tachyon.Bus.Subscribers`, which monitors them).

  @doc "The `:persistent_term` key of a named handle."
  def key(mod, name), do: {mod, name}

  @doc """
  `{:ok, handle}` of the part `mod` running under `name` (or as the process
  `pid`, for a part published by pid), or `{:error, :noproc}`.
  """
  def whereis(mod, name) when is_atom(name) or is_pid(name) do
    case :persistent_term.get({mod, name}, nil) do
      nil -> {:error, :noproc}
      handle -> {:ok, handle}
    end
  end

  @doc """
  A handle or a name to `{:ok, handle}` (`{:error, :noproc}` for an unknown
  name); anything else raises `ArgumentError`.
  """
  def resolve(mod, %{__struct__: mod} = handle), do: {:ok, handle}
  def resolve(mod, name) when is_atom(name) and name != nil, do: whereis(mod, name)

  def resolve(mod, other),
    do:
      raise(
        ArgumentError,
        "expected a #{inspect(mod)} or the name of one, got: #{inspect(other)}"
      )

  @doc "The child spec of a named part: id `{mod, name}`, `:transient`."
  def child_spec(mod, opts, extra \\ []) when is_list(opts) do
    Map.merge(
      %{
        id: {mod, Keyword.get(opts, :name)},
        start: {mod, :start_link, [opts]},
        restart: :transient,
        type: :worker
      },
      Map.new(extra)
    )
  end

  @doc """
  For `init/1`: traps exits, closes an orphan left under `name` with
  `close_fun`, then runs `open_fun` and publishes the handle it returns.
  `name` nil: no registration.
  """
  def open(mod, name, open_fun, close_fun) do
    Process.flag(:trap_exit, true)
    if name, do: close_orphan(mod, name, close_fun)

    case open_fun.() do
      {:ok, handle} = ok ->
        if name, do: publish(mod, name, handle)
        ok

      {:ok, handle, _data} = ok ->
        if name, do: publish(mod, name, handle)
        ok

      {:error, _} = error ->
        error
    end
  end

  @doc "Publishes `handle` under `{mod, name}` (`name` an atom, or the pid of its process)."
  def publish(mod, name, handle) when is_atom(name) or is_pid(name),
    do: :persistent_term.put({mod, name}, handle)

  @doc "Closes (with `close_fun`) and unpublishes a handle left under `name`."
  def close_orphan(mod, name, close_fun) do
    case :persistent_term.get({mod, name}, nil) do
      nil ->
        :ok

      old ->
        # Close first, then erase: `old` points into the persistent-term
        # area, which erasing releases; a handle used after that (by a dirty
        # NIF, which the release does not wait for) could be destroyed under
        # the NIF (a heap corruption seen with Echo's orphan close).
        close_fun.(old)
        :persistent_term.erase({mod, name})
        :ok
    end
  end

  @doc "For `terminate/2`: unpublishes `handle` and closes it with `close_fun`."
  def release(mod, name, handle, close_fun) do
    if name, do: :persistent_term.erase({mod, name})
    close_fun.(handle)
  end

  @doc """
  Stops the process `server` (a registered name or a pid) with `:normal`
  (not restarted under a `:transient` child spec) after it closed its
  handle: the process answers `:tachyon_close` calls with `{:stop, :normal,
  result, state}`. `{:error, :noproc}` if none runs.
  """
  def close(server, timeout \\ :infinity) do
    GenServer.call(server, :tachyon_close, timeout)
  catch
    :exit, {:noproc, _} -> {:error, :noproc}
    :exit, {:normal, _} -> {:error, :noproc}
  end
end

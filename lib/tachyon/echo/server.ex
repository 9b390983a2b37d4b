defmodule Tachyon.Echo.Server do
  @moduledoc false
  # The part callbacks of Tachyon.Echo (Tachyon.PartServer runs the
  # process): the socket is bound and the thread started in the caller of
  # start_link/1 (a port in use is a return value), adopted by the process,
  # which emits `[:tachyon, :echo, :start | :stats | :stop]` and stops
  # (joins) the thread when it stops, also on a supervisor's shutdown. The
  # handle published under the name is `%{ref: ref, info: info}`.

  @behaviour Tachyon.PartServer

  alias Tachyon.Native

  @impl true
  def open({nif_opts, opts}) do
    case Native.echo_start(nif_opts) do
      {:ok, ref, info} ->
        info = Map.merge(info, %{batch: opts.batch, max_datagram_size: opts.max_datagram_size})
        {:ok, %{ref: ref, info: info}, %{info: info}}

      {:error, _} = error ->
        Tachyon.Error.report(error, Tachyon.Echo,
          name: opts.name,
          target: {opts.ip, opts.port},
          action: :bind
        )
    end
  end

  @impl true
  def close(%{ref: ref}), do: Native.echo_stop(ref)

  @impl true
  def stats(%{ref: ref}, _data), do: {:ok, Native.echo_stats(ref)}

  @impl true
  def started(_state, duration), do: %{duration: duration}

  @impl true
  def meta(%{name: name, data: %{info: info}}) do
    %{name: name, address: info.address, core: info.core, pinned: info.pinned, wait: info.wait}
  end
end

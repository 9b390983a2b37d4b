defmodule Tachyon.AsyncStoreHelpers do
  @moduledoc false
  # What Tachyon.AsyncStoreTest and Tachyon.AsyncStoreLifecycleTest share.

  alias Tachyon.{AsyncStore, Native, Store}

  @seg 65_536

  @doc "The segment size of the tests' stores."
  def seg_size, do: @seg

  @doc """
  An AsyncStore on a new store in `path_or_store` (a directory) or on an
  open store; `opts` override the tests' options (tests never let the
  writer busy-spin).
  """
  def open!(path_or_store, opts \\ []) do
    opts =
      if is_binary(path_or_store),
        do: Keyword.merge([segment_size: @seg, pretouch: false, wait: :park], opts),
        else: Keyword.merge([wait: :park], opts)

    {:ok, a} = AsyncStore.open(path_or_store, opts)
    a
  end

  @doc "The `i`th test message."
  def msg(i), do: "message-#{i}-" <> :binary.copy(<<rem(i, 251)>>, rem(i, 200))

  @doc "Pauses or resumes the writer."
  def pause(a, paused), do: :ok = Native.async_pause(a.ref, paused)

  @doc "Every message of `store`, in order."
  def read_all(store) do
    store |> Store.stream() |> Enum.map(fn {_i, m} -> m end)
  end
end

defmodule Tachyon.Error do
  @moduledoc """
  The exception every `open!` of Tachyon raises (`Tachyon.Store.open!/2`,
  `Tachyon.AsyncStore.open!/2`, `Tachyon.Table.open!/2`,
  `Tachyon.UDP.open!/2`) when the non-raising `open` returned
  `{:error, reason}`.

  Fields:

    * `:reason` - the `reason` of the `{:error, reason}` (`:locked`,
      `:enospc`, `:corrupt`, `:eaddrinuse`, ...), so that
      code can match on it.
    * `:part` - the module that failed (`Tachyon.Store`, ...).
    * `:target` - what it tried to open (a path or a port), or `nil`.
    * `:message` - a sentence built from the above.

  Bad options and bad arguments still raise `ArgumentError`.

  ## Example

      {:ok, t} = Tachyon.Table.open("/tmp/users")

      try do
        Tachyon.Table.open!("/tmp/users")
      rescue
        e in Tachyon.Error -> e.reason
      end
      #=> :locked
  """
  defexception [:reason, :part, :target, :message]

  @type t :: %__MODULE__{
          reason: term(),
          part: module() | nil,
          target: term(),
          message: String.t()
        }

  @impl true
  def exception(opts) do
    reason = Keyword.fetch!(opts, :reason)
    part = Keyword.get(opts, :part)
    target = Keyword.get(opts, :target)

    message =
      Keyword.get_lazy(opts, :message, fn ->
        who = if part, do: inspect(part), else: "Tachyon"
        at = if target == nil, do: "", else: " #{format_target(target)}"
        "#{who} could not open#{at}: #{inspect(reason)}"
      end)

    %__MODULE__{reason: reason, part: part, target: target, message: message}
  end

  @doc false
  # The one shape per kind of error: the NIF's reason is an atom, or
  # `{:corrupt, segment, offset}` (whose place goes to the log, the caller
  # gets `:corrupt`).
  @spec normalize({:error, term()} | term(), module(), String.t()) :: {:error, atom()} | term()
  def normalize({:error, {:corrupt, segment, offset}}, part, path) do
    require Logger

    Logger.error(
      "#{inspect(part)} #{path}: data that does not verify in segment #{segment} at offset #{offset}" <>
        if(part == Tachyon.Store,
          do: " (open with repair: true to truncate the log there)",
          else: ""
        )
    )

    {:error, :corrupt}
  end

  def normalize(other, _part, _path), do: other

  defp format_target(t) when is_binary(t), do: t
  defp format_target(t), do: inspect(t)
end

defmodule Tachyon.Error do
  @moduledoc """
  The exception every `open!` of Tachyon raises (`Tachyon.Store.open!/2`,
  `Tachyon.AsyncStore.open!/2`, `Tachyon.Table.open!/2`,
  `Tachyon.UDP.open!/2`) when the non-raising `open` returned
  `{:error, reason}`.

  Fields:

    * `:reason` - the `reason` of the `{:error, reason}` (`:locked`,
      `:enospc`, `:corrupt`, `:eaddrinuse`, `{:wrong_kind, :table}`, ...),
      so that code can match on it.
    * `:part` - the module that failed (`Tachyon.Store`, ...).
    * `:target` - what it tried to open (a path or a port), or `nil`.
    * `:details` - what more is known, as a map: for `:enospc` on a
      directory, `:asked_bytes` (the segment that could not be created) and
      `:free_bytes` (what the file system had left then); `%{}` otherwise.
    * `:message` - a sentence built from the above, for example
      "Tachyon.Store could not create a 64 MiB segment in /var/lib/x (no
      space left on device, 12 MiB free)".

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
  import Bitwise
  require Logger

  defexception [:reason, :part, :target, :message, details: %{}]

  @type t :: %__MODULE__{
          reason: term(),
          part: module() | nil,
          target: term(),
          details: map(),
          message: String.t()
        }

  @impl true
  def exception(opts) do
    reason = Keyword.fetch!(opts, :reason)
    part = Keyword.get(opts, :part)
    target = Keyword.get(opts, :target)
    details = Keyword.get_lazy(opts, :details, fn -> details(reason, target) end)

    message = Keyword.get_lazy(opts, :message, fn -> describe(reason, part, target, details) end)

    %__MODULE__{reason: reason, part: part, target: target, details: details, message: message}
  end

  @doc false
  # The one shape per kind of error. The NIF's reason is an atom, or a
  # tuple whose detail goes to the log while the caller gets an atom:
  # `{:corrupt, segment, offset}` (a record or header that does not
  # verify), `{:corrupt, segment, offset, records, bytes}` (damage in the
  # middle of a store's log that `repair: true` would cut: only then is a
  # repair advised, with what it would cut), `{:corrupt, :manifest}`.
  # `{:wrong_kind, kind}` and `{:unsupported_format, version}` are returned
  # as they are (documented tagged tuples), and logged with the path, as is
  # an `:enospc` with what it asked for.
  @spec normalize({:error, term()} | term(), module(), String.t()) ::
          {:error,
           atom()
           | {:wrong_kind, atom()}
           | {:unsupported_format, non_neg_integer()}
           | {:trimmed, non_neg_integer()}}
          | term()
  def normalize({:error, {:corrupt, segment, offset}}, part, path) do
    Logger.error(
      "#{inspect(part)} #{path}: data that does not verify in segment #{segment} at offset #{offset}"
    )

    {:error, :corrupt}
  end

  def normalize({:error, {:corrupt, segment, offset, records, bytes}}, part, path) do
    Logger.error(
      "#{inspect(part)} #{path}: a record that does not verify in segment #{segment} at offset " <>
        "#{offset}, with #{records} records after it. Opening with repair: true cuts the log " <>
        "there: #{records} records (#{format_bytes(bytes)}) from segment #{segment} offset " <>
        "#{offset} on are lost"
    )

    {:error, :corrupt}
  end

  def normalize({:error, {:corrupt, :manifest}}, part, path) do
    Logger.error(describe({:corrupt, :manifest}, part, path, %{}))
    {:error, :corrupt}
  end

  def normalize({:error, {kind, _}} = error, part, path)
      when kind in [:wrong_kind, :unsupported_format] do
    {:error, reason} = error
    Logger.error(describe(reason, part, path, %{}))
    error
  end

  def normalize({:error, :enospc} = error, part, path) do
    Logger.error(describe(:enospc, part, path, details(:enospc, path)))
    error
  end

  def normalize(other, _part, _path), do: other

  @doc false
  # What is known about `reason` beyond the atom: for a full disk, the
  # segment the directory `target` could not get.
  @spec details(term(), term()) :: map()
  def details(:enospc, target) when is_binary(target) do
    case Tachyon.Native.segment_shortfall(Path.expand(target)) do
      {asked, free} -> %{asked_bytes: asked, free_bytes: free}
      nil -> %{}
    end
  end

  def details(_reason, _target), do: %{}

  defp describe(reason, part, target, details) do
    who = if part, do: inspect(part), else: "Tachyon"
    at = if target == nil, do: "", else: " #{format_target(target)}"

    case {reason, details} do
      {:enospc, %{asked_bytes: asked, free_bytes: free}} ->
        "#{who} could not create a #{format_bytes(asked)} segment in#{at} " <>
          "(no space left on device, #{format_bytes(free)} free)"

      {{:wrong_kind, :unknown}, _} ->
        "#{who} could not open#{at}: it holds files of no Tachyon part, or of several " <>
          "(nothing was changed there); give each part a directory of its own, new or empty"

      {{:wrong_kind, kind}, _} ->
        "#{who} could not open#{at}: it is a #{part_name(kind)}'s directory " <>
          "(nothing was changed there); give each part a directory of its own"

      {{:unsupported_format, v}, _} ->
        "#{who} could not open#{at}: its files are of format #{v}, newer than this " <>
          "release of Tachyon reads (nothing was changed there)"

      {{:corrupt, :manifest}, _} ->
        "#{who} could not open#{at}: its tachyon.meta does not verify, so whose files " <>
          "these are is unknown (nothing was changed there)"

      _ ->
        "#{who} could not open#{at}: #{inspect(reason)}"
    end
  end

  defp part_name(:store), do: "Tachyon.Store"
  defp part_name(:table), do: "Tachyon.Table"
  defp part_name(:sequencer), do: "Tachyon.Sequencer"
  defp part_name(other), do: inspect(other)

  @doc false
  # Bytes as a person reads them: "64 MiB", "1.5 MiB", "12 KiB", "100 bytes".
  @spec format_bytes(non_neg_integer()) :: String.t()
  def format_bytes(n) when n >= 1 <<< 30, do: unit(n, 1 <<< 30, "GiB")
  def format_bytes(n) when n >= 1 <<< 20, do: unit(n, 1 <<< 20, "MiB")
  def format_bytes(n) when n >= 1 <<< 10, do: unit(n, 1 <<< 10, "KiB")
  def format_bytes(n), do: "#{n} bytes"

  defp unit(n, size, name) do
    if rem(n, size) == 0,
      do: "#{div(n, size)} #{name}",
      else: "#{:erlang.float_to_binary(n / size, decimals: 1)} #{name}"
  end

  defp format_target(t) when is_binary(t), do: t
  defp format_target(t), do: inspect(t)
end

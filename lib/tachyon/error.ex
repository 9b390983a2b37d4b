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
    * `:target` - what it tried to open (a path, a port, or an
      `{ip, port}`), or `nil`.
    * `:name` - the registered name of the part's process, or `nil`.
    * `:action` - what failed: `:open` (a directory), `:bind` (a port),
      `:join` (a bus member, its sequencer).
    * `:details` - what more is known, as a map: for `:enospc` on a
      directory, `:asked_bytes` (the segment that could not be created) and
      `:free_bytes` (what the file system had left then); `%{}` otherwise.
    * `:message` - a sentence built from the above: the part, what it could
      not do to what, the reason in words and its atom, and what to do, as
      in "Tachyon.Echo :pong could not bind 127.0.0.1:5555: address
      already in use (eaddrinuse). Another socket has that port: close it,
      or choose another :port (0: one the kernel picks)", or "Tachyon.Store
      could not create a 64 MiB segment in /var/lib/x (no space left on
      device, 12 MiB free)".

  The same sentence is logged (an error) when a part fails to open or
  start, so that a `{:error, :eaddrinuse}` returned by a `start_link/1`, or
  a supervisor's `failed_to_start_child` report, comes with the port or
  path it is about; the `{:error, reason}` itself stays as it was, to
  match on.

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

  defexception [:reason, :part, :target, :name, :message, action: :open, details: %{}]

  @type t :: %__MODULE__{
          reason: term(),
          part: module() | nil,
          target: term(),
          name: atom() | nil,
          action: :open | :bind | :join,
          details: map(),
          message: String.t()
        }

  @impl true
  def exception(opts) do
    e = %__MODULE__{
      reason: Keyword.fetch!(opts, :reason),
      part: Keyword.get(opts, :part),
      target: Keyword.get(opts, :target),
      name: Keyword.get(opts, :name),
      action: Keyword.get(opts, :action, :open)
    }

    e = %{e | details: Keyword.get_lazy(opts, :details, fn -> details(e.reason, e.target) end)}
    %{e | message: Keyword.get_lazy(opts, :message, fn -> describe(e) end)}
  end

  @doc false
  # The opens and starts of every part go through here on failure (after
  # normalize/3 for a part with a directory): logs the exception's message
  # (the part, its name, what it could not do to what, the reason in words,
  # what to do) and returns `error` as it was. What normalize/3 logged
  # already (a damaged record, another part's directory, a newer format, a
  # full disk) is not logged twice.
  @spec report({:error, term()}, module(), keyword()) :: {:error, term()}
  def report({:error, reason} = error, part, opts) do
    unless logged_by_normalize?(reason),
      do: Logger.error(exception([reason: reason, part: part] ++ opts).message)

    error
  end

  def report(other, _part, _opts), do: other

  defp logged_by_normalize?(reason) when reason in [:corrupt, :enospc], do: true
  defp logged_by_normalize?({kind, _}) when kind in [:wrong_kind, :unsupported_format], do: true
  defp logged_by_normalize?(_), do: false

  @doc false
  # A reason in words: a POSIX one as the C library says it, Tachyon's own
  # as below; anything else inspected.
  @spec words(term()) :: String.t()
  def words(:locked), do: "another handle has the directory open for writing"
  def words(:corrupt), do: "data that does not verify"
  def words(:timeout), do: "no answer in time"
  def words(:noproc), do: "no such process"

  def words(reason) when is_atom(reason) do
    case :erl_posix_msg.message(reason) do
      ~c"unknown POSIX error" -> inspect(reason)
      msg -> List.to_string(msg)
    end
  end

  def words(reason), do: inspect(reason)

  @doc false
  # What to do about `reason` when `action` failed ("" if nothing useful
  # can be said): one clause per reason.
  @spec hint(term(), atom()) :: String.t()
  def hint(:eaddrinuse, _),
    do:
      ". Another socket has that port: close it, or choose another :port (0: one the kernel picks)"

  def hint(:timeout, :join),
    do:
      ". Is a Tachyon.Sequencer running at that address, reachable from here, and are " <>
        "this member's keys (:auth) the group's? A node drops what it cannot authenticate " <>
        "without an answer (the member waited :connect_timeout_ms for its welcome)"

  def hint(:eaddrnotavail, _),
    do: ". That address is not one of this host's: check :ip"

  def hint(:eacces, :bind),
    do: ". Ports below 1024 need privileges (CAP_NET_BIND_SERVICE): choose another :port"

  def hint(reason, _) when reason in [:eacces, :eperm],
    do: ". The VM's user may not write there: fix the permissions, or choose another :path"

  def hint(:erofs, _),
    do: ". That file system is mounted read-only: choose a :path on a writable one"

  def hint(:enoent, _),
    do: ". A directory on the way does not exist and could not be made: check the :path"

  def hint(:enotdir, _), do: ". A part of the path is a file, not a directory: check the :path"

  def hint(:locked, _),
    do:
      ". Close the other one first (a Tachyon.Store, Table or Sequencer on the same " <>
        "directory, maybe in another OS process), or give each its own directory"

  def hint(_reason, _action), do: ""

  defp format_reason(reason) when is_atom(reason), do: Atom.to_string(reason)
  defp format_reason(reason), do: inspect(reason)

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
    Logger.error(exception(reason: {:corrupt, :manifest}, part: part, target: path).message)
    {:error, :corrupt}
  end

  def normalize({:error, {kind, _}} = error, part, path)
      when kind in [:wrong_kind, :unsupported_format] do
    {:error, reason} = error
    Logger.error(exception(reason: reason, part: part, target: path).message)
    error
  end

  def normalize({:error, :enospc} = error, part, path) do
    Logger.error(exception(reason: :enospc, part: part, target: path).message)
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

  defp describe(%__MODULE__{reason: reason, part: part, target: target, details: details} = e) do
    who = if part, do: inspect(part), else: "Tachyon"
    who = if e.name, do: "#{who} #{inspect(e.name)}", else: who
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
        "#{who} could not #{e.action}#{at}: #{words(reason)} (#{format_reason(reason)})" <>
          hint(reason, e.action)
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
  defp format_target(port) when is_integer(port), do: "port #{port}"
  defp format_target({ip, port}) when tuple_size(ip) == 8, do: "[#{:inet.ntoa(ip)}]:#{port}"
  defp format_target({ip, port}) when is_tuple(ip), do: "#{:inet.ntoa(ip)}:#{port}"
  defp format_target(t), do: inspect(t)
end

defmodule Tachyon.Options do
  @moduledoc false
  # The one option checker of every part (Store, AsyncStore, Table, UDP,
  # Echo): a schema, a keyword list of `key: spec`, both validates options
  # and writes their documentation, so the two cannot drift apart.
  #
  # A spec is a keyword list:
  #
  #   * `:type` - what the value must be (below).
  #   * `:default` - the value when the key is absent. `{:native, part, key}`
  #     reads it from the Rust defaults (`Tachyon.Native.defaults/0`, the
  #     `Config::default()` of each part), so the numbers live in one place.
  #     Absent: the key has no default (it is left out when not given), or,
  #     with `required: true`, must be given.
  #   * `:doc` - one markdown paragraph for `docs/1`.
  #   * `:formerly` - `[old_key: convert]`: the key's name (and value) of the
  #     previous release. `validate!/3` still takes it for one release, with
  #     a deprecation warning (once per VM and old key), rewriting
  #     `old_key: v` as `key: convert.(v)` (`convert` nil: the same value);
  #     giving both raises. `renames/1` lists them (docs/VOCABULARY.md).
  #
  # Types: `:boolean`, `:atom`, `:string`, `:path` (a string or a
  # charlist, returned as a string), `{:in, values}`,
  # `{:integer, min, max}` (`max` may be `:infinity`),
  # `{:multiple_of, n, min, max}`, `{:power_of_two, min, max}`, `{:number, min, max}`, `:interval`
  # (milliseconds, `nil` = off: `nil` or an integer in `interval_range/0`),
  # `:wait` (`:busy_spin | :yield | :backoff | :park`; the old `:block`
  # raises, pointing at `:park`), `{:or, [type]}`, `nil` (the value nil),
  # `{:keyword, [key: type]}` (a keyword list of those keys, each of its
  # type; returned with every key, nil when absent), and `{:custom, fun, what}`
  # (`fun.(value)` returns `{:ok, value}` or `:error`; `what` completes "must
  # be ...").

  @max_timeout 4_294_967_295
  @max_interval 86_400_000

  @doc "The largest timeout (ms) a function of Tachyon accepts, besides `:infinity`."
  def max_timeout, do: @max_timeout

  @doc "The range of an interval option (milliseconds)."
  def interval_range, do: 1..@max_interval

  @doc """
  Validates `opts` against `schema` and returns the keyword list in schema
  order with defaults filled in. Raises `ArgumentError` naming the key and
  the bad value; unknown keys raise. `label` names the caller.
  """
  def validate!(opts, schema, label) do
    check_keys!(opts, [schema], label)
    opts = rename_deprecated(opts, schema, label)

    Enum.flat_map(schema, fn {key, spec} ->
      case Keyword.fetch(opts, key) do
        {:ok, value} ->
          [{key, check!(key, value, Keyword.fetch!(spec, :type))}]

        :error ->
          cond do
            Keyword.get(spec, :required, false) ->
              raise ArgumentError, "the #{inspect(key)} option is required for #{label}"

            Keyword.has_key?(spec, :default) ->
              # Defaults go through the type too (normalised: `:loopback`
              # becomes a tuple; and a Rust default out of range is caught).
              [{key, check!(key, default(spec[:default]), Keyword.fetch!(spec, :type))}]

            true ->
              []
          end
      end
    end)
  end

  @doc """
  Raises `ArgumentError` unless `opts` is a keyword list of keys of
  `schemas` (their deprecated names included), naming an unknown key and
  the closest known one ("did you mean :path?"). `validate!/3` checks its
  one schema so; a caller that splits its options among several (a
  process's own and those of the handle it opens: `start_link/1` of Store,
  Table, Bus, AsyncStore) checks them all first, so that a misspelled key
  is named with the key it meant, wherever that is, rather than that key
  reported missing.
  """
  def check_keys!(opts, schemas, label) do
    unless is_list(opts) and Enum.all?(opts, &match?({k, _} when is_atom(k), &1)) do
      raise ArgumentError, "#{label} options must be a keyword list, got: #{inspect(opts)}"
    end

    names = Enum.flat_map(schemas, &Keyword.keys/1)
    known = names ++ Enum.flat_map(schemas, &Keyword.keys(renames(&1)))

    case Enum.uniq(Keyword.keys(opts) -- known) do
      [] ->
        :ok

      unknown ->
        raise ArgumentError,
              "unknown #{label} option(s) #{inspect(unknown)}" <>
                suggest(unknown, known) <> "; the options are " <> inspect(names)
    end
  end

  # " (did you mean :member_id?)" for a key close to a known one (as Elixir
  # suggests a function's name), "" when none is.
  defp suggest(unknown, known) do
    hints =
      for key <- unknown,
          {distance, best} = closest(key, known),
          distance >= 0.8,
          do:
            if(length(unknown) == 1,
              do: inspect(best),
              else: "#{inspect(best)} for #{inspect(key)}"
            )

    case hints do
      [] -> ""
      hints -> " (did you mean " <> Enum.join(hints, ", ") <> "?)"
    end
  end

  defp closest(key, known) do
    known
    |> Enum.map(&{String.jaro_distance(Atom.to_string(key), Atom.to_string(&1)), &1})
    |> Enum.max(fn -> {0.0, nil} end)
  end

  @doc """
  The deprecated names of `schema`'s keys: `[{old_key, new_key}]`.
  """
  def renames(schema) do
    for {key, spec} <- schema, {old, _convert} <- Keyword.get(spec, :formerly, []), do: {old, key}
  end

  defp rename_deprecated(opts, schema, label) do
    Enum.reduce(schema, opts, fn {key, spec}, opts ->
      Enum.reduce(Keyword.get(spec, :formerly, []), opts, fn {old, convert}, opts ->
        if Keyword.has_key?(opts, old) do
          {value, rest} = Keyword.pop(opts, old)

          if Keyword.has_key?(rest, key) do
            raise ArgumentError,
                  "#{label}: give #{inspect(key)} only (#{inspect(old)} is its deprecated name)"
          end

          deprecated(label, old, key)
          Keyword.put(rest, key, if(convert, do: convert.(value), else: value))
        else
          opts
        end
      end)
    end)
  end

  @doc """
  Warns (once per VM for each `{label, old}`) that `old` is deprecated in
  favour of `new` (an option name, or a function's name as a string).
  """
  def deprecated(label, old, new) do
    key = {__MODULE__, :deprecated, label, old}

    unless :persistent_term.get(key, false) do
      :persistent_term.put(key, true)

      IO.warn(
        "#{label}: #{describe_name(old)} is deprecated and will be removed in the next " <>
          "release; use #{describe_name(new)} (see docs/VOCABULARY.md)",
        []
      )
    end

    :ok
  end

  @doc false
  # Tests: forget which deprecations were already reported.
  def reset_deprecations do
    for {{__MODULE__, :deprecated, _, _} = key, _} <- :persistent_term.get(),
        do: :persistent_term.erase(key)

    :ok
  end

  defp describe_name(name) when is_atom(name), do: inspect(name)
  defp describe_name(name) when is_binary(name), do: name

  @doc """
  A path argument (a string or a charlist) as a string; raises
  `ArgumentError` otherwise.
  """
  def path!(path) do
    case conform(path, :path) do
      {:ok, p} -> p
      :error -> raise ArgumentError, "the path must be #{describe(:path)}, got: #{inspect(path)}"
    end
  end

  @doc "Checks one value against a type; returns it (possibly normalised) or raises."
  def check!(key, value, type) do
    case conform(value, type) do
      {:ok, v} ->
        v

      :error ->
        raise ArgumentError,
              "the #{inspect(key)} option must be #{describe(type)}, got: #{inspect(value)}"
    end
  end

  @doc """
  A timeout argument: `:infinity` or `0..#{@max_timeout}` milliseconds,
  returned as milliseconds (`:infinity` is the maximum). Raises otherwise.
  """
  def timeout!(:infinity), do: @max_timeout
  def timeout!(ms) when is_integer(ms) and ms >= 0 and ms <= @max_timeout, do: ms

  def timeout!(other) do
    raise ArgumentError,
          "the timeout must be :infinity or an integer in 0..#{@max_timeout} (milliseconds), " <>
            "got: #{inspect(other)}"
  end

  @doc "The markdown list documenting `schema`."
  def docs(schema) do
    Enum.map_join(schema, "\n", fn {key, spec} ->
      doc = spec |> Keyword.get(:doc, "") |> String.trim() |> String.replace("\n", "\n    ")
      "  * `#{inspect(key)}` - #{doc}#{default_doc(spec)}#{formerly_doc(spec)}"
    end)
  end

  defp formerly_doc(spec) do
    case Keyword.get(spec, :formerly, []) do
      [] ->
        ""

      olds ->
        " Formerly " <>
          Enum.map_join(olds, ", ", fn {o, _} -> "`#{inspect(o)}`" end) <> " (deprecated)."
    end
  end

  defp default_doc(spec) do
    cond do
      Keyword.get(spec, :required, false) -> " Required."
      not Keyword.has_key?(spec, :default) -> ""
      Keyword.has_key?(spec, :default_doc) -> " Default: #{spec[:default_doc]}."
      match?({:native, _, _}, spec[:default]) -> " Default: from Rust (see `defaults/0`)."
      true -> " Default: `#{inspect(spec[:default])}`."
    end
  end

  @doc """
  The type of a `:retention` option (`Tachyon.Store`, `Tachyon.Sequencer`):
  `[max_bytes: n, max_age_ms: n]`, each `nil` (no limit) or at least 1.
  """
  def retention_type do
    limit = {:or, [nil, {:integer, 1, :infinity}]}
    {:keyword, [max_bytes: limit, max_age_ms: limit]}
  end

  @doc "The NIF options of `opts` (a map): its validated `:retention` as `max_bytes`, `max_age_ms` keys."
  def put_retention(opts) do
    {retention, opts} = Map.pop(opts, :retention, [])
    Map.merge(opts, Map.new(retention))
  end

  @doc "The Rust default of `key` in `part` (`Tachyon.Native.defaults/0`, cached)."
  def native_default(part, key), do: Map.fetch!(Map.fetch!(native_defaults(), part), key)

  @doc "Every part's Rust defaults, read once from the NIF and cached."
  def native_defaults do
    case :persistent_term.get({__MODULE__, :defaults}, nil) do
      nil ->
        defaults = Tachyon.Native.defaults()
        :persistent_term.put({__MODULE__, :defaults}, defaults)
        defaults

      defaults ->
        defaults
    end
  end

  defp default({:native, part, key}), do: native_default(part, key)
  defp default(value), do: value

  # -- types -------------------------------------------------------------------

  defp conform(v, :boolean) when is_boolean(v), do: {:ok, v}
  defp conform(v, :atom) when is_atom(v), do: {:ok, v}
  defp conform(v, :string) when is_binary(v), do: {:ok, v}
  defp conform(v, :path) when is_binary(v), do: {:ok, v}

  defp conform(v, :path) when is_list(v) do
    {:ok, IO.chardata_to_string(v)}
  rescue
    ArgumentError -> :error
  end

  defp conform(nil, nil), do: {:ok, nil}
  defp conform(nil, :interval), do: {:ok, nil}

  defp conform(v, :interval) when is_integer(v) and v >= 1 and v <= @max_interval,
    do: {:ok, v}

  defp conform(v, :wait) when v in [:busy_spin, :yield, :backoff, :park], do: {:ok, v}

  defp conform(:block, :wait) do
    raise ArgumentError,
          "the :wait option :block was renamed: use wait: :park (it blocks until woken, " <>
            "the same strategy under the name every part of Tachyon uses)"
  end

  defp conform(v, {:in, values}), do: if(v in values, do: {:ok, v}, else: :error)

  defp conform(v, {:integer, min, max})
       when is_integer(v) and v >= min and (max == :infinity or v <= max),
       do: {:ok, v}

  defp conform(v, {:multiple_of, n, min, max})
       when is_integer(v) and v >= min and v <= max and rem(v, n) == 0,
       do: {:ok, v}

  defp conform(v, {:power_of_two, min, max})
       when is_integer(v) and v >= min and v <= max and Bitwise.band(v, v - 1) == 0,
       do: {:ok, v}

  defp conform(v, {:number, min, max}) when is_number(v) and v >= min and v <= max,
    do: {:ok, v}

  defp conform(v, {:or, types}) do
    Enum.find_value(types, :error, fn t ->
      case conform(v, t) do
        {:ok, _} = ok -> ok
        :error -> nil
      end
    end)
  end

  defp conform(v, {:keyword, types}) when is_list(v) do
    if Keyword.keyword?(v) and Keyword.keys(v) -- Keyword.keys(types) == [] do
      Enum.reduce_while(types, {:ok, []}, fn {k, t}, {:ok, acc} ->
        case conform(Keyword.get(v, k), t) do
          {:ok, x} -> {:cont, {:ok, acc ++ [{k, x}]}}
          :error -> {:halt, :error}
        end
      end)
    else
      :error
    end
  end

  defp conform(v, {:custom, fun, _what}), do: fun.(v)
  defp conform(_v, _type), do: :error

  defp describe(:boolean), do: "a boolean"
  defp describe(:atom), do: "an atom"
  defp describe(:string), do: "a string"
  defp describe(:path), do: "a string or a charlist"
  defp describe(nil), do: "nil"
  defp describe(:wait), do: "one of :busy_spin, :yield, :backoff, :park"
  defp describe(:interval), do: "nil or an integer in 1..#{@max_interval} (milliseconds)"
  defp describe({:in, values}), do: "one of " <> Enum.map_join(values, ", ", &inspect/1)
  defp describe({:integer, min, :infinity}), do: "an integer >= #{min}"
  defp describe({:integer, min, max}), do: "an integer in #{min}..#{max}"

  defp describe({:multiple_of, n, min, max}),
    do: "a multiple of #{n} in #{min}..#{max}"

  defp describe({:power_of_two, min, max}), do: "a power of two in #{min}..#{max}"
  defp describe({:number, min, max}), do: "a number between #{min} and #{max}"
  defp describe({:or, types}), do: Enum.map_join(types, " or ", &describe/1)

  defp describe({:keyword, types}),
    do:
      "a keyword list of " <>
        Enum.map_join(types, ", ", fn {k, t} -> "#{k}: (#{describe(t)})" end)

  defp describe({:custom, _fun, what}), do: what
end

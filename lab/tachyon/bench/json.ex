defmodule Tachyon.Bench.JSON do
  @moduledoc false
  # A minimal JSON encoder for benchmark reports (no Hex dependencies).

  def encode(nil), do: "null"
  def encode(true), do: "true"
  def encode(false), do: "false"
  def encode(n) when is_integer(n), do: Integer.to_string(n)

  def encode(f) when is_float(f) do
    if f == trunc(f) and abs(f) < 1.0e15,
      do: Integer.to_string(trunc(f)),
      else: :erlang.float_to_binary(f, [:short])
  end

  def encode(a) when is_atom(a), do: encode(Atom.to_string(a))
  def encode(s) when is_binary(s), do: [?", escape(s), ?"] |> IO.iodata_to_binary()

  def encode(list) when is_list(list),
    do: "[" <> Enum.map_join(list, ",", &encode/1) <> "]"

  def encode(tuple) when is_tuple(tuple), do: encode(Tuple.to_list(tuple))

  def encode(map) when is_map(map) do
    body =
      map
      |> Enum.sort_by(fn {k, _} -> to_string(k) end)
      |> Enum.map_join(",", fn {k, v} -> encode(to_string(k)) <> ":" <> encode(v) end)

    "{" <> body <> "}"
  end

  defp escape(s) do
    for <<c::utf8 <- s>>, into: "" do
      case c do
        ?" -> "\\\""
        ?\\ -> "\\\\"
        ?\n -> "\\n"
        ?\r -> "\\r"
        ?\t -> "\\t"
        c when c < 0x20 -> "\\u" <> String.pad_leading(Integer.to_string(c, 16), 4, "0")
        c -> <<c::utf8>>
      end
    end
  end

  @doc """
  Decodes JSON text (what `encode/1` writes, and any JSON): objects become
  maps with string keys. Raises `ArgumentError` on malformed input.
  """
  def decode!(text) when is_binary(text) do
    case value(skip(text)) do
      {v, rest} ->
        if skip(rest) == "",
          do: v,
          else: raise(ArgumentError, "trailing JSON: #{String.slice(rest, 0, 20)}")
    end
  end

  defp skip(<<c, rest::binary>>) when c in [?\s, ?\t, ?\n, ?\r], do: skip(rest)
  defp skip(s), do: s

  defp value("null" <> r), do: {nil, r}
  defp value("true" <> r), do: {true, r}
  defp value("false" <> r), do: {false, r}
  defp value("\"" <> r), do: string(r, [])
  defp value("{" <> r), do: object(skip(r), %{})
  defp value("[" <> r), do: array(skip(r), [])

  defp value(s) do
    case Regex.run(~r/^-?\d+(\.\d+)?([eE][-+]?\d+)?/, s) do
      [num | _] ->
        rest = binary_part(s, byte_size(num), byte_size(s) - byte_size(num))

        v =
          if String.contains?(num, [".", "e", "E"]),
            do: String.to_float(fix(num)),
            else: String.to_integer(num)

        {v, rest}

      nil ->
        raise ArgumentError, "bad JSON at: #{String.slice(s, 0, 20)}"
    end
  end

  # "1e5" is not a float literal for String.to_float/1.
  defp fix(num),
    do: if(String.contains?(num, "."), do: num, else: String.replace(num, ~r/[eE]/, ".0e"))

  defp string("\"" <> r, acc), do: {acc |> Enum.reverse() |> IO.iodata_to_binary(), r}

  defp string("\\u" <> <<h::binary-size(4), r::binary>>, acc),
    do: string(r, [<<String.to_integer(h, 16)::utf8>> | acc])

  defp string("\\" <> <<c, r::binary>>, acc) do
    ch = %{?n => "\n", ?t => "\t", ?r => "\r", ?b => "\b", ?f => "\f"}[c] || <<c>>
    string(r, [ch | acc])
  end

  defp string(<<c::utf8, r::binary>>, acc), do: string(r, [<<c::utf8>> | acc])
  defp string("", _), do: raise(ArgumentError, "unterminated JSON string")

  defp object("}" <> r, acc), do: {acc, r}

  defp object("\"" <> r, acc) do
    {k, r} = string(r, [])
    ":" <> r = skip(r)
    {v, r} = value(skip(r))
    acc = Map.put(acc, k, v)

    case skip(r) do
      "," <> r -> object(skip(r), acc)
      "}" <> r -> {acc, r}
    end
  end

  defp array("]" <> r, acc), do: {Enum.reverse(acc), r}

  defp array(s, acc) do
    {v, r} = value(s)

    case skip(r) do
      "," <> r -> array(skip(r), [v | acc])
      "]" <> r -> {Enum.reverse([v | acc]), r}
    end
  end
end

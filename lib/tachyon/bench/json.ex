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
end

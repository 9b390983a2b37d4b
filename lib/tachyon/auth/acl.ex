defmodule Tachyon.Auth.Acl do
  @moduledoc false
  # The access control of a node's `auth: [acl: ...]` (Tachyon.Sequencer's
  # "Access"): which members may publish, and the lowest sequence number
  # each may read. Enforced by the nodes (`Acl`, core/node/config.rs); with
  # keys, each member id is bound to its credential.

  @doc false
  def parse(nil), do: {:ok, nil}

  def parse(opts) when is_list(opts) do
    with true <- Keyword.keyword?(opts),
         [] <- Keyword.keys(opts) -- [:publishers, :read_from, :default_read_from],
         {:ok, pubs} <- publishers(Keyword.get(opts, :publishers, :all)),
         {:ok, read_from} <- read_from(Keyword.get(opts, :read_from, %{})),
         d when is_integer(d) and d >= 0 <- Keyword.get(opts, :default_read_from, 0) do
      {:ok, %{publishers: pubs, read_from: read_from, default_read_from: d}}
    else
      _ -> :error
    end
  end

  def parse(_), do: :error

  defp publishers(:all), do: {:ok, nil}

  defp publishers(ids) when is_list(ids) do
    if Enum.all?(ids, &id?/1), do: {:ok, Enum.uniq(ids)}, else: :error
  end

  defp publishers(_), do: :error

  defp read_from(m) when is_map(m), do: read_from(Map.to_list(m))

  defp read_from(list) when is_list(list) do
    ok = Enum.all?(list, &match?({_id, seq} when is_integer(seq) and seq >= 0, &1))
    if ok and Enum.all?(list, fn {id, _} -> id?(id) end), do: {:ok, list}, else: :error
  end

  defp read_from(_), do: :error

  defp id?(id), do: is_integer(id) and id > 0 and id < 0x1_0000_0000

  @doc false
  def native(nil), do: nil
  def native(acl), do: acl
end

defmodule Tachyon.UDP.Options do
  @moduledoc false
  # Option validation shared by Tachyon.Echo, Tachyon.UDP and the echo bench:
  # turns a keyword list into the map the NIFs decode, raising ArgumentError
  # with a message naming the offending key.

  @waits [:busy_spin, :yield, :backoff, :block]

  @doc "The wait strategies, as documented."
  def waits, do: @waits

  @doc "The default wait for a thread that should be fast: busy-spin only with cores to spare."
  def default_wait do
    if cores() > 2, do: :busy_spin, else: :backoff
  end

  @doc "Online logical processors (not BEAM schedulers)."
  def cores do
    case :erlang.system_info(:logical_processors_online) do
      n when is_integer(n) and n > 0 -> n
      _ -> System.schedulers_online()
    end
  end

  @doc """
  Validates `opts` against `defaults` (a keyword list: every allowed key with
  its default) and returns a map for the NIF. `label` names the caller in
  messages.
  """
  def validate!(opts, defaults, label) do
    unless is_list(opts) do
      raise ArgumentError, "#{label} options must be a keyword list, got: #{inspect(opts)}"
    end

    opts =
      try do
        Keyword.validate!(opts, defaults)
      rescue
        e in ArgumentError ->
          reraise ArgumentError,
                  "invalid #{label} option: " <> Exception.message(e),
                  __STACKTRACE__
      end

    Map.new(opts, fn {key, value} -> {key, check!(key, value)} end)
  end

  defp check!(:ip, value), do: ip!(value)

  defp check!(:port, value) do
    unless is_integer(value) and value in 0..65_535 do
      bad!(:port, "must be an integer in 0..65535", value)
    end

    value
  end

  # nil: the caller's default
  defp check!(:wait, nil), do: nil

  defp check!(:wait, value) do
    case value do
      w when w in @waits -> w
      :park -> :block
      _ -> bad!(:wait, "must be one of #{inspect(@waits)}", value)
    end
  end

  defp check!(:core, nil), do: nil

  defp check!(:core, value) do
    n = cores()

    unless is_integer(value) and value in 0..(n - 1) do
      bad!(:core, "must be nil or an integer in 0..#{n - 1} (the online cores)", value)
    end

    value
  end

  defp check!(:batch, value), do: int_in!(:batch, value, 1, 1024)
  defp check!(:max_datagram, value), do: int_in!(:max_datagram, value, 1, 65_507)
  defp check!(:size, value), do: int_in!(:size, value, 0, 65_507)
  defp check!(:recbuf, value), do: nil_or_pos!(:recbuf, value)
  defp check!(:sndbuf, value), do: nil_or_pos!(:sndbuf, value)

  defp check!(:max_queue, :infinity), do: nil

  defp check!(:max_queue, value) do
    unless is_integer(value) and value > 0 do
      bad!(:max_queue, "must be a positive integer or :infinity", value)
    end

    value
  end

  defp check!(:reuseaddr, value) do
    unless is_boolean(value), do: bad!(:reuseaddr, "must be a boolean", value)
    value
  end

  defp check!(:stats_interval, value), do: nil_or_pos!(:stats_interval, value)

  defp check!(:owner, nil), do: nil

  defp check!(:owner, value) do
    unless is_pid(value) and node(value) == node() do
      bad!(:owner, "must be a local pid or nil", value)
    end

    value
  end

  defp check!(:name, value) do
    unless value == nil or is_atom(value) or match?({:via, _, _}, value) or
             match?({:global, _}, value) do
      bad!(:name, "must be nil, an atom, {:global, term} or {:via, module, term}", value)
    end

    value
  end

  defp check!(_key, value), do: value

  @doc """
  Normalises an address: a 4- or 8-tuple, `:loopback` (127.0.0.1), `:any`
  (0.0.0.0), or a string such as `"127.0.0.1"` or `"::1"`.
  """
  def ip!(value, key \\ :ip)
  def ip!(:loopback, _key), do: {127, 0, 0, 1}
  def ip!(:any, _key), do: {0, 0, 0, 0}

  def ip!(value, key) when is_binary(value) or is_list(value) do
    chars = if is_binary(value), do: String.to_charlist(value), else: value

    case :inet.parse_strict_address(chars) do
      {:ok, ip} -> ip
      {:error, _} -> bad!(key, "must be an IP address", value)
    end
  rescue
    ArgumentError -> bad!(key, "must be an IP address", value)
  end

  def ip!(value, key) do
    if :inet.is_ip_address(value) do
      value
    else
      bad!(
        key,
        "must be an IPv4 or IPv6 tuple, :loopback, :any or an address string",
        value
      )
    end
  end

  defp int_in!(key, value, lo, hi) do
    unless is_integer(value) and value >= lo and value <= hi do
      bad!(key, "must be an integer in #{lo}..#{hi}", value)
    end

    value
  end

  defp nil_or_pos!(_key, nil), do: nil

  defp nil_or_pos!(key, value) do
    unless is_integer(value) and value > 0,
      do: bad!(key, "must be a positive integer or nil", value)

    value
  end

  defp bad!(key, msg, value) do
    raise ArgumentError, "the #{inspect(key)} option #{msg}, got: #{inspect(value)}"
  end

  @doc "The wait atom the NIF reports (`:park`) as documented (`:block`)."
  def public_wait(:park), do: :block
  def public_wait(w), do: w
end

defmodule Tachyon.Auth do
  @moduledoc """
  Keys for the bus: every datagram a `Tachyon.Sequencer` node or a
  `Tachyon.Bus` member sends is sealed, and every datagram it reads is
  checked before anything acts on it (docs/SECURITY.md says what this
  protects and what it does not).

  ## Making keys

  A group has one key file, the same on every node; each member gets a
  credential made from it, which lets it speak only as its own member id:

  ```sh
  mix tachyon.gen_key /etc/my_app/group.key
  mix tachyon.gen_key /etc/my_app/member-7.key --member 7 --from /etc/my_app/group.key
  ```

  Files are written readable by their owner only (`0600`); a key file that
  others can read is refused. A member may also be given the group's key
  file itself (one key for a small deployment): it then derives its own
  credential, but whoever holds that file can speak as any node or member.

  ## The `:auth` option

  `Tachyon.Sequencer` and `Tachyon.Bus` take `auth:`:

    * `[key_file: path]`: the key file (read at start, and again by
      `Tachyon.Sequencer.reload_keys/1` and `Tachyon.Bus.reload_keys/1`);
    * `[key: key]`: a key given in memory, made with `key/1` (never a plain
      binary: a `t:Tachyon.Auth.Key.t/0` shows as `#Tachyon.Auth.Key<redacted>`
      wherever it is printed, child specs and crash reports included);
    * `encrypt: true` (the default): payloads are encrypted and
      authenticated (AES-256-GCM where the CPU has AES, else
      ChaCha20-Poly1305); `false`: authenticated only, sent in the clear
      (the same AEAD's tag over the whole datagram, GMAC);
    * `acl:` (a node's): which members may publish and from where they
      may read (`Tachyon.Sequencer`'s `:auth`);
    * `:none`: no keys, on any address (a network you trust);
    * `nil` (the default): no keys, allowed only on a loopback address: a
      node or member bound to any other address refuses to start without
      `auth:`, as Redis's protected mode does.

  ## Rotating keys

  Two keys may be held at once: the first seals, both are accepted. See
  docs/SECURITY.md, "Rotating keys" (`mix tachyon.gen_key PATH --add`,
  `--promote`, `--retire`, then `reload_keys/1` on every node and member).

  ## Example

      {:ok, text} = Tachyon.Auth.generate()
      key = Tachyon.Auth.key(text)
      inspect(key)
      #=> "#Tachyon.Auth.Key<redacted>"
  """

  alias Tachyon.Native

  defmodule Key do
    @moduledoc """
    A key held in memory (`Tachyon.Auth.key/1`): its text is reachable only
    through `Tachyon.Auth`, and it never prints.
    """
    @enforce_keys [:text]
    defstruct [:text]

    @typedoc "A key: a group's key file's text, or a member's credential's."
    @type t :: %__MODULE__{text: (() -> binary())}

    defimpl Inspect do
      def inspect(_key, _opts), do: "#Tachyon.Auth.Key<redacted>"
    end
  end

  @typedoc "The `:auth` option as checked: where the keys come from, and how they seal."
  @type t :: %{source: {:file, Path.t()} | {:key, Key.t()}, encrypt: boolean(), acl: term()}

  @doc """
  A new group key file's text (one random 256-bit key, from the kernel's
  random source).

  ## Example

      {:ok, "tachyon-key v1 group\\n" <> _} = Tachyon.Auth.generate()
  """
  @spec generate() :: {:ok, binary()} | {:error, String.t()}
  def generate, do: Native.auth_keys(:new, "", 0)

  @doc """
  Member `id`'s credential from a group key file's text: its own key and
  the bus key, every generation of the group's file in its order.

  ## Example

      {:ok, group} = Tachyon.Auth.generate()
      {:ok, "tachyon-key v1 member 7\\n" <> _} = Tachyon.Auth.credential(group, 7)
  """
  @spec credential(binary(), pos_integer()) :: {:ok, binary()} | {:error, String.t()}
  def credential(group_text, id) when is_binary(group_text) and is_integer(id) and id > 0,
    do: Native.auth_keys(:member, group_text, id)

  @doc """
  A rotation's step on a group key file's text: `:add` (a new key accepted
  beside the one that seals), `:promote` (the new key seals, the old one is
  still accepted), `:retire` (only the key that seals).

  ## Example

      {:ok, one} = Tachyon.Auth.generate()
      {:ok, two} = Tachyon.Auth.rotate(one, :add)
      {:ok, %{generations: 2}} = Tachyon.Auth.check(two)
  """
  @spec rotate(binary(), :add | :promote | :retire) :: {:ok, binary()} | {:error, String.t()}
  def rotate(text, step) when step in [:add, :promote, :retire] and is_binary(text),
    do: Native.auth_keys(step, text, 0)

  @doc """
  What a key file's text holds: `%{kind: :group | :member, generations: n,
  member: id | nil}`, or why it is not a key file.

  ## Example

      {:ok, text} = Tachyon.Auth.generate()
      {:ok, %{kind: :group, generations: 1, member: nil}} = Tachyon.Auth.check(text)
  """
  @spec check(binary()) :: {:ok, map()} | {:error, String.t()}
  def check(text) when is_binary(text), do: Native.auth_keys(:check, text, 0)

  @doc """
  A key to give as `auth: [key: key]`: `text` is a key file's text (a
  group's, or a member's credential).

  ## Example

      {:ok, text} = Tachyon.Auth.generate()
      %Tachyon.Auth.Key{} = Tachyon.Auth.key(text)
  """
  @spec key(binary()) :: Key.t()
  def key(text) when is_binary(text), do: %Key{text: fn -> text end}

  @doc """
  Writes a key file readable by its owner only (`0600`): created empty,
  its mode set, then written; an existing file is not replaced unless
  `replace: true`.
  """
  @spec write_file(Path.t(), binary(), keyword()) :: :ok | {:error, File.posix() | :exists}
  def write_file(path, text, opts \\ []) do
    tmp = path <> ".new"
    replace = Keyword.get(opts, :replace, false)

    cond do
      File.exists?(path) and not replace ->
        {:error, :exists}

      true ->
        File.rm(tmp)

        with {:ok, f} <- :file.open(String.to_charlist(tmp), [:write, :exclusive, :binary]),
             :ok <- File.chmod(tmp, 0o600),
             :ok <- :file.write(f, text),
             :ok <- :file.sync(f),
             :ok <- :file.close(f) do
          File.rename(tmp, path)
        end
    end
  end

  @doc """
  Reads a key file: refused if others than its owner may read or write it
  (`{:error, :too_open}`), if it is not a regular file, or not a key file.
  """
  @spec read_file(Path.t()) :: {:ok, binary()} | {:error, atom() | String.t()}
  def read_file(path) do
    with {:ok, %File.Stat{type: :regular, mode: mode}} <- File.stat(path),
         :ok <- if(Bitwise.band(mode, 0o077) == 0, do: :ok, else: {:error, :too_open}),
         {:ok, text} <- File.read(path),
         {:ok, _} <- check(text) do
      {:ok, text}
    else
      {:ok, %File.Stat{}} -> {:error, :not_a_file}
      other -> other
    end
  end

  @doc false
  # The :auth option's schema entry (Tachyon.Sequencer's with `acl`).
  def option_spec(acl?) do
    [
      type:
        {:custom, &option(&1, acl?),
         "nil, :none, or a keyword list with :key_file (a path) or :key (Tachyon.Auth.key/1), " <>
           "and :encrypt" <> if(acl?, do: " and :acl", else: "")},
      default: nil,
      doc: """
      keys: every datagram sealed and checked (`Tachyon.Auth`).
      `[key_file: path]` or `[key: Tachyon.Auth.key(text)]`, with
      `encrypt: false` to send payloads in the clear (authenticated only)#{if acl?, do: ", `acl:` which members may publish and read (see \"Access\")", else: ""};
      `:none` for no keys on any address; `nil` (the default) for no keys,
      allowed on a loopback address only.
      """
    ]
  end

  @doc false
  def option(nil, _), do: {:ok, nil}
  def option(:none, _), do: {:ok, :none}

  def option(opts, acl?) when is_list(opts) do
    allowed = [:key_file, :key, :encrypt] ++ if(acl?, do: [:acl], else: [])

    with true <- Keyword.keyword?(opts),
         [] <- Keyword.keys(opts) -- allowed,
         {:ok, source} <- source(opts),
         enc when is_boolean(enc) <- Keyword.get(opts, :encrypt, true),
         {:ok, acl} <- Tachyon.Auth.Acl.parse(Keyword.get(opts, :acl)) do
      {:ok, %{source: source, encrypt: enc, acl: acl}}
    else
      _ -> :error
    end
  end

  def option(_, _), do: :error

  defp source(opts) do
    case {Keyword.get(opts, :key_file), Keyword.get(opts, :key)} do
      {path, nil} when is_binary(path) -> {:ok, {:file, Path.expand(path)}}
      {nil, %Key{} = k} -> {:ok, {:key, k}}
      _ -> :error
    end
  end

  @doc false
  # The keys' text for the NIF (`nil`: none), read now; raises
  # ArgumentError naming the file and what is wrong with it (never the key).
  def native!(nil, _label), do: nil
  def native!(:none, _label), do: nil

  def native!(%{source: source, encrypt: enc} = auth, label) do
    %{keys: text!(source, label), encrypt: enc, acl: Tachyon.Auth.Acl.native(auth.acl)}
  end

  @doc false
  def text!({:key, %Key{text: f}}, label) do
    text = f.()

    case check(text) do
      {:ok, _} -> text
      {:error, why} -> raise ArgumentError, "#{label}: the :key of :auth is refused: #{why}"
    end
  end

  def text!({:file, path}, label) do
    case read_file(path) do
      {:ok, text} ->
        text

      {:error, :too_open} ->
        raise ArgumentError,
              "#{label}: the key file #{path} may be read or written by others than its owner: " <>
                "chmod 600 #{path}"

      {:error, why} ->
        raise ArgumentError,
              "#{label}: the key file #{path} cannot be used (#{format(why)}); " <>
                "make one with `mix tachyon.gen_key #{path}`"
    end
  end

  defp format(why) when is_atom(why), do: :file.format_error(why) |> to_string()
  defp format(why), do: why

  @doc false
  # The safe default: without `auth:`, only a loopback address.
  def require!(nil, ip, label) do
    unless loopback?(ip) do
      raise ArgumentError,
            "#{label} binds #{:inet.ntoa(ip)}, which is not a loopback address: anyone who can " <>
              "send it a datagram would be trusted. Give auth: [key_file: path] (make a key with " <>
              "`mix tachyon.gen_key path`: the same file on every node, a member's credential " <>
              "with `--member ID --from path`), or auth: :none on a network you trust " <>
              "(docs/SECURITY.md)"
    end

    :ok
  end

  def require!(_auth, _ip, _label), do: :ok

  @doc false
  def loopback?({127, _, _, _}), do: true
  def loopback?({0, 0, 0, 0, 0, 0, 0, 1}), do: true
  def loopback?({0, 0, 0, 0, 0, 0xFFFF, a, _}), do: div(a, 256) == 127
  def loopback?(_), do: false
end

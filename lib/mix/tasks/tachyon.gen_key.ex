defmodule Mix.Tasks.Tachyon.GenKey do
  @shortdoc "Writes a key file for a Tachyon sequencer group or one of its members"
  @moduledoc """
  Writes a key file (readable by its owner only, `0600`; an existing file
  is not replaced unless `--force`): see `Tachyon.Auth` and
  docs/SECURITY.md.

      mix tachyon.gen_key PATH
          a new group key: the same file on every node of the group
      mix tachyon.gen_key PATH --member ID --from GROUP_PATH
          member ID's credential, made from the group's key file: it
          speaks as member ID only, and reads what the nodes send it
      mix tachyon.gen_key GROUP_PATH --add | --promote | --retire
          a key rotation's steps on the group's file (in place): add a new
          key beside the one that seals, let it seal (the old one still
          accepted), drop the old one. After each step, copy the file to
          every node, remake the members' credentials, and call
          `Tachyon.Sequencer.reload_keys/1` and `Tachyon.Bus.reload_keys/2`.

  It prints what it wrote (never a key).
  """
  use Mix.Task

  @switches [
    member: :integer,
    from: :string,
    add: :boolean,
    promote: :boolean,
    retire: :boolean,
    force: :boolean,
    help: :boolean
  ]

  @impl true
  def run(args) do
    {opts, rest, bad} = OptionParser.parse(args, strict: @switches)

    cond do
      opts[:help] ->
        Mix.shell().info(@moduledoc)

      bad != [] ->
        Mix.raise("unknown or bad options: #{inspect(bad)}; see mix help tachyon.gen_key")

      length(rest) != 1 ->
        Mix.raise("give one PATH; see mix help tachyon.gen_key")

      true ->
        gen(hd(rest), opts)
    end
  end

  defp gen(path, opts) do
    Application.ensure_all_started(:tachyon)
    steps = Enum.filter([:add, :promote, :retire], &opts[&1])

    case {opts[:member], steps} do
      {nil, []} ->
        {:ok, text} = Tachyon.Auth.generate()
        write(path, text, opts[:force], "a new group key")

      {id, []} when is_integer(id) and id > 0 ->
        from =
          opts[:from] || Mix.raise("--member ID needs --from GROUP_PATH (the group's key file)")

        {:ok, group} = read(from)

        case Tachyon.Auth.credential(group, id) do
          {:ok, text} -> write(path, text, opts[:force], "member #{id}'s credential from #{from}")
          {:error, why} -> Mix.raise("#{from}: #{why}")
        end

      {nil, [step]} ->
        {:ok, group} = read(path)

        case Tachyon.Auth.rotate(group, step) do
          {:ok, text} -> write(path, text, true, "#{path} after --#{step}")
          {:error, why} -> Mix.raise("#{path}: #{why}")
        end

      _ ->
        Mix.raise(
          "give one of --member ID, --add, --promote, --retire; see mix help tachyon.gen_key"
        )
    end
  end

  defp read(path) do
    case Tachyon.Auth.read_file(path) do
      {:ok, text} ->
        {:ok, text}

      {:error, :too_open} ->
        Mix.raise("#{path} may be read or written by others than its owner: chmod 600 #{path}")

      {:error, why} ->
        Mix.raise("#{path}: #{if is_atom(why), do: :file.format_error(why), else: why}")
    end
  end

  defp write(path, text, force, what) do
    File.mkdir_p!(Path.dirname(path))

    case Tachyon.Auth.write_file(path, text, replace: force == true) do
      :ok ->
        {:ok, info} = Tachyon.Auth.check(text)
        Mix.shell().info("wrote #{what} to #{path} (0600; #{info.generations} key(s))")

      {:error, :exists} ->
        Mix.raise("#{path} exists: give --force to replace it")

      {:error, why} ->
        Mix.raise("#{path}: #{:file.format_error(why)}")
    end
  end
end

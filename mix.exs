defmodule Tachyon.MixProject do
  use Mix.Project

  @version "0.1.0"

  def project do
    [
      app: :tachyon,
      version: @version,
      elixir: "~> 1.14",
      start_permanent: Mix.env() == :prod,
      compilers: [:tachyon_cargo] ++ Mix.compilers(),
      elixirc_paths: elixirc_paths(Mix.env()),
      deps: [],
      # :scheduler (runtime_tools, part of OTP) is only used by the benchmarks
      # to report scheduler utilization; a user's release need not carry it.
      xref: [exclude: [:scheduler]],
      description: "Low-latency messaging and storage on the BEAM, with Rust NIFs",
      docs: [
        main: "Tachyon",
        extras: [
          "README.md",
          "docs/ARCHITECTURE.md",
          "docs/FORMAT.md",
          "docs/FAILOVER.md",
          "docs/SECURITY.md",
          "docs/VOCABULARY.md",
          "docs/HISTORY.md"
        ]
      ]
    ]
  end

  def application do
    [
      extra_applications: [:logger, :crypto],
      mod: {Tachyon.Application, []}
    ]
  end

  # lab/: the benchmarks, the nemesis and the soak (and their mix tasks),
  # compiled in this repository's :dev and :test only. An app that depends
  # on Tachyon compiles it in :prod: lib/ alone.
  defp elixirc_paths(:test), do: ["lib", "lab", "test/support"]
  defp elixirc_paths(:dev), do: ["lib", "lab"]
  defp elixirc_paths(_), do: ["lib"]
end

defmodule Mix.Tasks.Compile.TachyonCargo do
  @shortdoc "Builds Tachyon's Rust NIF with cargo and copies it to priv/native"
  @moduledoc """
  Runs `cargo build --release` in `native/` and copies the `tachyon_nif`
  library to `priv/native/libtachyon_nif.so`.

  Tachyon has no Hex dependencies, so this small compiler replaces the rustler
  mix package. It runs as part of `mix compile` in this project and in any
  project that depends on Tachyon by path or git.

  Before a first build (which compiles the whole Rust workspace: a minute or
  two) it says so; cargo's output (its `Compiling` lines, warnings and
  errors) is shown as it comes; a build with nothing to do prints nothing.

  Environment:

    * `TACHYON_CARGO_PROFILE` - `release` (default) or `dev`
    * `TACHYON_SKIP_CARGO=1` - use the library already in `priv/native`
  """
  use Mix.Task.Compiler

  @impl true
  def run(_args) do
    root = Path.dirname(Mix.Project.project_file() || "mix.exs")
    native = Path.join(root, "native")
    dest_dir = Path.join(root, "priv/native")
    dest = Path.join(dest_dir, "libtachyon_nif.so")

    cond do
      System.get_env("TACHYON_SKIP_CARGO") in ["1", "true"] and File.exists?(dest) ->
        {:noop, []}

      System.find_executable("cargo") == nil ->
        Mix.raise("""
        cargo was not found on PATH: Tachyon needs a Rust toolchain to build its NIF.
        Install Rust (https://rustup.rs) and run bin/setup.
        """)

      true ->
        build(native, dest_dir, dest)
    end
  end

  defp build(native, dest_dir, dest) do
    profile = System.get_env("TACHYON_CARGO_PROFILE", "release")

    args =
      ["build", "--package", "tachyon_nif"] ++
        if(profile == "release", do: ["--release"], else: [])

    target_dir = Path.join(native, "target")
    lib_dir = if profile == "release", do: "release", else: "debug"
    src = Path.join([target_dir, lib_dir, "libtachyon_nif.so"])

    if File.exists?(src) do
      # Built before: usually nothing to do, and cargo is shown only if it
      # compiles (a change in native/), warns or fails.
      cargo(native, args, "Rebuilding Tachyon's NIF with cargo (#{profile}) in #{native}")
    else
      Mix.shell().info(
        "Building Tachyon's NIF with cargo (#{profile}) in #{native}: the first build " <>
          "compiles the Rust workspace and takes a minute or two"
      )

      cargo(native, args, nil)
    end

    File.mkdir_p!(dest_dir)

    # On a first build priv/ did not exist when Mix laid out _build: link it
    # now so that the NIF loads during this very compilation.
    Mix.Project.build_structure()

    if stale?(src, dest) do
      # Copy to a temporary name and rename: a VM that has the old library
      # loaded keeps its mapping, and no reader ever sees a half-written file.
      tmp = dest <> ".tmp"
      File.cp!(src, tmp)
      File.rename!(tmp, dest)
      {:ok, []}
    else
      {:noop, []}
    end
  end

  # Runs cargo and streams its output as it comes. With a `header`, cargo's
  # output is held back until it compiles, warns or fails (a build with
  # nothing to do stays silent), then the header and every line from then
  # on; with none, every line. Raises if cargo fails.
  defp cargo(native, args, header) do
    port =
      Port.open({:spawn_executable, System.find_executable("cargo")}, [
        :binary,
        :exit_status,
        :stderr_to_stdout,
        {:line, 4096},
        {:cd, native},
        {:args, args},
        {:env, [{~c"CARGO_TERM_COLOR", ~c"never"}]}
      ])

    cargo_output(port, native, header, if(header, do: [], else: nil), "")
  end

  # `held`: lines not shown yet (newest first), nil once streaming.
  defp cargo_output(port, native, header, held, partial) do
    receive do
      {^port, {:data, {:noeol, text}}} ->
        cargo_output(port, native, header, held, partial <> text)

      {^port, {:data, {:eol, text}}} ->
        line = partial <> text

        cond do
          held == nil ->
            Mix.shell().info(line)
            cargo_output(port, native, header, nil, "")

          line =~ ~r/^\s*(Compiling|warning|error)/ ->
            Mix.shell().info(header)
            Enum.each(Enum.reverse([line | held]), &Mix.shell().info/1)
            cargo_output(port, native, header, nil, "")

          true ->
            cargo_output(port, native, header, [line | held], "")
        end

      {^port, {:exit_status, 0}} ->
        if held == nil and partial != "", do: Mix.shell().info(partial)
        :ok

      {^port, {:exit_status, status}} ->
        if held, do: Enum.each(Enum.reverse(held), &Mix.shell().error/1)
        if partial != "", do: Mix.shell().error(partial)
        Mix.raise("cargo build failed with status #{status} (in #{native})")
    end
  end

  defp stale?(src, dest) do
    case {File.stat(src, time: :posix), File.stat(dest, time: :posix)} do
      {{:ok, s}, {:ok, d}} -> s.mtime > d.mtime or s.size != d.size
      {{:ok, _}, _} -> true
      _ -> Mix.raise("cargo did not produce #{src}")
    end
  end
end

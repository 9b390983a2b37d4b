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
      docs: [main: "Tachyon", extras: ["README.md", "docs/ARCHITECTURE.md", "docs/FORMAT.md"]]
    ]
  end

  def application do
    [
      extra_applications: [:logger, :crypto],
      mod: {Tachyon.Application, []}
    ]
  end

  defp elixirc_paths(:test), do: ["lib", "test/support"]
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

    {output, status} =
      System.cmd("cargo", args,
        cd: native,
        stderr_to_stdout: true,
        env: [{"CARGO_TERM_COLOR", "never"}]
      )

    if status != 0 do
      Mix.shell().error(output)
      Mix.raise("cargo build failed with status #{status}")
    end

    if String.contains?(output, "Compiling tachyon"), do: Mix.shell().info(String.trim(output))

    target_dir = Path.join(native, "target")
    lib_dir = if profile == "release", do: "release", else: "debug"
    src = Path.join([target_dir, lib_dir, "libtachyon_nif.so"])
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

  defp stale?(src, dest) do
    case {File.stat(src, time: :posix), File.stat(dest, time: :posix)} do
      {{:ok, s}, {:ok, d}} -> s.mtime > d.mtime or s.size != d.size
      {{:ok, _}, _} -> true
      _ -> Mix.raise("cargo did not produce #{src}")
    end
  end
end

defmodule Tachyon.Bench.Echo.Floor do
  @moduledoc false
  # The `raw.rust` case of `mix tachyon.bench echo`: Rust ping <-> Rust pong
  # in the standalone binary `tachyon_udp_floor` (no BEAM in the process),
  # built with cargo and run by the bench; its result line is parsed into a
  # case.

  alias Tachyon.Bench

  @doc "Builds and runs the floor binary with the echo bench's `cfg`; returns the case."
  def run(cfg) do
    bin = build!()

    args =
      [
        "--messages",
        cfg.n,
        "--warmup",
        cfg.warmup,
        "--size",
        cfg.size,
        "--ping-core",
        cfg.ping_core || "none",
        "--pong-core",
        cfg.pong_core || "none",
        "--wait",
        Atom.to_string(cfg.wait)
      ]
      |> Enum.map(&to_string/1)

    {out, status} = System.cmd(bin, args, stderr_to_stdout: true)
    if status != 0, do: Mix.raise("#{bin} failed (#{status}):\n#{out}")

    line =
      out
      |> String.split("\n")
      |> Enum.find(&String.starts_with?(&1, "tachyon_udp_floor "))

    line || Mix.raise("no result line from #{bin}:\n#{out}")
    floor_case(line, cfg.size)
  end

  defp build! do
    native = Path.join(Path.dirname(Mix.Project.project_file()), "native")
    IO.puts("\nraw.rust: cargo build --release -p tachyon_core --bin tachyon_udp_floor")

    {out, status} =
      System.cmd(
        "cargo",
        ["build", "--release", "-p", "tachyon_core", "--bin", "tachyon_udp_floor"],
        cd: native,
        stderr_to_stdout: true,
        env: [{"CARGO_TERM_COLOR", "never"}]
      )

    if status != 0, do: Mix.raise("cargo build failed:\n#{out}")
    target = System.get_env("CARGO_TARGET_DIR") || Path.join(native, "target")
    Path.join([target, "release", "tachyon_udp_floor"])
  end

  defp floor_case(line, size) do
    # the line starts with a tag word, then key=value tokens
    {kv, report} = Bench.parse_result_line(line)

    tails =
      kv
      |> Map.fetch!("tails")
      |> String.split(",")
      |> Enum.map(fn t ->
        [p, avg, sd, max] = t |> String.split("/") |> Enum.map(&Bench.parse_number/1)
        {p, avg, sd, max}
      end)

    ping = placement(kv["ping"])
    pong = placement(kv["pong"])

    Bench.from_report("raw.rust", Map.put(report, :tails, tails), size, %{
      note: "standalone binary, no BEAM: ping #{ping}; pong #{pong}",
      json_extra: %{ping: ping, pong: pong, lost: trunc(Bench.parse_number(kv["lost"]))}
    })
  end

  # "core_0_busy_spin" -> "core 0 busy_spin"
  defp placement(token),
    do: String.replace(token, "_", " ") |> String.replace("busy spin", "busy_spin")
end

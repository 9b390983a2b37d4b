defmodule Tachyon.Bench.Sequencer.Keys do
  @moduledoc false
  # `mix tachyon.bench sequencer --auth mac|aead`: each round-trip and
  # throughput case of the sequencer bench runs without keys (its usual
  # name) and right after with them (the same name + ".auth"): the nodes
  # started with `--key-file` (and `--no-encrypt` for mac), the member
  # (Elixir or Rust) with `auth:` from the same group key file, made once
  # for the run. Single node and, with --group N, the group's cases
  # likewise.
  #
  # Printed: every pair side by side (round trips: p50 and p99;
  # throughput: msg/s) with the CPU per message of both, and the goals of
  # issue 36: round trip p50 with keys at most 1.15x without, throughput
  # at least 0.8x.

  alias Tachyon.Bench
  alias Tachyon.Bench.Report

  @suffix ".auth"

  @doc "`cases` with each sequencer case of a kind in `kinds` followed by its `.auth` twin."
  def with_twins(cases, kinds) do
    Enum.flat_map(cases, fn name ->
      if kind(name) in kinds, do: [name, name <> @suffix], else: [name]
    end)
  end

  defp kind("tachyon.sequencer." <> rest),
    do: rest |> String.replace_suffix(".fsync", "") |> String.replace(~r/^group\d+\./, "")

  defp kind(_), do: nil

  @doc "A case's name without `.auth`, and whether it runs with keys."
  def split(name) do
    case String.replace_suffix(name, @suffix, "") do
      ^name -> {name, false}
      base -> {base, true}
    end
  end

  @doc """
  The run's keys for `mode` (`"mac"` or `"aead"`; nil: none): a group key
  file in a directory of its own, made once.
  """
  def setup(nil), do: nil

  def setup(mode) when mode in ["mac", "aead"] do
    dir = Path.join(System.tmp_dir!(), "tachyon-bench-keys-#{System.pid()}")
    File.rm_rf!(dir)
    File.mkdir_p!(dir)
    path = Path.join(dir, "group.key")
    {:ok, text} = Tachyon.Auth.generate()
    :ok = Tachyon.Auth.write_file(path, text)
    %{mode: mode, key_file: path}
  end

  def setup(mode), do: Bench.CLI.unknown!("auth", mode, ["mac", "aead"])

  @doc "The arguments of `mix tachyon.sequencer` for a case with (`keys`) or without (nil) keys."
  def seq_args(nil), do: []
  def seq_args(%{key_file: f, mode: "aead"}), do: ["--key-file", f]
  def seq_args(%{key_file: f}), do: ["--key-file", f, "--no-encrypt"]

  @doc "A member's `auth:` option."
  def member_auth(nil), do: nil
  def member_auth(%{key_file: f, mode: mode}), do: [key_file: f, encrypt: mode == "aead"]

  @doc "The Rust bench member's `auth` (as the NIF takes it)."
  def native_auth(keys), do: Tachyon.Auth.native!(member_opt(keys), "the bench member")

  defp member_opt(nil), do: nil

  defp member_opt(keys) do
    {:ok, o} = Tachyon.Auth.option(member_auth(keys), false)
    o
  end

  @doc "The pairs without and with keys, side by side."
  def print_compare(cases) do
    by = Bench.by_name(cases)
    pairs = for c <- cases, {base, true} <- [split(c.name)], r = by[base], do: {r, c}

    if pairs != [] do
      IO.puts("\nkeys (auth:) against none (same run):")

      rows =
        for {r, a} <- pairs do
          kind = String.replace_prefix(r.name, "tachyon.sequencer.", "")
          cpu = fn c -> if c[:cpu_us_per_msg], do: "#{c.cpu_us_per_msg} us", else: "-" end

          if a[:rate] do
            [kind, "msg/s", Report.delimit(round(r.rate)), Report.delimit(round(a.rate))] ++
              [Report.ratio(a.rate, r.rate), cpu.(r), cpu.(a)]
          else
            [kind, "p50", Report.short_ns(r.p50_ns), Report.short_ns(a.p50_ns)] ++
              [Report.ratio(a.p50_ns, r.p50_ns), cpu.(r), cpu.(a)]
          end
        end

      Report.print_rows(
        ["case", "", "no keys", "keys", "ratio", "cpu/msg", "cpu/msg keys"],
        rows
      )

      IO.puts("  (cpu/msg: every node's and the member's CPU time per committed message)")
    end
  end

  @doc "The goals: round trip p50 at most 1.15x without keys, throughput at least 0.8x."
  def goals(cases) do
    by = Bench.by_name(cases)

    for c <- cases, {base, true} <- [split(c.name)], r = by[base] do
      kind = String.replace_prefix(base, "tachyon.sequencer.", "")

      if c[:rate] do
        ratio = c.rate / r.rate

        Bench.goal(
          "#{kind} with keys / without (msg/s)",
          Bench.x(ratio),
          Bench.bound_text(:ge, 0.8),
          ratio >= 0.8
        )
      else
        ratio = c.p50_ns / r.p50_ns

        Bench.goal(
          "#{kind} with keys / without (p50)",
          Bench.x(ratio),
          Bench.bound_text(:le, 1.15),
          ratio <= 1.15
        )
      end
    end
  end
end

defmodule Tachyon.BenchCLITest do
  use ExUnit.Case, async: true

  import ExUnit.CaptureIO
  import Tachyon.TestHelpers, only: [tmp_dir: 1]

  alias Mix.Tasks.Tachyon.Bench, as: BenchTask
  alias Tachyon.Bench
  alias Tachyon.Bench.{CLI, JSON, Summary}

  describe "mix tachyon.bench --help" do
    test "is planned before anything runs, wherever it is on the line" do
      assert BenchTask.plan(["--help"]) == :help
      assert BenchTask.plan(["-h"]) == :help
      assert BenchTask.plan(["store", "--messages", "5", "--help"]) == :help
    end

    test "lists every part and every option, with the defaults" do
      text = capture_io(fn -> BenchTask.run(["--help"]) end)

      for {name, mod} <- BenchTask.benches() do
        spec = mod.spec()
        assert text =~ "\n#{name}: ", "part #{name} missing"

        for {key, _type, _arg, _doc} <- spec.options do
          assert text =~ CLI.flag(key), "#{CLI.flag(key)} of #{name} missing"
        end
      end

      for flag <- ~w(--messages --warmup --size --quick --json --plot --dir --summary --help) do
        assert text =~ flag
      end

      # The store's defaults, and what --quick changes, in brackets.
      assert text =~ "--messages 200,000 [20,000]"
      assert text =~ "Its goals are checked on a full run (--messages 1000000 or more)"
    end
  end

  describe "a misspelled part, option or case" do
    test "is refused before anything runs, with a suggestion" do
      assert {:error, msg} = BenchTask.plan(["strore"])
      assert msg =~ ~s(unknown part "strore"; did you mean store?)

      assert {:error, msg} = BenchTask.plan(["store", "--mesages", "10"])
      assert msg =~ "unknown option --mesages of the store part; did you mean --messages?"

      assert {:error, msg} = BenchTask.plan(["store", "--cases", "tachyon.store.apend"])
      assert msg =~ "did you mean tachyon.store.append?"

      assert {:error, msg} = BenchTask.plan(["store", "--messages", "many"])
      assert msg =~ ~s(--messages expects an integer, got: "many")
    end

    test "an option of another part says which part has it" do
      assert {:error, msg} = BenchTask.plan(["--records", "10"])
      assert msg =~ "--records is an option of the table part"
    end

    test "nothing close enough: no suggestion, the known names" do
      assert {:error, msg} = BenchTask.plan(["zzz"])
      refute msg =~ "did you mean"
      assert msg =~ "known: store, async, echo, table, sequencer"
    end

    test "raises Mix.Error (a non-zero exit)" do
      assert_raise Mix.Error, ~r/did you mean store\?/, fn -> BenchTask.run(["strore"]) end
    end
  end

  test "a run is planned with its part, its options and its plot directory" do
    assert BenchTask.plan(["store", "--quick", "--plot", "plots"]) ==
             {:run, "store", ["--quick"], "plots"}

    assert BenchTask.plan(["--quick"]) == {:run, nil, ["--quick"], nil}
    assert {:error, "--plot expects a directory"} = BenchTask.plan(["store", "--plot"])
    assert {:error, "--summary expects a directory" <> _} = BenchTask.plan(["--summary"])

    assert {:error, "--summary DIR: \"nowhere\" is not a directory"} =
             BenchTask.plan(["--summary", "nowhere"])
  end

  describe "sequencer goals" do
    test "a group's p50, p99 and CPU against one node's, and the loss tail against the loss-free tail" do
      cases = [
        %{
          name: "tachyon.sequencer.roundtrip",
          p50_ns: 10_000,
          p99_ns: 20_000,
          p999_ns: 40_000,
          cpu_us_per_msg: 10.0
        },
        %{
          name: "tachyon.sequencer.roundtrip.loss",
          p50_ns: 10_000,
          p99_ns: 30_000,
          p999_ns: 70_000
        },
        %{
          name: "tachyon.sequencer.group3.roundtrip",
          p50_ns: 19_000,
          p99_ns: 120_000,
          p999_ns: 400_000,
          cpu_us_per_msg: 24.0
        }
      ]

      goals = Map.new(Tachyon.Bench.Sequencer.Goals.goals(cases, 3), &{&1.what, &1})

      assert %{measured: "1.90x", met: true} =
               goals["bus round trip through a group of 3 / through one node (p50)"]

      assert %{measured: "6.00x", met: false} =
               goals["bus round trip through a group of 3 / through one node (p99)"]

      assert %{measured: "2.40x", met: true} =
               goals["CPU per committed message, group of 3 / one node (round trip)"]

      assert %{measured: "1.75x", met: false} =
               goals[
                 "bus round trip with 1% loss, p99.9 / without loss, p99.9 " <>
                   "(a lost datagram costs a round trip, not a timer)"
               ]
    end

    test "a case without a CPU figure gives no CPU goal" do
      cases = [
        %{name: "tachyon.sequencer.roundtrip", p50_ns: 10_000, p99_ns: 20_000, p999_ns: 1},
        %{name: "tachyon.sequencer.group3.roundtrip", p50_ns: 1, p99_ns: 1, p999_ns: 1}
      ]

      whats = Enum.map(Tachyon.Bench.Sequencer.Goals.goals(cases, 3), & &1.what)
      refute Enum.any?(whats, &(&1 =~ "CPU"))
      assert Enum.any?(whats, &(&1 =~ "(p99)"))
    end
  end

  describe "goals" do
    setup do
      goals = [
        Bench.goal("Tachyon.Store.append p99.9", "3.00us", "under 2 us", false),
        Bench.goal(
          "average append, :disk_log.blog / Tachyon.Store",
          "41.00x",
          "at least 40x",
          true
        )
      ]

      %{goals: goals, spec: Bench.Store.spec()}
    end

    test "a shorter run shows them for reference, not as misses", %{goals: goals, spec: spec} do
      {json, out} = with_io(fn -> Bench.print_goals(goals, [messages: 200_000], spec) end)

      assert out =~ "set for a full run (mix tachyon.bench store --messages 1000000)"
      assert out =~ "Tachyon.Store.append p99.9: 3.00us (goal for a full run: under 2 us)"
      refute out =~ ~r/not met|NOT MET/i
      assert Enum.all?(json, &(&1["checked"] == false))
    end

    test "a full run checks them", %{goals: goals, spec: spec} do
      {json, out} = with_io(fn -> Bench.print_goals(goals, [messages: 1_000_000], spec) end)

      assert out =~ "Goals (checked: this is a full run)"
      assert out =~ "Tachyon.Store.append p99.9: 3.00us (goal: under 2 us): not met"
      assert out =~ "41.00x (goal: at least 40x): met"
      assert [%{"checked" => true, "met" => false}, %{"met" => true}] = json
    end

    test "--quick is never a full run", %{spec: spec} do
      refute CLI.full_run?([messages: 5_000_000, quick: true], spec)
      assert CLI.full_run?([messages: 1_000_000], spec)
    end
  end

  test "--summary prints the tables of a run's JSON: Tachyon, peers, floors, ratios, command, machine, plot" do
    dir = tmp_dir("bench-summary")

    case_map = fn name, p50 ->
      %{
        "name" => name,
        "messages" => 200_000,
        "size" => 256,
        "p50_ns" => p50,
        "p99_ns" => p50 * 2,
        "p999_ns" => p50 * 4,
        "max_ns" => p50 * 100,
        "ops_per_sec" => 1.0e9 / p50
      }
    end

    doc = %{
      "bench" => "store",
      "command" => "mix tachyon.bench --json #{dir}",
      "warmup" => 20_000,
      "machine" => %{
        "cpu" => "Test CPU",
        "cores" => 2,
        "memory_gib" => 7.8,
        "kernel" => "6.1",
        "otp" => "25",
        "elixir" => "1.14.0",
        "date" => "2026-11-26T10:13:58Z"
      },
      "cases" => [
        case_map.("tachyon.store.append", 100),
        case_map.("disk_log.blog", 1_000),
        case_map.("tachyon.store.append.native", 50)
      ],
      "goals" => [
        %{
          "goal" => "Tachyon.Store.append p99.9: under 2 us",
          "measured" => "400ns",
          "checked" => false,
          "met" => true
        }
      ]
    }

    File.write!(Path.join(dir, "store.json"), JSON.encode(doc))
    File.write!(Path.join(dir, "store-20261126T101358.svg"), "<svg/>")

    md = Summary.markdown(dir)
    assert md =~ "### Store"
    assert md =~ "Command: `mix tachyon.bench --json #{dir}` (part `store`)"
    assert md =~ "first row: 200,000 measured, 256 bytes each after 20,000 warm-up"
    assert md =~ "Machine: Test CPU, 2 cores, 7.8 GiB, Linux 6.1, OTP 25, Elixir 1.14.0"
    assert md =~ "| Tachyon | `tachyon.store.append` |"
    # p50 against the first row's: the peer 10x, the floor 0.5x.
    assert md =~ ~r/\| peer \| `disk_log.blog` \|.*\| 1.00us \|.*\| 10.00x \|/
    assert md =~ ~r/\| floor \| `tachyon.store.append.native` \|.*\| 0.50x \|/
    # Rows whose case the run lacks are left out.
    refute md =~ "file.write.raw"
    assert md =~ "not checked: a shorter run than the goal was set for"
    assert md =~ "store-20261126T101358.svg"
  end

  describe "sequencer --durability fsync" do
    alias Tachyon.Bench.Sequencer.{Durability, Goals}

    test "each case of a kind is followed by its .fsync twin, the floors before them" do
      all = ~w(machine.hiccup raw.relay.roundtrip tachyon.sequencer.roundtrip
               tachyon.sequencer.group3.roundtrip tachyon.sequencer.other beam.dist.roundtrip)

      assert Durability.with_twins(all, ["roundtrip"]) ==
               ~w(machine.hiccup raw.relay.roundtrip tachyon.sequencer.roundtrip raw.fdatasync
                  raw.fdatasync.throughput raw.fdatasync.throughput.batched
                  tachyon.sequencer.roundtrip.fsync tachyon.sequencer.group3.roundtrip
                  tachyon.sequencer.group3.roundtrip.fsync tachyon.sequencer.other
                  beam.dist.roundtrip)

      assert Durability.split("tachyon.sequencer.group3.roundtrip.fsync") ==
               {"tachyon.sequencer.group3.roundtrip", :fsync}

      assert Durability.split("tachyon.sequencer.roundtrip") ==
               {"tachyon.sequencer.roundtrip", :replicated}

      cfg = %{n: 100_000, warmup: 20_000, fsync_n: 500}
      assert Durability.cfg_for(cfg, :fsync, "roundtrip.native") == %{cfg | n: 500, warmup: 50}
      assert Durability.cfg_for(cfg, :fsync, "throughput") == cfg
      assert Durability.cfg_for(cfg, :replicated, "roundtrip") == cfg
    end

    test "its cases pass the check before the run; an unknown mode stops the part at once" do
      assert {:run, "sequencer", _, nil} =
               BenchTask.plan(
                 ~w(sequencer --durability fsync --cases tachyon.sequencer.roundtrip.fsync)
               )

      assert_raise Mix.Error, ~r/unknown durability "fsynk"; did you mean fsync\?/, fn ->
        Tachyon.Bench.Sequencer.run(~w(--durability fsynk --quick))
      end
    end

    test "goals: p50 at most the floor's plus :replicated's, throughput at least half" do
      lat = fn name, p50 -> %{name: name, p50_ns: p50} end
      rate = fn name, r -> %{name: name, rate: r} end

      cases = [
        lat.("raw.fdatasync", 60_000),
        lat.("tachyon.sequencer.roundtrip", 8_000),
        lat.("tachyon.sequencer.roundtrip.fsync", 67_000),
        lat.("tachyon.sequencer.group3.roundtrip", 20_000),
        lat.("tachyon.sequencer.group3.roundtrip.fsync", 90_000),
        rate.("tachyon.sequencer.throughput", 100_000.0),
        rate.("tachyon.sequencer.throughput.fsync", 49_000.0)
      ]

      goals = Durability.goals(cases, 3)
      assert [one, group, tput] = goals
      assert one.met and one.measured == "0.99x" and one.what =~ "one node"
      refute group.met
      assert group.what =~ "group of 3" and group.measured == "1.13x"
      refute tput.met
      assert tput.measured == "0.49x" and tput.goal == "at least 0.5x"
      # In the part's goals, after the others.
      assert Enum.take(Goals.goals(cases, 3), -3) == goals
      # Without the fsync cases: none.
      assert Durability.goals(Enum.take(cases, 2), nil) == []
    end

    test "the side-by-side table: each fsync case against :replicated, the floor and the syncs" do
      c = fn name, p50, extra -> Map.merge(%{name: name, p50_ns: p50}, extra) end

      cases = [
        c.("raw.fdatasync", 60_000, %{}),
        c.("tachyon.sequencer.roundtrip", 8_000, %{}),
        c.("tachyon.sequencer.roundtrip.fsync", 80_000, %{
          sync: %{"syncs" => 5_500, "entries_per_sync" => 1.0, "sync_avg_us" => 70.5}
        })
      ]

      out = capture_io(fn -> Durability.print_compare(cases) end)
      assert out =~ "durability: :fsync against :replicated and the disk"

      assert out =~
               ~r/roundtrip\s+p50\s+8.00us\s+80.00us\s+10.00x\s+60.00us\s+68.00us\s+1.18x\s+5,500\s+1.0\s+70.5/

      assert capture_io(fn -> Durability.print_compare(Enum.take(cases, 2)) end) == ""
    end

    test "--summary: the fsync tables, and the part's goals after its last table either way" do
      dir = tmp_dir("bench-summary-fsync")

      c = fn name, p50, extra ->
        Map.merge(
          %{"name" => name, "messages" => 5_000, "size" => 256, "p50_ns" => p50}
          |> Map.merge(%{"p99_ns" => p50, "p999_ns" => p50, "max_ns" => p50}),
          extra
        )
      end

      doc = %{
        "bench" => "sequencer",
        "command" => "mix tachyon.bench sequencer --durability fsync",
        "machine" => %{},
        "cases" => [
          c.("tachyon.sequencer.roundtrip", 8_000, %{}),
          c.("tachyon.sequencer.roundtrip.fsync", 80_000, %{"warmup" => 500}),
          c.("raw.fdatasync", 60_000, %{}),
          c.("tachyon.sequencer.throughput", 10_000, %{"msgs_per_sec" => 100_000}),
          c.("tachyon.sequencer.throughput.fsync", 20_000, %{"msgs_per_sec" => 50_000})
        ],
        "goals" => [
          %{"goal" => "fsync goal", "measured" => "0.99x", "checked" => false, "met" => true}
        ]
      }

      File.write!(Path.join(dir, "sequencer.json"), JSON.encode(doc))
      md = Summary.markdown(dir)
      assert md =~ "### Sequencer and Bus with `durability: :fsync`: round trip"
      # Its first row's own warm-up, not the part's.
      assert md =~ "first row: 5,000 measured, 256 bytes each after 500 warm-up"
      assert md =~ ~r/\| Tachyon \| `tachyon.sequencer.roundtrip` \|.*\| 0.10x \|/
      assert md =~ ~r/\| floor \| `raw.fdatasync` \|.*\| 0.75x \|/
      assert md =~ ~r/\| Tachyon \| `tachyon.sequencer.throughput` \|.*\| 100,000 \| 2.00x \|/
      # The goals once, after the last table there is.
      [_, after_last] =
        String.split(md, "### Sequencer and Bus with `durability: :fsync`: throughput")

      assert after_last =~ "- fsync goal"
      assert length(String.split(md, "- fsync goal")) == 2

      # A run without them: no fsync tables, the goals still printed.
      doc = %{doc | "cases" => Enum.take(doc["cases"], 1)}
      File.write!(Path.join(dir, "sequencer.json"), JSON.encode(doc))
      md = Summary.markdown(dir)
      refute md =~ "with `durability: :fsync`"
      assert md =~ "- fsync goal"
    end
  end

  test "--summary of a directory with no run is an error" do
    dir = tmp_dir("bench-summary-empty")
    assert_raise Mix.Error, ~r/no JSON file of a run/, fn -> Summary.markdown(dir) end
  end
end

defmodule Tachyon.BenchPlotTest do
  use ExUnit.Case, async: true

  import Tachyon.TestHelpers, only: [tmp_dir: 1]

  alias Tachyon.Bench.Plot

  defp case_map(name, scale) do
    %{
      name: name,
      messages: 1000,
      avg_ns: 120 * scale,
      min_ns: 50 * scale,
      p50_ns: 100 * scale,
      p75_ns: 110 * scale,
      p90_ns: 130 * scale,
      p99_ns: 400 * scale,
      p999_ns: 2_000 * scale,
      p9999_ns: 9_000 * scale,
      p99999_ns: 30_000 * scale,
      max_ns: 90_000 * scale
    }
  end

  test "a run's SVG is well-formed XML with one curve per case, and index.html shows every run" do
    dir = tmp_dir("plot")
    cases = [case_map("a.fast", 1), case_map("b.slow & <odd>", 10), case_map("c", 3)]
    path = Plot.write(dir, "demo", cases, "mix tachyon.bench demo --plot #{dir}")

    {doc, _rest} = :xmerl_scan.file(String.to_charlist(path), quiet: true)
    curves = :xmerl_xpath.string(~c"//polyline[@class='curve']", doc)
    assert length(curves) == 3

    names =
      for c <- curves do
        [{:xmlAttribute, _, _, _, _, _, _, _, v, _}] = :xmerl_xpath.string(~c"@data-case", c)
        List.to_string(v)
      end

    assert names == ["a.fast", "b.slow & <odd>", "c"]
    # Each curve has a point per percentile (min .. max).
    for c <- curves do
      [{:xmlAttribute, _, _, _, _, _, _, _, pts, _}] = :xmerl_xpath.string(~c"@points", c)
      assert length(String.split(List.to_string(pts), " ")) == 9
    end

    # The file names carry the time to the second: wait for the next one.
    second = System.os_time(:second)
    assert Tachyon.TestHelpers.wait_until(fn -> System.os_time(:second) > second end)
    Plot.write(dir, "demo2", [case_map("x", 1)], "mix tachyon.bench demo2")
    index = File.read!(Path.join(dir, "index.html"))
    assert index =~ "demo-" and index =~ "demo2-"
    assert length(Path.wildcard(Path.join(dir, "*.svg"))) == 2
  end
end

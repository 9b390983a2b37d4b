# The disk an empty application takes: a Tachyon.Store, a Tachyon.Table and
# a single-node Tachyon.Sequencer started with their default options in a
# fresh directory tree, nothing written. Prints `du -sh --apparent-size`
# and `du -sh` of each part's directory and of the whole tree.
root = Path.join(System.tmp_dir!(), "tachyon-footprint-#{System.unique_integer([:positive])}")
File.mkdir_p!(root)

try do
  {:ok, _} = Tachyon.Store.start_link(name: :footprint_events, path: Path.join(root, "events"))
  {:ok, _} = Tachyon.Table.start_link(name: :footprint_users, path: Path.join(root, "users"))

  {:ok, _} =
    Tachyon.Sequencer.start_link(name: :footprint_seq, path: Path.join(root, "seq"), port: 0)

  du = fn args, dir ->
    {out, 0} = System.cmd("du", args ++ [dir])
    out |> String.split() |> hd()
  end

  IO.puts("directory  du -sh --apparent-size  du -sh")

  for d <- ["events", "users", "seq", "."] do
    dir = Path.join(root, d)
    name = if d == ".", do: "total", else: d
    apparent = du.(["-sh", "--apparent-size"], dir)
    allocated = du.(["-sh"], dir)
    IO.puts(String.pad_trailing(name, 11) <> String.pad_trailing(apparent, 24) <> allocated)
  end
after
  File.rm_rf!(root)
end

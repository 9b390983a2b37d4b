defmodule Tachyon.Bench.DistSequencer do
  @moduledoc false
  # The BEAM way to a total-order bus, for `beam.dist.roundtrip`: a
  # GenServer sequencer on a second BEAM node that stamps each message,
  # logs it with `:disk_log` and sends it to every member over distributed
  # Erlang.

  use GenServer

  @doc "Starts a peer node running the sequencer; returns `{peer, node}`."
  def start_peer(log_dir) do
    unless Node.alive?() do
      System.cmd("epmd", ["-daemon"])

      {:ok, _} =
        Node.start(:"tachyon_bench_#{System.unique_integer([:positive])}@127.0.0.1", :longnames)
    end

    ebin = :code.lib_dir(:tachyon, :ebin)
    elixir = :code.lib_dir(:elixir, :ebin)

    {:ok, peer, node} =
      :peer.start_link(%{
        name: :"tachyon_seq_#{System.unique_integer([:positive])}",
        host: ~c"127.0.0.1",
        longnames: true,
        args: [~c"-pa", ebin, ~c"-pa", elixir]
      })

    {:ok, _} = :erpc.call(node, __MODULE__, :start, [log_dir])
    {peer, node}
  end

  def stop_peer(peer), do: :peer.stop(peer)

  @doc false
  def start(log_dir) do
    {:ok, pid} = GenServer.start(__MODULE__, log_dir, name: __MODULE__)
    {:ok, pid}
  end

  @impl true
  def init(dir) do
    File.mkdir_p!(dir)

    {:ok, log} =
      :disk_log.open(
        name: :tachyon_dist_seq,
        file: String.to_charlist(Path.join(dir, "seq.log")),
        type: :halt,
        format: :internal
      )

    {:ok, %{log: log, seq: 0, members: []}}
  end

  @impl true
  def handle_call({:join, pid}, _from, s), do: {:reply, :ok, %{s | members: [pid | s.members]}}

  @impl true
  def handle_cast({:publish, member_id, data}, s) do
    seq = s.seq + 1
    :ok = :disk_log.blog(s.log, [<<seq::64, member_id::32>>, data])
    for m <- s.members, do: send(m, {:dist_bus, seq, member_id, data})
    {:noreply, %{s | seq: seq}}
  end
end

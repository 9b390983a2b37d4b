defmodule Tachyon.Bench.Echo do
  @moduledoc false
  # `mix tachyon.bench echo`: UDP round trips over 127.0.0.1, as in
  # CoralReactor's ping/pong benchmark (seed 003): the client sends one
  # datagram, waits for the echo, records the round trip, sends the next.
  #
  # Cases:
  #   raw.rust               Rust ping <-> Rust pong in a standalone binary (no BEAM in the
  #                          process): the floor. Built with cargo and run by the bench.
  #   tachyon.echo           Rust ping thread (NIF) <-> Tachyon.Echo: the same loops in the BEAM
  #   gen_udp.echo           Rust ping thread <-> a gen_udp echo process (isolates the server side)
  #   tachyon.udp.echo       Rust ping thread <-> an echo process on Tachyon.UDP (the same, for
  #                          Tachyon.UDP: receive thread -> process -> Tachyon.UDP.send)
  #   tachyon.udp.roundtrip  an Elixir process with Tachyon.UDP <-> Tachyon.Echo
  #   tachyon.udp.roundtrip.block  the same with the receive thread blocking (wait: :park)
  #   tachyon.udp.roundtrip.poll  an Elixir process polling a poll-mode Tachyon.UDP socket
  #                          (recv/2 on its own scheduler, --udp-wait) <-> Tachyon.Echo
  #   tachyon.udp.echo.poll  Rust ping thread <-> an Elixir echo process polling a poll-mode
  #                          Tachyon.UDP socket (recv_many/3)
  #   socket.roundtrip       an Elixir process with :socket <-> a :socket echo process
  #   gen_udp.roundtrip      an Elixir process with gen_udp <-> a gen_udp echo process
  #                          (both active: true, gen_udp's fastest mode here)
  #   gen_udp.roundtrip.passive  the same with active: false and :gen_udp.recv/3 on both sides
  #   tachyon.udp.flood      backpressure: a burst into a Tachyon.UDP socket whose owner
  #                          is not reading, with max_queue :infinity and bounded, and
  #                          gen_udp (active: true) for comparison. Not a latency case.
  #
  # The cases with a gen_udp or :socket peer (gen_udp.echo, socket.roundtrip,
  # gen_udp.roundtrip, gen_udp.roundtrip.passive) run --peer-messages and
  # --peer-warmup, by default a tenth of --messages/--warmup (they were
  # expected to take about 100 us per round trip; on the 2-core test machine
  # they take 13-30 us, so the ratio is kept only to bound the default run's
  # length); the output says so.

  alias Tachyon.Bench
  alias Tachyon.Bench.Echo.{Floor, Flood, Peers}
  alias Tachyon.Bench.Report

  @defaults [messages: 200_000, warmup: 50_000, size: 256, flood: 100_000, max_queue: 1000]
  @quick [messages: 20_000, warmup: 5_000, flood: 10_000]
  @all ~w(raw.rust tachyon.echo gen_udp.echo tachyon.udp.echo tachyon.udp.echo.poll tachyon.udp.roundtrip tachyon.udp.roundtrip.block tachyon.udp.roundtrip.poll socket.roundtrip gen_udp.roundtrip gen_udp.roundtrip.passive tachyon.udp.flood)
  @loopback {127, 0, 0, 1}

  @doc "The part's options, defaults and goals' run (Tachyon.Bench.CLI)."
  def spec do
    %{
      name: "echo",
      summary:
        "UDP round trips over 127.0.0.1: Tachyon.Echo and Tachyon.UDP against gen_udp, " <>
          ":socket and two Rust threads in a standalone binary (the floor)",
      cases: @all,
      options: [
        {:cases, :string, "LIST", "run only these cases (comma-separated)"},
        {:peer_messages, :integer, "N",
         "round trips of the cases with a gen_udp or :socket peer (default: a tenth of --messages)"},
        {:peer_warmup, :integer, "N", "their warm-up (default: a tenth of --warmup)"},
        {:ping_core, :string, "N|none",
         "core of the Rust ping thread (default: 0 on 2 or more cores, else none)"},
        {:pong_core, :string, "N|none",
         "core of the Tachyon.Echo thread (default: 1 on 2 or more cores, else none)"},
        {:wait, :string, "WAIT",
         "wait of the ping and echo threads: busy_spin, yield, backoff or park (default busy_spin)"},
        {:udp_wait, :string, "WAIT",
         "wait of the Tachyon.UDP receive thread or poll (default backoff)"},
        {:udp_core, :string, "N|none", "core of the Tachyon.UDP receive thread (default: none)"},
        {:flood, :integer, "N",
         "datagrams of the backpressure burst (tachyon.udp.flood; 0: skip it)"},
        {:max_queue, :integer, "N", "the bounded socket's :max_queue in that burst"}
      ],
      defaults: @defaults,
      quick: @quick,
      full: [messages: 1_000_000]
    }
  end

  def run(argv) do
    opts = Bench.parse!(argv, spec())
    wanted = Bench.cases!(opts, @all)

    cores = Tachyon.UDP.Options.cores()
    two = cores >= 2

    cfg = %{
      n: opts[:messages],
      warmup: opts[:warmup],
      peer_n: opts[:peer_messages] || max(div(opts[:messages], 10), 1),
      peer_warmup: opts[:peer_warmup] || div(opts[:warmup], 10),
      size: opts[:size],
      ping_core: core!(opts[:ping_core], if(two, do: 0), cores, "--ping-core"),
      pong_core: core!(opts[:pong_core], if(two, do: 1), cores, "--pong-core"),
      wait: wait!(opts[:wait] || "busy_spin", "--wait"),
      udp_wait: wait!(opts[:udp_wait] || "backoff", "--udp-wait"),
      udp_core: core!(opts[:udp_core], nil, cores, "--udp-core"),
      flood: opts[:flood],
      max_queue: opts[:max_queue]
    }

    if cfg.size > 65_507, do: Mix.raise("--size must be at most 65507")

    Report.print_machine()

    IO.puts(
      "Echo bench: UDP round trips of #{cfg.size} bytes over 127.0.0.1. " <>
        "Rust-ping and Tachyon.UDP cases: #{Report.delimit(cfg.n)} measured after #{Report.delimit(cfg.warmup)} warm-up; " <>
        "cases with a gen_udp/:socket peer: #{Report.delimit(cfg.peer_n)} after " <>
        "#{Report.delimit(cfg.peer_warmup)} (--peer-messages/--peer-warmup)."
    )

    IO.puts(
      "Placement: Rust ping thread #{place(cfg.ping_core, cfg.wait)}, Tachyon.Echo thread " <>
        "#{place(cfg.pong_core, cfg.wait)}, Tachyon.UDP receive thread #{place(cfg.udp_core, cfg.udp_wait)}; " <>
        "BEAM schedulers unbound (#{System.schedulers_online()} online, #{cores} cores)."
    )

    cases =
      for name <- @all, name in wanted, name != "tachyon.udp.flood" do
        c = run_case(name, cfg)
        Report.print_report(c)
        c
      end

    goals =
      if cases != [] do
        Report.print_table(cases, "raw.rust")
        print_goals(cases, opts)
      else
        []
      end

    flood = if "tachyon.udp.flood" in wanted and cfg.flood > 0, do: Flood.run(cfg), else: []

    Report.write_json(opts[:json], "echo", cases, %{
      "warmup" => cfg.warmup,
      "peer_warmup" => cfg.peer_warmup,
      "goals" => goals,
      "ratios" => ratios(cases),
      "backpressure" => flood
    })

    cases
  end

  # -- options -------------------------------------------------------------------

  defp core!(nil, default, _cores, _flag), do: default
  defp core!("none", _default, _cores, _flag), do: nil

  defp core!(s, _default, cores, flag) do
    case Integer.parse(s) do
      {n, ""} when n >= 0 and n < cores -> n
      _ -> Mix.raise("#{flag} must be none or a core in 0..#{cores - 1}, got: #{s}")
    end
  end

  defp wait!(s, flag) do
    w = String.to_atom(s)

    unless w in Tachyon.UDP.Options.waits() do
      Mix.raise(
        "#{flag} must be one of #{Enum.join(Tachyon.UDP.Options.waits(), ", ")}, got: #{s}"
      )
    end

    w
  end

  defp place(nil, wait), do: "unpinned #{wait}"
  defp place(core, wait), do: "core #{core} #{wait}"

  defp placement(%{core: core, pinned: pinned, wait: wait}) do
    wait = Tachyon.UDP.Options.public_wait(wait)

    case {core, pinned} do
      {nil, _} -> "unpinned #{wait}"
      {c, true} -> "core #{c} #{wait}"
      {c, false} -> "core #{c} (pinning failed) #{wait}"
    end
  end

  # -- cases ---------------------------------------------------------------------

  defp run_case("raw.rust", cfg), do: Floor.run(cfg)

  defp run_case("tachyon.echo" = name, cfg) do
    Peers.with_echo(cfg.pong_core, cfg.wait, fn echo, addr ->
      {h, info} = Peers.rust_ping!(addr, cfg.n, cfg.warmup, cfg)
      pong = placement(Tachyon.Echo.info(echo))

      Bench.from_hist(name, h, cfg.size, %{
        note: "ping: Rust thread #{placement(info)}; pong: Tachyon.Echo #{pong}",
        json_extra: %{ping: placement(info), pong: pong, lost: info.lost}
      })
    end)
  end

  defp run_case("gen_udp.echo" = name, cfg) do
    {pid, port} = Peers.gen_udp_echo()

    try do
      {h, info} = Peers.rust_ping!({@loopback, port}, cfg.peer_n, cfg.peer_warmup, cfg)

      Bench.from_hist(name, h, cfg.size, %{
        note:
          "ping: Rust thread #{placement(info)}; pong: gen_udp process (active: true) on a BEAM scheduler; " <>
            "peer count",
        json_extra: %{ping: placement(info), pong: "gen_udp process", lost: info.lost}
      })
    after
      Peers.stop_proc(pid)
    end
  end

  defp run_case("tachyon.udp.echo" = name, cfg) do
    {pid, addr} = Peers.tachyon_udp_echo(cfg)

    try do
      {h, info} = Peers.rust_ping!(addr, cfg.n, cfg.warmup, cfg)
      rx = place(cfg.udp_core, cfg.udp_wait)

      Bench.from_hist(name, h, cfg.size, %{
        note:
          "ping: Rust thread #{placement(info)}; pong: an Elixir process on Tachyon.UDP, " <>
            "receive thread #{rx}",
        json_extra: %{ping: placement(info), pong: "Tachyon.UDP process, receive thread #{rx}"}
      })
    after
      Peers.stop_proc(pid)
    end
  end

  defp run_case("tachyon.udp.echo.poll" = name, cfg) do
    {pid, addr} = Peers.tachyon_udp_poll_echo(cfg)

    try do
      {{h, info}, util} =
        Bench.with_utilization(fn -> Peers.rust_ping!(addr, cfg.n, cfg.warmup, cfg) end)

      Bench.from_hist(name, h, cfg.size, %{
        note:
          "ping: Rust thread #{placement(info)}; pong: an Elixir process polling Tachyon.UDP " <>
            "(poll mode, wait: #{cfg.udp_wait}); #{Bench.utilization_note(util)}",
        json_extra: %{
          ping: placement(info),
          pong: "Elixir process polling Tachyon.UDP, wait #{cfg.udp_wait}",
          scheduler_utilization: util
        }
      })
    after
      Peers.stop_proc(pid)
    end
  end

  defp run_case("tachyon.udp.roundtrip.poll" = name, cfg) do
    Peers.with_echo(cfg.pong_core, cfg.wait, fn echo, addr ->
      payload = :binary.copy(<<0xA5>>, cfg.size)

      # Connected, as raw.rust's client and the gen_udp client are: the
      # kernel keeps the route instead of looking it up per send.
      open = fn ->
        {:ok, s} = Tachyon.UDP.open(0, ip: :loopback, delivery: :poll, wait: cfg.udp_wait)
        :ok = Tachyon.UDP.connect(s, addr)
        {:ok, s}
      end

      {{h, lost, gcs}, util} =
        Bench.with_utilization(fn ->
          client(
            cfg.warmup,
            cfg.n,
            open,
            &Tachyon.UDP.close/1,
            &Peers.udp_poll_round_trip(&1, payload)
          )
        end)

      pong = placement(Tachyon.Echo.info(echo))

      Bench.from_hist(name, h, cfg.size, %{
        unit: :perf_counter,
        note:
          "client: Elixir process polling a connected Tachyon.UDP (poll mode, wait: #{cfg.udp_wait}); " <>
            "pong: Tachyon.Echo #{pong}; #{gcs} minor GCs; #{Bench.utilization_note(util)}",
        json_extra: %{
          ping: "Elixir process polling, wait #{cfg.udp_wait}",
          pong: pong,
          lost: lost,
          minor_gcs: gcs,
          scheduler_utilization: util
        }
      })
    end)
  end

  defp run_case("tachyon.udp.roundtrip.block" = name, cfg),
    do: tachyon_udp_roundtrip(name, %{cfg | udp_wait: :park})

  defp run_case("tachyon.udp.roundtrip" = name, cfg), do: tachyon_udp_roundtrip(name, cfg)

  defp run_case("gen_udp.roundtrip" = name, cfg) do
    {pid, port} = Peers.gen_udp_echo()

    beam_roundtrip(
      name,
      cfg,
      pid,
      fn ->
        {:ok, s} = :gen_udp.open(0, [:binary, ip: @loopback, active: true])
        :ok = :gen_udp.connect(s, @loopback, port)
        {:ok, s}
      end,
      &:gen_udp.close/1,
      &Peers.gen_udp_round_trip(&1, &2),
      {"client (connected) and pong: gen_udp processes (active: true) on BEAM schedulers; peer count; ",
       "gen_udp process", "gen_udp process"}
    )
  end

  defp run_case("gen_udp.roundtrip.passive" = name, cfg) do
    {pid, port} = Peers.gen_udp_echo(:passive)

    beam_roundtrip(
      name,
      cfg,
      pid,
      fn -> {:ok, _} = :gen_udp.open(0, [:binary, ip: @loopback, active: false]) end,
      &:gen_udp.close/1,
      &Peers.passive_round_trip(&1, port, &2),
      {"client and pong: gen_udp processes (active: false, recv/3); peer count; ",
       "gen_udp process (recv)", "gen_udp process (recv)"}
    )
  end

  defp run_case("socket.roundtrip" = name, cfg) do
    {pid, port} = Peers.socket_echo()
    dest = %{family: :inet, addr: @loopback, port: port}

    open = fn ->
      {:ok, sock} = :socket.open(:inet, :dgram, :udp)
      :ok = :socket.bind(sock, %{family: :inet, addr: @loopback, port: 0})
      {:ok, sock}
    end

    beam_roundtrip(
      name,
      cfg,
      pid,
      open,
      &:socket.close/1,
      &Peers.socket_round_trip(&1, dest, &2),
      {"client and pong: :socket processes (sendto/recvfrom) on BEAM schedulers; peer count; ",
       ":socket process", ":socket process"}
    )
  end

  # An Elixir client against the BEAM echo process `pid` (stopped
  # afterwards), peer counts: `open.()` gives `{:ok, socket}`, `rt.(socket,
  # payload)` its round trip.
  defp beam_roundtrip(name, cfg, pid, open, close, rt, {note, ping, pong}) do
    payload = :binary.copy(<<0xA5>>, cfg.size)

    try do
      {h, lost, gcs} = client(cfg.peer_warmup, cfg.peer_n, open, close, &rt.(&1, payload))

      Bench.from_hist(name, h, cfg.size, %{
        unit: :perf_counter,
        note: note <> "#{gcs} minor GCs",
        json_extra: %{ping: ping, pong: pong, lost: lost, minor_gcs: gcs}
      })
    after
      Peers.stop_proc(pid)
    end
  end

  defp tachyon_udp_roundtrip(name, cfg) do
    Peers.with_echo(cfg.pong_core, cfg.wait, fn echo, addr ->
      payload = :binary.copy(<<0xA5>>, cfg.size)

      open = fn ->
        {:ok, _} = Tachyon.UDP.open(0, ip: :loopback, wait: cfg.udp_wait, core: cfg.udp_core)
      end

      {h, lost, gcs} =
        client(
          cfg.warmup,
          cfg.n,
          open,
          &Tachyon.UDP.close/1,
          &Peers.udp_round_trip(&1, addr, payload)
        )

      pong = placement(Tachyon.Echo.info(echo))
      rx = place(cfg.udp_core, cfg.udp_wait)

      Bench.from_hist(name, h, cfg.size, %{
        unit: :perf_counter,
        note:
          "client: Elixir process + Tachyon.UDP receive thread #{rx}; pong: Tachyon.Echo #{pong}; " <>
            "#{gcs} minor GCs",
        json_extra: %{
          ping: "Elixir process, receive thread #{rx}",
          pong: pong,
          lost: lost,
          minor_gcs: gcs
        }
      })
    end)
  end

  # The Elixir client of a round-trip case: a process with a big heap
  # (Bench.in_big_heap/1: no minor GC every few hundred round trips) opens
  # its socket, runs the warm-up and the measured round trips
  # (`rt.(socket)`) and reports the minor GCs of the measured loop.
  # Returns {hist, lost, minor_gcs}.
  defp client(warmup, n, open, close, rt) do
    Bench.in_big_heap(fn ->
      {:ok, sock} = open.()
      round_trip = rt.(sock)

      try do
        Bench.sample(warmup, n, &Peers.round_trips(&1, round_trip, &2, &3), 0)
      after
        close.(sock)
      end
    end)
  end

  # -- goals -----------------------------------------------------------------------

  # {what, case a, case b, :le | :ge, bound, percentile}: a's percentile / b's.
  @goals [
    {"Tachyon.Echo round trip / two Rust threads' (p50)", "tachyon.echo", "raw.rust", :le, 1.15,
     :p50_ns},
    {"gen_udp round trip / Tachyon.Echo's (p50)", "gen_udp.roundtrip", "tachyon.echo", :ge, 8.0,
     :p50_ns},
    {"gen_udp round trip / Tachyon.UDP's (p50)", "gen_udp.roundtrip", "tachyon.udp.roundtrip",
     :ge, 3.0, :p50_ns},
    {"Tachyon.UDP polling round trip / two Rust threads' (p50)", "tachyon.udp.roundtrip.poll",
     "raw.rust", :le, 1.3, :p50_ns},
    {"gen_udp round trip / Tachyon.UDP polling's (p50)", "gen_udp.roundtrip",
     "tachyon.udp.roundtrip.poll", :ge, 2.5, :p50_ns},
    {"Tachyon.UDP polling round trip / gen_udp's (p99.9)", "tachyon.udp.roundtrip.poll",
     "gen_udp.roundtrip", :le, 1.0, :p999_ns}
  ]

  defp goals(cases) do
    by = Bench.by_name(cases)

    for {what, a, b, cmp, bound, key} <- @goals,
        by[a] && by[b],
        Map.get(by[b], key, 0) > 0 do
      ratio = Map.fetch!(by[a], key) / Map.fetch!(by[b], key)
      met = if cmp == :le, do: ratio <= bound, else: ratio >= bound
      goal = Bench.bound_text(cmp, bound)
      Bench.goal(what, Bench.x(ratio), goal, met)
    end
  end

  # Ratios printed for information (no goal).
  @ratios [
    {"gen_udp.echo", "tachyon.udp.echo"},
    {"gen_udp.echo", "tachyon.echo"},
    {"gen_udp.roundtrip.passive", "tachyon.udp.roundtrip"},
    {"socket.roundtrip", "tachyon.udp.roundtrip"},
    {"tachyon.udp.roundtrip.block", "tachyon.udp.roundtrip"},
    {"tachyon.udp.roundtrip", "tachyon.udp.roundtrip.poll"},
    {"gen_udp.echo", "tachyon.udp.echo.poll"}
  ]

  defp ratios(cases) do
    by = Bench.by_name(cases)

    for {a, b} <- @ratios, by[a] && by[b], by[b].p50_ns > 0 do
      %{"ratio" => "#{a} p50 / #{b} p50", "value" => Float.round(by[a].p50_ns / by[b].p50_ns, 3)}
    end
  end

  defp print_goals(cases, opts) do
    json = Bench.print_goals(goals(cases), opts, spec())

    case ratios(cases) do
      [] ->
        :ok

      rs ->
        IO.puts("Other ratios:")

        for r <- rs,
            do:
              IO.puts(
                "  #{r["ratio"]}: #{:erlang.float_to_binary(r["value"] * 1.0, decimals: 2)}x"
              )
    end

    json
  end
end

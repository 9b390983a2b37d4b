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
  #   tachyon.udp.roundtrip.block  the same with the receive thread at wait: :block
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

  alias Tachyon.{Bench, Native}

  @defaults [messages: 200_000, warmup: 50_000, size: 256, flood: 100_000, max_queue: 1000]
  @quick [messages: 20_000, warmup: 5_000, flood: 10_000]
  @all ~w(raw.rust tachyon.echo gen_udp.echo tachyon.udp.echo tachyon.udp.roundtrip tachyon.udp.roundtrip.block socket.roundtrip gen_udp.roundtrip gen_udp.roundtrip.passive tachyon.udp.flood)
  @extra [
    cases: :string,
    peer_messages: :integer,
    peer_warmup: :integer,
    ping_core: :string,
    pong_core: :string,
    wait: :string,
    udp_wait: :string,
    udp_core: :string,
    flood: :integer,
    max_queue: :integer
  ]
  @loopback {127, 0, 0, 1}
  @rt_timeout 1000
  # Receive buffers of the flood sockets (capped by net.core.rmem_max): big
  # enough that a burst waits in the kernel rather than being dropped while
  # the receiving side catches up.
  @flood_recbuf 4 * 1024 * 1024
  @max_lost 10

  def run(argv) do
    opts = Bench.parse!(argv, @extra, @defaults, @quick)
    wanted = if opts[:cases], do: String.split(opts[:cases], ","), else: @all

    for c <- wanted, c not in @all do
      Mix.raise("unknown case #{inspect(c)}; known: #{Enum.join(@all, ", ")}")
    end

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

    Bench.print_machine()

    IO.puts(
      "Echo bench: UDP round trips of #{cfg.size} bytes over 127.0.0.1. " <>
        "Rust-ping and Tachyon.UDP cases: #{Bench.delimit(cfg.n)} measured after #{Bench.delimit(cfg.warmup)} warm-up; " <>
        "cases with a gen_udp/:socket peer: #{Bench.delimit(cfg.peer_n)} after " <>
        "#{Bench.delimit(cfg.peer_warmup)} (--peer-messages/--peer-warmup)."
    )

    IO.puts(
      "Placement: Rust ping thread #{place(cfg.ping_core, cfg.wait)}, Tachyon.Echo thread " <>
        "#{place(cfg.pong_core, cfg.wait)}, Tachyon.UDP receive thread #{place(cfg.udp_core, cfg.udp_wait)}; " <>
        "BEAM schedulers unbound (#{System.schedulers_online()} online, #{cores} cores)."
    )

    cases =
      for name <- @all, name in wanted, name != "tachyon.udp.flood" do
        c = run_case(name, cfg)
        Bench.print_report(c)
        c
      end

    if cases != [] do
      Bench.print_table(cases, "raw.rust")
      print_targets(cases)
    end

    flood = if "tachyon.udp.flood" in wanted and cfg.flood > 0, do: run_flood(cfg), else: []

    Bench.write_json(opts[:json], "echo", cases, %{
      "warmup" => cfg.warmup,
      "peer_warmup" => cfg.peer_warmup,
      "targets" => targets(cases),
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

  defp run_case("raw.rust", cfg) do
    bin = build_floor!()

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
        wait_arg(cfg.wait)
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

  defp run_case("tachyon.echo" = name, cfg) do
    with_echo(cfg.pong_core, cfg.wait, fn echo, addr ->
      {h, info} = rust_ping!(addr, cfg.n, cfg.warmup, cfg)
      pong = placement(Tachyon.Echo.info(echo))

      Bench.from_hist(name, h, cfg.size, %{
        note: "ping: Rust thread #{placement(info)}; pong: Tachyon.Echo #{pong}",
        json_extra: %{ping: placement(info), pong: pong, lost: info.lost}
      })
    end)
  end

  defp run_case("gen_udp.echo" = name, cfg) do
    {pid, port} = gen_udp_echo()

    try do
      {h, info} = rust_ping!({@loopback, port}, cfg.peer_n, cfg.peer_warmup, cfg)

      Bench.from_hist(name, h, cfg.size, %{
        note:
          "ping: Rust thread #{placement(info)}; pong: gen_udp process (active: true) on a BEAM scheduler; " <>
            "peer count",
        json_extra: %{ping: placement(info), pong: "gen_udp process", lost: info.lost}
      })
    after
      stop_proc(pid)
    end
  end

  defp run_case("tachyon.udp.echo" = name, cfg) do
    {pid, addr} = tachyon_udp_echo(cfg)

    try do
      {h, info} = rust_ping!(addr, cfg.n, cfg.warmup, cfg)
      rx = place(cfg.udp_core, cfg.udp_wait)

      Bench.from_hist(name, h, cfg.size, %{
        note:
          "ping: Rust thread #{placement(info)}; pong: an Elixir process on Tachyon.UDP, " <>
            "receive thread #{rx}",
        json_extra: %{ping: placement(info), pong: "Tachyon.UDP process, receive thread #{rx}"}
      })
    after
      stop_proc(pid)
    end
  end

  defp run_case("tachyon.udp.roundtrip.block" = name, cfg),
    do: tachyon_udp_roundtrip(name, %{cfg | udp_wait: :block})

  defp run_case("tachyon.udp.roundtrip" = name, cfg), do: tachyon_udp_roundtrip(name, cfg)

  defp run_case("gen_udp.roundtrip" = name, cfg) do
    {pid, port} = gen_udp_echo()
    payload = :binary.copy(<<0xA5>>, cfg.size)

    try do
      {h, lost, gcs} =
        client(fn ->
          {:ok, sock} = :gen_udp.open(0, [:binary, ip: @loopback, active: true])
          send_fun = fn -> :gen_udp.send(sock, @loopback, port, payload) end

          try do
            timed(cfg.peer_warmup, cfg.peer_n, &gen_udp_loop(&1, send_fun, sock, &2, &3))
          after
            :gen_udp.close(sock)
          end
        end)

      Bench.from_hist(name, h, cfg.size, %{
        unit: :perf_counter,
        note:
          "client and pong: gen_udp processes (active: true) on BEAM schedulers; peer count; " <>
            "#{gcs} minor GCs",
        json_extra: %{
          ping: "gen_udp process",
          pong: "gen_udp process",
          lost: lost,
          minor_gcs: gcs
        }
      })
    after
      stop_proc(pid)
    end
  end

  defp run_case("gen_udp.roundtrip.passive" = name, cfg) do
    {pid, port} = gen_udp_echo(:passive)
    payload = :binary.copy(<<0xA5>>, cfg.size)

    try do
      {h, lost, gcs} =
        client(fn ->
          {:ok, sock} = :gen_udp.open(0, [:binary, ip: @loopback, active: false])

          try do
            timed(cfg.peer_warmup, cfg.peer_n, &passive_loop(&1, sock, port, payload, &2, &3))
          after
            :gen_udp.close(sock)
          end
        end)

      Bench.from_hist(name, h, cfg.size, %{
        unit: :perf_counter,
        note:
          "client and pong: gen_udp processes (active: false, recv/3); peer count; #{gcs} minor GCs",
        json_extra: %{
          ping: "gen_udp process (recv)",
          pong: "gen_udp process (recv)",
          lost: lost,
          minor_gcs: gcs
        }
      })
    after
      stop_proc(pid)
    end
  end

  defp run_case("socket.roundtrip" = name, cfg) do
    {pid, port} = socket_echo()
    dest = %{family: :inet, addr: @loopback, port: port}
    payload = :binary.copy(<<0xA5>>, cfg.size)

    try do
      {h, lost, gcs} =
        client(fn ->
          {:ok, sock} = :socket.open(:inet, :dgram, :udp)
          :ok = :socket.bind(sock, %{family: :inet, addr: @loopback, port: 0})

          try do
            timed(cfg.peer_warmup, cfg.peer_n, &socket_loop(&1, sock, dest, payload, &2, &3))
          after
            :socket.close(sock)
          end
        end)

      Bench.from_hist(name, h, cfg.size, %{
        unit: :perf_counter,
        note:
          "client and pong: :socket processes (sendto/recvfrom) on BEAM schedulers; peer count; " <>
            "#{gcs} minor GCs",
        json_extra: %{
          ping: ":socket process",
          pong: ":socket process",
          lost: lost,
          minor_gcs: gcs
        }
      })
    after
      stop_proc(pid)
    end
  end

  defp tachyon_udp_roundtrip(name, cfg) do
    with_echo(cfg.pong_core, cfg.wait, fn echo, addr ->
      payload = :binary.copy(<<0xA5>>, cfg.size)

      {h, lost, gcs} =
        client(fn ->
          {:ok, sock} = Tachyon.UDP.open(0, ip: :loopback, wait: cfg.udp_wait, core: cfg.udp_core)

          send_fun = fn -> Tachyon.UDP.send(sock, addr, payload) end

          try do
            timed(cfg.warmup, cfg.n, &udp_loop(&1, send_fun, sock, &2, &3))
          after
            Tachyon.UDP.close(sock)
          end
        end)

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

  # The Elixir client of a round-trip case runs in a process with a big heap
  # (Bench.in_big_heap/1: no minor GC every few hundred round trips) and
  # reports the minor GCs of its measured loop.
  defp client(fun), do: Bench.in_big_heap(fun)

  # Runs `loop.(count, hist, lost)` for the warm-up (no histogram), then for
  # the measured round trips. Returns {hist, lost, minor_gcs}.
  defp timed(warmup, n, loop) do
    lost = loop.(warmup, nil, 0)
    h = Bench.hist()
    {lost, gcs} = Bench.timed(fn -> loop.(n, h, lost) end)
    {h, lost, gcs}
  end

  defp wait_arg(:block), do: "block"
  defp wait_arg(w), do: Atom.to_string(w)

  defp with_echo(core, wait, fun) do
    {:ok, echo} = Tachyon.Echo.start_link(ip: :loopback, core: core, wait: wait)

    try do
      fun.(echo, Tachyon.Echo.address(echo))
    after
      Tachyon.Echo.stop(echo)
    end
  end

  defp rust_ping!({ip, port}, n, warmup, cfg) do
    opts = %{
      ip: ip,
      port: port,
      count: n,
      warmup: warmup,
      size: cfg.size,
      wait: cfg.wait,
      core: cfg.ping_core,
      timeout_ms: @rt_timeout,
      max_lost: @max_lost
    }

    case Native.udp_ping(opts) do
      {:ok, h, info} -> {h, info}
      {:error, reason} -> Mix.raise("ping failed: #{inspect(reason)}")
    end
  end

  # Elixir client loops: t0, send, wait for the echo, t1. A round trip
  # with no echo within @rt_timeout ms is lost (not recorded).

  defp udp_loop(0, _send, _sock, _h, lost), do: lost

  defp udp_loop(n, send_fun, sock, h, lost) do
    t0 = :os.perf_counter()
    :ok = send_fun.()

    receive do
      {:tachyon_udp, ^sock, _from, _data} ->
        t1 = :os.perf_counter()
        if h, do: Native.hist_record(h, t1 - t0)
        udp_loop(n - 1, send_fun, sock, h, lost)
    after
      @rt_timeout -> udp_loop(n - 1, send_fun, sock, h, lost!(lost))
    end
  end

  defp gen_udp_loop(0, _send, _sock, _h, lost), do: lost

  defp gen_udp_loop(n, send_fun, sock, h, lost) do
    t0 = :os.perf_counter()
    :ok = send_fun.()

    receive do
      {:udp, ^sock, _ip, _port, _data} ->
        t1 = :os.perf_counter()
        if h, do: Native.hist_record(h, t1 - t0)
        gen_udp_loop(n - 1, send_fun, sock, h, lost)
    after
      @rt_timeout -> gen_udp_loop(n - 1, send_fun, sock, h, lost!(lost))
    end
  end

  defp passive_loop(0, _sock, _port, _payload, _h, lost), do: lost

  defp passive_loop(n, sock, port, payload, h, lost) do
    t0 = :os.perf_counter()
    :ok = :gen_udp.send(sock, @loopback, port, payload)

    case :gen_udp.recv(sock, 0, @rt_timeout) do
      {:ok, {_ip, _port, _data}} ->
        t1 = :os.perf_counter()
        if h, do: Native.hist_record(h, t1 - t0)
        passive_loop(n - 1, sock, port, payload, h, lost)

      {:error, :timeout} ->
        passive_loop(n - 1, sock, port, payload, h, lost!(lost))
    end
  end

  defp socket_loop(0, _sock, _dest, _payload, _h, lost), do: lost

  defp socket_loop(n, sock, dest, payload, h, lost) do
    t0 = :os.perf_counter()
    :ok = :socket.sendto(sock, payload, dest)

    case :socket.recvfrom(sock, 0, [], @rt_timeout) do
      {:ok, {_src, _data}} ->
        t1 = :os.perf_counter()
        if h, do: Native.hist_record(h, t1 - t0)
        socket_loop(n - 1, sock, dest, payload, h, lost)

      {:error, :timeout} ->
        socket_loop(n - 1, sock, dest, payload, h, lost!(lost))
    end
  end

  defp lost!(lost) when lost >= @max_lost,
    do: Mix.raise("more than #{@max_lost} round trips lost")

  defp lost!(lost), do: lost + 1

  # -- BEAM echo servers ---------------------------------------------------------

  defp tachyon_udp_echo(cfg) do
    parent = self()

    pid =
      spawn_link(fn ->
        {:ok, s} = Tachyon.UDP.open(0, ip: :loopback, wait: cfg.udp_wait, core: cfg.udp_core)

        {:ok, addr} = Tachyon.UDP.sockname(s)
        send(parent, {:echo_addr, self(), addr})
        tachyon_udp_echo_loop(s)
      end)

    receive do
      {:echo_addr, ^pid, addr} -> {pid, addr}
    after
      5000 -> Mix.raise("Tachyon.UDP echo did not start")
    end
  end

  defp tachyon_udp_echo_loop(s) do
    receive do
      {:tachyon_udp, ^s, from, data} ->
        Tachyon.UDP.send(s, from, data)
        tachyon_udp_echo_loop(s)

      :stop ->
        Tachyon.UDP.close(s)
    end
  end

  defp gen_udp_echo(mode \\ :active) do
    parent = self()

    pid =
      spawn_link(fn ->
        {:ok, s} = :gen_udp.open(0, [:binary, ip: @loopback, active: mode == :active])
        {:ok, port} = :inet.port(s)
        send(parent, {:echo_port, self(), port})
        if mode == :active, do: gen_udp_echo_loop(s), else: gen_udp_passive_echo_loop(s)
      end)

    receive do
      {:echo_port, ^pid, port} -> {pid, port}
    after
      5000 -> Mix.raise("gen_udp echo did not start")
    end
  end

  defp gen_udp_echo_loop(s) do
    receive do
      {:udp, ^s, ip, port, data} ->
        :gen_udp.send(s, ip, port, data)
        gen_udp_echo_loop(s)

      :stop ->
        :gen_udp.close(s)
    end
  end

  defp gen_udp_passive_echo_loop(s) do
    case :gen_udp.recv(s, 0, 200) do
      {:ok, {ip, port, data}} ->
        :gen_udp.send(s, ip, port, data)
        gen_udp_passive_echo_loop(s)

      {:error, :timeout} ->
        receive do
          :stop -> :gen_udp.close(s)
        after
          0 -> gen_udp_passive_echo_loop(s)
        end
    end
  end

  defp socket_echo do
    parent = self()

    pid =
      spawn_link(fn ->
        {:ok, s} = :socket.open(:inet, :dgram, :udp)
        :ok = :socket.bind(s, %{family: :inet, addr: @loopback, port: 0})
        {:ok, %{port: port}} = :socket.sockname(s)
        send(parent, {:echo_port, self(), port})
        socket_echo_loop(s)
      end)

    receive do
      {:echo_port, ^pid, port} -> {pid, port}
    after
      5000 -> Mix.raise(":socket echo did not start")
    end
  end

  defp socket_echo_loop(s) do
    case :socket.recvfrom(s, 0, [], 200) do
      {:ok, {src, data}} ->
        :socket.sendto(s, data, src)
        socket_echo_loop(s)

      {:error, :timeout} ->
        receive do
          :stop -> :socket.close(s)
        after
          0 -> socket_echo_loop(s)
        end
    end
  end

  defp stop_proc(pid) do
    ref = Process.monitor(pid)
    send(pid, :stop)

    receive do
      {:DOWN, ^ref, _, _, _} -> :ok
    after
      5000 -> Process.exit(pid, :kill)
    end
  end

  # -- raw.rust -------------------------------------------------------------------

  defp build_floor! do
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

    ping = String.replace(kv["ping"], "_", " ") |> String.replace("busy spin", "busy_spin")
    pong = String.replace(kv["pong"], "_", " ") |> String.replace("busy spin", "busy_spin")

    Bench.from_report("raw.rust", Map.put(report, :tails, tails), size, %{
      note: "standalone binary, no BEAM: ping #{ping}; pong #{pong}",
      json_extra: %{ping: ping, pong: pong, lost: trunc(Bench.parse_number(kv["lost"]))}
    })
  end

  # -- targets ---------------------------------------------------------------------

  @targets [
    {"tachyon.echo p50 / raw.rust p50 <= 1.15x", "tachyon.echo", "raw.rust", :le, 1.15},
    {"gen_udp.roundtrip p50 / tachyon.echo p50 >= 8x", "gen_udp.roundtrip", "tachyon.echo", :ge,
     8.0},
    {"gen_udp.roundtrip p50 / tachyon.udp.roundtrip p50 >= 3x", "gen_udp.roundtrip",
     "tachyon.udp.roundtrip", :ge, 3.0}
  ]

  defp targets(cases) do
    by = Map.new(cases, &{&1.name, &1})

    for {label, a, b, cmp, bound} <- @targets, by[a] && by[b], by[b].p50_ns > 0 do
      ratio = by[a].p50_ns / by[b].p50_ns
      met = if cmp == :le, do: ratio <= bound, else: ratio >= bound
      %{"target" => label, "ratio" => Float.round(ratio, 3), "met" => met}
    end
  end

  # Ratios printed for information (no target in the issue).
  @ratios [
    {"gen_udp.echo", "tachyon.udp.echo"},
    {"gen_udp.echo", "tachyon.echo"},
    {"gen_udp.roundtrip.passive", "tachyon.udp.roundtrip"},
    {"socket.roundtrip", "tachyon.udp.roundtrip"},
    {"tachyon.udp.roundtrip.block", "tachyon.udp.roundtrip"}
  ]

  defp ratios(cases) do
    by = Map.new(cases, &{&1.name, &1})

    for {a, b} <- @ratios, by[a] && by[b], by[b].p50_ns > 0 do
      %{"ratio" => "#{a} p50 / #{b} p50", "value" => Float.round(by[a].p50_ns / by[b].p50_ns, 3)}
    end
  end

  defp print_targets(cases) do
    case targets(cases) do
      [] ->
        :ok

      ts ->
        IO.puts("\nTargets (issue 4, p50 ratios):")

        for t <- ts do
          r = :erlang.float_to_binary(t["ratio"] * 1.0, decimals: 2)
          IO.puts("  #{t["target"]}: #{r}x #{if t["met"], do: "MET", else: "NOT MET"}")
        end
    end

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
  end

  # -- backpressure ---------------------------------------------------------------

  defp run_flood(cfg) do
    IO.puts(
      "\n== tachyon.udp.flood: #{Bench.delimit(cfg.flood)} datagrams of #{cfg.size} bytes sent as fast as " <>
        "one process can (Tachyon.UDP.send) to a socket (recbuf #{div(@flood_recbuf, 1_048_576)} MiB) whose " <>
        "owner is suspended (not scheduled, not reading); then the owner is resumed and drains its mailbox " <>
        "(acking each message)."
    )

    runs = [
      flood_tachyon("tachyon.udp max_queue: :infinity", :infinity, cfg),
      flood_tachyon("tachyon.udp max_queue: #{cfg.max_queue}", cfg.max_queue, cfg),
      flood_gen_udp("gen_udp active: true", cfg)
    ]

    header = [
      "socket",
      "sent",
      "delivered",
      "dropped",
      "kernel drops",
      "owner mailbox",
      "owner heap",
      "binaries",
      "drain"
    ]

    rows =
      for r <- runs do
        [
          r["socket"],
          Bench.delimit(r["sent"]),
          Bench.delimit(r["delivered"]),
          Bench.delimit(r["dropped"]),
          Bench.delimit(r["kernel_drops"]),
          Bench.delimit(r["mailbox"]),
          mb(r["owner_memory"]),
          mb(r["binary_memory"]),
          Bench.short_ns(r["drain_ns"])
        ]
      end

    Bench.print_rows(header, rows)

    IO.puts(
      "(delivered: messages put in the owner's mailbox; dropped: over max_queue; kernel drops: " <>
        "receive buffer full; owner heap: Process.info(:memory) with the mailbox; binaries: " <>
        "growth of :erlang.memory(:binary); drain: time for the owner to receive them all)"
    )

    runs
  end

  defp mb(bytes), do: "#{:erlang.float_to_binary(bytes / 1_048_576, decimals: 1)} MB"

  defp flood_tachyon(label, max_queue, cfg) do
    owner = spawn_owner()

    {:ok, rx} =
      Tachyon.UDP.open(0,
        ip: :loopback,
        owner: owner,
        max_queue: max_queue,
        recbuf: @flood_recbuf
      )

    {:ok, tx} = Tachyon.UDP.open(0, ip: :loopback)
    {:ok, dest} = Tachyon.UDP.sockname(rx)
    payload = :binary.copy(<<0x5A>>, cfg.size)
    bin0 = :erlang.memory(:binary)
    :erlang.suspend_process(owner)
    t0 = System.monotonic_time()
    sent = flood_send(cfg.flood, fn -> Tachyon.UDP.send(tx, dest, payload) end, 0)
    send_ns = System.convert_time_unit(System.monotonic_time() - t0, :native, :nanosecond)

    settle(fn ->
      {:ok, s} = Tachyon.UDP.stats(rx)
      s.received + s.kernel_drops
    end)

    {:ok, s} = Tachyon.UDP.stats(rx)
    {mailbox, mem} = owner_info(owner)
    bin = :erlang.memory(:binary) - bin0
    drain_ns = drain(owner, {:tachyon, rx}, mailbox)
    Tachyon.UDP.close(rx)
    Tachyon.UDP.close(tx)
    Process.exit(owner, :kill)

    %{
      "socket" => label,
      "sent" => sent,
      "send_ns" => send_ns,
      "received" => s.received,
      "delivered" => s.delivered,
      "dropped" => s.dropped,
      "kernel_drops" => s.kernel_drops,
      "mailbox" => mailbox,
      "owner_memory" => mem,
      "binary_memory" => max(bin, 0),
      "drain_ns" => drain_ns
    }
  end

  defp flood_gen_udp(label, cfg) do
    owner = spawn_owner()
    {:ok, rx} = :gen_udp.open(0, [:binary, ip: @loopback, active: true, recbuf: @flood_recbuf])

    :ok = :gen_udp.controlling_process(rx, owner)
    {:ok, port} = :inet.port(rx)
    {:ok, tx} = Tachyon.UDP.open(0, ip: :loopback)
    payload = :binary.copy(<<0x5A>>, cfg.size)
    bin0 = :erlang.memory(:binary)
    :erlang.suspend_process(owner)
    t0 = System.monotonic_time()
    sent = flood_send(cfg.flood, fn -> Tachyon.UDP.send(tx, {@loopback, port}, payload) end, 0)
    send_ns = System.convert_time_unit(System.monotonic_time() - t0, :native, :nanosecond)
    settle(fn -> owner_info(owner) |> elem(0) end)
    {mailbox, mem} = owner_info(owner)
    bin = :erlang.memory(:binary) - bin0
    drops = udp_drops(port)
    drain_ns = drain(owner, :gen_udp, mailbox)
    :gen_udp.close(rx)
    Tachyon.UDP.close(tx)
    Process.exit(owner, :kill)

    %{
      "socket" => label,
      "sent" => sent,
      "send_ns" => send_ns,
      "received" => mailbox,
      "delivered" => mailbox,
      "dropped" => 0,
      "kernel_drops" => drops,
      "mailbox" => mailbox,
      "owner_memory" => mem,
      "binary_memory" => max(bin, 0),
      "drain_ns" => drain_ns
    }
  end

  defp flood_send(0, _fun, sent), do: sent

  defp flood_send(n, fun, sent) do
    case fun.() do
      :ok -> flood_send(n - 1, fun, sent + 1)
      {:error, :eagain} -> flood_send(n - 1, fun, sent)
    end
  end

  # Waits until `fun` stops changing for 50 ms (the receiving side drained
  # the kernel buffer), at most 10 s.
  defp settle(fun, last \\ nil, since \\ nil, t0 \\ System.monotonic_time(:millisecond)) do
    now = System.monotonic_time(:millisecond)
    v = fun.()

    cond do
      now - t0 > 10_000 -> :ok
      v == last and now - since >= 50 -> :ok
      v == last -> Process.sleep(5) && settle(fun, last, since, t0)
      true -> Process.sleep(5) && settle(fun, v, now, t0)
    end
  end

  # The owner is suspended during the flood (a consumer that does not get to
  # run: its mailbox grows, and no message reschedules it); once resumed it
  # receives every message (acking Tachyon.UDP ones) and reports the time.
  defp spawn_owner do
    spawn(fn ->
      receive do
        {:drain, from, kind, count} ->
          t0 = System.monotonic_time()
          owner_drain(kind, count)
          send(from, {:drained, System.monotonic_time() - t0})
      end
    end)
  end

  defp owner_drain(_kind, 0), do: :ok

  defp owner_drain({:tachyon, sock} = kind, n) do
    receive do
      {:tachyon_udp, ^sock, _, _} ->
        Tachyon.UDP.ack(sock)
        owner_drain(kind, n - 1)
    after
      5000 -> :timeout
    end
  end

  defp owner_drain(:gen_udp, n) do
    receive do
      {:udp, _, _, _, _} -> owner_drain(:gen_udp, n - 1)
    after
      5000 -> :timeout
    end
  end

  defp drain(owner, kind, count) do
    # The :drain message queues behind the datagrams: selective receive
    # finds it after scanning them once, so the scan is in the time too.
    :erlang.resume_process(owner)
    send(owner, {:drain, self(), kind, count})

    receive do
      {:drained, native} -> System.convert_time_unit(native, :native, :nanosecond)
    after
      60_000 -> Mix.raise("the flood owner did not drain its mailbox")
    end
  end

  defp owner_info(pid) do
    case Process.info(pid, [:message_queue_len, :memory]) do
      [message_queue_len: len, memory: mem] -> {len, mem}
      nil -> {0, 0}
    end
  end

  # Kernel drops of a gen_udp socket, from /proc/net/udp (the last column).
  defp udp_drops(port) do
    hex = port |> Integer.to_string(16) |> String.pad_leading(4, "0")

    with {:ok, text} <- File.read("/proc/net/udp"),
         line when is_binary(line) <-
           text |> String.split("\n") |> Enum.find(&String.contains?(&1, ":#{hex} ")) do
      line |> String.split() |> List.last() |> String.to_integer()
    else
      _ -> 0
    end
  end
end

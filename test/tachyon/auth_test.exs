defmodule Tachyon.AuthTest do
  # Keys (Tachyon.Auth): key files, the safe default, and a stranger at a
  # running group of three with members: every datagram captured on the
  # wire (tcpdump on loopback) sent again, with bits flipped, and without
  # its envelope; a node that joins without the key. Nothing changes but
  # the counts of what was rejected. Not async: ports, a capture.
  use ExUnit.Case, async: false

  import Tachyon.TestHelpers, only: [tmp_dir: 1, wait_until: 1]

  alias Tachyon.{Auth, Bus, Sequencer}
  alias Tachyon.Sequencer.OSProcess

  describe "key files" do
    test "are written 0600, refused when others may read them, and keys never print" do
      dir = tmp_dir("authkeys")
      path = Path.join(dir, "group.key")
      {:ok, text} = Auth.generate()
      assert :ok = Auth.write_file(path, text)
      assert {:error, :exists} = Auth.write_file(path, text)
      assert Bitwise.band(File.stat!(path).mode, 0o777) == 0o600
      assert {:ok, ^text} = Auth.read_file(path)
      File.chmod!(path, 0o640)
      assert {:error, :too_open} = Auth.read_file(path)
      File.chmod!(path, 0o600)

      {:ok, m} = Auth.credential(text, 9)
      assert {:ok, %{kind: :member, member: 9, generations: 1}} = Auth.check(m)
      assert {:ok, two} = Auth.rotate(text, :add)
      assert {:ok, %{generations: 2}} = Auth.check(two)
      assert {:error, _} = Auth.check("tachyon-key v1 group\nnot hex")

      # The key's hex never shows: not in inspect, not in a node's state.
      hex = text |> String.split("\n") |> Enum.at(1)
      assert inspect(Auth.key(text)) == "#Tachyon.Auth.Key<redacted>"
      refute inspect(Auth.key(text)) =~ hex

      {:ok, seq} =
        Sequencer.start_link(
          path: Path.join(dir, "log"),
          wait: :park,
          auth: [key: Auth.key(text)]
        )

      refute inspect(:sys.get_state(seq), limit: :infinity) =~ hex
      refute inspect(Sequencer.stats(seq), limit: :infinity) =~ hex
      :ok = Sequencer.close(seq)
    end

    test "a bad key file is an ArgumentError naming the file, never the key" do
      dir = tmp_dir("authbad")
      path = Path.join(dir, "nothing.key")

      assert_raise ArgumentError, ~r/nothing.key cannot be used.*mix tachyon.gen_key/, fn ->
        Sequencer.start_link(path: dir, wait: :park, auth: [key_file: path])
      end

      File.write!(path, "tachyon-key v1 group\n" <> String.duplicate("ab", 32) <> "\n")
      File.chmod!(path, 0o644)

      assert_raise ArgumentError, ~r/chmod 600/, fn ->
        Sequencer.start_link(path: dir, wait: :park, auth: [key_file: path])
      end

      assert_raise ArgumentError, ~r/:auth/, fn ->
        Sequencer.start_link(path: dir, wait: :park, auth: [key: "a plain binary"])
      end
    end
  end

  describe "the safe default" do
    test "without keys, a node or a member on an address that is not loopback refuses to start" do
      dir = tmp_dir("authdefault")

      e =
        assert_raise ArgumentError, fn ->
          Sequencer.start_link(path: dir, ip: :any, wait: :park)
        end

      assert e.message =~ "not a loopback address"
      assert e.message =~ "mix tachyon.gen_key"
      assert e.message =~ "auth: :none"

      {:ok, seq} = Sequencer.start_link(path: dir, ip: :any, wait: :park, auth: :none)
      {_, port} = Sequencer.address(seq)

      assert_raise ArgumentError, ~r/Tachyon.Bus binds 0.0.0.0.*auth: :none/, fn ->
        Bus.open(sequencer: {{127, 0, 0, 1}, port}, member_id: 1, ip: :any)
      end

      {:ok, bus} =
        Bus.open(sequencer: {{127, 0, 0, 1}, port}, member_id: 1, ip: :any, auth: :none)

      :ok = Bus.close(bus)
      :ok = Sequencer.close(seq)
    end
  end

  describe "a stranger" do
    @describetag :slow
    @describetag timeout: 120_000

    setup do
      dir = tmp_dir("authgroup")
      key_file = Path.join(dir, "group.key")
      {:ok, text} = Auth.generate()
      :ok = Auth.write_file(key_file, text)
      group = for _ <- 0..2, do: {{127, 0, 0, 1}, OSProcess.free_port()}

      # Node 0, eager, last: its election at start finds the others up.
      seqs =
        for {{ip, port}, i} <- Enum.reverse(Enum.with_index(group)) do
          {:ok, s} =
            Sequencer.start_link(
              path: Path.join(dir, "n#{i}"),
              ip: ip,
              port: port,
              group: group,
              wait: :park,
              eager: i == 0,
              # In the clear (authenticated only): the stranger reads what it
              # captured and sends it again without its envelope too.
              auth: [key_file: key_file, encrypt: false]
            )

          s
        end
        |> Enum.reverse()

      {:ok, _} = Sequencer.await_primary(hd(seqs), 10_000)

      members =
        for id <- [1, 2] do
          {:ok, cred} = Auth.credential(text, id)

          {:ok, bus} =
            Bus.open(
              sequencer: group,
              member_id: id,
              auth: [key: Auth.key(cred), encrypt: false]
            )

          bus
        end

      %{dir: dir, group: group, seqs: seqs, members: members, text: text}
    end

    test "everything it captured, forged or sent plain is rejected and changes nothing",
         %{dir: dir, group: group, seqs: seqs, members: members} do
      ports = Enum.map(group, &elem(&1, 1))
      pcap = Path.join(dir, "wire.pcap")
      filter = ports |> Enum.map(&"port #{&1}") |> Enum.join(" or ")
      dump = start_capture(pcap, filter)

      # Traffic: each member publishes; every member delivers every one.
      for {bus, id} <- Enum.zip(members, [1, 2]), n <- 1..50 do
        {:ok, _} = Bus.publish(bus, "m#{id}-#{n}")
      end

      delivered = for _ <- 1..200, do: next_delivery()
      assert length(Enum.uniq(delivered)) == 100
      # An election's datagrams on the wire too: the primary stops (END),
      # the other two elect, and the members go on with the new primary.
      :ok = Sequencer.close(hd(seqs))
      live = tl(seqs)

      assert wait_until(fn ->
               Enum.any?(live, &(Sequencer.stats(&1) |> elem(1) |> Map.fetch!(:role) == :primary))
             end)

      {:ok, _} = Bus.publish(hd(members), "after the election")
      assert next_delivery() == "after the election"
      assert next_delivery() == "after the election"
      stop_capture(dump)

      captured = read_pcap(pcap)
      kinds = captured |> Enum.map(&kind/1) |> Enum.uniq() |> Enum.sort()
      assert :sealed in kinds and :plain not in kinds, inspect(kinds)
      # Inside (authenticated, not encrypted): members' commands ("TC"),
      # the bus ("TB"), the nodes' own datagrams ("TN": acknowledgements,
      # votes, syncs).
      inner = captured |> Enum.map(&binary_part(unseal(elem(&1, 0)), 0, 2)) |> Enum.uniq()
      assert Enum.sort(inner) == ["TB", "TC", "TN"], inspect(inner)

      before = Enum.map(live, &state/1)
      rej0 = Enum.map(live, &rejected/1)
      mrej0 = Enum.map(members, &(Bus.stats(&1) |> elem(1) |> Map.fetch!(:rejected)))

      # The stranger: each captured datagram again (a replay), with one
      # byte flipped (a forgery), and without its envelope (a node's or a
      # member's datagram, plain): to every node still running, and to
      # every member.
      {:ok, s} = :gen_udp.open(0, [:binary, ip: {127, 0, 0, 1}])
      live_ports = tl(ports)
      member_ports = Enum.uniq(Enum.flat_map(captured, fn {_, a, b} -> [a, b] end)) -- ports
      assert length(member_ports) == 2

      sent =
        for {payload, _from, _to} <- captured,
            d <- [payload, flip(payload), unseal(payload)],
            to <- live_ports ++ member_ports,
            reduce: %{} do
          acc ->
            :ok = :gen_udp.send(s, {127, 0, 0, 1}, to, d)
            Map.update(acc, to, 1, &(&1 + 1))
        end

      # Each node and member rejected every one it got (the kernel may
      # drop a few: loopback, 4 MiB buffers): replays (and what was sent
      # to another), forgeries, plain datagrams.
      for {seq, port, r0} <- Enum.zip([live, live_ports, rej0]) do
        assert wait_until(fn -> rejected(seq) - r0 >= 0.98 * sent[port] end),
               "node at #{port}: #{rejected(seq) - r0} of #{sent[port]} rejected"
      end

      for {bus, port, r0} <- Enum.zip([members, member_ports, mrej0]) do
        got = fn -> Bus.stats(bus) |> elem(1) |> Map.fetch!(:rejected) end
        assert wait_until(fn -> got.() - r0 >= 0.98 * sent[port] end)
      end

      Process.sleep(200)
      assert Enum.map(live, &state/1) == before
      refute_receive {:tachyon_bus, _, _, _, _}, 100

      # The group still works, its terms as they were.
      {:ok, _} = Bus.publish(hd(members), "after")
      assert next_delivery() == "after"
      assert next_delivery() == "after"
    end

    test "a node that joins without the key, or with another group's, is not added",
         %{dir: dir, group: group, seqs: seqs} do
      {:ok, other} = Auth.generate()
      other_file = Path.join(dir, "other.key")
      :ok = Auth.write_file(other_file, other)

      for {auth, i} <- Enum.with_index([nil, [key_file: other_file]]) do
        port = OSProcess.free_port()

        {:ok, j} =
          Sequencer.start_link(
            path: Path.join(dir, "joiner#{i}"),
            ip: {127, 0, 0, 1},
            port: port,
            join: hd(group),
            wait: :park,
            auth: auth
          )

        Process.sleep(1_500)
        {:ok, %{nodes: nodes}} = Sequencer.membership(hd(seqs))
        assert length(nodes) == 3
        refute Enum.any?(nodes, &(&1.address == {{127, 0, 0, 1}, port}))
        assert rejected(hd(seqs)) > 0
        :ok = Sequencer.close(j)
      end
    end
  end

  defp next_delivery do
    receive do
      {:tachyon_bus, _bus, _seq, _id, data} -> data
    after
      5_000 -> flunk("nothing delivered")
    end
  end

  defp state(seq) do
    {:ok, st} = Sequencer.stats(seq)
    {:ok, memb} = Sequencer.membership(seq)
    {Map.take(st, [:epoch, :role, :leader, :next_seq, :commit, :session, :learner]), memb}
  end

  defp rejected(seq), do: Sequencer.stats(seq) |> elem(1) |> Map.fetch!(:rejected)

  # A sealed datagram ("TS" and its version); a plain one (the protocol's
  # "TB", "TC", "TN").
  defp kind({payload, _, _}), do: kind(payload)
  defp kind(<<"TS", 1, _::binary>>), do: :sealed
  defp kind(_), do: :plain

  defp flip(<<head::binary-size(40), b, rest::binary>>),
    do: head <> <<Bitwise.bxor(b, 1)>> <> rest

  defp flip(d), do: d

  # The protocol's datagram inside a MAC-sealed envelope (40 bytes of
  # header, a 16-byte tag; a multicast one has two).
  defp unseal(<<"TS", 1, _::binary-size(37), rest::binary>>) when byte_size(rest) > 16,
    do: binary_part(rest, 0, byte_size(rest) - 16)

  defp unseal(d), do: d

  defp start_capture(path, filter) do
    tcpdump =
      System.find_executable("tcpdump") || flunk("tcpdump is needed (bin/setup installs it)")

    # Immediate mode: each packet written as it comes (else libpcap holds
    # them up to a second, and a capture stopped sooner writes nothing).
    args =
      ["--immediate-mode", "-i", "lo", "-U", "-n", "-Z", "root", "-w", path] ++
        ["udp and (#{filter})"]

    port =
      Port.open({:spawn_executable, tcpdump}, [
        :binary,
        :exit_status,
        :stderr_to_stdout,
        args: args
      ])

    # tcpdump says when it listens.
    listening(port, "")
    port
  end

  defp listening(port, said) do
    receive do
      {^port, {:data, d}} ->
        if said <> d =~ "listening", do: :ok, else: listening(port, said <> d)

      {^port, {:exit_status, n}} ->
        flunk("tcpdump exited (#{n}): #{said}")
    after
      5_000 -> flunk("tcpdump did not start: #{said}")
    end
  end

  defp stop_capture(port) do
    {:os_pid, pid} = Port.info(port, :os_pid)
    System.cmd("kill", ["-INT", "#{pid}"])

    drain(port, "")
  end

  defp drain(port, said) do
    receive do
      {^port, {:data, d}} -> drain(port, said <> d)
      {^port, {:exit_status, _}} -> said
    after
      5_000 -> flunk("tcpdump did not stop")
    end
  end

  # The UDP payloads of a pcap file of the loopback device (link type
  # DLT_EN10MB: Ethernet, IPv4, UDP): {payload, src_port, dst_port}.
  defp read_pcap(path) do
    <<0xA1B2C3D4::little-32, _::binary-size(16), 1::little-32, recs::binary>> = File.read!(path)
    records(recs, [])
  end

  defp records(<<_ts::binary-size(8), caplen::little-32, _len::little-32, rest::binary>>, acc)
       when byte_size(rest) >= caplen do
    <<frame::binary-size(caplen), rest::binary>> = rest

    acc =
      case frame do
        <<_eth::binary-size(12), 0x0800::16, 4::4, ihl::4, _::binary-size(8), 17, _::binary>> ->
          <<_::binary-size(14), _ip::binary-size(ihl * 4), sport::16, dport::16, ulen::16,
            _sum::16, payload::binary>> = frame

          [{binary_part(payload, 0, ulen - 8), sport, dport} | acc]

        _ ->
          acc
      end

    records(rest, acc)
  end

  defp records(_, acc), do: Enum.reverse(acc)
end

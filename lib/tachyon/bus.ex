defmodule Tachyon.Bus do
  @moduledoc """
  A member of a `Tachyon.Sequencer`'s bus (what CoralSequencer calls a
  node): publishes messages and receives every message of the bus, its
  own included, in sequence order, exactly once.

  `open/1` says hello to the sequencer and returns once welcomed. The
  member then delivers to its owner, by `:delivery`:

    * `:messages` (default): a thread sends `{:tachyon_bus, bus, seq,
      member_id, data}` for every message.
    * `:poll`: no thread; `recv/2` reads the bus on the caller's scheduler
      and returns `{seq, member_id, data}` entries (the fast path: no
      thread hand-off between the datagram and the code that handles it).

  A member recognises its own messages by `member_id`. What it does for
  you: a gap (a jump in sequence numbers, or a heartbeat ahead of it) is
  asked for at once and filled in one round trip while later messages
  wait; a command not seen on the bus in time is resent (the timeout
  follows the measured round trip, `:resend_after_ms` at least; the
  sequencer drops duplicates); at most a congestion window of command
  datagrams is in flight, and publishes beyond it join the datagram
  waiting for it (none is refused for it); messages larger than a datagram are
  cut into fragments and reassembled; datagrams of another session are
  dropped; `from: n` rewinds from sequence number `n` (one chunk of
  `replay_max` messages per round trip, so a rewind does not starve live
  traffic) and joins the live stream with no gap and no duplicate. With
  `delivery: :poll`, this timed work runs inside `recv/2`: a member nobody
  polls does not resend, and its window holds nothing back (it cannot
  hear what is acknowledged): its publishes go at once.

  ## Example

      dir = Path.join(System.tmp_dir!(), "bus-doc-#{System.os_time()}")
      {:ok, seq} = Tachyon.Sequencer.start_link(path: dir, wait: :park)
      {:ok, bus} = Tachyon.Bus.open(sequencer: Tachyon.Sequencer.address(seq), member_id: 7, delivery: :poll)
      {:ok, _member_seq} = Tachyon.Bus.publish(bus, ["he", "llo"])
      {:ok, [{_seq, 7, "hello"}]} = Tachyon.Bus.recv(bus, 5000)

  (`member_seq` counts this member's publishes on this sequencer's log:
  1 on a fresh log, and it goes on across runs on the same directory.)

  ## Under a supervisor

  In a static child list, as `Phoenix.PubSub` would be: the bus needs no
  owner, and the processes that handle its messages subscribe to it by
  name, from their own `init/1`:

      children = [
        {Tachyon.Sequencer, name: :seq, path: "/var/lib/my_app/seq", port: 7000},
        {Tachyon.Bus, name: :orders, sequencer: :seq, member_id: 1},
        MyApp.OrderHandler    # calls Tachyon.Bus.subscribe(:orders) in init/1
      ]

      # anywhere:
      {:ok, _member_seq} = Tachyon.Bus.publish(:orders, "order 42")

      # MyApp.OrderHandler, a GenServer:
      def init(arg) do
        :ok = Tachyon.Bus.subscribe(:orders)
        {:ok, arg}
      end

      def handle_info({:tachyon_bus, _bus, seq, member_id, data}, state), do: ...

  (`sequencer:` takes the name of a `Tachyon.Sequencer` of this node, or
  addresses.) Every function of this module takes the bus's name or pid
  as it takes a member: one `:persistent_term` lookup, no message to the
  process. What to know:

    * **Subscribers** (`subscribe/1`, `unsubscribe/1`): any number; each
      gets every message and event. The member's thread builds each
      message once and sends it to each subscriber (with one subscriber,
      the same single send as to an owner; the measurements are in
      docs/ARCHITECTURE.md, "Who gets the messages").
      Each subscriber is monitored; its exit ends its subscription.
    * **Restarts keep the subscribers.** A subscription is to the name,
      held by the `:tachyon` application, not by the bus's process: when
      the process is killed or crashes and its supervisor restarts it,
      the new member delivers to the same subscribers (messages sequenced
      while no member ran are not delivered: use `from:` to rewind). A
      subscription may also come before the bus starts. A bus started
      without a name keeps nothing across restarts.
    * **An owner** instead (or as well): `owner:` a pid or a registered
      name; a name is looked up when the member starts and again at each
      restart, and the owner's exit restarts the bus process so that the
      name's next process gets the messages (start the owner first). A
      pid owner's exit closes the member for good.
    * **Nobody listening.** Messages delivered when no process subscribed
      and there is no owner are dropped, and logged as a warning (the
      first at once, then at most once every 10 s) naming the bus and what
      to do; the same if the owner is a supervisor or the application
      master (what `owner: self()` in a supervisor's `init/1` or in
      `Application.start/2` gives), which would drop them: such an owner
      is not sent the messages. `stats/1` counts them (`:unheard`).
    * **`delivery: :poll`** keeps its owner-only semantics: the owner
      (required) calls `recv/2`; `subscribe/1` returns
      `{:error, :not_messages}`.

  A member delivers a message only once the sequencer group has committed
  it (a majority of its nodes hold it): what one member delivered, every
  member delivers, across any failover of a majority group.

  ## Events

  Besides the messages, the owner (or the subscribers) receives
  `{:tachyon_bus_event, bus, kind, fields}` when:

    * `:epoch` - the first datagram of a new primary (of epoch
      `fields.epoch`) reached the member.
    * `:renumbered` - the new primary lacked `fields.lost` of this member's
      commands that the member had seen delivered (lost in a fork): its
      pending commands go to it marked to skip those numbers (each is
      delivered once, in publish order, under the number `publish`
      returned).
    * `:fork` - a primary of `fields.epoch` does not hold what this member
      delivered from `fields.resume_seq` up to `fields.next_seq` (the last
      of it in `fields.last_epoch`; possible only with
      `two_nodes: :available`, or a lying witness, after a partition):
      that is not the bus's order any more. The member then delivers the
      new primary's order from `fields.resume_seq` on (sequence numbers
      from there come again, with the new order's messages); the
      application decides what to do with what it applied before.
    * `:member_id_taken` - another member holds this `member_id`;
      publishes return `{:error, :member_id_taken}`.
    * `:enospc` - the primary could not append this member's command
      (`fields.member_seq`): its disk is full. It steps down and a node
      with room takes over; the command is resent to it. Meanwhile
      publishes return `{:error, :enospc}`, until a primary takes this
      member's commands again.
    * `:trimmed` - the messages from `fields.from_seq` up to
      `fields.first_seq` were gone when the member asked for them: the
      sequencer's retention removed them (the member had not been heard
      for longer than its lease, or asked to rewind below what is kept).
      It delivers from `fields.first_seq` on. A member opened with
      `from: n` below the first message kept gets `{:error, {:trimmed,
      first}}` instead.

  ## State machine snapshots

  A member that applies every message in order (a `Tachyon.StateMachine`,
  which does all this) publishes its state now and then with
  `publish_snapshot/4`. A member opened with `from: :snapshot` starts from
  the latest committed snapshot (its position is `info.snapshot` of the
  open; `nil`: none, it starts at the log's start) and receives, in
  sequence order, the messages from the snapshot's position on as usual
  (those sequenced before the snapshot's own messages come first: hold
  them until it is whole) and `{:tachyon_bus_snapshot, bus, seq,
  member_id, as_of, chunk, last}` for each message of a snapshot
  (`delivery: :poll`: `{seq, member_id, {:snapshot, as_of, chunk,
  last}}`). The state is the chunks of one `member_id` and `as_of` joined
  up to `last`; later snapshots (anyone's) come too and can be ignored.
  Other members never see snapshot messages.

  ## Options

  #{Tachyon.Options.docs(Tachyon.Sequencer.Options.bus_schema())}

  `start_link/1` also takes:

  #{Tachyon.Options.docs(Tachyon.Sequencer.Options.bus_server_schema())}
  """

  alias Tachyon.{Named, Native}
  alias Tachyon.Bus.Subscribers
  alias Tachyon.Sequencer.Options

  @typedoc "A member of the bus (a reference)."
  @type bus :: reference()
  @typedoc "A member, or the name or pid of a process started by `start_link/1`."
  @type server :: bus() | atom() | pid()
  @type entry :: {seq :: pos_integer(), member_id :: pos_integer(), data :: binary()}

  @doc """
  Joins the bus; the owner (default: the caller) receives the messages and
  its exit closes the member. Returns `{:error, :timeout}` if the
  sequencer does not answer within `:connect_timeout_ms`.

  ## Example

      dir = Path.join(System.tmp_dir!(), "bus-#{System.unique_integer([:positive])}")
      {:ok, seq} = Tachyon.Sequencer.start_link(path: dir, wait: :park)
      {:ok, bus} = Tachyon.Bus.open(sequencer: Tachyon.Sequencer.address(seq), member_id: 1)
      :ok = Tachyon.Bus.close(bus)
  """
  @spec open(keyword()) :: {:ok, bus()} | {:error, atom()}
  def open(opts) do
    case open_info(opts) do
      {:ok, bus, _info} -> {:ok, bus}
      {:error, _} = error -> error
    end
  end

  @doc false
  # The member and what the NIF answered (Tachyon.Bus.Open has it).
  defdelegate open_info(opts, who \\ nil), to: Tachyon.Bus.Open

  @doc """
  Starts a process that joins the bus and emits `[:tachyon, :bus, :stats]`
  every `:stats_interval_ms` (default 1000): the member of a supervision
  tree (see "Under a supervisor"). The messages go to the processes that
  `subscribe/1` to it and to the `:owner`, if one is given (a pid, or a
  registered name looked up now and at each restart). Functions take the
  process's name or pid as they take a member (`bus/1` returns the
  member). A crash or a kill of the process is restarted by its supervisor
  (`:transient`, subscriptions by name kept), `close/1` is final.

  ## Example

      dir = Path.join(System.tmp_dir!(), "bus-#{System.unique_integer([:positive])}")
      {:ok, seq} = Tachyon.Sequencer.start_link(path: dir, wait: :park)
      {:ok, _pid} = Tachyon.Bus.start_link(name: :my_bus, sequencer: Tachyon.Sequencer.address(seq), member_id: 2)
      :ok = Tachyon.Bus.subscribe(:my_bus)
      {:ok, _} = Tachyon.Bus.publish(:my_bus, "x")
  """
  @spec start_link(keyword()) :: GenServer.on_start()
  def start_link(opts) when is_list(opts) do
    server_schema = Options.bus_server_schema()
    Tachyon.Options.check_keys!(opts, [server_schema, Options.bus_schema()], "Tachyon.Bus")

    server_keys =
      Keyword.keys(server_schema) ++ Keyword.keys(Tachyon.Options.renames(server_schema))

    {server, opts} = Keyword.split(opts, server_keys)
    server = Tachyon.Options.validate!(server, server_schema, "Tachyon.Bus")

    # Validate now: a bad option raises in the caller, not in the process.
    checked = Tachyon.Options.validate!(opts, Options.bus_schema(), "Tachyon.Bus")

    if checked[:delivery] == :poll and checked[:owner] == nil do
      raise ArgumentError,
            "Tachyon.Bus.start_link/1 with delivery: :poll needs :owner, the process that " <>
              "calls recv/2 (a pid or a registered name); subscribers are for delivery: :messages"
    end

    name = if is_atom(server[:name]), do: server[:name]

    Tachyon.PartServer.start_link(Tachyon.Bus.Server, {opts, name},
      module: __MODULE__,
      part: :bus,
      name: server[:name],
      interval: server[:stats_interval_ms],
      by_pid: true
    )
  end

  @doc """
  The defaults of the options (`start_link/1`'s included), most from the
  Rust `MemberConfig::new`; `:sequencer` and `:member_id` have none.

  ## Example

      %{max_datagram_size: 1472, delivery: :messages} = Tachyon.Bus.defaults()
  """
  @spec defaults() :: map()
  def defaults do
    schema = Options.bus_schema() ++ Options.bus_server_schema()
    schema = for {k, spec} <- schema, not Keyword.get(spec, :required, false), do: {k, spec}
    Map.new(Tachyon.Options.validate!([], schema, "Tachyon.Bus"))
  end

  @doc """
  Makes the calling process a receiver of the messages and events of a
  member started by `start_link/1`, given by name or pid. By name, the
  subscription outlives the member's process: it holds across its
  restarts, and may come before it starts. The subscriber is monitored:
  its exit ends the subscription. Several processes may subscribe; each
  gets every message (`{:tachyon_bus, bus, seq, member_id, data}`, `bus`
  being the member of the moment: see `bus/1`). Subscribing again changes
  nothing. `{:error, :noproc}` for a pid no member runs as,
  `{:error, :not_messages}` for a `delivery: :poll` member (its owner
  polls).

  ## Example

      :ok = Tachyon.Bus.subscribe(:orders)

      receive do
        {:tachyon_bus, _bus, _seq, _member_id, data} -> data
      end
  """
  @spec subscribe(atom() | pid()) :: :ok | {:error, :noproc | :not_messages}
  def subscribe(server), do: Subscribers.subscribe(Subscribers.key!(server), self())

  @doc """
  Ends the calling process's subscription (`:ok` also if it had none);
  messages already sent stay in its mailbox.

  ## Example

      :ok = Tachyon.Bus.unsubscribe(:orders)
  """
  @spec unsubscribe(atom() | pid()) :: :ok
  def unsubscribe(server), do: Subscribers.unsubscribe(Subscribers.key!(server), self())

  @doc """
  The child specification (id `{Tachyon.Bus, name}`, `:transient`).

  ## Example

      %{id: {Tachyon.Bus, :m1}} = Tachyon.Bus.child_spec(name: :m1, sequencer: {{127, 0, 0, 1}, 7000}, member_id: 1, owner: self())
  """
  @spec child_spec(keyword()) :: Supervisor.child_spec()
  def child_spec(opts), do: Tachyon.Named.child_spec(__MODULE__, opts, shutdown: 5000)

  @doc """
  The member of a process started by `start_link/1` (a pid or a name),
  asked of the process (so, during a restart, the new member once it has
  joined); it changes when the process restarts. Raises `ArgumentError` if
  no process runs under that name or pid.

  ## Example

      bus = Tachyon.Bus.bus(pid)
  """
  @spec bus(atom() | pid()) :: bus()
  def bus(server) do
    GenServer.call(server, :handle)
  catch
    :exit, {reason, {GenServer, :call, _}} when reason in [:noproc, :normal] ->
      raise ArgumentError, "no Tachyon.Bus #{describe(server)} is running"
  end

  defp describe(name) when is_atom(name), do: "named #{inspect(name)}"
  defp describe(pid), do: inspect(pid)

  @doc """
  Publishes `data` (iodata); returns `{:ok, member_seq}` (of its last
  fragment when it is larger than a datagram), `{:error, :too_large}`
  (over `:max_message_size`), `{:error, :busy}` (too many commands not yet
  seen on the bus), `{:error, :enospc}` (the primary's disk is full: see
  the `:enospc` event) or `{:error, :closed}`. A publish that returned
  `{:ok, _}` is delivered, unless the member is killed first or `close/2`
  says it was not. `data` that is not iodata raises `ArgumentError`.

  ## Example

      {:ok, member_seq} = Tachyon.Bus.publish(bus, "order 42")
  """
  @spec publish(server(), iodata()) ::
          {:ok, pos_integer()}
          | {:error, :too_large | :busy | :enospc | :closed | :member_id_taken | :noproc}
  def publish(bus, data) when is_reference(bus) and is_binary(data),
    do: Native.bus_publish(bus, data)

  def publish(_bus, data) when not is_binary(data) and not is_list(data),
    do: not_iodata!("publish/2", data)

  def publish(bus, data) when is_reference(bus),
    do: Native.bus_publish(bus, iodata_to_binary!("publish/2", data))

  def publish(server, data) do
    with {:ok, bus} <- resolve(server), do: publish(bus, data)
  end

  @doc """
  Publishes several messages at once, as many per datagram as fit (the
  sequencer then sends them in as few bus datagrams). Returns the
  `member_seq` of the last. Anything but a non-empty list of binaries
  raises `ArgumentError`.

  ## Example

      {:ok, _} = Tachyon.Bus.publish_many(bus, ["a", "b", "c"])
  """
  @spec publish_many(server(), [binary()]) ::
          {:ok, pos_integer()}
          | {:error, :too_large | :busy | :enospc | :closed | :member_id_taken | :noproc}
  def publish_many(bus, list) when is_reference(bus) and is_list(list) and list != [] do
    Native.bus_publish_many(bus, list)
  rescue
    # (Checked only once the NIF refused them: nothing spent on a good list.)
    e in ArgumentError ->
      if Enum.all?(list, &is_binary/1),
        do: reraise(e, __STACKTRACE__),
        else: not_binaries!(list)
  end

  def publish_many(server, list) when is_list(list) and list != [] do
    with {:ok, bus} <- resolve(server), do: publish_many(bus, list)
  end

  def publish_many(_server, list), do: not_binaries!(list)

  defp not_binaries!(list) do
    raise ArgumentError,
          "Tachyon.Bus.publish_many/2: the messages must be a non-empty list of binaries, " <>
            "got: #{inspect(list, limit: 8, printable_limit: 64, charlists: :as_lists)}"
  end

  # `data` (a list) as a binary, or an ArgumentError saying it is not iodata.
  defp iodata_to_binary!(fun, data) do
    IO.iodata_to_binary(data)
  rescue
    ArgumentError -> not_iodata!(fun, data)
  end

  defp not_iodata!(fun, data) do
    raise ArgumentError,
          "Tachyon.Bus.#{fun}: the data must be iodata (a binary, or a list of binaries, " <>
            "bytes 0..255 and such lists), got: #{inspect(data, limit: 8, printable_limit: 64, charlists: :as_lists)}"
  end

  @doc """
  Publishes a state machine's snapshot (see "State machine snapshots"):
  `state` (iodata, any size) is the state after every message below
  sequence number `as_of` (the last applied plus one). It goes as messages
  of 64 KiB at most (in fragments under the datagram size); once all are
  committed, members opened `from: :snapshot` start from it, and retention
  keeps the log from `as_of` on. Returns `{:ok, member_seq}` of its last
  message, or an error as `publish/2`. A `:messages` member waits while
  too many commands are pending, at most `timeout` ms (default 5000)
  without room; a `:poll` member returns `{:error, :busy}`. A snapshot cut
  short by an error is ignored: publish the next at a later position.
  Runs on a dirty I/O scheduler.

  ## Example

      state = :erlang.term_to_binary(%{"a" => 1})
      {:ok, _member_seq} = Tachyon.Bus.publish_snapshot(bus, 42, state)
  """
  @spec publish_snapshot(server(), pos_integer(), iodata(), timeout()) ::
          {:ok, pos_integer()}
          | {:error, :too_large | :busy | :enospc | :closed | :member_id_taken | :noproc}
  def publish_snapshot(bus, as_of, state, timeout \\ 5000)

  def publish_snapshot(_bus, _as_of, state, _timeout)
      when not is_binary(state) and not is_list(state),
      do: not_iodata!("publish_snapshot/4", state)

  def publish_snapshot(bus, as_of, state, timeout)
      when is_reference(bus) and is_integer(as_of) and as_of > 0,
      do:
        Native.bus_publish_snapshot(
          bus,
          as_of,
          if(is_binary(state), do: state, else: iodata_to_binary!("publish_snapshot/4", state)),
          timeout_ms(timeout)
        )

  def publish_snapshot(server, as_of, state, timeout) do
    with {:ok, bus} <- resolve(server), do: publish_snapshot(bus, as_of, state, timeout)
  end

  @doc """
  Poll mode: the messages now in order (at least one), waiting at most
  `timeout` ms: `{:ok, [{seq, member_id, data}]}`, `{:error, :timeout}`,
  `{:error, :closed}` or `{:error, :not_poll}`.

  ## Example

      {:ok, [{_seq, _member_id, _data} | _]} = Tachyon.Bus.recv(bus, 1000)
  """
  @spec recv(server(), timeout()) ::
          {:ok, [entry()]} | {:error, :timeout | :closed | :not_poll | :noproc | atom()}
  def recv(bus, timeout \\ :infinity)

  def recv(bus, timeout) when is_reference(bus) do
    Tachyon.Poll.recv(
      bus,
      timeout,
      &Native.bus_recv(bus, 64, &1),
      fn -> Native.bus_select(bus) end,
      :tachyon_bus_ready,
      5
    )
  end

  def recv(server, timeout) do
    with {:ok, bus} <- resolve(server), do: recv(bus, timeout)
  end

  @doc """
  `:messages` mode: acknowledges `count` processed messages, making room
  under `:max_queue` (one atomic add; acknowledge in batches if you like).

  ## Example

      receive do
        {:tachyon_bus, ^bus, _seq, _member_id, _data} -> :ok = Tachyon.Bus.ack(bus)
      after
        1000 -> :ok
      end
  """
  @spec ack(server(), pos_integer()) :: :ok | {:error, :noproc}
  def ack(bus, count \\ 1)

  def ack(bus, count) when is_reference(bus) and is_integer(count) and count > 0,
    do: Native.bus_ack(bus, count)

  def ack(server, count) when is_integer(count) and count > 0 do
    with {:ok, bus} <- resolve(server), do: Native.bus_ack(bus, count)
  end

  @doc """
  The member's counters: `{:ok, map}` (`:published`, `:commands`,
  `:resent`, `:delivered`, `:datagrams`, `:duplicates`, `:gaps`,
  `:replay_requests`, `:malformed`, `:wrong_session`, `:dropped_ahead`,
  `:injected_losses`, `:oversized`, `:hellos`, `:next_seq`, `:pending`,
  `:send_errors`, `:epoch`, `:stale_epoch`, `:forks`, `:nacked` (commands
  the primary asked for again), `:probes` (tail-loss probes: the last
  command in flight sent again after two smoothed round trips without
  news, RFC 8985; also in `:resent`), `:renumbered` (pending commands sent
  marked to skip the numbers a fork lost), `:strangers` (datagrams from outside
  the group), `:conflicts`, `:welcomes`, `:commit` (the commit index last
  heard), `:cwnd` (the congestion window: command datagrams in flight at
  most), `:rto_us` (the retransmission timeout from the measured round
  trip, before backoff), `:coalesced` (messages that joined a command
  datagram waiting for the window), and `:acked` and `:in_flight` for
  `:max_queue`; with several subscribers their acknowledgements add up),
  `:unheard` (messages delivered to nobody) and `:subscribers`) or
  `{:error, :closed}` (`{:error, :noproc}` for a name or pid no member runs
  under).

  ## Example

      {:ok, %{delivered: _}} = Tachyon.Bus.stats(bus)
  """
  @spec stats(server()) :: {:ok, map()} | {:error, :closed | :noproc}
  def stats(bus) when is_reference(bus), do: Native.bus_stats(bus)

  def stats(server) do
    with {:ok, bus} <- resolve(server), do: Native.bus_stats(bus)
  end

  @doc """
  Takes new keys for this member (`auth` as the `:auth` option: its
  credential's file, or a key given): a key rotation without closing the
  member (docs/SECURITY.md, "Rotating keys"). `{:error, :no_keys}` for a
  member opened without keys, `{:error, {:bad_key, why}}` for keys that
  cannot be used (or another member id's).

  ## Example

      dir = Path.join(System.tmp_dir!(), "seq-#{System.unique_integer([:positive])}")
      {:ok, seq} = Tachyon.Sequencer.start_link(path: dir, wait: :park)
      {:ok, bus} = Tachyon.Bus.open(sequencer: Tachyon.Sequencer.address(seq), member_id: 1)
      {:ok, text} = Tachyon.Auth.generate()
      {:error, :no_keys} = Tachyon.Bus.reload_keys(bus, key: Tachyon.Auth.key(text))
  """
  @spec reload_keys(bus() | atom() | pid(), keyword()) :: :ok | {:error, term()}
  def reload_keys(bus, auth) do
    source =
      case Tachyon.Auth.option(auth, false) do
        {:ok, %{source: source}} ->
          source

        _ ->
          raise ArgumentError,
                "Tachyon.Bus.reload_keys/2 takes auth: options, got: #{inspect(auth)}"
      end

    with {:ok, ref} <- resolve(bus), {:ok, text} <- key_text(source) do
      Native.bus_set_keys(ref, text)
    end
  end

  defp key_text(source) do
    {:ok, Tachyon.Auth.text!(source, "Tachyon.Bus")}
  rescue
    e in ArgumentError -> {:error, {:bad_key, Exception.message(e)}}
  end

  @doc """
  Leaves the bus once every message this member published has been
  delivered (to this member, so in the bus's order for every member),
  waiting at most `timeout` milliseconds (default 5000): from the call on,
  publishes return `{:error, :closed}`; what is pending is still resent
  (through a change of primary too). Returns `:ok` when nothing was left,
  or `{:error, {:undelivered, n}}`: `n` messages whose `publish` returned
  `{:ok, _}` were not seen delivered (they may still be, if a primary
  holds them: the caller cannot tell). A `:poll` member is driven by the
  close meanwhile; what it delivers then is dropped. Then the member says
  goodbye (a unicast member leaves the fan-out) and the thread, if any,
  stops. Idempotent (`:ok` once closed).

  Given the pid or name of a process started by `start_link/1`, closes its
  member so and stops it for good (not restarted); `{:error, :noproc}` if
  none runs. A member whose owner exits, or whose process is shut down by
  its supervisor, closes without waiting more than a second.

  ## Example

      :ok = Tachyon.Bus.close(bus)
      {:error, {:undelivered, _n}} = Tachyon.Bus.close(bus_cut_off_from_its_sequencer, 100)
  """
  @spec close(bus() | GenServer.server(), timeout()) ::
          :ok | {:error, {:undelivered, pos_integer()} | :noproc}
  def close(bus, timeout \\ 5000)

  def close(bus, timeout) when is_reference(bus),
    do: Native.bus_drain_close(bus, timeout_ms(timeout))

  def close(server, timeout) do
    # (None, or an orphan left by a killed process, has nothing to drain.)
    drained =
      case member_of(server) do
        {:ok, bus} -> close(bus, timeout)
        {:error, :noproc} -> :ok
      end

    case Tachyon.Named.close(server) do
      {:error, :noproc} = error -> error
      _ -> drained
    end
  end

  # The member of a Bus process: by one lookup for a name or a pid; a
  # `{:global, _}` or `{:via, _, _}` name asks the process.
  defp member_of(server) when is_atom(server) or is_pid(server), do: resolve(server)

  defp member_of(server) do
    {:ok, GenServer.call(server, :handle)}
  catch
    :exit, _ -> {:error, :noproc}
  end

  defp timeout_ms(:infinity), do: 3_600_000
  defp timeout_ms(ms) when is_integer(ms) and ms >= 0, do: ms

  defp timeout_ms(other),
    do:
      raise(
        ArgumentError,
        "the close timeout must be milliseconds or :infinity, got: #{inspect(other)}"
      )

  # A member, or the name or pid of a member's process: one
  # `:persistent_term` lookup (Tachyon.Named), no message to the process.
  defp resolve(bus) when is_reference(bus), do: {:ok, bus}
  defp resolve(name) when is_atom(name) or is_pid(name), do: Named.whereis(__MODULE__, name)

  defp resolve(other),
    do:
      raise(
        ArgumentError,
        "expected a Tachyon.Bus member, or the name or pid of a Tachyon.Bus process, got: " <>
          inspect(other)
      )
end

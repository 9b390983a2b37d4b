defmodule Tachyon.Sequencer.Server do
  @moduledoc false
  # The part callbacks of Tachyon.Sequencer (Tachyon.PartServer runs the
  # process). The log is opened, the port bound and the thread started in
  # the caller of start_link/1 (errors are return values); the process
  # adopts the node, listens to its reports and emits them as
  # `[:tachyon, :sequencer, kind]`, keeps the node's role from the `:role`
  # reports (never by polling the stats), answers `await_primary/2` when
  # the report that makes it primary arrives, and turns a `:nodedown` of
  # a watched BEAM node into the witness's word. The handle published
  # under the name is `%{ref: ref, info: info}`.

  @behaviour Tachyon.PartServer

  alias Tachyon.{Native, Telemetry}

  # A group of one elects itself at once: start_link/1 returns once it did.
  @self_election_ms 5000

  @impl true
  def open({nif, opts}) do
    # The keys are read now, from their file (or the key given), and pass
    # to the node; only where they come from is kept (reload_keys/2).
    native = %{nif | auth: Tachyon.Auth.native!(nif.auth, "Tachyon.Sequencer")}

    case Native.seq_start(native) do
      {:ok, ref, info} ->
        info =
          Map.merge(%{session: nil, recovered_members: 0}, info)
          |> Map.merge(%{role: :follower, leader: nil, group: opts.group, path: nif.path})

        data = %{
          info: info,
          auth: opts.auth,
          watch_nodes: opts.watch_nodes,
          watch: %{},
          waiters: %{},
          events_to: opts.events_to
        }

        {:ok, %{ref: ref, info: info}, data}

      {:error, reason} = error ->
        # A log of another kind, a full disk: the detail goes to the log
        # (normalize/3). A socket's errors name the port, the others the
        # log's directory.
        where =
          if reason in [:eaddrinuse, :eaddrnotavail],
            do: [target: {opts.ip, opts.port}, action: :bind],
            else: [target: nif.path, action: :open]

        name = if is_atom(opts.name), do: opts.name

        error
        |> Tachyon.Error.normalize(Tachyon.Sequencer, nif.path)
        |> Tachyon.Error.report(Tachyon.Sequencer, [name: name] ++ where)
    end
  end

  @impl true
  def close(%{ref: ref}), do: Native.seq_stop(ref)

  @impl true
  def stats(%{ref: ref}, _data), do: Native.seq_stats(ref)

  @impl true
  def started(state, _duration), do: %{next_seq: state.data.info.next_seq}

  @impl true
  def meta(%{name: name, data: %{info: info}}) do
    %{name: name, address: info.address, session: info.session, path: info.path}
  end

  # The node's reports come to this process (the node keeps the ones sent
  # before anyone listened); the BEAM nodes of the group (by index) are
  # monitored: a :nodedown is the witness's word.
  @impl true
  def init_handle(state) do
    Native.seq_report_to(state.handle.ref, self())

    nodes =
      for {node, i} <- Enum.with_index(state.data.watch_nodes),
          node != nil,
          node != Node.self(),
          into: %{},
          do: {node, i}

    # Every :nodedown, not one per monitor (a node that comes back and goes
    # down again is reported again; one never connected is not "down").
    if nodes != %{}, do: :net_kernel.monitor_nodes(true)

    state = put_in(state.data.watch, nodes)
    if state.data.info.group == [], do: await_self(state), else: state
  end

  defp await_self(state) do
    receive do
      {:tachyon_report, :sequencer, _id, :role, %{role: :primary} = fields} ->
        state = report(:role, fields, state)
        # The session and next_seq of the new term, for info/1.
        case Native.seq_stats(state.handle.ref) do
          {:ok, st} ->
            update_in(state.data.info, &%{&1 | session: st.session, next_seq: st.next_seq})

          _ ->
            state
        end
    after
      @self_election_ms -> state
    end
  end

  # `[:tachyon, :sequencer, kind]` for every report (`:role`, `:campaign`,
  # `:voted`, `:truncated`, `:learner`, `:caught_up`, `:disk_full`,
  # `:disk_space`, `:membership`, ...), and the same to `:events_to` if set.
  @impl true
  def report(kind, fields, state) do
    state =
      case {kind, fields} do
        {:role, %{role: :stepped_down}} ->
          put_in(state.data.info.role, :follower)

        {:role, %{role: role, epoch: e} = f} ->
          leader = if role == :primary, do: own_id(state), else: Map.get(f, :leader)
          info = %{state.data.info | role: role, epoch: e, leader: leader}
          answer_waiters(put_in(state.data.info, info))

        _ ->
          state
      end

    Telemetry.execute([:tachyon, :sequencer, kind], fields, meta(state))
    if to = state.data.events_to, do: send(to, {:tachyon_sequencer_event, self(), kind, fields})
    state
  end

  # A node that joined has its id from its primary, not from its start.
  defp own_id(%{data: %{info: %{node_id: nil}}, handle: %{ref: ref}}),
    do: Native.seq_membership(ref).node_id

  defp own_id(state), do: state.data.info.node_id

  @impl true
  def message({:nodedown, node}, %{data: %{watch: watch}} = state)
      when is_map_key(watch, node) do
    Native.seq_witness_down(state.handle.ref, Map.fetch!(watch, node))
    state
  end

  def message({:await_timeout, tag}, state) do
    case Map.pop(state.data.waiters, tag) do
      {nil, _} ->
        state

      {from, waiters} ->
        GenServer.reply(from, {:error, :timeout})
        put_in(state.data.waiters, waiters)
    end
  end

  def message(_msg, state), do: state

  @impl true
  def call({:await_primary, timeout}, from, state) do
    case state.data.info do
      %{role: :primary, epoch: epoch} ->
        {:reply, {:ok, epoch}, state}

      _ ->
        tag = make_ref()
        Process.send_after(self(), {:await_timeout, tag}, timeout)
        {:noreply, put_in(state.data.waiters[tag], from)}
    end
  end

  def call({:reload_keys, auth}, _from, state) do
    auth = auth || state.data.auth

    reply =
      case auth do
        %{source: source} ->
          Native.seq_set_keys(state.handle.ref, Tachyon.Auth.text!(source, "Tachyon.Sequencer"))

        _ ->
          {:error, :no_keys}
      end

    state = if reply == :ok, do: put_in(state.data.auth, auth), else: state
    {:reply, reply, state}
  rescue
    e in ArgumentError -> {:reply, {:error, {:bad_key, Exception.message(e)}}, state}
  end

  def call(_request, _from, state), do: {:reply, {:error, :unknown_call}, state}

  defp answer_waiters(%{data: %{info: %{role: :primary, epoch: e}, waiters: w}} = state)
       when map_size(w) > 0 do
    for {_tag, from} <- w, do: GenServer.reply(from, {:ok, e})
    put_in(state.data.waiters, %{})
  end

  defp answer_waiters(state), do: state
end

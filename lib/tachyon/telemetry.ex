defmodule Tachyon.Telemetry do
  @moduledoc """
  Telemetry events emitted by Tachyon.

  Tachyon has no dependency on the `:telemetry` package. When the host
  application has it (the `:telemetry` module is loaded), events are emitted
  with `:telemetry.execute/3`; otherwise they are dropped at the cost of one
  `:persistent_term` lookup. Nothing is emitted per message: counters are kept
  in Rust and reported periodically or at the few moments listed below.

  Durations are in native time units (convert with
  `System.convert_time_unit(d, :native, :microsecond)`), like OTP's own events.

  ## Every event

  | Event | When |
  |---|---|
  | `[:tachyon, :store, :open]` | a store was opened |
  | `[:tachyon, :store, :recover]` | a writer's open finished its recovery scan |
  | `[:tachyon, :store, :roll]` | the writer moved to a new segment (queued, emitted at the tick) |
  | `[:tachyon, :store, :retention]` | retention deleted segments (queued, emitted at the tick) |
  | `[:tachyon, :store, :sync]` | `Tachyon.Store.sync/1` finished |
  | `[:tachyon, :store, :stats]` | every `:stats_interval_ms` (store process) |
  | `[:tachyon, :async_store, :stats]` | every `:stats_interval_ms` (writer thread's report) |
  | `[:tachyon, :async_store, :writer_failed]` | the writer thread stopped on an error |
  | `[:tachyon, :table, :open]` | a table was opened |
  | `[:tachyon, :table, :recover]` | an open rebuilt the index |
  | `[:tachyon, :table, :compaction]` | a compaction round (queued, emitted at the tick) |
  | `[:tachyon, :table, :sync]` | `Tachyon.Table.sync/1` finished |
  | `[:tachyon, :table, :stats]` | every `:stats_interval_ms` (table process) |
  | `[:tachyon, :sequencer, :start]` | a node started |
  | `[:tachyon, :sequencer, :stats]` | every `:stats_interval_ms` (node process) |
  | `[:tachyon, :sequencer, :stop]` | a node stopped |
  | `[:tachyon, :sequencer, :role]` | the node became primary or follower, or stepped down (a takeover is a `:role` event with `role: :primary`) |
  | `[:tachyon, :sequencer, :campaign]` | the node asks for votes |
  | `[:tachyon, :sequencer, :voted]` | the node voted |
  | `[:tachyon, :sequencer, :truncated]` | the node removed an uncommitted suffix of its log |
  | `[:tachyon, :sequencer, :learner]` | the node started as a learner (it votes for nobody until it caught up) |
  | `[:tachyon, :sequencer, :caught_up]` | a learner caught up with the primary and votes again |
  | `[:tachyon, :sequencer, :disk_full]` | an append found no room (a primary steps down) |
  | `[:tachyon, :sequencer, :disk_space]` | a node whose disk was full has room again |
  | `[:tachyon, :sequencer, :trimmed]` | retention removed the log's oldest segments (a checkpoint sums them up) |
  | `[:tachyon, :sequencer, :installed]` | a node too far behind installed its primary's checkpoint |
  | `[:tachyon, :sequencer, :membership]` | the group's membership in the node's log changed (a node added, made a voter or removed) |
  | `[:tachyon, :sequencer, :rejected]` | datagrams dropped by packet protection since the last stats tick (keys given: `Tachyon.Auth`) |
  | `[:tachyon, :bus, :stats]` | every `:stats_interval_ms` (member process) |
  | `[:tachyon, :bus, :epoch]` | a member heard a new primary |
  | `[:tachyon, :bus, :renumbered]` | a member resent commands a new primary lacked |
  | `[:tachyon, :bus, :fork]` | a member saw a primary that lacks what it delivered |
  | `[:tachyon, :bus, :member_id_taken]` | another member holds this `member_id` |
  | `[:tachyon, :bus, :enospc]` | the primary could not append this member's command: its disk is full |
  | `[:tachyon, :bus, :trimmed]` | messages a member had not read were removed by retention: it goes on after them |
  | `[:tachyon, :bus, :unheard]` | a member's messages went to nobody (no subscriber, no owner that reads them) |
  | `[:tachyon, :bus, :rejected]` | datagrams dropped by a member's packet protection since the last stats tick |
  | `[:tachyon, :echo, :start]` | an echo server started |
  | `[:tachyon, :echo, :stats]` | every `:stats_interval_ms` (server process) |
  | `[:tachyon, :echo, :stop]` | an echo server stopped |
  | `[:tachyon, :udp, :open]` | a socket was opened |
  | `[:tachyon, :udp, :close]` | `Tachyon.UDP.close/1` closed a socket |

  Every part with a process emits its `:stats` event from the same
  skeleton: the process ticks every `:stats_interval_ms` (`nil`: never),
  emits the events queued in Rust (rolls, compactions), then `:stats`.
  Events that happen in a part's own thread (a sequencer's role change, an
  AsyncStore writer's failure) come on its report channel as they happen,
  not at the tick.

  ## Store events

    * `[:tachyon, :store, :open]` - a store was opened (writer or reader).
      * Measurements: `:duration`, `:segments` (segment files found),
        `:messages` (messages kept in the log after recovery).
      * Metadata: `:path`, `:access` (`:write | :read`), `:name` (or `nil`);
        `:mode`, the same value under its deprecated name, for one release.

    * `[:tachyon, :store, :recover]` - emitted by every writer open, after the
      recovery scan of the active segment.
      * Measurements: `:duration`, `:recovered` (records checked and kept),
        `:truncated_bytes` (bytes of a torn tail or of a repaired corruption
        cut off), `:lost_records` (records dropped by `repair: true`; 0 for a
        torn tail, whose record had never returned to a caller).
      * Metadata: `:path`, `:segment` (sequence number of the scanned segment),
        `:cut` (`nil`, `:torn_tail` or `:repaired`), `:offset` (where it was cut,
        or `nil`).

    * `[:tachyon, :store, :roll]` - the writer moved to a new segment. Rolls
      happen inside the append NIF; the events are queued in Rust and emitted
      by the store's process at its next stats tick (or by `sync/1` and
      `close/1`, also for a handle without a process; `stats/1` has no side
      effect).
      * Measurements: `:segment` (new segment's sequence number),
        `:base_index` (first index in it), `:prepared` (1 if the pre-touch
        thread had the segment ready, 0 if the writer created it inline),
        `:roll_ns` (time the writer spent switching), `:deleted_segments`
        (segments removed by retention at this roll).
      * Metadata: `:path`, `:name`.

    * `[:tachyon, :store, :retention]` - retention took whole segments out
      of the log (`Tachyon.Store`, "Retention"); queued and emitted as
      `:roll` is.
      * Measurements: `:deleted_segments`, `:deleted_bytes` (their files),
        `:first_index` (the first index kept now).
      * Metadata: `:path`, `:name`, `:reason` (`:max_bytes`, `:max_age`,
        `:max_segments` or `:trim`).

    * `[:tachyon, :store, :sync]` - `Tachyon.Store.sync/1` finished.
      * Measurements: `:duration`, `:bytes` (bytes flushed).
      * Metadata: `:path`, `:name`.

    * `[:tachyon, :store, :stats]` - periodic, from a supervised store every
      `:stats_interval_ms` (default 1000; `nil` turns it off).
      * Measurements: `:appended` (messages appended since open),
        `:appended_bytes`, `:segments`, `:first_index`, `:next_index`.
      * Metadata: `:path`, `:name`.

  ## AsyncStore events

  The writer thread of a `Tachyon.AsyncStore` counts in Rust and sends its
  reports to a process (the AsyncStore's own process under `start_link/1`,
  a small reporter process for `open/2`), which emits:

    * `[:tachyon, :async_store, :stats]` - every `:stats_interval_ms`
      (default 1000; `nil` turns it off) while the writer runs.
      * Measurements: `:enqueued` (messages accepted by `append/2`),
        `:written` (messages the writer put in the store), `:pending`
        (enqueued, not written yet), `:written_bytes`, `:batches` (store
        batches written), `:full_events` (appends that found the ring full),
        `:rejected` (appends that returned `{:error, :full}`),
        `:high_water_bytes` (most ring bytes in use seen by the writer),
        `:ring_used` (ring bytes in use now).
      * Metadata: `:path` (the store's directory), `:name` (or `nil`).

    * `[:tachyon, :async_store, :writer_failed]` - the writer thread stopped
      on a store error; every later append and flush returns
      `{:error, reason}`. Also logged as an error.
      * Measurements: `:enqueued`, `:written`, `:lost` (messages enqueued
        that will not be written).
      * Metadata: `:path`, `:name`, `:reason` (`:enospc`, `:enoent`,
        `:closed`, `:index_conflict`, ...), `:detail` (a readable string).

  An AsyncStore that opened its own store under `start_link/1` also flushes
  that store's `[:tachyon, :store, :roll]` events at each stats tick.

  ## Sequencer and bus events

    * `[:tachyon, :sequencer, :start]` - a `Tachyon.Sequencer` node started
      (log recovered, port bound, thread running).
      * Measurements: `:next_seq`.
      * Metadata: `:name`, `:address`, `:session`, `:path`.

    * `[:tachyon, :sequencer, :stats]` - periodic, every
      `:stats_interval_ms` (default 1000), from the node's process.
      * Measurements: the node's counters since start (see
        `Tachyon.Sequencer`, "Stats and telemetry"), `:role` and `:leader`
        included.
      * Metadata: as for `:start`.

    * `[:tachyon, :sequencer, :stop]` - the node stopped; the final
      counters (as for `:stats`).

    * `[:tachyon, :sequencer, :rejected]` - at a stats tick, when the
      node's packet protection (`auth:`, `Tachyon.Auth`) dropped datagrams
      since the last tick: forged or damaged, replayed, without keys, or
      forbidden (a member speaking as another member or as a node). A
      warning is logged too, at most once every 10 s.
      * Measurements: `:count` (since the last tick), `:forged`,
        `:replayed`, `:unsealed`, `:forbidden` (each since the last tick),
        `:total` (since start).
      * Metadata: as for `:start`.

    * `[:tachyon, :sequencer, :role]` - the node's role changed (from the
      node's thread, on the report channel, as it happens).
      * Measurements: `:role` (`:primary`, `:follower` (also a primary
        that learnt of a higher term) or `:stepped_down` (a primary of a
        group of three or more that lost its majority for an election
        timeout)),
        `:epoch`, and `:start` (primary: the sequence number of its
        term's epoch record) or `:leader` (follower: the primary's index,
        or nil).
      * Metadata: as for `:start`.
      * A standby's or follower's takeover is this event with `role:
        :primary`; there is no separate `:takeover` event.
        `Tachyon.Sequencer.await_primary/2` and `info/1` follow these
        reports, never the stats.

    * `[:tachyon, :sequencer, :campaign]` - the node asks for votes.
      * Measurements: `:epoch`, `:pre_vote` (true: a pre-vote, which
        changes no term).
      * Metadata: as for `:start`.

    * `[:tachyon, :sequencer, :voted]` - the node voted (persisted before
      the reply).
      * Measurements: `:epoch`, `:candidate` (its index).
      * Metadata: as for `:start`.

    * `[:tachyon, :sequencer, :truncated]` - the node removed a suffix of
      its log that the primary does not hold (never a committed entry).
      * Measurements: `:from`, `:removed`.
      * Metadata: as for `:start`.

    * `[:tachyon, :sequencer, :learner]` - the node started as a learner:
      it cannot vouch for what it acknowledged before (`:reason`:
      `:new_disk` (no metadata: a new or replaced disk), `:rebooted` (its
      host rebooted while acknowledgements promised only the page cache,
      `durability: :replicated`), `:cut` (its log's recovery cut records
      that did not verify), `:restarted` (it was a learner when it
      stopped)). It votes for nobody until `:caught_up`.
      * Measurements: `:reason`.
      * Metadata: as for `:start`.

    * `[:tachyon, :sequencer, :caught_up]` - a learner holds everything
      the primary of `:epoch` committed: it votes again.
      * Measurements: `:epoch`.
      * Metadata: as for `:start`.

    * `[:tachyon, :sequencer, :disk_full]` - an append found no room on the
      node's disk (`:primary`: it was the primary, and stepped down: a node
      with room takes over). The node does not campaign until its disk has
      room (`:disk_space`).
      * Measurements: `:primary`.
      * Metadata: as for `:start`.

    * `[:tachyon, :sequencer, :disk_space]` - the node's disk has room
      again (checked every half election timeout while full).
      * Measurements: none.
      * Metadata: as for `:start`.

    * `[:tachyon, :sequencer, :trimmed]` - retention removed the log's
      entries below `:first` (whole segments; a checkpoint of the
      sequencer's own state below it was saved first). Nothing anyone
      still needs is removed: not what a follower heard lately lacks, not
      what a member heard within its lease has still to read.
      * Measurements: `:first`.
      * Metadata: as for `:start`.

    * `[:tachyon, :sequencer, :installed]` - the node was behind the first
      entry its primary keeps: it installed the primary's checkpoint
      (Raft's InstallSnapshot) and copies the log from `:first` on.
      * Measurements: `:first`.
      * Metadata: as for `:start`.

    * `[:tachyon, :sequencer, :membership]` - the latest membership in the
      node's log changed (a change appended or copied, or cut by a
      truncation; `Tachyon.Sequencer.add_node/3`, `remove_node/3`, a node
      started with `:join`, and the primary making a caught-up node a
      voter), or a joining node learnt its id. `:node_id` is this node's
      id (`nil` while it is not in the group: joining, or removed),
      `:nodes` the nodes, `:voters` those that vote, `:at` the change's
      log index. `Tachyon.Sequencer.membership/1` lists them.
      * Measurements: `:node_id`, `:nodes`, `:voters`, `:at`.
      * Metadata: as for `:start`.

    * `[:tachyon, :bus, :stats]` - periodic, from a member started with
      `Tachyon.Bus.start_link/1` (every `:stats_interval_ms`, default 1000).
      * Measurements: the member's counters: `:published`, `:commands`,
        `:resent` (retransmits of commands), `:delivered`, `:datagrams`,
        `:duplicates`, `:gaps`, `:replay_requests` (gap fills and rewind
        chunks), `:malformed`, `:wrong_session`, `:dropped_ahead`,
        `:injected_losses`, `:oversized`, `:hellos`, `:next_seq`,
        `:pending`, `:send_errors`, `:epoch`, `:commit`, `:forks`, ...
        (see `Tachyon.Bus.stats/1`).
      * Metadata: `:member_id`, `:name` (the process's registered name, or `nil`).

    * `[:tachyon, :bus, :rejected]` - at a stats tick of a member started
      with `Tachyon.Bus.start_link/1`, when its packet protection dropped
      datagrams since the last tick (as `[:tachyon, :sequencer, :rejected]`).
      * Measurements: `:count`, `:forged`, `:replayed`, `:unsealed`,
        `:forbidden`, `:total`.
      * Metadata: `:member_id`, `:name`.

    * `[:tachyon, :bus, :unheard]` - a member started with
      `Tachyon.Bus.start_link/1` delivered messages to nobody: no process
      subscribed and no owner, or an owner that drops them (a supervisor,
      the application master). Emitted at the first such message, then at
      most once every 10 s, with a warning in the log that names the bus
      and says what to do.
      * Measurements: `:count` (messages delivered to nobody since the
        previous event).
      * Metadata: `:member_id`, `:name`.

    * `[:tachyon, :bus, :epoch | :fork | :renumbered | :member_id_taken | :enospc | :trimmed]`
      - a member's event (see `Tachyon.Bus`, "Events"), from any member
      opened while the `:tachyon` application runs.
      * Measurements: the event's fields (`:epoch`; `:next_seq`,
        `:last_epoch`, `:epoch`; `:lost`; `:member_seq`; `:from_seq`,
        `:first_seq`), and `:member_id`.
      * Metadata: `:bus`, `:member_id`.

  ## Echo and UDP events

    * `[:tachyon, :echo, :start]` - a `Tachyon.Echo` server started (its
      socket is bound and its thread runs).
      * Measurements: `:duration` (bind, thread start and pinning).
      * Metadata: `:name` (or `nil`), `:address` (`{ip, port}`), `:core`
        (or `nil`), `:pinned`, `:wait`.

    * `[:tachyon, :echo, :stats]` - periodic, every `:stats_interval_ms`
      (default 1000; `nil` turns it off), from the server's process.
      * Measurements: the thread's counters since start: `:packets_in`,
        `:bytes_in`, `:packets_out`, `:bytes_out`, `:batches`, `:truncated`,
        `:recv_errors`, `:send_errors`, `:kernel_drops`, `:errors`.
      * Metadata: as for `:start`.

    * `[:tachyon, :echo, :stop]` - the server stopped; its thread is joined and
      its port is free.
      * Measurements: the final counters (as for `:stats`).
      * Metadata: as for `:start`.

    * `[:tachyon, :udp, :open]` - `Tachyon.UDP.open/2` opened a socket.
      * Measurements: `:duration` (bind and receive-thread start).
      * Metadata: `:socket`, `:address` (`{ip, port}`), `:owner` (pid),
        `:core` (or `nil`), `:pinned`, `:wait`, `:delivery` (`:messages |
        :poll`), `:max_queue` (integer or `:infinity`).

    * `[:tachyon, :udp, :close]` - `Tachyon.UDP.close/1` closed an open socket
      (not emitted when the owner's exit closes it: no process is left to
      emit it; its counters are gone with it).
      * Measurements: the socket's final counters: `:received`,
        `:received_bytes`, `:delivered`, `:acked`, `:in_flight`, `:dropped`,
        `:undelivered`, `:truncated`, `:recv_errors`, `:kernel_drops`,
        `:batches`, `:sent`, `:sent_bytes`, `:send_errors`.
      * Metadata: `:socket`.

  ## Table events

  Emitted by `Tachyon.Table`. Compactions run in a Rust thread: their
  events are queued there and emitted by the table's process at its next
  stats tick (or by `compact/1` and `close/1`, also for a handle from
  `Tachyon.Table.open/2`; `stats/1` has no side effect).

    * `[:tachyon, :table, :open]` - a table was opened.
      * Measurements: `:duration` (the whole open, recovery included),
        `:keys` (live keys), `:records` (entries replayed, live or not),
        `:segments` (segment files found).
      * Metadata: `:path`, `:storage` (`:memory | :mapped | :file`),
        `:name`; `:mode`, the same value under its deprecated name, for one
        release.

    * `[:tachyon, :table, :recover]` - emitted with every open, after the
      index was rebuilt.
      * Measurements: `:duration` (rebuilding the index), `:records`,
        `:hinted_segments` (loaded from their hint file),
        `:scanned_segments` (read record by record, CRC checked),
        `:truncated_bytes` (bytes of a torn tail cut off; 0 normally),
        `:removed_files` (leftovers of a crash: unfinished segments and hint
        files).
      * Metadata: `:path`, `:storage` (and `:mode`), `:name`, `:cut` (`nil`, or
        `{segment_id, offset}` where a torn tail was cut).

    * `[:tachyon, :table, :compaction]` - a compaction round rewrote
      segments (background or `compact/1`).
      * Measurements: `:duration`, `:segments_in`, `:segments_out`,
        `:bytes_in` and `:bytes_out` (file sizes: `bytes_in - bytes_out` is
        the disk space returned), `:entries_copied`, `:tombstones_dropped`.
      * Metadata: `:path`, `:name`.

    * `[:tachyon, :table, :sync]` - `Tachyon.Table.sync/1` finished.
      * Measurements: `:duration`.
      * Metadata: `:path`, `:name`.

    * `[:tachyon, :table, :stats]` - periodic, from a supervised table every
      `:stats_interval_ms` (default 1000; `nil` turns it off).
      * Measurements: `:keys`, `:puts`, `:deletes` (since open), `:segments`,
        `:disk_bytes` (blocks in use by segment files), `:live_bytes`,
        `:total_bytes` (bytes of live entries / of all entries in the
        segments), `:compactions`.
      * Metadata: `:path`, `:name`.
  """

  @key {__MODULE__, :enabled}

  @doc """
  Emits `event` if `:telemetry` is available in this VM.

  The check for the `:telemetry` module runs once and is cached in
  `:persistent_term`; call `refresh/0` after loading `:telemetry` late.

  ## Example

      Tachyon.Telemetry.execute([:tachyon, :store, :sync], %{duration: 10}, %{path: "/tmp/log"})
  """
  @spec execute([atom()], map(), map()) :: :ok
  def execute(event, measurements, metadata) do
    if enabled?() do
      # credo:disable-for-next-line
      apply(:telemetry, :execute, [event, measurements, metadata])
    end

    :ok
  end

  @doc """
  Whether events are emitted (the `:telemetry` module is loaded).

  ## Example

      Tachyon.Telemetry.enabled?()
      #=> false
  """
  @spec enabled?() :: boolean()
  def enabled? do
    case :persistent_term.get(@key, :unknown) do
      :unknown -> refresh()
      value -> value
    end
  end

  @doc """
  Checks again whether `:telemetry` is loaded and caches the answer.

  ## Example

      Tachyon.Telemetry.refresh()
  """
  @spec refresh() :: boolean()
  def refresh do
    value = Code.ensure_loaded?(:telemetry) and function_exported?(:telemetry, :execute, 3)
    :persistent_term.put(@key, value)
    value
  end
end

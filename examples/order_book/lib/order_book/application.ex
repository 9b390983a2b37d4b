defmodule OrderBook.Application do
  @moduledoc false
  # Supervises the Tachyon parts this example uses, from its own tree:
  # a Store (an audit log), an AsyncStore in front of it, an Echo (a
  # health-check port), a Table (per-trader counters), and the order bus:
  # a Sequencer, a bus member in the static child list (:order_feed, no
  # owner) with a subscriber (OrderBook.Tape, the tape of every order), and
  # two desks (OrderBook.Desk), each a bus member that keeps the same book
  # in a Tachyon.StateMachine (OrderBook.Book).
  use Application

  @impl true
  def start(_type, _args) do
    dir = Application.fetch_env!(:order_book, :dir)
    File.rm_rf!(dir)
    File.mkdir_p!(dir)

    children = [
      {Tachyon.Store, name: :order_audit_log, path: Path.join(dir, "audit")},
      {Tachyon.AsyncStore, name: :order_audit, store: :order_audit_log},
      {Tachyon.Echo, name: :order_health, port: 0, wait: :park},
      {Tachyon.Table, name: :trader_counts, path: Path.join(dir, "counts")},
      {Tachyon.Sequencer,
       name: :order_sequencer,
       path: Path.join(dir, "seq"),
       port: Application.fetch_env!(:order_book, :sequencer_port),
       wait: :park},
      # The member takes the sequencer by name (its port is picked at start).
      {Tachyon.Bus, name: :order_feed, sequencer: :order_sequencer, member_id: 3, wait: :park},
      {OrderBook.Tape, bus: :order_feed},
      Supervisor.child_spec({OrderBook.Desk, name: :desk_a, member_id: 1, dir: dir}, id: :desk_a),
      Supervisor.child_spec({OrderBook.Desk, name: :desk_b, member_id: 2, dir: dir}, id: :desk_b)
    ]

    Supervisor.start_link(children, strategy: :rest_for_one, name: OrderBook.Supervisor)
  end
end

import Config

# Where the example keeps its files, and the sequencer's port (0: any).
config :order_book,
  dir: Path.join(System.tmp_dir!(), "order_book"),
  sequencer_port: 0

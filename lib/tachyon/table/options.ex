defmodule Tachyon.Table.Options do
  @moduledoc false
  # Tachyon.Table's option schemas (checked and documented by
  # Tachyon.Options; the moduledoc of Tachyon.Table renders them) and the
  # checks across options.

  alias Tachyon.Options

  @open_schema [
    storage: [
      type: {:in, [:memory, :mapped, :file]},
      default: {:native, :table, :mode},
      formerly: [mode: nil],
      doc: "where values live: `:memory`, `:mapped` or `:file` (see \"Value storage\")."
    ],
    segment_size: [
      type: {:integer, 65_536, 1_073_741_824},
      default: {:native, :table, :segment_size},
      doc: "bytes of the largest segment files (see \"Disk use\")."
    ],
    initial_segment_size: [
      type: {:integer, 65_536, 1_073_741_824},
      default: {:native, :table, :initial_segment_size},
      doc: """
      bytes of the first segment of a new table (raised to hold the largest
      key and value); each next segment is twice the one before it, up to
      `:segment_size`. Set it to `:segment_size` for segments all of one
      size (see "Disk use").
      """
    ],
    max_key_size: [
      type: {:integer, 1, :infinity},
      default: {:native, :table, :max_key_size},
      doc: "bytes. Larger keys get `{:error, :too_large}`."
    ],
    max_value_size: [
      type: {:integer, 0, :infinity},
      default: {:native, :table, :max_value_size},
      doc: "bytes. Key and value must fit a segment."
    ],
    sync_interval_ms: [
      type: :interval,
      default: {:native, :table, :sync_interval_ms},
      doc: "periodic `sync/1` from the background thread, in milliseconds (`nil`: never)."
    ],
    compaction_threshold: [
      type: {:number, 0, 1},
      default: {:native, :table, :compaction_threshold},
      doc: "live ratio under which a sealed segment is rewritten."
    ],
    compaction_interval_ms: [
      type: :interval,
      default: {:native, :table, :compaction_interval_ms},
      doc: "how often to look for compaction work, in milliseconds (`nil`: only on `compact/1`)."
    ],
    capacity: [
      type: {:integer, 0, :infinity},
      default: {:native, :table, :capacity},
      doc: "expected number of keys, to size the index up front."
    ],
    shards: [
      type: {:integer, 1, 65_536},
      default: {:native, :table, :shards},
      doc: "index shards."
    ],
    pretouch: [
      type: :boolean,
      default: {:native, :table, :pretouch},
      doc: """
      a background thread faults the active segment's pages in ahead of the
      writer and prepares the next segments.
      """
    ],
    prepared_segments: [
      type: {:integer, 0, 16},
      default: {:native, :table, :prepared_segments},
      doc: """
      with `:pretouch`, the most next segments kept ready (created,
      allocated, faulted in whole): one from the `open` on, one more after
      each roll, up to this many. A writer faster than the kernel can fault
      in fresh pages then waits in no page fault. Each one is preallocated
      disk space, up to `:segment_size` (see "Disk use").
      """
    ]
  ]

  @server_schema [
    name: [
      type: :atom,
      default: nil,
      doc: "`start_link/1`: register the table under this atom (optional)."
    ],
    path: [type: :path, required: true, doc: "`start_link/1`: the directory."],
    stats_interval_ms: [
      type: :interval,
      default: 1000,
      formerly: [stats_interval: nil],
      doc:
        "`start_link/1`: milliseconds between `[:tachyon, :table, :stats]` events (`nil`: none)."
    ]
  ]

  @doc "The options of `Tachyon.Table.open/2`."
  def open_schema, do: @open_schema

  @doc "The options only `Tachyon.Table.start_link/1` takes."
  def server_schema, do: @server_schema

  @doc "The keys of `server_schema/0` (deprecated names included)."
  def server_keys,
    do: Keyword.keys(@server_schema) ++ Keyword.keys(Options.renames(@server_schema))

  @doc "Validates the `start_link/1`-only options."
  def validate_server!(opts), do: Options.validate!(opts, @server_schema, "Tachyon.Table")

  @doc "Validates the open options and fills in defaults."
  def validate!(opts) do
    opts = Options.validate!(opts, @open_schema, "Tachyon.Table")

    # segment header + record header + entry header
    if opts[:max_key_size] + opts[:max_value_size] + 57 > opts[:segment_size] do
      raise ArgumentError,
            "the :max_key_size and :max_value_size options must fit in a segment " <>
              "(:segment_size #{opts[:segment_size]}), got: #{opts[:max_key_size]} and #{opts[:max_value_size]}"
    end

    Keyword.update!(opts, :compaction_threshold, &(&1 * 1.0))
  end
end

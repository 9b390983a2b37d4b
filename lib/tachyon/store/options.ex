defmodule Tachyon.Store.Options do
  @moduledoc false
  # Tachyon.Store's option schemas (checked and documented by
  # Tachyon.Options; the moduledoc of Tachyon.Store renders them) and the
  # checks across options.

  alias Tachyon.Options

  @open_schema [
    access: [
      type: {:in, [:write, :read]},
      default: {:native, :store, :mode},
      formerly: [mode: nil],
      doc: """
      `:write` (one writer per directory, enforced with a lock file) or
      `:read` (a reader, possibly in another OS process, that sees every
      message whose append has returned while the writer keeps writing).
      """
    ],
    segment_size: [
      type: {:multiple_of, 8, 65_536, 3 * 1024 * 1024 * 1024},
      default: {:native, :store, :segment_size},
      doc: """
      data bytes of the largest segment files (see "Disk use"). A segment
      also rolls when its index (one slot per 64 bytes of data) is full.
      """
    ],
    initial_segment_size: [
      type: {:multiple_of, 8, 65_536, 3 * 1024 * 1024 * 1024},
      default: {:native, :store, :initial_segment_size},
      doc: """
      data bytes of the first segment of a new log (raised to hold a
      message of `:max_message_size`); each next segment is twice the one
      before it, up to `:segment_size`. Set it to `:segment_size` for
      segments all of one size (see "Disk use").
      """
    ],
    max_message_size: [
      type: {:or, [nil, {:integer, 0, :infinity}]},
      default: nil,
      default_doc: "the Rust default, or the segment size less 8 bytes if smaller",
      doc: "larger messages get `{:error, :too_large}`."
    ],
    max_segments: [
      type: {:or, [nil, {:integer, 1, :infinity}]},
      default: {:native, :store, :max_segments},
      doc:
        "keep at most this many segments; the oldest are deleted when the writer rolls (`nil`: keep all)."
    ],
    retention: [
      type: Options.retention_type(),
      default: [],
      default_doc: "`[]` (keep everything)",
      formerly: [max_bytes: &__MODULE__.max_bytes_retention/1],
      doc: """
      `[max_bytes: n, max_age_ms: n]`: whole segments are deleted, the
      oldest first and never the active one, while the segment files take
      more than `:max_bytes` bytes, or once a segment was sealed (the next
      one started) more than `:max_age_ms` milliseconds ago; each `nil` or
      absent: no limit. A read below the first index kept is
      `{:error, {:trimmed, first}}`. See "Retention".
      """
    ],
    pretouch: [
      type: :boolean,
      default: {:native, :store, :pretouch},
      doc:
        "run the pre-touch thread that faults pages in ahead of the writer and prepares the next segment."
    ],
    pretouch_ahead: [
      type: {:integer, 0, :infinity},
      default: {:native, :store, :pretouch_ahead},
      doc: "bytes faulted in ahead of the write position (in a segment not prepared whole)."
    ],
    prepared_segments: [
      type: {:integer, 0, 16},
      default: {:native, :store, :prepared_segments},
      doc: """
      the most next segments the pre-touch thread keeps ready (created,
      allocated, faulted in whole): one from the `open` on, one more after
      each roll, up to this many. An appender faster than the kernel can
      fault in fresh pages then waits in no page fault. Each one is
      preallocated disk space, up to `:segment_size` (see "Disk use").
      """
    ],
    repair: [
      type: :boolean,
      default: {:native, :store, :repair},
      doc: """
      on a checksum mismatch in the middle of the log, cut the log there
      (the records after it are lost, and counted in `recovery/1`) instead
      of failing with `{:error, :corrupt}` (which logs what a repair would
      cut).
      """
    ],
    verify: [
      type: {:in, [:active, :all]},
      default: {:native, :store, :verify},
      doc:
        "`:active` checks every record of the active segment on open; `:all` checks every segment."
    ]
  ]

  @server_schema [
    name: [
      type: :atom,
      required: true,
      doc: "`start_link/1`: the atom to register the store under."
    ],
    path: [type: :path, required: true, doc: "the directory (created if needed)."],
    stats_interval_ms: [
      type: :interval,
      default: 1000,
      formerly: [stats_interval: nil],
      doc: """
      `start_link/1`: milliseconds between `[:tachyon, :store, :stats]`
      events and roll event flushes (`nil`: none).
      """
    ]
  ]

  @doc "`max_bytes: n` (deprecated) as `:retention`."
  def max_bytes_retention(n), do: [max_bytes: n]

  @doc "The options of `Tachyon.Store.open/2`."
  def open_schema, do: @open_schema

  @doc "The options only `Tachyon.Store.start_link/1` takes."
  def server_schema, do: @server_schema

  @doc "The keys of `server_schema/0` (deprecated names included)."
  def server_keys,
    do: Keyword.keys(@server_schema) ++ Keyword.keys(Options.renames(@server_schema))

  @doc "Validates the `start_link/1`-only options."
  def validate_server!(opts), do: Options.validate!(opts, @server_schema, "Tachyon.Store")

  @doc "Validates the open options (Tachyon.AsyncStore uses it too) and fills in defaults."
  def validate!(opts) do
    opts = Options.validate!(opts, @open_schema, "Tachyon.Store")
    seg = opts[:segment_size]

    opts =
      if opts[:max_message_size] == nil,
        do:
          Keyword.put(
            opts,
            :max_message_size,
            min(Options.native_default(:store, :max_message_size), seg - 8)
          ),
        else: opts

    if opts[:max_message_size] + 8 > seg do
      raise ArgumentError,
            "the :max_message_size option (#{opts[:max_message_size]}) must fit in a segment " <>
              "(:segment_size #{seg} minus 8 bytes of header)"
    end

    opts
  end
end

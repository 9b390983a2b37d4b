defmodule Tachyon.Native do
  @moduledoc false
  # The NIF stubs. Every function here is replaced by the Rust implementation
  # in native/tachyon_nif when the library loads; the Elixir bodies only run if
  # it failed to load.

  @on_load :load_nif

  def load_nif do
    path = :filename.join(:code.priv_dir(:tachyon), ~c"native/libtachyon_nif")

    case :erlang.load_nif(path, 0) do
      :ok -> :ok
      {:error, {:reload, _}} -> :ok
      {:error, reason} -> {:error, reason}
    end
  end

  defp err, do: :erlang.nif_error(:nif_not_loaded)

  # The shared runtime
  def runtime_info, do: err()

  # Every part's Rust Config::default() (native/tachyon_nif/src/defaults.rs)
  def defaults, do: err()

  # The shared segment layer (native/tachyon_nif/src/segment.rs)
  def segment_shortfall(_path), do: err()

  # Histograms (benchmarks)
  def hist_new, do: err()
  def hist_record(_h, _ns), do: err()
  def hist_merge(_into, _from), do: err()
  def hist_count(_h), do: err()
  def hist_report(_h), do: err()
  def bench_noop(_a, _b), do: err()
  def bench_noop_store(_s, _b), do: err()
  def bench_hiccup(_ms), do: err()
  def hist_count_above(_h, _ns), do: err()

  # Tachyon.Store
  def store_open(_path, _opts), do: err()
  def store_append(_s, _data), do: err()
  def store_append_many(_s, _list), do: err()
  def store_append_many_dirty(_s, _list), do: err()
  def store_read(_s, _index), do: err()
  def store_read_many(_s, _from, _max_count, _max_bytes), do: err()
  def store_indices(_s), do: err()
  def store_sync(_s), do: err()
  def store_close(_s), do: err()
  def store_stats(_s), do: err()
  def store_take_events(_s), do: err()
  def store_bench_native(_s, _count, _warmup, _size), do: err()

  # Tachyon.AsyncStore
  def async_open(_store, _opts, _report_to, _id, _owner, _owns_store), do: err()
  def async_append(_a, _data), do: err()
  def async_flush(_a, _timeout_ms), do: err()
  def async_drain(_a, _timeout_ms), do: err()
  def async_close(_a), do: err()
  def async_stats(_a), do: err()
  def async_pause(_a, _paused), do: err()
  def async_bench_native(_a, _count, _warmup, _size), do: err()
  def async_default_wait, do: err()

  # Tachyon.Echo, Tachyon.UDP and the UDP ping client (native/tachyon_nif/src/udp.rs)
  def echo_start(_opts), do: err()
  def echo_stop(_echo), do: err()
  def echo_stats(_echo), do: err()
  def udp_ping(_opts), do: err()
  def bench_relay_throughput(_opts), do: err()
  def bench_fsync_floor(_opts), do: err()
  def bench_bus_datagram_size(_size, _per), do: err()
  def udp_open(_opts, _owner), do: err()
  def udp_send(_socket, _ip, _port, _data), do: err()
  def udp_send_connected(_socket, _data), do: err()
  def udp_connect(_socket, _ip, _port), do: err()
  def udp_controlling_process(_socket, _pid), do: err()
  def udp_close(_socket), do: err()
  def udp_stats(_socket), do: err()
  def udp_sockname(_socket), do: err()
  def udp_ack(_socket, _n), do: err()
  def udp_owner(_socket), do: err()
  def udp_recv(_socket, _max, _polled_ns), do: err()
  def udp_select(_socket), do: err()
  def seq_start(_opts), do: err()
  def seq_stop(_ref), do: err()
  def seq_stats(_ref), do: err()
  def seq_set_keys(_ref, _text), do: err()
  def seq_takeover(_ref), do: err()
  def seq_witness_down(_ref, _id), do: err()
  def seq_report_to(_ref, _pid), do: err()
  def seq_change(_ref, _change, _timeout_ms), do: err()
  def seq_membership(_ref), do: err()
  def bus_open(_opts, _owner), do: err()
  def bus_publish(_bus, _data), do: err()
  def bus_publish_many(_bus, _list), do: err()
  def bus_publish_snapshot(_bus, _as_of, _state, _timeout_ms), do: err()
  def bus_recv(_bus, _max, _polled_ns), do: err()
  def bus_select(_bus), do: err()
  def bus_close(_bus), do: err()
  def bus_drain_close(_bus, _timeout_ms), do: err()
  def bus_stats(_bus), do: err()
  def bus_set_keys(_bus, _text), do: err()
  def auth_keys(_op, _text, _id), do: err()
  def bus_ack(_bus, _n), do: err()
  def bus_subscribe(_bus, _pid), do: err()
  def bus_unsubscribe(_bus, _pid), do: err()
  def bench_seq_native(_opts), do: err()

  # Tachyon.Table (native/tachyon_nif/src/table.rs)
  def table_open(_path, _opts), do: err()
  def table_put(_t, _key, _value), do: err()
  def table_get(_t, _key), do: err()
  def table_delete(_t, _key), do: err()
  def table_put_many(_t, _pairs), do: err()
  def table_put_many_dirty(_t, _pairs), do: err()
  def table_count(_t), do: err()
  def table_sync(_t), do: err()
  def table_compact(_t), do: err()
  def table_stats(_t), do: err()
  def table_take_events(_t), do: err()
  def table_close(_t), do: err()
  def table_snapshot(_t), do: err()
  def table_snapshot_next(_snap, _n), do: err()
end

defmodule TachyonTest do
  use ExUnit.Case, async: true
  doctest Tachyon

  test "the NIF library is loaded" do
    assert is_reference(Tachyon.Native.hist_new())
  end
end

defmodule Tachyon.ApplicationTest do
  # Restarts the :tachyon application: not async.
  use ExUnit.Case, async: false

  test "the application starts the configured stores" do
    dir = Tachyon.TestHelpers.tmp_dir("app-config")
    name = :"app_store_#{System.unique_integer([:positive])}"
    async = :"app_async_#{System.unique_integer([:positive])}"
    Application.put_env(:tachyon, :stores, [[name: name, path: dir, segment_size: 65_536]])
    Application.put_env(:tachyon, :async_stores, [[name: async, store: name, wait: :park]])

    on_exit(fn ->
      Application.put_env(:tachyon, :stores, [])
      Application.put_env(:tachyon, :async_stores, [])
      Application.stop(:tachyon)
      Application.ensure_all_started(:tachyon)
    end)

    :ok = Application.stop(:tachyon)
    {:ok, _} = Application.ensure_all_started(:tachyon)
    assert {:ok, 0} = Tachyon.AsyncStore.append(async, "configured")
    assert {:ok, 0} = Tachyon.AsyncStore.flush(async)
    assert {:ok, "configured"} = Tachyon.Store.read(name, 0)
    :ok = Application.stop(:tachyon)
    assert {:error, :noproc} = Tachyon.Store.append(name, "gone")
  end
end

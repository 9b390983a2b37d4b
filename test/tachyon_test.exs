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
    Application.put_env(:tachyon, :stores, [[name: name, path: dir, segment_size: 65_536]])

    on_exit(fn ->
      Application.put_env(:tachyon, :stores, [])
      Application.stop(:tachyon)
      Application.ensure_all_started(:tachyon)
    end)

    :ok = Application.stop(:tachyon)
    {:ok, _} = Application.ensure_all_started(:tachyon)
    assert {:ok, 0} = Tachyon.Store.append(name, "configured")
    :ok = Application.stop(:tachyon)
    assert {:error, :noproc} = Tachyon.Store.append(name, "gone")
  end
end

defmodule Tachyon.Bench.Store do
  @moduledoc false
  def run(_argv), do: :ok
end

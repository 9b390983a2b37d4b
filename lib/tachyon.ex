defmodule Tachyon do
  @moduledoc """
  Tachyon: low-latency messaging and storage for the BEAM.
  """
end

defmodule OrderBook.MixProject do
  use Mix.Project

  def project do
    [
      app: :order_book,
      version: "0.1.0",
      elixir: "~> 1.14",
      deps: [{:tachyon, path: "../.."}]
    ]
  end

  def application do
    [extra_applications: [:logger], mod: {OrderBook.Application, []}]
  end
end

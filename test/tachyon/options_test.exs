defmodule Tachyon.OptionsTest do
  use ExUnit.Case, async: true

  alias Tachyon.Options

  @schema [
    size: [type: {:integer, 1, 10}, default: 5, doc: "how big."],
    mode: [type: {:in, [:a, :b]}, required: true, doc: "which one."],
    every: [type: :interval, default: nil, doc: "how often."],
    wait: [type: :wait, default: :park, doc: "how to wait."]
  ]

  test "check_keys!/3: the keys of several schemas, a misspelling named with the closest of all" do
    other = [path: [type: :path, required: true], interval_ms: [formerly: [interval: nil]]]
    assert Options.check_keys!([mode: :a, path: "/x", interval: 5], [@schema, other], "T") == :ok

    assert_raise ArgumentError,
                 "unknown T option(s) [:pth] (did you mean :path?); the options are " <>
                   "[:size, :mode, :every, :wait, :path, :interval_ms]",
                 fn -> Options.check_keys!([mode: :a, pth: "/x"], [@schema, other], "T") end

    # validate!/3 checks its one schema so, before any required key.
    assert_raise ArgumentError, ~r/\[:mdoe\] \(did you mean :mode\?\)/, fn ->
      Options.validate!([mdoe: :a], @schema, "T")
    end

    assert_raise ArgumentError, ~r/must be a keyword list/, fn ->
      Options.check_keys!([:mode], [@schema], "T")
    end
  end

  test "a function an option's doc names is a documented function of its arity" do
    alias Tachyon.Sequencer.Options, as: S

    parts = [
      {Tachyon.Bus, S.bus_schema() ++ S.bus_server_schema()},
      {Tachyon.Sequencer, S.sequencer_schema()},
      {Tachyon.Store,
       Tachyon.Store.Options.open_schema() ++ Tachyon.Store.Options.server_schema()},
      {Tachyon.Table,
       Tachyon.Table.Options.open_schema() ++ Tachyon.Table.Options.server_schema()},
      {Tachyon.AsyncStore, Tachyon.AsyncStore.Options.schema()},
      {Tachyon.UDP, Tachyon.UDP.Options.udp_schema()},
      {Tachyon.Echo, Tachyon.UDP.Options.echo_schema()},
      {Tachyon.StateMachine, Tachyon.StateMachine.Runner.schema()}
    ]

    # (`publish_snapshot/3` exists too, by its default argument: only the
    # documented arity counts.)
    documented = fn mod ->
      {:docs_v1, _, _, _, _, _, docs} = Code.fetch_docs(mod)

      for {{kind, name, arity}, _, _, _, _} <- docs,
          kind in [:function, :macro],
          do: {name, arity}
    end

    refs =
      for {part, schema} <- parts,
          {key, spec} <- schema,
          [ref, mod, fun, arity] <-
            Regex.scan(~r/`((?:[A-Z]\w*\.)*)([a-z_]\w*[?!]?)\/(\d+)`/, spec[:doc] || "") do
        mod = if mod == "", do: part, else: Module.concat([String.trim_trailing(mod, ".")])
        {part, key, ref, mod, {String.to_atom(fun), String.to_integer(arity)}}
      end

    assert Enum.any?(refs, &match?({Tachyon.Bus, :from, _, _, _}, &1))

    for {part, key, ref, mod, fa} <- refs,
        do: assert(fa in documented.(mod), "#{inspect(part)} #{inspect(key)}: #{ref}")
  end

  test "fills defaults in schema order and keeps given values" do
    assert Options.validate!([mode: :b], @schema, "T") ==
             [size: 5, mode: :b, every: nil, wait: :park]

    assert Options.validate!([every: 10, mode: :a, size: 1], @schema, "T") ==
             [size: 1, mode: :a, every: 10, wait: :park]
  end

  test "errors name the key and the bad value" do
    assert_raise ArgumentError, "the :size option must be an integer in 1..10, got: 11", fn ->
      Options.validate!([mode: :a, size: 11], @schema, "T")
    end

    assert_raise ArgumentError, ~r/unknown T option\(s\) \[:colour\]/, fn ->
      Options.validate!([mode: :a, colour: :red], @schema, "T")
    end

    assert_raise ArgumentError, ~r/the :mode option is required for T/, fn ->
      Options.validate!([], @schema, "T")
    end

    assert_raise ArgumentError, ~r/:every option must be nil or an integer in 1..86400000/, fn ->
      Options.validate!([mode: :a, every: 86_400_001], @schema, "T")
    end

    assert_raise ArgumentError, ~r/must be a keyword list/, fn ->
      Options.validate!(:nope, @schema, "T")
    end

    assert_raise ArgumentError, ~r/use wait: :park/, fn ->
      Options.validate!([mode: :a, wait: :block], @schema, "T")
    end
  end

  test "timeouts are bounded" do
    assert Options.timeout!(:infinity) == 4_294_967_295
    assert Options.timeout!(0) == 0
    assert_raise ArgumentError, fn -> Options.timeout!(4_294_967_296) end
    assert_raise ArgumentError, fn -> Options.timeout!(-1) end
  end

  test "docs render a markdown list from the schema" do
    docs = Options.docs(@schema)
    assert docs =~ "  * `:size` - how big. Default: `5`."
    assert docs =~ "  * `:mode` - which one. Required."
    assert docs =~ "  * `:every` - how often. Default: `nil`."
  end

  test "the moduledocs carry the generated option lists" do
    {:docs_v1, _, _, _, %{"en" => doc}, _, _} = Code.fetch_docs(Tachyon.Table)
    assert doc =~ "* `:stats_interval_ms` - `start_link/1`: milliseconds"
  end
end

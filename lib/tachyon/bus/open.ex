defmodule Tachyon.Bus.Open do
  @moduledoc false
  # Joining the bus for Tachyon.Bus (open/1, start_link/1) and
  # Tachyon.StateMachine: the options checked, the owner and the
  # sequencer's addresses resolved, the options put as the NIF names them.

  alias Tachyon.Bus.Owner
  alias Tachyon.Native
  alias Tachyon.Sequencer.Options

  @doc """
  The member and what the NIF answered (Tachyon.Bus.Server keeps it).
  `who`: the owner (monitored: its exit closes the member), whether it
  gets the messages, more receivers, and who is told of messages
  delivered to nobody; nil for `open/1`: the owner (`:owner`, or the
  caller) gets them.
  """
  def open_info(opts, who \\ nil) do
    o = opts |> Tachyon.Options.validate!(Options.bus_schema(), "Tachyon.Bus") |> Map.new()

    with {:ok, who} <- Owner.who(who, o.owner),
         {:ok, sequencer} <- Owner.sequencer_addresses(o.sequencer) do
      # Without keys, a loopback member only (its socket binds loopback
      # for a loopback sequencer, any address otherwise).
      {seq_ip, _} = hd(sequencer)
      bind = o.ip || if(Tachyon.Auth.loopback?(seq_ip), do: seq_ip, else: {0, 0, 0, 0})
      Tachyon.Auth.require!(o.auth, bind, "Tachyon.Bus")
      open_nif(%{o | sequencer: sequencer}, who)
    end
  end

  defp open_nif(o, who) do
    nif =
      o
      |> Map.drop([
        :owner,
        :delivery,
        :spin_us,
        :max_datagram_size,
        :resend_after_ms,
        :retransmit_after_us,
        :hello_after_ms,
        :connect_timeout_ms
      ])
      |> Map.merge(%{
        sequencer: hd(o.sequencer),
        alternates: tl(o.sequencer),
        from: if(o.from in [:live, :snapshot], do: nil, else: o.from),
        from_snapshot: o.from == :snapshot,
        # The NIF's names: `mode`, times in microseconds.
        mode: o.delivery,
        max_datagram: o.max_datagram_size,
        spin_us: o.spin_us,
        resend_after_us: o.resend_after_ms * 1000,
        retransmit_after_us: o.retransmit_after_us,
        hello_after_us: o.hello_after_ms * 1000,
        connect_timeout_us: o.connect_timeout_ms * 1000,
        auth: Tachyon.Auth.native!(o.auth, "Tachyon.Bus"),
        max_queue: if(o.max_queue == :infinity, do: nil, else: o.max_queue),
        events: Process.whereis(Tachyon.Bus.Events),
        loss: o.loss / 1,
        owner_receives: who.owner_receives,
        receivers: who.receivers,
        report: who.report
      })

    case Native.bus_open(nif, who.owner) do
      {:ok, _bus, _info} = ok ->
        ok

      {:error, _} = error ->
        Tachyon.Error.report(error, Tachyon.Bus,
          name: Map.get(who, :name),
          target: hd(o.sequencer),
          action: :join
        )
    end
  end
end

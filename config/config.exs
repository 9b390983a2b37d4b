import Config

# Parts started by Tachyon.Application at boot (none by default), e.g.
#
#     config :tachyon,
#       stores: [[name: :events_log, path: "/var/lib/app/events"]],
#       async_stores: [[name: :events, store: :events_log]]
#
config :tachyon, stores: [], async_stores: []

import_config "#{config_env()}.exs"

import Config

# Stores started by Tachyon.Application at boot, e.g.
#
#     config :tachyon, stores: [[name: :events, path: "/var/lib/app/events"]]
#
config :tachyon, stores: []

import_config "#{config_env()}.exs"

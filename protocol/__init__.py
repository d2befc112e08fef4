"""embedtext.protocol: the wire format (proto, generated code, byte codec, error table).

A leaf: imports nothing else of embedtext's.
"""

PROTOCOL_VERSION = "embedtext.v1"

# Where a server listens and clients look by default (loopback: anything wider needs TLS and a token).
DEFAULT_PORT = 50051
DEFAULT_TARGET = f"127.0.0.1:{DEFAULT_PORT}"
# The gRPC message limit both ways, on both ends: 2048 rows x 1024 float32 dims and more.
DEFAULT_MAX_MESSAGE_BYTES = 64 * 1024 * 1024
# Clients ping an idle connection this often while a call waits (a bulk call may wait minutes in
# the queue); servers accept pings this often, or they would close the connection (too_many_pings).
KEEPALIVE_MS = 30_000

# Requests that name no latency class are interactive up to this many rows, bulk above it
# (a search's query text is one row; a scan's chunk is thousands).
INTERACTIVE_MAX_ROWS = 32

# The trailer of a RESOURCE_EXHAUSTED reply that says when to retry (gRPC's own name for it).
RETRY_PUSHBACK_KEY = "grpc-retry-pushback-ms"

# What a server prints on its standard output once it serves (its first engine per model is up),
# and once every engine it starts is (on a CPU the rest start behind the first): a local parent
# (LocalServer) waits for these lines.
READY_LINE = "embedtext: ready"
EVERY_ENGINE_UP_LINE = "embedtext: every engine up"

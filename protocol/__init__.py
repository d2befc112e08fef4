"""embedtext.protocol: the wire format (proto, generated code, byte codec, error table).

A leaf: imports nothing else of embedtext's.
"""

PROTOCOL_VERSION = "embedtext.v1"

# Requests that name no latency class are interactive up to this many rows, bulk above it
# (a search's query text is one row; a scan's chunk is thousands).
INTERACTIVE_MAX_ROWS = 32

# The trailer of a RESOURCE_EXHAUSTED reply that says when to retry (gRPC's own name for it).
RETRY_PUSHBACK_KEY = "grpc-retry-pushback-ms"

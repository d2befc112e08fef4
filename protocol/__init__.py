"""embedtext.protocol: the wire format (proto, generated code, byte codec, error table), and the
settings both clients share (client_shared.json: the Python client reads it here, the DuckDB
extension when it is built, udf/extension/build.rs).

A leaf: imports nothing else of embedtext's.
"""

import json
from pathlib import Path

PROTOCOL_VERSION = "embedtext.v1"

_SHARED = json.loads(Path(__file__).with_name("client_shared.json").read_text())

# Where a server listens and clients look by default (loopback: anything wider needs TLS and a token).
DEFAULT_PORT: int = _SHARED["default_port"]
DEFAULT_TARGET = f"{_SHARED['default_host']}:{DEFAULT_PORT}"
# The gRPC message limit both ways, on both ends: 2048 rows x 1024 float32 dims and more.
DEFAULT_MAX_MESSAGE_BYTES: int = _SHARED["max_message_bytes"]
# Text bytes in one request at most, past its first row: well under the message limit however
# long the texts are.
REQUEST_TEXT_BYTES: int = _SHARED["request_text_bytes"]
# Text bytes in one Split request at most: a reply holds 12 bytes per chunk, and a chunk of one
# token may be one byte of text, so the largest possible reply stays within the message limit.
SPLIT_TEXT_BYTES: int = _SHARED["split_text_bytes"]
# Clients ping an idle connection this often while a call waits (a bulk call may wait minutes in
# the queue); servers accept pings this often, or they would close the connection (too_many_pings).
KEEPALIVE_MS = 30_000

# Requests that name no latency class are interactive up to this many rows, bulk above it
# (a search's query text is one row; a scan's chunk is thousands).
INTERACTIVE_MAX_ROWS: int = _SHARED["interactive_max_rows"]

# The trailer of a RESOURCE_EXHAUSTED reply that says when to retry (gRPC's own name for it).
RETRY_PUSHBACK_KEY: str = _SHARED["retry_pushback_key"]
# A busy server's retries: jittered backoff from this base, doubling up to the most.
BACKOFF_BASE_S: float = _SHARED["backoff_base_s"]
BACKOFF_MAX_S: float = _SHARED["backoff_max_s"]
# After UNAVAILABLE, how long a retry waits for a server to come back, trying to connect this often.
RECONNECT_WAIT_S: float = _SHARED["reconnect_wait_s"]
RECONNECT_POLL_S: float = _SHARED["reconnect_poll_s"]
# The SQL function's client: rows per request, requests in flight, and its deadline (a query may
# wait behind other work).
UDF_BATCH_ROWS: int = _SHARED["udf_batch_rows"]
UDF_IN_FLIGHT: int = _SHARED["udf_in_flight"]
UDF_TIMEOUT_S: float = _SHARED["udf_timeout_s"]

# What a server prints on its standard output once it serves (its first engine per model is up),
# and once every engine it starts is (on a CPU the rest start behind the first): a local parent
# (LocalServer) waits for these lines.
READY_LINE = "embedtext: ready"
EVERY_ENGINE_UP_LINE = "embedtext: every engine up"

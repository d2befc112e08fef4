"""embedtext.protocol: the wire format (proto, generated code, byte codec, error table).

A leaf: imports nothing else of embedtext's.
"""

PROTOCOL_VERSION = "embedtext.v1"

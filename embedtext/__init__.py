"""embedtext: table columns to embeddings, on a co-deployed vLLM gRPC server.

>>> import embedtext
>>> sorted(n for n in embedtext.__all__ if n.endswith("Client"))
['AsyncClient', 'Client']
"""

from __future__ import annotations

from typing import TYPE_CHECKING

__all__ = [
    "AsyncClient",
    "Client",
    "ClientConfig",
    "EmbedTextError",
    "ServerInfo",
    "TLSConfig",
    "register",
    "__version__",
]
__version__ = "0.1.0"

if TYPE_CHECKING:
    from embedtext.connectors.client import AsyncClient, Client, ServerInfo
    from embedtext.connectors.client_config import ClientConfig
    from embedtext.connectors.security import TLSConfig
    from embedtext.protocol.errors import EmbedTextError
    from embedtext.udf import register


def __getattr__(name: str):
    # Lazy, so `import embedtext` stays cheap and free of side effects.
    if name in ("AsyncClient", "Client", "ServerInfo"):
        from embedtext.connectors import client

        return getattr(client, name)
    if name == "ClientConfig":
        from embedtext.connectors.client_config import ClientConfig

        return ClientConfig
    if name == "TLSConfig":
        from embedtext.connectors.security import TLSConfig

        return TLSConfig
    if name == "register":
        from embedtext.udf import register

        return register
    if name == "EmbedTextError":
        from embedtext.protocol.errors import EmbedTextError

        return EmbedTextError
    raise AttributeError(f"module 'embedtext' has no attribute {name!r}")

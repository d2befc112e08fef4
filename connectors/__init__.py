"""embedtext.connectors: the Python clients (and, later, indexing jobs and Ray Data)."""

from embedtext.connectors.client import AsyncClient, Client, ModelInfo, ServerInfo

__all__ = ["AsyncClient", "Client", "ModelInfo", "ServerInfo"]

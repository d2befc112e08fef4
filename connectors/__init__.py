"""embedtext.connectors: the Python clients (and, later, indexing jobs and Ray Data)."""

from embedtext.connectors.client import AsyncClient, Client, ModelInfo, ServerInfo
from embedtext.connectors.client_config import ClientConfig

__all__ = ["AsyncClient", "Client", "ClientConfig", "ModelInfo", "ServerInfo"]

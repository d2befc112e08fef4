"""embedtext.server: the gRPC embedding service on vLLM.

Data path: servicer (proto <-> domain) -> runtime (per model) -> tokenization (thread pool)
-> batching (token budget or max delay) -> routing (least in-flight tokens) -> replicas
(supervised engines) -> engine (vLLM AsyncLLM). Importing this package starts nothing.
"""

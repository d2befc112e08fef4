"""embedtext.sql: SQL shipped with embedtext (macros and DDL in ``*.sql``), loaded by ``register``.

Imports neither duckdb nor grpc.
"""

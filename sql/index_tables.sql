-- The tables an indexing job keeps (`embedtext index`, embedtext.connectors.jobs). Create them
-- ahead of a job if you like (to grant access, say); the job creates them when they are missing.
-- {embeddings}, {failed}, {key_type} and {dim} are filled in by embedtext.sql.ddl.index_tables_ddl.

-- One row per source key: the vector of the text whose md5 is content_hash.
CREATE TABLE IF NOT EXISTS {embeddings} (
    key {key_type},
    content_hash VARCHAR,
    model VARCHAR,
    dimensions INTEGER,
    embedding FLOAT[{dim}],
    indexed_at TIMESTAMP
);

-- Rows the server refused, with the error and how often; retried by every run until they embed.
CREATE TABLE IF NOT EXISTS {failed} (
    key {key_type},
    content_hash VARCHAR,
    model VARCHAR,
    error VARCHAR,
    attempts INTEGER,
    failed_at TIMESTAMP
);

-- The table an indexing job keeps with --chunk-tokens (`embedtext index`, embedtext.connectors.jobs),
-- beside the failed-rows table of index_tables.sql. {embeddings}, {key_type} and {dim} are filled in
-- by embedtext.sql.ddl.index_tables_ddl(..., chunked=True).

-- One row per chunk of each source key's text, chunk_index 0, 1, ... in text order: its span of the
-- text (characters from 0, end exclusive), its text and its vector. content_hash is the whole text's.
CREATE TABLE IF NOT EXISTS {embeddings} (
    key {key_type},
    chunk_index INTEGER,
    content_hash VARCHAR,
    model VARCHAR,
    dimensions INTEGER,
    char_start INTEGER,
    char_end INTEGER,
    text VARCHAR,
    embedding FLOAT[{dim}],
    indexed_at TIMESTAMP
);

-- Macros registered next to {embed_text} by embedtext.register (DuckDB SQL).
-- {embed_text} is replaced by the registered function name.

-- Top k rows of a table by cosine similarity of its vector column to a query text.
--   SELECT * FROM {embed_text}_search('doc_vectors', 'v', 'how do I bake bread', k := 5);
CREATE OR REPLACE TEMP MACRO {embed_text}_search(tbl, vector_column, query, k := 10) AS TABLE
    SELECT *, array_cosine_similarity(COLUMNS(vector_column), {embed_text}(query)) AS score
    FROM query_table(tbl)
    ORDER BY score DESC
    LIMIT k;

-- Cosine similarity of two texts.
CREATE OR REPLACE TEMP MACRO {embed_text}_similarity(a, b) AS
    array_cosine_similarity({embed_text}(a), {embed_text}(b));

-- Macros registered next to {embed_text} by embedtext.register (DuckDB SQL).
-- {embed_text} is replaced by the registered function name.

-- Top k rows of a table by cosine similarity of its vector column to a query text, embedded as a
-- query ({embed_text}_query: with the model's query prompt, where it has one).
--   SELECT * FROM {embed_text}_search('doc_vectors', 'v', 'how do I bake bread', k := 5);
CREATE OR REPLACE TEMP MACRO {embed_text}_search(tbl, vector_column, query, k := 10) AS TABLE
    SELECT *, array_cosine_similarity(COLUMNS(vector_column), {embed_text}_query(query)) AS score
    FROM query_table(tbl)
    ORDER BY score DESC
    LIMIT k;

-- Cosine similarity of two texts, each embedded as a query (symmetric: the same prompt for both).
CREATE OR REPLACE TEMP MACRO {embed_text}_similarity(a, b) AS
    array_cosine_similarity({embed_text}_query(a), {embed_text}_query(b));

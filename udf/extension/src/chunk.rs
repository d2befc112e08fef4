//! One DuckDB chunk's rows -> its vectors, as the Python UDF does it (udf/chunk.py): NULL, empty
//! and whitespace-only texts give NULL without a call, a text repeated within the chunk is sent
//! once, and the distinct texts go out as requests of at most `BATCH_ROWS` rows, all in flight.

use std::time::Instant;

use futures::stream::{self, StreamExt, TryStreamExt};
use rustc_hash::FxHashMap;

use crate::client::{Client, EmbedError, EmbedOptions, Vectors};

/// Rows per request, and requests in flight per chunk: the Python UDF's client settings
/// (udf/registration.py UDF_CLIENT_CONFIG), so the server starts on the first while the rest are
/// on the wire.
pub const BATCH_ROWS: usize = 512;
pub const IN_FLIGHT: usize = 8;
/// Text bytes per request at most (connectors/requests.py): a request stays well under gRPC's
/// 64 MiB message limit however long a chunk's texts are.
pub const BATCH_TEXT_BYTES: usize = 16 * 1024 * 1024;

/// Which rows need which distinct text's vector.
#[derive(Debug, Default, PartialEq)]
pub struct ChunkPlan<'a> {
    /// The texts to embed, each once.
    pub distinct: Vec<&'a [u8]>,
    /// Per row: the index of its text in `distinct`, or None for a NULL result.
    pub slots: Vec<Option<u32>>,
}

pub fn plan<'a>(rows: impl ExactSizeIterator<Item = Option<&'a [u8]>>) -> ChunkPlan<'a> {
    // Fx: a fast hash for a chunk's own texts (no keys outlive the chunk).
    let mut seen: FxHashMap<&'a [u8], u32> = FxHashMap::with_capacity_and_hasher(rows.len(), Default::default());
    let mut out = ChunkPlan {
        distinct: Vec::with_capacity(rows.len()),
        slots: Vec::with_capacity(rows.len()),
    };
    for row in rows {
        let slot = row.filter(|text| !is_blank(text)).map(|text| {
            *seen.entry(text).or_insert_with(|| {
                out.distinct.push(text);
                (out.distinct.len() - 1) as u32
            })
        });
        out.slots.push(slot);
    }
    out
}

fn is_blank(text: &[u8]) -> bool {
    if text.first().is_some_and(|b| b.is_ascii_graphic()) {
        return false; // most texts: no need to decode them
    }
    match std::str::from_utf8(text) {
        Ok(s) => s.trim().is_empty(),
        Err(_) => false, // DuckDB's VARCHAR is UTF-8; anything else is the server's to refuse
    }
}

/// The requests of a chunk's texts: row ranges of at most `BATCH_ROWS` rows and, past one row,
/// `BATCH_TEXT_BYTES` bytes of text.
pub fn requests(texts: &[&[u8]]) -> Vec<std::ops::Range<usize>> {
    let mut out = Vec::with_capacity(texts.len().div_ceil(BATCH_ROWS));
    let mut start = 0;
    while start < texts.len() {
        let mut stop = start;
        let mut bytes = 0;
        while stop < texts.len() && stop - start < BATCH_ROWS {
            bytes += texts[stop].len();
            if bytes > BATCH_TEXT_BYTES && stop > start {
                break;
            }
            stop += 1;
        }
        out.push(start..stop);
        start = stop;
    }
    out
}

/// The vectors of a chunk's texts, one reply per request, in order.
pub struct ChunkVectors {
    replies: Vec<Vectors>,
    /// The first text of each reply.
    starts: Vec<usize>,
    pub dim: usize,
}

impl ChunkVectors {
    /// Distinct text `index`'s vector, as the little-endian float32 bytes the server sent, into `out`.
    pub fn copy_row(&self, index: usize, out: &mut [u8]) {
        let reply = self.starts.partition_point(|&start| start <= index) - 1;
        self.replies[reply].copy_row(index - self.starts[reply], out);
    }
}

pub async fn embed_all(
    client: &Client,
    texts: &[&[u8]],
    options: &EmbedOptions,
    dim: usize,
    deadline: Instant,
) -> Result<ChunkVectors, EmbedError> {
    let parts = requests(texts);
    let starts = parts.iter().map(|part| part.start).collect();
    let replies: Vec<Vectors> = stream::iter(parts)
        .map(|part| client.embed(&texts[part], options, deadline))
        .buffered(IN_FLIGHT)
        .try_collect()
        .await?;
    if let Some(reply) = replies.iter().find(|r| r.dim != dim) {
        return Err(EmbedError(format!(
            "embedtext: the server answered vectors of {} values where embed_text returns {dim}; \
             was the server restarted with another model?",
            reply.dim
        )));
    }
    Ok(ChunkVectors { replies, starts, dim })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nulls_blanks_and_repeats() {
        let rows: Vec<Option<&[u8]>> = vec![
            Some(b"a cat"),
            None,
            Some(b""),
            Some(b" \t\n"),
            Some(b"a dog"),
            Some(b"a cat"),
            Some("\u{3000}".as_bytes()), // ideographic space: whitespace too
        ];
        let p = plan(rows.into_iter());
        assert_eq!(p.distinct, vec![&b"a cat"[..], &b"a dog"[..]]);
        assert_eq!(p.slots, vec![Some(0), None, None, None, Some(1), Some(0), None]);
    }

    #[test]
    fn requests_split_by_rows_and_by_bytes() {
        let short = vec![&b"x"[..]; 1100];
        assert_eq!(requests(&short), vec![0..512, 512..1024, 1024..1100]);
        let long = vec![0u8; BATCH_TEXT_BYTES / 2 + 1];
        let texts = vec![&b"a"[..], &long[..], &long[..], &long[..], &b"b"[..]];
        assert_eq!(requests(&texts), vec![0..2, 2..3, 3..5]);
        let huge = vec![0u8; BATCH_TEXT_BYTES + 1]; // alone in its request: the server says what it makes of it
        assert_eq!(requests(&[&huge[..], &b"c"[..]]), vec![0..1, 1..2]);
        assert!(requests(&[]).is_empty());
    }

    #[test]
    fn all_distinct_keeps_row_order() {
        let rows: Vec<Option<&[u8]>> = vec![Some(b"x"), Some(b"y"), Some(b"z")];
        let p = plan(rows.into_iter());
        assert_eq!(p.slots, vec![Some(0), Some(1), Some(2)]);
    }
}

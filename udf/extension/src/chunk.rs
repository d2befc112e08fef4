//! One DuckDB chunk's rows -> its vectors, as the Python UDF does it (udf/chunk.py): NULL, empty
//! and whitespace-only texts give NULL without a call, a text repeated within the chunk is sent
//! once, and the distinct texts go out as requests of at most `BATCH_ROWS` rows, all in flight.

use std::time::Instant;

use futures::stream::{self, StreamExt, TryStreamExt};
use rustc_hash::FxHashMap;

use crate::client::{Chunking, Client, EmbedError, EmbedOptions, Vectors};
use crate::settings::OnError;

/// Text bytes per request at most: a request stays well under gRPC's message limit however long a
/// chunk's texts are.
pub use crate::shared::REQUEST_TEXT_BYTES as BATCH_TEXT_BYTES;
/// Text bytes per Split request at most: its reply (12 bytes a chunk) stays within the message limit.
pub use crate::shared::SPLIT_TEXT_BYTES;
/// Rows per request, and requests in flight per chunk: the Python UDF's client settings, so the
/// server starts on the first while the rest are on the wire.
pub use crate::shared::{UDF_BATCH_ROWS as BATCH_ROWS, UDF_IN_FLIGHT as IN_FLIGHT};

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
    requests_within(texts, BATCH_TEXT_BYTES)
}

/// Row ranges of at most `BATCH_ROWS` rows and, past one row, `max_bytes` bytes of text.
fn requests_within(texts: &[&[u8]], max_bytes: usize) -> Vec<std::ops::Range<usize>> {
    let mut out = Vec::with_capacity(texts.len().div_ceil(BATCH_ROWS));
    let mut start = 0;
    while start < texts.len() {
        let mut stop = start;
        let mut bytes = 0;
        while stop < texts.len() && stop - start < BATCH_ROWS {
            bytes += texts[stop].len();
            if bytes > max_bytes && stop > start {
                break;
            }
            stop += 1;
        }
        out.push(start..stop);
        start = stop;
    }
    out
}

/// The vectors of a chunk's texts, one reply per request (or per row, after a refused request),
/// in order; None where the server refused the row.
pub struct ChunkVectors {
    replies: Vec<Option<Vectors>>,
    /// The first text of each reply.
    starts: Vec<usize>,
    pub dim: usize,
}

impl ChunkVectors {
    /// Distinct text `index`'s reply, and its row in it; None where the server refused it.
    fn reply_of(&self, index: usize) -> Option<(&Vectors, usize)> {
        let reply = self.starts.partition_point(|&start| start <= index) - 1;
        self.replies[reply]
            .as_ref()
            .map(|vectors| (vectors, index - self.starts[reply]))
    }

    /// Distinct text `index`'s vector, as the little-endian float32 bytes the server sent, into
    /// `out`; false (nothing copied) where the server refused it.
    pub fn copy_row(&self, index: usize, out: &mut [u8]) -> bool {
        self.reply_of(index)
            .map(|(vectors, row)| vectors.copy_row(row, out))
            .is_some()
    }

    /// Whether distinct text `index` has a vector.
    pub fn has(&self, index: usize) -> bool {
        self.reply_of(index).is_some()
    }
}

pub async fn embed_all(
    client: &Client,
    texts: &[&[u8]],
    options: &EmbedOptions,
    dim: usize,
    deadline: Instant,
    on_error: OnError,
) -> Result<ChunkVectors, EmbedError> {
    let parts: Vec<Vec<(usize, Option<Vectors>)>> = stream::iter(requests(texts))
        .map(|part| embed_part(client, texts, part, options, deadline, on_error))
        .buffered(IN_FLIGHT)
        .try_collect()
        .await?;
    let (starts, replies): (Vec<usize>, Vec<Option<Vectors>>) = parts.into_iter().flatten().unzip();
    if let Some(reply) = replies.iter().flatten().find(|r| r.dim != dim) {
        return Err(EmbedError::new(format!(
            "embedtext: the server answered vectors of {} values where embed_text returns {dim}; \
             was the server restarted with another model?",
            reply.dim
        )));
    }
    Ok(ChunkVectors { replies, starts, dim })
}

/// One request's reply, as (its first text, its vectors). Where the server refuses the request and
/// refused rows give NULL, each of its rows alone, to find the ones it refuses (the Python UDF's
/// way too: connectors/refusals.py).
async fn embed_part(
    client: &Client,
    texts: &[&[u8]],
    part: std::ops::Range<usize>,
    options: &EmbedOptions,
    deadline: Instant,
    on_error: OnError,
) -> Result<Vec<(usize, Option<Vectors>)>, EmbedError> {
    match client.embed(&texts[part.clone()], options, deadline).await {
        Ok(vectors) => Ok(vec![(part.start, Some(vectors))]),
        Err(error) if error.refused() && on_error == OnError::Null => {
            let mut out = Vec::with_capacity(part.len());
            for row in part {
                match client.embed(&texts[row..row + 1], options, deadline).await {
                    Ok(vectors) => out.push((row, Some(vectors))),
                    Err(error) if error.refused() => out.push((row, None)),
                    Err(error) => return Err(error),
                }
            }
            Ok(out)
        }
        Err(error) => Err(error),
    }
}

/// One chunk of a text, as embed_text_chunks gives it: its place in its text, its span in code
/// points (end exclusive), the tokens of its text, and that text.
#[derive(Debug, PartialEq)]
pub struct TextChunk<'a> {
    pub index: i32,
    pub start: i32,
    pub end: i32,
    pub tokens: i32,
    pub text: &'a [u8],
}

/// The chunks of each of `texts`, cut by the server (Split) by the model's own tokens, in requests
/// of at most `BATCH_ROWS` texts and `SPLIT_TEXT_BYTES` bytes, all in flight.
pub async fn split_all<'a>(
    client: &Client,
    texts: &[&'a [u8]],
    chunking: Chunking,
    options: &EmbedOptions,
    deadline: Instant,
) -> Result<Vec<Vec<TextChunk<'a>>>, EmbedError> {
    let parts = requests_within(texts, SPLIT_TEXT_BYTES);
    let replies: Vec<_> = stream::iter(parts.iter().cloned())
        .map(|part| client.split(&texts[part], chunking, options, deadline))
        .buffered(IN_FLIGHT)
        .try_collect()
        .await?;
    let mut out = Vec::with_capacity(texts.len());
    for (part, reply) in parts.into_iter().zip(replies) {
        let counts = int32s(&reply.chunk_counts_i32le);
        let spans = int32s(&reply.spans_i32le);
        let tokens = int32s(&reply.token_counts_i32le);
        let chunks: usize = counts.iter().map(|&c| c.max(0) as usize).sum();
        if reply.count as usize != part.len()
            || counts.len() != part.len()
            || spans.len() != 2 * chunks
            || tokens.len() != chunks
        {
            return Err(EmbedError::new(format!(
                "embedtext: the server's Split reply does not match its request of {} texts",
                part.len()
            )));
        }
        let mut next = 0;
        for (row, &count) in part.zip(counts.iter()) {
            let text = texts[row];
            let boundaries = char_boundaries(text)?;
            let mut row_chunks = Vec::with_capacity(count as usize);
            for index in 0..count as usize {
                let (start, end) = (spans[2 * (next + index)], spans[2 * (next + index) + 1]);
                let bytes = |at: i32| boundaries.get(at as usize).copied();
                let (Some(from), Some(to)) = (bytes(start), bytes(end)) else {
                    return Err(EmbedError::new(format!(
                        "embedtext: the server's chunk {start}..{end} is outside its text of {} characters",
                        boundaries.len() - 1
                    )));
                };
                row_chunks.push(TextChunk {
                    index: index as i32,
                    start,
                    end,
                    tokens: tokens[next + index],
                    text: &text[from..to],
                });
            }
            next += count as usize;
            out.push(row_chunks);
        }
    }
    Ok(out)
}

fn int32s(bytes: &[u8]) -> Vec<i32> {
    bytes
        .chunks_exact(4)
        .map(|b| i32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect()
}

/// The byte offset of each code point of `text`, and its length last: code point `i` starts at
/// `boundaries[i]` (the server's spans count code points, as Python's str and DuckDB's substring).
fn char_boundaries(text: &[u8]) -> Result<Vec<usize>, EmbedError> {
    let text =
        std::str::from_utf8(text).map_err(|e| EmbedError::new(format!("embedtext: a text is not UTF-8: {e}")))?;
    Ok(text.char_indices().map(|(at, _)| at).chain([text.len()]).collect())
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
    fn code_point_spans_map_to_byte_ranges() {
        let text = "né 🐈 x".as_bytes();
        let b = char_boundaries(text).unwrap();
        assert_eq!(b, vec![0, 1, 3, 4, 8, 9, 10]);
        assert_eq!(&text[b[3]..b[4]], "🐈".as_bytes());
        assert!(char_boundaries(&[0xff]).is_err());
        assert_eq!(int32s(&[1, 0, 0, 0, 255, 255, 255, 255]), vec![1, -1]);
    }

    #[test]
    fn all_distinct_keeps_row_order() {
        let rows: Vec<Option<&[u8]>> = vec![Some(b"x"), Some(b"y"), Some(b"z")];
        let p = plan(rows.into_iter());
        assert_eq!(p.slots, vec![Some(0), Some(1), Some(2)]);
    }
}

//! The Embed call as one gRPC unary call on tonic's channel, with the reply's vectors left in the
//! HTTP/2 frames they arrived in. tonic's generated call first copies a whole reply into one
//! buffer; here the rows go from the frames straight into DuckDB's vector. With 1 MiB frames
//! (client.rs) that took a quarter off the DuckDB process's CPU per row against tonic's call, in
//! rotating rounds on the null engine; tonic's call only got slower with larger frames.

use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use http::header::{HeaderValue, CONTENT_TYPE, TE};
use http_body_util::BodyExt;
use prost::encoding::{encode_key, encode_varint, encoded_len_varint, key_len, WireType};
use prost::Message;
use tonic::body::Body;
use tonic::transport::Channel;
use tonic::{Code, Status};
use tower::ServiceExt;

use crate::proto;

const EMBED_PATH: &str = "/embedtext.v1.Embedding/Embed";
/// Field numbers (protocol/embedding.proto): `EmbedRequest.packed_texts`, `EmbedResponse.embeddings_f32le`.
const PACKED_TEXTS: u32 = 2;
const EMBEDDINGS_F32LE: u64 = 6;

/// Bytes that arrived as a list of frames, read as one sequence without joining them.
#[derive(Debug, Default)]
pub struct Frames {
    chunks: Vec<Bytes>,
    /// Where each chunk ends in the sequence.
    ends: Vec<usize>,
}

impl Frames {
    pub fn push(&mut self, chunk: Bytes) {
        if !chunk.is_empty() {
            self.ends.push(self.len() + chunk.len());
            self.chunks.push(chunk);
        }
    }

    pub fn len(&self) -> usize {
        self.ends.last().copied().unwrap_or(0)
    }

    /// Copy the bytes from `at` on into `out` (which the caller sized within the sequence).
    pub fn copy_to(&self, mut at: usize, out: &mut [u8]) {
        let mut chunk = self.ends.partition_point(|&end| end <= at);
        let mut done = 0;
        while done < out.len() {
            let start = self.ends[chunk] - self.chunks[chunk].len();
            let from = &self.chunks[chunk][at - start..];
            let n = from.len().min(out.len() - done);
            out[done..done + n].copy_from_slice(&from[..n]);
            done += n;
            at += n;
            chunk += 1;
        }
    }

    fn byte(&self, at: usize) -> u8 {
        let mut one = [0u8];
        self.copy_to(at, &mut one);
        one[0]
    }
}

/// A reply: its fields, and where its float32 vectors lie in the frames.
#[derive(Debug)]
pub struct EmbedReply {
    pub fields: proto::EmbedResponse,
    pub frames: Frames,
    pub vectors_at: usize,
    pub vectors_len: usize,
}

/// An Embed request as its gRPC body: `fields` (their `inputs` unset), then `texts` as
/// `packed_texts`, copied once from DuckDB's strings into the body (protobuf merges a message's
/// fields in the order they come, so the texts may follow the rest).
pub fn framed_request(fields: &proto::EmbedRequest, texts: &[&[u8]]) -> Bytes {
    let data_len: usize = texts.iter().map(|t| t.len()).sum();
    let offsets_len = (texts.len() + 1) * 4;
    let bytes_field_len = |len: usize| key_len(1) + encoded_len_varint(len as u64) + len;
    let packed_len = bytes_field_len(data_len) + bytes_field_len(offsets_len);
    let length = fields.encoded_len() + bytes_field_len(packed_len);
    let mut body = BytesMut::with_capacity(5 + length);
    body.put_u8(0); // not compressed
    body.put_u32(length as u32);
    fields.encode(&mut body).expect("the buffer holds the message");
    encode_key(PACKED_TEXTS, WireType::LengthDelimited, &mut body);
    encode_varint(packed_len as u64, &mut body);
    encode_key(1, WireType::LengthDelimited, &mut body); // PackedTexts.data_utf8
    encode_varint(data_len as u64, &mut body);
    for text in texts {
        body.put_slice(text);
    }
    encode_key(2, WireType::LengthDelimited, &mut body); // PackedTexts.offsets_i32le
    encode_varint(offsets_len as u64, &mut body);
    let mut offset = 0i32;
    body.put_i32_le(0);
    for text in texts {
        offset += text.len() as i32;
        body.put_i32_le(offset);
    }
    debug_assert_eq!(body.len(), 5 + length);
    body.freeze()
}

/// One Embed call with a body from `framed_request`. `timeout` goes to the server as
/// `grpc-timeout`; the caller bounds the wait. A reply over `max_bytes` is refused, as tonic
/// refuses one over its decoding limit.
pub async fn embed(
    channel: Channel,
    body: Bytes,
    timeout: Duration,
    authorization: Option<&HeaderValue>,
    max_bytes: usize,
) -> Result<EmbedReply, Status> {
    let mut request = http::Request::builder()
        .method(http::Method::POST)
        .uri(EMBED_PATH) // the channel adds the server's scheme and authority
        .version(http::Version::HTTP_2)
        .body(Body::new(http_body_util::Full::new(body)))
        .map_err(|e| Status::internal(format!("cannot build the request: {e}")))?;
    let headers = request.headers_mut();
    headers.insert(TE, HeaderValue::from_static("trailers"));
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
    headers.insert("grpc-timeout", grpc_timeout(timeout));
    if let Some(value) = authorization {
        headers.insert(http::header::AUTHORIZATION, value.clone());
    }
    let response = channel
        .oneshot(request)
        .await
        .map_err(|e| Status::from_error(Box::new(e)))?;
    // A trailers-only reply: the call failed before any message.
    if let Some(status) = Status::from_header_map(response.headers()) {
        if status.code() != Code::Ok {
            return Err(status);
        }
    }
    let http_status = response.status();
    let mut body = response.into_body();
    let mut frames = Frames::default();
    let mut trailers = None;
    while let Some(frame) = body.frame().await {
        match frame?.into_data() {
            Ok(data) => {
                frames.push(data);
                if frames.len() > max_bytes + 5 {
                    return Err(Status::out_of_range(format!(
                        "the reply is over the {max_bytes}-byte message limit"
                    )));
                }
            }
            Err(frame) => trailers = frame.into_trailers().ok(),
        }
    }
    match trailers.as_ref().and_then(Status::from_header_map) {
        Some(status) if status.code() == Code::Ok => {}
        Some(status) => return Err(status),
        None => return Err(missing_status(http_status)),
    }
    parse(frames)
}

/// gRPC's timeout header: at most 8 digits and a unit.
fn grpc_timeout(timeout: Duration) -> HeaderValue {
    let millis = timeout.as_millis().max(1);
    let text = if millis < 100_000_000 {
        format!("{millis}m")
    } else {
        format!("{}S", (timeout.as_secs()).min(99_999_999))
    };
    HeaderValue::from_str(&text).expect("digits and a unit")
}

/// The status of a reply without `grpc-status`, from its HTTP status (as tonic maps it).
fn missing_status(http_status: http::StatusCode) -> Status {
    let code = match http_status {
        http::StatusCode::BAD_REQUEST => Code::Internal,
        http::StatusCode::UNAUTHORIZED => Code::Unauthenticated,
        http::StatusCode::FORBIDDEN => Code::PermissionDenied,
        http::StatusCode::NOT_FOUND => Code::Unimplemented,
        http::StatusCode::TOO_MANY_REQUESTS
        | http::StatusCode::BAD_GATEWAY
        | http::StatusCode::SERVICE_UNAVAILABLE
        | http::StatusCode::GATEWAY_TIMEOUT => Code::Unavailable,
        _ => Code::Unknown,
    };
    Status::new(
        code,
        format!("the reply has no grpc-status (HTTP status {})", http_status.as_u16()),
    )
}

/// The one gRPC message of a unary reply: every field but the vectors is copied out (a few
/// bytes) and decoded by prost; the vectors stay where they are.
fn parse(frames: Frames) -> Result<EmbedReply, Status> {
    let broken = |what: &str| Status::internal(format!("protocol error: the reply {what}"));
    if frames.len() < 5 {
        return Err(broken("has no message"));
    }
    if frames.byte(0) != 0 {
        return Err(broken("is compressed, which this client did not ask for"));
    }
    let mut header = [0u8; 4];
    frames.copy_to(1, &mut header);
    let end = 5 + u32::from_be_bytes(header) as usize;
    if end != frames.len() {
        return Err(broken("is not one whole message"));
    }
    let mut at = 5;
    let mut rest = Vec::with_capacity(256);
    let mut vectors = (at, 0);
    while at < end {
        let field_start = at;
        let key = varint(&frames, &mut at, end).ok_or_else(|| broken("has a bad field key"))?;
        match key & 7 {
            0 => {
                varint(&frames, &mut at, end).ok_or_else(|| broken("has a bad varint"))?;
            }
            1 => at += 8,
            5 => at += 4,
            2 => {
                let length = varint(&frames, &mut at, end).ok_or_else(|| broken("has a bad length"))? as usize;
                if key >> 3 == EMBEDDINGS_F32LE {
                    vectors = (at, length);
                    at += length;
                    if at > end {
                        return Err(broken("ends inside its vectors"));
                    }
                    continue;
                }
                at += length;
            }
            _ => return Err(broken("has a field of an unknown wire type")),
        }
        if at > end {
            return Err(broken("ends inside a field"));
        }
        let copied = rest.len();
        rest.resize(copied + (at - field_start), 0);
        frames.copy_to(field_start, &mut rest[copied..]);
    }
    let fields = proto::EmbedResponse::decode(&rest[..]).map_err(|e| broken(&format!("does not decode: {e}")))?;
    Ok(EmbedReply {
        fields,
        frames,
        vectors_at: vectors.0,
        vectors_len: vectors.1,
    })
}

fn varint(frames: &Frames, at: &mut usize, end: usize) -> Option<u64> {
    let mut value = 0u64;
    for shift in (0..64).step_by(7) {
        if *at >= end {
            return None;
        }
        let byte = frames.byte(*at);
        *at += 1;
        value |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Some(value);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reply's bytes as the server frames them, cut into frames of `size` bytes.
    fn framed(reply: &proto::EmbedResponse, size: usize) -> Frames {
        let mut wire = vec![0u8];
        wire.extend_from_slice(&(reply.encoded_len() as u32).to_be_bytes());
        reply.encode(&mut wire).unwrap();
        let mut frames = Frames::default();
        for piece in wire.chunks(size) {
            frames.push(Bytes::copy_from_slice(piece));
        }
        frames
    }

    #[test]
    fn a_reply_cut_anywhere_gives_prosts_fields_and_the_vectors_bytes() {
        let vectors: Vec<u8> = (0..3 * 8 * 4).map(|i| i as u8).collect();
        let reply = proto::EmbedResponse {
            model: "tiny".into(),
            count: 3,
            dim: 8,
            embeddings_f32le: vectors.clone().into(),
            token_counts_i32le: vec![1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0].into(),
            server_time_ns: 1 << 40,
            ..Default::default()
        };
        for size in [1, 2, 3, 7, 16, 1000] {
            let parsed = parse(framed(&reply, size)).unwrap();
            let mut fields = reply.clone();
            fields.embeddings_f32le = Bytes::new();
            assert_eq!(parsed.fields, fields, "frames of {size} bytes");
            assert_eq!(parsed.vectors_len, vectors.len());
            let mut out = vec![0u8; vectors.len()];
            parsed.frames.copy_to(parsed.vectors_at, &mut out);
            assert_eq!(out, vectors, "frames of {size} bytes");
            let mut row = vec![0u8; 32];
            parsed.frames.copy_to(parsed.vectors_at + 32, &mut row);
            assert_eq!(row, vectors[32..64]);
        }
    }

    #[test]
    fn a_truncated_or_compressed_reply_is_an_error() {
        let reply = proto::EmbedResponse {
            count: 1,
            dim: 4,
            embeddings_f32le: vec![0u8; 16].into(),
            ..Default::default()
        };
        let whole = framed(&reply, 1000);
        let mut bytes = vec![0u8; whole.len()];
        whole.copy_to(0, &mut bytes);
        let mut cut = Frames::default();
        cut.push(Bytes::copy_from_slice(&bytes[..bytes.len() - 3]));
        assert!(parse(cut).unwrap_err().message().contains("not one whole message"));
        let mut compressed = Frames::default();
        bytes[0] = 1;
        compressed.push(Bytes::from(bytes));
        assert!(parse(compressed).unwrap_err().message().contains("compressed"));
    }

    #[test]
    fn a_framed_request_is_what_prost_makes_of_the_whole_message() {
        let fields = proto::EmbedRequest {
            model: "tiny".into(),
            dimensions: 64,
            latency_class: proto::LatencyClass::Bulk as i32,
            caller: "c".into(),
            ..Default::default()
        };
        let long = "é".repeat(300);
        let texts: Vec<&[u8]> = vec![b"a cat", b"", long.as_bytes(), b"x"];
        let body = framed_request(&fields, &texts);
        assert_eq!(body[0], 0);
        assert_eq!(
            u32::from_be_bytes(body[1..5].try_into().unwrap()) as usize,
            body.len() - 5
        );
        let decoded = proto::EmbedRequest::decode(&body[5..]).unwrap();
        let mut data = Vec::new();
        let mut offsets = 0i32.to_le_bytes().to_vec();
        for text in &texts {
            data.extend_from_slice(text);
            offsets.extend_from_slice(&(data.len() as i32).to_le_bytes());
        }
        let mut whole = fields.clone();
        whole.inputs = Some(proto::embed_request::Inputs::PackedTexts(proto::PackedTexts {
            data_utf8: data.into(),
            offsets_i32le: offsets.into(),
        }));
        assert_eq!(decoded, whole);
        assert_eq!(body.len(), 5 + whole.encoded_len());
    }

    #[test]
    fn timeouts_fit_grpcs_eight_digits() {
        assert_eq!(grpc_timeout(Duration::from_millis(1500)), "1500m");
        assert_eq!(grpc_timeout(Duration::from_secs(200_000)), "200000S");
        assert_eq!(grpc_timeout(Duration::ZERO), "1m");
    }
}

//! The gRPC client: one lazily connected channel per target, the Info call, and Embed with the
//! Python client's retry rules (connectors/client_core.py `CallPlan`), inside one deadline:
//! UNAVAILABLE is tried once more, on another target where there is one; RESOURCE_EXHAUSTED from a
//! busy server is retried after the server's `grpc-retry-pushback-ms`, with jittered backoff.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::HeaderValue;
use rand::Rng;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};
use tonic::{Code, Status};

use crate::proto;
use crate::proto::embedding_client::EmbeddingClient;
use crate::settings::{is_loopback_target, Settings};
use crate::unary::{self, EmbedReply};

/// gRPC's message limit, both ways (the server's default); a busy server's backoff; requests of at
/// most INTERACTIVE_MAX_ROWS rows go as interactive (a search query), larger ones as bulk.
pub use crate::shared::{BACKOFF_BASE_S, BACKOFF_MAX_S, INTERACTIVE_MAX_ROWS, MAX_MESSAGE_BYTES, RETRY_PUSHBACK_KEY};
/// After UNAVAILABLE, how long the retry waits for a server to come back, trying to connect every
/// `RECONNECT_POLL` (the Python client's rule too).
const RECONNECT_WAIT: Duration = Duration::from_millis((crate::shared::RECONNECT_WAIT_S * 1000.0) as u64);
const RECONNECT_POLL: Duration = Duration::from_millis((crate::shared::RECONNECT_POLL_S * 1000.0) as u64);

/// An error for DuckDB to show: the server's own message, and which server said it.
#[derive(Debug, Clone)]
pub struct EmbedError {
    pub message: String,
    /// The gRPC status it came from, where a server answered.
    pub code: Option<Code>,
}

impl EmbedError {
    pub fn new(message: String) -> EmbedError {
        EmbedError { message, code: None }
    }

    /// The server refused the request's rows (INVALID_ARGUMENT: a text too long to embed whole,
    /// say), as the Python client's InvalidInputError: asking again cannot help.
    pub fn refused(&self) -> bool {
        self.code == Some(Code::InvalidArgument)
    }
}

impl std::fmt::Display for EmbedError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

fn status_error(status: &Status, target: &str) -> EmbedError {
    let mut message = status.message().to_string();
    if message.is_empty() {
        message = format!("{:?}", status.code());
    }
    // tonic's status of a local failure says "transport error" or "tcp connect error": the causes
    // under it say what broke ("Connection refused", "stream closed because of a broken pipe").
    let mut cause = std::error::Error::source(status);
    while let Some(error) = cause {
        let text = error.to_string();
        if text != "transport error" && !message.contains(&text) {
            message.push_str(&format!(": {text}"));
        }
        cause = error.source();
    }
    let code = effective_code(status);
    if code == Code::Unavailable && !message.contains("shutting down") {
        message.push_str(&format!("; is `embedtext serve` running and reachable at {target}?"));
    }
    EmbedError {
        message: format!("embedtext: {message} (server {target}, {code:?})"),
        code: Some(code),
    }
}

/// What one Embed call asks for.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct EmbedOptions {
    pub model: String,   // empty: the server's default model
    pub dimensions: u32, // 0: the model's full dim
    pub truncate: bool,
    pub prompt_name: String, // one of the model's prompts ("query", ...); empty: its default, if any
}

/// How embed_text_chunks cuts a text: the most tokens of a chunk's own text (0: as many as the
/// model takes beside its special tokens and the prompt), and the tokens it shares with the one before.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Chunking {
    pub max_tokens: u32,
    pub overlap: u32,
}

struct Target {
    name: String,
    channel: Channel,                 // Embed's calls (unary.rs)
    client: EmbeddingClient<Channel>, // the Info call
    load: Load,
}

/// What a target has on its plate, as the Python client counts it (connectors/endpoints.py).
#[derive(Default)]
struct Load {
    inflight_rows: AtomicUsize,
    failures: AtomicUsize, // UNAVAILABLE answers
    calls: AtomicUsize,
}

impl Load {
    /// The order targets are picked in: fewest rows in flight, then fewest failures, then fewest calls.
    fn key(&self) -> (usize, usize, usize) {
        (
            self.inflight_rows.load(Ordering::Relaxed),
            self.failures.load(Ordering::Relaxed),
            self.calls.load(Ordering::Relaxed),
        )
    }

    /// Count `rows` in flight here until the lease is dropped (the call answered, failed or was dropped).
    fn lease(&self, rows: usize) -> Lease<'_> {
        self.inflight_rows.fetch_add(rows, Ordering::Relaxed);
        self.calls.fetch_add(1, Ordering::Relaxed);
        Lease { load: self, rows }
    }
}

struct Lease<'a> {
    load: &'a Load,
    rows: usize,
}

impl Drop for Lease<'_> {
    fn drop(&mut self) {
        self.load.inflight_rows.fetch_sub(self.rows, Ordering::Relaxed);
    }
}

/// The least loaded of the targets not to avoid (of all of them once every one is to be avoided).
fn least_loaded(keys: &[(usize, usize, usize)], avoid: &[usize]) -> usize {
    let pool = |i: &usize| !avoid.contains(i);
    let candidates: Vec<usize> = (0..keys.len()).filter(pool).collect();
    let candidates = if candidates.is_empty() {
        (0..keys.len()).collect()
    } else {
        candidates
    };
    candidates.into_iter().min_by_key(|&i| keys[i]).unwrap_or(0)
}

/// A client of one server list; cheap to share between DuckDB's threads.
pub struct Client {
    targets: Vec<Target>,
    authorization: Option<HeaderValue>, // "Bearer <token>"
    deadline: Duration,
    caller: String,
    info: Mutex<Option<Arc<proto::InfoResponse>>>,
}

impl Client {
    /// Channels connect on first use, so a server that is not up yet is no error here.
    pub fn new(settings: &Settings) -> Result<Client, EmbedError> {
        let read = |path: &String, what: &str| {
            std::fs::read(path)
                .map_err(|e| EmbedError::new(format!("embedtext: cannot read the TLS {what} {path}: {e}")))
        };
        let tls = match &settings.tls_ca {
            Some(path) => {
                let mut tls = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(read(path, "CA")?));
                if let Some((cert, key)) = &settings.tls_client {
                    tls = tls.identity(Identity::from_pem(
                        read(cert, "client certificate")?,
                        read(key, "client key")?,
                    ));
                }
                Some(tls)
            }
            None => None,
        };
        let mut targets = Vec::new();
        for name in &settings.targets {
            if settings.token.is_some() && tls.is_none() && !is_loopback_target(name) {
                return Err(EmbedError::new(format!(
                    "embedtext: refusing to send the token to {name} without TLS; SET embedtext_tls_ca \
                     (the server's CA), or use a loopback or unix: target"
                )));
            }
            let channel = open_channel(name, tls.clone())?;
            let client = EmbeddingClient::new(channel.clone())
                .max_decoding_message_size(MAX_MESSAGE_BYTES)
                .max_encoding_message_size(MAX_MESSAGE_BYTES);
            targets.push(Target {
                name: name.clone(),
                channel,
                client,
                load: Load::default(),
            });
        }
        let authorization = match &settings.token {
            Some(token) => Some(
                format!("Bearer {token}")
                    .parse()
                    .map_err(|_| EmbedError::new("embedtext: the token is not a valid HTTP header value".into()))?,
            ),
            None => None,
        };
        Ok(Client {
            targets,
            authorization,
            deadline: settings.timeout,
            caller: process_caller().to_string(),
            info: Mutex::new(None),
        })
    }

    fn request<T>(&self, message: T, timeout: Duration) -> tonic::Request<T> {
        let mut request = tonic::Request::new(message);
        request.set_timeout(timeout);
        if let Some(value) = self.authorization.as_ref().and_then(|v| v.to_str().ok()?.parse().ok()) {
            request.metadata_mut().insert("authorization", value);
        }
        request
    }

    /// The server's Info, asked once and kept (the models a server serves do not change).
    pub async fn info(&self) -> Result<Arc<proto::InfoResponse>, EmbedError> {
        if let Some(info) = self.info.lock().unwrap().as_ref() {
            return Ok(info.clone());
        }
        let mut last = None;
        for target in &self.targets {
            let timeout = self.deadline.min(Duration::from_secs(30));
            let mut grpc = target.client.clone();
            match tokio::time::timeout(timeout, grpc.info(self.request(proto::InfoRequest {}, timeout))).await {
                Ok(Ok(reply)) => {
                    let info = Arc::new(reply.into_inner());
                    *self.info.lock().unwrap() = Some(info.clone());
                    return Ok(info);
                }
                Ok(Err(status)) => last = Some(status_error(&status, &target.name)),
                Err(_) => {
                    last = Some(EmbedError::new(format!(
                        "embedtext: no answer from {} in {timeout:?}; is `embedtext serve` running there?",
                        target.name
                    )))
                }
            }
        }
        Err(last.unwrap_or_else(|| EmbedError::new("embedtext: no target".into())))
    }

    /// Embed `texts` (UTF-8) as one request: `count x dim` float32 values, row-major.
    pub async fn embed(
        &self,
        texts: &[&[u8]],
        options: &EmbedOptions,
        deadline: Instant,
    ) -> Result<Vectors, EmbedError> {
        let bytes: usize = texts.iter().map(|t| t.len()).sum();
        if bytes + 4 * texts.len() + 4096 > MAX_MESSAGE_BYTES {
            return Err(EmbedError::new(format!(
                "embedtext: {} text bytes in one request, over gRPC's {} MiB message limit (a text that long \
                 cannot be sent; the model reads its first few hundred tokens only)",
                bytes,
                MAX_MESSAGE_BYTES >> 20
            )));
        }
        let request = self.embed_request(texts, options);
        let mut avoid: Vec<usize> = Vec::new();
        let mut first_unavailable: Option<EmbedError> = None;
        let mut overloaded = 0u32;
        let started = Instant::now();
        // Set by the first UNAVAILABLE: until then, the retry waits for a server to come back.
        let mut reconnect_until: Option<Instant> = None;
        loop {
            let index = self.pick(&avoid);
            let target = &self.targets[index];
            let lease = target.load.lease(texts.len());
            let now = Instant::now();
            if now >= deadline {
                return Err(first_unavailable.unwrap_or_else(|| {
                    EmbedError::new(format!("embedtext: the deadline passed (server {})", target.name))
                }));
            }
            // A server that is not there fails the call at once (tonic connects as the call starts):
            // only a server that answers takes the call's time.
            let timeout = deadline - now;
            let call = unary::embed(
                target.channel.clone(),
                request.clone(),
                timeout,
                self.authorization.as_ref(),
                MAX_MESSAGE_BYTES,
            );
            let status = match tokio::time::timeout(timeout, call).await {
                Ok(Ok(reply)) => return decode(reply, texts.len(), &target.name),
                Ok(Err(status)) => status,
                Err(_) => Status::deadline_exceeded("the call's deadline passed"),
            };
            drop(lease); // not in flight while this call waits to retry
            match effective_code(&status) {
                Code::Unavailable if first_unavailable.is_none() => {
                    target.load.failures.fetch_add(1, Ordering::Relaxed);
                    first_unavailable = Some(status_error(&status, &target.name));
                    avoid.push(index);
                    reconnect_until = Some(Instant::now() + RECONNECT_WAIT);
                }
                Code::Unavailable if reconnect_until.is_some_and(|until| Instant::now() + RECONNECT_POLL < until) => {
                    tokio::time::sleep(RECONNECT_POLL).await;
                }
                Code::Unavailable if reconnect_until.is_some() => {
                    // The retry waited for a server that never came back: the cause is the first failure.
                    let mut error = first_unavailable.take().unwrap();
                    error
                        .message
                        .push_str(&format!(" (waited {RECONNECT_WAIT:.1?} for it to come back)"));
                    return Err(error);
                }
                Code::ResourceExhausted if busy(&status) => {
                    let pushback = pushback_s(&status).unwrap_or(0.0);
                    let backoff = BACKOFF_MAX_S.min(BACKOFF_BASE_S * 2f64.powi(overloaded as i32));
                    let delay = pushback.max(backoff) * rand::rng().random_range(1.0..1.5);
                    let left = deadline.saturating_duration_since(Instant::now()).as_secs_f64();
                    if delay >= left {
                        let mut error = status_error(&status, &target.name);
                        error.message.push_str(&format!(
                            " (still overloaded after {} tries over {:.1}s; the deadline leaves {:.1}s, less than \
                             the next wait of {:.1}s)",
                            overloaded + 1,
                            started.elapsed().as_secs_f64(),
                            left,
                            delay
                        ));
                        return Err(error);
                    }
                    overloaded += 1;
                    reconnect_until = None;
                    if self.targets.len() > 1 && !avoid.contains(&index) {
                        avoid.push(index); // a less busy server next, if there is one
                    }
                    tokio::time::sleep(Duration::from_secs_f64(delay)).await;
                }
                _ => return Err(status_error(&status, &target.name)),
            }
        }
    }

    /// Cut `texts` (UTF-8) by the model's tokens, as one Split request: each text's chunk count, and
    /// each chunk's span (code points) and tokens. UNAVAILABLE goes to another target once, as Embed.
    pub async fn split(
        &self,
        texts: &[&[u8]],
        chunking: Chunking,
        options: &EmbedOptions,
        deadline: Instant,
    ) -> Result<proto::SplitResponse, EmbedError> {
        let mut data = Vec::with_capacity(texts.iter().map(|t| t.len()).sum());
        let mut offsets = Vec::with_capacity(4 * (texts.len() + 1));
        offsets.extend_from_slice(&0i32.to_le_bytes());
        for text in texts {
            data.extend_from_slice(text);
            offsets.extend_from_slice(&(data.len() as i32).to_le_bytes());
        }
        let message = proto::SplitRequest {
            model: options.model.clone(),
            inputs: Some(proto::split_request::Inputs::PackedTexts(proto::PackedTexts {
                data_utf8: data.into(),
                offsets_i32le: offsets.into(),
            })),
            max_tokens: chunking.max_tokens,
            overlap_tokens: chunking.overlap,
            prompt_name: options.prompt_name.clone(),
            ..Default::default()
        };
        let mut avoid = Vec::new();
        loop {
            let index = self.pick(&avoid);
            let target = &self.targets[index];
            let timeout = deadline.saturating_duration_since(Instant::now());
            if timeout.is_zero() {
                return Err(EmbedError::new(format!(
                    "embedtext: the deadline passed (server {})",
                    target.name
                )));
            }
            let mut grpc = target.client.clone();
            let call = grpc.split(self.request(message.clone(), timeout));
            let status = match tokio::time::timeout(timeout, call).await {
                Ok(Ok(reply)) => return Ok(reply.into_inner()),
                Ok(Err(status)) => status,
                Err(_) => Status::deadline_exceeded("the call's deadline passed"),
            };
            if effective_code(&status) == Code::Unavailable && avoid.len() + 1 < self.targets.len() {
                target.load.failures.fetch_add(1, Ordering::Relaxed);
                avoid.push(index);
                continue;
            }
            return Err(status_error(&status, &target.name));
        }
    }

    /// The request's gRPC body: every field but the texts, which unary.rs appends.
    fn embed_request(&self, texts: &[&[u8]], options: &EmbedOptions) -> Bytes {
        let latency_class = if texts.len() <= INTERACTIVE_MAX_ROWS {
            proto::LatencyClass::Interactive
        } else {
            proto::LatencyClass::Bulk
        };
        let fields = proto::EmbedRequest {
            model: options.model.clone(),
            dimensions: options.dimensions,
            truncation: if options.truncate {
                proto::Truncation::End as i32
            } else {
                proto::Truncation::None as i32
            },
            output_dtype: proto::OutputDtype::Float32 as i32,
            latency_class: latency_class as i32,
            caller: self.caller.clone(),
            prompt_name: options.prompt_name.clone(),
            ..Default::default()
        };
        unary::framed_request(&fields, texts)
    }

    /// The target with the fewest rows in flight among those not to avoid, as the Python client picks.
    fn pick(&self, avoid: &[usize]) -> usize {
        let keys: Vec<_> = self.targets.iter().map(|t| t.load.key()).collect();
        least_loaded(&keys, avoid)
    }
}

/// The reply's vectors, `rows x dim` little-endian float32 values, in the frames they arrived in.
pub struct Vectors {
    reply: EmbedReply,
    pub dim: usize,
}

impl Vectors {
    /// Row `row`'s float32 bytes into `out` (`dim * 4` bytes).
    pub fn copy_row(&self, row: usize, out: &mut [u8]) {
        self.reply
            .frames
            .copy_to(self.reply.vectors_at + row * self.dim * 4, out);
    }
}

fn decode(reply: EmbedReply, rows: usize, target: &str) -> Result<Vectors, EmbedError> {
    let dim = reply.fields.dim as usize;
    if reply.fields.count as usize != rows || reply.vectors_len != rows * dim * 4 {
        return Err(EmbedError::new(format!(
            "embedtext: the reply of {target} does not match the request: {} rows x {dim} in {} bytes for {rows} rows",
            reply.fields.count, reply.vectors_len
        )));
    }
    Ok(Vectors { reply, dim })
}

/// One caller id for the process, as the Python UDF has one per client: the server shares bulk
/// throughput fairly among callers, and a query's DuckDB threads (each with its own client) are one.
fn process_caller() -> &'static str {
    static CALLER: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    CALLER.get_or_init(|| format!("{:016x}", rand::rng().random::<u64>()))
}

fn pushback_s(status: &Status) -> Option<f64> {
    let value = status.metadata().get(RETRY_PUSHBACK_KEY)?.to_str().ok()?;
    value.trim().parse::<i64>().ok().map(|ms| ms.max(0) as f64 / 1000.0)
}

/// Failures that say the server is gone, not that the call is wrong, count as UNAVAILABLE: they go
/// to another endpoint (an embedding is safe to ask for twice).
/// - A call whose connection broke (its server died, say) ends with a status tonic made from the
///   transport's error, not one the server sent (gRPC's Python client says UNAVAILABLE).
/// - A server that stops cancels the calls that reached it after its last answers; this client
///   never cancels a call itself (a dropped call has no status).
fn effective_code(status: &Status) -> Code {
    match status.code() {
        Code::Unknown if std::error::Error::source(status).is_some() => Code::Unavailable,
        Code::Cancelled => Code::Unavailable,
        code => code,
    }
}

/// RESOURCE_EXHAUSTED because the server was busy (worth a retry), not because a message was too
/// large (the same code, which no retry can fix).
fn busy(status: &Status) -> bool {
    pushback_s(status).is_some() || status.message().to_lowercase().contains("concurrent rpc limit")
}

fn open_channel(target: &str, tls: Option<ClientTlsConfig>) -> Result<Channel, EmbedError> {
    let bad = |e: tonic::transport::Error| EmbedError::new(format!("embedtext: bad target {target:?}: {e}"));
    if let Some(path) = target.strip_prefix("unix:") {
        let path = path.trim_start_matches("//").to_string();
        // The URI is a placeholder: the connector below opens the socket file.
        let endpoint = windows(Endpoint::try_from("http://127.0.0.1:1").map_err(bad)?);
        let connector = tower::service_fn(move |_| {
            let path = path.clone();
            async move {
                let stream = tokio::net::UnixStream::connect(path).await?;
                Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(stream))
            }
        });
        return Ok(endpoint.connect_with_connector_lazy(connector));
    }
    let scheme = if tls.is_some() { "https" } else { "http" };
    let mut endpoint = windows(Endpoint::from_shared(format!("{scheme}://{target}")).map_err(bad)?)
        .connect_timeout(Duration::from_secs(5))
        .http2_keep_alive_interval(Duration::from_secs(30))
        .tcp_nodelay(true);
    if let Some(tls) = tls {
        endpoint = endpoint.tls_config(tls).map_err(bad)?;
    }
    Ok(endpoint.connect_lazy())
}

/// HTTP/2 flow-control windows that hold a whole reply (512 rows of 1,024 floats are 2 MiB): with
/// the default 64 KiB, the server waits for a window update every 64 KiB of vectors.
/// Frames of up to 1 MiB, not HTTP/2's default 16 KiB: a reply arrives in one or two frames, which
/// unary.rs keeps as they are (fewer buffers, reads and wake-ups). With tonic's own decoder, which
/// copies the frames into one buffer, 1 MiB frames cost more CPU instead (rotating rounds).
fn windows(endpoint: Endpoint) -> Endpoint {
    endpoint
        .initial_stream_window_size(8 << 20)
        .initial_connection_window_size(32 << 20)
        .max_frame_size(1u32 << 20)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_least_loaded_target_is_picked_as_the_python_client_picks() {
        // (rows in flight, failures, calls) per target
        assert_eq!(least_loaded(&[(512, 0, 1), (0, 0, 3), (512, 0, 0)], &[]), 1);
        assert_eq!(least_loaded(&[(0, 1, 0), (0, 0, 5)], &[]), 1); // fewer failures first
        assert_eq!(least_loaded(&[(0, 0, 2), (0, 0, 1)], &[]), 1); // then fewer calls
        assert_eq!(least_loaded(&[(0, 0, 0), (900, 0, 0)], &[0]), 1); // not one to avoid
        assert_eq!(least_loaded(&[(5, 0, 0), (0, 0, 0)], &[0, 1]), 1); // all avoided: all count
        let load = Load::default();
        {
            let _lease = load.lease(64);
            assert_eq!(load.key(), (64, 0, 1));
        }
        assert_eq!(load.key(), (0, 0, 1)); // the rows leave with the lease
    }

    #[test]
    fn a_broken_connection_is_retried_as_unavailable_and_a_servers_unknown_is_not() {
        let broken = Status::from_error(Box::new(std::io::Error::from(std::io::ErrorKind::BrokenPipe)));
        assert_eq!(broken.code(), Code::Unknown);
        assert_eq!(effective_code(&broken), Code::Unavailable);
        let message = status_error(&broken, "unix:/s").message;
        assert!(
            message.contains("broken pipe") && message.contains("embedtext serve"),
            "{message}"
        );
        assert_eq!(effective_code(&Status::unknown("the handler raised")), Code::Unknown);
        assert_eq!(effective_code(&Status::cancelled("server stopping")), Code::Unavailable);
        assert_eq!(effective_code(&Status::invalid_argument("no")), Code::InvalidArgument);
    }
}

//! The extension's settings: DuckDB options (`SET embedtext_target = ...`), with the environment
//! as fallback, as the Python client reads it (EMBEDTEXT_TOKEN, EMBEDTEXT_TOKEN_FILE, EMBEDTEXT_TLS_CA).

use std::time::Duration;

/// The server's default address; a query's deadline (it may wait behind other work): the Python
/// client's and UDF's.
pub use crate::shared::{DEFAULT_TARGET, UDF_TIMEOUT_S as DEFAULT_TIMEOUT_S};

/// (DuckDB option, environment fallback, description).
pub const OPTIONS: [(&str, &str, &str); 6] = [
    (
        "embedtext_target",
        "EMBEDTEXT_TARGET",
        "embedtext server(s) for embed_text: host:port, unix:PATH, or a comma-separated list (default 127.0.0.1:50051)",
    ),
    (
        "embedtext_token",
        "EMBEDTEXT_TOKEN",
        "bearer token for the embedtext server (its --token)",
    ),
    (
        "embedtext_tls_ca",
        "EMBEDTEXT_TLS_CA",
        "PEM file of the CA that signed the embedtext server's TLS certificate",
    ),
    (
        "embedtext_timeout_s",
        "EMBEDTEXT_TIMEOUT_S",
        "deadline in seconds for the rows of one DuckDB chunk (default 600)",
    ),
    (
        "embedtext_tls_client_cert",
        "EMBEDTEXT_TLS_CLIENT_CERT",
        "PEM client certificate, for a server that requires mutual TLS",
    ),
    (
        "embedtext_tls_client_key",
        "EMBEDTEXT_TLS_CLIENT_KEY",
        "PEM private key of embedtext_tls_client_cert",
    ),
];

/// (DuckDB option, description) of what embed_text does with a row: as the Python function's
/// `register(..., truncate=, on_error=)` (udf/registration.py).
pub const ROW_OPTIONS: [(&str, &str); 2] = [
    (
        "embedtext_truncate",
        "cut texts at the model's max tokens: true (default), or false (a longer text is an error)",
    ),
    (
        "embedtext_on_error",
        "a row the server refuses: 'fail' (default: the query fails) or 'null' (that row gives NULL)",
    ),
];

/// What a row the server refuses gives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnError {
    Fail,
    Null,
}

/// `embedtext_truncate` and `embedtext_on_error` from `option(name)` (None or empty: the default).
pub fn row_options(option: impl Fn(&str) -> Option<String>) -> Result<(bool, OnError), String> {
    let value = |name: &str| option(name).map(|v| v.trim().to_lowercase()).filter(|v| !v.is_empty());
    let truncate = match value(ROW_OPTIONS[0].0).as_deref() {
        None | Some("true") => true,
        Some("false") => false,
        Some(other) => return Err(format!("embedtext: embedtext_truncate is true or false, not {other:?}")),
    };
    let on_error = match value(ROW_OPTIONS[1].0).as_deref() {
        None | Some("fail") => OnError::Fail,
        Some("null") => OnError::Null,
        Some(other) => {
            return Err(format!(
                "embedtext: embedtext_on_error is 'fail' or 'null', not {other:?}"
            ))
        }
    };
    Ok((truncate, on_error))
}

/// Where the extension sends its rows, and how.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Settings {
    pub targets: Vec<String>,
    pub token: Option<String>,
    pub tls_ca: Option<String>,
    /// (certificate, key) files for mutual TLS.
    pub tls_client: Option<(String, String)>,
    pub timeout: Duration,
}

impl Settings {
    /// `option(name)`: the DuckDB option's value (None or empty: unset); `env(name)`: the environment.
    /// `connected`: the target given to `embedtext_connect`, used where no option names one.
    pub fn resolve(
        option: impl Fn(&str) -> Option<String>,
        env: impl Fn(&str) -> Option<String>,
        connected: Option<String>,
    ) -> Result<Settings, String> {
        let value = |i: usize| {
            let (name, var, _) = OPTIONS[i];
            option(name)
                .filter(|v| !v.trim().is_empty())
                .or_else(|| env(var).filter(|v| !v.trim().is_empty()))
        };
        let target = option(OPTIONS[0].0)
            .filter(|v| !v.trim().is_empty())
            .or(connected)
            .or_else(|| env(OPTIONS[0].1).filter(|v| !v.trim().is_empty()))
            .unwrap_or_else(|| DEFAULT_TARGET.to_string());
        let targets = parse_targets(&target)?;
        let mut token = value(1);
        if token.is_none() {
            if let Some(file) = env("EMBEDTEXT_TOKEN_FILE").filter(|v| !v.is_empty()) {
                let text = std::fs::read_to_string(&file)
                    .map_err(|e| format!("embedtext: cannot read EMBEDTEXT_TOKEN_FILE {file}: {e}"))?;
                token = Some(text);
            }
        }
        let token = token.map(|t| t.trim().to_string()).filter(|t| !t.is_empty());
        let timeout_s = match value(3) {
            Some(text) => text
                .trim()
                .parse::<f64>()
                .ok()
                .filter(|s| s.is_finite() && *s > 0.0)
                .ok_or_else(|| {
                    format!("embedtext: embedtext_timeout_s must be a positive number of seconds, not {text:?}")
                })?,
            None => DEFAULT_TIMEOUT_S,
        };
        let tls_client = match (value(4), value(5)) {
            (Some(cert), Some(key)) => Some((cert, key)),
            (None, None) => None,
            _ => {
                return Err(
                    "embedtext: mutual TLS needs both embedtext_tls_client_cert and embedtext_tls_client_key".into(),
                )
            }
        };
        Ok(Settings {
            targets,
            token,
            tls_ca: value(2),
            tls_client,
            timeout: Duration::from_secs_f64(timeout_s),
        })
    }
}

/// `host:port`, `unix:PATH`, `unix:///abs/path`, or a path to a socket file; comma-separated for several.
pub fn parse_targets(text: &str) -> Result<Vec<String>, String> {
    let mut targets = Vec::new();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        if part.starts_with("http://") || part.starts_with("https://") {
            return Err(format!("embedtext: target {part:?}: give host:port (gRPC), not a URL"));
        }
        if let Some(path) = part.strip_prefix("unix:") {
            let path = path.trim_start_matches("//");
            if path.is_empty() {
                return Err(format!("embedtext: target {part:?} names no socket file"));
            }
            targets.push(format!("unix:{path}"));
        } else if part.starts_with('/') {
            targets.push(format!("unix:{part}"));
        } else if part
            .rsplit_once(':')
            .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok())
        {
            targets.push(part.to_string());
        } else {
            return Err(format!("embedtext: target {part:?}: use host:port or unix:PATH"));
        }
    }
    if targets.is_empty() {
        return Err("embedtext: no target given; SET embedtext_target = 'host:port' or 'unix:PATH'".into());
    }
    Ok(targets)
}

/// Loopback and Unix-socket targets may carry a token without TLS (protocol/addresses.py).
pub fn is_loopback_target(target: &str) -> bool {
    if target.starts_with("unix:") {
        return true;
    }
    let host = target
        .rsplit_once(':')
        .map_or(target, |(h, _)| h)
        .trim_start_matches('[')
        .trim_end_matches(']');
    host == "localhost" || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn none(_: &str) -> Option<String> {
        None
    }

    #[test]
    fn option_wins_over_connected_and_environment() {
        let option = |n: &str| (n == "embedtext_target").then(|| "unix:/tmp/a.sock".to_string());
        let env = |n: &str| (n == "EMBEDTEXT_TARGET").then(|| "10.0.0.1:1".to_string());
        let s = Settings::resolve(option, env, Some("127.0.0.1:2".into())).unwrap();
        assert_eq!(s.targets, vec!["unix:/tmp/a.sock"]);
        let s = Settings::resolve(none, env, Some("127.0.0.1:2".into())).unwrap();
        assert_eq!(s.targets, vec!["127.0.0.1:2"]);
        let s = Settings::resolve(none, env, None).unwrap();
        assert_eq!(s.targets, vec!["10.0.0.1:1"]);
        let s = Settings::resolve(none, none, None).unwrap();
        assert_eq!(s.targets, vec![DEFAULT_TARGET]);
        assert_eq!(s.timeout, Duration::from_secs(600));
    }

    #[test]
    fn targets_parse_like_the_python_client() {
        assert_eq!(
            parse_targets("unix:///tmp/x.sock, /tmp/y.sock,localhost:5").unwrap(),
            vec!["unix:/tmp/x.sock", "unix:/tmp/y.sock", "localhost:5"]
        );
        assert!(parse_targets("http://h:1").unwrap_err().contains("not a URL"));
        assert!(parse_targets("nohost").is_err());
        assert!(parse_targets(" , ").is_err());
    }

    #[test]
    fn row_options_default_parse_and_refuse_what_they_do_not_know() {
        assert_eq!(row_options(none), Ok((true, OnError::Fail)));
        let set = |n: &str| match n {
            "embedtext_truncate" => Some(" FALSE ".to_string()),
            "embedtext_on_error" => Some("null".to_string()),
            _ => None,
        };
        assert_eq!(row_options(set), Ok((false, OnError::Null)));
        let bad = |n: &str| (n == "embedtext_on_error").then(|| "skip".to_string());
        assert!(row_options(bad).unwrap_err().contains("'fail' or 'null'"));
    }

    #[test]
    fn bad_timeout_is_a_clear_error() {
        let option = |n: &str| (n == "embedtext_timeout_s").then(|| "soon".to_string());
        assert!(Settings::resolve(option, none, None)
            .unwrap_err()
            .contains("embedtext_timeout_s"));
    }

    #[test]
    fn loopback_targets() {
        assert!(is_loopback_target("unix:/x"));
        assert!(is_loopback_target("127.0.0.1:5"));
        assert!(is_loopback_target("[::1]:5"));
        assert!(is_loopback_target("localhost:5"));
        assert!(!is_loopback_target("10.0.0.5:5"));
    }
}

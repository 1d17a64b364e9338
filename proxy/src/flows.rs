//! URL gates from the file: `url = "https://…{handle}"` (the link the person opens; `{handle}`
//! is the call's flow handle, `{argument}` an argument, percent-encoded) and `complete_when`,
//! where the proxy checks that the flow finished:
//!
//! - `{ redis_key = "flows:{handle}" }`: complete when that key (in `[state] redis`) holds a
//!   value other than `0`, `false` or nothing; whatever finishes the flow (an OAuth callback, a
//!   signing service) sets it;
//! - `{ http = "http://…/{handle}" }`: complete when a GET of that URL answers 2xx; any other
//!   status, or no answer, is "not yet" (`https://` with the proxy's `https` feature).
//!
//! The library's [`UrlFlow`] does the rest: the layer asks, checks on each `accept`, asks again
//! with its "not finished" hint until the check says complete, and seals and binds it all.

use std::sync::Arc;

use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use serde_json::Value;
use tower_elicitation::{BoxError, GateCall, UrlFlow};

/// What is percent-encoded in a URL: all but RFC 3986's unreserved characters.
const ENCODED: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

/// What the gates' completion checks reach: Redis (`[state] redis`) and an HTTP client.
#[derive(Clone)]
pub struct Backends {
    pub redis: Option<redis::aio::ConnectionManager>,
    pub http: reqwest::Client,
}

/// Where a flow's completion is checked.
#[derive(Clone)]
pub enum Check {
    RedisKey(String),
    Http(String),
}

/// One URL gate's flow, as the file declares it.
#[derive(Clone)]
pub struct ConfiguredFlow {
    pub url: Arc<str>,
    pub check: Check,
    pub backends: Backends,
}

/// `template` with `{handle}` the call's handle and each `{argument}` the call's argument,
/// percent-encoded when `encode`.
pub fn fill(template: &str, call: &GateCall<'_>, encode: bool) -> String {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(start) = rest.find('{') {
        out.push_str(&rest[..start]);
        let after = &rest[start + 1..];
        match after.find('}') {
            Some(end) if crate::gates::is_name(&after[..end]) => {
                let name = &after[..end];
                let value = match (name, call.argument(name)) {
                    ("handle", _) => call.handle().to_owned(),
                    (_, Some(Value::String(text))) => text.clone(),
                    (_, Some(other)) => other.to_string(),
                    (_, None) => String::new(),
                };
                if encode {
                    out.extend(utf8_percent_encode(&value, ENCODED));
                } else {
                    out.push_str(&value);
                }
                rest = &after[end + 1..];
            }
            _ => {
                out.push('{');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

impl UrlFlow for ConfiguredFlow {
    async fn url(&self, call: &GateCall<'_>) -> Result<String, BoxError> {
        Ok(fill(&self.url, call, true))
    }

    async fn is_complete(&self, call: &GateCall<'_>) -> bool {
        match &self.check {
            Check::RedisKey(template) => {
                let Some(mut redis) = self.backends.redis.clone() else {
                    return false;
                };
                let key = fill(template, call, false);
                let value: Result<Option<String>, _> =
                    redis::cmd("GET").arg(&key).query_async(&mut redis).await;
                match value {
                    Ok(Some(value)) => !matches!(value.as_str(), "" | "0" | "false"),
                    Ok(None) => false,
                    Err(error) => {
                        tracing::warn!(%error, "URL gate: Redis did not answer; the flow is not taken as complete");
                        false
                    }
                }
            }
            Check::Http(template) => {
                let url = fill(template, call, true);
                match self.backends.http.get(&url).send().await {
                    Ok(response) => response.status().is_success(),
                    Err(error) => {
                        tracing::warn!(%error, "URL gate: the completion check did not answer; the flow is not taken as complete");
                        false
                    }
                }
            }
        }
    }
}

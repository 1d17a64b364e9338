//! URL gates from the file: `url = "https://…{handle}"` (the link the person opens; `{handle}`
//! is the call's flow handle, `{argument}` an argument, percent-encoded) and `complete_when`,
//! where the proxy checks that the flow finished:
//!
//! - `{ redis_key = "flows:{handle}" }`: complete when that key (in `[state] redis`) holds a
//!   value other than `0`, `false` or nothing; whatever finishes the flow (an OAuth callback, a
//!   signing service) sets it. The check that finds it complete deletes it, in the same script:
//!   a completion is spent once;
//! - `{ http = "http://…/{handle}" }`: complete when a GET of that URL answers 2xx; any other
//!   status (a redirect too: none is followed), or no answer within 5 s, is "not yet"
//!   (`https://` with the proxy's `https` feature). Placeholders may stand only in the path and
//!   query: the scheme, host and port are the file's own (a URL with a placeholder there is
//!   refused at load, with its line), and a filled URL whose origin is not that one is never
//!   asked. The body is never read.
//!
//! Each call has a handle of its own (the library draws a nonce on a call's first round and
//! seals it), so one completion can approve only the call it was made for. A completion is
//! spent by the check that finds it: the proxy remembers the spent handle for the token's life
//! (in Redis when `[state] redis` is set, so for every replica; else in process, at most
//! 100,000 handles, failing closed beyond), and the handle is never found complete again, even
//! if the key is set again or the endpoint still answers 2xx.
//!
//! The library's [`UrlFlow`] does the rest: the layer asks, checks on each `accept`, asks again
//! with its "not finished" hint until the check says complete, and seals and binds it all.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex, PoisonError};
use std::time::{Duration, Instant};

use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use reqwest::Url;
use serde_json::Value;
use tower_elicitation::{BoxError, GateCall, UrlFlow};

/// What is percent-encoded in a URL: all but RFC 3986's unreserved characters.
const ENCODED: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

/// What the gates' completion checks reach: Redis (`[state] redis`), an HTTP client, and the
/// calls waiting on the approval page (`approvers = "url"`).
#[derive(Clone)]
pub struct Backends {
    pub redis: Option<redis::aio::ConnectionManager>,
    pub http: reqwest::Client,
    pub approvals: Arc<crate::approvals::Approvals>,
}

impl Backends {
    /// What a test's gates reach: no Redis, a plain client, and approval pages that cannot be
    /// served.
    #[cfg(test)]
    pub fn offline() -> Self {
        Self {
            redis: None,
            http: reqwest::Client::new(),
            approvals: Arc::new(crate::approvals::Approvals::new(
                "http://127.0.0.1:3000",
                Vec::new(),
                Some("needs [identity] jwt or api_keys".to_owned()),
            )),
        }
    }
}

/// How long a spent handle is remembered: the layer's token lifetime (600 s) and its clock
/// skew (60 s), past which no token that carries the handle is accepted.
const SPENT_FOR: Duration = Duration::from_secs(660);

/// The most spent handles kept in process (without `[state] redis`).
const MAX_SPENT: usize = 100_000;

/// How long one HTTP completion check may take, connecting included.
const CHECK_TIMEOUT: Duration = Duration::from_secs(5);

/// Where spent handles are kept in Redis, one key each.
const SPENT_PREFIX: &str = "elicitation-proxy:spent-flow:";

/// The Redis-key check: `KEYS[1]` the flow's key, `KEYS[2]` its handle's spent marker,
/// `ARGV[1]` how long the marker lives (ms). Complete (1) when the handle was not spent and the
/// key holds a value other than `""`, `0` or `false`: then the key is deleted and the handle
/// marked spent, in the same step.
const TAKE_KEY: &str = r"
if redis.call('EXISTS', KEYS[2]) == 1 then return 0 end
local value = redis.call('GET', KEYS[1])
if (not value) or value == '' or value == '0' or value == 'false' then return 0 end
redis.call('DEL', KEYS[1])
redis.call('SET', KEYS[2], '1', 'PX', ARGV[1])
return 1
";

/// Where a flow's completion is checked.
#[derive(Clone)]
pub enum Check {
    RedisKey(String),
    Http(HttpCheck),
}

impl Check {
    /// The template it fills, with its `{handle}` and `{argument}` placeholders.
    pub fn template(&self) -> &str {
        match self {
            Self::RedisKey(template) => template,
            Self::Http(check) => &check.template,
        }
    }
}

/// A `complete_when.http` URL: its template, and the origin every filled URL must have.
#[derive(Clone, Debug)]
pub struct HttpCheck {
    template: String,
    origin: reqwest::Url,
}

impl HttpCheck {
    /// Reads `complete_when.http`.
    ///
    /// # Errors
    ///
    /// Not an `http://` or `https://` URL, or a placeholder in its scheme, host or port (the
    /// proxy reaches only the origin the file names).
    pub fn new(template: &str) -> Result<Self, String> {
        let Some((scheme, rest)) = template.split_once("://") else {
            return Err(format!(
                "complete_when.http {template:?} is not an http(s) URL"
            ));
        };
        if scheme != "http" && scheme != "https" {
            return Err(format!(
                "complete_when.http {template:?} is not an http(s) URL"
            ));
        }
        let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
        if authority.contains(['{', '}']) {
            return Err(format!(
                "complete_when.http {template:?}: a placeholder in the scheme, host or port; only \
                 the path and query may have them (the check reaches only the origin you name)"
            ));
        }
        let origin = Url::parse(&format!("{scheme}://{authority}/"))
            .ok()
            .filter(|url| url.host().is_some())
            .ok_or_else(|| format!("complete_when.http {template:?} names no host"))?;
        Ok(Self {
            template: template.to_owned(),
            origin,
        })
    }

    /// The URL to ask for `call`, when it is on the configured origin.
    fn url(&self, call: &GateCall<'_>) -> Option<Url> {
        let url = Url::parse(&fill(&self.template, call, true)).ok()?;
        (url.origin() == self.origin.origin()).then_some(url)
    }
}

/// The client of the HTTP completion checks: no redirect followed (a 3xx is "not yet"), each
/// check bounded in time.
///
/// # Errors
///
/// When the HTTP client cannot be built (its TLS backend).
pub fn http_client() -> reqwest::Result<reqwest::Client> {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .connect_timeout(Duration::from_secs(2))
        .timeout(CHECK_TIMEOUT)
        .build()
}

/// The handles spent in this process (without `[state] redis`): handle → until when.
static SPENT: LazyLock<Mutex<HashMap<String, Instant>>> = LazyLock::new(Mutex::default);

/// Marks `handle` spent in `spent` at `now`: `true` when it was not spent already. Over
/// `MAX_SPENT` unexpired handles it fails closed (`false`) rather than forget one.
fn spend_in(spent: &Mutex<HashMap<String, Instant>>, handle: &str, now: Instant) -> bool {
    let mut spent = spent.lock().unwrap_or_else(PoisonError::into_inner);
    if spent.get(handle).is_some_and(|until| *until > now) {
        return false;
    }
    if spent.len() >= MAX_SPENT {
        spent.retain(|_, until| *until > now);
        if spent.len() >= MAX_SPENT {
            tracing::warn!(
                "URL gate: {MAX_SPENT} completions spent within the token lifetime; this one is \
                 not taken as complete"
            );
            return false;
        }
    }
    spent.insert(handle.to_owned(), now + SPENT_FOR);
    true
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
    crate::template::render(template, |name, out| {
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
    })
}

impl ConfiguredFlow {
    /// Marks `handle` spent: `true` when it was not spent already (in Redis when there is one,
    /// for every replica; else in this process). When Redis cannot say, `false`.
    async fn spend(&self, handle: &str) -> bool {
        let Some(mut redis) = self.backends.redis.clone() else {
            return spend_in(&SPENT, handle, Instant::now());
        };
        let set: Result<Option<String>, _> = redis::cmd("SET")
            .arg(format!("{SPENT_PREFIX}{handle}"))
            .arg(1)
            .arg("NX")
            .arg("PX")
            .arg(SPENT_FOR.as_millis() as u64)
            .query_async(&mut redis)
            .await;
        match set {
            Ok(set) => set.is_some(),
            Err(error) => {
                tracing::warn!(%error, "URL gate: Redis did not answer; the flow is not taken as complete");
                false
            }
        }
    }
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
                let taken: Result<u8, _> = redis::cmd("EVAL")
                    .arg(TAKE_KEY)
                    .arg(2)
                    .arg(&key)
                    .arg(format!("{SPENT_PREFIX}{}", call.handle()))
                    .arg(SPENT_FOR.as_millis() as u64)
                    .query_async(&mut redis)
                    .await;
                match taken {
                    Ok(taken) => taken == 1,
                    Err(error) => {
                        tracing::warn!(%error, "URL gate: Redis did not answer; the flow is not taken as complete");
                        false
                    }
                }
            }
            Check::Http(check) => {
                let Some(url) = check.url(call) else {
                    tracing::warn!(
                        "URL gate: the completion check's URL is not on its configured origin; \
                         the flow is not taken as complete"
                    );
                    return false;
                };
                // Only the status is read; the body is dropped unread.
                let complete = match self.backends.http.get(url).send().await {
                    Ok(response) => response.status().is_success(),
                    Err(error) => {
                        tracing::warn!(%error, "URL gate: the completion check did not answer; the flow is not taken as complete");
                        false
                    }
                };
                // The endpoint cannot be told the completion was used: the handle is spent here.
                complete && self.spend(call.handle()).await
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_http_check_has_its_placeholders_in_its_path_and_query_only() {
        for good in [
            "http://127.0.0.1:9/flows/{handle}",
            "https://auth.example.com/check?flow={handle}&who={user}",
            "http://[::1]:8080/{handle}",
        ] {
            HttpCheck::new(good).unwrap_or_else(|e| panic!("{good}: {e}"));
        }
        for bad in [
            "http://{host}/flows/{handle}",
            "http://auth.example.com:{port}/x",
            "http://{handle}.flows.example.com/",
            "http://user:{secret}@example.com/",
            "{scheme}://example.com/{handle}",
            "https://example.com{path}",
            "ftp://example.com/{handle}",
            "example.com/{handle}",
            "http:///{handle}",
        ] {
            assert!(HttpCheck::new(bad).is_err(), "{bad}");
        }
        let check = HttpCheck::new("http://127.0.0.1:9/flows/{handle}").unwrap();
        assert_eq!(check.origin.as_str(), "http://127.0.0.1:9/");
    }

    #[test]
    fn a_handle_is_spent_once_and_the_memory_is_bounded() {
        let spent = Mutex::default();
        let now = Instant::now();
        assert!(spend_in(&spent, "h1", now));
        assert!(!spend_in(&spent, "h1", now));
        assert!(!spend_in(
            &spent,
            "h1",
            now + SPENT_FOR - Duration::from_secs(1)
        ));
        assert!(spend_in(&spent, "h2", now));
        // Past the token's life the handle could not be carried by any accepted token.
        assert!(spend_in(
            &spent,
            "h1",
            now + SPENT_FOR + Duration::from_secs(1)
        ));
        let full = Mutex::new(
            (0..MAX_SPENT)
                .map(|i| (i.to_string(), now + SPENT_FOR))
                .collect::<HashMap<_, _>>(),
        );
        assert!(!spend_in(&full, "another", now), "full: fails closed");
        assert!(
            spend_in(&full, "another", now + SPENT_FOR),
            "expired ones make room"
        );
    }
}

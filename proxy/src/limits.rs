//! `[limits]`: how many calls a caller may make a minute, all targets together
//! (`calls_per_minute`) and of the tools each entry of `[limits.per_tool]` names: a tool's name,
//! or a glob matched as a gate's is (`"fs_*" = 30`: the calls of every tool it matches counted
//! together). A call is counted in every entry that matches its tool, and refused if any is
//! spent.
//!
//! **What counts:** a `tools/call`, `prompts/get` or `resources/read` on `/mcp` (HTTP or stdio),
//! once. A retry of a call that was asked (its params carry `requestState`) does not count
//! again: it is a round of a call already counted, and the layer behind verifies its state (a
//! single-use token, bound to the call's arguments), so a forged one reaches nothing. That way
//! a caller at its limit can still answer the questions of the calls it made. A 2025-era host's
//! answers are JSON-RPC responses, not calls. Lists, `initialize`, pings and the rest never
//! count.
//!
//! **Whose call:** the verified caller (`[identity] jwt`, `api_keys`, over stdio
//! `stdio_principal`), or the header `[identity] principal` names (`authorization`,
//! `header:NAME`: the file trusts what sets it). Every other call, an unverified
//! `Authorization` header's included, is the one anonymous caller's: one count shared by all,
//! so that a caller cannot get a fresh count by sending a new header. With `principal = "none"`
//! every call is the anonymous caller's. Callers are kept by the SHA-256 of their name.
//!
//! **The count:** a token bucket per caller (and per caller and listed tool), as many tokens as
//! the limit, refilled evenly over a minute: a burst of the limit at once, then one call each
//! `60 / limit` seconds. A call over it is refused before anything else sees it, with
//! JSON-RPC error [`RATE_LIMITED`] (`-32029`, of the range JSON-RPC leaves to implementations)
//! whose message names the limit and says in how many seconds to retry
//! (`error.data.retryAfterSeconds`), over HTTP with status 429 and `Retry-After`. A refused call
//! takes no token.
//!
//! **Bounded memory:** at most `[limits] max_callers` counts (default 10,000) are kept. A count whose bucket has filled up again is the same as
//! none, so when the table is full those are dropped first; if every count is still running,
//! the new caller's call is refused (fail closed: letting it through unlimited would make the
//! cap a way around the limit), with the seconds until the first count runs out. The table is
//! swept only when full, so a call costs a hash lookup under one mutex.
//!
//! A small token bucket rather than `governor`: its keyed limiter's table grows with every key
//! until swept, with no cap to fail closed at, and what is needed here (a refill, a sweep of
//! full buckets, a clock passed in so the tests need no sleep) is a few lines.
//!
//! **A reload** (SIGHUP, or the file changed) reads `[limits]` again. The counts carry over
//! ([`RateLimits::carrying`]): the calls a caller made stay spent under the new limits (a
//! raised limit gives it the difference, a lowered one may leave it none), so a reload gives no
//! caller a fresh burst; a tool's count goes with its name, and a tool no longer named loses its
//! count. The callers are told apart
//! as at start (`[identity]` is read once).

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tower_elicitation::VerifiedCaller;

use tower_elicitation::GateTarget;

use crate::config::{Bound, Limits, PrincipalFrom};

/// The JSON-RPC error code of a call refused for a rate limit.
pub const RATE_LIMITED: i64 = -32029;
/// The window the limits count over.
const MINUTE: Duration = Duration::from_secs(60);

/// The file's limits and each caller's counts.
#[derive(Debug)]
pub struct RateLimits {
    /// `calls_per_minute`.
    per_caller: Option<u32>,
    /// `[limits.per_tool]`: an entry (a tool's name or glob), and its limit.
    per_tool: BTreeMap<String, u32>,
    /// Each entry of `per_tool`, in its order, as the tools it matches.
    patterns: Vec<GateTarget>,
    max_callers: usize,
    principal: PrincipalFrom,
    buckets: Mutex<HashMap<Key, Bucket>>,
}

/// Whose count: the caller's digest, and the tool's index in `per_tool` (none: all calls).
type Key = ([u8; 32], Option<usize>);

/// One token bucket.
#[derive(Debug, Clone, Copy)]
struct Bucket {
    /// Tokens left at `at` (a fraction as it refills).
    tokens: f64,
    at: Instant,
}

impl Bucket {
    /// The tokens at `now` of a bucket of `limit` a minute.
    fn tokens(&self, limit: u32, now: Instant) -> f64 {
        let refilled = now.saturating_duration_since(self.at).as_secs_f64() * per_second(limit);
        (self.tokens + refilled).min(f64::from(limit))
    }
}

fn per_second(limit: u32) -> f64 {
    f64::from(limit) / MINUTE.as_secs_f64()
}

/// Why a call is refused.
#[derive(Debug, Clone, PartialEq)]
pub struct Refusal {
    pub message: String,
    /// Whole seconds until a retry may pass (at least 1).
    pub retry_after: u64,
}

impl RateLimits {
    /// The limits `[limits]` sets, callers told apart as `principal` says; `None` when it sets
    /// none.
    ///
    /// # Errors
    ///
    /// A value out of range (the file's check says so first, at its line).
    pub fn new(limits: &Limits, principal: PrincipalFrom) -> Result<Option<Self>, String> {
        let limit = |bound: Bound, given| -> Result<u32, String> {
            let value = bound.of(Some(given))?;
            u32::try_from(value).map_err(|_| format!("{}: too large", bound.key))
        };
        let per_caller = limits
            .calls_per_minute
            .as_ref()
            .map(|given| limit(Bound::CALLS_PER_MINUTE, given))
            .transpose()?;
        let per_tool = limits
            .per_tool
            .iter()
            .map(|(name, given)| Ok((name.clone(), limit(Bound::PER_TOOL, given)?)))
            .collect::<Result<BTreeMap<_, _>, String>>()?;
        if per_caller.is_none() && per_tool.is_empty() {
            return Ok(None);
        }
        let max_callers = Bound::MAX_CALLERS.count(limits.max_callers.as_ref())?;
        let patterns = per_tool
            .keys()
            .map(|entry| crate::targets::target(crate::targets::Kind::Tool, entry))
            .collect::<Result<_, _>>()?;
        Ok(Some(Self {
            per_caller,
            per_tool,
            patterns,
            max_callers,
            principal,
            buckets: Mutex::new(HashMap::new()),
        }))
    }

    /// These limits, with the counts `old` holds: each caller's calls of the minute stay
    /// spent (its tokens are the new limit less what it spent, never below none), its count of
    /// all its calls and of each tool these limits still name.
    pub fn carrying(self, old: &Self) -> Self {
        let old_buckets = old.buckets.lock().unwrap_or_else(|e| e.into_inner());
        let carried = old_buckets.iter().filter_map(|(&(caller, tool), bucket)| {
            let (old_limit, tool, new_limit) = match tool {
                None => (old.per_caller?, None, self.per_caller?),
                Some(index) => {
                    let (name, &old_limit) = old.per_tool.iter().nth(index)?;
                    let index = self.per_tool.keys().position(|listed| listed == name)?;
                    (old_limit, Some(index), self.per_tool[name])
                }
            };
            let spent = f64::from(old_limit) - bucket.tokens;
            let tokens = (f64::from(new_limit) - spent).max(0.0);
            Some((
                (caller, tool),
                Bucket {
                    tokens,
                    at: bucket.at,
                },
            ))
        });
        let mut buckets = self.buckets.lock().unwrap_or_else(|e| e.into_inner());
        buckets.extend(carried.take(self.max_callers));
        drop(buckets);
        self
    }

    /// Counts the request of `parts` and `body` if it is a call, at `now`: `None` when it may
    /// go on, else why not.
    pub fn check(
        &self,
        parts: &http::request::Parts,
        body: &[u8],
        now: Instant,
    ) -> Option<Refusal> {
        let call = Call::read(body)?;
        let (caller, shown) = self.caller_of(parts);
        let tools: Vec<usize> = call.tool().map_or_else(Vec::new, |name| {
            let method = crate::targets::Kind::Tool.method();
            (0..self.patterns.len())
                .filter(|&index| self.patterns[index].applies_to(method, name))
                .collect()
        });
        let refusal = self.take(&caller, &shown, &tools, now)?;
        let principal = parts
            .extensions
            .get::<VerifiedCaller>()
            .map(|caller| caller.principal().to_owned());
        tracing::info!(
            target: crate::decisions::REFUSAL_TARGET,
            outcome = "refused",
            why = "rate_limited",
            method = call.method,
            target = call.target.as_deref(),
            principal = principal.as_deref(),
            reason = %refusal.message,
            "call refused: rate limit"
        );
        Some(refusal)
    }

    /// Takes a token from `caller`'s count, and from its count of each entry of `tools`
    /// (indexes into `per_tool`), or says why not; `shown` names the caller in the message.
    fn take(
        &self,
        caller: &[u8; 32],
        shown: &str,
        tools: &[usize],
        now: Instant,
    ) -> Option<Refusal> {
        let mut wanted: Vec<(Key, u32, String)> = Vec::with_capacity(1 + tools.len());
        if let Some(limit) = self.per_caller {
            wanted.push((
                (*caller, None),
                limit,
                format!("[limits] calls_per_minute = {limit}"),
            ));
        }
        for (index, (name, limit)) in self.per_tool.iter().enumerate() {
            if tools.contains(&index) {
                wanted.push((
                    (*caller, Some(index)),
                    *limit,
                    format!("[limits.per_tool] {name} = {limit}"),
                ));
            }
        }
        let mut buckets = self
            .buckets
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // Room for the counts this caller has none of yet.
        let new = wanted
            .iter()
            .filter(|(key, ..)| !buckets.contains_key(key))
            .count();
        if new > 0 && buckets.len() + new > self.max_callers {
            self.sweep(&mut buckets, now);
            if buckets.len() + new > self.max_callers {
                let retry_after = self.soonest_full(&buckets, now);
                return Some(Refusal {
                    message: format!(
                        "Too many callers at once: the proxy keeps the counts of {} ([limits] max_callers); retry in {retry_after} s",
                        self.max_callers
                    ),
                    retry_after,
                });
            }
        }
        // Every count must have a token before any is taken.
        for (key, limit, named) in &wanted {
            let tokens = buckets
                .get(key)
                .map_or(f64::from(*limit), |bucket| bucket.tokens(*limit, now));
            if tokens < 1.0 {
                let retry_after = seconds((1.0 - tokens) / per_second(*limit));
                return Some(Refusal {
                    message: format!(
                        "Rate limit: {shown} made {limit} calls in the last minute, the most {named} allows; retry in {retry_after} s"
                    ),
                    retry_after,
                });
            }
        }
        for (key, limit, _) in wanted {
            let bucket = buckets.entry(key).or_insert(Bucket {
                tokens: f64::from(limit),
                at: now,
            });
            bucket.tokens = bucket.tokens(limit, now) - 1.0;
            bucket.at = now;
        }
        None
    }

    /// The limit of the count `key` is of.
    fn limit_of(&self, key: &Key) -> u32 {
        match key.1 {
            None => self.per_caller.unwrap_or(1),
            Some(index) => self.per_tool.values().nth(index).copied().unwrap_or(1),
        }
    }

    /// Drops the counts whose buckets are full again at `now`: they are the same as none.
    fn sweep(&self, buckets: &mut HashMap<Key, Bucket>, now: Instant) {
        buckets.retain(|key, bucket| {
            let limit = self.limit_of(key);
            bucket.tokens(limit, now) < f64::from(limit)
        });
    }

    /// Whole seconds until the first count in `buckets` is full again.
    fn soonest_full(&self, buckets: &HashMap<Key, Bucket>, now: Instant) -> u64 {
        let soonest = buckets
            .iter()
            .map(|(key, bucket)| {
                let limit = self.limit_of(key);
                (f64::from(limit) - bucket.tokens(limit, now)) / per_second(limit)
            })
            .fold(MINUTE.as_secs_f64(), f64::min);
        seconds(soonest)
    }

    /// The caller of `parts`, as a digest and as the message names it.
    fn caller_of(&self, parts: &http::request::Parts) -> ([u8; 32], String) {
        let named = match &self.principal {
            PrincipalFrom::Verified => parts
                .extensions
                .get::<VerifiedCaller>()
                .map(|caller| ("verified", caller.principal().as_bytes().to_vec())),
            PrincipalFrom::Header(name) => parts
                .headers
                .get(name)
                .map(|value| ("header", value.as_bytes().to_vec())),
            PrincipalFrom::Nobody => None,
        };
        match named {
            Some((kind, name)) => {
                let digest = Sha256::new()
                    .chain_update(kind)
                    .chain_update([0])
                    .chain_update(&name)
                    .finalize();
                let shown = match (kind, std::str::from_utf8(&name)) {
                    ("verified", Ok(name)) => format!("caller {}", crate::shown::quoted(name, 100)),
                    _ => "this caller".to_owned(),
                };
                (digest.into(), shown)
            }
            None => ([0; 32], "the anonymous caller".to_owned()),
        }
    }
}

/// Whole seconds, at least 1, of `secs`.
fn seconds(secs: f64) -> u64 {
    // At most a minute: a bucket of 1 a minute refills in 60 s.
    (secs.ceil() as u64).clamp(1, MINUTE.as_secs())
}

/// The methods that count.
const COUNTED: [&str; 3] = ["tools/call", "prompts/get", "resources/read"];

/// A request that counts: a call, not a retry of one.
struct Call {
    /// Its method, one of [`COUNTED`].
    method: &'static str,
    /// What it calls: the tool's or prompt's name, or the resource's URI.
    target: Option<String>,
}

impl Call {
    /// The call `body` is, or `None` when it does not count.
    fn read(body: &[u8]) -> Option<Self> {
        // Most requests are not calls: no parse for them.
        if !COUNTED.iter().any(|m| contains(body, m.as_bytes())) {
            return None;
        }
        let message: Value = serde_json::from_slice(body).ok()?;
        let given = message.get("method")?.as_str()?;
        let method = *COUNTED.iter().find(|counted| **counted == given)?;
        let params = message.get("params");
        if params.is_some_and(|params| params.get("requestState").is_some()) {
            return None;
        }
        let key = if method == "resources/read" {
            "uri"
        } else {
            "name"
        };
        let target = params
            .and_then(|p| p.get(key))
            .and_then(Value::as_str)
            .map(str::to_owned);
        Some(Self { method, target })
    }

    /// The tool's name, for a `tools/call`.
    fn tool(&self) -> Option<&str> {
        (self.method == "tools/call")
            .then_some(self.target.as_deref())
            .flatten()
    }
}

/// Whether `needle` occurs in `haystack`.
fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// The answer to a refused request whose body is `body`: HTTP 429 with `Retry-After`, and a
/// JSON-RPC error with the request's id.
pub fn refused(body: &[u8], refusal: &Refusal) -> Response {
    let id = serde_json::from_slice::<Value>(body)
        .ok()
        .and_then(|message| message.get("id").cloned())
        .unwrap_or(Value::Null);
    let error = json!({"jsonrpc": "2.0", "id": id, "error": {
        "code": RATE_LIMITED,
        "message": refusal.message,
        "data": {"retryAfterSeconds": refusal.retry_after},
    }});
    (
        http::StatusCode::TOO_MANY_REQUESTS,
        [(http::header::RETRY_AFTER, refusal.retry_after.to_string())],
        axum::Json(error),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(text: &str) -> RateLimits {
        let limits: Limits = toml::from_str(text).unwrap();
        RateLimits::new(&limits, PrincipalFrom::Verified)
            .unwrap()
            .unwrap()
    }

    fn parts(caller: Option<&str>) -> http::request::Parts {
        let mut request = http::Request::post("/mcp").body(()).unwrap();
        if let Some(name) = caller {
            request
                .extensions_mut()
                .insert(VerifiedCaller::new(name, serde_json::Map::new()));
        }
        request.into_parts().0
    }

    fn call(tool: &str) -> Vec<u8> {
        json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
            "params": {"name": tool, "arguments": {}}})
        .to_string()
        .into_bytes()
    }

    #[test]
    fn a_caller_gets_its_limit_then_one_call_each_share_of_the_minute() {
        let limits = limits("calls_per_minute = 2\n");
        let t0 = Instant::now();
        let alice = parts(Some("alice"));
        assert_eq!(limits.check(&alice, &call("read"), t0), None);
        assert_eq!(limits.check(&alice, &call("read"), t0), None);
        let refusal = limits.check(&alice, &call("read"), t0).unwrap();
        assert_eq!(refusal.retry_after, 30);
        assert!(
            refusal.message.contains("calls_per_minute = 2"),
            "{refusal:?}"
        );
        assert!(refusal.message.contains("\"alice\""), "{refusal:?}");
        // Another caller has a count of its own.
        assert_eq!(limits.check(&parts(Some("bob")), &call("read"), t0), None);
        // Half a minute refills one call, not two.
        let later = t0 + Duration::from_secs(29);
        assert_eq!(
            limits
                .check(&alice, &call("read"), later)
                .unwrap()
                .retry_after,
            1
        );
        let later = t0 + Duration::from_secs(30);
        assert_eq!(limits.check(&alice, &call("read"), later), None);
        assert!(limits.check(&alice, &call("read"), later).is_some());
    }

    #[test]
    fn a_reload_carries_the_counts_over_to_the_new_limits() {
        let t0 = Instant::now();
        let alice = parts(Some("alice"));
        let old = limits("calls_per_minute = 2\n[per_tool]\nwrite_file = 1\nmove_file = 1\n");
        assert_eq!(old.check(&alice, &call("write_file"), t0), None);
        assert_eq!(old.check(&alice, &call("move_file"), t0), None);
        // Raised from 2 to 3 a minute: the two calls made stay spent, one is left.
        let new = limits("calls_per_minute = 3\n[per_tool]\nmove_file = 5\n").carrying(&old);
        assert_eq!(new.check(&alice, &call("read"), t0), None);
        assert!(new.check(&alice, &call("read"), t0).is_some());
        // Bob made no call before: his count starts full.
        let bob = parts(Some("bob"));
        assert_eq!(new.check(&bob, &call("read"), t0), None);
        // move_file's count went with its name: 1 of its (now) 5 spent; alice's 3 of 100.
        let again = limits("calls_per_minute = 100\n[per_tool]\nmove_file = 5\n").carrying(&new);
        for _ in 0..4 {
            assert_eq!(again.check(&alice, &call("move_file"), t0), None);
        }
        assert!(again.check(&alice, &call("move_file"), t0).is_some());
        // Lowered below what was spent: none left (not less than none: a count is of a minute).
        let fifty = limits("calls_per_minute = 50\n");
        for _ in 0..3 {
            assert_eq!(fifty.check(&bob, &call("read"), t0), None);
        }
        let lowered = limits("calls_per_minute = 2\n").carrying(&fifty);
        assert!(lowered.check(&bob, &call("read"), t0).is_some());
        // Raised again: the lowered count held 2 spent (its whole limit), so 2 of 4 are left.
        let raised = limits("calls_per_minute = 4\n").carrying(&lowered);
        assert_eq!(raised.check(&bob, &call("read"), t0), None);
        assert_eq!(raised.check(&bob, &call("read"), t0), None);
        assert!(raised.check(&bob, &call("read"), t0).is_some());
    }

    #[test]
    fn a_glob_counts_every_tool_it_matches_together_besides_a_names_own() {
        let limits = limits("[per_tool]\n\"fs_*\" = 2\nfs_write_file = 1\n");
        let t0 = Instant::now();
        let alice = parts(Some("alice"));
        assert_eq!(limits.check(&alice, &call("fs_write_file"), t0), None);
        // Its own entry is spent, the glob's is not.
        let refusal = limits.check(&alice, &call("fs_write_file"), t0).unwrap();
        assert!(
            refusal
                .message
                .contains("[limits.per_tool] fs_write_file = 1"),
            "{refusal:?}"
        );
        assert_eq!(limits.check(&alice, &call("fs_read_file"), t0), None);
        // Two of the glob's tools: its count is spent, whichever tool comes next.
        let refusal = limits.check(&alice, &call("fs_list"), t0).unwrap();
        assert!(
            refusal.message.contains("[limits.per_tool] fs_* = 2"),
            "{refusal:?}"
        );
        // A tool it does not match is not counted.
        assert_eq!(limits.check(&alice, &call("notes_add"), t0), None);
        assert_eq!(limits.check(&alice, &call("notes_add"), t0), None);
    }

    #[test]
    fn retries_lists_and_answers_do_not_count() {
        let limits = limits("calls_per_minute = 1\n");
        let t0 = Instant::now();
        let alice = parts(Some("alice"));
        assert_eq!(limits.check(&alice, &call("write_file"), t0), None);
        let retry = json!({"jsonrpc": "2.0", "id": 8, "method": "tools/call",
            "params": {"name": "write_file", "arguments": {}, "requestState": "v1.x",
                "inputResponses": {}}});
        let listing = json!({"jsonrpc": "2.0", "id": 9, "method": "tools/list"});
        let answer = json!({"jsonrpc": "2.0", "id": 0, "result": {"action": "accept"}});
        for body in [retry, listing, answer] {
            assert_eq!(limits.check(&alice, body.to_string().as_bytes(), t0), None);
        }
        let read = json!({"jsonrpc": "2.0", "id": 10, "method": "resources/read",
            "params": {"uri": "file:///a"}});
        assert!(
            limits
                .check(&alice, read.to_string().as_bytes(), t0)
                .is_some()
        );
    }

    #[test]
    fn a_tools_limit_counts_its_calls_apart_and_a_refusal_takes_nothing() {
        let limits = limits("calls_per_minute = 3\n[per_tool]\nwrite_file = 1\n");
        let t0 = Instant::now();
        let alice = parts(Some("alice"));
        assert_eq!(limits.check(&alice, &call("write_file"), t0), None);
        let refusal = limits.check(&alice, &call("write_file"), t0).unwrap();
        assert!(
            refusal.message.contains("[limits.per_tool] write_file = 1"),
            "{refusal:?}"
        );
        assert_eq!(refusal.retry_after, 60);
        // The refused write took none of the three: two more calls pass.
        assert_eq!(limits.check(&alice, &call("read_file"), t0), None);
        assert_eq!(limits.check(&alice, &call("read_file"), t0), None);
        assert!(limits.check(&alice, &call("read_file"), t0).is_some());
    }

    #[test]
    fn unverified_callers_share_the_anonymous_count() {
        let limits = limits("calls_per_minute = 1\n");
        let t0 = Instant::now();
        let mut one = parts(None);
        one.headers
            .insert(http::header::AUTHORIZATION, "Bearer one".parse().unwrap());
        let mut two = parts(None);
        two.headers
            .insert(http::header::AUTHORIZATION, "Bearer two".parse().unwrap());
        assert_eq!(limits.check(&one, &call("read"), t0), None);
        let refusal = limits.check(&two, &call("read"), t0).unwrap();
        assert!(refusal.message.contains("anonymous"), "{refusal:?}");
    }

    #[test]
    fn a_full_table_drops_full_counts_and_else_refuses() {
        let limits = limits("calls_per_minute = 2\nmax_callers = 2\n");
        let t0 = Instant::now();
        assert_eq!(limits.check(&parts(Some("a")), &call("x"), t0), None);
        assert_eq!(limits.check(&parts(Some("b")), &call("x"), t0), None);
        let refusal = limits.check(&parts(Some("c")), &call("x"), t0).unwrap();
        assert!(refusal.message.contains("max_callers"), "{refusal:?}");
        // One token back in 30 s, the count full again in 30.
        assert_eq!(refusal.retry_after, 30);
        let later = t0 + Duration::from_secs(30);
        assert_eq!(limits.check(&parts(Some("c")), &call("x"), later), None);
        assert_eq!(limits.buckets.lock().unwrap().len(), 1);
    }

    #[test]
    fn no_limit_set_is_no_limiter() {
        let none: Limits = toml::from_str("max_callers = 5\n").unwrap();
        assert!(
            RateLimits::new(&none, PrincipalFrom::Verified)
                .unwrap()
                .is_none()
        );
    }
}

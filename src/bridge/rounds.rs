//! The MRTR loop at the bridge: each `input_required` of the inner service becomes requests on
//! the call's event stream, the client's answers become the retry's `inputResponses`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::request::Parts;
use http::{Request, Response};
use serde_json::{Map, Value, json};
use tokio::sync::OwnedSemaphorePermit;
use tokio::time::Instant;
use tower_service::Service;
use tracing::Instrument as _;

use super::body::{RequestBody, ResponseBody};
use super::config::{KEEP_ALIVE, Settings};
use super::events::{EventSender, StreamKind};
use super::inner::{self, InnerBody, Message, Reader};
use crate::store::AnswerKey;
use crate::store::SessionRecord;
use crate::texts;
use crate::util::BoxFuture;
use crate::util::ids::{random_hex_64, uuid_v4};
use crate::wire::jsonrpc::{self, INTERNAL_ERROR, RpcError};
use crate::wire::legacy::{self, down_level, missing_capability, tool_error};
use crate::wire::mcp::{Declared, InputKind, Method};

/// How the bridge's request ids on a call's stream begin.
pub(crate) const LEG_PREFIX: &str = "leg-";
/// How often a call waiting for the client's answer checks that its session still lives (it may
/// have been ended by a DELETE on any replica, or lost with the store's data).
const SESSION_CHECK: Duration = Duration::from_secs(2);
/// The wait before retrying a round that carried only a `requestState`.
const STATE_ONLY_DELAY: Duration = Duration::from_millis(250);

/// The key a call's cancellation is delivered under: the client's request id, as JSON text.
pub(crate) fn cancel_leg(request_id: &Value) -> String {
    format!("cancel:{request_id}")
}

/// A 2025 `tools/call`, `prompts/get` or `resources/read`, about to be bridged.
pub(crate) struct BridgedCall {
    pub(crate) settings: Arc<Settings>,
    pub(crate) parts: Parts,
    pub(crate) session: Option<String>,
    pub(crate) record: SessionRecord,
    /// The client's request id.
    pub(crate) id: Value,
    pub(crate) method: Method,
    /// The 2026 params of the first round (`_meta` included).
    pub(crate) params: Map<String, Value>,
}

/// Answers the call with an event stream and runs its rounds in a task of their own, in the
/// span of the request that made it (what is logged, and traced, of the rounds is that
/// request's).
pub(crate) fn start<S, ResBody>(inner: S, call: BridgedCall) -> Response<ResponseBody<ResBody>>
where
    S: Service<Request<RequestBody>, Response = Response<ResBody>> + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    ResBody: InnerBody + Send + 'static,
{
    let (events, response) = EventSender::open(StreamKind::Post, &call.record.protocol_version);
    tokio::spawn(run(inner, call, events).in_current_span());
    response
}

/// The call's stream toward the client.
struct CallStream {
    events: EventSender,
    /// The last progress relayed per progress token (it must increase).
    progress: Mutex<HashMap<String, f64>>,
}

impl CallStream {
    async fn send(&self, message: &Value) {
        self.events.send(message).await;
    }

    async fn keep_alive(&self) {
        self.events.keep_alive().await;
    }

    /// Relays the inner's progress (only forward: it must increase) and log messages.
    async fn relay(&self, notification: Value) {
        match notification.get("method").and_then(Value::as_str) {
            Some("notifications/message") => self.send(&notification).await,
            Some("notifications/progress") => {
                let params = notification.get("params");
                let token = params
                    .and_then(|p| p.get("progressToken"))
                    .map(Value::to_string);
                let progress = params
                    .and_then(|p| p.get("progress"))
                    .and_then(Value::as_f64);
                let (Some(token), Some(progress)) = (token, progress) else {
                    return;
                };
                let forward = {
                    let mut last = self.progress.lock().unwrap_or_else(|e| e.into_inner());
                    match last.get(&token) {
                        Some(previous) if *previous >= progress => false,
                        _ => {
                            last.insert(token, progress);
                            true
                        }
                    }
                };
                if forward {
                    self.send(&notification).await;
                }
            }
            _ => {}
        }
    }
}

async fn run<S, ResBody>(mut inner: S, call: BridgedCall, events: EventSender)
where
    S: Service<Request<RequestBody>, Response = Response<ResBody>>,
    ResBody: InnerBody,
{
    let out = CallStream {
        events,
        progress: Mutex::default(),
    };
    let pending = Arc::clone(&call.settings.pending);
    let cancel_key = call
        .session
        .as_ref()
        .map(|session| AnswerKey::new(session.clone(), cancel_leg(&call.id)));
    let cancelled = match &cancel_key {
        Some(key) => pending.subscribe(key.clone()).await.ok(),
        None => None,
    };
    let cancelled = async move {
        match cancelled {
            // Only a delivery cancels; a waiter the store gave up on does not.
            Some(waiter) => {
                if waiter.await.is_none() {
                    std::future::pending::<()>().await;
                }
            }
            None => std::future::pending().await,
        }
    };
    let legs = Mutex::new(Vec::new());
    let mut was_cancelled = false;
    let outcome = tokio::select! {
        biased;
        () = out.events.closed() => {
            tracing::debug!("the client closed the call's stream: the call ends");
            None
        }
        () = cancelled => {
            tracing::debug!("the client cancelled the call");
            was_cancelled = true;
            None
        }
        outcome = rounds(&mut inner, &call, &out, &legs) => Some(outcome),
    };
    if let Some(key) = &cancel_key {
        let _ = pending.unsubscribe(key).await;
    }
    let waiting = std::mem::take(&mut *legs.lock().unwrap_or_else(|e| e.into_inner()));
    for key in &waiting {
        let _ = pending.unsubscribe(key).await;
        // The client cancelled its call: its open requests (dialogs) are cancelled too.
        if was_cancelled && let Ok(id) = serde_json::from_str::<Value>(&key.request) {
            out.send(&cancellation(id, texts::BRIDGE_CALL_CANCELLED))
                .await;
        }
    }
    if let Some(response) = outcome {
        out.send(&response).await;
    }
}

/// A request of the round the bridge sent the client on the call's stream, waiting for its
/// answer.
struct OpenRequest {
    /// The `inputRequests` key it asks.
    key: String,
    /// Its JSON-RPC id on the stream.
    id: Value,
    /// Where its answer is delivered.
    answer_key: AnswerKey,
    /// Resolves with the answer, or `None` when the store gave up on it.
    answer: BoxFuture<'static, Option<Value>>,
    /// Its method (`elicitation/create`, …), for what is said when it fails.
    method: String,
}

/// The first of `open` to be answered: its index and the answer.
async fn next_answer(open: &mut [OpenRequest]) -> (usize, Option<Value>) {
    std::future::poll_fn(|cx| {
        for (index, request) in open.iter_mut().enumerate() {
            if let std::task::Poll::Ready(answer) = request.answer.as_mut().poll(cx) {
                return std::task::Poll::Ready((index, answer));
            }
        }
        std::task::Poll::Pending
    })
    .await
}

/// Stops waiting for `open`, and tells the client its requests are cancelled.
async fn cancel_all(settings: &Settings, out: &CallStream, open: Vec<OpenRequest>, reason: &str) {
    for request in open {
        let _ = settings.pending.unsubscribe(&request.answer_key).await;
        out.send(&cancellation(request.id, reason)).await;
    }
}

/// `notifications/cancelled` for the bridge's request `id`.
fn cancellation(id: Value, reason: &str) -> Value {
    json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": {"requestId": id, "reason": reason}})
}

/// A URL flow asked of the client, for as long as the inner service asks it.
struct UrlLeg {
    url: Value,
    elicitation_id: String,
    /// The message it was first asked with (a re-ask adds the "not finished" hint to it).
    message: Value,
    /// The client's answer while it is an accept (consent to the flow); `None` otherwise.
    answer: Option<Value>,
    /// When the person first accepted this flow: the URL wait is timed from it.
    first_accepted: Option<Instant>,
    /// When the person last accepted it: the grace before a re-ask is timed from it.
    accepted_at: Option<Instant>,
}

/// Runs the rounds; the JSON-RPC response that ends the call.
async fn rounds<S, ResBody>(
    inner: &mut S,
    call: &BridgedCall,
    out: &CallStream,
    legs: &Mutex<Vec<AnswerKey>>,
) -> Value
where
    S: Service<Request<RequestBody>, Response = Response<ResBody>>,
    ResBody: InnerBody,
{
    match drive(inner, call, out, legs).await {
        Ok(response) => response,
        Err(text) => {
            tracing::debug!(%text, "a bridged call failed");
            failure(call, &text)
        }
    }
}

/// The call's end when the bridge cannot finish it: a tool error for `tools/call`, `-32603` for
/// the others.
fn failure(call: &BridgedCall, text: &str) -> Value {
    match call.method {
        Method::ToolsCall => jsonrpc::response(&call.id, Ok(tool_error(text))),
        _ => jsonrpc::response(&call.id, Err(RpcError::new(INTERNAL_ERROR, text))),
    }
}

/// Runs rounds until the inner service ends the call: its response, or what keeps it from ending.
async fn drive<S, ResBody>(
    inner: &mut S,
    call: &BridgedCall,
    out: &CallStream,
    legs: &Mutex<Vec<AnswerKey>>,
) -> Result<Value, String>
where
    S: Service<Request<RequestBody>, Response = Response<ResBody>>,
    ResBody: InnerBody,
{
    let settings = &call.settings;
    let mut params = call.params.clone();
    let mut round = 0u32;
    let count_round = |round: &mut u32| {
        *round += 1;
        if *round > settings.max_rounds {
            return Err(texts::bridge_too_many_rounds(settings.max_rounds));
        }
        Ok(())
    };
    let mut permit: Option<OwnedSemaphorePermit> = None;
    let mut urls: HashMap<String, UrlLeg> = HashMap::new();
    let mut url_wait = settings.url_retry;
    // What the client can be asked: its session's capabilities, read once for every round.
    let declared = legacy::declared(&call.record.client_capabilities);
    loop {
        let response = ask_inner(inner, call, &params, out).await?;
        let mut result = match inner_answer(call, response)? {
            InnerAnswer::Final(response) => {
                complete_urls(out, &mut urls, |_| true).await;
                return Ok(response);
            }
            InnerAnswer::InputRequired(result) => result,
        };
        let requests = match result.remove("inputRequests") {
            Some(Value::Object(requests)) => requests,
            _ => Map::new(),
        };
        let state = result.remove("requestState");
        // A URL flow the inner no longer asks about has completed.
        complete_urls(out, &mut urls, |key| !requests.contains_key(key)).await;
        let responses = if requests.is_empty() {
            count_round(&mut round)?;
            if state.is_none() {
                return Err("The inner service asked for input without any input request".into());
            }
            tokio::time::sleep(STATE_ONLY_DELAY).await;
            Map::new()
        } else {
            let RoundInputs {
                mut responses,
                asks,
                waiting,
            } = sort_input_requests(call, declared, requests, &urls)?;
            let asks = if asks.is_empty() {
                // Only URL flows the person accepted that are not complete yet: the person's
                // wait, not a round.
                url_wait_step(settings, &urls, waiting, &mut url_wait).await?
            } else {
                count_round(&mut round)?;
                asks
            };
            if !asks.is_empty() {
                hold_waiting_permit(settings, &mut permit)?;
                let answers = ask_client(call, out, legs, asks, &mut urls).await?;
                responses.extend(answers);
                url_wait = settings.url_retry;
            }
            responses
        };
        params = retry_params(call, responses, state);
    }
}

/// One step of the wait for URL flows the person accepted but the inner service still asks
/// (`waiting`): past [`Settings::url_wait_timeout`] the call ends; the flows accepted longer than
/// [`Settings::url_grace`] ago are returned, to be asked again with the "not finished" hint;
/// otherwise it sleeps (1, 2, 4… times `url_retry`, never past the grace) and returns none.
async fn url_wait_step(
    settings: &Settings,
    urls: &HashMap<String, UrlLeg>,
    waiting: Vec<(String, Value)>,
    url_wait: &mut Duration,
) -> Result<Vec<Ask>, String> {
    let now = Instant::now();
    let mut next = now + *url_wait;
    let mut due = Vec::new();
    for (key, request) in waiting {
        let Some(leg) = urls.get(&key) else { continue };
        let (Some(first), Some(last)) = (leg.first_accepted, leg.accepted_at) else {
            continue;
        };
        let deadline = first + settings.url_wait_timeout;
        if now >= deadline {
            return Err(texts::bridge_url_not_finished(settings.url_wait_timeout));
        }
        let grace_ends = last + settings.url_grace;
        if now >= grace_ends {
            due.push(Ask {
                request: not_finished(request, leg),
                key,
                url: true,
            });
        } else {
            next = next.min(grace_ends).min(deadline);
        }
    }
    if due.is_empty() {
        tokio::time::sleep_until(next).await;
        *url_wait = (*url_wait * 2).min(settings.url_retry * 10);
    }
    Ok(due)
}

/// The URL request asked again: its message gains the "not finished" hint, unless the inner
/// service already changed it (a gate's own re-ask says so itself).
fn not_finished(mut request: Value, leg: &UrlLeg) -> Value {
    if let Some(params) = request.get_mut("params").and_then(Value::as_object_mut) {
        let message = params.get("message").cloned().unwrap_or(Value::Null);
        if message == leg.message || message.is_null() {
            let text = message.as_str().unwrap_or_default();
            let hint = [texts::URL_NOT_FINISHED.to_owned()];
            params.insert(
                "message".to_owned(),
                Value::String(texts::after_message(text, &hint)),
            );
        }
    }
    request
}

/// What the inner service answered a round with.
enum InnerAnswer {
    /// The call's end: the JSON-RPC response for the client.
    Final(Value),
    /// An `input_required` result, taken out of the response.
    InputRequired(Map<String, Value>),
}

/// Reads the inner's response to a round: the call's end, or its `input_required` result.
fn inner_answer(call: &BridgedCall, mut response: Value) -> Result<InnerAnswer, String> {
    if let Some(Value::Object(error)) = response.get("error") {
        return Ok(InnerAnswer::Final(inner_error(call, error)));
    }
    let Some(Value::Object(result)) = response.get_mut("result").map(Value::take) else {
        return Err("The inner service's result is not an object".to_owned());
    };
    match result.get("resultType").and_then(Value::as_str) {
        None | Some("complete") => {
            let result = legacy::legacy_result(result);
            Ok(InnerAnswer::Final(jsonrpc::response(
                &call.id,
                Ok(Value::Object(result)),
            )))
        }
        Some("input_required") => Ok(InnerAnswer::InputRequired(result)),
        Some(other) => Err(format!(
            "The inner service answered a result of type '{other}', which a 2025 client cannot take"
        )),
    }
}

/// A request to put to the client: its `inputRequests` key, the request down-leveled, and
/// whether it is a URL flow (classified once, when the round's requests are sorted).
struct Ask {
    key: String,
    request: Value,
    url: bool,
}

/// A round's input requests, down-leveled and sorted by who answers them.
struct RoundInputs {
    /// The `inputResponses` of URL flows already consented to, by key.
    responses: Map<String, Value>,
    /// The requests to ask the client.
    asks: Vec<Ask>,
    /// The URL requests of flows the person accepted, asked again by the inner service, by key.
    waiting: Vec<(String, Value)>,
}

/// Down-levels a round's input requests: answers from consented URL flows, and the ones to ask;
/// a request of a kind not in `declared` (the client's, read once a call) ends the call.
fn sort_input_requests(
    call: &BridgedCall,
    declared: Declared,
    requests: Map<String, Value>,
    urls: &HashMap<String, UrlLeg>,
) -> Result<RoundInputs, String> {
    let mut responses = Map::new();
    let mut asks = Vec::new();
    let mut waiting = Vec::new();
    for (key, request) in requests {
        let kind = InputKind::of(&request);
        if let Some(missing) = missing_capability(kind, declared) {
            return Err(format!(
                "The client did not declare the {missing} capability, which the input request '{key}' needs."
            ));
        }
        let request = down_level(request, &call.record.protocol_version)?;
        let url = kind == Some(InputKind::Url);
        // Consent already given for this flow: ask the inner again later, not the person.
        if url
            && let Some(leg) = urls.get(&key)
            && request.pointer("/params/url") == Some(&leg.url)
            && let Some(answer) = &leg.answer
        {
            responses.insert(key.clone(), answer.clone());
            waiting.push((key, request));
            continue;
        }
        asks.push(Ask { key, request, url });
    }
    Ok(RoundInputs {
        responses,
        asks,
        waiting,
    })
}

/// Takes one of the places of the calls waiting for a client's answer, unless the call holds one.
fn hold_waiting_permit(
    settings: &Settings,
    permit: &mut Option<OwnedSemaphorePermit>,
) -> Result<(), String> {
    if permit.is_none() {
        let Ok(acquired) = Arc::clone(&settings.waiting).try_acquire_owned() else {
            return Err(texts::BRIDGE_TOO_MANY_WAITING.to_owned());
        };
        *permit = Some(acquired);
    }
    Ok(())
}

/// The params of the next round: the first round's, with its `inputResponses` and `requestState`.
fn retry_params(
    call: &BridgedCall,
    responses: Map<String, Value>,
    state: Option<Value>,
) -> Map<String, Value> {
    let mut params = call.params.clone();
    if !responses.is_empty() {
        params.insert("inputResponses".to_owned(), Value::Object(responses));
    }
    if let Some(state) = state {
        params.insert("requestState".to_owned(), state);
    }
    params
}

/// An inner JSON-RPC error as the call's end. A missing capability is said in words for a tool.
fn inner_error(call: &BridgedCall, error: &Map<String, Value>) -> Value {
    let code = error.get("code").and_then(Value::as_i64);
    if call.method == Method::ToolsCall
        && code == Some(crate::wire::jsonrpc::MISSING_REQUIRED_CLIENT_CAPABILITY)
    {
        let required = error
            .get("data")
            .and_then(|d| d.get("requiredCapabilities"))
            .map_or_else(|| "{}".to_owned(), Value::to_string);
        let text = format!("The client lacks a capability this tool needs: {required}");
        return jsonrpc::response(&call.id, Ok(tool_error(&text)));
    }
    let error = legacy::legacy_error(error.clone());
    jsonrpc::response(&call.id, Err(RpcError::relayed(Value::Object(error))))
}

/// Tells the client the URL flows for which `done` holds, and that the person accepted, are
/// complete. A flow declined or cancelled is forgotten without a word: it did not complete.
async fn complete_urls(
    out: &CallStream,
    urls: &mut HashMap<String, UrlLeg>,
    done: impl Fn(&str) -> bool,
) {
    let finished: Vec<String> = urls.keys().filter(|k| done(k)).cloned().collect();
    for key in finished {
        if let Some(leg) = urls.remove(&key)
            && leg.answer.is_some()
        {
            let notification = json!({"jsonrpc": "2.0", "method": "notifications/elicitation/complete",
                "params": {"elicitationId": leg.elicitation_id}});
            out.send(&notification).await;
        }
    }
}

/// One round to the inner service: notifications relayed, the response returned.
async fn ask_inner<S, ResBody>(
    inner: &mut S,
    call: &BridgedCall,
    params: &Map<String, Value>,
    out: &CallStream,
) -> Result<Value, String>
where
    S: Service<Request<RequestBody>, Response = Response<ResBody>>,
    ResBody: InnerBody,
{
    let method = call.method.as_str();
    let name = params
        .get(call.method.target_field())
        .and_then(Value::as_str);
    let tool = name.filter(|_| call.method == Method::ToolsCall);
    if let Some(tool) = tool
        && !call.settings.tool_headers.knows(tool)
    {
        learn_tools(inner, call).await;
    }
    let mut relearnt = false;
    loop {
        let id = call.settings.inner_id();
        let mut request = inner::request(&call.parts, &id, method, name, params);
        if let Some(tool) = tool {
            let arguments = params.get("arguments").unwrap_or(&Value::Null);
            request
                .headers_mut()
                .extend(call.settings.tool_headers.headers(tool, arguments));
        }
        let Ok(response) = inner::call(inner, request).await else {
            return Err("The inner service failed".to_owned());
        };
        let mut reader = Reader::new(response);
        let response = loop {
            match reader.next().await? {
                Message::Notification(notification) => out.relay(notification).await,
                Message::Response(response) => break response,
            }
        };
        // A header the inner requires and the bridge did not know of: its tools changed.
        let missing_header = response.pointer("/error/code") == Some(&json!(HEADER_MISMATCH));
        if tool.is_some() && missing_header && !relearnt {
            relearnt = true;
            learn_tools(inner, call).await;
            continue;
        }
        return Ok(response);
    }
}

/// The inner's `-32020`: a required 2026 header is missing or does not match the body.
const HEADER_MISMATCH: i64 = -32020;
/// The most `tools/list` pages read when learning the inner's tools.
const MAX_TOOL_PAGES: usize = 16;

/// Asks the inner service for its tools (every page, up to a bound) and learns their
/// `x-mcp-header` arguments; a failure leaves what is known as it was.
async fn learn_tools<S, ResBody>(inner: &mut S, call: &BridgedCall)
where
    S: Service<Request<RequestBody>, Response = Response<ResBody>>,
    ResBody: InnerBody,
{
    let (settings, parts, record) = (&call.settings, &call.parts, &call.record);
    let client = legacy::Client {
        capabilities: &record.client_capabilities,
        info: &record.client_info,
        log_level: record.log_level.as_deref(),
    };
    let mut cursor: Option<Value> = None;
    for _ in 0..MAX_TOOL_PAGES {
        let mut params = legacy::modern_params(None, &client);
        if let Some(cursor) = cursor.take() {
            params.insert("cursor".to_owned(), cursor);
        }
        let id = settings.inner_id();
        let request = inner::request(parts, &id, "tools/list", None, &params);
        let Ok(response) = inner::call(inner, request).await else {
            return;
        };
        let mut reader = Reader::new(response);
        let result = loop {
            match reader.next().await {
                Ok(Message::Notification(_)) => {}
                Ok(Message::Response(response)) => break response.get("result").cloned(),
                Err(_) => break None,
            }
        };
        let Some(result) = result else {
            return;
        };
        settings.tool_headers.learn(&result);
        match result.get("nextCursor") {
            Some(next @ Value::String(_)) => cursor = Some(next.clone()),
            _ => return,
        }
    }
}

/// Sends one round's requests on the call's stream, all at once, and waits for every answer.
async fn ask_client(
    call: &BridgedCall,
    out: &CallStream,
    legs: &Mutex<Vec<AnswerKey>>,
    asks: Vec<Ask>,
    urls: &mut HashMap<String, UrlLeg>,
) -> Result<Map<String, Value>, String> {
    let settings = &call.settings;
    let Some(session) = &call.session else {
        return Err("The client has no session to answer in.".to_owned());
    };
    let mut waiting: Vec<OpenRequest> = Vec::new();
    for Ask {
        key,
        mut request,
        url,
    } in asks
    {
        let id = format!("{LEG_PREFIX}{}", random_hex_64());
        if url {
            start_url_flow(&key, &mut request, urls);
        }
        waiting.push(send_request(settings, session, out, legs, key, id, request).await?);
    }
    let answers = wait_for_answers(settings, session, out, legs, waiting, urls).await;
    if let Err(Unanswered::Timeout(_)) = &answers {
        // Nothing was decided, and nothing runs: the decision log's own outcome.
        let called = call
            .params
            .get(call.method.target_field())
            .and_then(|name| name.as_str())
            .unwrap_or_default();
        tracing::info!(
            target: "tower_elicitation",
            method = call.method.as_str(),
            target = called,
            outcome = "unanswered",
            why = "timeout",
            "the client did not answer the bridge's requests in time"
        );
    }
    answers.map_err(Unanswered::into_text)
}

/// Why a round's requests were not all answered.
enum Unanswered {
    /// The answer timeout passed.
    Timeout(String),
    /// A request failed, or the session ended.
    Failed(String),
}

impl Unanswered {
    fn into_text(self) -> String {
        match self {
            Self::Timeout(text) | Self::Failed(text) => text,
        }
    }
}

/// Gives a URL request its flow's `elicitationId` (kept while its URL is unchanged); records it.
fn start_url_flow(key: &str, request: &mut Value, urls: &mut HashMap<String, UrlLeg>) {
    let url = request
        .pointer("/params/url")
        .cloned()
        .unwrap_or(Value::Null);
    let leg = match urls.remove(key) {
        // The same flow asked again: its id, first message and wait carry on.
        Some(leg) if leg.url == url => UrlLeg {
            answer: None,
            ..leg
        },
        _ => UrlLeg {
            url,
            elicitation_id: uuid_v4(),
            message: request
                .pointer("/params/message")
                .cloned()
                .unwrap_or(Value::Null),
            answer: None,
            first_accepted: None,
            accepted_at: None,
        },
    };
    if let Some(params) = request.get_mut("params").and_then(Value::as_object_mut) {
        params.insert("elicitationId".to_owned(), json!(leg.elicitation_id));
    }
    urls.insert(key.to_owned(), leg);
}

/// Subscribes to the answer to the request `id`, then sends the request on the call's stream.
async fn send_request(
    settings: &Settings,
    session: &str,
    out: &CallStream,
    legs: &Mutex<Vec<AnswerKey>>,
    key: String,
    id: String,
    mut request: Value,
) -> Result<OpenRequest, String> {
    let method = request
        .get("method")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let leg = AnswerKey::new(session.to_owned(), Value::String(id.clone()).to_string());
    let waiter = settings
        .pending
        .subscribe(leg.clone())
        .await
        .map_err(|e| format!("The bridge cannot wait for the client's answer: {e}"))?;
    legs.lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(leg.clone());
    let mut message = json!({"jsonrpc": "2.0", "id": id, "method": method});
    if let Some(params) = request.get_mut("params") {
        message["params"] = params.take();
    }
    out.send(&message).await;
    Ok(OpenRequest {
        key,
        id: Value::String(id),
        answer_key: leg,
        answer: waiter,
        method,
    })
}

/// Waits for every answer to `open`; a failure or the deadline cancels the requests still open.
async fn wait_for_answers(
    settings: &Settings,
    session: &str,
    out: &CallStream,
    legs: &Mutex<Vec<AnswerKey>>,
    mut open: Vec<OpenRequest>,
    urls: &mut HashMap<String, UrlLeg>,
) -> Result<Map<String, Value>, Unanswered> {
    let deadline = tokio::time::sleep(settings.answer_timeout);
    tokio::pin!(deadline);
    let mut keep_alive =
        tokio::time::interval_at(tokio::time::Instant::now() + KEEP_ALIVE, KEEP_ALIVE);
    let mut session_check =
        tokio::time::interval_at(tokio::time::Instant::now() + SESSION_CHECK, SESSION_CHECK);
    let mut answers = Map::new();
    while !open.is_empty() {
        // Whichever answer comes first: an error on any request ends the call at once.
        let ready = loop {
            tokio::select! {
                ready = next_answer(&mut open) => break Some(ready),
                () = &mut deadline => break None,
                _ = keep_alive.tick() => out.keep_alive().await,
                _ = session_check.tick() => {
                    if session_ended(settings, session).await {
                        cancel_all(settings, out, open, texts::BRIDGE_SESSION_ENDED_CANCEL).await;
                        return Err(Unanswered::Failed(texts::BRIDGE_SESSION_ENDED.to_owned()));
                    }
                }
            }
        };
        let Some((index, answer)) = ready else {
            // Out of time: every request still open is cancelled.
            cancel_all(settings, out, open, texts::BRIDGE_NO_ANSWER_CANCEL).await;
            return Err(Unanswered::Timeout(texts::bridge_no_answer(
                settings.answer_timeout,
            )));
        };
        let OpenRequest {
            key,
            answer_key: leg,
            method,
            ..
        } = open.swap_remove(index);
        let _ = settings.pending.unsubscribe(&leg).await;
        legs.lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|l| *l != leg);
        let result = match answer_result(&method, answer) {
            Ok(result) => result,
            Err(text) => {
                cancel_all(settings, out, open, texts::BRIDGE_OTHER_FAILED_CANCEL).await;
                return Err(Unanswered::Failed(text));
            }
        };
        if let Some(leg) = urls.get_mut(&key) {
            // Only an accept is consent to the flow; a decline or cancel goes to the inner
            // service, which decides, and the flow is not waited for.
            if result.get("action").and_then(Value::as_str) == Some("accept") {
                let now = Instant::now();
                leg.answer = Some(result.clone());
                leg.first_accepted.get_or_insert(now);
                leg.accepted_at = Some(now);
            } else {
                leg.answer = None;
            }
        }
        answers.insert(key, result);
    }
    Ok(answers)
}

/// Whether the session is gone (ended, expired, or lost with the store's data). A store that
/// cannot say keeps the call waiting: its answer may still come, and the deadline bounds it.
async fn session_ended(settings: &Settings, session: &str) -> bool {
    match settings.sessions.get(session).await {
        Ok(found) => found.is_none(),
        Err(error) => {
            tracing::debug!(%error, "cannot check a waiting call's session");
            false
        }
    }
}

/// The result the client answered a `method` request with, `_meta` left out, or why there is none.
fn answer_result(method: &str, answer: Option<Value>) -> Result<Value, String> {
    let Some(answer) = answer else {
        return Err(format!("The answer to {method} was lost"));
    };
    if let Some(error) = answer.get("error") {
        let message = error
            .get("message")
            .and_then(Value::as_str)
            .unwrap_or("an error");
        return Err(format!(
            "The client answered {method} with an error: {message}"
        ));
    }
    let Some(Value::Object(mut result)) = answer.get("result").cloned() else {
        return Err(format!("The client's answer to {method} has no result"));
    };
    result.remove("_meta");
    Ok(Value::Object(result))
}

//! One 2026-07-28 request through the adapter: passed through to a 2026 upstream, forwarded into
//! a 2025-era session, and for `tools/call`, `prompts/get` and `resources/read` the reverse
//! bridge: the upstream's own requests parked as `input_required` rounds, resumed on the retry.
//! A call's progress and log notifications go back to the front while it runs.

use std::sync::Arc;
use std::time::Duration;

use indexmap::IndexMap;
use serde_json::{Map, Value, json};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, oneshot};
use tokio::time::Instant;

use super::bounds::{Refused, Ticket};
use super::config::{GATHER, Routes, ServerQuestions};
use super::core::{Core, Link, METHOD_NOT_FOUND, State, TARGET, failure, lock};
use super::listen::LISTEN;
use super::parked::{Event, Parked};
use super::routes;
use super::session::{Negotiated, discover_result, legacy_params, modern_result};
use super::trace::TraceContext;
use crate::store::StoreError;
use crate::texts;
use crate::util::BoxFuture;
use crate::util::ids::uuid_v4;
use crate::wire::jsonrpc::{
    self, INVALID_PARAMS, INVALID_REQUEST, MISSING_REQUIRED_CLIENT_CAPABILITY, RpcError,
};
use crate::wire::mcp::meta::{CLIENT_CAPABILITIES, LOG_LEVEL};
use crate::wire::mcp::{Declared, InputKind, Method, add_requirement};
use constant_time_eq::constant_time_eq;

/// What the front's request brings besides its message: who calls, where the call's
/// notifications go (`None`: the front takes one JSON answer, and they are only logged), and
/// the trace context its request carried (for an HTTP upstream's request of the call).
#[derive(Debug)]
pub(crate) struct Front {
    pub(crate) caller: Caller,
    pub(crate) notes: Option<mpsc::Sender<Value>>,
    pub(crate) trace: Option<TraceContext>,
}

/// Who calls: the principal as the front took it, or (a retry routed here from another replica)
/// the keyed tag that replica made of it.
#[derive(Debug)]
pub(crate) enum Caller {
    Principal(Option<Vec<u8>>),
    Tag(Option<String>),
}

impl Caller {
    /// The keyed tag a parked call is bound to.
    fn tag(&self, core: &Core) -> Option<String> {
        match self {
            Self::Principal(principal) => core.settings.callers.tag(principal.as_deref()),
            Self::Tag(tag) => tag.clone(),
        }
    }

    /// Whether a parked call bound to `tag` is this caller's.
    fn owns(&self, core: &Core, tag: Option<&str>) -> bool {
        match self {
            Self::Principal(principal) => {
                core.settings.callers.is_tag_of(tag, principal.as_deref())
            }
            Self::Tag(mine) => match (tag, mine) {
                (Some(tag), Some(mine)) => constant_time_eq(tag.as_bytes(), mine.as_bytes()),
                (None, None) => true,
                _ => false,
            },
        }
    }
}

/// What a call relays to the front and may ask of it, read once from its request's `_meta`.
#[derive(Debug)]
struct Downstream {
    notes: Option<mpsc::Sender<Value>>,
    /// The front's own progress token; the upstream gets the call's id in its place, so that
    /// calls of different clients never share one.
    token: Option<Value>,
    /// The kinds of question the client declared it can answer.
    declared: Declared,
    /// The front's trace context, which the call's request to an HTTP upstream carries.
    trace: Option<TraceContext>,
}

impl Downstream {
    fn of(
        notes: Option<mpsc::Sender<Value>>,
        trace: Option<TraceContext>,
        params: Option<&Value>,
    ) -> (Self, Option<String>) {
        let meta = params.and_then(|p| p.get("_meta"));
        let field = |key: &str| meta.and_then(|m| m.get(key));
        let downstream = Self {
            notes,
            trace,
            token: field("progressToken").cloned(),
            declared: Declared::of(field(CLIENT_CAPABILITIES).unwrap_or(&Value::Null)),
        };
        let level = field(LOG_LEVEL).and_then(Value::as_str).map(str::to_owned);
        (downstream, level)
    }

    /// Passes a notification of the call's on to the front, the progress under its own token.
    fn relay(&self, mut note: Map<String, Value>) {
        let Some(notes) = &self.notes else { return };
        if note.get("method").and_then(Value::as_str) == Some("notifications/progress") {
            let (Some(token), Some(Value::Object(params))) = (&self.token, note.get_mut("params"))
            else {
                return;
            };
            params.insert("progressToken".to_owned(), token.clone());
        }
        // Lost when the front reads too slowly: notifications are not worth a stall.
        let _ = notes.try_send(Value::Object(note));
    }

    /// `params` with the call's `id` as its progress token, where the front asked for progress.
    fn give_token(&self, params: &mut Option<Value>, id: u64) {
        if self.token.is_none() {
            return;
        }
        if let Some(Value::Object(meta)) = params.as_mut().and_then(|p| p.get_mut("_meta")) {
            meta.insert("progressToken".to_owned(), json!(id));
        }
    }

    /// Refuses to the upstream, as a client that did not declare them would, the questions in
    /// `asked` the client cannot answer, and takes them out: `roots/list` always (a 2025-era
    /// server asks for roots when it likes, after `initialized` or a change, not for one call),
    /// the others when the client can answer some of the rest. When it can answer none of what
    /// the call asked, nothing is refused: the `requiredCapabilities` for `-32021`.
    fn refuse_undeclared(
        &self,
        asked: &mut IndexMap<String, (Value, Value)>,
        link: &Link,
    ) -> Result<(), Map<String, Value>> {
        let mut roots = Vec::new();
        let mut others = Vec::new();
        let mut required = Map::new();
        for (key, (_, request)) in asked.iter() {
            match InputKind::of(request) {
                Some(kind) if self.declared.has(kind) => {}
                Some(InputKind::Roots) => roots.push(key.clone()),
                Some(kind) => {
                    add_requirement(&mut required, kind);
                    others.push(key.clone());
                }
                None => {}
            }
        }
        let refuse = |asked: &mut IndexMap<String, (Value, Value)>, keys: Vec<String>| {
            for key in keys {
                if let Some((request_id, request)) = asked.shift_remove(&key) {
                    let method = request.get("method").and_then(Value::as_str).unwrap_or("?");
                    let error =
                        RpcError::new(METHOD_NOT_FOUND, &texts::upstream_undeclared(method));
                    link.send_now(&jsonrpc::response(&request_id, Err(error)));
                }
            }
        };
        refuse(asked, roots);
        if !others.is_empty() && others.len() == asked.len() {
            return Err(required);
        }
        refuse(asked, others);
        Ok(())
    }
}

/// Answers one JSON-RPC message from the front; `None` for a notification (HTTP 202).
pub(crate) async fn handle(
    core: Arc<Core>,
    front: Front,
    mut message: Map<String, Value>,
) -> Option<Value> {
    let id = message.get("id").cloned()?;
    let Some(method) = message
        .get("method")
        .and_then(Value::as_str)
        .map(str::to_owned)
    else {
        let error = RpcError::new(INVALID_REQUEST, "Invalid Request: no method");
        return Some(jsonrpc::response(&id, Err(error)));
    };
    let link = match core.link().await {
        Ok(link) => link,
        Err(why) => {
            let error = failure(&texts::upstream_unavailable(&why));
            return Some(jsonrpc::response(&id, Err(error)));
        }
    };
    // A retry for a call parked on another replica (a 2025-era upstream's parked calls only).
    let state = message
        .get("params")
        .and_then(|p| p.get("requestState"))
        .and_then(Value::as_str);
    if let (Negotiated::V2025 { .. }, Some(_), Some(state)) =
        (&link.negotiated, Method::parse(&method), state)
        && routes::replica_of(state).is_some_and(|replica| replica != core.replica)
    {
        let state = state.to_owned();
        return Some(route_away(&core, &front.caller, &state, message).await);
    }
    let (downstream, level) = Downstream::of(front.notes, front.trace, message.get("params"));
    // The keyed tag its parked calls are bound to, and its share of the bounds counted by.
    let tag = front.caller.tag(&core);
    let whose = Whose::Caller(&tag);
    let outcome = match &link.negotiated {
        Negotiated::V2026 => pass_through(&core, &link, whose, downstream, message).await,
        Negotiated::V2025 { initialized, .. } => {
            let params = message.remove("params");
            if let Some(level) = level.filter(|_| method != "logging/setLevel") {
                set_log_level(&core, &link, initialized, level).await;
            }
            match method.as_str() {
                "server/discover" => Ok(discover_result(initialized)),
                // 2026-07-28 only: answered here, from the session's notifications.
                LISTEN => {
                    return Some(
                        super::listen::serve(&core, initialized, downstream.notes, &id, params)
                            .await,
                    );
                }
                "initialize" => Err(RpcError::new(
                    INVALID_REQUEST,
                    "Invalid Request: the adapter holds the upstream's session; send 2026-07-28 requests",
                )),
                _ => match Method::parse(&method) {
                    Some(kind) => {
                        let caller = (&front.caller, &tag);
                        reverse_bridge(&core, &link, caller, downstream, kind, params).await
                    }
                    None => forward(&core, &link, whose, downstream, &method, params).await,
                },
            }
        }
    };
    Some(jsonrpc::response(&id, outcome))
}

/// A retry whose call is parked on another replica: routed to it, its answer brought back (see
/// [`routes`]); without routes, or when no replica holds the call, an error that says why.
async fn route_away(
    core: &Core,
    caller: &Caller,
    state: &str,
    message: Map<String, Value>,
) -> Value {
    let id = message.get("id").cloned().unwrap_or(Value::Null);
    let refuse = |text: &str| jsonrpc::response(&id, Err(RpcError::new(INVALID_PARAMS, text)));
    let Some(Routes(routes)) = &core.settings.routes else {
        tracing::debug!(target: TARGET, "a retry for a call parked on another replica, and no routes");
        return refuse(texts::UPSTREAM_OTHER_REPLICA);
    };
    let nonce = uuid_v4();
    let ack_key = routes::key(state, &format!("ack/{nonce}"));
    let reply_key = routes::key(state, &format!("reply/{nonce}"));
    let routed = async {
        let ack = routes.subscribe(ack_key.clone()).await?;
        let reply = routes.subscribe(reply_key.clone()).await?;
        let retry = routes::retry(message, caller.tag(core), &nonce);
        if !routes.deliver(routes::key(state, "retry"), retry).await? {
            return Ok(None);
        }
        if !matches!(
            tokio::time::timeout(routes::ACK_TIMEOUT, ack).await,
            Ok(Some(_))
        ) {
            return Ok(None);
        }
        let wait = core.settings.request_timeout + core.settings.parked_timeout;
        Ok(tokio::time::timeout(wait, reply).await.ok().flatten())
    };
    let outcome: Result<Option<Value>, StoreError> = routed.await;
    let _ = routes.unsubscribe(&ack_key).await;
    let _ = routes.unsubscribe(&reply_key).await;
    match outcome {
        Ok(Some(response)) => response,
        Ok(None) => refuse(texts::UPSTREAM_CALL_GONE),
        Err(error) => {
            tracing::warn!(target: TARGET, %error, "a retry could not be routed to its replica");
            jsonrpc::response(&id, Err(failure(texts::UPSTREAM_ROUTES_DOWN)))
        }
    }
}

/// Serves a retry another replica routed here for the parked call `state`: acknowledged at
/// once, then answered with the whole response. Boxed: it runs the call, which may park again.
fn serve_routed(core: Arc<Core>, state: String, routed: Value) -> BoxFuture<'static, ()> {
    Box::pin(async move {
        let Some(Routes(routes)) = core.settings.routes.clone() else {
            return;
        };
        let Some((message, tag, nonce)) = routes::read_retry(routed) else {
            tracing::warn!(target: TARGET, "a routed retry that is not one: ignored");
            return;
        };
        let _ = routes
            .deliver(routes::key(&state, &format!("ack/{nonce}")), json!({}))
            .await;
        let front = Front {
            caller: Caller::Tag(tag),
            notes: None,
            trace: None,
        };
        let response = handle(Arc::clone(&core), front, message).await;
        let reply = routes::key(&state, &format!("reply/{nonce}"));
        if let Err(error) = routes.deliver(reply, response.unwrap_or(Value::Null)).await {
            tracing::warn!(target: TARGET, %error, "the answer to a routed retry could not be sent back");
        }
    })
}

/// The log level a 2026 request carries in `_meta`, made the session's with `logging/setLevel`
/// when it changes it (a session has one level: the last request's wins). Only for a server
/// that declared `logging`; a refusal is logged, and the request goes on.
async fn set_log_level(core: &Arc<Core>, link: &Arc<Link>, initialized: &Value, level: String) {
    let declared = initialized
        .get("capabilities")
        .is_some_and(|c| c.get("logging").is_some());
    if !declared || !link.set_log_level(&level) {
        return;
    }
    let params = Some(json!({ "level": level }));
    // The adapter's own request: nothing to relay, no question to be asked.
    let (quiet, _) = Downstream::of(None, None, None);
    let adapter = Whose::Adapter;
    if let Err(error) = forward(core, link, adapter, quiet, "logging/setLevel", params).await {
        tracing::warn!(target: TARGET, %error, "the server refused logging/setLevel");
    }
}

/// Whose request takes a [`turn`] in flight.
#[derive(Debug, Clone, Copy)]
enum Whose<'a> {
    /// A caller's, by its keyed tag (`None`: anonymous, every anonymous caller one caller).
    Caller(&'a Option<String>),
    /// The adapter's own (`logging/setLevel`): no caller's share.
    Adapter,
}

/// A request's turn in flight: a permit of the in-flight bound, and its caller's ticket.
#[derive(Debug)]
struct Turn {
    _permit: OwnedSemaphorePermit,
    _ticket: Option<Ticket>,
}

/// A turn in flight for `whose` request: counted against its caller's fair share first (refused,
/// naming the bound, when the caller holds its share already, waiting requests included: one
/// caller cannot fill the queue either), then a permit of the in-flight bound, waited for no
/// longer than a request may take.
async fn turn(core: &Core, whose: Whose<'_>) -> Result<Turn, RpcError> {
    let ticket = match whose {
        Whose::Caller(tag) => match core.bounds.enter(tag.clone()) {
            Ok(ticket) => Some(ticket),
            Err(Refused::Share(text)) => {
                tracing::info!(target: TARGET, "a caller holds its share of the requests in flight: refused");
                return Err(failure(&text));
            }
            // Not said of requests in flight (they wait their turn), but refused if it were.
            Err(Refused::Full) => return Err(failure(texts::UPSTREAM_TIMEOUT)),
        },
        Whose::Adapter => None,
    };
    let permit = acquire(core, &core.in_flight).await?;
    Ok(Turn {
        _permit: permit,
        _ticket: ticket,
    })
}

/// A permit of `semaphore` (the in-flight bound, or the floor), waited for no longer than a
/// request may take.
async fn acquire(
    core: &Core,
    semaphore: &Arc<Semaphore>,
) -> Result<OwnedSemaphorePermit, RpcError> {
    let acquire = Arc::clone(semaphore).acquire_owned();
    match tokio::time::timeout(core.settings.request_timeout, acquire).await {
        Ok(Ok(permit)) => Ok(permit),
        _ => Err(failure(texts::UPSTREAM_TIMEOUT)),
    }
}

/// The session's floor where the server's requests name no call (stdio); `None` where each
/// comes on its call's own answer (Streamable HTTP: attributed by stream, no call waits).
async fn take_floor(core: &Core) -> Result<Option<OwnedSemaphorePermit>, RpcError> {
    if core.by_stream() {
        return Ok(None);
    }
    acquire(core, &core.floor).await.map(Some)
}

/// A 2026 upstream: the message as it is, under an id of the adapter's; the response as it is.
async fn pass_through(
    core: &Arc<Core>,
    link: &Arc<Link>,
    whose: Whose<'_>,
    downstream: Downstream,
    mut message: Map<String, Value>,
) -> Result<Value, RpcError> {
    let _turn = turn(core, whose).await?;
    let call = InFlight::start(core, link, downstream);
    message.insert("id".to_owned(), json!(call.id));
    let mut params = message.remove("params");
    call.downstream.give_token(&mut params, call.id);
    if let Some(params) = params {
        message.insert("params".to_owned(), params);
    }
    link.send(&Value::Object(message)).await;
    call.answer(|result| result).await
}

/// A request other than the three: into the session, and its result made a 2026 one.
async fn forward(
    core: &Arc<Core>,
    link: &Arc<Link>,
    whose: Whose<'_>,
    downstream: Downstream,
    method: &str,
    params: Option<Value>,
) -> Result<Value, RpcError> {
    let _turn = turn(core, whose).await?;
    let call = InFlight::start(core, link, downstream);
    call.send(method, legacy_params(params)).await;
    call.answer(|result| modern_result(method, result)).await
}

/// `tools/call`, `prompts/get` or `resources/read` into a 2025-era session, for `caller` (as the
/// front took it, and its keyed tag).
async fn reverse_bridge(
    core: &Arc<Core>,
    link: &Arc<Link>,
    (caller, tag): (&Caller, &Option<String>),
    downstream: Downstream,
    method: Method,
    params: Option<Value>,
) -> Result<Value, RpcError> {
    let target = params
        .as_ref()
        .and_then(|p| p.get(method.target_field()))
        .cloned()
        .unwrap_or(Value::Null);
    let state = params
        .as_ref()
        .and_then(|p| p.get("requestState"))
        .and_then(Value::as_str)
        .map(str::to_owned);
    if core.settings.questions == ServerQuestions::Off {
        // Nothing is ever parked, and the server's requests are refused (no call takes them):
        // no floor, the call runs beside the others.
        if state.is_some() {
            tracing::debug!(target: TARGET, "a retry, and the server's questions are off");
            return Err(RpcError::new(INVALID_PARAMS, texts::UPSTREAM_CALL_GONE));
        }
        let whose = Whose::Caller(tag);
        return forward(core, link, whose, downstream, method.as_str(), params).await;
    }
    let _turn = turn(core, Whose::Caller(tag)).await?;
    let Some(state) = state else {
        // The floor a call holds while it runs in a 2025-era stdio session (its requests name
        // no call); none over HTTP (they come on the call's own answer).
        let floor = take_floor(core).await?;
        let call = InFlight::start(core, link, downstream);
        core.hold_floor(Some(call.id));
        call.send(method.as_str(), legacy_params(params)).await;
        let parked = Parked::new(tag.clone(), method, target, call.id);
        return run(core, call, parked, floor).await;
    };
    let is_callers = |bound_to: Option<&str>| caller.owns(core, bound_to);
    let Some(mut parked) = core.parked.take(&state, is_callers, method, &target) else {
        tracing::debug!(target: TARGET, "a retry for a call that is not parked here");
        return Err(RpcError::new(INVALID_PARAMS, texts::UPSTREAM_CALL_GONE));
    };
    let answers = params
        .as_ref()
        .and_then(|p| p.get("inputResponses"))
        .and_then(Value::as_object);
    // Taken: its expiry timer ends now.
    drop(parked.timer.take());
    // The floor: still the call's own when the retry comes before it was handed on (see
    // `GATHER`), else waited for.
    let lingering = lock(&parked.floor).take();
    let floor = match lingering {
        Some(floor) => Some(floor),
        None => match take_floor(core).await {
            Ok(floor) => floor,
            Err(error) => {
                cancel(core, *parked, "the session stayed busy");
                return Err(error);
            }
        },
    };
    let call = InFlight::resume(core, link, downstream, &mut parked);
    core.hold_floor(Some(call.id));
    let asked = std::mem::take(&mut parked.asked);
    for (key, (request_id, request)) in asked {
        match answers.and_then(|a| a.get(&key)) {
            Some(answer) => {
                let response = jsonrpc::response(&request_id, Ok(answer.clone()));
                link.send(&response).await;
            }
            None => {
                parked.asked.insert(key, (request_id, request));
            }
        }
    }
    if parked.asked.is_empty() {
        run(core, call, *parked, floor).await
    } else {
        // Some questions are still unanswered: ask them again (the upstream still waits).
        park(core, call, *parked, floor).await
    }
}

/// Waits for the call's result or its next requests; parks it when it asks.
async fn run(
    core: &Arc<Core>,
    mut call: InFlight,
    mut parked: Parked,
    floor: Option<OwnedSemaphorePermit>,
) -> Result<Value, RpcError> {
    let mut wait = core.settings.request_timeout;
    // Over stdio, the ping sent after the round's first request (see `Barrier`).
    let mut barrier: Option<Barrier> = None;
    loop {
        let event = call.next(wait).await;
        match event {
            Some(Event::Response(response)) if !call.answers(&response) => {
                // The server's answer to the barrier's ping: every request it wrote before
                // that answer is in the channel.
                if let Some(sent) = &mut barrier {
                    sent.answered |= sent.answers(&response);
                    wait = sent.remaining();
                }
            }
            Some(Event::Response(response)) => {
                core.hold_floor(None);
                let method = parked.method.as_str();
                return call.finished(response, |result| modern_result(method, result));
            }
            Some(Event::Request(mut asked)) => {
                // Its id, and the rest as the input request `{method, params}`: moved, not copied.
                let request_id = asked.remove("id").unwrap_or(Value::Null);
                asked.retain(|name, _| name == "method" || name == "params");
                asked.entry("method").or_insert(Value::Null);
                let asked = Value::Object(asked);
                parked.seq += 1;
                let key = match named_key(&asked) {
                    Some(key) if !parked.asked.contains_key(key) => key.to_owned(),
                    _ => {
                        let method = asked.get("method").and_then(Value::as_str);
                        format!("{}-{}", key_kind(method), parked.seq)
                    }
                };
                parked.asked.insert(key, (request_id, asked));
                // What the server asks in the same breath joins this round: over stdio, what
                // it wrote before it answered the barrier's ping; over HTTP, what came on the
                // call's stream already. Later requests join the next round (see `GATHER`).
                wait = match (&floor, &barrier) {
                    (None, _) => Duration::ZERO,
                    (Some(_), None) => {
                        let sent = Barrier::send(&call).await;
                        let wait = sent.remaining();
                        barrier = Some(sent);
                        wait
                    }
                    (Some(_), Some(sent)) => sent.remaining(),
                };
            }
            Some(Event::Notification(_)) => {}
            Some(Event::Exited) => return Err(call.exited()),
            None if !parked.asked.is_empty() => {
                if let Some(sent) = barrier.take() {
                    sent.forget(core);
                }
                if let Err(required) = call
                    .downstream
                    .refuse_undeclared(&mut parked.asked, &call.link)
                {
                    core.hold_floor(None);
                    parked.events = call.park();
                    cancel(core, parked, "the client cannot answer this request");
                    let refusal = RpcError::new(
                        MISSING_REQUIRED_CLIENT_CAPABILITY,
                        "Missing required client capability",
                    );
                    return Err(refusal.with_data(json!({ "requiredCapabilities": required })));
                }
                if parked.asked.is_empty() {
                    // All it asked was refused: the call goes on without.
                    wait = core.settings.request_timeout;
                    continue;
                }
                return park(core, call, parked, floor).await;
            }
            None => {
                core.hold_floor(None);
                return Err(call.timed_out());
            }
        }
    }
}

/// A `ping` the adapter sends a stdio server right after the first request of a call's round,
/// its answer routed to the call: the server's requests name no call and come one line at a
/// time, and a server that asks several things at once (a `Promise.all`, an `asyncio.gather`)
/// writes them in one go, before it reads the ping. So when the answer is read, the requests
/// written with the first one are in the call's channel ahead of it, and the round asks them
/// all; no fixed wait. (Parking the moment the channel was empty raced the reader task, and
/// split one breath's questions over two rounds: the conformance suite's
/// `input-required-result-multiple-input-requests` saw it.) A server slow to answer the ping is
/// waited for [`GATHER`] at the most.
struct Barrier {
    /// The ping's id (routed to the call like its own).
    id: Option<u64>,
    /// When the call parks, answered or not.
    until: Instant,
    answered: bool,
}

impl Barrier {
    async fn send(call: &InFlight) -> Self {
        let id = call.core.alias(call.id);
        if let Some(id) = id {
            let ping = json!({"jsonrpc": "2.0", "id": id, "method": "ping"});
            call.link.send(&ping).await;
        }
        Self {
            id,
            until: Instant::now() + GATHER,
            answered: id.is_none(),
        }
    }

    /// Whether `response` answers the ping.
    fn answers(&self, response: &Map<String, Value>) -> bool {
        self.id.is_some() && response.get("id").and_then(Value::as_u64) == self.id
    }

    /// How long the call may still wait for the ping's answer.
    fn remaining(&self) -> Duration {
        if self.answered {
            return Duration::ZERO;
        }
        self.until.saturating_duration_since(Instant::now())
    }

    /// Forgets the ping (answered or not): a late answer goes nowhere.
    fn forget(self, core: &Core) {
        if let Some(id) = self.id {
            core.forget(id);
        }
    }
}

/// The `_meta` key under which a server that knows the adapter names its request's key in
/// `inputRequests` (a 2025-era request has no key of its own).
pub(crate) const INPUT_KEY: &str = "tower-elicitation/inputKey";

/// The key the server named for its request, when it is a short plain name.
fn named_key(asked: &Value) -> Option<&str> {
    let key = asked
        .get("params")?
        .get("_meta")?
        .get(INPUT_KEY)?
        .as_str()?;
    let plain = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.');
    (!key.is_empty() && key.len() <= 64 && key.chars().all(plain)).then_some(key)
}

fn key_kind(method: Option<&str>) -> &'static str {
    match method {
        Some("elicitation/create") => "elicitation",
        Some("sampling/createMessage") => "sampling",
        Some("roots/list") => "roots",
        _ => "request",
    }
}

/// Parks the call under a fresh random id and answers `input_required` with its questions.
/// The floor (stdio) stays the call's for [`GATHER`] more (its retry takes it if it comes first),
/// so that what the server asks in the same breath is the call's, for its next round. Over HTTP
/// there is none: what the server asks later comes on the call's own answer all the same.
async fn park(
    core: &Arc<Core>,
    call: InFlight,
    mut parked: Parked,
    floor: Option<OwnedSemaphorePermit>,
) -> Result<Value, RpcError> {
    // Its replica, its session in the replica's pool (see `routes`), a random id.
    let id = format!("{}.{}.{}", core.replica, core.session, uuid_v4());
    if let Some(floor) = floor {
        *lock(&parked.floor) = Some(floor);
        let slot = Arc::clone(&parked.floor);
        let lingering = Arc::clone(core);
        let upstream_id = parked.upstream_id;
        tokio::spawn(async move {
            tokio::time::sleep(GATHER).await;
            let floor = lock(&slot).take();
            if let Some(floor) = floor {
                // Handed on: the server's requests from now on are the next holder's.
                lingering.release_floor(upstream_id);
                drop(floor);
            }
        });
    }
    let mut requests = Map::new();
    for (key, (_, request)) in &parked.asked {
        requests.insert(key.clone(), request.clone());
    }
    parked.events = call.park();
    match core.bounds.park(parked.caller.clone()) {
        Ok(ticket) => parked.ticket = Some(ticket),
        Err(Refused::Full) => {
            cancel(core, parked, "too many calls waiting for an answer");
            return Err(failure(texts::UPSTREAM_TOO_MANY_PARKED));
        }
        Err(Refused::Share(text)) => {
            tracing::info!(target: TARGET, "a caller holds its share of the parked calls: refused");
            cancel(
                core,
                parked,
                "the caller holds its share of the calls waiting for an answer",
            );
            return Err(failure(&text));
        }
    }
    let (timer, taken) = oneshot::channel::<()>();
    parked.timer = Some(timer);
    core.parked.park(id.clone(), Box::new(parked));
    // With routes, a retry that lands on another replica is routed here through this key.
    let retry_key = routes::key(&id, "retry");
    let routed = match &core.settings.routes {
        Some(Routes(routes)) => match routes.subscribe(retry_key.clone()).await {
            Ok(routed) => Some(routed),
            Err(error) => {
                tracing::warn!(target: TARGET, %error, "a parked call cannot take routed retries");
                None
            }
        },
        None => None,
    };
    let timer = Arc::clone(core);
    let expiring = id.clone();
    tokio::spawn(async move {
        let routed_retry = async move {
            match routed {
                Some(routed) => routed.await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = tokio::time::sleep(timer.settings.parked_timeout) => {
                if let Some(parked) = timer.parked.expire(&expiring) {
                    tracing::debug!(target: TARGET, "a parked call expired");
                    cancel(&timer, *parked, "no answer in time");
                }
            }
            Some(retry) = routed_retry => {
                serve_routed(Arc::clone(&timer), expiring, retry).await;
            }
            // Taken by a retry here (or gone with the server): nothing left to time.
            _ = taken => {}
        }
        if let Some(Routes(routes)) = &timer.settings.routes {
            let _ = routes.unsubscribe(&retry_key).await;
        }
    });
    // Built member by member: `json!` would copy the questions through `to_value`.
    let mut result = Map::with_capacity(3);
    result.insert("resultType".to_owned(), Value::from("input_required"));
    result.insert("inputRequests".to_owned(), Value::Object(requests));
    result.insert("requestState".to_owned(), Value::String(id));
    Ok(Value::Object(result))
}

/// Ends a parked call at the upstream: `notifications/cancelled`, and an error for each of its
/// requests still waiting (so that nothing there waits for ever).
fn cancel(core: &Core, parked: Parked, reason: &str) {
    core.forget(parked.upstream_id);
    let State::Ready(link) = core.state.borrow().clone() else {
        return;
    };
    let cancelled = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": {"requestId": parked.upstream_id, "reason": reason}});
    link.send_now(&cancelled);
    for (request_id, _) in parked.asked.into_values() {
        link.send_now(&jsonrpc::response(&request_id, Err(failure(reason))));
    }
}

/// A request of the front's in the upstream's session, until it is answered. Dropped before
/// that (the front gave up, or it timed out), it is cancelled at the upstream.
struct InFlight {
    core: Arc<Core>,
    link: Arc<Link>,
    id: u64,
    events: Option<mpsc::Receiver<Event>>,
    downstream: Downstream,
}

impl InFlight {
    fn start(core: &Arc<Core>, link: &Arc<Link>, downstream: Downstream) -> Self {
        let (id, events) = core.register_traced(downstream.trace.clone());
        Self {
            core: Arc::clone(core),
            link: Arc::clone(link),
            id,
            events: Some(events),
            downstream,
        }
    }

    /// A parked call running again: its id and its events, relayed to the retry's front.
    fn resume(
        core: &Arc<Core>,
        link: &Arc<Link>,
        downstream: Downstream,
        parked: &mut Parked,
    ) -> Self {
        let events = std::mem::replace(&mut parked.events, mpsc::channel(1).1);
        Self {
            core: Arc::clone(core),
            link: Arc::clone(link),
            id: parked.upstream_id,
            events: Some(events),
            downstream,
        }
    }

    async fn send(&self, method: &str, mut params: Option<Value>) {
        self.downstream.give_token(&mut params, self.id);
        let mut request = json!({"jsonrpc": "2.0", "id": self.id, "method": method});
        if let Some(params) = params {
            request["params"] = params;
        }
        self.link.send(&request).await;
    }

    /// The next event but a notification (those are relayed to the front on the way), or
    /// `None` when `wait` passed first. A `wait` of zero takes only what is in the channel
    /// already: a timer of zero would not fire before the runtime's next millisecond tick, and
    /// every round that asks would wait that long for nothing.
    async fn next(&mut self, wait: std::time::Duration) -> Option<Event> {
        let deadline = Instant::now() + wait;
        let events = self.events.as_mut()?;
        loop {
            let event = if wait.is_zero() {
                match events.try_recv() {
                    Ok(event) => Ok(Some(event)),
                    Err(mpsc::error::TryRecvError::Disconnected) => Ok(None),
                    Err(mpsc::error::TryRecvError::Empty) => Err(()),
                }
            } else {
                tokio::time::timeout_at(deadline, events.recv())
                    .await
                    .map_err(drop)
            };
            return match event {
                Ok(Some(Event::Notification(note))) => {
                    self.downstream.relay(note);
                    continue;
                }
                Ok(Some(event)) => Some(event),
                Ok(None) => Some(Event::Exited),
                Err(_) => None,
            };
        }
    }

    /// Waits for the response (a call that holds no floor gets no requests), its result through
    /// `convert`.
    async fn answer(mut self, convert: impl FnOnce(Value) -> Value) -> Result<Value, RpcError> {
        loop {
            return match self.next(self.core.settings.request_timeout).await {
                Some(Event::Response(response)) => self.finished(response, convert),
                Some(Event::Request(_) | Event::Notification(_)) => continue,
                Some(Event::Exited) => Err(self.exited()),
                None => Err(self.timed_out()),
            };
        }
    }

    /// Whether `response` is the answer to the call's own request (not a barrier's ping).
    fn answers(&self, response: &Map<String, Value>) -> bool {
        response.get("id").and_then(Value::as_u64) == Some(self.id)
    }

    /// The response's result through `convert`, or its error as it is.
    fn finished(
        mut self,
        mut response: Map<String, Value>,
        convert: impl FnOnce(Value) -> Value,
    ) -> Result<Value, RpcError> {
        self.events = None;
        self.core.forget(self.id);
        match response.remove("result") {
            Some(result) => Ok(convert(result)),
            None => Err(response.remove("error").map_or_else(
                || failure("the server answered without result or error"),
                RpcError::relayed,
            )),
        }
    }

    fn exited(mut self) -> RpcError {
        self.events = None;
        self.core.forget(self.id);
        failure(self.core.lost_text())
    }

    fn timed_out(self) -> RpcError {
        // Dropped armed: cancelled at the upstream.
        failure(texts::UPSTREAM_TIMEOUT)
    }

    /// The call leaves the front's hands, still alive at the upstream: its events go with it.
    fn park(mut self) -> mpsc::Receiver<Event> {
        self.events.take().unwrap_or_else(|| mpsc::channel(1).1)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if self.events.take().is_some() {
            self.core.forget(self.id);
            let cancelled = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                "params": {"requestId": self.id, "reason": "the client gave up"}});
            self.link.send_now(&cancelled);
        }
    }
}

//! The inner service misbehaving: HTTP errors, broken JSON, broken event streams, `Err` from
//! `call` and `poll_ready`, slowness, and a client that goes away. In each case the layer hands
//! on the inner service's outcome unchanged, or fails closed with a clear JSON-RPC error when it
//! cannot produce a sealed state, and nothing panics.

use crate::support;

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode, header};
use http_body::Frame;
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, StreamBody};
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tower::{Service, ServiceBuilder, ServiceExt};
use tower_elicitation::RequestBody;

use support::{
    Body, Call, FakeMcp, Harness, Reply, TIMEOUT, chunked, error_message, full, layer,
    progress_event, raw_response, result_message, sse_event, sse_response, take_state,
};

fn approval() -> Value {
    json!({"method": "elicitation/create", "params": {"mode": "form", "message": "Deploy?",
        "requestedSchema": {"type": "object", "properties": {"approve": {"type": "boolean"}},
            "required": ["approve"]}}})
}

fn asks() -> Value {
    json!({"resultType": "input_required", "requestState": "inner-1",
        "inputRequests": {"approval": approval()}})
}

fn approve() -> Value {
    json!({"approval": {"action": "accept", "content": {"approve": true}}})
}

fn deploy() -> Call {
    Call::tool("deploy").args(json!({"env": "staging"}))
}

/// A valid state for `deploy()`, minted by the layer in front of a server that asks.
async fn token() -> String {
    let h = Harness::new(
        layer(),
        FakeMcp::answering(support::Transport::Json, |_| asks()),
    );
    h.call(&deploy()).await.state()
}

/// Every path a request can take through the layer, as (name, request).
async fn every_path() -> Vec<(&'static str, Request<Body>)> {
    let token = token().await;
    vec![
        ("first round", deploy().request()),
        (
            "verified retry",
            deploy().id(2).state(&token).answers(approve()).request(),
        ),
        ("probe", deploy().id(3).answers(approve()).request()),
        (
            "legacy",
            deploy().id(4).version("2025-11-25").state("x").request(),
        ),
        (
            "tools/list",
            Call::new("tools/list", json!({})).id(5).request(),
        ),
        (
            "GET",
            Request::get("/mcp")
                .header(header::ACCEPT, "text/event-stream")
                .body(full(""))
                .unwrap(),
        ),
    ]
}

// ---------------------------------------------------------------------------------------------
// HTTP errors and broken bodies from the inner service.

#[tokio::test]
async fn inner_http_errors_reach_the_client_unchanged_on_every_path() {
    let bodies: [(&str, &[u8]); 4] = [
        ("application/json", br#"{"jsonrpc":"2.0","id":1,"error":{"code":-32603,"message":"boom"}}"#),
        ("application/json", br#"{"jsonrpc":"2.0","id":1,"result":{"resultType":"input_required","requestState":"raw","inputRequests":{}}}"#),
        ("text/plain", b"upstream exploded"),
        ("text/event-stream", b"data: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"resultType\":\"input_required\",\"requestState\":\"raw\"}}\n\n"),
    ];
    for status in [
        StatusCode::INTERNAL_SERVER_ERROR,
        StatusCode::NOT_FOUND,
        StatusCode::PAYLOAD_TOO_LARGE,
        StatusCode::BAD_GATEWAY,
    ] {
        for (content_type, body) in bodies {
            let h = Harness::new(
                layer(),
                FakeMcp::new(move |_| {
                    let mut response = raw_response(status, content_type, body);
                    response
                        .headers_mut()
                        .insert("x-inner", "kept".parse().unwrap());
                    response
                }),
            );
            for (path, request) in every_path().await {
                let reply = h.send(request).await;
                let case = format!("{status} {content_type} on {path}");
                assert_eq!(reply.status, status, "{case}");
                assert_eq!(reply.content_type(), content_type, "{case}");
                assert_eq!(reply.headers["x-inner"], "kept", "{case}");
                assert_eq!(reply.bytes, body, "{case}");
            }
        }
    }
}

#[tokio::test]
async fn unparsable_json_from_the_inner_service_passes_unchanged() {
    let deep = format!(
        r#"{{"jsonrpc":"2.0","id":1,"result":{{"resultType":"complete","x":{}1{}}}}}"#,
        "[".repeat(10_000),
        "]".repeat(10_000)
    );
    let bodies: Vec<Vec<u8>> = vec![
        b"{".to_vec(),
        b"not json".to_vec(),
        b"".to_vec(),
        b"null".to_vec(),
        b"[]".to_vec(),
        br#"{"jsonrpc":"2.0","id":1,"result":{"resultType":"complete","n":1e400}}"#.to_vec(),
        b"{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"text\":\"\xff\xfe\"}}".to_vec(),
        br#"{"jsonrpc":"2.0","id":99,"result":{"resultType":"input_required","requestState":"raw"}}"#
            .to_vec(),
        deep.into_bytes(),
    ];
    for body in bodies {
        let answer = Bytes::from(body.clone());
        let h = Harness::new(
            layer(),
            FakeMcp::new(move |_| raw_response(StatusCode::OK, "application/json", answer.clone())),
        );
        for (path, request) in every_path().await {
            let reply = h.send(request).await;
            assert_eq!(reply.status, StatusCode::OK, "{path}");
            assert_eq!(
                reply.bytes,
                body,
                "{path}: {}",
                String::from_utf8_lossy(&body)
            );
        }
    }
}

#[tokio::test]
async fn an_input_required_the_layer_cannot_read_fails_closed() {
    // Recognisably an `input_required` answer to this call, but not one the layer can seal: it
    // answers -32603 rather than pass on an unsealed state.
    for body in [
        r#"{"jsonrpc":"2.0","id":1,"result":{"resultType":"input_required","requestState":7}}"#,
        r#"{"jsonrpc":"2.0","id":1,"result":{"resultType":"input_required","inputRequests":[]}}"#,
        r#"{"jsonrpc":"2.0","id":1,"result":{"resultType":"input_required","inputRequests":{"a":{"method":"tools/call"}}}}"#,
        r#"{"jsonrpc":"2.0","id":1,"result":{"resultType":"input_required","inputRequests":{"a":{"method":"elicitation/create","params":{"message":"m"}}}}}"#,
        r#"{"jsonrpc":"2.0","id":1,"result":{"resultType":"input_required","inputRequests":{"a":{"method":"elicitation/create","params":{"message":"m","requestedSchema":{"type":7}}}}}}"#,
        r#"{"jsonrpc":"2.0","id":1,"result":{"resultType":"input_\u0072equired","requestState":7}}"#,
        // Not JSON the layer can read, but a lenient client might read an `input_required` in it.
        r#"{"jsonrpc":"2.0","id":1,"result":{"resultType":"input_required""#,
        "\u{feff}{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"resultType\":\"input_required\",\"requestState\":\"raw\"}}",
        r#"{"jsonrpc":"2.0","id":1,"result":{"resultType":"input_required","requestState":"raw"}} trailing"#,
    ] {
        let h = Harness::new(
            layer(),
            FakeMcp::new(move |_| raw_response(StatusCode::OK, "application/json", body)),
        );
        let reply = h.call(&deploy()).await;
        assert_eq!(
            reply.json(),
            error_message(1, -32603, "Internal error", None),
            "{body}"
        );
    }

    // Fields the layer does not read pass byte for byte, even ones it could not represent;
    // the state is sealed all the same.
    let body = r#"{"jsonrpc":"2.0","id":1,"result":{"resultType":"input_\u0072equired","requestState":"raw","x":1e400}}"#;
    let h = Harness::new(
        layer(),
        FakeMcp::new(move |_| raw_response(StatusCode::OK, "application/json", body)),
    );
    let reply = h.call(&deploy()).await;
    let text = String::from_utf8(reply.bytes.to_vec()).unwrap();
    assert!(text.contains(r#""x":1e400"#), "{text}");
    assert!(text.contains(r#""requestState":"v1.k1."#), "{text}");
    assert!(!text.contains(r#""raw""#), "{text}");
}

// ---------------------------------------------------------------------------------------------
// Event streams that break.

fn stream_of(chunks: Vec<Bytes>) -> FakeMcp {
    FakeMcp::new(move |_| sse_response(chunked(chunks.clone())))
}

fn ask_event() -> Bytes {
    sse_event(2, &result_message(1, asks()))
}

#[tokio::test]
async fn a_stream_that_ends_before_the_response_passes_as_it_came() {
    let progress = progress_event();
    let ask = ask_event();
    let cases: Vec<Vec<Bytes>> = vec![
        vec![],
        vec![Bytes::new()],
        vec![progress.clone()],
        vec![progress.clone(), ask.slice(..40)],
        vec![
            Bytes::from_static(b": keep-alive\n\n"),
            Bytes::from_static(b"data: {\"jsonrpc\":"),
        ],
        vec![ask.slice(..ask.len() / 2)],
    ];
    for chunks in cases {
        let stream: Vec<u8> = chunks.iter().flat_map(|c| c.to_vec()).collect();
        let h = Harness::new(layer(), stream_of(chunks));
        let reply = h.call(&deploy()).await;
        assert_eq!(reply.status, StatusCode::OK);
        assert_eq!(reply.content_type(), "text/event-stream");
        assert_eq!(reply.bytes, stream, "{}", String::from_utf8_lossy(&stream));
    }

    // A whole response cut off before its terminating blank line: clients discard an
    // unterminated event, and the layer never passes on one it has not sealed.
    let h = Harness::new(
        layer(),
        stream_of(vec![progress.clone(), ask.slice(..ask.len() - 1)]),
    );
    let reply = h.call(&deploy()).await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.bytes, progress);
}

/// The stream with each event's `requestState` taken out, and whether it was sealed.
fn unsealed(bytes: &[u8]) -> Vec<String> {
    let text = std::str::from_utf8(bytes).unwrap();
    text.split_inclusive("\n\n")
        .map(
            |event| match event.strip_prefix("event: message\nid: 2\ndata: ") {
                Some(data) => {
                    let mut message: Value = serde_json::from_str(data.trim_end()).unwrap();
                    let state = take_state(&mut message);
                    assert!(state.starts_with("v1.k1."), "{state}");
                    format!("sealed {message}")
                }
                None => event.to_owned(),
            },
        )
        .collect()
}

#[tokio::test]
async fn an_event_cut_into_tiny_chunks_is_sealed_as_if_whole() {
    let mut stream = progress_event().to_vec();
    stream.extend_from_slice(&ask_event());
    let whole = Harness::new(layer(), stream_of(vec![Bytes::from(stream.clone())]));
    let expected = unsealed(&whole.call(&deploy()).await.bytes);
    assert_eq!(expected.len(), 2);

    let crlf = String::from_utf8(stream.clone())
        .unwrap()
        .replace('\n', "\r\n");
    let cuts: Vec<Vec<Bytes>> = vec![
        stream
            .iter()
            .map(|b| Bytes::copy_from_slice(&[*b]))
            .collect(),
        stream
            .iter()
            .flat_map(|b| [Bytes::new(), Bytes::copy_from_slice(&[*b])])
            .collect(),
        stream.chunks(3).map(Bytes::copy_from_slice).collect(),
        // `\r` and `\n` of one line break in different chunks.
        crlf.as_bytes()
            .split_inclusive(|b| *b == b'\r')
            .map(Bytes::copy_from_slice)
            .collect(),
    ];
    for chunks in cuts {
        let n = chunks.len();
        let h = Harness::new(layer(), stream_of(chunks));
        let reply = h.call(&deploy()).await;
        let got = unsealed(&reply.bytes.to_vec().replace_crlf());
        assert_eq!(got, expected, "{n} chunks");
    }
}

trait ReplaceCrlf {
    fn replace_crlf(self) -> Vec<u8>;
}

impl ReplaceCrlf for Vec<u8> {
    fn replace_crlf(self) -> Vec<u8> {
        String::from_utf8(self)
            .unwrap()
            .replace("\r\n", "\n")
            .into_bytes()
    }
}

/// JSON-RPC allows one response per request; an inner service that sends its `input_required`
/// twice must not get the second copy, with its raw state and unchecked requests, to the
/// client.
#[tokio::test]
async fn a_response_event_sent_twice_is_never_passed_on_unsealed() {
    for (progress, capabilities) in [
        (false, json!({"elicitation": {}})),
        (true, json!({"elicitation": {}})),
        (true, json!({})),
    ] {
        let mut chunks = Vec::new();
        if progress {
            chunks.push(progress_event());
        }
        chunks.push(ask_event());
        chunks.push(ask_event());
        let h = Harness::new(layer(), stream_of(chunks));
        let reply = h.call(&deploy().caps(capabilities.clone())).await;
        let text = String::from_utf8_lossy(&reply.bytes).into_owned();
        assert!(
            !text.contains(r#""requestState":"inner-1""#),
            "progress {progress}, capabilities {capabilities}: {text}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// `Err` from the inner service.

#[derive(Debug, Clone, PartialEq)]
struct Boom(&'static str);

impl std::fmt::Display for Boom {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0)
    }
}

impl std::error::Error for Boom {}

/// An inner service whose `call` fails on call number `fail_on` (0-based) and answers like the
/// asking server otherwise; `poll_ready` fails once `ready_fails_after` calls were made.
#[derive(Clone)]
struct Failing {
    calls: Arc<AtomicUsize>,
    fail_on: usize,
    ready_fails_after: usize,
}

impl Failing {
    fn new(fail_on: usize, ready_fails_after: usize) -> Self {
        Self {
            calls: Arc::default(),
            fail_on,
            ready_fails_after,
        }
    }
}

impl Service<Request<RequestBody<Body>>> for Failing {
    type Response = Response<Body>;
    type Error = Boom;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Body>, Boom>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Boom>> {
        if self.calls.load(Ordering::SeqCst) >= self.ready_fails_after {
            Poll::Ready(Err(Boom("not ready")))
        } else {
            Poll::Ready(Ok(()))
        }
    }

    fn call(&mut self, request: Request<RequestBody<Body>>) -> Self::Future {
        let n = self.calls.fetch_add(1, Ordering::SeqCst);
        let fail = n == self.fail_on;
        Box::pin(async move {
            let bytes = request.into_body().collect().await.unwrap().to_bytes();
            if fail {
                return Err(Boom("call failed"));
            }
            let call: Value = serde_json::from_slice(&bytes).unwrap_or_default();
            let result = if call["params"]["inputResponses"]["approval"].is_object() {
                json!({"resultType": "complete", "content": []})
            } else {
                asks()
            };
            Ok(raw_response(
                StatusCode::OK,
                "application/json",
                serde_json::to_vec(&result_message(call["id"].clone(), result)).unwrap(),
            ))
        })
    }
}

#[tokio::test]
async fn an_err_from_call_is_the_layers_err_on_every_path() {
    for (path, request) in every_path().await {
        let service = ServiceBuilder::new()
            .layer(layer())
            .service(Failing::new(0, usize::MAX));
        let outcome = tokio::time::timeout(TIMEOUT, service.oneshot(request))
            .await
            .unwrap();
        assert_eq!(outcome.err(), Some(Boom("call failed")), "{path}");
    }
    // The probe's second call (with the verified answers) fails: that error, too.
    let service = ServiceBuilder::new()
        .layer(layer())
        .service(Failing::new(1, usize::MAX));
    let request = deploy().answers(approve()).request();
    let outcome = service.oneshot(request).await;
    assert_eq!(outcome.err(), Some(Boom("call failed")));
}

#[tokio::test]
async fn an_err_from_poll_ready_is_the_layers_err() {
    let mut service = ServiceBuilder::new()
        .layer(layer())
        .service(Failing::new(usize::MAX, 0));
    let ready = std::future::poll_fn(|cx| service.poll_ready(cx)).await;
    assert_eq!(ready.err(), Some(Boom("not ready")));

    // Ready for the probe's first call, not for its second: the probe fails with that error.
    let service = ServiceBuilder::new()
        .layer(layer())
        .service(Failing::new(usize::MAX, 1));
    let outcome = service.oneshot(deploy().answers(approve()).request()).await;
    assert_eq!(outcome.err(), Some(Boom("not ready")));
}

/// An inner service that is not ready until told: the layer is not ready either, and becomes
/// ready when it does (no buffering, no readiness of its own).
#[tokio::test]
async fn the_layer_is_ready_exactly_when_the_inner_service_is() {
    #[derive(Clone)]
    struct Gated(Arc<AtomicBool>, Arc<Mutex<Option<std::task::Waker>>>);
    impl Service<Request<RequestBody<Body>>> for Gated {
        type Response = Response<Body>;
        type Error = Infallible;
        type Future = std::future::Ready<Result<Response<Body>, Infallible>>;
        fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
            if self.0.load(Ordering::SeqCst) {
                Poll::Ready(Ok(()))
            } else {
                *self.1.lock().unwrap() = Some(cx.waker().clone());
                Poll::Pending
            }
        }
        fn call(&mut self, _: Request<RequestBody<Body>>) -> Self::Future {
            std::future::ready(Ok(raw_response(StatusCode::OK, "text/plain", "ok")))
        }
    }
    let open = Arc::new(AtomicBool::new(false));
    let waker = Arc::new(Mutex::new(None));
    let mut service = ServiceBuilder::new()
        .layer(layer())
        .service(Gated(open.clone(), waker.clone()));
    let mut cx = Context::from_waker(std::task::Waker::noop());
    assert!(service.poll_ready(&mut cx).is_pending());
    open.store(true, Ordering::SeqCst);
    waker
        .lock()
        .unwrap()
        .take()
        .expect("the inner waker")
        .wake();
    assert!(matches!(service.poll_ready(&mut cx), Poll::Ready(Ok(()))));
}

// ---------------------------------------------------------------------------------------------
// Slowness, and streams that are read as they come.

/// The layer has no timer (the crate does not depend on a runtime): a slow inner service is
/// waited for as long as it takes. Shown here with an inner service that answers only when
/// released, after the layer has been left waiting (and polled) for a while.
#[tokio::test]
async fn a_slow_inner_service_is_waited_for_without_a_timeout_of_the_layers() {
    let release = Arc::new(tokio::sync::Notify::new());
    let fake = FakeMcp::answering(support::Transport::Json, |_| asks());
    let gate = release.clone();
    let slow = tower::service_fn(move |request: Request<RequestBody<Body>>| {
        let (fake, gate) = (fake.clone(), gate.clone());
        async move {
            gate.notified().await;
            fake.service().call(request).await
        }
    });
    let service = ServiceBuilder::new().layer(layer()).service(slow);
    let mut call = Box::pin(service.oneshot(deploy().request()));
    for _ in 0..4 {
        assert!(futures_util::poll!(call.as_mut()).is_pending());
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    release.notify_one();
    let response = tokio::time::timeout(TIMEOUT, call).await.unwrap().unwrap();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    let mut message: Value = serde_json::from_slice(&bytes).unwrap();
    take_state(&mut message);
    let mut expected = result_message(1, asks());
    expected["result"]
        .as_object_mut()
        .unwrap()
        .remove("requestState");
    assert_eq!(message, expected);
}

/// An event-stream response whose chunks are whatever `stream` receives, as they arrive.
fn streamed(mut stream: mpsc::Receiver<Bytes>) -> Response<support::Body> {
    let frames = futures_util::stream::poll_fn(move |cx| {
        stream
            .poll_recv(cx)
            .map(|chunk| chunk.map(|c| Ok::<_, Infallible>(Frame::data(c))))
    });
    sse_response(StreamBody::new(frames).boxed_unsync())
}

/// Each notification is produced only after the client has read the one before it: a layer
/// that held notifications back would wait forever here.
#[tokio::test]
async fn notifications_reach_the_client_one_by_one_before_the_result() {
    const NOTIFICATIONS: usize = 50;
    let (acks, acked) = mpsc::unbounded_channel::<()>();
    let acked = Arc::new(tokio::sync::Mutex::new(Some(acked)));
    let fake = FakeMcp::new(move |request| {
        let id = request.json()["id"].clone();
        let acked = acked.clone();
        let (events, stream) = mpsc::channel::<Bytes>(1);
        tokio::spawn(async move {
            let mut acked = acked.lock().await.take().expect("called once");
            for _ in 0..NOTIFICATIONS {
                events.send(progress_event()).await.unwrap();
                acked.recv().await.expect("the client read it");
            }
            let message = result_message(id, asks());
            events.send(sse_event(2, &message)).await.unwrap();
        });
        streamed(stream)
    });
    let h = Harness::new(layer(), fake);
    let mut body = h.respond(deploy().request()).await.into_body();
    for _ in 0..NOTIFICATIONS {
        let frame = tokio::time::timeout(TIMEOUT, body.frame())
            .await
            .expect("each notification arrives on its own")
            .unwrap()
            .unwrap();
        assert_eq!(frame.into_data().unwrap(), progress_event());
        acks.send(()).unwrap();
    }
    let rest = tokio::time::timeout(TIMEOUT, body.collect())
        .await
        .unwrap()
        .unwrap()
        .to_bytes();
    assert_eq!(unsealed(&rest).len(), 1);
}

// ---------------------------------------------------------------------------------------------
// The client going away, and bodies that fail.

type FallibleBody = UnsyncBoxBody<Bytes, Boom>;

#[tokio::test]
async fn a_client_that_disconnects_mid_stream_releases_the_inner_stream() {
    let (senders, mut sender) = mpsc::unbounded_channel::<mpsc::Sender<Bytes>>();
    let fake = FakeMcp::new(move |_| {
        let (events, stream) = mpsc::channel::<Bytes>(1);
        senders.send(events).unwrap();
        streamed(stream)
    });
    let h = Harness::new(layer(), fake);
    let requests = [
        deploy().request(),
        Call::new("tools/list", json!({})).request(),
    ];
    for request in requests {
        let response = h.respond(request);
        let events = tokio::spawn(async move {
            let events = sender.recv().await.unwrap();
            events.send(progress_event()).await.unwrap();
            (events, sender)
        });
        let mut body = response.await.into_body();
        let first = tokio::time::timeout(TIMEOUT, body.frame())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        assert_eq!(first.into_data().unwrap(), progress_event());
        let (events, back) = events.await.unwrap();
        sender = back;
        drop(body);
        tokio::time::timeout(TIMEOUT, events.closed())
            .await
            .expect("the inner stream is dropped with the client's");
    }
}

#[tokio::test]
async fn a_client_that_disconnects_before_the_answer_cancels_the_inner_call() {
    let dropped = Arc::new(AtomicBool::new(false));
    let started = Arc::new(tokio::sync::Notify::new());
    let (flag, start) = (dropped.clone(), started.clone());
    let pending = tower::service_fn(move |_: Request<RequestBody<Body>>| {
        struct Guard(Arc<AtomicBool>);
        impl Drop for Guard {
            fn drop(&mut self) {
                self.0.store(true, Ordering::SeqCst);
            }
        }
        let guard = Guard(flag.clone());
        start.notify_one();
        async move {
            let _guard = guard;
            std::future::pending::<Result<Response<Body>, Infallible>>().await
        }
    });
    let service = ServiceBuilder::new().layer(layer()).service(pending);
    let call = tokio::spawn(service.oneshot(deploy().request()));
    started.notified().await;
    call.abort();
    let _ = call.await;
    assert!(dropped.load(Ordering::SeqCst));
}

fn failing_body(chunks: Vec<Result<Bytes, Boom>>) -> FallibleBody {
    let frames: Vec<Result<Frame<Bytes>, Boom>> =
        chunks.into_iter().map(|c| c.map(Frame::data)).collect();
    StreamBody::new(futures_util::stream::iter(frames)).boxed_unsync()
}

#[tokio::test]
async fn a_request_body_that_fails_is_refused_without_calling_the_inner_service() {
    let fake = FakeMcp::answering(support::Transport::Json, |_| asks());
    let service = ServiceBuilder::new()
        .layer(layer())
        .service(fake.service::<FallibleBody>());
    let request = Request::post("/mcp")
        .header(header::CONTENT_TYPE, "application/json")
        .body(failing_body(vec![
            Ok(Bytes::from_static(b"{\"jsonrpc\":\"2.0\",")),
            Err(Boom("client reset")),
        ]))
        .unwrap();
    let reply = support::send(service, request).await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
    assert_eq!(reply.json()["error"]["code"], -32600);
    assert_eq!(fake.calls(), 0);
}

#[tokio::test]
async fn an_inner_body_that_fails() {
    let respond = |content_type: &'static str, chunks: fn() -> Vec<Result<Bytes, Boom>>| {
        tower::service_fn(move |_: Request<RequestBody<Body>>| async move {
            Ok::<_, Infallible>(
                Response::builder()
                    .header(header::CONTENT_TYPE, content_type)
                    .body(failing_body(chunks()))
                    .unwrap(),
            )
        })
    };
    // JSON for an MRTR call is read whole: a failure is a 502 with a JSON-RPC error.
    let service = ServiceBuilder::new()
        .layer(layer())
        .service(respond("application/json", || {
            vec![Ok(Bytes::from_static(b"{\"jsonrpc\"")), Err(Boom("reset"))]
        }));
    let response = service.oneshot(deploy().request()).await.unwrap();
    assert_eq!(response.status(), StatusCode::BAD_GATEWAY);
    let reply = Reply::read(response).await;
    assert_eq!(
        reply.json(),
        error_message(1, -32603, "Internal error", None)
    );

    // An event stream: what came before the failure, then the failure itself.
    let service = ServiceBuilder::new()
        .layer(layer())
        .service(respond("text/event-stream", || {
            vec![Ok(progress_event()), Err(Boom("reset"))]
        }));
    let response = service.oneshot(deploy().request()).await.unwrap();
    let mut body = response.into_body();
    let first = body.frame().await.unwrap().unwrap();
    assert_eq!(first.into_data().unwrap(), progress_event());
    assert_eq!(body.frame().await.unwrap().err(), Some(Boom("reset")));

    // Other methods: the inner body as it is, failure included.
    let service = ServiceBuilder::new()
        .layer(layer())
        .service(respond("application/json", || {
            vec![Ok(Bytes::from_static(b"{")), Err(Boom("reset"))]
        }));
    let response = service
        .oneshot(Call::new("tools/list", json!({})).request())
        .await
        .unwrap();
    let mut body = response.into_body();
    assert_eq!(
        body.frame().await.unwrap().unwrap().into_data().unwrap(),
        "{"
    );
    assert_eq!(body.frame().await.unwrap().err(), Some(Boom("reset")));
}

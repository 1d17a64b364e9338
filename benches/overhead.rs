//! The layer's cost against the bare inner service, measured in the same run.
//!
//! `cargo bench --bench overhead`; the ids are stable so results compare across changes
//! (see BENCHMARKS.md). Every request goes through `oneshot` on a clone of the service and its
//! response body is collected, on a current-thread Tokio runtime.
//!
//! Criterion measures wall-clock time. With `BENCH_CLOCK=cpu` it measures the CPU time of the
//! bench's thread instead (`CLOCK_THREAD_CPUTIME_ID`), where all of a request's work runs: time
//! the thread spends waiting for a core that other processes hold is not counted, so a pair's
//! ratio moves less on a busy machine (`scripts/bench_report.py` measures this way by default).

#[allow(dead_code)]
#[path = "../examples/deploy/server.rs"]
mod server;

mod support;

/// mimalloc for both sides: glibc's allocator makes a benchmark's cost depend on which ran before
/// it (see BENCHMARKS.md). `RUSTFLAGS="--cfg bench_system_allocator"` measures with glibc's.
#[cfg(not(bench_system_allocator))]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::cell::Cell;
use std::hint::black_box;

use bytes::Bytes;
use criterion::measurement::Measurement;
use criterion::{BenchmarkGroup, Criterion};
use http::{Request, Response};
use http_body::Body;
use http_body_util::Full;
use serde_json::json;
use support::{ThreadCpuTime, call, echo, large_arguments, layer, post, send, token};
use tower::{Service, ServiceBuilder};

fn overhead<M: Measurement + 'static>(c: &mut Criterion<M>) {
    let rt = support::runtime();
    let mut group = c.benchmark_group("overhead");

    let bare = tower::service_fn(|r: Request<Full<Bytes>>| echo(r, false));
    let layered = ServiceBuilder::new()
        .layer(layer())
        .service_fn(|r| echo(r, false));
    let bare_sse = tower::service_fn(|r: Request<Full<Bytes>>| echo(r, true));
    let layered_sse = ServiceBuilder::new()
        .layer(layer())
        .service_fn(|r| echo(r, true));

    // A ~300-byte `tools/list`: a body read and a borrowed peek, original bytes forwarded.
    let list = support::list_request();
    group.bench_function("echo/bare/tools_list", |b| {
        b.to_async(&rt)
            .iter(|| async { black_box(send(&bare, post(&list, "tools/list", None)).await) })
    });
    group.bench_function("echo/layer/tools_list", |b| {
        b.to_async(&rt)
            .iter(|| async { black_box(send(&layered, post(&list, "tools/list", None)).await) })
    });

    // The first round: the inner asks, the layer seals.
    let first = call("deploy", json!({"environment": "staging"}), json!({}));
    group.bench_function("echo/bare/call_first", |b| {
        b.to_async(&rt).iter(|| async {
            black_box(send(&bare, post(&first, "tools/call", Some("deploy"))).await)
        })
    });
    group.bench_function("echo/layer/call_first", |b| {
        b.to_async(&rt).iter(|| async {
            black_box(send(&layered, post(&first, "tools/call", Some("deploy"))).await)
        })
    });

    // The retry: valid token, a 4-field accepted form; the inner completes.
    let sealed = rt.block_on(token(&layered, &first));
    let support::Retries {
        bare: retry_bare,
        layer: retry,
        reask,
    } = support::retries(json!({"environment": "staging"}), &sealed);
    group.bench_function("echo/bare/call_retry", |b| {
        b.to_async(&rt).iter(|| async {
            black_box(send(&bare, post(&retry_bare, "tools/call", Some("deploy"))).await)
        })
    });
    group.bench_function("echo/layer/call_retry", |b| {
        b.to_async(&rt).iter(|| async {
            black_box(send(&layered, post(&retry, "tools/call", Some("deploy"))).await)
        })
    });
    // The same retry with a token another replica sealed, which the layer opens in full.
    let sealed_elsewhere = rt.block_on(support::token_from_another_replica(&first));
    let retry_cold = support::retries(json!({"environment": "staging"}), &sealed_elsewhere).layer;
    group.bench_function("echo/layer/call_retry_cold", |b| {
        b.to_async(&rt).iter(|| async {
            black_box(send(&layered, post(&retry_cold, "tools/call", Some("deploy"))).await)
        })
    });
    group.bench_function("echo/layer/call_reask", |b| {
        b.to_async(&rt).iter(|| async {
            black_box(send(&layered, post(&reask, "tools/call", Some("deploy"))).await)
        })
    });

    // The same retry from a client that sends a new `_meta.progressToken` with every call.
    let progress_bare = support::with_progress_tokens(&retry_bare, support::PROGRESS_TOKENS);
    let progress_layer = support::with_progress_tokens(&retry, support::PROGRESS_TOKENS);
    cycling(
        &mut group,
        &rt,
        "echo/bare/call_retry_progress",
        &bare,
        &progress_bare,
    );
    cycling(
        &mut group,
        &rt,
        "echo/layer/call_retry_progress",
        &layered,
        &progress_layer,
    );

    // The same retry against a real rmcp server (JSON responses).
    let state = server::DeployState::new();
    let rmcp_bare = server::mcp_service(state.clone(), true);
    let rmcp_layered = ServiceBuilder::new()
        .layer(layer())
        .service(server::mcp_service(state, true));
    let rmcp_first = call("deploy", json!({"environment": "staging"}), json!({}));
    let rmcp_sealed = rt.block_on(token(&rmcp_layered, &rmcp_first));
    let staging = || json!({"environment": "staging"});
    let rmcp_retry_bare = support::approved(server::APPROVAL_KEY, staging(), None);
    let rmcp_retry = support::approved(server::APPROVAL_KEY, staging(), Some(&rmcp_sealed));
    // Every round against rmcp: `tools/list` (passed through), the first round (sealed), and the
    // first round with rmcp answering as an event stream.
    let rmcp_sse_bare = server::mcp_service(server::DeployState::new(), false);
    let rmcp_sse_layered = ServiceBuilder::new()
        .layer(layer())
        .service(server::mcp_service(server::DeployState::new(), false));
    let list_call = (&list, "tools/list", None);
    let first_call = (&rmcp_first, "tools/call", Some("deploy"));
    single(
        &mut group,
        &rt,
        "rmcp/bare/tools_list",
        &rmcp_bare,
        list_call,
    );
    single(
        &mut group,
        &rt,
        "rmcp/layer/tools_list",
        &rmcp_layered,
        list_call,
    );
    single(
        &mut group,
        &rt,
        "rmcp/bare/call_first",
        &rmcp_bare,
        first_call,
    );
    single(
        &mut group,
        &rt,
        "rmcp/layer/call_first",
        &rmcp_layered,
        first_call,
    );
    single(
        &mut group,
        &rt,
        "rmcp-sse/bare/call_first",
        &rmcp_sse_bare,
        first_call,
    );
    single(
        &mut group,
        &rt,
        "rmcp-sse/layer/call_first",
        &rmcp_sse_layered,
        first_call,
    );

    group.bench_function("rmcp/bare/call_retry", |b| {
        b.to_async(&rt).iter(|| async {
            black_box(
                send(
                    &rmcp_bare,
                    post(&rmcp_retry_bare, "tools/call", Some("deploy")),
                )
                .await,
            )
        })
    });
    group.bench_function("rmcp/layer/call_retry", |b| {
        b.to_async(&rt).iter(|| async {
            black_box(
                send(
                    &rmcp_layered,
                    post(&rmcp_retry, "tools/call", Some("deploy")),
                )
                .await,
            )
        })
    });

    // The retry with ~64 KiB of arguments.
    let large = large_arguments();
    let large_first = call("deploy", large.clone(), json!({}));
    let large_sealed = rt.block_on(token(&layered, &large_first));
    let support::Retries {
        bare: large_bare,
        layer: large_retry,
        ..
    } = support::retries(large, &large_sealed);
    group.bench_function("echo/bare/call_retry_64k", |b| {
        b.to_async(&rt).iter(|| async {
            black_box(send(&bare, post(&large_bare, "tools/call", Some("deploy"))).await)
        })
    });
    group.bench_function("echo/layer/call_retry_64k", |b| {
        b.to_async(&rt).iter(|| async {
            black_box(send(&layered, post(&large_retry, "tools/call", Some("deploy"))).await)
        })
    });

    // The first round answered as an event stream, a notification before the result.
    group.bench_function("sse/bare/call_first", |b| {
        b.to_async(&rt).iter(|| async {
            black_box(send(&bare_sse, post(&first, "tools/call", Some("deploy"))).await)
        })
    });
    group.bench_function("sse/layer/call_first", |b| {
        b.to_async(&rt).iter(|| async {
            black_box(send(&layered_sse, post(&first, "tools/call", Some("deploy"))).await)
        })
    });

    group.finish();
}

/// Benchmarks `id`: one request to `service`, `(body, Mcp-Method, Mcp-Name)`, again and again.
fn single<M: Measurement, S, B>(
    group: &mut BenchmarkGroup<'_, M>,
    rt: &tokio::runtime::Runtime,
    id: &str,
    service: &S,
    (body, method, name): (&Bytes, &str, Option<&str>),
) where
    S: Service<Request<Full<Bytes>>, Response = Response<B>> + Clone,
    S::Error: std::fmt::Debug,
    B: Body<Data = Bytes>,
    B::Error: std::fmt::Debug,
{
    group.bench_function(id, |b| {
        b.to_async(rt)
            .iter(|| async { black_box(send(service, post(body, method, name)).await) })
    });
}

/// Benchmarks `id`: requests to `service` whose bodies cycle through `bodies`, one per request.
fn cycling<M: Measurement, S, B>(
    group: &mut BenchmarkGroup<'_, M>,
    rt: &tokio::runtime::Runtime,
    id: &str,
    service: &S,
    bodies: &[Bytes],
) where
    S: Service<Request<Full<Bytes>>, Response = Response<B>> + Clone,
    S::Error: std::fmt::Debug,
    B: Body<Data = Bytes>,
    B::Error: std::fmt::Debug,
{
    let next = Cell::new(0);
    group.bench_function(id, |b| {
        b.to_async(rt).iter(|| {
            let body = &bodies[next.replace((next.get() + 1) % bodies.len())];
            async move { black_box(send(service, post(body, "tools/call", Some("deploy"))).await) }
        })
    });
}

fn main() {
    if std::env::var("BENCH_CLOCK").is_ok_and(|clock| clock == "cpu") {
        let mut c = Criterion::default()
            .with_measurement(ThreadCpuTime::default())
            .configure_from_args();
        overhead(&mut c);
    } else {
        let mut c = Criterion::default().configure_from_args();
        overhead(&mut c);
    }
    Criterion::default().configure_from_args().final_summary();
}

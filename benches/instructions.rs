//! Instructions per request, the layer against the bare inner service, counted by callgrind.
//!
//! Time on a shared machine moves by more than the layer's cost; an instruction count does not
//! move at all. `scripts/instructions.py` runs this binary under
//! `valgrind --tool=callgrind --toggle-collect=*instructions::measured*` once per benchmark id
//! of `overhead.rs` (the same services, the same request bytes), so only the measured requests
//! are counted: not the setup, not the warm-up, not valgrind's own start. Each request is driven
//! as `overhead.rs` drives it: built, sent through `oneshot` on a clone of the service, its body
//! collected, one `block_on` on a current-thread Tokio runtime.
//!
//! `instructions <id> [requests]` runs `id` (default 1,000 measured requests after 200 of
//! warm-up); `instructions` alone (or `cargo bench`, which passes only `--bench`) lists the ids.
//! Instructions are not time (a cache miss costs more than an add), so this says whether a
//! change does more or less work, and where, not what it costs in microseconds;
//! `bench_report.py` says that. One skew to know: valgrind does not run the CPU's SHA
//! extensions, so `sha2` falls back to its portable code under it, and the HMAC of each seal and
//! open counts several times what it costs natively on a CPU with SHA-NI.

#[allow(dead_code)]
#[path = "../examples/deploy/server.rs"]
mod server;
mod support;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::hint::black_box;

use bytes::Bytes;
use http::{Request, Response};
use http_body::Body;
use http_body_util::Full;
use serde_json::json;
use support::{call, echo, large_arguments, layer, post, send, token};
use tower::{Service, ServiceBuilder};

const IDS: &[&str] = &[
    "echo/bare/tools_list",
    "echo/layer/tools_list",
    "echo/bare/call_first",
    "echo/layer/call_first",
    "echo/bare/call_retry",
    "echo/layer/call_retry",
    "echo/layer/call_retry_cold",
    "echo/layer/call_reask",
    "echo/bare/call_retry_progress",
    "echo/layer/call_retry_progress",
    "echo/bare/call_retry_64k",
    "echo/layer/call_retry_64k",
    "sse/bare/call_first",
    "sse/layer/call_first",
    "rmcp/bare/tools_list",
    "rmcp/layer/tools_list",
    "rmcp/bare/call_first",
    "rmcp/layer/call_first",
    "rmcp/bare/call_retry",
    "rmcp/layer/call_retry",
    "rmcp-sse/bare/call_first",
    "rmcp-sse/layer/call_first",
];

const WARM_UP: usize = 200;

fn main() {
    // `cargo bench` passes `--bench`: flags are not ids, so a plain `cargo bench` lists the ids.
    let mut args = std::env::args()
        .skip(1)
        .filter(|arg| !arg.starts_with("--"));
    let Some(id) = args.next() else {
        for id in IDS {
            println!("{id}");
        }
        return;
    };
    let requests = match args.next().map(|n| n.parse::<usize>()) {
        None => 1_000,
        Some(Ok(n)) => n,
        Some(Err(e)) => {
            eprintln!("instructions: the number of requests: {e}");
            std::process::exit(2);
        }
    };
    if !IDS.contains(&id.as_str()) {
        eprintln!("instructions: no benchmark {id:?}; run without arguments for the list");
        std::process::exit(2);
    }
    let rt = support::runtime();
    let (kind, side, round) = {
        let mut parts = id.split('/');
        (
            parts.next().unwrap_or_default(),
            parts.next().unwrap_or_default(),
            parts.next().unwrap_or_default(),
        )
    };
    let layered = side == "layer";
    let arguments = || json!({"environment": "staging"});
    let first = call("deploy", arguments(), json!({}));
    match kind {
        "echo" | "sse" => {
            let sse = kind == "sse";
            let bare = tower::service_fn(move |r: Request<Full<Bytes>>| echo(r, sse));
            let with_layer = ServiceBuilder::new()
                .layer(layer())
                .service_fn(move |r| echo(r, sse));
            let bodies = match round {
                "tools_list" => vec![support::list_request()],
                "call_first" => vec![first],
                "call_retry_64k" => {
                    let large = large_arguments();
                    let large_first = call("deploy", large.clone(), json!({}));
                    let sealed = rt.block_on(token(&with_layer, &large_first));
                    let retries = support::retries(large, &sealed);
                    vec![if layered { retries.layer } else { retries.bare }]
                }
                _ => {
                    let sealed = if round == "call_retry_cold" {
                        rt.block_on(support::token_from_another_replica(&first))
                    } else {
                        rt.block_on(token(&with_layer, &first))
                    };
                    let retries = support::retries(arguments(), &sealed);
                    let body = match (round, layered) {
                        ("call_reask", _) => retries.reask,
                        (_, true) => retries.layer,
                        (_, false) => retries.bare,
                    };
                    if round == "call_retry_progress" {
                        support::with_progress_tokens(&body, support::PROGRESS_TOKENS)
                    } else {
                        vec![body]
                    }
                }
            };
            let method = if round == "tools_list" {
                "tools/list"
            } else {
                "tools/call"
            };
            if layered {
                drive(&rt, &with_layer, &bodies, method, requests);
            } else {
                drive(&rt, &bare, &bodies, method, requests);
            }
        }
        _ => {
            let json_responses = kind == "rmcp";
            let service = server::mcp_service(server::DeployState::new(), json_responses);
            let with_layer = ServiceBuilder::new()
                .layer(layer())
                .service(server::mcp_service(
                    server::DeployState::new(),
                    json_responses,
                ));
            let body = match round {
                "tools_list" => support::list_request(),
                "call_first" => first,
                _ => {
                    let sealed = layered.then(|| rt.block_on(token(&with_layer, &first)));
                    support::approved(server::APPROVAL_KEY, arguments(), sealed.as_deref())
                }
            };
            let method = if round == "tools_list" {
                "tools/list"
            } else {
                "tools/call"
            };
            if layered {
                drive(&rt, &with_layer, &[body], method, requests);
            } else {
                drive(&rt, &service, &[body], method, requests);
            }
        }
    }
}

/// Warms `service` up on `bodies`, then sends `requests` more inside [`measured`].
fn drive<S, B>(
    rt: &tokio::runtime::Runtime,
    service: &S,
    bodies: &[Bytes],
    method: &str,
    requests: usize,
) where
    S: Service<Request<Full<Bytes>>, Response = Response<B>> + Clone,
    S::Error: std::fmt::Debug,
    B: Body<Data = Bytes>,
    B::Error: std::fmt::Debug,
{
    let name = (method == "tools/call").then_some("deploy");
    let one = |i: usize| {
        let body = &bodies[i % bodies.len()];
        rt.block_on(async { black_box(send(service, post(body, method, name)).await) });
    };
    (0..WARM_UP).for_each(one);
    measured(requests, one);
}

/// The requests callgrind counts (`--toggle-collect=*instructions::measured*`).
#[inline(never)]
fn measured(requests: usize, one: impl Fn(usize)) {
    for i in 0..requests {
        one(WARM_UP + i);
    }
}

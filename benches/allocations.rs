//! Heap allocations per request: the layer against the bare inner service.
//!
//! `cargo bench --bench allocations` (a few seconds). The scenarios are `overhead.rs`'s echo
//! ones (`tools_list`, `call_first`, `call_retry`, `call_retry_cold`, `call_retry_progress`: a
//! new `_meta.progressToken` on every request, and the layer's `call_reask`), each request driven
//! the same way: built, sent through `oneshot` on a clone of
//! the service and its response body collected, with one `block_on` per request on a
//! current-thread Tokio runtime. After a warm-up, a counting global allocator gives the mean
//! number of allocations and of bytes allocated per request (`realloc` counts as one allocation
//! of its new size; frees are not counted). Everything in the request's path is counted, the
//! harness included; `layer − bare` is the layer's own share.
//!
//! `cargo bench --bench allocations -- 10000` sets the number of measured requests (default
//! 1000; 20 when run as a test, without `--bench`).

mod support;

use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use http::{Request, Response};
use http_body::Body;
use http_body_util::Full;
use serde_json::json;
use support::{call, echo, layer, post, send, token};
use tower::{Service, ServiceBuilder};

/// `System`, counting every allocation and the bytes asked for.
struct Counting;

static ALLOCS: AtomicU64 = AtomicU64::new(0);
static BYTES: AtomicU64 = AtomicU64::new(0);

fn record(size: usize) {
    ALLOCS.fetch_add(1, Ordering::Relaxed);
    BYTES.fetch_add(size as u64, Ordering::Relaxed);
}

// SAFETY: every call is forwarded unchanged to `System`; counting has no effect on the memory.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        record(layout.size());
        // SAFETY: the caller upholds `GlobalAlloc::alloc`'s contract, which `System` shares.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        record(layout.size());
        // SAFETY: as for `alloc`.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        record(new_size);
        // SAFETY: `ptr` was allocated by this allocator, i.e. by `System`, with `layout`.
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as for `realloc`.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Requests sent before counting, so caches and pools are warm.
const WARM_UP: usize = 100;

fn counters() -> (u64, u64) {
    (
        ALLOCS.load(Ordering::Relaxed),
        BYTES.load(Ordering::Relaxed),
    )
}

/// Mean allocations and bytes per request over `requests` requests, after a warm-up; the
/// requests' bodies cycle through `bodies` (built before counting).
fn measure<S, B>(
    rt: &tokio::runtime::Runtime,
    service: &S,
    bodies: &[Bytes],
    method: &str,
    name: Option<&str>,
    requests: usize,
) -> (f64, f64)
where
    S: Service<Request<Full<Bytes>>, Response = Response<B>> + Clone,
    S::Error: std::fmt::Debug,
    B: Body<Data = Bytes>,
    B::Error: std::fmt::Debug,
{
    let mut next = bodies.iter().cycle();
    let mut body = || next.next().expect("at least one body");
    for _ in 0..WARM_UP {
        black_box(rt.block_on(send(service, post(body(), method, name))));
    }
    let (allocs, bytes) = counters();
    for _ in 0..requests {
        black_box(rt.block_on(send(service, post(body(), method, name))));
    }
    let (allocs_after, bytes_after) = counters();
    let n = requests as f64;
    (
        (allocs_after - allocs) as f64 / n,
        (bytes_after - bytes) as f64 / n,
    )
}

/// A scenario: its name, the bare service's bodies, the layer's, `Mcp-Method`, `Mcp-Name`.
type Scenario<'a> = (&'a str, &'a [Bytes], &'a [Bytes], &'a str, Option<&'a str>);

/// `12`, or `12.3` when the mean is not a whole number.
fn count(value: f64, signed: bool) -> String {
    let whole = (value - value.round()).abs() < 0.05;
    match (whole, signed) {
        (true, false) => format!("{value:.0}"),
        (true, true) => format!("{value:+.0}"),
        (false, false) => format!("{value:.1}"),
        (false, true) => format!("{value:+.1}"),
    }
}

fn line(scenario: &str, variant: &str, (allocs, bytes): (f64, f64), signed: bool) {
    println!(
        "{scenario:<19} {variant:<14} {:>7} allocs, {:>8} bytes / request",
        count(allocs, signed),
        count(bytes, signed),
    );
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` does not: a quick smoke run.
    let args: Vec<String> = std::env::args().skip(1).collect();
    let benching = args.iter().any(|a| a == "--bench");
    let requests = args
        .iter()
        .find_map(|a| a.parse::<usize>().ok())
        .unwrap_or(if benching { 1000 } else { 20 });

    let rt = support::runtime();
    let bare = tower::service_fn(|r: Request<Full<Bytes>>| echo(r, false));
    let layered = ServiceBuilder::new()
        .layer(layer())
        .service_fn(|r| echo(r, false));

    let list = support::list_request();
    let first = call("deploy", json!({"environment": "staging"}), json!({}));
    let sealed = rt.block_on(token(&layered, &first));
    let support::Retries {
        bare: retry_bare,
        layer: retry,
        reask,
    } = support::retries(json!({"environment": "staging"}), &sealed);
    // The same retry with a token another replica sealed, which the layer opens in full.
    let sealed_elsewhere = rt.block_on(support::token_from_another_replica(&first));
    let cold = support::retries(json!({"environment": "staging"}), &sealed_elsewhere).layer;
    // The retry from a client that sends a new `_meta.progressToken` with every request.
    let progress_bare = support::with_progress_tokens(&retry_bare, support::PROGRESS_TOKENS);
    let progress_layer = support::with_progress_tokens(&retry, support::PROGRESS_TOKENS);
    let one = std::slice::from_ref;

    println!(
        "Heap allocations per request (mean of {requests} after {WARM_UP} warm-up; \
         current-thread runtime, block_on per request)"
    );
    let scenarios: [Scenario<'_>; 5] = [
        ("tools_list", one(&list), one(&list), "tools/list", None),
        (
            "call_first",
            one(&first),
            one(&first),
            "tools/call",
            Some("deploy"),
        ),
        (
            "call_retry",
            one(&retry_bare),
            one(&retry),
            "tools/call",
            Some("deploy"),
        ),
        (
            "call_retry_cold",
            one(&retry_bare),
            one(&cold),
            "tools/call",
            Some("deploy"),
        ),
        (
            "call_retry_progress",
            &progress_bare,
            &progress_layer,
            "tools/call",
            Some("deploy"),
        ),
    ];
    for (scenario, bare_body, layer_body, method, name) in scenarios {
        let b = measure(&rt, &bare, bare_body, method, name, requests);
        let l = measure(&rt, &layered, layer_body, method, name, requests);
        println!();
        line(scenario, "bare:", b, false);
        line("", "layer:", l, false);
        line("", "layer − bare:", (l.0 - b.0, l.1 - b.1), true);
    }
    let r = measure(
        &rt,
        &layered,
        one(&reask),
        "tools/call",
        Some("deploy"),
        requests,
    );
    println!();
    line("call_reask", "layer:", r, false);
}

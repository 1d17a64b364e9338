//! What a single-use retry costs: the retry of a `deploy` call (a valid 4-field form answer; the
//! echo inner completes) through a layer without single-use tokens, with the in-process store,
//! and with Redis; and, as the floor of the last, one round trip to Redis on loopback.
//!
//! `cargo bench --bench single_use` (Redis at `MCP_REDIS_URL`, default
//! `redis://127.0.0.1:6379`; keys under a prefix of the run's own, which expire with their
//! tokens). A single-use token can be retried once, so every iteration retries a token of its
//! own: each is minted by a first round through the same layer just before it, untimed, and only
//! the retry is timed (wall clock, `iter_custom`). The retry's token is then the one the layer
//! sealed last, as in a real flow on one replica. Every request goes through `oneshot` on a
//! current-thread Tokio runtime and its body is collected, as in `benches/overhead.rs`.

mod support;

#[cfg(not(bench_system_allocator))]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::hint::black_box;
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use criterion::Criterion;
use http::{Request, Response};
use http_body::Body;
use http_body_util::Full;
use serde_json::json;
use support::{call, echo, layer, post, retries, send, token};
use tower::{Service, ServiceBuilder};
use tower_elicitation::redis::RedisStore;
use tower_elicitation::store::{Consumed, MemoryTokenStore, TokenStore};

/// Times `iters` retries, each with a token of its own minted (untimed) just before it.
async fn timed_retries<S, B>(service: &S, iters: u64) -> Duration
where
    S: Service<Request<Full<Bytes>>, Response = Response<B>> + Clone,
    S::Error: std::fmt::Debug,
    B: Body<Data = Bytes>,
    B::Error: std::fmt::Debug,
{
    let first = call("deploy", json!({"environment": "staging"}), json!({}));
    let mut total = Duration::ZERO;
    for _ in 0..iters {
        let sealed = token(service, &first).await;
        let retry = retries(json!({"environment": "staging"}), &sealed).layer;
        let request = post(&retry, "tools/call", Some("deploy"));
        let started = Instant::now();
        let reply = send(service, request).await;
        total += started.elapsed();
        debug_assert!(reply.windows(13).any(|w| w == b"Profile saved"));
        black_box(reply);
    }
    total
}

fn single_use(c: &mut Criterion) {
    let rt = support::runtime();
    let url = std::env::var("MCP_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let prefix = format!(
        "tower-elicitation-bench:{}:{}:",
        std::process::id(),
        SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis())
    );
    let redis = rt.block_on(async {
        let redis = RedisStore::builder(url.as_str())
            .key_prefix(prefix.as_str())
            .build()
            .expect("a Redis URL");
        if let Err(error) = redis.ping().await {
            panic!("this bench needs a Redis at {url} (set MCP_REDIS_URL): {error}");
        }
        redis
    });

    let mut group = c.benchmark_group("single_use");
    let off = ServiceBuilder::new()
        .layer(layer())
        .service_fn(|r| echo(r, false));
    let memory = ServiceBuilder::new()
        .layer(layer().single_use(MemoryTokenStore::new()))
        .service_fn(|r| echo(r, false));
    let in_redis = ServiceBuilder::new()
        .layer(layer().single_use(redis.clone()))
        .service_fn(|r| echo(r, false));

    group.bench_function("echo/layer/call_retry", |b| {
        b.to_async(&rt)
            .iter_custom(|iters| timed_retries(&off, iters))
    });
    group.bench_function("echo/memory/call_retry", |b| {
        b.to_async(&rt)
            .iter_custom(|iters| timed_retries(&memory, iters))
    });
    group.bench_function("echo/redis/call_retry", |b| {
        b.to_async(&rt)
            .iter_custom(|iters| timed_retries(&in_redis, iters))
    });

    // The floor of the Redis retry: one round trip, and the consume itself.
    group.bench_function("redis/ping", |b| {
        b.to_async(&rt)
            .iter(|| async { redis.ping().await.expect("PONG") })
    });
    let until = SystemTime::now() + Duration::from_secs(120);
    let mut n = 0u64;
    group.bench_function("redis/consume", |b| {
        b.to_async(&rt).iter(|| {
            n += 1;
            let (redis, id) = (&redis, format!("bench-{n}"));
            async move {
                let consumed = redis.consume(&id, until).await.expect("consumed");
                debug_assert_eq!(consumed, Consumed::Fresh);
                black_box(consumed)
            }
        })
    });
    group.finish();
}

fn main() {
    let mut c = Criterion::default().configure_from_args();
    single_use(&mut c);
    Criterion::default().configure_from_args().final_summary();
}

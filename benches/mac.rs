//! The MAC at its native cost: HMAC-SHA256 over a first round's token text, as the layer
//! computes it when it seals (issue #41).
//!
//! `scripts/instructions.py` counts the layer's work with SHA-256 compression taken out, because
//! under valgrind `sha2` runs its portable code; this bench holds what that work costs on this
//! machine instead, in time. The token is a real one: a first round of the `deploy` call through
//! [`ElicitationLayer`](tower_elicitation::ElicitationLayer) in front of the echo inner service
//! (`benches/support`), as `benches/instructions.rs` makes it. What is MAC'd is what the layer
//! MACs: the domain-separation label, then `v1.<kid>.<base64url(claims)>`, with a clone of an
//! `Hmac<Sha256>` keyed once (the keyring keeps one per key); the bench checks first that the tag
//! it computes is the token's own.
//!
//! At start it prints whether the CPU has SHA extensions and which `sha2` backend runs. `sha2`
//! 0.11 chooses at run time: without a `sha2_backend`/`sha2_256_backend` cfg, its SHA-256
//! `compress` takes the SHA-NI code when `cpufeatures::new!(shani_cpuid, "sha", "sse4.1")` says
//! yes (x86/x86_64), the ARMv8 code when `cpufeatures::new!(sha2_hwcap, "sha2")` does (aarch64),
//! and the portable code otherwise; this bench asks `cpufeatures` the very same question, with
//! the same macro and features, and reads the same cfgs.
//!
//! Criterion measures wall-clock time, or with `BENCH_CLOCK=cpu` the CPU time of the bench's
//! thread (as `benches/overhead.rs`), which leaves out the time it waits for a core that other
//! processes hold; `scripts/mac_bench.py` measures the latter by default.
//!
//!     cargo bench --bench mac                    # criterion's report, wall clock
//!     python3 scripts/mac_bench.py --check       # a short run, then PASS/MISS on ≤ 1.5 µs

mod support;

use std::hint::black_box;

use bytes::Bytes;
use criterion::Criterion;
use criterion::measurement::Measurement;
use hmac::{Hmac, KeyInit, Mac};
use serde_json::json;
use sha2::Sha256;
use support::{KEY, ThreadCpuTime, call, echo, layer, token};
use tower::ServiceBuilder;

type HmacSha256 = Hmac<Sha256>;

/// The label the layer's MAC starts with (`src/token/format.rs`, `MAC_LABEL`).
const MAC_LABEL: &[u8] = b"tower-elicitation/request-state/v1\0";

#[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
cpufeatures::new!(shani, "sha", "sse4.1");
#[cfg(target_arch = "aarch64")]
cpufeatures::new!(sha2_hwcap, "sha2");

/// Whether the CPU has SHA extensions (as the standard library detects them).
fn cpu_has_sha() -> Option<bool> {
    #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
    return Some(std::arch::is_x86_feature_detected!("sha"));
    #[cfg(target_arch = "aarch64")]
    return Some(std::arch::is_aarch64_feature_detected!("sha2"));
    #[allow(unreachable_code)]
    None
}

/// The SHA-256 backend `sha2` 0.11 runs here, by its own rule (see the module docs).
fn sha2_backend() -> &'static str {
    if cfg!(any(sha2_backend = "soft", sha2_256_backend = "soft")) {
        return "soft (portable code, forced by the sha2_backend cfg)";
    }
    if cfg!(any(
        sha2_256_backend = "x86-sha",
        sha2_256_backend = "aarch64-sha2"
    )) {
        return "SHA extensions, chosen at build time by the sha2_256_backend cfg";
    }
    #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
    if shani::get() {
        return "x86-sha (SHA-NI, chosen at run time: cpufeatures found sha and sse4.1)";
    }
    #[cfg(target_arch = "aarch64")]
    if sha2_hwcap::get() {
        return "aarch64-sha2 (ARMv8 SHA2, chosen at run time: cpufeatures found sha2)";
    }
    "soft (portable code: cpufeatures found no SHA extensions)"
}

/// The text the layer MACs for `token` (everything before the tag), and the tag it carries.
fn signed_and_tag(token: &str) -> (&str, Vec<u8>) {
    use base64::Engine as _;
    let (signed, tag) = token.rsplit_once('.').expect("a v1 token has a tag");
    let tag = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(tag)
        .expect("a base64url tag");
    (signed, tag)
}

fn mac(key: &HmacSha256, signed: &str) -> [u8; 32] {
    key.clone()
        .chain_update(MAC_LABEL)
        .chain_update(signed.as_bytes())
        .finalize()
        .into_bytes()
        .into()
}

fn main() {
    let has_sha = match cpu_has_sha() {
        Some(true) => "yes",
        Some(false) => "no",
        None => "unknown on this architecture",
    };
    println!(
        "mac: CPU SHA extensions: {has_sha}; sha2 backend: {}",
        sha2_backend()
    );

    let rt = support::runtime();
    let with_layer = ServiceBuilder::new()
        .layer(layer())
        .service_fn(|r| echo(r, false));
    let first: Bytes = call("deploy", json!({"environment": "staging"}), json!({}));
    let sealed = rt.block_on(token(&with_layer, &first));
    let (signed, tag) = signed_and_tag(&sealed);
    let key = HmacSha256::new_from_slice(&KEY).expect("any key length");
    assert_eq!(
        mac(&key, signed).as_slice(),
        tag.as_slice(),
        "the bench's MAC is not the layer's: the label or the text differs"
    );
    println!(
        "mac: a first round's token is {} bytes; its MAC covers {} bytes: {} SHA-256 blocks (the key's two pads are absorbed once, when it is keyed)",
        sealed.len(),
        MAC_LABEL.len() + signed.len(),
        (MAC_LABEL.len() + signed.len() + 9).div_ceil(64) + 1,
    );

    if std::env::var("BENCH_CLOCK").is_ok_and(|clock| clock == "cpu") {
        let mut c = Criterion::default()
            .with_measurement(ThreadCpuTime::default())
            .configure_from_args();
        bench(&mut c, &key, signed);
    } else {
        let mut c = Criterion::default().configure_from_args();
        bench(&mut c, &key, signed);
    }
    Criterion::default().configure_from_args().final_summary();
}

fn bench<M: Measurement + 'static>(c: &mut Criterion<M>, key: &HmacSha256, signed: &str) {
    c.bench_function("mac/hmac_sha256/first_round", |b| {
        b.iter(|| mac(black_box(key), black_box(signed)))
    });
}

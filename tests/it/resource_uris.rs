//! Resource gates end to end, however the client spells the URI: every spelling an inner service
//! may read as a gated file reaches it only after the gate's question is answered, and it gets the
//! URI as the client sent it.

use crate::support;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::{Value, json};
use tower_elicitation::{ElicitationLayer, Gate, GateError, GateTarget};

use support::{Call, FakeMcp, Harness, Reply, Transport, layer};

const SECRETS: &str = "file:///secrets/";
const SECRETS_KEY: &str = "secrets-access";
const WEB: &str = "https://example.com/secrets/";
const WEB_KEY: &str = "web-secrets";
const MASTER: &str = "file:///keys/master";
const MASTER_KEY: &str = "master-key";

/// Spellings of a file under `file:///secrets/` that an inner service may resolve to it.
const SECRET_SPELLINGS: &[&str] = &[
    "file:///secrets/x",
    "FILE:///secrets/x",
    "file:///./secrets/x",
    "file:///a/../secrets/x",
    "file:///%73ecrets/x",
    "file://localhost/secrets/x",
    "file://LOCALHOST/secrets/x",
    "file:/secrets/x",
    "file:///secrets%2Fx",
    "file:///public%2F..%2Fsecrets/x",
    "file:////secrets/x",
    // Not URIs at all: compared as sent and as a loose reader would take them apart.
    "file:///secrets\\x",
    " file:///secrets/x",
    "FILE:///secrets/x y",
];

/// A reviewer's name, asked before a gated resource is read.
fn reviewer(key: &str) -> Gate {
    Gate::form(
        key,
        json!({"type": "object", "properties": {"reviewer": {"type": "string"}},
            "required": ["reviewer"]}),
    )
    .expect("a valid form")
    .refusal("Not without a reviewer.")
}

fn gated_layer() -> ElicitationLayer {
    layer()
        .gate(GateTarget::resource_prefix(SECRETS), reviewer(SECRETS_KEY))
        .and_then(|layer| layer.gate(GateTarget::resource_prefix(WEB), reviewer(WEB_KEY)))
        .and_then(|layer| layer.gate(GateTarget::resource(MASTER), reviewer(MASTER_KEY)))
        .expect("gates on distinct keys")
}

/// The layer in front of a `service_fn` that reads any resource it is asked for.
fn harness() -> Harness {
    let fake = FakeMcp::answering(
        Transport::Json,
        |params| json!({"contents": [{"uri": params["uri"], "text": "the secret"}]}),
    );
    Harness::new(gated_layer(), fake)
}

/// The `resources/read` calls the inner service executed, by the URI each was given.
fn reads(harness: &Harness) -> Vec<Value> {
    harness
        .fake
        .bodies()
        .into_iter()
        .filter(|body| body["method"] == "resources/read")
        .map(|body| body["params"]["uri"].clone())
        .collect()
}

/// The target claim (`t`) of a sealed token.
fn sealed_target(state: &str) -> Value {
    let body = state.split('.').nth(2).expect("a v1 token");
    let claims: Value = serde_json::from_slice(&URL_SAFE_NO_PAD.decode(body).expect("base64url"))
        .expect("JSON claims");
    claims["t"].clone()
}

fn answer(key: &str, answer: Value) -> Value {
    json!({ key: answer })
}

/// Fails unless `uri` is read only after gate `key` is answered: the first call asks, a decline
/// is refused, and an accepted answer reaches the inner service with the URI as the client sent
/// it.
async fn gated(uri: &str, key: &str) -> Result<(), String> {
    let harness = harness();
    let asked = harness.call(&Call::resource(uri)).await.json();
    let requests = asked["result"]["inputRequests"].as_object();
    if asked["result"]["resultType"] != "input_required"
        || requests.is_none_or(|requests| !requests.keys().eq([key]))
    {
        return Err(format!("{uri:?} was not asked (only) {key}: {asked}"));
    }
    if !reads(&harness).is_empty() {
        return Err(format!("{uri:?} was read before asking"));
    }
    let state = asked["result"]["requestState"]
        .as_str()
        .expect("a sealed state")
        .to_owned();
    assert_eq!(
        sealed_target(&state),
        uri,
        "the token binds the URI as sent"
    );

    let declined = harness
        .call(
            &Call::resource(uri)
                .id(2)
                .state(&state)
                .answers(answer(key, json!({"action": "decline"}))),
        )
        .await
        .json();
    assert_eq!(
        declined["error"]["data"]["gate"], key,
        "{uri:?}: {declined}"
    );
    assert!(
        reads(&harness).is_empty(),
        "{uri:?} was read after a decline"
    );

    let accepted = harness
        .call(&Call::resource(uri).id(3).state(&state).answers(answer(
            key,
            json!({"action": "accept", "content": {"reviewer": "ana"}}),
        )))
        .await
        .json();
    assert_eq!(
        accepted["result"]["contents"][0]["text"], "the secret",
        "{uri:?}: {accepted}"
    );
    assert_eq!(
        reads(&harness),
        [uri],
        "read once, as the client spelled it"
    );
    Ok(())
}

/// Every one of `uris` is read only after gate `key` is answered.
async fn assert_gated(uris: &[&str], key: &str) {
    let mut walked_around = Vec::new();
    for uri in uris {
        if let Err(why) = gated(uri, key).await {
            walked_around.push(why);
        }
    }
    assert!(
        walked_around.is_empty(),
        "gate {key} walked around:\n{}",
        walked_around.join("\n")
    );
}

#[tokio::test]
async fn every_spelling_of_a_gated_file_is_read_only_after_the_gate_is_answered() {
    assert_gated(SECRET_SPELLINGS, SECRETS_KEY).await;
}

#[tokio::test]
async fn host_case_and_default_port_do_not_walk_around_a_gate() {
    let uris = [
        "HTTPS://Example.COM:443/secrets/x",
        "https://example.com:/secrets/x",
        "https://example.com/%73ecrets/x",
        "https://example.com/secrets%2Fx",
    ];
    assert_gated(&uris, WEB_KEY).await;
}

#[tokio::test]
async fn an_exact_resource_gate_matches_every_spelling_of_its_uri() {
    let uris = [
        "file:///keys/master",
        "FILE://localhost/keys/./master",
        "file:///keys/%6Daster",
        "file:///keys%2Fmaster",
        "file:///keys/master#top",
    ];
    assert_gated(&uris, MASTER_KEY).await;
}

#[tokio::test]
async fn other_resources_are_read_without_a_question() {
    for uri in [
        "file:///secretsX/y",
        "file:///public/x",
        "file:///Secrets/x",
        "file:///keys/master2",
        "https://example.com:8443/secrets/x",
        "https://example.com.evil/secrets/x",
    ] {
        let harness = harness();
        let reply: Reply = harness.call(&Call::resource(uri)).await;
        let message = reply.json();
        assert_eq!(
            message["result"]["contents"][0]["text"], "the secret",
            "{uri:?}: {message}"
        );
        assert_eq!(reads(&harness), [uri]);
    }
}

#[tokio::test]
async fn gates_on_spellings_of_one_uri_overlap_when_declared() {
    let overlapping = [
        (
            GateTarget::resource_prefix(SECRETS),
            GateTarget::resource("FILE:///secrets/x"),
        ),
        (
            GateTarget::resource_prefix(SECRETS),
            GateTarget::resource_prefix("file://localhost/secrets/"),
        ),
        (
            GateTarget::resource(MASTER),
            GateTarget::resource("file:///keys/%6Daster"),
        ),
    ];
    for (first, second) in overlapping {
        let result = layer()
            .gate(first.clone(), reviewer("review"))
            .and_then(|layer| layer.gate(second.clone(), reviewer("review")));
        assert!(
            matches!(result, Err(GateError::DuplicateKey(ref key)) if key == "review"),
            "{first:?} and {second:?} share a key: {result:?}"
        );
    }
    assert!(
        layer()
            .gate(GateTarget::resource_prefix(SECRETS), reviewer("review"))
            .and_then(|layer| layer.gate(
                GateTarget::resource_prefix("file:///public/"),
                reviewer("review")
            ))
            .is_ok()
    );
}

//! `[identity] jwt` and `api_keys` over a real socket (issue #39 item 1): tokens signed by a test
//! issuer of the tests' own (`tests/identity/`: Ed25519 key pairs committed as test material),
//! its JWKS served on a loopback listener the test starts, which counts its fetches.

use crate::support::*;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

crate::trials! {
    [Upstreams] current_thread bearer_tokens_and_api_keys_name_the_caller,
    [Upstreams] current_thread keys_that_cannot_be_read_refuse_every_call,
    [] sync identity_mistakes_name_their_line,
}

pub(crate) const ISSUER: &str = "https://issuer.test";
pub(crate) const AUDIENCE: &str = "https://proxy.test/mcp";

fn material(name: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/identity")
        .join(name)
}

fn jwk(kid: &str) -> Value {
    serde_json::from_slice(
        &std::fs::read(material(&format!("test-issuer-{kid}.jwk.json"))).unwrap(),
    )
    .unwrap()
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// A token for `sub`, signed with `kid`'s key; `claims` override the defaults.
pub(crate) fn token(kid: &str, sub: &str, claims: Value) -> String {
    let der = std::fs::read(material(&format!("test-issuer-{kid}.der"))).unwrap();
    let mut header = Header::new(Algorithm::EdDSA);
    header.kid = Some(kid.to_owned());
    let mut body = json!({"iss": ISSUER, "aud": AUDIENCE, "sub": sub,
        "iat": now(), "exp": now() + 600});
    body.as_object_mut()
        .unwrap()
        .extend(claims.as_object().cloned().unwrap_or_default());
    jsonwebtoken::encode(&header, &body, &EncodingKey::from_ed_der(&der)).unwrap()
}

/// A token in the old algorithm-confusion attack: HS256, keyed with `kid`'s public key.
fn confused(kid: &str, sub: &str) -> String {
    let mut header = Header::new(Algorithm::HS256);
    header.kid = Some(kid.to_owned());
    let body = json!({"iss": ISSUER, "aud": AUDIENCE, "sub": sub, "exp": now() + 600});
    let public = jwk(kid)["x"].as_str().unwrap().to_owned();
    jsonwebtoken::encode(
        &header,
        &body,
        &EncodingKey::from_secret(public.as_bytes()).unwrap(),
    )
    .unwrap()
}

/// The test issuer's JWKS on loopback: the keys it serves now, and how many times it was read.
pub(crate) struct Issuer {
    keys: Arc<Mutex<Vec<Value>>>,
    fetches: Arc<AtomicUsize>,
    pub(crate) url: String,
}

pub(crate) async fn issuer(kids: &[&str]) -> Issuer {
    let keys = Arc::new(Mutex::new(
        kids.iter().map(|kid| jwk(kid)).collect::<Vec<_>>(),
    ));
    let fetches = Arc::new(AtomicUsize::new(0));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/jwks.json", listener.local_addr().unwrap());
    let (served, counted) = (Arc::clone(&keys), Arc::clone(&fetches));
    let app = axum::Router::new().route(
        "/jwks.json",
        axum::routing::get(move || {
            counted.fetch_add(1, Ordering::SeqCst);
            let keys = served.lock().unwrap().clone();
            async move { axum::Json(json!({ "keys": keys })) }
        }),
    );
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    Issuer { keys, fetches, url }
}

/// A POST of a `tools/list` with `authorization`: its status and `WWW-Authenticate`.
async fn knock(url: &str, authorization: Option<&str>) -> (u16, Option<String>) {
    let mut request = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}"#);
    if let Some(value) = authorization {
        request = request.header("authorization", value);
    }
    let response = request.send().await.unwrap();
    let challenge = response
        .headers()
        .get("www-authenticate")
        .map(|v| v.to_str().unwrap().to_owned());
    (response.status().as_u16(), challenge)
}

async fn bearer_tokens_and_api_keys_name_the_caller() {
    let issuer = issuer(&["k1"]).await;
    let port = free_port();
    let key_hash: String = Sha256::digest(b"carol-secret-key")
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let setup = Setup::new(
        "identity",
        &filesystem(),
        port,
        &format!(
            r#"
[identity]
jwt = {{ issuer = "{ISSUER}", audiences = ["{AUDIENCE}"], jwks_url = "{}", algorithms = ["EdDSA"], leeway = 0 }}
api_keys = "file:callers.txt"
"#,
            issuer.url
        ),
    );
    std::fs::write(
        setup.dir.join("callers.txt"),
        format!("# name  sha256-hex of the key\ncarol {key_hash}\n"),
    )
    .unwrap();
    let proxy = Proxy::start(&setup.config, port).await;
    assert_eq!(
        issuer.fetches.load(Ordering::SeqCst),
        1,
        "read once at start"
    );

    // No token: 401, the challenge names the metadata, which parses and names the issuer.
    let (status, challenge) = knock(&proxy.url, None).await;
    assert_eq!(status, 401);
    let metadata_url = format!("http://127.0.0.1:{port}/.well-known/oauth-protected-resource");
    assert_eq!(
        challenge.as_deref(),
        Some(format!("Bearer resource_metadata=\"{metadata_url}\"").as_str())
    );
    let metadata: Value = serde_json::from_str(
        &reqwest::get(&metadata_url)
            .await
            .unwrap()
            .text()
            .await
            .unwrap(),
    )
    .unwrap();
    assert_eq!(metadata["resource"], format!("http://127.0.0.1:{port}/mcp"));
    assert_eq!(metadata["authorization_servers"], json!([ISSUER]));
    assert_eq!(metadata["bearer_methods_supported"], json!(["header"]));

    // Expired, wrong audience, another issuer, a garbled token: 401 invalid_token.
    for bad in [
        token("k1", "alice", json!({"exp": now() - 120})),
        token("k1", "alice", json!({"aud": "https://other.test"})),
        token("k1", "alice", json!({"iss": "https://evil.test"})),
        format!("{}x", token("k1", "alice", json!({}))),
        confused("k1", "alice"),
    ] {
        let (status, challenge) = knock(&proxy.url, Some(&format!("Bearer {bad}"))).await;
        assert_eq!(status, 401);
        let challenge = challenge.unwrap();
        assert!(challenge.contains("error=\"invalid_token\""), "{challenge}");
        assert!(challenge.contains(&metadata_url), "{challenge}");
    }
    assert_eq!(
        issuer.fetches.load(Ordering::SeqCst),
        1,
        "known kid: no fetch"
    );

    // A valid token: the gate asks; alice's approval is hers, not bob's.
    let alice = format!("Bearer {}", token("k1", "alice", json!({})));
    let bob = format!("Bearer {}", token("k1", "bob", json!({})));
    let arguments = json!({"path": setup.data("a.txt").display().to_string(), "content": "A"});
    let asked = proxy
        .call_as(
            Some(("authorization", &alice)),
            "write_file",
            arguments.clone(),
            json!({}),
        )
        .await;
    let state = state_of(&asked);
    let approve = answer(
        &state,
        json!({"action": "accept", "content": {"approve": true}}),
    );
    let stolen = proxy
        .call_as(
            Some(("authorization", &bob)),
            "write_file",
            arguments.clone(),
            approve.clone(),
        )
        .await;
    assert_eq!(
        stolen["error"]["message"], "Invalid or expired requestState",
        "{stolen:#}"
    );
    assert!(!setup.data("a.txt").exists());
    let done = proxy
        .call_as(
            Some(("authorization", &alice)),
            "write_file",
            arguments,
            approve,
        )
        .await;
    assert_eq!(done["result"]["resultType"], "complete", "{done:#}");
    assert_eq!(std::fs::read_to_string(setup.data("a.txt")).unwrap(), "A");

    // An unknown kid: the JWKS is read again (now holding k2) and the call passes; another
    // unknown kid within the interval is refused without another read.
    issuer.keys.lock().unwrap().push(jwk("k2"));
    let (status, _) = knock(
        &proxy.url,
        Some(&format!("Bearer {}", token("k2", "dana", json!({})))),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(issuer.fetches.load(Ordering::SeqCst), 2);
    issuer.keys.lock().unwrap().push(jwk("k3"));
    let (status, challenge) = knock(
        &proxy.url,
        Some(&format!("Bearer {}", token("k3", "erin", json!({})))),
    )
    .await;
    assert_eq!(status, 401);
    assert!(challenge.unwrap().contains("invalid_token"));
    assert_eq!(
        issuer.fetches.load(Ordering::SeqCst),
        2,
        "no second read within the interval"
    );

    // An API key names its caller; a wrong one is refused.
    let (status, _) = knock(&proxy.url, Some("Bearer carol-secret-key")).await;
    assert_eq!(status, 200);
    let (status, _) = knock(&proxy.url, Some("Bearer carol-secret-kez")).await;
    assert_eq!(status, 401);
    // Carol's approval is not alice's either.
    let arguments = json!({"path": setup.data("c.txt").display().to_string(), "content": "C"});
    let asked = proxy
        .call_as(
            Some(("authorization", "Bearer carol-secret-key")),
            "write_file",
            arguments.clone(),
            json!({}),
        )
        .await;
    let approve = answer(
        &state_of(&asked),
        json!({"action": "accept", "content": {"approve": true}}),
    );
    let stolen = proxy
        .call_as(
            Some(("authorization", &alice)),
            "write_file",
            arguments.clone(),
            approve.clone(),
        )
        .await;
    assert_eq!(
        stolen["error"]["message"],
        "Invalid or expired requestState"
    );
    let done = proxy
        .call_as(
            Some(("authorization", "Bearer carol-secret-key")),
            "write_file",
            arguments,
            approve,
        )
        .await;
    assert_eq!(done["result"]["resultType"], "complete", "{done:#}");
    drop(proxy);
}

async fn keys_that_cannot_be_read_refuse_every_call() {
    // Nothing listens there: the JWKS cannot be read, at start or later.
    let closed = format!("http://127.0.0.1:{}/jwks.json", free_port());
    let port = free_port();
    let setup = Setup::new(
        "identity-down",
        &filesystem(),
        port,
        &format!(
            r#"
[identity]
jwt = {{ issuer = "{ISSUER}", audiences = ["{AUDIENCE}"], jwks_url = "{closed}" }}
"#
        ),
    );
    let proxy = Proxy::start(&setup.config, port).await;
    let alice = format!("Bearer {}", token("k1", "alice", json!({})));
    for _ in 0..3 {
        let (status, _) = knock(&proxy.url, Some(&alice)).await;
        assert_eq!(status, 503, "fails closed");
    }
    let arguments = json!({"path": setup.data("a.txt").display().to_string(), "content": "A"});
    let text = reqwest::Client::new()
        .post(&proxy.url)
        .header("authorization", &alice)
        .header("content-type", "application/json")
        .body(
            json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "write_file", "arguments": arguments}})
            .to_string(),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(text.status().as_u16(), 503);
    assert!(!setup.data("a.txt").exists());
    // Without a token it is still the challenge: the client learns where to get one.
    let (status, challenge) = knock(&proxy.url, None).await;
    assert_eq!(status, 401);
    assert!(challenge.unwrap().starts_with("Bearer resource_metadata="));
    drop(proxy);
}

/// `--check` on a file: its combined output and whether it succeeded.
fn check(name: &str, identity: &str, callers: Option<&str>) -> (bool, String) {
    let dir = std::env::temp_dir().join(format!("identity-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    if let Some(callers) = callers {
        std::fs::write(dir.join("callers.txt"), callers).unwrap();
    }
    let path = dir.join("proxy.toml");
    std::fs::write(
        &path,
        format!("[upstream]\ncommand = [\"true\"]\n\n[identity]\n{identity}"),
    )
    .unwrap();
    let output = std::process::Command::new(PROXY)
        .arg("--config")
        .arg(&path)
        .arg("--check")
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    (
        output.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ),
    )
}

fn identity_mistakes_name_their_line() {
    let jwt = r#"jwt = { issuer = "https://i.test", audiences = ["a"], jwks_url = "http://127.0.0.1:9/jwks" }"#;
    for (name, identity, callers, wanted) in [
        ("principal", format!("principal = \"authorization\"\n{jwt}\n"), None, "proxy.toml:6: [identity] jwt with principal"),
        ("passthrough", format!("pass_to_upstream = true\n{jwt}\n"), None, "proxy.toml:6: [identity] jwt with pass_to_upstream"),
        ("both", r#"jwt = { issuer = "https://i.test", audiences = ["a"] }"#.to_owned(), None, "proxy.toml:5: [identity] jwt: exactly one of jwks_url and jwks_file"),
        ("symmetric", r#"jwt = { issuer = "https://i.test", audiences = ["a"], jwks_file = "k.json", algorithms = ["HS256"] }"#.to_owned(), None, "proxy.toml:5: [identity] jwt: HS256 is symmetric"),
        ("stdio", "principal = \"none\"\nstdio_principal = \"me\"\n".to_owned(), None, "proxy.toml:6: [identity] stdio_principal with principal"),
        ("keyfile", "api_keys = \"file:callers.txt\"\n".to_owned(), Some("alice 0123\n"), "callers.txt:1: [identity] api_keys: the hash of \"alice\" is not 64 hex digits"),
    ] {
        let (ok, output) = check(name, &identity, callers);
        assert!(!ok, "{name}: {output}");
        assert!(output.contains(wanted), "{name}: wanted {wanted:?} in {output}");
    }
}

//! Issue #39 item 3, `approvers = "url"`, over real sockets against the built binary: the
//! caller is asked a URL question linking the call's approval page; a second person, signed in
//! with the same JWT rules, approves or denies it there; the caller's retry then runs the call,
//! or is refused naming the approver. The caller cannot approve their own call, a decision from
//! another origin is refused, and each decision is a line of the decision log.

use crate::identity::{AUDIENCE, ISSUER, issuer, token};
use crate::support::*;

use serde_json::{Value, json};

crate::trials! {
    [Upstreams] current_thread a_second_person_approves_or_denies_on_the_page,
    [Upstreams] sync approvers_url_mistakes_name_their_line,
}

fn bearer(sub: &str) -> String {
    format!("Bearer {}", token("k1", sub, json!({})))
}

/// A client that follows no redirect (the page answers a decision with 303).
fn browser() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

async fn page(url: &str, who: Option<&str>) -> (u16, String) {
    let mut request = browser().get(url);
    if let Some(who) = who {
        request = request.header("authorization", bearer(who));
    }
    let response = request.send().await.unwrap();
    (response.status().as_u16(), response.text().await.unwrap())
}

async fn decide(url: &str, who: &str, decision: &str, origin: Option<&str>) -> (u16, String) {
    let mut request = browser()
        .post(url)
        .header("authorization", bearer(who))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("decision={decision}"));
    if let Some(origin) = origin {
        request = request.header("origin", origin);
    }
    let response = request.send().await.unwrap();
    (response.status().as_u16(), response.text().await.unwrap())
}

fn link_of(asked: &Value) -> String {
    asked["result"]["inputRequests"]["approval"]["params"]["url"]
        .as_str()
        .unwrap_or_else(|| panic!("no URL question: {asked:#}"))
        .to_owned()
}

async fn a_second_person_approves_or_denies_on_the_page() {
    let issuer = issuer(&["k1"]).await;
    let port = free_port();
    let dir = std::env::temp_dir().join(format!("te-approvals-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let log = dir.join("decisions.jsonl");
    let gates = format!(
        r#"
[identity]
jwt = {{ issuer = "{ISSUER}", audiences = ["{AUDIENCE}"], jwks_url = "{}", algorithms = ["EdDSA"], leeway = 0 }}

[approvals]
approvers = ["bob", "alice"]

[log]
to = "file"
file = "{}"

[[gate]]
tools = ["create_directory"]
approvers = "url"
message = "Create {{path}}?"
"#,
        issuer.url,
        log.display()
    );
    let config = filesystem_config(&dir, &filesystem(), port, &gates);
    let proxy = Proxy::start(&config, port).await;
    let data = dir.join("data");
    let alice = bearer("alice");
    let as_alice = Some(("authorization", alice.as_str()));
    let args = |name: &str| json!({"path": data.join(name)});
    let meta = json!({"_meta": url_client_meta()});

    // The caller is asked a URL question: the link to this call's page.
    let asked = proxy
        .call_as(as_alice, "create_directory", args("approved"), meta.clone())
        .await;
    let link = link_of(&asked);
    assert!(
        link.starts_with(&format!("http://127.0.0.1:{port}/approvals/")),
        "{link}"
    );
    let question = &asked["result"]["inputRequests"]["approval"]["params"];
    assert!(
        question["message"]
            .as_str()
            .unwrap()
            .contains("Another person approves this call"),
        "{question:#}"
    );
    let decision = question["_meta"]["elicitation-proxy/decision"]
        .as_str()
        .unwrap()
        .to_owned();

    // Consent before anyone approved: asked again, nothing run.
    let early = proxy
        .call_as(
            as_alice,
            "create_directory",
            args("approved"),
            accept_signin_as("approval", &state_of(&asked)),
        )
        .await;
    assert_eq!(early["result"]["resultType"], "input_required", "{early:#}");
    assert!(!data.join("approved").exists());

    // No script, no frame; and only the names `/mcp` answers to (DNS rebinding).
    let response = browser().get(&link).send().await.unwrap();
    let csp = response.headers()["content-security-policy"]
        .to_str()
        .unwrap();
    assert!(
        csp.contains("default-src 'none'") && csp.contains("frame-ancestors 'none'"),
        "{csp}"
    );
    let rebound = browser()
        .get(&link)
        .header("host", "evil.example")
        .send()
        .await
        .unwrap();
    assert_eq!(rebound.status().as_u16(), 403);

    // Nobody signed in: the sign-in form. The caller: the call, but no buttons.
    let (status, body) = page(&link, None).await;
    assert_eq!(status, 401, "{body}");
    assert!(body.contains("name=\"token\""), "{body}");
    let (status, body) = page(&link, Some("alice")).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("You made this call"), "{body}");
    assert!(!body.contains("value=\"approve\""), "{body}");
    let (status, _) = decide(&link, "alice", "approve", None).await;
    assert_eq!(status, 403, "the caller approves their own call");
    let (status, _) = decide(&link, "mallory", "approve", None).await;
    assert_eq!(status, 403, "not one of [approvals] approvers");
    let (status, _) = decide(&link, "bob", "approve", Some("https://evil.example")).await;
    assert_eq!(status, 403, "a decision from another origin");
    let (status, _) = decide(&link, "bob", "approve", Some("null")).await;
    assert_eq!(status, 403, "a decision from an opaque origin");

    // The approver sees the call whole, and approves it.
    let (status, body) = page(&link, Some("bob")).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("Signed in as <strong>bob</strong>"), "{body}");
    assert!(body.contains(&decision), "{body}");
    assert!(body.contains("approved&quot;"), "the arguments: {body}");
    assert!(
        body.contains("input schema"),
        "the tool's definition: {body}"
    );
    assert!(body.contains("value=\"approve\""), "{body}");
    let (status, _) = decide(
        &link,
        "bob",
        "approve",
        Some(&format!("http://127.0.0.1:{port}")),
    )
    .await;
    assert_eq!(status, 303);
    let done = proxy
        .call_as(
            as_alice,
            "create_directory",
            args("approved"),
            accept_signin_as("approval", &state_of(&early)),
        )
        .await;
    assert_ne!(done["result"]["isError"], true, "{done:#}");
    assert!(data.join("approved").is_dir(), "{done:#}");
    let (_, body) = page(&link, Some("bob")).await;
    assert!(
        body.contains("No call waits") || body.contains("and run"),
        "{body}"
    );

    // Denied: the retry is refused, naming the approver.
    let asked = proxy
        .call_as(as_alice, "create_directory", args("denied"), meta.clone())
        .await;
    let link = link_of(&asked);
    let (status, _) = decide(&link, "bob", "deny", None).await;
    assert_eq!(status, 303);
    let refused = proxy
        .call_as(
            as_alice,
            "create_directory",
            args("denied"),
            accept_signin_as("approval", &state_of(&asked)),
        )
        .await;
    assert_eq!(refused["result"]["isError"], true, "{refused:#}");
    let text = refused["result"]["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("\"bob\" denied this call"), "{text}");
    assert!(!data.join("denied").exists());

    // Another caller's link is no good for this call: the page is keyed by the call.
    let asked_carol = proxy
        .call_as(
            Some(("authorization", &bearer("carol"))),
            "create_directory",
            args("carol"),
            meta,
        )
        .await;
    assert_ne!(link_of(&asked_carol), link);
    drop(proxy);

    let lines: Vec<Value> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let approved = lines
        .iter()
        .find(|l| l["decision"] == "approved")
        .unwrap_or_else(|| panic!("{lines:#?}"));
    assert_eq!(approved["approver"], "bob");
    assert_eq!(approved["principal"], "alice");
    assert_eq!(approved["decision_id"], decision.as_str());
    assert!(lines.iter().any(|l| l["decision"] == "gates_accepted"));
    assert!(
        lines
            .iter()
            .any(|l| l["decision"] == "denied" && l["approver"] == "bob")
    );
    assert!(
        lines
            .iter()
            .any(|l| l["decision"] == "gate_refused" && l["why"] == "denied_by_approver"),
        "{lines:#?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The retry params accepting the URL question `key` asked with `state`.
fn accept_signin_as(key: &str, state: &str) -> Value {
    json!({"requestState": state, "inputResponses": {key: {"action": "accept"}},
        "_meta": url_client_meta()})
}

fn approvers_url_mistakes_name_their_line() {
    let dir = std::env::temp_dir().join(format!("te-approvals-bad-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    for (text, expected) in [
        (
            "\n[[gate]]\ntools = [\"write_file\"]\napprovers = \"url\"\n",
            ":7: gate 1: approvers = \"url\" needs [identity] jwt or api_keys",
        ),
        (
            "\n[identity]\napi_keys = \"file:k.txt\"\n\n[[gate]]\ntools = [\"write_file\"]\napprovers = \"url\"\nform.ok = { type = \"boolean\" }\n",
            ":10: gate 1: approvers = \"url\": the approval page is the question",
        ),
        (
            "\n[[gate]]\ntools = [\"write_file\"]\napprovers = \"boss\"\n",
            ":7: gate 1: approvers \"boss\"",
        ),
        (
            "\n[approvals]\nurl = \"https://gate.example.com/approve\"\n",
            ":8: [approvals] url \"https://gate.example.com/approve\": an http(s) origin",
        ),
    ] {
        let config = filesystem_config(&dir, &filesystem(), free_port(), text);
        std::fs::write(dir.join("k.txt"), format!("bob {}\n", "0".repeat(64))).unwrap();
        check_fails_with(&config, expected);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

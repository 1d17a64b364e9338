//! Forms end to end: answers as the 2025-11-25 schema and current clients send them, and the
//! order of a form's members as the client is shown it.
//!
//! The order checks read the client's bytes, never a parsed `serde_json::Value` (whose key order
//! depends on serde_json's features).

use crate::support;

use bytes::Bytes;
use http::StatusCode;
use serde::de::{Deserialize, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::{Value, json};
use tower_elicitation::{ElicitationLayer, Gate, GateTarget};

use support::{
    Call, FakeMcp, Harness, Received, Transport, chunked, error_message, keyring, layer,
    raw_response, result_message, sse_response,
};

// ---------------------------------------------------------------------------------------------
// Helpers.

fn deploy() -> Call {
    Call::tool("deploy").args(json!({"env": "staging"}))
}

fn accept(content: Value) -> Value {
    json!({"action": "accept", "content": content})
}

fn done() -> Value {
    json!({"resultType": "complete", "content": [{"type": "text", "text": "Deployed"}]})
}

/// A server that asks `question` under `key` until it is given an answer, then completes.
fn asking(key: &'static str, question: Value) -> FakeMcp {
    FakeMcp::answering(Transport::Json, move |params| {
        if params["inputResponses"].get(key).is_some() {
            done()
        } else {
            json!({"resultType": "input_required", "inputRequests": {key: question.clone()}})
        }
    })
}

fn form(properties: Value, required: &[&str]) -> Value {
    json!({"method": "elicitation/create", "params": {"mode": "form", "message": "Details?",
        "requestedSchema": {"type": "object", "properties": properties, "required": required}}})
}

/// The answers the inner service was last given.
fn delivered(h: &Harness) -> Value {
    h.fake.last().json()["params"]["inputResponses"].clone()
}

/// The message of question `key` in an `input_required` reply.
fn message_of(reply: &Value, key: &str) -> String {
    reply["result"]["inputRequests"][key]["params"]["message"]
        .as_str()
        .unwrap_or_else(|| panic!("no message for {key} in {reply}"))
        .to_owned()
}

/// The `description` of field `field` of question `key` in an `input_required` reply.
fn description_of(reply: &Value, key: &str, field: &str) -> String {
    reply["result"]["inputRequests"][key]["params"]["requestedSchema"]["properties"][field]
        ["description"]
        .as_str()
        .unwrap_or_else(|| panic!("no description for {key}.{field} in {reply}"))
        .to_owned()
}

/// The JSON of the one `data:` line in an event stream, as text.
fn sse_data(bytes: &[u8]) -> String {
    let text = std::str::from_utf8(bytes).expect("UTF-8");
    let data: Vec<&str> = text
        .lines()
        .filter_map(|line| line.strip_prefix("data: "))
        .collect();
    assert_eq!(data.len(), 1, "{text}");
    data[0].to_owned()
}

// ---------------------------------------------------------------------------------------------
// Item 7: answers as the 2025-11-25 schema and current clients send them.

/// An optional multi-select (untitled and titled) with `minItems`, left out of the content, is a
/// valid answer: it is not in `required`.
#[tokio::test]
async fn an_optional_multi_select_left_out_is_a_valid_answer() {
    let properties = json!({
        "name": {"type": "string", "minLength": 1},
        "tags": {"type": "array", "minItems": 1, "maxItems": 2,
            "items": {"type": "string", "enum": ["a", "b", "c"]}},
        "labels": {"type": "array", "minItems": 1,
            "items": {"anyOf": [{"const": "x", "title": "X"}, {"const": "y", "title": "Y"}]}}
    });
    let h = Harness::new(layer(), asking("details", form(properties, &["name"])));
    let token = h.call(&deploy()).await.state();

    let answers = json!({"details": accept(json!({"name": "Ada"}))});
    let reply = h.call(&deploy().id(2).state(&token).answers(answers)).await;

    assert_eq!(reply.json(), result_message(2, done()));
    assert_eq!(h.fake.calls(), 2);
    assert_eq!(
        delivered(&h),
        json!({"details": accept(json!({"name": "Ada"}))})
    );
}

/// Titled single-selects (`oneOf` of `{const, title}`) and titled multi-selects (`items.anyOf`)
/// take valid picks, and re-ask invalid ones with a hint naming the allowed values.
#[tokio::test]
async fn titled_single_and_multi_selects_are_validated() {
    let properties = json!({
        "env": {"type": "string", "title": "Environment", "oneOf": [
            {"const": "stg", "title": "Staging"}, {"const": "prd", "title": "Production"}]},
        "regions": {"type": "array", "title": "Regions", "minItems": 1, "items": {"anyOf": [
            {"const": "eu", "title": "Europe"}, {"const": "us", "title": "Americas"}]}}
    });
    let question = form(properties, &["env", "regions"]);
    for (content, field, name, hint) in [
        (
            json!({"env": "dev", "regions": ["eu"]}),
            "env",
            "Environment",
            "Choose one of Staging, Production.",
        ),
        (
            json!({"env": "prd", "regions": ["eu", "mars"]}),
            "regions",
            "Regions",
            "Choose only from Europe, Americas.",
        ),
        (
            json!({"env": "prd", "regions": []}),
            "regions",
            "Regions",
            "Choose at least 1 option.",
        ),
    ] {
        let h = Harness::new(layer(), asking("details", question.clone()));
        let token = h.call(&deploy()).await.state();
        let answers = json!({"details": accept(content.clone())});
        let reask = h
            .call(&deploy().id(2).state(&token).answers(answers))
            .await
            .json();
        assert_eq!(
            message_of(&reask, "details"),
            format!("Details?\n\nPlease correct: {name}."),
            "{content}"
        );
        assert_eq!(description_of(&reask, "details", field), hint, "{content}");
        assert_eq!(h.fake.calls(), 1, "{content}");

        let token = reask["result"]["requestState"].as_str().unwrap();
        let valid = json!({"details": accept(json!({"env": "prd", "regions": ["us", "eu"]}))});
        let reply = h
            .call(&deploy().id(3).state(token).answers(valid.clone()))
            .await;
        assert_eq!(reply.json(), result_message(3, done()), "{content}");
        assert_eq!(delivered(&h), valid, "{content}");
    }
}

/// A decline or a cancel reaches the inner service as the bare action: any `content` the client
/// attached is dropped, in a sealed retry and in answers sent without state (probe).
#[tokio::test]
async fn a_decline_or_cancel_reaches_the_inner_service_without_content() {
    let question = form(json!({"approve": {"type": "boolean"}}), &["approve"]);
    for action in ["decline", "cancel"] {
        let answer = json!({"details": {"action": action,
            "content": {"approve": true, "note": "from a client that kept the form"}}});
        let bare = json!({"details": {"action": action}});

        let h = Harness::new(layer(), asking("details", question.clone()));
        let token = h.call(&deploy()).await.state();
        let reply = h
            .call(&deploy().id(2).state(&token).answers(answer.clone()))
            .await;
        assert_eq!(reply.json(), result_message(2, done()));
        assert_eq!(delivered(&h), bare, "{action}");

        let h = Harness::new(layer(), asking("details", question.clone()));
        let reply = h.call(&deploy().id(2).answers(answer)).await;
        assert_eq!(reply.json(), result_message(2, done()));
        assert_eq!(delivered(&h), bare, "{action} without state");
    }
}

/// A decline or a cancel of the inner's question asked after a gate reaches the inner service
/// without content, and the gate's accepted answer with it.
#[tokio::test]
async fn a_decline_after_a_gate_reaches_the_inner_service_without_content() {
    let gate = Gate::form(
        "approval",
        json!({"type": "object", "properties": {"approve": {"type": "boolean"}},
            "required": ["approve"]}),
    )
    .expect("a form");
    let layer = ElicitationLayer::new(keyring())
        .gate(GateTarget::tool("deploy"), gate)
        .expect("one gate");
    let question = form(json!({"note": {"type": "string"}}), &[]);
    let h = Harness::new(layer, asking("details", question));

    let asked = h.call(&deploy()).await;
    let approval = json!({"approval": accept(json!({"approve": true}))});
    let reply = h
        .call(&deploy().id(2).state(&asked.state()).answers(approval))
        .await;
    let token = reply.state();
    let answer = json!({"details": {"action": "decline", "content": {"note": "kept"}}});
    let reply = h.call(&deploy().id(3).state(&token).answers(answer)).await;
    assert_eq!(reply.json(), result_message(3, done()));
    assert_eq!(
        delivered(&h),
        json!({"details": {"action": "decline"},
            "approval": accept(json!({"approve": true}))})
    );
}

/// `_meta` inside an elicitation's params (an app-rendered form names its UI resource there)
/// reaches the client as the inner service wrote it, in the first round and in a re-ask.
#[tokio::test]
async fn meta_in_an_elicitations_params_reaches_the_client() {
    let meta = json!({"ui": {"resourceUri": "ui://forms/profile"}, "io.example/x": [1, 2]});
    let mut question = form(
        json!({"name": {"type": "string", "minLength": 2}}),
        &["name"],
    );
    question["params"]["_meta"] = meta.clone();
    for transport in [Transport::Json, Transport::Sse] {
        let asked = question.clone();
        let fake = FakeMcp::answering(transport, move |params| {
            if params["inputResponses"].get("details").is_some() {
                done()
            } else {
                json!({"resultType": "input_required", "inputRequests": {"details": asked.clone()}})
            }
        });
        let h = Harness::new(layer(), fake);
        let first = h.call(&deploy()).await;
        let first = match transport {
            Transport::Json => first.json(),
            _ => serde_json::from_str(&sse_data(&first.bytes)).expect("JSON"),
        };
        let shown = &first["result"]["inputRequests"]["details"];
        assert_eq!(shown, &question, "{transport:?}");

        let token = first["result"]["requestState"].as_str().unwrap();
        let answers = json!({"details": accept(json!({"name": "A"}))});
        let reask = h
            .call(&deploy().id(2).state(token).answers(answers))
            .await
            .json();
        let again = &reask["result"]["inputRequests"]["details"];
        assert_eq!(again["params"]["_meta"], meta, "{transport:?}");
        // The same form, but for the problem on the field.
        let mut schema = again["params"]["requestedSchema"].clone();
        let problem = schema["properties"]["name"]
            .as_object_mut()
            .unwrap()
            .remove("description");
        assert_eq!(
            problem,
            Some(json!("Use at least 2 characters (you entered 1)."))
        );
        assert_eq!(schema, question["params"]["requestedSchema"]);
        // Asked for nothing this time: the question comes back as it was, `_meta` and all.
        let token = reask["result"]["requestState"].as_str().unwrap();
        let reask = h
            .call(&deploy().id(3).state(token).answers(json!({})))
            .await
            .json();
        assert_eq!(reask["result"]["inputRequests"]["details"], question);
    }
}

/// The same through gates: declared with `json!`, and derived with `form_for` from an
/// `Option<Vec<_>>` of a string enum with a minimum length.
#[tokio::test]
async fn an_optional_multi_select_left_out_passes_a_gate() {
    #[derive(schemars::JsonSchema)]
    #[allow(dead_code)]
    enum Region {
        Eu,
        Us,
    }
    #[derive(schemars::JsonSchema)]
    #[allow(dead_code)]
    struct Release {
        approve: bool,
        #[schemars(length(min = 1))]
        regions: Option<Vec<Region>>,
    }
    let declared = Gate::form(
        "release",
        json!({"type": "object", "properties": {
            "approve": {"type": "boolean"},
            "regions": {"type": "array", "minItems": 1,
                "items": {"anyOf": [{"const": "Eu", "title": "EU"}, {"const": "Us", "title": "US"}]}}
        }, "required": ["approve"]}),
    )
    .expect("a form");
    let derived = Gate::form_for::<Release>("release").expect("a flat form");
    for gate in [declared, derived] {
        let layer = ElicitationLayer::new(keyring())
            .gate(GateTarget::tool("deploy"), gate)
            .expect("one gate");
        let h = Harness::new(layer, FakeMcp::answering(Transport::Json, |_| done()));
        let asked = h.call(&deploy()).await;
        let text = std::str::from_utf8(&asked.bytes).unwrap().to_owned();
        let answer = json!({"release": accept(json!({"approve": true}))});
        let reply = h
            .call(&deploy().id(2).state(&asked.state()).answers(answer.clone()))
            .await;
        assert_eq!(reply.json(), result_message(2, done()), "{text}");
        assert_eq!(delivered(&h), answer, "{text}");
    }
}

// ---------------------------------------------------------------------------------------------
// Item 8: the client sees a form's members in the order its author wrote them.

/// A JSON value with every object's members in the order they were written (anything else is
/// only skipped).
#[derive(Debug)]
enum Ordered {
    Object(Vec<(String, Ordered)>),
    Other,
}

impl<'de> Deserialize<'de> for Ordered {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Ordered;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("JSON")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Ordered, A::Error> {
                let mut members = Vec::new();
                while let Some((key, value)) = map.next_entry()? {
                    members.push((key, value));
                }
                Ok(Ordered::Object(members))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Ordered, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Ordered::Other)
            }
            fn visit_bool<E>(self, _: bool) -> Result<Ordered, E> {
                Ok(Ordered::Other)
            }
            fn visit_i64<E>(self, _: i64) -> Result<Ordered, E> {
                Ok(Ordered::Other)
            }
            fn visit_u64<E>(self, _: u64) -> Result<Ordered, E> {
                Ok(Ordered::Other)
            }
            fn visit_f64<E>(self, _: f64) -> Result<Ordered, E> {
                Ok(Ordered::Other)
            }
            fn visit_str<E>(self, _: &str) -> Result<Ordered, E> {
                Ok(Ordered::Other)
            }
            fn visit_unit<E>(self) -> Result<Ordered, E> {
                Ok(Ordered::Other)
            }
        }
        d.deserialize_any(V)
    }
}

impl Ordered {
    fn get(&self, key: &str) -> &Ordered {
        match self {
            Ordered::Object(members) => members
                .iter()
                .find(|(k, _)| k == key)
                .map(|(_, v)| v)
                .unwrap_or_else(|| panic!("no member {key}")),
            _ => panic!("not an object where {key} was looked for"),
        }
    }

    fn keys(&self) -> Vec<&str> {
        match self {
            Ordered::Object(members) => members.iter().map(|(k, _)| k.as_str()).collect(),
            _ => panic!("not an object"),
        }
    }
}

/// The member names of `params`, of `params.requestedSchema` and of its `properties`, in the
/// order the client got them, for question `key` of the JSON-RPC message `text`.
fn form_order(text: &str, key: &str) -> [Vec<String>; 3] {
    let message: Ordered = serde_json::from_str(text).expect("JSON");
    let params = message
        .get("result")
        .get("inputRequests")
        .get(key)
        .get("params");
    let schema = params.get("requestedSchema");
    let owned = |keys: Vec<&str>| keys.into_iter().map(str::to_owned).collect();
    [
        owned(params.keys()),
        owned(schema.keys()),
        owned(schema.get("properties").keys()),
    ]
}

/// What the profile form's author wrote: no member of any object in alphabetical order.
const PROFILE_PRETTY: &str = r#"{
    "method": "elicitation/create",
    "params": {
        "mode": "form",
        "message": "Your profile?",
        "requestedSchema": {
            "type": "object",
            "properties": {
                "first_name": {"type": "string", "title": "First name", "minLength": 1},
                "last_name": {"type": "string", "title": "Last name"},
                "email": {"type": "string", "title": "Email", "format": "email"},
                "age": {"type": "integer", "minimum": 1.0e1, "maximum": 130}
            },
            "required": ["first_name", "last_name", "email"]
        }
    }
}"#;

/// The same form as the client must see it: minified, members and number text as written.
const PROFILE_SHOWN: &str = r#"{"method":"elicitation/create","params":{"mode":"form","message":"Your profile?","requestedSchema":{"type":"object","properties":{"first_name":{"type":"string","title":"First name","minLength":1},"last_name":{"type":"string","title":"Last name"},"email":{"type":"string","title":"Email","format":"email"},"age":{"type":"integer","minimum":1.0e1,"maximum":130}},"required":["first_name","last_name","email"]}}}"#;

fn profile_order() -> [Vec<String>; 3] {
    let owned = |keys: &[&str]| keys.iter().map(|k| (*k).to_owned()).collect();
    [
        owned(&["mode", "message", "requestedSchema"]),
        owned(&["type", "properties", "required"]),
        owned(&["first_name", "last_name", "email", "age"]),
    ]
}

fn profile_answer() -> Value {
    json!({"profile": accept(json!({"first_name": "Ada", "last_name": "Lovelace",
        "email": "ada@example.com"}))})
}

/// An inner service that asks the profile form, written as `question`, with state `inner-1`,
/// over `sse` or JSON, until it is answered.
fn profile_server(question: &'static str, sse: bool) -> FakeMcp {
    FakeMcp::new(move |request: &Received| {
        let call = request.json();
        let id = call["id"].to_string();
        if call["params"]["inputResponses"].get("profile").is_some() {
            let body = result_message(call["id"].clone(), done()).to_string();
            return raw_response(StatusCode::OK, "application/json", body);
        }
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":{id},"result":{{"resultType":"input_required","inputRequests":{{"profile":{question}}},"requestState":"inner-1"}}}}"#
        );
        if sse {
            let event = format!("event: message\nid: 1\ndata: {body}\n\n");
            sse_response(chunked([Bytes::from(event)]))
        } else {
            raw_response(StatusCode::OK, "application/json", body)
        }
    })
}

/// A pretty-printed inner question reaches the client minified, in the inner's order, with its
/// numbers as written; answers to it are validated as before.
#[tokio::test]
async fn a_form_reaches_the_client_in_the_inners_order_in_a_json_response() {
    let h = Harness::new(layer(), profile_server(PROFILE_PRETTY, false));
    let reply = h.call(&deploy()).await;
    let text = std::str::from_utf8(&reply.bytes).unwrap();
    assert_eq!(form_order(text, "profile"), profile_order(), "{text}");
    assert!(
        text.contains(&format!(r#""inputRequests":{{"profile":{PROFILE_SHOWN}}}"#)),
        "{text}"
    );

    let token = reply.state();
    let answer = json!({"profile": accept(json!({"first_name": "Ada", "last_name": "Lovelace",
        "email": "not an address"}))});
    let reask = h.call(&deploy().id(2).state(&token).answers(answer)).await;
    assert_eq!(h.fake.calls(), 1);
    assert_eq!(
        description_of(&reask.json(), "profile", "email"),
        "Enter an email address, such as name@example.com.",
    );
    let reply = h
        .call(
            &deploy()
                .id(3)
                .state(&reask.state())
                .answers(profile_answer()),
        )
        .await;
    assert_eq!(reply.json(), result_message(3, done()));
    assert_eq!(delivered(&h), profile_answer());
}

/// The same over an event stream.
#[tokio::test]
async fn a_form_reaches_the_client_in_the_inners_order_in_an_event_stream() {
    let minified: &'static str = Box::leak(
        PROFILE_PRETTY
            .lines()
            .map(str::trim)
            .collect::<Vec<_>>()
            .join("")
            .into_boxed_str(),
    );
    let h = Harness::new(layer(), profile_server(minified, true));
    let reply = h.call(&deploy()).await;
    assert_eq!(reply.content_type(), "text/event-stream");
    let data = sse_data(&reply.bytes);
    assert_eq!(form_order(&data, "profile"), profile_order(), "{data}");

    let message: Value = serde_json::from_str(&data).unwrap();
    let token = message["result"]["requestState"].as_str().unwrap();
    let reply = h
        .call(&deploy().id(2).state(token).answers(profile_answer()))
        .await;
    assert_eq!(reply.json(), result_message(2, done()));
}

/// What the client is shown and what the layer validates are one JSON value: a question that
/// repeats a key anywhere (which a client and a validator could read two ways) is never shown.
#[tokio::test]
async fn a_question_that_repeats_a_key_is_never_shown() {
    let twice: &'static str = r#"{"method":"elicitation/create","params":{"mode":"form","message":"m","requestedSchema":{"type":"object","properties":{"first_name":{"type":"string"},"first_name":{"type":"boolean"}}}}}"#;
    let h = Harness::new(layer(), profile_server(twice, false));
    let reply = h.call(&deploy()).await;
    assert_eq!(
        reply.json(),
        error_message(1, -32603, "Internal error", None)
    );
}

/// A re-ask, for an invalid answer (with a hint) or a missing one, shows the form in the inner's
/// order too, and so does a re-ask of answers sent without state.
#[tokio::test]
async fn a_reask_shows_the_form_in_the_inners_order() {
    let h = Harness::new(layer(), profile_server(PROFILE_PRETTY, false));
    let token = h.call(&deploy()).await.state();

    let invalid = json!({"profile": accept(json!({"first_name": "", "last_name": "L",
        "email": "a@example.com"}))});
    let reask = h
        .call(&deploy().id(2).state(&token).answers(invalid.clone()))
        .await;
    let text = std::str::from_utf8(&reask.bytes).unwrap().to_owned();
    assert_eq!(form_order(&text, "profile"), profile_order(), "{text}");
    assert_eq!(
        description_of(&reask.json(), "profile", "first_name"),
        "This field cannot be empty.",
        "{text}"
    );

    let missing = h
        .call(&deploy().id(3).state(&reask.state()).answers(json!({})))
        .await;
    let text = std::str::from_utf8(&missing.bytes).unwrap();
    assert_eq!(form_order(text, "profile"), profile_order(), "{text}");
    // Asked as it was last asked: the inner's text, with the valid answers pre-filled (and no
    // problem on the field that had one).
    let mut shown = reask.json()["result"]["inputRequests"]["profile"].clone();
    shown["params"]["message"] = json!("Your profile?");
    shown["params"]["requestedSchema"]["properties"]["first_name"]
        .as_object_mut()
        .unwrap()
        .remove("description");
    assert_eq!(
        missing.json()["result"]["inputRequests"]["profile"],
        shown,
        "{text}"
    );

    // Answers without state: the layer asks the inner service, then re-asks in its order.
    let h = Harness::new(layer(), profile_server(PROFILE_PRETTY, false));
    let reask = h.call(&deploy().id(4).answers(invalid)).await;
    let text = std::str::from_utf8(&reask.bytes).unwrap();
    assert_eq!(form_order(text, "profile"), profile_order(), "{text}");
}

/// A gate's form declared with `json!` reaches the client in the order it was declared, in the
/// first ask and in a re-ask.
#[cfg(feature = "preserve_order")]
#[tokio::test]
async fn a_gate_form_reaches_the_client_in_its_declared_order() {
    let gate = Gate::form(
        "profile",
        json!({
            "type": "object",
            "properties": {
                "first_name": {"type": "string", "title": "First name", "minLength": 1},
                "last_name": {"type": "string", "title": "Last name"},
                "email": {"type": "string", "title": "Email", "format": "email"},
                "age": {"type": "integer", "minimum": 10, "maximum": 130}
            },
            "required": ["first_name", "last_name", "email"]
        }),
    )
    .expect("a form");
    let layer = ElicitationLayer::new(keyring())
        .gate(GateTarget::tool("deploy"), gate)
        .expect("one gate");
    let h = Harness::new(layer, asking("unused", json!({})));

    let asked = h.call(&deploy()).await;
    let text = std::str::from_utf8(&asked.bytes).unwrap();
    assert_eq!(form_order(text, "profile"), profile_order(), "{text}");

    let invalid = json!({"profile": accept(json!({"first_name": "Ada"}))});
    let reask = h
        .call(&deploy().id(2).state(&asked.state()).answers(invalid))
        .await;
    let text = std::str::from_utf8(&reask.bytes).unwrap();
    assert_eq!(form_order(text, "profile"), profile_order(), "{text}");
    assert!(
        description_of(&reask.json(), "profile", "last_name").contains("is required"),
        "{text}"
    );
    assert_eq!(h.fake.calls(), 0);
}

/// `Gate::form_for` shows a struct's fields in their declaration order, in the first ask and in
/// a re-ask.
#[cfg(feature = "preserve_order")]
#[tokio::test]
async fn a_gate_form_for_a_struct_shows_its_fields_in_order() {
    #[derive(schemars::JsonSchema)]
    #[allow(dead_code)]
    struct Profile {
        first_name: String,
        last_name: String,
        email: String,
        age: Option<u8>,
    }
    let gate = Gate::form_for::<Profile>("profile").expect("a flat form");
    let layer = ElicitationLayer::new(keyring())
        .gate(GateTarget::tool("deploy"), gate)
        .expect("one gate");
    let h = Harness::new(layer, asking("unused", json!({})));
    let fields = ["first_name", "last_name", "email", "age"];

    let asked = h.call(&deploy()).await;
    let text = std::str::from_utf8(&asked.bytes).unwrap();
    let [_, _, properties] = form_order(text, "profile");
    assert_eq!(properties, fields, "{text}");

    let invalid = json!({"profile": accept(json!({"first_name": "Ada"}))});
    let reask = h
        .call(&deploy().id(2).state(&asked.state()).answers(invalid))
        .await;
    let text = std::str::from_utf8(&reask.bytes).unwrap();
    let [_, _, properties] = form_order(text, "profile");
    assert_eq!(properties, fields, "{text}");
    assert_eq!(h.fake.calls(), 0);
}

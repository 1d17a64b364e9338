//! The Tasks extension (`io.modelcontextprotocol/tasks`, SEP-2663) through the layer: a task's
//! `tasks/update` answers are checked against the questions its `tasks/get` reported, bound to
//! the caller whose `tools/call` created it, each answered once; a gate asks before a task is
//! created.
//!
//! The inner service is a fake speaking rmcp 3.11's task wire shapes (`CreateTaskResult` with
//! `resultType: "task"`, `tasks/get` with `status: "input_required"` and `inputRequests`,
//! `tasks/update` acked `{resultType: "complete"}`), over JSON and over an event stream.

use crate::support;

use serde_json::{Value, json};
use tower_elicitation::{Gate, GateTarget};

use support::{Call, FakeMcp, Harness, Reply, Transport, layer};

const TASK: &str = "task-1";

/// The response message of a reply, JSON or event stream.
trait Message {
    fn message(&self) -> Value;
}

impl Message for Reply {
    fn message(&self) -> Value {
        if !self.content_type().starts_with("text/event-stream") {
            return self.json();
        }
        self.events()
            .iter()
            .map(|event| support::event_data(event))
            .find(|message| message.get("id").is_some())
            .expect("a response event")
    }
}

fn confirm_question() -> Value {
    json!({"method": "elicitation/create", "params": {"mode": "form",
        "message": "Delete mrtr-input.txt?",
        "requestedSchema": {"type": "object", "properties": {"confirm": {"type": "boolean"}},
            "required": ["confirm"]}}})
}

/// `confirm_delete` creates `task-1`, which asks `confirm` until a `tasks/update` answers it.
fn task_server(transport: Transport) -> FakeMcp {
    let answered = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    FakeMcp::new(move |request| {
        let call = request.json();
        let id = call["id"].clone();
        let base = json!({"taskId": TASK, "createdAt": "2026-01-01T00:00:00Z",
            "lastUpdatedAt": "2026-01-01T00:00:00Z", "ttlMs": 60000, "pollIntervalMs": 100});
        let with = |extra: Value| {
            let mut result = base.clone();
            result
                .as_object_mut()
                .unwrap()
                .extend(extra.as_object().unwrap().clone());
            result
        };
        let result = match call["method"].as_str().unwrap() {
            "tools/call" => with(json!({"resultType": "task", "status": "working"})),
            "tasks/get" if answered.load(std::sync::atomic::Ordering::SeqCst) => {
                with(json!({"resultType": "complete", "status": "completed",
                    "result": {"content": [{"type": "text", "text": "deleted"}]}}))
            }
            "tasks/get" => with(json!({"resultType": "complete", "status": "input_required",
                "inputRequests": {"confirm": confirm_question()}})),
            "tasks/update" => {
                if call["params"]["inputResponses"]["confirm"].is_object() {
                    answered.store(true, std::sync::atomic::Ordering::SeqCst);
                }
                json!({"resultType": "complete"})
            }
            "tasks/cancel" => json!({"resultType": "complete"}),
            other => panic!("unexpected {other}"),
        };
        transport.respond(&support::result_message(id, result))
    })
}

/// `call` with `clientCapabilities` that declare the Tasks extension, as every task client's
/// requests do (SEP-2663, per request: SEP-2575).
fn declaring_tasks(call: Call) -> Call {
    call.caps(json!({"elicitation": {"form": {}}, "sampling": {},
        "extensions": {"io.modelcontextprotocol/tasks": {}}}))
}

fn as_caller(call: Call, who: &str) -> Call {
    call.header("authorization", &format!("Bearer {who}"))
}

fn create(who: &str) -> Call {
    as_caller(
        Call::tool("confirm_delete").args(json!({"filename": "mrtr-input.txt"})),
        who,
    )
}

fn get(who: &str, task: &str) -> Call {
    as_caller(Call::new("tasks/get", json!({"taskId": task})).id(2), who)
}

fn update(who: &str, task: &str, responses: Value) -> Call {
    as_caller(
        declaring_tasks(Call::new(
            "tasks/update",
            json!({"taskId": task, "inputResponses": responses}),
        ))
        .id(3),
        who,
    )
}

fn accept(content: Value) -> Value {
    json!({"confirm": {"action": "accept", "content": content}})
}

/// The `tasks/update` bodies the inner service received.
fn updates(harness: &Harness) -> Vec<Value> {
    harness
        .fake
        .bodies()
        .into_iter()
        .filter(|body| body["method"] == "tasks/update")
        .collect()
}

#[track_caller]
fn assert_unknown_task(reply: &Reply) {
    let message = reply.message();
    assert_eq!(message["error"]["code"], -32602, "{message}");
    assert_eq!(
        message["error"]["data"]["reason"], "unknown_task",
        "{message}"
    );
}

/// A task created by alice and seen `input_required` by her `tasks/get`.
async fn asking(transport: Transport) -> Harness {
    let harness = Harness::new(layer(), task_server(transport));
    let created = harness.call(&create("alice")).await.message();
    assert_eq!(created["result"]["resultType"], "task", "{created}");
    assert!(created["result"].get("requestState").is_none());
    let got = harness.call(&get("alice", TASK)).await.message();
    assert_eq!(got["result"]["status"], "input_required", "{got}");
    harness
}

async fn invalid_answer_is_reasked_and_never_forwarded(transport: Transport) {
    let harness = asking(transport).await;
    let reply = harness
        .call(&update("alice", TASK, accept(json!({"confirm": "yes"}))))
        .await
        .message();
    assert_eq!(reply["error"]["code"], -32602, "{reply}");
    let data = &reply["error"]["data"];
    assert_eq!(data["reason"], "invalid_input_responses", "{reply}");
    assert_eq!(data["taskId"], TASK);
    let reasked = &data["inputRequests"]["confirm"];
    assert_eq!(reasked["method"], "elicitation/create", "{reply}");
    assert_ne!(
        reasked["params"],
        confirm_question()["params"],
        "the re-ask carries a hint"
    );
    // A missing required field is as invalid.
    let reply = harness
        .call(&update("alice", TASK, accept(json!({}))))
        .await
        .message();
    assert_eq!(reply["error"]["data"]["reason"], "invalid_input_responses");
    assert!(
        updates(&harness).is_empty(),
        "an invalid answer reached the inner service"
    );
    // The task still asks: the next tasks/get shows the question again.
    let got = harness.call(&get("alice", TASK)).await.message();
    assert_eq!(got["result"]["status"], "input_required");

    // A valid answer goes through, cleaned: unknown fields and unasked keys dropped.
    let mut responses = accept(json!({"confirm": true, "extra": "x"}));
    responses["not_asked"] = json!({"action": "accept", "content": {"a": 1}});
    let ack = harness
        .call(&update("alice", TASK, responses))
        .await
        .message();
    assert_eq!(ack["result"], json!({"resultType": "complete"}), "{ack}");
    let forwarded = updates(&harness);
    assert_eq!(forwarded.len(), 1);
    assert_eq!(
        forwarded[0]["params"]["inputResponses"],
        accept(json!({"confirm": true}))
    );
    let done = harness.call(&get("alice", TASK)).await.message();
    assert_eq!(done["result"]["status"], "completed");
}

async fn an_invalid_update_is_reasked_and_a_valid_one_reaches_the_inner_service_json() {
    invalid_answer_is_reasked_and_never_forwarded(Transport::Json).await;
}

async fn an_invalid_update_is_reasked_and_a_valid_one_reaches_the_inner_service_sse() {
    invalid_answer_is_reasked_and_never_forwarded(Transport::SseAfterProgress).await;
}

async fn another_callers_and_unknown_tasks_updates_never_reach_the_inner_service() {
    let harness = asking(Transport::Json).await;
    let valid = accept(json!({"confirm": true}));
    // Another caller, with a valid answer.
    assert_unknown_task(&harness.call(&update("mallory", TASK, valid.clone())).await);
    // No caller at all.
    let anonymous = declaring_tasks(Call::new(
        "tasks/update",
        json!({"taskId": TASK, "inputResponses": valid.clone()}),
    ));
    assert_unknown_task(&harness.call(&anonymous).await);
    // A task the layer never saw created.
    assert_unknown_task(
        &harness
            .call(&update("alice", "task-2", valid.clone()))
            .await,
    );
    // Another caller's tasks/get and tasks/cancel are refused too.
    assert_unknown_task(&harness.call(&get("mallory", TASK)).await);
    let cancel = as_caller(
        Call::new("tasks/cancel", json!({"taskId": TASK})),
        "mallory",
    );
    assert_unknown_task(&harness.call(&cancel).await);
    assert!(updates(&harness).is_empty());
    assert!(
        !harness
            .fake
            .bodies()
            .iter()
            .any(|body| body["method"] == "tasks/cancel")
    );
    // Alice's own answer still goes through.
    let ack = harness.call(&update("alice", TASK, valid)).await.message();
    assert_eq!(ack["result"]["resultType"], "complete", "{ack}");
    assert_eq!(updates(&harness).len(), 1);
}

async fn an_update_that_does_not_declare_the_extension_is_refused_32021_and_never_forwarded() {
    let harness = asking(Transport::Json).await;
    let valid = accept(json!({"confirm": true}));
    // The task's own creator, a valid answer, but the request does not declare the extension.
    let undeclared = as_caller(
        Call::new(
            "tasks/update",
            json!({"taskId": TASK, "inputResponses": valid}),
        )
        .id(3),
        "alice",
    );
    let reply = harness.call(&undeclared).await;
    assert_eq!(reply.status, http::StatusCode::BAD_REQUEST);
    let message = reply.message();
    assert_eq!(message["error"]["code"], -32021, "{message}");
    assert!(
        message["error"]["data"]["requiredCapabilities"]["extensions"]
            ["io.modelcontextprotocol/tasks"]
            .is_object(),
        "{message}"
    );
    assert!(updates(&harness).is_empty());
}

async fn answers_to_questions_not_seen_asked_or_already_answered_are_dropped() {
    let harness = Harness::new(layer(), task_server(Transport::Json));
    harness.call(&create("alice")).await;
    // Before any tasks/get: the layer saw no question, so nothing is forwarded as an answer.
    let valid = accept(json!({"confirm": true}));
    let ack = harness
        .call(&update("alice", TASK, valid.clone()))
        .await
        .message();
    assert_eq!(ack["result"]["resultType"], "complete", "{ack}");
    assert_eq!(updates(&harness)[0]["params"]["inputResponses"], json!({}));
    harness.call(&get("alice", TASK)).await;
    harness.call(&update("alice", TASK, valid.clone())).await;
    assert_eq!(updates(&harness)[1]["params"]["inputResponses"], valid);
    // Replayed: the key was answered once already.
    harness.call(&update("alice", TASK, valid)).await;
    assert_eq!(updates(&harness)[2]["params"]["inputResponses"], json!({}));
}

async fn a_gate_asks_before_the_task_is_created() {
    let gate = Gate::form(
        "approval",
        json!({"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}),
    )
    .unwrap();
    let layer = layer()
        .gate(GateTarget::tool("confirm_delete"), gate)
        .unwrap();
    let harness = Harness::new(layer, task_server(Transport::Json));
    let asked = harness.call(&create("alice")).await;
    let message = asked.message();
    assert_eq!(
        message["result"]["resultType"], "input_required",
        "{message}"
    );
    assert!(message["result"].get("taskId").is_none());
    assert_eq!(
        harness.fake.calls(),
        0,
        "the task was created before the gate asked"
    );
    // A wrong answer is re-asked, still without a task.
    let state = asked.state();
    let wrong = create("alice")
        .state(&state)
        .answers(json!({"approval": {"action": "accept", "content": {"ok": "yes"}}}));
    let reasked = harness.call(&wrong).await.message();
    assert_eq!(
        reasked["result"]["resultType"], "input_required",
        "{reasked}"
    );
    assert_eq!(harness.fake.calls(), 0);
    let right = create("alice")
        .state(&state)
        .answers(json!({"approval": {"action": "accept", "content": {"ok": true}}}));
    let created = harness.call(&right).await.message();
    assert_eq!(created["result"]["resultType"], "task", "{created}");
    assert!(created["result"].get("requestState").is_none());
    assert_eq!(harness.fake.calls(), 1);
    // The task it created is the caller's, and its questions are judged.
    harness.call(&get("alice", TASK)).await;
    let reply = harness
        .call(&update("alice", TASK, accept(json!({"confirm": 3}))))
        .await
        .message();
    assert_eq!(reply["error"]["data"]["reason"], "invalid_input_responses");
    assert!(updates(&harness).is_empty());
}

/// Two replicas sharing one Redis (`RedisStore::tasks`), no sticky routing: the task is created
/// through one, polled through the other, and its answers judged on either; an invalid answer
/// never reaches the inner service, a valid one does once, and another caller is refused.
async fn a_task_created_on_one_replica_is_judged_on_another_through_redis() {
    use crate::support::redis as redis_support;
    use tower_elicitation::redis::RedisStore;

    let redis = RedisStore::builder(redis_support::redis_url())
        .key_prefix(redis_support::prefix())
        .build()
        .unwrap();
    let fake = task_server(Transport::Json);
    let a = Harness::new(layer().task_store(redis.tasks()), fake.clone());
    let b = Harness::new(layer().task_store(redis.tasks()), fake);

    let created = a.call(&create("alice")).await.message();
    assert_eq!(created["result"]["resultType"], "task", "{created}");
    // Another caller cannot read alice's task on the other replica either.
    assert_unknown_task(&b.call(&get("mallory", TASK)).await);
    let got = b.call(&get("alice", TASK)).await.message();
    assert_eq!(got["result"]["status"], "input_required", "{got}");

    let reasked = a
        .call(&update("alice", TASK, accept(json!({"confirm": "yes"}))))
        .await
        .message();
    assert_eq!(
        reasked["error"]["data"]["reason"], "invalid_input_responses",
        "{reasked}"
    );
    assert!(
        updates(&a).is_empty(),
        "an invalid answer reached the inner service"
    );
    assert_unknown_task(
        &a.call(&update("mallory", TASK, accept(json!({"confirm": true}))))
            .await,
    );

    let valid = accept(json!({"confirm": true}));
    let ack = b
        .call(&update("alice", TASK, valid.clone()))
        .await
        .message();
    assert_eq!(ack["result"], json!({"resultType": "complete"}), "{ack}");
    assert_eq!(updates(&a)[0]["params"]["inputResponses"], valid);
    // Replayed on the first replica: the key was answered on the second.
    a.call(&update("alice", TASK, valid)).await;
    assert_eq!(updates(&a).len(), 2);
    assert_eq!(updates(&a)[1]["params"]["inputResponses"], json!({}));
}

crate::trials! {
    [] current_thread an_invalid_update_is_reasked_and_a_valid_one_reaches_the_inner_service_json,
    [] current_thread an_invalid_update_is_reasked_and_a_valid_one_reaches_the_inner_service_sse,
    [] current_thread another_callers_and_unknown_tasks_updates_never_reach_the_inner_service,
    [] current_thread an_update_that_does_not_declare_the_extension_is_refused_32021_and_never_forwarded,
    [] current_thread answers_to_questions_not_seen_asked_or_already_answered_are_dropped,
    [] current_thread a_gate_asks_before_the_task_is_created,
    [Redis] current_thread a_task_created_on_one_replica_is_judged_on_another_through_redis,
}

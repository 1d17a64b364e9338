//! The Tasks extension (`io.modelcontextprotocol/tasks`, SEP-2663): a task's questions, seen
//! when the inner service reports it `input_required`, are the questions its `tasks/update`
//! answers are checked against, as an MRTR retry's are ([`answers::check`]).
//!
//! A `tools/call` (or any of the three MRTR methods) may answer `resultType: "task"`: the client
//! then polls `tasks/get`, which reports the task's status; while it is `input_required` the task
//! carries `inputRequests`, and the client answers them with `tasks/update` `inputResponses`. The
//! layer sees all three, and remembers per task, in a [`TaskStore`](crate::store::TaskStore):
//!
//! - **whose task it is**: the keyed tag of the caller whose call created it (never the raw
//!   identity), taken from the creating call's answer;
//! - **what it asked**: the `inputRequests` of the last `tasks/get` answer that reported it
//!   `input_required`, each question as the client was shown it;
//! - **which questions were answered**: each key is spent once, atomically, when an answer to it
//!   is forwarded (keys are unique over a task's life, SEP-2663), so a replayed answer is dropped.
//!
//! What the layer decides:
//!
//! | request | decision |
//! |---|---|
//! | `tasks/get`, `tasks/cancel` of a task created by another caller | `-32602` `Unknown task`, as for a task that does not exist; never forwarded |
//! | `tasks/get`, `tasks/cancel` of a task the layer did not see created | forwarded, its questions not remembered ([`UnrecordedTasks::Forward`], the default); `-32602` `Unknown task`, never forwarded, with [`UnrecordedTasks::Refuse`] |
//! | `tasks/update` whose `clientCapabilities` do not declare the extension | `-32021` naming it (HTTP 400), as SEP-2663 has a server answer; never forwarded |
//! | `tasks/update` of a task the layer did not see created, or another caller's | `-32602` `Unknown task`; never forwarded |
//! | `tasks/update` answering keys the layer did not see asked (or already answered) | those answers are dropped; the rest is judged |
//! | an accepted answer whose content fails the asked schema, or of the wrong shape | `-32602`; none of the update's answers is forwarded (see below) |
//! | every answer acceptable (decline and cancel are) | forwarded, cleaned (unknown fields of content dropped); the inner service acks |
//!
//! **The re-ask is a JSON-RPC error**, `-32602` `Invalid input responses`, whose `data` carries
//! `reason: "invalid_input_responses"`, the `taskId`, and `inputRequests`: each question whose
//! answer failed, re-issued with the hint of what was wrong (as an MRTR re-ask words it). Why an
//! error and not an ack: SEP-2663 has `tasks/update` answer an empty `{resultType: "complete"}`
//! ack, which says the answers were delivered; acking answers the inner service never received
//! would tell the client it is done when the task still waits. The task stays `input_required`
//! in the inner service (it saw nothing), so the next `tasks/get` shows the same question again;
//! the client answers it anew. The update is all or nothing: a partial forward would spend keys
//! the client may want to answer together.
//!
//! **Partial fulfillment is allowed** (SEP-2663): a key asked but not answered in an update is
//! not re-asked; it stays pending in the inner service.
//!
//! Where the questions come from: `tasks/get` answers only. The `CreateTaskResult` carries none
//! (SEP-2663 forbids it), `tasks/result` is gone in SEP-2663, and the optional
//! `notifications/tasks` travel on a `subscriptions/listen` stream the layer does not read; a
//! client that learned a question from a notification alone has its answer refused as unknown
//! until it polls `tasks/get` once (the layer fails closed).
//!
//! The layer does not judge the capabilities a `tasks/get`'s questions need: the task was
//! created by a call whose capabilities the inner service saw.

use std::sync::LazyLock;

use memchr::memmem::Finder;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value, json};

use super::answers::{self, Checked};
use super::decision::unavailable;
use super::outbound::same_id;
use super::policy::{Config, UnrecordedTasks};
use crate::store::{Consumed, StoreError};
use crate::token::claims::{Questions, is_session_tag, session_tag};
use crate::wire::jsonrpc::{
    Call, Field, INVALID_PARAMS, MISSING_REQUIRED_CLIENT_CAPABILITY, Reply, ReplyKind,
};
use crate::wire::mcp::meta::CLIENT_CAPABILITIES;
use crate::wire::mcp::{INPUT_REQUIRED_STATUS, TASK_RESULT_TYPE, TASKS_EXTENSION, TaskMethod};

/// How long the layer remembers a task at most after it last saw it, in seconds (a day): a
/// task's own `ttlMs` shortens it.
pub(crate) const MAX_TASK_MEMORY_SECS: u64 = 24 * 60 * 60;

/// What the layer remembers of a task: whose it is and what it asked.
#[derive(Debug, Clone, Default)]
pub(crate) struct TaskRecord {
    /// The keyed tag of its creator ([`session_tag`]); `None` for an anonymous one.
    pub(crate) owner: Option<String>,
    /// The questions the task asked, as shown to the client.
    pub(crate) questions: Questions,
}

#[derive(serde::Serialize, Deserialize)]
struct RecordText {
    o: Option<String>,
    #[serde(default)]
    q: Questions,
}

impl TaskRecord {
    /// A record of a task created by `principal`, with no question yet.
    pub(crate) fn created_by(principal: Option<&[u8]>, config: &Config) -> Self {
        Self {
            owner: principal.map(|p| session_tag(&config.keyring, p)),
            questions: Questions::new(),
        }
    }

    /// Whether the task is `principal`'s.
    pub(crate) fn is_owner(&self, principal: Option<&[u8]>, config: &Config) -> bool {
        match (&self.owner, principal) {
            (None, None) => true,
            (Some(tag), Some(principal)) => is_session_tag(&config.keyring, tag, principal),
            _ => false,
        }
    }

    /// The text a store keeps.
    pub(crate) fn encode(&self) -> String {
        serde_json::to_string(&RecordText {
            o: self.owner.clone(),
            q: self.questions.clone(),
        })
        .expect("a record is JSON")
    }

    /// The record a store kept; `None` when the text is not one.
    pub(crate) fn decode(text: &str) -> Option<Self> {
        let read: RecordText = serde_json::from_str(text).ok()?;
        Some(Self {
            owner: read.o,
            questions: read.q,
        })
    }
}

/// What becomes of a task request.
#[derive(Debug)]
pub(crate) enum TaskVerdict {
    /// Answer the client with this; the inner service is not called.
    Refuse(Reply),
    /// Forward the request as it came.
    Forward,
    /// Forward the update with these answers (checked, cleaned) in place of the client's, once
    /// each key is spent.
    Update(Map<String, Value>),
}

/// `params.taskId` of a task request, or the layer's answer when it is not a string.
pub(crate) fn task_id(call: &Call<'_, TaskMethod>) -> Result<String, Reply> {
    match call.field("taskId") {
        Ok(Field::Present(Value::String(id))) => Ok(id),
        Ok(_) => Err(Reply::error(
            ReplyKind::Answer,
            call.id,
            INVALID_PARAMS,
            "Invalid params: taskId must be a string",
            None,
        )),
        Err(malformed) => Err(malformed.reply(call.id)),
    }
}

/// The answer to a request for a task that is not the caller's, or that the layer cannot vouch
/// for: the same as for a task that does not exist, so that it tells nothing of other callers'.
pub(crate) fn unknown_task(call: &Call<'_, TaskMethod>, task_id: &str) -> Reply {
    tracing::info!(
        target: "tower_elicitation",
        method = call.method.as_str(),
        "refused a task request: the task is unknown to the layer or another caller's"
    );
    Reply::error(
        ReplyKind::Answer,
        call.id,
        INVALID_PARAMS,
        "Unknown task",
        Some(json!({"reason": "unknown_task", "taskId": task_id})),
    )
}

/// Whether the request's own `clientCapabilities` declare the Tasks extension (SEP-2575: per
/// request, in `params._meta`).
fn declares_tasks(call: &Call<'_, TaskMethod>) -> bool {
    let Ok(Field::Present(meta)) = call.field("_meta") else {
        return false;
    };
    meta.get(CLIENT_CAPABILITIES)
        .and_then(|declared| declared.get("extensions"))
        .and_then(|extensions| extensions.get(TASKS_EXTENSION))
        .is_some_and(Value::is_object)
}

/// `-32021` naming the Tasks extension: what SEP-2663 has a server answer a `tasks/*` request
/// that does not declare it. The layer answers it to a `tasks/update` itself, before looking
/// the task up, so that answers from such a request never reach the inner service.
fn tasks_undeclared(call: &Call<'_, TaskMethod>) -> Reply {
    tracing::info!(
        target: "tower_elicitation",
        method = call.method.as_str(),
        "refused a task request that does not declare the tasks extension"
    );
    Reply::error(
        ReplyKind::MissingCapability,
        call.id,
        MISSING_REQUIRED_CLIENT_CAPABILITY,
        "Missing required client capability",
        Some(json!({"requiredCapabilities": {"extensions": {TASKS_EXTENSION: {}}}})),
    )
}

/// Decides on a task request, given what the layer remembers of its task (`None`: nothing).
pub(crate) fn judge(
    call: &Call<'_, TaskMethod>,
    task_id: &str,
    record: Option<&TaskRecord>,
    principal: Option<&[u8]>,
    config: &Config,
) -> TaskVerdict {
    let owned = record.map(|record| record.is_owner(principal, config));
    match call.method {
        TaskMethod::Get | TaskMethod::Cancel => match (owned, config.unrecorded_tasks) {
            (Some(true), _) | (None, UnrecordedTasks::Forward) => TaskVerdict::Forward,
            (Some(false), _) | (None, UnrecordedTasks::Refuse) => {
                TaskVerdict::Refuse(unknown_task(call, task_id))
            }
        },
        // SEP-2663: a request that does not declare the extension cannot update a task.
        TaskMethod::Update if !declares_tasks(call) => TaskVerdict::Refuse(tasks_undeclared(call)),
        TaskMethod::Update => {
            let Some(record) = record.filter(|_| owned == Some(true)) else {
                return TaskVerdict::Refuse(unknown_task(call, task_id));
            };
            judge_update(call, task_id, record, config)
        }
    }
}

/// A `tasks/update` of the caller's own task: its answers against the questions the task asked.
fn judge_update(
    call: &Call<'_, TaskMethod>,
    task_id: &str,
    record: &TaskRecord,
    config: &Config,
) -> TaskVerdict {
    let invalid = |message: &str, data: Option<Value>| {
        TaskVerdict::Refuse(Reply::error(
            ReplyKind::Answer,
            call.id,
            INVALID_PARAMS,
            message,
            data,
        ))
    };
    let responses = match call.field("inputResponses") {
        Err(malformed) => return TaskVerdict::Refuse(malformed.reply(call.id)),
        Ok(Field::Absent | Field::Present(Value::Null)) => Map::new(),
        Ok(Field::Present(Value::Object(responses))) => responses,
        Ok(Field::Present(_)) => {
            return invalid("Invalid params: inputResponses must be an object", None);
        }
    };
    // Partial fulfillment: only the questions answered are judged; the others stay pending.
    let answered: Questions = record
        .questions
        .iter()
        .filter(|(key, _)| responses.contains_key(*key))
        .map(|(key, question)| (key.clone(), question.clone()))
        .collect();
    let dropped = responses.len() - answered.len();
    if dropped > 0 {
        tracing::debug!(
            target: "tower_elicitation",
            dropped,
            "tasks/update: dropped answers to questions the layer did not see asked"
        );
    }
    match answers::check(&answered, &Map::new(), responses, &config.validators) {
        Err(answers::WrongShape(why)) => invalid(&why, None),
        Ok(Checked::Reask(answers::Reask { ask, .. })) => {
            tracing::info!(
                target: "tower_elicitation",
                "tasks/update: an answer fails the question asked; re-asked, nothing forwarded"
            );
            invalid(
                "Invalid input responses",
                Some(json!({
                    "reason": "invalid_input_responses",
                    "taskId": task_id,
                    "inputRequests": ask,
                })),
            )
        }
        Ok(Checked::Complete(clean)) => TaskVerdict::Update(clean),
    }
}

/// The update to forward: `inputResponses` replaced by `answers`, every other byte kept.
pub(crate) fn update_body(call: &Call<'_, TaskMethod>, answers: &Map<String, Value>) -> Vec<u8> {
    call.rewrite(None, Some(answers), None)
}

/// The task's record as the store gave it (`None`: the layer does not know the task, or the
/// text is not a record); the layer's `-32603` (HTTP 503) when the store could not say.
///
/// # Errors
///
/// The reply refusing the request when the store failed.
pub(crate) fn recalled(
    outcome: Result<Option<String>, StoreError>,
    id: Option<&RawValue>,
) -> Result<Option<TaskRecord>, Reply> {
    match outcome {
        Ok(text) => Ok(text.and_then(|text| TaskRecord::decode(&text))),
        Err(error) => {
            tracing::warn!(target: "tower_elicitation", %error, "cannot recall a task's record");
            Err(unavailable(id))
        }
    }
}

/// What a `tasks/update` forwards once the store said of its answers, in order, whether each
/// was given before (`spent`, which ends at the first the store could not say of): the answers
/// given for the first time (one given before is dropped: the server has it already); the layer's
/// `-32603` (HTTP 503) when the store could not say of one, and nothing is forwarded.
///
/// # Errors
///
/// The reply refusing the update when the store failed.
pub(crate) fn fresh_answers(
    mut answers: Map<String, Value>,
    spent: Vec<(String, Result<Consumed, StoreError>)>,
    id: Option<&RawValue>,
) -> Result<Map<String, Value>, Reply> {
    for (key, outcome) in spent {
        match outcome {
            Ok(Consumed::Fresh) => {}
            Ok(_) => {
                tracing::info!(target: "tower_elicitation", "tasks/update: dropped an answer given before");
                answers.remove(&key);
            }
            Err(error) => {
                tracing::warn!(target: "tower_elicitation", %error, "cannot mark a task's question answered");
                return Err(unavailable(id));
            }
        }
    }
    Ok(answers)
}

#[derive(Deserialize)]
struct Response<'a> {
    #[serde(borrow, default)]
    id: Option<&'a RawValue>,
    #[serde(default)]
    method: Option<serde::de::IgnoredAny>,
    #[serde(borrow, default)]
    result: Option<&'a RawValue>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct TaskResult {
    #[serde(default)]
    result_type: Option<String>,
    #[serde(default)]
    task_id: Option<String>,
    #[serde(default)]
    status: Option<String>,
    #[serde(default)]
    input_requests: Option<Questions>,
    #[serde(default)]
    ttl_ms: Option<u64>,
}

/// The result of `message` when it is the response to the request `id`.
fn result_of(message: &[u8], id: Option<&RawValue>) -> Option<TaskResult> {
    let text = std::str::from_utf8(message).ok()?;
    let response: Response<'_> = serde_json::from_str(text).ok()?;
    if response.method.is_some() || !same_id(response.id, id) {
        return None;
    }
    serde_json::from_str(response.result?.get()).ok()
}

/// How long to remember a task from now, in seconds: its `ttlMs` when it has one, at most
/// [`MAX_TASK_MEMORY_SECS`].
fn memory_secs(ttl_ms: Option<u64>) -> u64 {
    ttl_ms.map_or(MAX_TASK_MEMORY_SECS, |ms| {
        ms.div_ceil(1000).clamp(1, MAX_TASK_MEMORY_SECS)
    })
}

/// A task created by the response `message` to the call `id` (`resultType: "task"`): its id,
/// and for how many seconds to remember it.
pub(crate) fn created(message: &[u8], id: Option<&RawValue>) -> Option<(String, u64)> {
    // A byte scan first: most answers create no task. Its searcher is built once
    // (`memmem::find` builds one per call, more than the scan of a short message costs).
    static TASK_ID: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(b"taskId"));
    TASK_ID.find(message)?;
    let result = result_of(message, id)?;
    if result.result_type.as_deref() != Some(TASK_RESULT_TYPE) {
        return None;
    }
    Some((result.task_id?, memory_secs(result.ttl_ms)))
}

/// The questions of task `task_id` reported `input_required` by the response `message` to the
/// `tasks/get` `id`, and for how many seconds to remember them.
pub(crate) fn asked(
    message: &[u8],
    id: Option<&RawValue>,
    task_id: &str,
) -> Option<(Questions, u64)> {
    let result = result_of(message, id)?;
    if result.status.as_deref() != Some(INPUT_REQUIRED_STATUS)
        || result.task_id.as_deref().is_some_and(|id| id != task_id)
    {
        return None;
    }
    Some((result.input_requests?, memory_secs(result.ttl_ms)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::token::Keyring;
    use crate::wire::jsonrpc::{Peek, peek};

    fn config() -> Config {
        Config::new(Keyring::new("k1", [7u8; 32]).unwrap())
    }

    #[test]
    fn an_update_keeps_fresh_answers_drops_given_ones_and_refuses_when_the_store_cannot_say() {
        let answers: Map<String, Value> =
            serde_json::from_value(json!({"a": {"action": "accept"}, "b": {"action": "decline"}}))
                .unwrap();
        let spent = vec![
            ("a".to_owned(), Ok(Consumed::Fresh)),
            ("b".to_owned(), Ok(Consumed::Replayed)),
        ];
        let kept = fresh_answers(answers.clone(), spent, None).unwrap();
        assert_eq!(kept.keys().collect::<Vec<_>>(), ["a"]);
        let failed = vec![
            ("a".to_owned(), Ok(Consumed::Fresh)),
            ("b".to_owned(), Err(StoreError::unavailable("down"))),
        ];
        let refused = fresh_answers(answers, failed, None).unwrap_err();
        assert_eq!(refused.kind, ReplyKind::Unavailable);
    }

    fn record(config: &Config, principal: Option<&[u8]>) -> TaskRecord {
        let mut record = TaskRecord::created_by(principal, config);
        let question: Box<RawValue> = serde_json::from_str(
            r#"{"method":"elicitation/create","params":{"message":"Delete?","requestedSchema":{"type":"object","properties":{"confirm":{"type":"boolean"}},"required":["confirm"]}}}"#,
        )
        .unwrap();
        record.questions.insert("q1".to_owned(), question);
        record
    }

    fn verdict(body: &str, record: Option<&TaskRecord>, principal: Option<&[u8]>) -> TaskVerdict {
        let config = config();
        let Peek::Task(call) = peek(body.as_bytes()) else {
            panic!("not a task request: {body}");
        };
        let id = task_id(&call).unwrap();
        judge(&call, &id, record, principal, &config)
    }

    fn update(responses: &str) -> String {
        format!(
            r#"{{"jsonrpc":"2.0","id":3,"method":"tasks/update","params":{{"taskId":"t1","inputResponses":{responses},"_meta":{{"io.modelcontextprotocol/clientCapabilities":{{"extensions":{{"io.modelcontextprotocol/tasks":{{}}}}}}}}}}}}"#
        )
    }

    #[test]
    fn valid_answers_are_forwarded_cleaned_and_unasked_keys_dropped() {
        let config = config();
        let record = record(&config, Some(b"alice"));
        let body = update(
            r#"{"q1":{"action":"accept","content":{"confirm":true,"extra":1}},"zz":{"action":"accept"}}"#,
        );
        match verdict(&body, Some(&record), Some(b"alice")) {
            TaskVerdict::Update(answers) => assert_eq!(
                Value::Object(answers),
                json!({"q1": {"action": "accept", "content": {"confirm": true}}})
            ),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn an_invalid_answer_is_reasked_with_a_hint() {
        let config = config();
        let record = record(&config, None);
        let body = update(r#"{"q1":{"action":"accept","content":{"confirm":"yes"}}}"#);
        let TaskVerdict::Refuse(reply) = verdict(&body, Some(&record), None) else {
            panic!("forwarded");
        };
        let reply: Value = serde_json::from_slice(&reply.body).unwrap();
        assert_eq!(reply["error"]["code"], -32602);
        assert_eq!(reply["error"]["data"]["reason"], "invalid_input_responses");
        assert!(reply["error"]["data"]["inputRequests"]["q1"].is_object());
    }

    #[test]
    fn another_callers_or_an_unknown_task_is_refused() {
        let config = config();
        let record = record(&config, Some(b"alice"));
        let body = update(r#"{"q1":{"action":"accept","content":{"confirm":true}}}"#);
        for (record, principal) in [
            (Some(&record), Some(&b"mallory"[..])),
            (Some(&record), None),
            (None, Some(&b"alice"[..])),
        ] {
            assert!(matches!(
                verdict(&body, record, principal),
                TaskVerdict::Refuse(_)
            ));
        }
        let get = r#"{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"taskId":"t1"}}"#;
        assert!(matches!(
            verdict(get, Some(&record), Some(b"mallory")),
            TaskVerdict::Refuse(_)
        ));
        assert!(matches!(
            verdict(get, Some(&record), Some(b"alice")),
            TaskVerdict::Forward
        ));
        assert!(matches!(verdict(get, None, None), TaskVerdict::Forward));
    }

    #[test]
    fn an_update_that_does_not_declare_the_extension_is_refused_with_32021() {
        let config = config();
        let record = record(&config, Some(b"alice"));
        let answer = r#"{"q1":{"action":"accept","content":{"confirm":true}}}"#;
        let undeclared = [
            format!(
                r#"{{"jsonrpc":"2.0","id":3,"method":"tasks/update","params":{{"taskId":"t1","inputResponses":{answer}}}}}"#
            ),
            format!(
                r#"{{"jsonrpc":"2.0","id":3,"method":"tasks/update","params":{{"taskId":"t1","inputResponses":{answer},"_meta":{{"io.modelcontextprotocol/clientCapabilities":{{"extensions":{{}}}}}}}}}}"#
            ),
        ];
        for body in undeclared {
            for known in [Some(&record), None] {
                let TaskVerdict::Refuse(reply) = verdict(&body, known, Some(b"alice")) else {
                    panic!("forwarded: {body}");
                };
                let reply: Value = serde_json::from_slice(&reply.body).unwrap();
                assert_eq!(reply["error"]["code"], -32021, "{reply}");
                assert!(
                    reply["error"]["data"]["requiredCapabilities"]["extensions"]
                        ["io.modelcontextprotocol/tasks"]
                        .is_object(),
                    "{reply}"
                );
            }
        }
        assert!(matches!(
            verdict(&update(answer), Some(&record), Some(b"alice")),
            TaskVerdict::Update(_)
        ));
    }

    #[test]
    fn records_round_trip_and_questions_are_read_from_tasks_get() {
        let config = config();
        let record = record(&config, Some(b"alice"));
        assert_eq!(
            TaskRecord::decode(&record.encode()).map(|r| r.encode()),
            Some(record.encode())
        );
        let id: Box<RawValue> = serde_json::from_str("7").unwrap();
        let answer = br#"{"jsonrpc":"2.0","id":7,"result":{"resultType":"complete","taskId":"t1","status":"input_required","ttlMs":5000,"inputRequests":{"k":{"method":"elicitation/create","params":{"message":"m","requestedSchema":{"type":"object","properties":{}}}}}}}"#;
        let (questions, secs) = asked(answer, Some(&id), "t1").unwrap();
        assert_eq!(questions.len(), 1);
        assert_eq!(secs, 5);
        assert!(asked(answer, Some(&id), "t2").is_none());
        let created_answer =
            br#"{"jsonrpc":"2.0","id":7,"result":{"resultType":"task","taskId":"t9","status":"working","ttlMs":null}}"#;
        assert_eq!(
            created(created_answer, Some(&id)),
            Some(("t9".to_owned(), MAX_TASK_MEMORY_SECS))
        );
    }
}

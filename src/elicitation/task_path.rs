//! The path of `tasks/get`, `tasks/update` and `tasks/cancel` (the Tasks extension) through the
//! HTTP adapter: the task's record recalled from the [`TaskStore`](crate::store::TaskStore), the
//! request judged by [`engine::tasks`], a `tasks/update`'s answers spent once each, and
//! the questions of a `tasks/get` answer remembered. The store I/O is here, in the adapter; every
//! decision is the engine's.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http::{Request, Response};
use http_body::Body;
use serde_json::value::RawValue;
use serde_json::{Map, Value};
use tower_service::Service;

use super::body::{RequestBody, ResponseBody};
use super::framing::{answer, answer_message, forward, rebuild, reply_response};
use super::shared::Shared;
use crate::engine::tasks::{self, TaskRecord, TaskVerdict};
use crate::engine::{self, Answer};
use crate::util::body::ReadAll;
use crate::wire::jsonrpc::{Call, Reply};
use crate::wire::mcp::TaskMethod;

/// Answers a Tasks request: the record recalled, the engine's verdict followed, and (for a
/// `tasks/get` of a task the layer knows) the questions of the answer remembered.
pub(super) async fn call_task<S, ReqBody, ResBody>(
    mut inner: S,
    shared: Arc<Shared>,
    parts: http::request::Parts,
    bytes: &Bytes,
    framed: Option<u64>,
    call: Call<'_, TaskMethod>,
) -> Result<Response<ResponseBody<ResBody>>, S::Error>
where
    S: Service<Request<RequestBody<ReqBody>>, Response = Response<ResBody>> + Clone,
    ResBody: Body<Data = Bytes>,
{
    let task_id = match tasks::task_id(&call) {
        Ok(id) => id,
        Err(reply) => return Ok(reply_response(reply)),
    };
    let record = match tasks::recalled(shared.tasks.recall(&task_id).await, call.id) {
        Ok(record) => record,
        Err(reply) => return Ok(reply_response(reply)),
    };
    let principal = shared.principal.of(&parts);
    let verdict = tasks::judge(
        &call,
        &task_id,
        record.as_ref(),
        principal.as_deref(),
        &shared.config,
    );
    let request = match verdict {
        TaskVerdict::Refuse(reply) => return Ok(reply_response(reply)),
        TaskVerdict::Forward => forward(parts, bytes.clone(), framed),
        TaskVerdict::Update(answers) => {
            match spend_answers(&shared, &task_id, answers, call.id).await {
                Ok(answers) => rebuild(parts, Bytes::from(tasks::update_body(&call, &answers))),
                Err(reply) => return Ok(reply_response(reply)),
            }
        }
    };
    let response = inner.call(request).await?;
    match record {
        Some(record) if call.method == TaskMethod::Get => {
            Ok(remember_questions(&shared, &task_id, record, response, call.id).await)
        }
        _ => Ok(response.map(ResponseBody::inner)),
    }
}

/// Spends each of a `tasks/update`'s answers in the store, in order, stopping at the first it
/// cannot say of; [`tasks::fresh_answers`] decides what is forwarded.
async fn spend_answers(
    shared: &Shared,
    task_id: &str,
    answers: Map<String, Value>,
    id: Option<&RawValue>,
) -> Result<Map<String, Value>, Reply> {
    let until = SystemTime::now() + Duration::from_secs(tasks::MAX_TASK_MEMORY_SECS);
    let mut spent = Vec::with_capacity(answers.len());
    for key in answers.keys() {
        let outcome = shared.tasks.spend(task_id, key, until).await;
        let failed = outcome.is_err();
        spent.push((key.clone(), outcome));
        if failed {
            break;
        }
    }
    tasks::fresh_answers(answers, spent, id)
}

/// The answer to a `tasks/get` of a task the layer knows, read whole and passed on; the
/// questions it asks kept in the task's record, so that a later `tasks/update` is judged
/// against them.
async fn remember_questions<B: Body<Data = Bytes>>(
    shared: &Shared,
    task_id: &str,
    mut record: TaskRecord,
    response: Response<B>,
    id: Option<&RawValue>,
) -> Response<ResponseBody<B>> {
    let kind = match answer(&response) {
        Ok(kind) if kind != Answer::PassThrough => kind,
        _ => return response.map(ResponseBody::inner),
    };
    let (parts, body) = response.into_parts();
    let Ok(body) = ReadAll::new(body).await else {
        return reply_response(engine::inner_failed(id, engine::BODY_FAILED));
    };
    let asked = answer_message(&body, kind, |data| {
        tasks::asked(data, id, task_id).is_some()
    })
    .and_then(|message| tasks::asked(&message, id, task_id));
    if let Some((questions, secs)) = asked {
        record.questions = questions;
        let until = SystemTime::now() + Duration::from_secs(secs);
        if let Err(error) = shared
            .tasks
            .remember(task_id, &record.encode(), until)
            .await
        {
            tracing::warn!(target: "tower_elicitation", %error, "cannot remember a task's questions");
        }
    }
    Response::from_parts(parts, ResponseBody::full(body))
}

//! `[telemetry]` (feature `otel`): a span per request, exported over OTLP/HTTP.
//!
//! ```toml
//! [telemetry]
//! otlp_endpoint = "http://127.0.0.1:4318"   # the collector's OTLP/HTTP base URL
//! service_name = "elicitation-proxy"        # the default
//! ```
//!
//! Each request to `/mcp` is a span (`mcp.request`, kind server, named after its method and
//! target, e.g. `tools/call write_file`) with the attributes `mcp.method`, `mcp.tool` (the
//! tool's or prompt's name, or the resource's URI, as the decision log's `tool`), and for a
//! call a gate or the proxy judged, the decision the decision log writes ([`crate::decisions`]):
//! `mcp.decision` (its outcome: `ask`, `gates_accepted`, `gate_refused`, `refused`, …),
//! `mcp.gate` (the rule of the file that decided), `mcp.decision_id` (the id a person can
//! quote, as in the log's `decision_id`) and `mcp.why`; and `http.response.status_code` (a 5xx
//! sets the span's status to error). The caller's `traceparent` (W3C Trace Context) is its
//! parent. The call's leg to the upstream is a child span (`upstream`, kind client), whose
//! context the upstream's request carries (`traceparent`, `tracestate`: the library's upstream
//! adapter sends those of the request it is given, see its "trace context"). A 2025-era host's
//! call through the bridge is traced the same (its rounds run in its request's span). A span
//! ends once its request is answered, which for an event stream may be before its last event.
//!
//! Spans go in batches, from a bounded queue: the OpenTelemetry SDK's batch processor, at its
//! defaults (2,048 spans queued at most, more are dropped; 512 a batch; every 5 s; the
//! `OTEL_BSP_*` variables change them), POSTed as protobuf to `<otlp_endpoint>/v1/traces` with
//! the proxy's own HTTP client on its own runtime (10 s a request). What is queued is sent at a
//! graceful shutdown. The table is read at start; a reload leaves it as it was. Without the
//! feature, a `[telemetry]` table is a mistake of the file that says how to build with it.

use crate::config::{Config, ConfigError, Source};

/// The target of the proxy's spans, the only ones exported.
#[cfg(feature = "otel")]
const TARGET: &str = "elicitation_proxy::telemetry";

/// The mistakes of `[telemetry]`, each at its line.
pub fn check(source: &Source, config: &Config) -> Vec<ConfigError> {
    let Some(telemetry) = &config.telemetry else {
        return Vec::new();
    };
    let at = |span: std::ops::Range<usize>| Some(source.line_of(span.start));
    if cfg!(not(feature = "otel")) {
        return vec![source.error(
            at(telemetry.span()),
            "[telemetry]: this build exports no telemetry; build the proxy with `--features otel` (cargo install --path proxy --features otel), or take the table out",
        )];
    }
    let mut found = Vec::new();
    let endpoint = &telemetry.get_ref().otlp_endpoint;
    if let Err(why) = traces_url(endpoint.get_ref()) {
        found.push(source.error(at(endpoint.span()), why));
    }
    if let Some(name) = &telemetry.get_ref().service_name
        && name.get_ref().trim().is_empty()
    {
        found.push(source.error(at(name.span()), "[telemetry] service_name is empty"));
    }
    found
}

/// Where the spans go: `endpoint` (a base URL, as `OTEL_EXPORTER_OTLP_ENDPOINT`) and
/// `/v1/traces`, unless it names that path already.
fn traces_url(endpoint: &str) -> Result<String, String> {
    let https = cfg!(feature = "https");
    let url = reqwest::Url::parse(endpoint)
        .ok()
        .filter(|url| url.host().is_some() && url.query().is_none())
        .filter(|url| url.scheme() == "http" || (https && url.scheme() == "https"))
        .ok_or_else(|| {
            let schemes = if https { "http(s)" } else { "http" };
            format!(
                "[telemetry] otlp_endpoint {endpoint:?}: the collector's OTLP/HTTP base URL, such as \"{schemes}://127.0.0.1:4318\""
            )
        })?;
    let base = url.as_str().trim_end_matches('/');
    if base.ends_with("/v1/traces") {
        Ok(base.to_owned())
    } else {
        Ok(format!("{base}/v1/traces"))
    }
}

#[cfg(feature = "otel")]
pub use enabled::{Telemetry, leg, note, traced};

#[cfg(not(feature = "otel"))]
pub use disabled::{Telemetry, leg, note, traced};

/// Without feature `otel`: nothing is traced, each step passes its input on.
#[cfg(not(feature = "otel"))]
mod disabled {
    use std::path::Path;

    use tracing_subscriber::Layer;

    /// No telemetry.
    pub struct Telemetry;

    impl Telemetry {
        /// No telemetry, whatever the file says (its check refuses a `[telemetry]` table).
        pub fn start(_config: &Path, _check: bool) -> Result<Self, String> {
            Ok(Self)
        }

        /// No layer.
        pub fn layer<S: tracing::Subscriber>(&self) -> impl Layer<S> + use<S> {
            tracing_subscriber::layer::Identity::new()
        }

        /// Nothing to send.
        pub async fn shutdown(self) {}
    }

    /// The app as it is.
    pub fn traced(app: axum::Router) -> axum::Router {
        app
    }

    /// Nothing to note.
    #[inline]
    pub fn note(_parts: &http::request::Parts, _body: &[u8]) {}

    /// The request as it is, in no span.
    #[inline]
    pub fn leg<B>(request: http::Request<B>) -> (http::Request<B>, tracing::Span) {
        (request, tracing::Span::none())
    }
}

/// With feature `otel`.
#[cfg(feature = "otel")]
mod enabled {
    use std::path::Path;
    use std::sync::OnceLock;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;

    use bytes::Bytes;
    use opentelemetry::propagation::TextMapPropagator;
    use opentelemetry::trace::TraceContextExt as _;
    use opentelemetry::trace::TracerProvider as _;
    use opentelemetry_http::{HeaderExtractor, HeaderInjector, HttpClient, HttpError};
    use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
    use opentelemetry_sdk::propagation::TraceContextPropagator;
    use opentelemetry_sdk::trace::SdkTracerProvider;
    use tracing::dispatcher::WeakDispatch;
    use tracing::field::{Empty, Field, Visit};
    use tracing::{Event, Instrument, Span, Subscriber};
    use tracing_opentelemetry::OpenTelemetrySpanExt;
    use tracing_subscriber::Layer;
    use tracing_subscriber::filter::Targets;
    use tracing_subscriber::layer::Context;
    use tracing_subscriber::registry::LookupSpan;

    use crate::config::Source;
    use crate::decisions::{REFUSAL_TARGET, RULE_TARGET};
    use crate::telemetry::TARGET;

    /// The name of the request's span.
    const REQUEST: &str = "mcp.request";
    /// How long the exporter's request to the collector may take.
    const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);

    /// Whether spans are made (`[telemetry]` given): without it, no step costs anything.
    static ON: AtomicBool = AtomicBool::new(false);

    /// The subscriber, through which [`Decided`] records on a request's span from inside an
    /// event (where `tracing`'s current dispatcher is none); taken by the first request.
    static DISPATCH: OnceLock<WeakDispatch> = OnceLock::new();

    /// The tracer provider while the proxy runs: [`shutdown`](Self::shutdown) sends what is
    /// queued.
    pub struct Telemetry {
        provider: Option<SdkTracerProvider>,
    }

    impl Telemetry {
        /// The exporter `[telemetry]` names in the file at `config`; none when the file has no
        /// such table, or with `check` (`--check` exports nothing). A file that cannot be read,
        /// or has a mistake, gets none: the run that reads it next says what is wrong, at its
        /// line.
        ///
        /// # Errors
        ///
        /// The exporter cannot be built.
        pub fn start(config: &Path, check: bool) -> Result<Self, String> {
            let none = Self { provider: None };
            let Ok(source) = Source::read(config) else {
                return Ok(none);
            };
            let Ok(parsed) = source.parse() else {
                return Ok(none);
            };
            let Some(telemetry) = parsed.telemetry.as_ref().map(|t| t.get_ref()) else {
                return Ok(none);
            };
            if check || !crate::telemetry::check(&source, &parsed).is_empty() {
                return Ok(none);
            }
            let url = crate::telemetry::traces_url(telemetry.otlp_endpoint.get_ref())?;
            let client = OnRuntime {
                client: reqwest::Client::builder()
                    .timeout(EXPORT_TIMEOUT)
                    .redirect(reqwest::redirect::Policy::none())
                    .build()
                    .map_err(|error| format!("[telemetry]: {error}"))?,
                runtime: tokio::runtime::Handle::current(),
            };
            let exporter = opentelemetry_otlp::SpanExporter::builder()
                .with_http()
                .with_http_client(client)
                .with_protocol(Protocol::HttpBinary)
                .with_endpoint(url)
                .with_timeout(EXPORT_TIMEOUT)
                .build()
                .map_err(|error| format!("[telemetry] otlp_endpoint: {error}"))?;
            let name = telemetry
                .service_name
                .as_ref()
                .map_or("elicitation-proxy", |name| name.get_ref().as_str());
            let resource = opentelemetry_sdk::Resource::builder()
                .with_service_name(name.to_owned())
                .build();
            let provider = SdkTracerProvider::builder()
                .with_batch_exporter(exporter)
                .with_resource(resource)
                .build();
            ON.store(true, Ordering::Relaxed);
            Ok(Self {
                provider: Some(provider),
            })
        }

        /// The layers that export the proxy's spans and put each decision on its request's
        /// span; none without `[telemetry]`.
        pub fn layer<S>(&self) -> impl Layer<S> + use<S>
        where
            S: Subscriber + for<'a> LookupSpan<'a>,
        {
            self.provider.as_ref().map(|provider| {
                // The proxy's two spans, with their own fields only: not where in the proxy's
                // code, nor on which thread, nor how long they were idle.
                let spans = tracing_opentelemetry::layer()
                    .with_tracer(provider.tracer("elicitation-proxy"))
                    .with_location(false)
                    .with_threads(false)
                    .with_tracked_inactivity(false)
                    .with_filter(Targets::new().with_target(TARGET, tracing::Level::INFO));
                // The events the decision log reads, and the request spans they fall in.
                let decided = Targets::new()
                    .with_target("tower_elicitation", tracing::Level::DEBUG)
                    .with_target(RULE_TARGET, tracing::Level::DEBUG)
                    .with_target(REFUSAL_TARGET, tracing::Level::INFO)
                    .with_target(TARGET, tracing::Level::INFO);
                spans.and_then(Decided.with_filter(decided))
            })
        }

        /// Sends the spans still queued (at most the exporter's timeout), and stops.
        pub async fn shutdown(self) {
            let Some(provider) = self.provider else {
                return;
            };
            ON.store(false, Ordering::Relaxed);
            // The batch processor's thread exports on this runtime ([`OnRuntime`]): waited for
            // off it.
            let stopped = tokio::task::spawn_blocking(move || provider.shutdown()).await;
            if let Ok(Err(error)) = stopped {
                tracing::warn!(%error, "[telemetry]: the last spans could not be sent");
            }
        }
    }

    /// The exporter's HTTP client: reqwest's async client, run on the proxy's runtime (the
    /// batch processor exports from a thread of its own, which has none).
    #[derive(Debug)]
    struct OnRuntime {
        client: reqwest::Client,
        runtime: tokio::runtime::Handle,
    }

    #[async_trait::async_trait]
    impl HttpClient for OnRuntime {
        async fn send_bytes(
            &self,
            request: http::Request<Bytes>,
        ) -> Result<http::Response<Bytes>, HttpError> {
            let client = self.client.clone();
            self.runtime
                .spawn(async move { client.send_bytes(request).await })
                .await?
        }
    }

    /// The request's span, kept in its extensions for [`note`].
    #[derive(Clone)]
    struct RequestSpan(Span);

    /// `app` with a span for each request to `/mcp`, child of the caller's `traceparent`.
    pub fn traced(app: axum::Router) -> axum::Router {
        app.layer(axum::middleware::from_fn(
            |mut request: axum::extract::Request, next: axum::middleware::Next| async move {
                if !ON.load(Ordering::Relaxed)
                    || request.method() != http::Method::POST
                    || !request.uri().path().starts_with("/mcp")
                {
                    return next.run(request).await;
                }
                DISPATCH.get_or_init(|| tracing::dispatcher::get_default(|d| d.downgrade()));
                let span = tracing::info_span!(
                    target: TARGET,
                    REQUEST,
                    otel.name = "mcp",
                    otel.kind = "server",
                    mcp.method = Empty,
                    mcp.tool = Empty,
                    mcp.decision = Empty,
                    mcp.gate = Empty,
                    mcp.decision_id = Empty,
                    mcp.why = Empty,
                    http.response.status_code = Empty,
                    otel.status_code = Empty,
                );
                let parent =
                    TraceContextPropagator::new().extract(&HeaderExtractor(request.headers()));
                let _ = span.set_parent(parent);
                request.extensions_mut().insert(RequestSpan(span.clone()));
                let response = next.run(request).instrument(span.clone()).await;
                span.record(
                    "http.response.status_code",
                    i64::from(response.status().as_u16()),
                );
                if response.status().is_server_error() {
                    span.record("otel.status_code", "ERROR");
                }
                response
            },
        ))
    }

    /// Puts the method and target of the JSON-RPC request `body` on its request's span.
    pub fn note(parts: &http::request::Parts, body: &[u8]) {
        let Some(RequestSpan(span)) = parts.extensions.get::<RequestSpan>() else {
            return;
        };
        #[derive(serde::Deserialize)]
        struct Message<'a> {
            #[serde(borrow)]
            method: Option<std::borrow::Cow<'a, str>>,
            #[serde(default, borrow)]
            params: Option<Params<'a>>,
        }
        #[derive(serde::Deserialize)]
        struct Params<'a> {
            #[serde(borrow)]
            name: Option<std::borrow::Cow<'a, str>>,
            #[serde(borrow)]
            uri: Option<std::borrow::Cow<'a, str>>,
        }
        let Ok(message) = serde_json::from_slice::<Message>(body) else {
            return;
        };
        let Some(method) = message.method else {
            return;
        };
        span.record("mcp.method", method.as_ref());
        let target = match method.as_ref() {
            "tools/call" | "prompts/get" => message.params.and_then(|p| p.name),
            "resources/read" => message.params.and_then(|p| p.uri),
            _ => None,
        };
        // The span started when the request came (`otel.name` recorded now would be lost).
        let name = match target {
            Some(target) => {
                span.record("mcp.tool", target.as_ref());
                format!("{method} {target}")
            }
            None => method.into_owned(),
        };
        span.context().span().update_name(name);
    }

    /// The upstream leg of a call: a child span of its request's (which the bridge's requests
    /// for a 2025-era host carry in their extensions too), else of the current one, whose
    /// context `request` now carries (`traceparent`, `tracestate`) in place of the caller's.
    pub fn leg<B>(mut request: http::Request<B>) -> (http::Request<B>, Span) {
        if !ON.load(Ordering::Relaxed) {
            return (request, Span::none());
        }
        let span = match request.extensions().get::<RequestSpan>() {
            Some(RequestSpan(parent)) => tracing::info_span!(
                target: TARGET,
                parent: parent,
                "upstream",
                otel.name = "upstream",
                otel.kind = "client",
            ),
            None => tracing::info_span!(
                target: TARGET,
                "upstream",
                otel.name = "upstream",
                otel.kind = "client",
            ),
        };
        let headers = request.headers_mut();
        headers.remove("traceparent");
        headers.remove("tracestate");
        TraceContextPropagator::new().inject_context(&span.context(), &mut HeaderInjector(headers));
        (request, span)
    }

    /// Puts each decision on the span of its request, as the decision log reads it: the
    /// outcome, the rule that decided, why.
    #[derive(Default)]
    struct Decided;

    /// The fields of a decision event.
    #[derive(Default)]
    struct Fields {
        outcome: Option<String>,
        rule: Option<String>,
        decision: Option<String>,
        why: Option<String>,
    }

    impl Visit for Fields {
        fn record_str(&mut self, field: &Field, value: &str) {
            match field.name() {
                "outcome" => self.outcome = Some(value.to_owned()),
                "rule" => self.rule = Some(value.to_owned()),
                "decision" => self.decision = Some(value.to_owned()),
                "why" => self.why = Some(value.to_owned()),
                _ => {}
            }
        }

        fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
            self.record_str(field, &format!("{value:?}"));
        }
    }

    /// The rule of the file that decided a call, kept on the library's span of that call
    /// (`elicitation`), as the decision log keeps it.
    #[derive(Clone)]
    struct Rule {
        rule: String,
        decision: Option<String>,
        why: Option<String>,
    }

    /// The library's span of each call it judges.
    const CALL: &str = "elicitation";

    impl<S> Layer<S> for Decided
    where
        S: Subscriber + for<'a> LookupSpan<'a>,
    {
        fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
            let target = event.metadata().target();
            if target == TARGET {
                return;
            }
            let mut fields = Fields::default();
            event.record(&mut fields);
            let Some(scope) = ctx.event_scope(event) else {
                return;
            };
            // Innermost first.
            let spans: Vec<_> = scope.collect();
            if target == RULE_TARGET
                && let (Some(rule), Some(call)) = (
                    fields.rule.clone(),
                    spans.iter().find(|span| span.metadata().name() == CALL),
                )
            {
                call.extensions_mut().replace(Rule {
                    rule,
                    decision: fields.decision.clone(),
                    why: fields.why.clone(),
                });
            }
            let Some(outcome) = fields.outcome else {
                return;
            };
            // The rule that decided, as the decision log reads it ([`crate::decisions`]): a
            // call a rule let through is `allowed` (its own event), not `ungated`.
            let rule = spans
                .iter()
                .find_map(|span| span.extensions().get::<Rule>().cloned());
            if outcome == "ungated" && rule.is_some() {
                return;
            }
            let why = match &rule {
                Some(rule) if outcome == "gate_refused" => rule.why.clone().or(fields.why),
                _ => fields.why,
            };
            let Some((id, metadata)) = spans
                .iter()
                .find(|span| span.metadata().name() == REQUEST)
                .map(|span| (span.id(), span.metadata()))
            else {
                return;
            };
            drop(spans);
            let Some(dispatch) = DISPATCH.get().and_then(WeakDispatch::upgrade) else {
                return;
            };
            let record = |name: &str, value: &str| {
                let fields = metadata.fields();
                if let Some(field) = fields.field(name) {
                    let values = [(&field, Some(&value as &dyn tracing::Value))];
                    dispatch.record(&id, &tracing::span::Record::new(&fields.value_set(&values)));
                }
            };
            // The last decision of the request is its own (a call's request is one round).
            record("mcp.decision", &outcome);
            if let Some(rule) = &rule {
                record("mcp.gate", &rule.rule);
                if let Some(decision) = &rule.decision {
                    record("mcp.decision_id", decision);
                }
            }
            if let Some(why) = &why {
                record("mcp.why", why);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn checked(text: &str) -> Vec<String> {
        let source = Source {
            path: "gates.toml".into(),
            text: format!("[upstream]\ncommand = [\"x\"]\n\n{text}"),
        };
        let config = source.parse().unwrap();
        check(&source, &config)
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    #[test]
    fn the_spans_go_to_the_endpoints_v1_traces() {
        for (endpoint, url) in [
            ("http://127.0.0.1:4318", "http://127.0.0.1:4318/v1/traces"),
            ("http://collector:4318/", "http://collector:4318/v1/traces"),
            ("http://c.example/otlp", "http://c.example/otlp/v1/traces"),
            ("http://c.example/v1/traces", "http://c.example/v1/traces"),
        ] {
            assert_eq!(traces_url(endpoint).as_deref(), Ok(url), "{endpoint}");
        }
        for bad in [
            "127.0.0.1:4318",
            "grpc://c:4317",
            "http://c/?q=1",
            "file:///x",
        ] {
            assert!(traces_url(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_file_without_telemetry_is_fine_either_way() {
        assert!(checked("").is_empty());
    }

    #[cfg(feature = "otel")]
    #[test]
    fn a_bad_endpoint_or_an_empty_name_is_a_mistake_at_its_line() {
        let found =
            checked("[telemetry]\notlp_endpoint = \"localhost:4318\"\nservice_name = \" \"\n");
        assert_eq!(found.len(), 2, "{found:?}");
        assert!(found[0].contains(":5:"), "{found:?}");
        assert!(found[0].contains("OTLP/HTTP base URL"), "{found:?}");
        assert!(found[1].contains(":6:"), "{found:?}");
        assert!(checked("[telemetry]\notlp_endpoint = \"http://127.0.0.1:4318\"\n").is_empty());
    }

    #[cfg(not(feature = "otel"))]
    #[test]
    fn without_the_feature_a_telemetry_table_says_how_to_build_with_it() {
        let found = checked("[telemetry]\notlp_endpoint = \"http://127.0.0.1:4318\"\n");
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].contains("--features otel"), "{found:?}");
    }
}

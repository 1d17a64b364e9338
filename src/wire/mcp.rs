//! The few MCP 2026-07-28 wire facts the layer reads and writes.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value, json};

/// The first protocol version with multi round-trip requests.
pub(crate) const MRTR_VERSION: &str = "2026-07-28";

/// The `params._meta` keys of MCP 2026-07-28 that the crate reads or writes.
pub(crate) mod meta {
    /// Every key the protocol reserves starts so.
    pub(crate) const PREFIX: &str = "io.modelcontextprotocol/";
    pub(crate) const PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
    pub(crate) const CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
    pub(crate) const CLIENT_INFO: &str = "io.modelcontextprotocol/clientInfo";
    pub(crate) const LOG_LEVEL: &str = "io.modelcontextprotocol/logLevel";
    pub(crate) const SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";
}

/// The HTTP header names of MCP's Streamable HTTP transport, lowercase (as `http` keeps them).
pub(crate) mod header {
    /// `Mcp-Session-Id`: a 2025-era session.
    pub(crate) const SESSION_ID: &str = "mcp-session-id";
    /// `MCP-Protocol-Version`.
    pub(crate) const PROTOCOL_VERSION: &str = "mcp-protocol-version";
    /// `Mcp-Method` (2026-07-28): the request's method.
    pub(crate) const METHOD: &str = "mcp-method";
    /// `Mcp-Name` (2026-07-28): the tool or prompt name, or the resource URI.
    pub(crate) const NAME: &str = "mcp-name";
    /// `Mcp-Param-*` (2026-07-28): arguments a tool declares as headers.
    pub(crate) const PARAM_PREFIX: &str = "mcp-param-";
    /// `Last-Event-ID`: where a resumed event stream goes on.
    pub(crate) const LAST_EVENT_ID: &str = "last-event-id";

    /// `text` as a header value (`Mcp-Name`'s): as it is when it is plain visible ASCII, else the
    /// base64 sentinel.
    pub(crate) fn text(text: &str) -> http::HeaderValue {
        use base64::Engine as _;
        let plain = !text.is_empty()
            && text.bytes().all(|b| (0x20..0x7f).contains(&b))
            && !text.starts_with(' ')
            && !text.ends_with(' ')
            && !text.starts_with("=?");
        if plain && let Ok(value) = http::HeaderValue::from_str(text) {
            return value;
        }
        let encoded = base64::engine::general_purpose::STANDARD.encode(text);
        http::HeaderValue::from_str(&format!("=?base64?{encoded}?="))
            .expect("base64 is a valid header")
    }
}

/// The three methods that may answer `input_required`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Method {
    ToolsCall,
    PromptsGet,
    ResourcesRead,
}

impl Method {
    pub(crate) fn parse(method: &str) -> Option<Self> {
        match method {
            "tools/call" => Some(Self::ToolsCall),
            "prompts/get" => Some(Self::PromptsGet),
            "resources/read" => Some(Self::ResourcesRead),
            _ => None,
        }
    }

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::ToolsCall => "tools/call",
            Self::PromptsGet => "prompts/get",
            Self::ResourcesRead => "resources/read",
        }
    }

    /// The `params` field naming what is called: `name`, or `uri` for resources.
    pub(crate) fn target_field(self) -> &'static str {
        match self {
            Self::ResourcesRead => "uri",
            _ => "name",
        }
    }

    /// The `params` field holding arguments, if the method has one.
    pub(crate) fn arguments_field(self) -> Option<&'static str> {
        match self {
            Self::ResourcesRead => None,
            _ => Some("arguments"),
        }
    }
}

/// The methods of the Tasks extension (`io.modelcontextprotocol/tasks`, SEP-2663) the layer
/// judges: a task's questions are seen in `tasks/get`, answered in `tasks/update`; all three name
/// a task, which is its creator's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TaskMethod {
    Get,
    Update,
    Cancel,
}

impl TaskMethod {
    pub(crate) fn parse(method: &str) -> Option<Self> {
        match method {
            "tasks/get" => Some(Self::Get),
            "tasks/update" => Some(Self::Update),
            "tasks/cancel" => Some(Self::Cancel),
            _ => None,
        }
    }

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Get => "tasks/get",
            Self::Update => "tasks/update",
            Self::Cancel => "tasks/cancel",
        }
    }
}

/// The id of the Tasks extension (SEP-2663), under `clientCapabilities.extensions`.
pub(crate) const TASKS_EXTENSION: &str = "io.modelcontextprotocol/tasks";
/// The `resultType` of a result that created a task (the Tasks extension's `CreateTaskResult`).
pub(crate) const TASK_RESULT_TYPE: &str = "task";
/// The status of a task that waits for the client's answers to its `inputRequests`.
pub(crate) const INPUT_REQUIRED_STATUS: &str = "input_required";

/// The `params` field whose value a request of `method` carries in `Mcp-Name` (2026-07-28, and
/// the Tasks extension's task id), if it carries one.
pub(crate) fn name_param(method: &str) -> Option<&'static str> {
    match method {
        "tools/call" | "prompts/get" => Some("name"),
        "resources/read" | "resources/subscribe" | "resources/unsubscribe" => Some("uri"),
        "tasks/get" | "tasks/update" | "tasks/cancel" => Some("taskId"),
        _ => None,
    }
}

/// Whether `version` (a `YYYY-MM-DD` protocol version) has multi round-trip requests.
pub(crate) fn supports_mrtr(version: &str) -> bool {
    let is_date = version.len() == 10
        && version.bytes().enumerate().all(|(i, b)| {
            if i == 4 || i == 7 {
                b == b'-'
            } else {
                b.is_ascii_digit()
            }
        });
    is_date && version >= MRTR_VERSION
}

/// The kind of an embedded input request, as far as capabilities are concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum InputKind {
    /// `elicitation/create` in form mode (mode absent or `"form"`).
    Form,
    /// `elicitation/create` in URL mode.
    Url,
    /// `sampling/createMessage`; `tools` when the request offers tools.
    Sampling { tools: bool },
    /// `roots/list`.
    Roots,
}

impl InputKind {
    /// Classifies an input request `{method, params}`; `None` for anything else. It reads what
    /// [`InputKind::of_raw`] reads in the same request written as text: a `params`, `mode` or
    /// `tools` that is `null` counts as absent, and `params` and the request are objects.
    pub(crate) fn of(request: &Value) -> Option<Self> {
        let request = request.as_object()?;
        let params = match request.get("params") {
            None | Some(Value::Null) => None,
            Some(Value::Object(params)) => Some(params),
            Some(_) => return None,
        };
        let member = |name: &str| params?.get(name).filter(|value| !value.is_null());
        match request.get("method")?.as_str()? {
            "elicitation/create" => {
                params?;
                match member("mode") {
                    None => Some(Self::Form),
                    Some(Value::String(mode)) if mode == "form" => Some(Self::Form),
                    Some(Value::String(mode)) if mode == "url" => Some(Self::Url),
                    Some(_) => None,
                }
            }
            "sampling/createMessage" => {
                params?;
                let tools =
                    member("tools").is_some_and(|t| t.as_array().is_none_or(|a| !a.is_empty()));
                Some(Self::Sampling { tools })
            }
            "roots/list" => Some(Self::Roots),
            _ => None,
        }
    }

    /// Classifies an input request given as JSON text, with a borrowed parse; also returns its
    /// `params.requestedSchema` text, if any. It reads `mode` and `tools` by their text, so it
    /// agrees with `InputKind::of` on text with one spelling per string and no whitespace:
    /// canonical or minified, as [`super::canonical`] writes them, or as serde_json writes a value.
    pub(crate) fn of_raw(request: &RawValue) -> Option<(Self, Option<&RawValue>)> {
        #[derive(Deserialize)]
        struct Request<'a> {
            #[serde(borrow)]
            method: Cow<'a, str>,
            #[serde(borrow, default)]
            params: Option<Object<Params<'a>>>,
        }
        #[derive(Deserialize)]
        struct Params<'a> {
            #[serde(borrow, default)]
            mode: Option<&'a RawValue>,
            #[serde(borrow, default)]
            tools: Option<&'a RawValue>,
            #[serde(borrow, default, rename = "requestedSchema")]
            schema: Option<&'a RawValue>,
        }
        let Object(request): Object<Request<'_>> = serde_json::from_str(request.get()).ok()?;
        let params = request.params.map(|Object(params)| params);
        let kind = match request.method.as_ref() {
            "elicitation/create" => match params.as_ref()?.mode.map(RawValue::get) {
                None | Some("\"form\"") => Self::Form,
                Some("\"url\"") => Self::Url,
                Some(_) => return None,
            },
            "sampling/createMessage" => {
                let tools = params.as_ref()?.tools.map(RawValue::get);
                Self::Sampling {
                    tools: tools.is_some_and(|t| t != "null" && t != "[]"),
                }
            }
            "roots/list" => Self::Roots,
            _ => return None,
        };
        Some((kind, params.and_then(|p| p.schema)))
    }

    /// The capability path this kind needs, as `(capability, sub-capability)`.
    fn requirement(self) -> (&'static str, Option<&'static str>) {
        match self {
            Self::Form => ("elicitation", Some("form")),
            Self::Url => ("elicitation", Some("url")),
            Self::Sampling { tools: false } => ("sampling", None),
            Self::Sampling { tools: true } => ("sampling", Some("tools")),
            Self::Roots => ("roots", None),
        }
    }

    /// Every kind, each once.
    const ALL: [Self; 5] = [
        Self::Form,
        Self::Url,
        Self::Sampling { tools: false },
        Self::Sampling { tools: true },
        Self::Roots,
    ];

    /// This kind's bit in [`Declared`].
    fn bit(self) -> u8 {
        match self {
            Self::Form => 1,
            Self::Url => 1 << 1,
            Self::Sampling { tools: false } => 1 << 2,
            Self::Sampling { tools: true } => 1 << 3,
            Self::Roots => 1 << 4,
        }
    }

    /// Whether `capabilities` (the request's own `clientCapabilities`) declare this kind.
    fn is_declared_in(self, capabilities: &Value) -> bool {
        let Some(cap) = capabilities.get(self.requirement().0) else {
            return false;
        };
        if !cap.is_object() {
            return false;
        }
        match self {
            // `elicitation: {}` means form only; a mode object lists the modes.
            Self::Form => {
                cap.as_object().is_some_and(|m| !m.contains_key("url")) || cap.get("form").is_some()
            }
            Self::Url => cap.get("url").is_some(),
            Self::Sampling { tools: true } => cap.get("tools").is_some(),
            Self::Sampling { tools: false } | Self::Roots => true,
        }
    }
}

/// A `T` read from a JSON object only. serde's derived structs also take an array, member by
/// member in order, which no MCP request is.
struct Object<T>(T);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Object<T> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Members<T>(std::marker::PhantomData<T>);
        impl<'de, T: Deserialize<'de>> serde::de::Visitor<'de> for Members<T> {
            type Value = T;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
                T::deserialize(serde::de::value::MapAccessDeserializer::new(map))
            }
        }
        deserializer
            .deserialize_map(Members(std::marker::PhantomData))
            .map(Object)
    }
}

/// The kinds of input request a call's `clientCapabilities` declare: all the layer needs of them,
/// read once per call.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Declared(u8);

impl Declared {
    /// What `capabilities` declare; anything but an object declares nothing.
    pub(crate) fn of(capabilities: &Value) -> Self {
        Self(
            InputKind::ALL
                .into_iter()
                .filter(|kind| kind.is_declared_in(capabilities))
                .fold(0, |bits, kind| bits | kind.bit()),
        )
    }

    /// Whether `kind` is declared.
    pub(crate) fn has(self, kind: InputKind) -> bool {
        self.0 & kind.bit() != 0
    }
}

/// Adds what `kind` needs to a `requiredCapabilities` object.
pub(crate) fn add_requirement(required: &mut Map<String, Value>, kind: InputKind) {
    let (cap, sub) = kind.requirement();
    let entry = required.entry(cap).or_insert_with(|| json!({}));
    if let (Some(sub), Some(obj)) = (sub, entry.as_object_mut()) {
        obj.entry(sub).or_insert_with(|| json!({}));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions() {
        assert!(supports_mrtr("2026-07-28"));
        assert!(supports_mrtr("2027-01-01"));
        assert!(!supports_mrtr("2025-11-25"));
        assert!(!supports_mrtr("DRAFT-2026"));
        assert!(!supports_mrtr("2026-07-28x"));
    }

    #[test]
    fn capability_rules() {
        let form = json!({"method": "elicitation/create", "params": {"message": "m", "requestedSchema": {}}});
        let url = json!({"method": "elicitation/create", "params": {"mode": "url", "message": "m", "url": "https://x"}});
        let sampling =
            json!({"method": "sampling/createMessage", "params": {"messages": [], "maxTokens": 5}});
        let roots = json!({"method": "roots/list", "params": {}});
        let [form, url, sampling, roots] =
            [form, url, sampling, roots].map(|r| InputKind::of(&r).unwrap());

        let declared = |capabilities: Value| Declared::of(&capabilities);
        let bare = declared(json!({"elicitation": {}}));
        assert!(bare.has(form));
        assert!(!bare.has(url));
        let url_only = declared(json!({"elicitation": {"url": {}}}));
        assert!(!url_only.has(form));
        assert!(url_only.has(url));
        let both = declared(json!({"elicitation": {"form": {}, "url": {}}}));
        assert!(both.has(form) && both.has(url));
        assert!(declared(json!({"sampling": {}})).has(sampling));
        assert!(!declared(json!({})).has(sampling));
        assert!(declared(json!({"roots": {"listChanged": true}})).has(roots));
        assert!(!declared(json!({"roots": true})).has(roots));
        let tools = InputKind::Sampling { tools: true };
        assert!(!declared(json!({"sampling": {}})).has(tools));
        let everything = declared(json!({"sampling": {"tools": {}}, "roots": {},
            "elicitation": {"form": {}, "url": {}}}));
        assert!(InputKind::ALL.into_iter().all(|kind| everything.has(kind)));
        assert_eq!(declared(json!([])), Declared::default());

        let mut required = Map::new();
        add_requirement(&mut required, url);
        add_requirement(&mut required, form);
        add_requirement(&mut required, roots);
        assert_eq!(
            Value::Object(required),
            json!({"elicitation": {"url": {}, "form": {}}, "roots": {}})
        );
    }

    /// The two classifiers read the same kind in a request and in its text, whatever its shape.
    #[test]
    fn value_and_text_agree() {
        let requests = [
            json!({"method": "elicitation/create", "params": {"message": "m"}}),
            json!({"method": "elicitation/create", "params": {"mode": null}}),
            json!({"method": "elicitation/create", "params": {"mode": "form"}}),
            json!({"method": "elicitation/create", "params": {"mode": "url"}}),
            json!({"method": "elicitation/create", "params": {"mode": "voice"}}),
            json!({"method": "elicitation/create", "params": {"mode": 1}}),
            json!({"method": "elicitation/create", "params": null}),
            json!({"method": "elicitation/create", "params": []}),
            json!({"method": "elicitation/create", "params": ["url"]}),
            json!({"method": "elicitation/create"}),
            json!(["elicitation/create", {}]),
            json!({"method": "sampling/createMessage", "params": {}}),
            json!({"method": "sampling/createMessage", "params": {"tools": null}}),
            json!({"method": "sampling/createMessage", "params": {"tools": []}}),
            json!({"method": "sampling/createMessage", "params": {"tools": [{}]}}),
            json!({"method": "sampling/createMessage", "params": {"tools": {}}}),
            json!({"method": "sampling/createMessage", "params": []}),
            json!({"method": "sampling/createMessage"}),
            json!({"method": "roots/list"}),
            json!({"method": "roots/list", "params": null}),
            json!({"method": "roots/list", "params": {}}),
            json!({"method": "roots/list", "params": []}),
            json!({"method": "roots/list", "params": "x"}),
            json!(["roots/list"]),
            json!({"method": 1}),
            json!({"method": "ping"}),
            json!(null),
        ];
        for request in requests {
            let text = serde_json::value::to_raw_value(&request).unwrap();
            let from_text = InputKind::of_raw(&text).map(|(kind, _)| kind);
            assert_eq!(InputKind::of(&request), from_text, "{request}");
        }
        let roots = json!({"method": "roots/list", "params": null});
        assert_eq!(InputKind::of(&roots), Some(InputKind::Roots));
        let array = json!({"method": "elicitation/create", "params": []});
        assert_eq!(InputKind::of(&array), None);
    }

    #[test]
    fn unknown_requests_have_no_kind() {
        assert_eq!(InputKind::of(&json!({"method": "ping"})), None);
        assert_eq!(InputKind::of(&json!("elicitation/create")), None);
        assert_eq!(
            InputKind::of(&json!({"method": "elicitation/create", "params": {"mode": "voice"}})),
            None
        );
    }
}

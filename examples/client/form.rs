//! Renders an MCP `elicitation/create` request as line-by-line prompts and
//! turns the answers into an `ElicitResult`, without doing any IO itself.
//!
//! The caller supplies a [`Prompter`] (the terminal in `main.rs`, a script in
//! `tests/it/client_form.rs`) and gets back the `ElicitResult` as JSON:
//! `{"action": "accept", "content": {...}}`, `{"action": "decline"}` or
//! `{"action": "cancel"}` (URL mode accepts without `content`).
//!
//! Form mode (`mode` absent or `"form"`):
//!
//! - the message, then `Answer? [a]ccept / [d]ecline / [c]ancel [a]`;
//! - then each property of `requestedSchema`, required ones first, each group
//!   by name, with its title and description:
//!   - strings, with `minLength`/`maxLength` checked here and `format`
//!     (`email`, `uri`, `date`, `date-time`) shown as a hint;
//!   - numbers and integers, with `minimum`/`maximum`;
//!   - booleans as `yes`/`no` (`y`, `n`, `true`, `false` too);
//!   - single-select (`enum` with optional `enumNames`, or `oneOf`
//!     `{const, title}`) as a numbered list: answer a number (or the exact
//!     value);
//!   - multi-select (`type: array` with `items.enum` or `items.anyOf`) as a
//!     numbered list: answer comma-separated numbers, within
//!     `minItems`/`maxItems`;
//! - a `default` is shown in brackets and used on empty input; an optional
//!   field without a default is left out on empty input; a wrong answer is
//!   explained and asked again. Answers are trimmed.
//!
//! URL mode (`mode: "url"`): the message and the URL, then Enter accepts
//! (consent only, no `content`), `d` declines and `c` cancels.
//!
//! At any prompt:
//!
//! - `:decline` declines, `:cancel` (or end of input) cancels;
//! - `:raw {json}` accepts at once with that JSON as the `content`,
//!   verbatim and unchecked: the client-side checks above are a convenience,
//!   `:raw` is how to send the server something they would refuse (e.g.
//!   `:raw {"approve": "yes"}`) and see how it validates;
//! - `:help` shows these commands.

use serde_json::{Map, Number, Value, json};

/// A line-based user interface.
pub trait Prompter {
    /// Shows `prompt` (which does not end in a newline) and reads one line,
    /// without its line ending; `None` at the end of input.
    fn ask(&mut self, prompt: &str) -> Option<String>;

    /// Shows `text` as one or more complete lines.
    fn say(&mut self, text: &str);
}

/// The commands available at every prompt.
pub const HELP: &str = "(at any prompt: :decline declines, :cancel or end of input cancels, \
                        :raw {json} sends that JSON as the content as is)";

/// Asks the user to answer an elicitation and returns the `ElicitResult` as
/// JSON.
///
/// `params` are the `params` of an `elicitation/create` request: `message`
/// and `requestedSchema` (form mode) or `mode: "url"`, `message` and `url`.
pub fn elicit<P: Prompter + ?Sized>(params: &Value, prompter: &mut P) -> Value {
    let outcome = match params.get("mode").and_then(Value::as_str) {
        None | Some("form") => ask_form(params, prompter),
        Some("url") => ask_url(params, prompter),
        Some(other) => {
            prompter.say(&format!(
                "This client does not support elicitation mode {other:?}; declining."
            ));
            Err(Stop::Decline)
        }
    };
    let result = match outcome {
        Ok(Some(content)) => json!({ "action": "accept", "content": content }),
        Ok(None) => json!({ "action": "accept" }),
        Err(Stop::Raw(content)) => json!({ "action": "accept", "content": content }),
        Err(Stop::Decline) => json!({ "action": "decline" }),
        Err(Stop::Cancel) => json!({ "action": "cancel" }),
    };
    prompter.say(&summary(&result));
    result
}

/// Why the questions ended before the form was filled in.
#[derive(Debug)]
enum Stop {
    Decline,
    Cancel,
    /// `:raw {json}`: accept with this content.
    Raw(Value),
}

/// One line after the command escapes: trimmed user input.
fn read<P: Prompter + ?Sized>(prompter: &mut P, prompt: &str) -> Result<String, Stop> {
    loop {
        let Some(line) = prompter.ask(prompt) else {
            return Err(Stop::Cancel);
        };
        let line = line.trim();
        match line {
            ":decline" => return Err(Stop::Decline),
            ":cancel" => return Err(Stop::Cancel),
            ":help" => prompter.say(HELP),
            _ => match line.strip_prefix(":raw") {
                Some(rest) if rest.is_empty() || rest.starts_with(char::is_whitespace) => {
                    match serde_json::from_str::<Value>(rest.trim()) {
                        Ok(content) => return Err(Stop::Raw(content)),
                        Err(error) => prompter.say(&format!(
                            "  ! :raw needs a JSON value after it, e.g. :raw {{\"approve\": \
                             \"yes\"}} ({error})"
                        )),
                    }
                }
                _ => return Ok(line.to_owned()),
            },
        }
    }
}

/// The line printed once the answer is known.
fn summary(result: &Value) -> String {
    match (result["action"].as_str(), result.get("content")) {
        (Some("accept"), Some(content)) => format!("→ accept, content: {content}"),
        (Some("accept"), None) => "→ accept".to_owned(),
        (Some("decline"), _) => "→ decline".to_owned(),
        _ => "→ cancel".to_owned(),
    }
}

// ---------------------------------------------------------------------------
// URL mode
// ---------------------------------------------------------------------------

fn ask_url<P: Prompter + ?Sized>(params: &Value, prompter: &mut P) -> Result<Option<Value>, Stop> {
    let message = params.get("message").and_then(Value::as_str).unwrap_or("");
    let url = params.get("url").and_then(Value::as_str).unwrap_or("");
    if !message.is_empty() {
        prompter.say(message);
    }
    prompter.say("Open this URL to continue:");
    prompter.say(&format!("  {url}"));
    prompter.say(HELP);
    loop {
        let answer = read(
            prompter,
            "Press Enter when you are done (accept), or [d]ecline / [c]ancel: ",
        )?;
        match answer.to_lowercase().as_str() {
            "" | "a" | "accept" => return Ok(None),
            "d" | "decline" => return Err(Stop::Decline),
            "c" | "cancel" => return Err(Stop::Cancel),
            _ => prompter.say("  ! press Enter, or type d or c"),
        }
    }
}

// ---------------------------------------------------------------------------
// Form mode
// ---------------------------------------------------------------------------

fn ask_form<P: Prompter + ?Sized>(params: &Value, prompter: &mut P) -> Result<Option<Value>, Stop> {
    let message = params.get("message").and_then(Value::as_str).unwrap_or("");
    let empty = Value::Object(Map::new());
    let schema = params.get("requestedSchema").unwrap_or(&empty);
    if !message.is_empty() {
        prompter.say(message);
    }
    for key in ["title", "description"] {
        if let Some(text) = schema.get(key).and_then(Value::as_str) {
            prompter.say(text);
        }
    }
    prompter.say(HELP);
    loop {
        let answer = read(prompter, "Answer? [a]ccept / [d]ecline / [c]ancel [a]: ")?;
        match answer.to_lowercase().as_str() {
            "" | "a" | "accept" => break,
            "d" | "decline" => return Err(Stop::Decline),
            "c" | "cancel" => return Err(Stop::Cancel),
            _ => prompter.say("  ! type a, d or c"),
        }
    }

    let mut content = Map::new();
    for field in fields(schema) {
        if let Some(value) = field.ask(prompter)? {
            content.insert(field.name.to_owned(), value);
        }
    }
    Ok(Some(Value::Object(content)))
}

/// The properties of a `requestedSchema`: required ones first, each group by
/// name.
fn fields(schema: &Value) -> Vec<Field<'_>> {
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|names| names.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let mut fields: Vec<Field<'_>> = schema
        .get("properties")
        .and_then(Value::as_object)
        .map(|properties| {
            properties
                .iter()
                .map(|(name, property)| Field::new(name, property, required.contains(&&**name)))
                .collect()
        })
        .unwrap_or_default();
    fields.sort_by(|a, b| b.required.cmp(&a.required).then(a.name.cmp(b.name)));
    fields
}

/// One option of a single- or multi-select.
#[derive(Debug)]
struct Choice {
    value: String,
    label: Option<String>,
}

impl Choice {
    fn display(&self) -> String {
        match &self.label {
            Some(label) if *label != self.value => format!("{label} ({})", self.value),
            _ => self.value.clone(),
        }
    }
}

#[derive(Debug)]
enum Kind {
    Text {
        min: Option<u64>,
        max: Option<u64>,
        format: Option<String>,
    },
    Number {
        integer: bool,
        min: Option<f64>,
        max: Option<f64>,
    },
    Boolean,
    Select(Vec<Choice>),
    MultiSelect {
        options: Vec<Choice>,
        min: Option<u64>,
        max: Option<u64>,
    },
    /// A property type this client does not know: the answer is read as JSON
    /// (or taken as a string when it is not JSON).
    Other,
}

#[derive(Debug)]
struct Field<'a> {
    name: &'a str,
    title: Option<&'a str>,
    description: Option<&'a str>,
    required: bool,
    default: Option<&'a Value>,
    kind: Kind,
}

fn strings(value: Option<&Value>) -> Option<Vec<String>> {
    value?
        .as_array()?
        .iter()
        .map(|v| v.as_str().map(str::to_owned))
        .collect()
}

/// `[{const, title}]` options (`oneOf`, `anyOf`).
fn titled(value: Option<&Value>) -> Option<Vec<Choice>> {
    value?
        .as_array()?
        .iter()
        .map(|option| {
            Some(Choice {
                value: option.get("const")?.as_str()?.to_owned(),
                label: option
                    .get("title")
                    .and_then(Value::as_str)
                    .map(str::to_owned),
            })
        })
        .collect()
}

/// `enum` options, labelled by `enumNames` when present.
fn untitled(values: Vec<String>, names: Option<Vec<String>>) -> Vec<Choice> {
    let names = names.unwrap_or_default();
    values
        .into_iter()
        .enumerate()
        .map(|(i, value)| Choice {
            value,
            label: names.get(i).cloned(),
        })
        .collect()
}

impl<'a> Field<'a> {
    fn new(name: &'a str, property: &'a Value, required: bool) -> Self {
        let str_of = |key: &str| property.get(key).and_then(Value::as_str);
        let u64_of = |key: &str| property.get(key).and_then(Value::as_u64);
        let f64_of = |key: &str| property.get(key).and_then(Value::as_f64);
        let kind = match str_of("type") {
            Some("array") => {
                let items = property.get("items");
                let options = items
                    .and_then(|items| strings(items.get("enum")))
                    .map(|values| untitled(values, None))
                    .or_else(|| {
                        items.and_then(|items| {
                            titled(items.get("anyOf")).or_else(|| titled(items.get("oneOf")))
                        })
                    });
                match options {
                    Some(options) => Kind::MultiSelect {
                        options,
                        min: u64_of("minItems"),
                        max: u64_of("maxItems"),
                    },
                    None => Kind::Other,
                }
            }
            Some("string") => {
                if let Some(options) = titled(property.get("oneOf")) {
                    Kind::Select(options)
                } else if let Some(values) = strings(property.get("enum")) {
                    Kind::Select(untitled(values, strings(property.get("enumNames"))))
                } else {
                    Kind::Text {
                        min: u64_of("minLength"),
                        max: u64_of("maxLength"),
                        format: str_of("format").map(str::to_owned),
                    }
                }
            }
            Some(kind @ ("number" | "integer")) => Kind::Number {
                integer: kind == "integer",
                min: f64_of("minimum"),
                max: f64_of("maximum"),
            },
            Some("boolean") => Kind::Boolean,
            _ => Kind::Other,
        };
        Field {
            name,
            title: str_of("title"),
            description: str_of("description"),
            required,
            default: property.get("default"),
            kind,
        }
    }

    /// Asks until the answer is acceptable; `None` leaves the field out.
    fn ask<P: Prompter + ?Sized>(&self, prompter: &mut P) -> Result<Option<Value>, Stop> {
        prompter.say(&self.header());
        if let Some(description) = self.description {
            prompter.say(&format!("  {description}"));
        }
        if let Kind::Select(options) | Kind::MultiSelect { options, .. } = &self.kind {
            let defaults = self.default_values();
            for (i, option) in options.iter().enumerate() {
                let mark = if defaults.contains(&option.value.as_str()) {
                    " (default)"
                } else {
                    ""
                };
                prompter.say(&format!("  {}) {}{mark}", i + 1, option.display()));
            }
        }
        let prompt = self.prompt();
        loop {
            let answer = read(prompter, &prompt)?;
            if answer.is_empty() {
                if let Some(default) = self.default {
                    return Ok(Some(default.clone()));
                }
                if !self.required {
                    return Ok(None);
                }
                prompter.say("  ! required: type an answer (or :decline / :cancel)");
                continue;
            }
            match self.parse(&answer) {
                Ok(value) => return Ok(Some(value)),
                Err(problem) => prompter.say(&format!("  ! {problem}")),
            }
        }
    }

    /// `Title (name), required`.
    fn header(&self) -> String {
        let label = match self.title {
            Some(title) if title != self.name => format!("{title} ({})", self.name),
            _ => self.name.to_owned(),
        };
        let need = if self.required {
            "required"
        } else {
            "optional"
        };
        format!("{label}, {need}")
    }

    /// The string values of the default (for marking select options).
    fn default_values(&self) -> Vec<&str> {
        match self.default {
            Some(Value::String(value)) => vec![value.as_str()],
            Some(Value::Array(values)) => values.iter().filter_map(Value::as_str).collect(),
            _ => Vec::new(),
        }
    }

    /// The input line's prompt: kind, constraints, how to skip, default.
    fn prompt(&self) -> String {
        let mut hints: Vec<String> = Vec::new();
        match &self.kind {
            Kind::Text { min, max, format } => {
                hints.push("text".to_owned());
                if let Some(format) = format {
                    hints.push(format_hint(format));
                }
                if let Some(range) = length_range(*min, *max, "char") {
                    hints.push(range);
                }
            }
            Kind::Number { integer, min, max } => {
                let mut hint = if *integer { "integer" } else { "number" }.to_owned();
                match (min, max) {
                    (Some(min), Some(max)) => hint.push_str(&format!(" {min}..{max}")),
                    (Some(min), None) => hint.push_str(&format!(" >= {min}")),
                    (None, Some(max)) => hint.push_str(&format!(" <= {max}")),
                    (None, None) => {}
                }
                hints.push(hint);
            }
            Kind::Boolean => hints.push("yes/no".to_owned()),
            Kind::Select(options) => hints.push(format!("choose 1-{}", options.len())),
            Kind::MultiSelect { min, max, .. } => {
                hints.push("numbers, comma-separated".to_owned());
                if let Some(range) = length_range(*min, *max, "item") {
                    hints.push(range);
                }
            }
            Kind::Other => hints.push("JSON value".to_owned()),
        }
        if !self.required && self.default.is_none() {
            hints.push("Enter to skip".to_owned());
        }
        let default = self
            .default
            .map(|default| format!(" [{}]", self.show_default(default)))
            .unwrap_or_default();
        format!("  {}{default}: ", hints.join(", "))
    }

    /// How a default is shown in the prompt: as the user would type it.
    fn show_default(&self, default: &Value) -> String {
        let number_of = |options: &[Choice], value: &str| {
            options
                .iter()
                .position(|option| option.value == value)
                .map_or_else(|| value.to_owned(), |i| (i + 1).to_string())
        };
        match (&self.kind, default) {
            (Kind::Boolean, Value::Bool(true)) => "yes".to_owned(),
            (Kind::Boolean, Value::Bool(false)) => "no".to_owned(),
            (Kind::Select(options), Value::String(value)) => number_of(options, value),
            (Kind::MultiSelect { options, .. }, Value::Array(values)) => values
                .iter()
                .map(|value| match value.as_str() {
                    Some(value) => number_of(options, value),
                    None => value.to_string(),
                })
                .collect::<Vec<_>>()
                .join(","),
            (_, Value::String(value)) => value.clone(),
            (_, other) => other.to_string(),
        }
    }

    /// The value for a non-empty answer, or what is wrong with it.
    fn parse(&self, answer: &str) -> Result<Value, String> {
        match &self.kind {
            Kind::Text { min, max, .. } => {
                let length = answer.chars().count() as u64;
                if let Some(min) = min.filter(|min| length < *min) {
                    return Err(format!("at least {min} characters, got {length}"));
                }
                if let Some(max) = max.filter(|max| length > *max) {
                    return Err(format!("at most {max} characters, got {length}"));
                }
                Ok(Value::String(answer.to_owned()))
            }
            Kind::Number { integer, min, max } => {
                let number = if *integer {
                    answer
                        .parse::<i64>()
                        .map(Number::from)
                        .map_err(|_| format!("{answer:?} is not an integer"))?
                } else {
                    match answer.parse::<i64>() {
                        Ok(whole) => Number::from(whole),
                        Err(_) => answer
                            .parse::<f64>()
                            .ok()
                            .and_then(Number::from_f64)
                            .ok_or_else(|| format!("{answer:?} is not a number"))?,
                    }
                };
                let float = number.as_f64().unwrap_or_default();
                if let Some(min) = min.filter(|min| float < *min) {
                    return Err(format!("at least {min}"));
                }
                if let Some(max) = max.filter(|max| float > *max) {
                    return Err(format!("at most {max}"));
                }
                Ok(Value::Number(number))
            }
            Kind::Boolean => match answer.to_lowercase().as_str() {
                "y" | "yes" | "true" => Ok(Value::Bool(true)),
                "n" | "no" | "false" => Ok(Value::Bool(false)),
                _ => Err("answer yes or no".to_owned()),
            },
            Kind::Select(options) => Ok(Value::String(pick(options, answer)?.to_owned())),
            Kind::MultiSelect { options, min, max } => {
                let mut chosen: Vec<&str> = Vec::new();
                for part in answer.split(',').map(str::trim).filter(|p| !p.is_empty()) {
                    let value = pick(options, part)?;
                    if !chosen.contains(&value) {
                        chosen.push(value);
                    }
                }
                let count = chosen.len() as u64;
                if let Some(min) = min.filter(|min| count < *min) {
                    return Err(format!("choose at least {min}, got {count}"));
                }
                if let Some(max) = max.filter(|max| count > *max) {
                    return Err(format!("choose at most {max}, got {count}"));
                }
                Ok(chosen.into_iter().map(Value::from).collect())
            }
            Kind::Other => Ok(serde_json::from_str(answer).unwrap_or_else(|_| Value::from(answer))),
        }
    }
}

/// The option chosen by its number (or its exact value).
fn pick<'o>(options: &'o [Choice], answer: &str) -> Result<&'o str, String> {
    if let Some(option) = options.iter().find(|option| option.value == answer) {
        return Ok(&option.value);
    }
    answer
        .parse::<usize>()
        .ok()
        .and_then(|n| n.checked_sub(1))
        .and_then(|i| options.get(i))
        .map(|option| option.value.as_str())
        .ok_or_else(|| format!("{answer:?}: choose a number from 1 to {}", options.len()))
}

/// `3-20 chars`, `at least 1 item`, `at most 200 chars`.
fn length_range(min: Option<u64>, max: Option<u64>, unit: &str) -> Option<String> {
    let count = |n: u64| format!("{n} {unit}{}", if n == 1 { "" } else { "s" });
    match (min.filter(|min| *min > 0), max) {
        (Some(min), Some(max)) => Some(format!("{min}-{max} {unit}s")),
        (Some(min), None) => Some(format!("at least {}", count(min))),
        (None, Some(max)) => Some(format!("at most {}", count(max))),
        (None, None) => None,
    }
}

fn format_hint(format: &str) -> String {
    match format {
        "email" => "email, e.g. name@example.com".to_owned(),
        "uri" => "URI, e.g. https://example.com/".to_owned(),
        "date" => "date, YYYY-MM-DD".to_owned(),
        "date-time" => "date-time, e.g. 2026-07-28T09:30:00Z".to_owned(),
        other => format!("format {other}"),
    }
}

//! `client`: an interactive terminal MCP client (rmcp, stateless MCP
//! 2026-07-28) that answers elicitations at the terminal.
//!
//! ```text
//! cargo run --example client -- [--url URL] list
//! cargo run --example client -- [--url URL] call <tool> ['<json arguments>']
//! cargo run --example client -- call deploy '{"environment":"staging"}'
//! ```
//!
//! The URL defaults to `MCP_URL`, else `http://127.0.0.1:3000/mcp` (the
//! `deploy` example). The client uses the stateless lifecycle
//! (`server/discover`, no `initialize`), declares form and URL elicitation,
//! and calls the tool with rmcp's own multi round-trip loop: every
//! `input_required` round's elicitations are asked here, one after another,
//! and rmcp retries the call with the answers and the `requestState`.
//!
//! How an elicitation is asked is in `form.rs`. At any prompt `:decline`
//! declines, `:cancel` (or Ctrl-D) cancels and `:raw {json}` accepts with that
//! JSON as the content, unchecked: handy to see how the server validates
//! answers, e.g. `:raw {"approve": "yes"}` to the `deploy` approval.
//!
//! Prints the result's text content, its `structuredContent` (pretty) and
//! `isError`. Exit status: 0 on success, 1 when the result has
//! `isError: true`, 2 when the call fails (connection, protocol or JSON-RPC
//! error, bad usage).
//!
//! `RUST_LOG` (e.g. `RUST_LOG=rmcp=debug`) turns on rmcp's logs, to stderr.
//!
//! With stdin not a terminal (a pipe or a heredoc) each answer read is echoed
//! after its prompt, so the output reads like a session.

mod form;

use std::{
    io::{self, BufRead, IsTerminal, Write},
    process::ExitCode,
    sync::mpsc,
    thread,
};

use rmcp::{
    ClientHandler, ClientLifecycleMode, ClientServiceExt, ErrorData, ServiceError,
    model::{
        CallToolRequestParams, CallToolResult, ClientCapabilities, ClientConfig,
        ElicitRequestParams, ElicitResult, ElicitationCapability, FormElicitationCapability,
        Implementation, ProtocolVersion, UrlElicitationCapability,
    },
    service::{RequestContext, RoleClient, RunningService},
    transport::StreamableHttpClientTransport,
};
use serde_json::{Map, Value};
use tokio::sync::oneshot;
use tracing_subscriber::EnvFilter;

const DEFAULT_URL: &str = "http://127.0.0.1:3000/mcp";

const USAGE: &str = "\
usage: cargo run --example client -- [--url URL] list
       cargo run --example client -- [--url URL] call <tool> ['<json arguments>']

URL defaults to $MCP_URL, else http://127.0.0.1:3000/mcp.
At any elicitation prompt: :decline, :cancel (or Ctrl-D), :raw {json} (send that
JSON as the content, unchecked), :help.";

#[derive(Debug)]
enum Command {
    List,
    Call {
        tool: String,
        arguments: Map<String, Value>,
    },
}

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_writer(io::stderr)
        .with_ansi(io::stderr().is_terminal())
        .with_env_filter(EnvFilter::try_from_default_env().unwrap_or_else(|_| "off".into()))
        .init();

    let (url, command) = match parse_args(std::env::args().skip(1)) {
        Ok(Some(parsed)) => parsed,
        Ok(None) => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(problem) => {
            eprintln!("{problem}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };

    let transport = StreamableHttpClientTransport::from_uri(url.clone());
    // Stateless 2026-07-28: `server/discover`, then self-contained requests
    // carrying the capabilities in `_meta` (no `initialize`, no session).
    let lifecycle = ClientLifecycleMode::Discover {
        preferred_versions: vec![ProtocolVersion::V_2026_07_28],
    };
    let client = match TerminalUser::spawn()
        .serve_with_lifecycle(transport, lifecycle)
        .await
    {
        Ok(client) => client,
        Err(error) => {
            eprintln!("error: cannot connect to {url}: {error}");
            return ExitCode::from(2);
        }
    };

    let status = match command {
        Command::List => list(&client).await,
        Command::Call { tool, arguments } => call(&client, tool, arguments).await,
    };
    let _ = client.cancel().await;
    status
}

/// `(url, command)`, or `None` for `--help`.
fn parse_args(args: impl IntoIterator<Item = String>) -> Result<Option<(String, Command)>, String> {
    let mut url = None;
    let mut rest = Vec::new();
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "-h" | "--help" => return Ok(None),
            "--url" => url = Some(args.next().ok_or("--url needs a value")?),
            _ => match arg.strip_prefix("--url=") {
                Some(value) => url = Some(value.to_owned()),
                None => rest.push(arg),
            },
        }
    }
    let url = url
        .or_else(|| std::env::var("MCP_URL").ok())
        .unwrap_or_else(|| DEFAULT_URL.to_owned());
    let command = match rest.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        ["list"] => Command::List,
        ["call", tool] => Command::Call {
            tool: tool.to_owned(),
            arguments: Map::new(),
        },
        ["call", tool, arguments] => match serde_json::from_str(arguments) {
            Ok(Value::Object(arguments)) => Command::Call {
                tool: tool.to_owned(),
                arguments,
            },
            Ok(_) => return Err("the tool arguments must be a JSON object".to_owned()),
            Err(error) => return Err(format!("the tool arguments are not JSON: {error}")),
        },
        ["call"] => return Err("call needs a tool name".to_owned()),
        [] => return Err("missing command".to_owned()),
        _ => return Err(format!("unexpected arguments: {}", rest.join(" "))),
    };
    Ok(Some((url, command)))
}

async fn list(client: &RunningService<RoleClient, TerminalUser>) -> ExitCode {
    match client.list_all_tools().await {
        Ok(tools) => {
            for tool in tools {
                println!("{}", tool.name);
                if let Some(description) = &tool.description {
                    println!("  {description}");
                }
                println!(
                    "  arguments: {}",
                    Value::Object((*tool.input_schema).clone())
                );
            }
            ExitCode::SUCCESS
        }
        Err(error) => failed(&error),
    }
}

async fn call(
    client: &RunningService<RoleClient, TerminalUser>,
    tool: String,
    arguments: Map<String, Value>,
) -> ExitCode {
    let params = CallToolRequestParams::new(tool).with_arguments(arguments);
    // rmcp's own MRTR loop: up to 10 `input_required` rounds, each one's
    // elicitations answered by `TerminalUser::create_elicitation`.
    match client.call_tool(params).await {
        Ok(result) => {
            print_result(&result);
            if result.is_error == Some(true) {
                ExitCode::from(1)
            } else {
                ExitCode::SUCCESS
            }
        }
        Err(error) => failed(&error),
    }
}

fn print_result(result: &CallToolResult) {
    println!();
    println!("── result ──");
    for block in &result.content {
        match block.as_text() {
            Some(text) => println!("{}", text.text),
            None => println!(
                "{}",
                serde_json::to_string(block).unwrap_or_else(|e| e.to_string())
            ),
        }
    }
    if let Some(structured) = &result.structured_content {
        let pretty = serde_json::to_string_pretty(structured).unwrap_or_else(|e| e.to_string());
        println!("structuredContent:\n{pretty}");
    }
    println!("isError: {}", result.is_error.unwrap_or(false));
}

fn failed(error: &ServiceError) -> ExitCode {
    match error {
        ServiceError::McpError(error) => {
            eprintln!("error {}: {}", error.code.0, error.message);
            if let Some(data) = &error.data {
                eprintln!("data: {data}");
            }
        }
        other => eprintln!("error: {other}"),
    }
    ExitCode::from(2)
}

/// The client handler: forwards each elicitation to the terminal thread and
/// waits for the answer.
///
/// rmcp answers the input requests of one round concurrently, so the
/// terminal is a single thread asking them one at a time, in arrival order.
struct TerminalUser {
    jobs: mpsc::Sender<Job>,
}

struct Job {
    key: String,
    params: Value,
    reply: oneshot::Sender<Value>,
}

impl TerminalUser {
    fn spawn() -> Self {
        let (jobs, queue) = mpsc::channel::<Job>();
        thread::Builder::new()
            .name("terminal".to_owned())
            .spawn(move || {
                let mut terminal = Terminal::new();
                for job in queue {
                    form::Prompter::say(
                        &mut terminal,
                        &format!("\n── input request {} ──", job.key),
                    );
                    let answer = form::elicit(&job.params, &mut terminal);
                    let _ = job.reply.send(answer);
                }
            })
            .expect("spawn the terminal thread");
        Self { jobs }
    }
}

impl ClientHandler for TerminalUser {
    fn get_info(&self) -> ClientConfig {
        let elicitation = ElicitationCapability::new()
            .with_form(FormElicitationCapability::new())
            .with_url(UrlElicitationCapability::new());
        ClientConfig::new(
            ClientCapabilities::builder()
                .enable_elicitation_with(elicitation)
                .build(),
            Implementation::new("tower-elicitation-client", env!("CARGO_PKG_VERSION")),
        )
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        let params = serde_json::to_value(&request)
            .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
        let (reply, answer) = oneshot::channel();
        // In an MRTR round rmcp sets the request id to the `inputRequests` key.
        let job = Job {
            key: context.id.to_string(),
            params,
            reply,
        };
        self.jobs
            .send(job)
            .map_err(|_| ErrorData::internal_error("the terminal is gone", None))?;
        let answer = answer
            .await
            .map_err(|_| ErrorData::internal_error("the terminal is gone", None))?;
        serde_json::from_value(answer).map_err(|e| ErrorData::internal_error(e.to_string(), None))
    }
}

/// stdin/stdout as a [`form::Prompter`].
struct Terminal {
    /// Whether to print each answer read (stdin is not a terminal, so it was
    /// not echoed).
    echo: bool,
}

impl Terminal {
    fn new() -> Self {
        Self {
            echo: !io::stdin().is_terminal(),
        }
    }
}

impl form::Prompter for Terminal {
    fn ask(&mut self, prompt: &str) -> Option<String> {
        let mut stdout = io::stdout().lock();
        let _ = write!(stdout, "{prompt}");
        let _ = stdout.flush();
        let mut line = String::new();
        match io::stdin().lock().read_line(&mut line) {
            Ok(0) | Err(_) => {
                let _ = writeln!(stdout);
                None
            }
            Ok(_) => {
                let line = line.trim_end_matches(['\n', '\r']).to_owned();
                if self.echo {
                    let _ = writeln!(stdout, "{line}");
                }
                Some(line)
            }
        }
    }

    fn say(&mut self, text: &str) {
        println!("{text}");
    }
}

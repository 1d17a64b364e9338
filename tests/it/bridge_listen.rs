//! A 2025-era client's subscriptions and GET stream through the legacy bridge, against a real
//! rmcp 3.11 `StreamableHttpService` (stateless 2026-07-28, `subscriptions/listen` implemented),
//! over TCP on 127.0.0.1:0: `LegacyBridgeLayer → ElicitationLayer → rmcp`. The client is
//! hand-written (reqwest), as a 2025 host speaks it.

use crate::support::legacy_stream::{Events, WAIT};

use std::sync::{Arc, Mutex};

use rmcp::model::{
    ResourceUpdatedNotification, ResourceUpdatedNotificationParam, ServerCapabilities,
    ServerConfig, ServerNotification, SubscriptionFilter,
};
use rmcp::service::{SubscriptionContext, SubscriptionSendError};
use rmcp::transport::streamable_http_server::{
    StreamableHttpServerConfig, StreamableHttpService, session::local::LocalSessionManager,
};
use rmcp::{ErrorData as McpError, ServerHandler};
use serde_json::{Value, json};
use tokio::sync::{broadcast, watch};
use tower::ServiceBuilder;
use tower_elicitation::bridge::LegacyBridgeLayer;
use tower_elicitation::{ElicitationLayer, Keyring};

/// What the server announces: a tool list change, or an update of a resource.
#[derive(Clone, Debug)]
enum Change {
    Tools,
    Resource(String),
}

/// An rmcp server with resource subscriptions and tool list changes, announced on every open
/// `subscriptions/listen`; it tells the test which filters its listens were accepted with.
#[derive(Clone)]
struct Watched {
    changes: broadcast::Sender<Change>,
    /// The resource URIs of each listen open now, by when it opened.
    listening: Arc<watch::Sender<Vec<Vec<String>>>>,
    next: Arc<Mutex<usize>>,
}

impl ServerHandler for Watched {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tool_list_changed()
                .enable_resources()
                .enable_resources_subscribe()
                .build(),
        )
    }

    fn accepted_subscription_filter(
        &self,
        requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        Some(requested.clone())
    }

    async fn listen(&self, subscription: SubscriptionContext) -> Result<(), McpError> {
        let mut changes = self.changes.subscribe();
        let uris = subscription
            .accepted()
            .resource_subscriptions
            .clone()
            .unwrap_or_default();
        let slot = {
            let mut next = self.next.lock().unwrap();
            *next += 1;
            *next
        };
        self.listening.send_modify(|open| {
            open.resize(slot.max(open.len()), Vec::new());
            open[slot - 1] = uris;
        });
        let ended = async {
            loop {
                let change = tokio::select! {
                    () = subscription.cancelled() => return,
                    change = changes.recv() => change,
                };
                let notification = match change {
                    Ok(Change::Tools) => {
                        ServerNotification::ToolListChangedNotification(Default::default())
                    }
                    Ok(Change::Resource(uri)) => ServerNotification::ResourceUpdatedNotification(
                        ResourceUpdatedNotification::new(ResourceUpdatedNotificationParam::new(
                            uri,
                        )),
                    ),
                    Err(broadcast::error::RecvError::Lagged(_)) => continue,
                    Err(broadcast::error::RecvError::Closed) => return,
                };
                // rmcp refuses what the listen did not ask for: not sent, not an error.
                match subscription.sink().send(notification).await {
                    Ok(()) | Err(SubscriptionSendError::NotificationNotAccepted(_)) => {}
                    Err(_) => return,
                }
            }
        };
        ended.await;
        // This listen is closed: it no longer counts as open.
        self.listening
            .send_modify(|open| open[slot - 1] = vec!["closed".to_owned()]);
        Ok(())
    }
}

struct Server {
    url: String,
    http: reqwest::Client,
    watched: Watched,
}

async fn serve() -> Server {
    let watched = Watched {
        changes: broadcast::channel(16).0,
        listening: Arc::new(watch::channel(Vec::new()).0),
        next: Arc::default(),
    };
    let config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_stateless_protocol_metadata_required(true)
        .with_allowed_hosts(["localhost", "127.0.0.1", "::1"]);
    let handler = watched.clone();
    let mcp = StreamableHttpService::new(
        move || Ok(handler.clone()),
        LocalSessionManager::default().into(),
        config,
    );
    let layer = ElicitationLayer::new(Keyring::new("k1", [7u8; 32]).unwrap());
    let service = ServiceBuilder::new()
        .layer(LegacyBridgeLayer::for_layer(&layer))
        .layer(layer)
        .service(mcp);
    let app = axum::Router::new().nest_service("/mcp", service);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    Server {
        url,
        http: reqwest::Client::new(),
        watched,
    }
}

impl Server {
    async fn post(&self, session: Option<&str>, body: &Value) -> reqwest::Response {
        let mut request = self
            .http
            .post(&self.url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2025-11-25")
            .body(body.to_string());
        if let Some(session) = session {
            request = request.header("mcp-session-id", session);
        }
        tokio::time::timeout(WAIT, request.send())
            .await
            .expect("in time")
            .unwrap()
    }

    /// The one message of a POST's answer (an event stream or JSON).
    async fn rpc(&self, session: &str, body: &Value) -> Value {
        let response = self.post(Some(session), body).await;
        assert_eq!(response.status(), 200);
        if response.headers()["content-type"] == "application/json" {
            return response.json().await.unwrap();
        }
        let mut events = Events {
            response,
            buffer: Vec::new(),
        };
        events.next().await.expect("an answer")
    }

    /// Waits until the server's `nth` listen (from 1) is open, with the resources `uris`.
    async fn until_listening(&self, nth: usize, uris: &[&str]) {
        let mut listening = self.watched.listening.subscribe();
        tokio::time::timeout(
            WAIT,
            listening.wait_for(|open| open.get(nth - 1).is_some_and(|open| open == uris)),
        )
        .await
        .expect("the listen opens in time")
        .unwrap();
    }
}

#[tokio::test]
async fn list_changes_and_resource_updates_reach_the_get_stream_from_rmcps_listen() {
    let server = serve().await;
    let initialize = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "hand-written", "version": "1"}}});
    let response = server.post(None, &initialize).await;
    let session = response.headers()["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_owned();
    let answer: Value = response.json().await.unwrap();
    // What the bridge relays is advertised.
    let capabilities = &answer["result"]["capabilities"];
    assert_eq!(capabilities["tools"]["listChanged"], true, "{answer}");
    assert_eq!(capabilities["resources"]["subscribe"], true, "{answer}");

    let get = server
        .http
        .get(&server.url)
        .header("mcp-session-id", &session)
        .header("mcp-protocol-version", "2025-11-25")
        .header("accept", "text/event-stream")
        .send()
        .await
        .unwrap();
    assert_eq!(get.status(), 200);
    let mut stream = Events {
        response: get,
        buffer: Vec::new(),
    };
    server.until_listening(1, &[]).await;
    server.watched.changes.send(Change::Tools).unwrap();
    let changed = stream.next().await.unwrap();
    assert_eq!(
        changed["method"], "notifications/tools/list_changed",
        "{changed}"
    );
    // The subscription's id (2026 `_meta`) is not passed on.
    assert_eq!(changed.pointer("/params/_meta"), None, "{changed}");

    let uri = "file:///watched.txt";
    let subscribe = json!({"jsonrpc": "2.0", "id": 1, "method": "resources/subscribe",
        "params": {"uri": uri}});
    assert_eq!(server.rpc(&session, &subscribe).await["result"], json!({}));
    server.until_listening(2, &[uri]).await;
    // An update of another resource is not the client's; this one is.
    let other = Change::Resource("file:///other.txt".to_owned());
    server.watched.changes.send(other).unwrap();
    server
        .watched
        .changes
        .send(Change::Resource(uri.to_owned()))
        .unwrap();
    assert_eq!(
        stream.next().await.unwrap(),
        json!({"jsonrpc": "2.0", "method": "notifications/resources/updated",
            "params": {"uri": uri}})
    );

    let unsubscribe = json!({"jsonrpc": "2.0", "id": 2, "method": "resources/unsubscribe",
        "params": {"uri": uri}});
    assert_eq!(
        server.rpc(&session, &unsubscribe).await["result"],
        json!({})
    );
    // Reopened without the resource: its update no longer comes, the list change does.
    server.until_listening(3, &[]).await;
    server
        .watched
        .changes
        .send(Change::Resource(uri.to_owned()))
        .unwrap();
    server.watched.changes.send(Change::Tools).unwrap();
    assert_eq!(
        stream.next().await.unwrap()["method"],
        "notifications/tools/list_changed"
    );
}

//! A 2025-era client's view of a call's event stream through the legacy bridge: the messages on
//! it, one at a time. Used by `bridge` and `bridge_redis`.

use std::time::Duration;

use serde_json::Value;

/// The bound on every wait in these tests (never a timing assertion: only how long to wait for
/// what must happen).
pub const WAIT: Duration = Duration::from_secs(10);

/// The event stream of one POST.
pub struct Events {
    pub response: reqwest::Response,
    pub buffer: Vec<u8>,
}

impl Events {
    /// The next message on the stream; `None` when it ends.
    pub async fn next(&mut self) -> Option<Value> {
        loop {
            if let Some(end) = self.buffer.windows(2).position(|w| w == b"\n\n") {
                let event: Vec<u8> = self.buffer.drain(..end + 2).collect();
                let event = String::from_utf8(event).unwrap();
                let data: Vec<&str> = event
                    .lines()
                    .filter_map(|line| line.strip_prefix("data: "))
                    .collect();
                // A comment, or the priming event (an id, a `retry` and empty data): no message.
                if data.iter().all(|line| line.trim().is_empty()) {
                    continue;
                }
                return Some(serde_json::from_str(&data.join("\n")).unwrap());
            }
            let chunk = tokio::time::timeout(WAIT, self.response.chunk())
                .await
                .expect("the stream moves in time")
                .unwrap();
            self.buffer.extend_from_slice(&chunk?);
        }
    }

    pub async fn request(&mut self, method: &str) -> Value {
        let message = self.next().await.expect("a request on the stream");
        assert_eq!(message["method"], method, "{message}");
        assert!(message["id"].as_str().unwrap().starts_with("leg-"));
        message
    }
}

pub fn result_text(message: &Value) -> &str {
    message["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
}

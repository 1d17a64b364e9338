"""A 2025-era MCP server on stdio, written with the standard library only, that shows the
adapter's side of the session: what it was sent, and what comes back of its own messages.

tests/services/upstream.rs fronts it with the upstream adapter. Its tools:

- `seen`: the methods (and `logging/setLevel` levels) it was sent so far, as JSON text;
- `progress`: two `notifications/progress` under the call's progress token and one
  `notifications/message`, then `done`;
- `ask`: an `elicitation/create` and a `roots/list` at once; the text says how each was answered.

Its `serverInfo.version` is its process id, so a test sees a restart. With `PROBE_IGNORE_PING=1`
it answers no `ping`: a server that hangs.
"""

import json
import os
import sys

seen = []
next_id = 0


def send(message):
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def read():
    line = sys.stdin.readline()
    if not line:
        sys.exit(0)
    return json.loads(line)


def text(value):
    return {"content": [{"type": "text", "text": value}], "isError": False}


def ask(requests):
    """Sends the requests, then serves other messages until each is answered."""
    global next_id
    waiting = {}
    for method, params in requests:
        next_id += 1
        waiting[f"probe-{next_id}"] = method
        send({"jsonrpc": "2.0", "id": f"probe-{next_id}", "method": method, "params": params})
    answers = {}
    while len(answers) < len(waiting):
        message = read()
        if "method" not in message and message.get("id") in waiting:
            method = waiting[message["id"]]
            if "error" in message:
                answers[method] = f"error {message['error'].get('code')}"
            else:
                answers[method] = message.get("result", {}).get("action", "answered")
        else:
            serve(message)
    return answers


def call(name, params):
    if name == "seen":
        return text(json.dumps(seen))
    if name == "progress":
        token = params.get("_meta", {}).get("progressToken")
        for step in (1, 2):
            if token is not None:
                send({"jsonrpc": "2.0", "method": "notifications/progress",
                      "params": {"progressToken": token, "progress": step, "total": 2}})
        send({"jsonrpc": "2.0", "method": "notifications/message",
              "params": {"level": "info", "data": "working"}})
        return text("done")
    if name == "ask":
        schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
        answers = ask([
            ("elicitation/create", {"message": "OK?", "requestedSchema": schema}),
            ("roots/list", {}),
        ])
        return text(json.dumps(answers, sort_keys=True))
    return None


def serve(message):
    method = message.get("method")
    if method is None:
        return
    seen.append(method if method != "logging/setLevel" else f"{method} {message['params']['level']}")
    if "id" not in message:
        return
    result = None
    if method == "initialize":
        result = {"protocolVersion": "2025-11-25",
                  "capabilities": {"tools": {}, "logging": {}},
                  "serverInfo": {"name": "probe", "version": str(os.getpid())}}
    elif method == "ping":
        if os.environ.get("PROBE_IGNORE_PING") == "1":
            return
        result = {}
    elif method == "logging/setLevel":
        result = {}
    elif method == "tools/list":
        result = {"tools": [{"name": n, "inputSchema": {"type": "object"}}
                            for n in ("seen", "progress", "ask")]}
    elif method == "tools/call":
        result = call(message["params"]["name"], message["params"])
    if result is None:
        send({"jsonrpc": "2.0", "id": message["id"],
              "error": {"code": -32601, "message": f"no {method}"}})
    else:
        send({"jsonrpc": "2.0", "id": message["id"], "result": result})


if __name__ == "__main__":
    while True:
        serve(read())

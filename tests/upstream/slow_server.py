"""A 2025-era MCP server on stdio, of the standard library only, that answers its calls
concurrently and says how many it had in flight at once.

tests/services/upstream_concurrency.rs and upstream_pool.rs front it with the upstream adapter
(the pool runs several of it). Each `tools/call` runs in a thread of its own, so the server takes
any number at once, as the reference servers do. Its tools:

- `sleep` (`seconds`, default 1; `pidfile`, a path; `together`, a directory): writes its process id to `pidfile` once the
  call runs (so that a test knows the call reached the server, and which process holds it),
  sleeps, then answers `{"max_in_flight": N, "pid": P}` as text: the most `sleep` calls this
  process has had running at the same time so far (1 when they came one by one), and its id;
  with `together`, also `"together": N`: how many `sleep` calls of any process sharing that
  directory were running when this one ended (each marks itself there while it runs);
- `ask` (`questions`, default 1; `tag`, a text; `apart`, a boolean): sends that many
  `elicitation/create` in one write (with `apart`, one write and flush each, as a server that
  asks with `asyncio.gather` or `Promise.all` does), and answers how each was answered (`error -32601`, or the answer's `action`),
  space-separated; with a `tag`, each question's message carries it (`OK 1? (Ada)`) and the
  answer is JSON text: `{"tag", "pid", "said"}`, where an accepted answer says `accept by X`
  for the `by` of the answer's content;
- `initialize`: the `params` of the `initialize` it was sent, as JSON text.
"""

import json
import os
import sys
import threading
import time

lock = threading.Lock()
in_flight = 0
max_in_flight = 0
initialize_params = None
next_id = 0
# The server's own requests waiting for their answers: id -> [event, answer].
waiting = {}


def send(message):
    line = json.dumps(message) + "\n"
    with lock:
        sys.stdout.write(line)
        sys.stdout.flush()


def text(value):
    return {"content": [{"type": "text", "text": value}], "isError": False}


def sleep(seconds, pidfile, together):
    global in_flight, max_in_flight
    with lock:
        in_flight += 1
        max_in_flight = max(max_in_flight, in_flight)
    mark = None
    if together:
        mark = os.path.join(together, f"{os.getpid()}.{threading.get_ident()}")
        open(mark, "w").close()
    if pidfile:
        # Written whole, then renamed: a reader never sees half of it.
        with open(pidfile + ".tmp", "w") as out:
            out.write(str(os.getpid()))
        os.replace(pidfile + ".tmp", pidfile)
    time.sleep(seconds)
    said = {"pid": os.getpid()}
    if mark:
        said["together"] = len(os.listdir(together))
        os.remove(mark)
    with lock:
        in_flight -= 1
        said["max_in_flight"] = max_in_flight
    return text(json.dumps(said))


def ask(n, tag=None, apart=False):
    """Sends `n` elicitation/create requests in one write (`apart`: a write each); the answers'
    actions, space-separated in the order asked (`error -32601` for a refusal)."""
    global next_id
    asked = []
    lines = ""
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}, "by": {"type": "string"}},
              "required": ["ok"]}
    with lock:
        for i in range(n):
            next_id += 1
            request_id = f"slow-{next_id}"
            event = threading.Event()
            waiting[request_id] = [event, None]
            asked.append((request_id, event))
            lines += json.dumps({"jsonrpc": "2.0", "id": request_id, "method": "elicitation/create",
                                 "params": {"message": f"OK {i + 1}?" + (f" ({tag})" if tag else ""),
                                            "requestedSchema": schema}}) + "\n"
            if apart:
                sys.stdout.write(lines)
                sys.stdout.flush()
                lines = ""
        sys.stdout.write(lines)
        sys.stdout.flush()
    said = []
    for request_id, event in asked:
        if not event.wait(30):
            said.append("no answer")
            continue
        with lock:
            answer = waiting.pop(request_id)[1]
        if "error" in answer:
            said.append(f"error {answer['error'].get('code')}")
        else:
            result = answer.get("result", {})
            action = result.get("action", "answered")
            by = (result.get("content") or {}).get("by")
            said.append(f"{action} by {by}" if by else action)
    if tag:
        return text(json.dumps({"tag": tag, "pid": os.getpid(), "said": said}))
    return text(" ".join(said))


def call(message):
    params = message.get("params", {})
    name = params.get("name")
    arguments = params.get("arguments") or {}
    if name == "sleep":
        result = sleep(float(arguments.get("seconds", 1)), arguments.get("pidfile"),
                       arguments.get("together"))
    elif name == "ask":
        result = ask(int(arguments.get("questions", 1)), arguments.get("tag"),
                     bool(arguments.get("apart")))
    elif name == "initialize":
        result = text(json.dumps(initialize_params))
    else:
        send({"jsonrpc": "2.0", "id": message["id"],
              "error": {"code": -32602, "message": f"no tool {name}"}})
        return
    send({"jsonrpc": "2.0", "id": message["id"], "result": result})


def serve(message):
    global initialize_params
    method = message.get("method")
    if method is None:
        # An answer to one of the server's own requests.
        with lock:
            entry = waiting.get(message.get("id"))
            if entry is not None:
                entry[1] = message
                entry[0].set()
        return
    if "id" not in message:
        return
    if method == "initialize":
        initialize_params = message.get("params")
        result = {"protocolVersion": "2025-11-25", "capabilities": {"tools": {}},
                  "serverInfo": {"name": "slow", "version": "1"}}
    elif method == "ping":
        result = {}
    elif method == "tools/list":
        result = {"tools": [{"name": n, "inputSchema": {"type": "object"}}
                            for n in ("sleep", "ask", "initialize")]}
    elif method == "tools/call":
        threading.Thread(target=call, args=(message,), daemon=True).start()
        return
    else:
        send({"jsonrpc": "2.0", "id": message["id"],
              "error": {"code": -32601, "message": f"no {method}"}})
        return
    send({"jsonrpc": "2.0", "id": message["id"], "result": result})


if __name__ == "__main__":
    for line in sys.stdin:
        if line.strip():
            serve(json.loads(line))

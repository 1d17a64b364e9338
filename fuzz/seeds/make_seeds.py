#!/usr/bin/env python3
"""Writes the fuzz seeds under fuzz/seeds/<target>/ (committed; rerun after a format change).

Tokens are minted here exactly as the layer mints them (`v1.<kid>.<b64url claims>.<b64url
HMAC-SHA256(label || "v1.<kid>.<claims>")>`, claims serialized as serde_json does for the Claims
struct) with the fuzz targets' keys (k1 = [7; 32], k2 = [8; 32]) and an expiry in 2100, so that
retries in the seeds stay valid and the fuzzer starts from inside the verified path.

Inputs the fuzzer found that once failed a target are kept beside these as regression seeds
(`sse/unterminated-response-after-junk`, `token/claims-question-with-whitespace`); this script
leaves them alone.
"""

import base64
import hashlib
import hmac
import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))
KEYS = {"k1": bytes([7] * 32), "k2": bytes([8] * 32)}
LABEL = b"tower-elicitation/request-state/v1\0"
NOW = 1_800_000_000
FOREVER = 4_102_444_800  # 2100-01-01
LONG_AGO = 1_700_000_000  # 2023-11-14: inbound seeds are checked against the real clock


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def compact(value) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, sort_keys=False)


def canonical(value) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, sort_keys=True)


def args_digest(arguments) -> str:
    if arguments is None:
        arguments = {}
    return b64(hashlib.sha256(canonical(arguments).encode()).digest()[:16])


def sort_deep(value):
    """serde_json's Map is a BTreeMap: nested objects serialize with sorted keys."""
    if isinstance(value, dict):
        return {k: sort_deep(value[k]) for k in sorted(value)}
    if isinstance(value, list):
        return [sort_deep(v) for v in value]
    return value


def claims(method, target, arguments, *, iat, exp, r=1, s=None, q=None, k=None, g=None, aud=None):
    out = {"v": 1, "iat": iat, "exp": exp, "m": method, "t": target, "a": args_digest(arguments)}
    if aud is not None:
        out["aud"] = aud
    out["r"] = r
    if s is not None:
        out["s"] = s
    for name, value in (("q", q), ("k", k), ("g", g)):
        if value:
            out[name] = sort_deep(value)
    return out


def seal(claims_obj, kid="k1") -> str:
    signed = f"v1.{kid}.{b64(compact(claims_obj).encode())}"
    tag = hmac.new(KEYS[kid], LABEL + signed.encode(), hashlib.sha256).digest()
    return f"{signed}.{b64(tag)}"


APPROVAL = {
    "method": "elicitation/create",
    "params": {
        "mode": "form",
        "message": "Deploy?",
        "requestedSchema": {
            "type": "object",
            "properties": {
                "approve": {"type": "boolean"},
                "note": {"type": "string", "maxLength": 200},
            },
            "required": ["approve"],
        },
    },
}
CONFIRM = {
    "method": "elicitation/create",
    "params": {
        "mode": "form",
        "message": "The request needs your approval.",
        "requestedSchema": {
            "type": "object",
            "properties": {"confirm": {"type": "string"}},
            "required": ["confirm"],
        },
    },
}
META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"form": {}, "url": {}}},
}


def write(target: str, name: str, data: bytes) -> None:
    folder = os.path.join(HERE, target)
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, name), "wb") as f:
        f.write(data)


def call(id_, name, arguments, **extra):
    params = {"name": name, "arguments": arguments, **extra, "_meta": META}
    return compact({"jsonrpc": "2.0", "id": id_, "method": "tools/call", "params": params}).encode()


def token_seeds() -> None:
    staging = {"environment": "staging"}
    q = {"approval": APPROVAL}
    full = claims("tools/call", "deploy", staging, iat=NOW - 10, exp=NOW + 600, s="inner-1", q=q)
    write("token", "valid-k1", seal(full).encode())
    write("token", "valid-k2", seal(full, "k2").encode())
    kept = claims("tools/call", "deploy", staging, iat=NOW - 10, exp=NOW + 600, r=2, q=q,
                  k={"approval": {"action": "accept", "content": {"approve": True}}},
                  g={"gate": {"action": "accept"}})
    write("token", "valid-kept-answers", seal(kept).encode())
    write("token", "claims-full", compact(kept).encode())
    write("token", "claims-minimal", b'{"v":1,"iat":0,"exp":1,"m":"","t":"","a":"","r":0}')
    write("token", "claims-expired", compact(dict(full, exp=full["iat"] - 61)).encode())


def sse_seeds() -> None:
    progress = '{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":1,"progress":1}}'
    ask = compact({"jsonrpc": "2.0", "id": 1, "result": {
        "resultType": "input_required", "requestState": "inner-1", "inputRequests": {"approval": APPROVAL}}})
    done = '{"jsonrpc":"2.0","id":1,"result":{"resultType":"complete","content":[]}}'
    stream = f"event: message\nid: 1\ndata: {progress}\n\nevent: message\nid: 2\ndata: {ask}\n\n"
    write("sse", "progress-then-ask", b"\x00" + stream.encode())
    write("sse", "progress-then-ask-cut", b"\x03\x05\x40\x00" + stream.encode())
    write("sse", "ask-crlf", b"\x00" + stream.replace("\n", "\r\n").encode())
    write("sse", "ask-no-capabilities", b"\x80" + stream.encode())
    write("sse", "ask-twice", b"\x00" + f"data: {ask}\n\ndata: {ask}\n\n".encode())
    write("sse", "complete", b"\x00" + f": ping\n\nretry: 10\ndata: {done}\n\n".encode())
    write("sse", "ends-mid-event", b"\x00" + f"data: {progress}\n\ndata: {ask[:40]}".encode())
    split = ask.replace(',"inputRequests"', '\ndata: ,"inputRequests"')
    write("sse", "multi-line-data", b"\x00" + f"data: {split}\n\n".encode())


def inbound_seeds() -> None:
    head = b"mcp-protocol-version: 2026-07-28\nmcp-method: tools/call\nmcp-name: deploy\n\n"
    staging = {"environment": "staging"}
    state = seal(claims("tools/call", "deploy", staging, iat=LONG_AGO, exp=FOREVER, s="inner-1",
                        q={"approval": APPROVAL}))
    approve = {"approval": {"action": "accept", "content": {"approve": True, "note": "ok"}}}
    wrong = {"approval": {"action": "accept", "content": {"approve": "yes", "extra": 1}}}
    write("inbound", "first-round", b"\x00" + head + call(1, "deploy", staging))
    write("inbound", "first-round-sse", b"\x01" + head + call(1, "deploy", staging))
    write("inbound", "retry-valid", b"\x00" + head + call(2, "deploy", staging, requestState=state,
                                                          inputResponses=approve))
    write("inbound", "retry-valid-sse-chunked", b"\x03" + head + call(
        2, "deploy", staging, requestState=state, inputResponses=approve))
    write("inbound", "retry-invalid", b"\x00" + head + call(3, "deploy", staging, requestState=state,
                                                            inputResponses=wrong))
    write("inbound", "retry-declined", b"\x00" + call(4, "deploy", staging, requestState=state,
                                                      inputResponses={"approval": {"action": "decline"}}))
    write("inbound", "probe", b"\x00" + head + call(5, "deploy", staging, inputResponses=approve))
    gate = seal(claims("tools/call", "delete_branch", {"name": "dev"}, iat=LONG_AGO, exp=FOREVER,
                       q={"confirm-delete": CONFIRM}))
    write("inbound", "gate-first-round", b"\x00" + call(6, "delete_branch", {"name": "dev"}))
    write("inbound", "gate-retry", b"\x00" + call(7, "delete_branch", {"name": "dev"}, requestState=gate,
                                                  inputResponses={"confirm-delete": {
                                                      "action": "accept", "content": {"confirm": "dev"}}}))
    legacy = compact({"jsonrpc": "2.0", "id": 8, "method": "tools/call", "params": {
        "name": "deploy", "arguments": staging, "requestState": state, "inputResponses": approve}}).encode()
    write("inbound", "legacy-with-state", b"\x00mcp-protocol-version: 2025-11-25\n\n" + legacy)
    write("inbound", "tools-list", b"\x00" + b'{"jsonrpc":"2.0","id":9,"method":"tools/list","params":{}}')
    write("inbound", "batch", b"\x00" + b"[" + call(10, "deploy", staging) +
          b',{"jsonrpc":"2.0","method":"notifications/initialized"}]')
    write("inbound", "prompt-and-resource", b"\x00" + compact({"jsonrpc": "2.0", "id": 11, "method": "resources/read",
                                                                "params": {"uri": "file:///a", "_meta": META}}).encode())
    write("inbound", "authorized", b"\x00authorization: Bearer alice\n\n" + call(
        12, "deploy", staging, requestState=state, inputResponses=approve))


if __name__ == "__main__":
    token_seeds()
    sse_seeds()
    inbound_seeds()

// The TypeScript SDK 1.x client (`@modelcontextprotocol/sdk`, pinned by
// scripts/upstream-servers.sh; it speaks MCP 2025-11-25) against `elicitation-proxy` over
// Streamable HTTP, answered by the proxy's bridge: the SDK's own `Client`,
// `StreamableHTTPClientTransport` and an `elicitation/create` handler. Run by
// scripts/interop-proxy.sh, which starts the proxy (the shipped examples/proxy/filesystem.toml,
// its directory and port changed):
//
//   PROXY_URL  the proxy's /mcp (its /metrics is next to it)
//   DATA       the directory server-filesystem serves
//   SDK        the SDK's package directory
//
// Checks: a read is not asked; a write_file is asked with the gate's message and form, refused
// on decline, written on approval; the client's answer to the approval, sent again on its
// session, is dropped (no write, and the next write is asked afresh). Prints one line per check
// and `ts-client: N passed, N failed`; exits non-zero when one failed.

import { existsSync, readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

const env = (name) => {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set`);
  return value;
};
const url = env('PROXY_URL');
const data = env('DATA');
const sdk = env('SDK');
const load = (path) => import(pathToFileURL(join(sdk, 'dist/esm', path)).href);
const { Client } = await load('client/index.js');
const { StreamableHTTPClientTransport } = await load('client/streamableHttp.js');
const { ElicitRequestSchema } = await load('types.js');
const version = JSON.parse(readFileSync(join(sdk, 'package.json'), 'utf8')).version;
// The gate's refusal, then the call's decision id (the one its question's _meta carries).
const REFUSAL = /^The request was not approved\. \(decision d-[0-9a-f]{16}\)$/;

class Failed extends Error {}
const expect = (ok, what) => {
  if (!ok) throw new Failed(what);
};

async function metric(prefix) {
  const text = await (await fetch(url.replace(/\/mcp$/, '/metrics'))).text();
  const line = text.split('\n').find((l) => l.startsWith(`${prefix} `));
  return line === undefined ? 0 : Number(line.split(' ').pop());
}
const ASKED = 'elicitation_proxy_decisions_total{outcome="ask"}';
const ACCEPTED = 'elicitation_proxy_decisions_total{outcome="gates_accepted"}';

// What the person answers, in order; every question asked; the answers the client POSTed.
const answers = [];
const asked = [];
const posted = [];
const recording = async (input, init) => {
  if (init?.method === 'POST' && typeof init.body === 'string') {
    const message = JSON.parse(init.body);
    if (message.method === undefined && message.id !== undefined) {
      posted.push({ body: init.body, headers: Object.fromEntries(new Headers(init.headers).entries()) });
    }
  }
  return fetch(input, init);
};

const client = new Client(
  { name: 'interop-proxy-ts', version: '0' },
  { capabilities: { elicitation: { form: {} } } },
);
client.setRequestHandler(ElicitRequestSchema, async (request) => {
  asked.push(request.params);
  const answer = answers.shift();
  if (answer === undefined) throw new Error(`unexpected question: ${request.params.message}`);
  return answer;
});
const transport = new StreamableHTTPClientTransport(new URL(url), { fetch: recording });
await client.connect(transport);

const text = (result) => result.content.filter((c) => c.type === 'text').map((c) => c.text).join('\n');

async function write(path, content, answer) {
  answers.length = 0;
  asked.length = 0;
  answers.push(answer);
  const result = await client.callTool({ name: 'write_file', arguments: { path, content } });
  expect(asked.length === 1, `asked ${asked.length} times`);
  expect(
    asked[0].message.startsWith(`Write to "${path}"?\n\nArguments:\n`),
    `asked ${JSON.stringify(asked[0].message)}`,
  );
  const approve = asked[0].requestedSchema?.properties?.approve;
  expect(approve?.type === 'boolean', `approve is ${JSON.stringify(approve)}`);
  return result;
}

const target = join(data, 'ts.txt');
const checks = {
  async 'a read is not asked'() {
    const before = await metric(ASKED);
    asked.length = 0;
    const result = await client.callTool({ name: 'read_text_file', arguments: { path: join(data, 'hello.txt') } });
    expect(!result.isError, text(result));
    expect(text(result) === readFileSync(join(data, 'hello.txt'), 'utf8'), `read ${JSON.stringify(text(result))}`);
    expect(asked.length === 0, `asked ${asked.length} times`);
    expect((await metric(ASKED)) === before, 'the proxy counted a question');
  },

  async 'write_file declined: refused, not written'() {
    const result = await write(target, 'no\n', { action: 'decline' });
    expect(result.isError === true, `not an error: ${text(result)}`);
    expect(REFUSAL.test(text(result)), `refused with ${JSON.stringify(text(result))}`);
    expect(!existsSync(target), `${target} was written`);
  },

  async 'write_file approved: written'() {
    posted.length = 0;
    const result = await write(target, 'yes\n', { action: 'accept', content: { approve: true, reason: 'ts' } });
    expect(!result.isError, text(result));
    expect(text(result).includes('Successfully wrote'), text(result));
    expect(readFileSync(target, 'utf8') === 'yes\n', 'the file does not hold what was written');
  },

  async 'the approval sent again is dropped: no write, the next write asked afresh'() {
    expect(posted.length === 1, `the client posted ${posted.length} answers`);
    rmSync(target);
    const accepted = await metric(ACCEPTED);
    const replay = await fetch(url, { method: 'POST', headers: posted[0].headers, body: posted[0].body });
    expect(replay.status === 202, `the replay was answered ${replay.status}`);
    await replay.body?.cancel();
    const result = await write(target, 'again\n', { action: 'decline' });
    expect(REFUSAL.test(text(result)), `refused with ${JSON.stringify(text(result))}`);
    expect(!existsSync(target), `${target} was written after the replay`);
    expect((await metric(ACCEPTED)) === accepted, 'the proxy accepted a gate after the replay');
  },
};

let passed = 0;
let failed = 0;
for (const [name, check] of Object.entries(checks)) {
  try {
    await check();
    passed += 1;
    console.log(`ok   [ts-sdk ${version}] ${name}`);
  } catch (error) {
    failed += 1;
    console.log(`FAIL [ts-sdk ${version}] ${name}: ${error instanceof Failed ? error.message : error}`);
  }
}
await client.close();
console.log(`ts-client: ${passed} passed, ${failed} failed`);
process.exit(failed === 0 ? 0 : 1);

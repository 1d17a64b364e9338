// Drives the approval page of `elicitation-proxy` (`approvers = "url"`) in headless Chromium
// (playwright-core), against the proxy serving examples/proxy/approvals.toml in front of
// server-filesystem. The caller (alice, a bearer token of the demo issuer) is first the 2026
// Inspector (a write asked, its URL question declined, the refusal's decision id shown), then a
// 2026 JSON-RPC client over HTTP; the approver (bob) is a person in the browser: the link from alice's URL
// question, the sign-in form, the pending call shown whole, Approve. Then alice's retry writes
// the file. A second call is denied on the page, and its retry is refused naming bob. Run by
// scripts/ui-check-proxy.sh, which installs everything and starts the proxy; the environment
// says where things are:
//
//   UI_CHECK_INSPECTOR  the Inspector's page (2026 mode, its bearer token alice's), with its API token
//   UI_CHECK_PROXY      the proxy's MCP endpoint
//   UI_CHECK_DATA       the directory the filesystem server serves
//   UI_CHECK_RESULTS    where screenshots go
//   UI_CHECK_CHROMIUM   the browser (default /usr/bin/chromium)
//   UI_CHECK_MODULES    the node_modules that hold playwright-core
//
// No assertion is about time. Prints one line per flow, then `ui-check-approvals: N passed, N
// failed`; exits non-zero when a flow failed.

import { execFileSync } from 'node:child_process';
import { createRequire } from 'node:module';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const env = (name, fallback) => {
  const value = process.env[name] ?? fallback;
  if (value === undefined) throw new Error(`${name} is not set`);
  return value;
};
const proxy = env('UI_CHECK_PROXY');
const data = env('UI_CHECK_DATA');
const results = env('UI_CHECK_RESULTS');
const require = createRequire(join(env('UI_CHECK_MODULES'), '/'));
const { chromium } = require('playwright-core');
const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const tokenFor = (name) =>
  execFileSync(process.execPath, [join(root, 'scripts/demo-token.mjs'), name, '600', proxy]).toString().trim();
const alice = tokenFor('alice');
const bob = tokenFor('bob');

const watchdog = setTimeout(() => {
  console.error('ui-check-approvals.mjs: still running after 5 minutes: giving up');
  process.exit(2);
}, 5 * 60_000);

class Failed extends Error {}
const expect = (ok, what) => {
  if (!ok) throw new Failed(what);
};

/** alice's `tools/call` of write_file (2026-07-28, declaring form and URL elicitation). */
async function call(path, content, retry = {}) {
  const params = {
    name: 'write_file',
    arguments: { path, content },
    _meta: {
      'io.modelcontextprotocol/protocolVersion': '2026-07-28',
      'io.modelcontextprotocol/clientCapabilities': { elicitation: { form: {}, url: {} } },
      'io.modelcontextprotocol/clientInfo': { name: 'ui-check-approvals', version: '0' },
    },
    ...retry,
  };
  const response = await fetch(proxy, {
    method: 'POST',
    headers: {
      authorization: `Bearer ${alice}`,
      'content-type': 'application/json',
      accept: 'application/json, text/event-stream',
      'mcp-protocol-version': '2026-07-28',
      'mcp-method': 'tools/call',
      'mcp-name': 'write_file',
    },
    body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params }),
  });
  expect(response.ok, `the proxy answered HTTP ${response.status}`);
  const text = await response.text();
  // JSON, or an event stream (the call's notifications, then its answer: the event with an id).
  const messages = (response.headers.get('content-type') ?? '').startsWith('text/event-stream')
    ? text.split('\n').filter((line) => line.startsWith('data:')).map((line) => line.slice(5).trim())
        .filter((data) => data !== '').map((data) => JSON.parse(data))
    : [JSON.parse(text)];
  const answer = messages.find((message) => message.id !== undefined);
  expect(answer !== undefined, `no answer in ${text}`);
  return answer.result;
}

/** alice asks to write `path`: the URL question, its link and its state. */
async function ask(path, content) {
  const asked = await call(path, content);
  const question = asked?.inputRequests?.approval?.params;
  expect(asked?.resultType === 'input_required' && question?.mode === 'url', `not a URL question: ${JSON.stringify(asked)}`);
  return { link: question.url, state: asked.requestState, decision: question._meta['elicitation-proxy/decision'] };
}

/** alice's retry, accepting the question. */
const retry = (path, content, state) =>
  call(path, content, { requestState: state, inputResponses: { approval: { action: 'accept' } } });

const profile = mkdtempSync(join(tmpdir(), 'ui-check-approvals-chromium-'));
const context = await chromium.launchPersistentContext(profile, {
  executablePath: env('UI_CHECK_CHROMIUM', '/usr/bin/chromium'),
  headless: true,
  viewport: { width: 1280, height: 860 },
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--no-first-run', '--disable-background-networking'],
});
context.setDefaultTimeout(60_000);
const page = context.pages()[0] ?? (await context.newPage());

const approved = join(data, 'approved.txt');
const denied = join(data, 'denied.txt');
const content = 'Written once bob approved it on the approval page.';

const flows = {
  async 'the Inspector, signed in as alice with a bearer token: asked a URL question (the link); cancelled; refused with the decision id'() {
    await page.goto(env('UI_CHECK_INSPECTOR'));
    await page.getByRole('switch', { name: /Connect or disconnect/ }).check({ force: true });
    await page.getByText('MCP 2026-07-28').waitFor();
    await page.getByText('Tools', { exact: true }).first().click();
    await page.getByRole('button', { name: /(^| )write_file$/ }).click();
    const path = join(data, 'inspector.txt');
    await page.getByRole('textbox', { name: 'path' }).fill(path);
    await page.getByRole('textbox', { name: 'content' }).fill('asked of alice in the Inspector');
    await page.getByRole('button', { name: 'Execute Tool' }).click();
    const dialog = page.getByRole('dialog').filter({ hasText: `Write to "${path}"?` });
    await dialog.waitFor();
    await dialog.getByText('Another person approves this call').waitFor();
    await page.screenshot({ path: join(results, 'approval-inspector.png'), animations: 'disabled' });
    // A URL question has no Decline in the Inspector: Cancel.
    await dialog.getByRole('button', { name: 'Cancel' }).click();
    await page.getByText(/The request was not approved\. \(decision d-[0-9a-f]{16}\)/).first().waitFor();
    expect(!existsSync(path), `${path} was written after a decline`);
    await page.screenshot({ path: join(results, 'approval-inspector-declined.png'), animations: 'disabled' });
  },

  async 'approved on the page by another person: the retry writes the file'() {
    const { link, state, decision } = await ask(approved, content);
    await page.goto(link);
    await page.getByRole('heading', { name: 'Sign in to review a call' }).waitFor();
    await page.getByLabel('Access token').fill(bob);
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.getByRole('heading', { name: 'Approve a call?' }).waitFor();
    await page.getByText('Signed in as bob').waitFor();
    await page.getByText(decision).waitFor();
    await page.getByText('alice', { exact: true }).waitFor();
    expect((await page.content()).includes('approved.txt'), 'the page does not show the arguments');
    await page.screenshot({ path: join(results, 'approval-page.png'), fullPage: true, animations: 'disabled' });
    expect(!existsSync(approved), 'written before anyone approved');
    await page.getByRole('button', { name: 'Approve' }).click();
    await page.getByText('Approved by bob').waitFor();
    const done = await retry(approved, content, state);
    expect(done?.isError !== true && done?.resultType !== 'input_required', `not run: ${JSON.stringify(done)}`);
    expect(existsSync(approved) && readFileSync(approved, 'utf8') === content, `${approved} does not hold what was approved`);
  },

  async 'denied on the page: the retry is refused, naming the approver'() {
    const { link, state } = await ask(denied, 'never');
    await page.goto(link);
    await page.getByRole('button', { name: 'Deny' }).click();
    await page.getByText('Denied by bob').waitFor();
    const refused = await retry(denied, 'never', state);
    const text = refused?.content?.[0]?.text ?? '';
    expect(refused?.isError === true && text.includes('"bob" denied this call'), `not refused: ${JSON.stringify(refused)}`);
    expect(!existsSync(denied), `${denied} was written after a denial`);
  },
};

let passed = 0;
let failed = 0;
try {
  for (const [name, flow] of Object.entries(flows)) {
    try {
      await flow();
      passed += 1;
      console.log(`ok   [approvals] ${name}`);
    } catch (error) {
      failed += 1;
      const why = error instanceof Failed ? error.message : String(error).split('\n')[0];
      console.log(`FAIL [approvals] ${name}: ${why}`);
      await page.screenshot({ path: join(results, `failed-${passed + failed}.png`) }).catch(() => {});
    }
  }
} finally {
  await context.close();
  rmSync(profile, { recursive: true, force: true });
  clearTimeout(watchdog);
}
console.log(`ui-check-approvals: ${passed} passed, ${failed} failed`);
process.exit(failed === 0 ? 0 : 1);

// Drives the MCP Inspector's web UI (headless Chromium, playwright-core) against
// `elicitation-proxy` in front of server-filesystem (examples/proxy/filesystem.toml): a read, a
// declined write, an approved write; it checks what a person sees, the proxy's counters and the
// files on disk. Run by scripts/ui-check-proxy.sh, which installs everything and starts the proxy
// and the Inspector; the environment says where they are:
//
//   UI_CHECK_INSPECTOR  the Inspector's page, with its API token (`…/?MCP_INSPECTOR_API_TOKEN=…`)
//   UI_CHECK_ERA        the Inspector's protocol era: `modern` (MCP 2026-07-28, the default) or
//                       `legacy` (MCP 2025-11-25, through the proxy's bridge)
//   UI_CHECK_PROXY      the proxy's MCP endpoint (its /metrics is next to it)
//   UI_CHECK_DATA       the directory the filesystem server serves
//   UI_CHECK_RESULTS    where screenshots go
//   UI_CHECK_CHROMIUM   the browser (default /usr/bin/chromium)
//   UI_CHECK_MODULES    the node_modules that hold playwright-core
//
// The browser set-up and the small helpers are scripts/ui-check.mjs's (kept apart so that each
// script reads alone). No assertion is about time: every step waits for what it needs to see.
// Prints one line per flow, then `ui-check-proxy: N passed, N failed`; exits non-zero when a flow
// failed.

import { createRequire } from 'node:module';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const env = (name, fallback) => {
  const value = process.env[name] ?? fallback;
  if (value === undefined) throw new Error(`${name} is not set`);
  return value;
};
const inspector = env('UI_CHECK_INSPECTOR');
const era = env('UI_CHECK_ERA', 'modern');
const PROTOCOL = { modern: 'MCP 2026-07-28', legacy: 'MCP 2025-11-25' }[era];
if (PROTOCOL === undefined) throw new Error(`UI_CHECK_ERA: no such era: ${era}`);
const metricsUrl = env('UI_CHECK_PROXY').replace(/\/mcp$/, '/metrics');
const data = env('UI_CHECK_DATA');
const results = env('UI_CHECK_RESULTS');
const require = createRequire(join(env('UI_CHECK_MODULES'), '/'));
const { chromium } = require('playwright-core');

const STEP_MS = 60_000;
const RUN_MS = 6 * 60_000;
const watchdog = setTimeout(() => {
  console.error(`ui-check-proxy.mjs: still running after ${RUN_MS / 1000} s: giving up`);
  process.exit(2);
}, RUN_MS);

const profile = mkdtempSync(join(tmpdir(), 'ui-check-proxy-chromium-'));
const context = await chromium.launchPersistentContext(profile, {
  executablePath: env('UI_CHECK_CHROMIUM', '/usr/bin/chromium'),
  headless: true,
  viewport: { width: 1280, height: 860 },
  args: [
    '--headless',
    '--no-sandbox',
    '--disable-gpu',
    '--disable-quic',
    '--no-first-run',
    '--disable-background-networking',
    '--disable-component-update',
    '--disable-sync',
  ],
});
context.setDefaultTimeout(STEP_MS);
const page = context.pages()[0] ?? (await context.newPage());

class Failed extends Error {}
const expect = (ok, what) => {
  if (!ok) throw new Failed(what);
};
const shot = (locator, name) => locator.screenshot({ path: join(results, `${name}.png`), animations: 'disabled' });

/** How many questions the proxy has asked so far (its /metrics, outcome `ask`). */
async function asked() {
  const text = await (await fetch(metricsUrl)).text();
  const line = text.split('\n').find((l) => l.startsWith('elicitation_proxy_decisions_total{outcome="ask"}'));
  return line === undefined ? 0 : Number(line.split(' ').pop());
}

/** The elicitation dialog, once it shows `text`. */
async function dialogWith(text) {
  const dialog = page.getByRole('dialog').filter({ hasText: text });
  await dialog.waitFor();
  return dialog;
}

async function closed(text) {
  await page.getByRole('dialog').filter({ hasText: text }).waitFor({ state: 'detached' });
}

async function openTool(name) {
  const open = page.getByRole('button', { name: 'Close results' });
  if ((await open.count()) > 0) await open.click();
  // A tool with a title is a button named "Title name".
  await page.getByRole('button', { name: new RegExp(`(^| )${name}$`) }).click();
  await page.getByRole('button', { name: 'Execute Tool' }).waitFor();
}

/** The tool's result panel, once it shows `text`. */
async function resultWith(text) {
  const result = page.getByText(text).first();
  await result.waitFor();
  return result;
}

/** Opens write_file, types `path` and `content`, and runs it: the proxy's dialog comes up. */
async function write(path, content) {
  await openTool('write_file');
  await page.getByRole('textbox', { name: 'path' }).fill(path);
  await page.getByRole('textbox', { name: 'content' }).fill(content);
  await page.getByRole('button', { name: 'Execute Tool' }).click();
  return dialogWith(`Write to "${path}"?`);
}

const target = join(data, 'notes.txt');
const content = `Written through elicitation-proxy from the Inspector (${era}).`;

const flows = {
  async 'read_text_file: the text is shown, nothing is asked'() {
    const before = await asked();
    await openTool('read_text_file');
    await page.getByRole('textbox', { name: 'path' }).fill(join(data, 'hello.txt'));
    await page.getByRole('button', { name: 'Execute Tool' }).click();
    await resultWith('Reading me asks nothing');
    expect((await page.getByRole('dialog').count()) === 0, 'a dialog is open after a read');
    const after = await asked();
    expect(after === before, `the proxy asked ${after - before} question(s) for a read`);
  },

  async 'write_file: asked with the path; declined; refused, no file'() {
    const before = await asked();
    const dialog = await write(target, content);
    await dialog.getByText('Let the assistant write this file').waitFor();
    expect((await asked()) === before + 1, 'the proxy did not count the question');
    await shot(dialog, 'proxy-write-form');
    await dialog.getByRole('button', { name: 'Decline' }).click();
    await closed(`Write to "${target}"?`);
    // The refusal names the call's decision, as the proxy's decision log does.
    await resultWith(/The request was not approved\. \(decision d-[0-9a-f]{16}\)/);
    expect(!existsSync(target), `${target} was written after a decline`);
    await page.screenshot({ path: join(results, 'proxy-write-declined.png'), animations: 'disabled' });
  },

  async 'write_file: asked; approved; written, the file holds what was typed'() {
    const dialog = await write(target, content);
    await dialog.getByRole('checkbox', { name: 'Approve' }).check();
    await dialog.getByRole('textbox', { name: 'Reason' }).fill('checked by ui-check-proxy');
    await dialog.getByRole('button', { name: 'Submit' }).click();
    await closed(`Write to "${target}"?`);
    await resultWith('Successfully wrote');
    expect(existsSync(target), `${target} was not written after an approval`);
    const written = readFileSync(target, 'utf8');
    expect(written === content, `${target} holds ${JSON.stringify(written)}`);
    await page.screenshot({ path: join(results, 'proxy-write-done.png'), animations: 'disabled' });
  },
};

let passed = 0;
let failed = 0;
try {
  await page.goto(inspector);
  await page.getByRole('switch', { name: /Connect or disconnect/ }).check({ force: true });
  await page.getByText(PROTOCOL).waitFor();
  await page.getByText('Tools', { exact: true }).first().click();
  for (const [name, flow] of Object.entries(flows)) {
    try {
      await flow();
      passed += 1;
      console.log(`ok   [${era}] ${name}`);
    } catch (error) {
      failed += 1;
      const why = error instanceof Failed ? error.message : String(error).split('\n')[0];
      console.log(`FAIL [${era}] ${name}: ${why}`);
      await page.screenshot({ path: join(results, `failed-${passed + failed}.png`) }).catch(() => {});
      await page.keyboard.press('Escape').catch(() => {});
    }
  }
} catch (error) {
  failed += 1;
  console.log(`FAIL [${era}] connecting the Inspector: ${String(error).split('\n')[0]}`);
  await page.screenshot({ path: join(results, 'failed-connect.png') }).catch(() => {});
} finally {
  await context.close();
  rmSync(profile, { recursive: true, force: true });
  clearTimeout(watchdog);
}
console.log(`ui-check-proxy [${era}]: ${passed} passed, ${failed} failed`);
process.exit(failed === 0 ? 0 : 1);

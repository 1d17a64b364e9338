// Drives the MCP Inspector's web UI (headless Chromium, playwright-core) against the `deploy`
// example: a look at every tool's form, then four flows; it checks what a person sees. Run by scripts/ui-check.sh, which
// installs everything and starts both servers; the environment says where they are:
//
//   UI_CHECK_INSPECTOR  the Inspector's page, with its API token (`…/?MCP_INSPECTOR_API_TOKEN=…`)
//   UI_CHECK_ERA        the Inspector's protocol era: `modern` (MCP 2026-07-28, the default) or
//                       `legacy` (MCP 2025-11-25, through the example's bridge)
//   UI_CHECK_RESULTS    where screenshots go
//   UI_CHECK_CHROMIUM   the browser (default /usr/bin/chromium)
//   UI_CHECK_MODULES    the node_modules that hold playwright-core
//
// No assertion is about time: every step waits for what it needs to see (a generous limit per
// step, and one for the whole run, only stop a run that hangs). Prints one line per check, then
// `ui-check: N passed, N failed`, and exits non-zero when a flow failed.

import { createRequire } from 'node:module';
import { mkdtempSync, rmSync } from 'node:fs';
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
const results = env('UI_CHECK_RESULTS');
const require = createRequire(join(env('UI_CHECK_MODULES'), '/'));
const { chromium } = require('playwright-core');

const STEP_MS = 60_000;
const RUN_MS = 8 * 60_000;
const watchdog = setTimeout(() => {
  console.error(`ui-check.mjs: still running after ${RUN_MS / 1000} s: giving up`);
  process.exit(2);
}, RUN_MS);

const profile = mkdtempSync(join(tmpdir(), 'ui-check-chromium-'));
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

/** The elicitation dialog, once it shows `text`. */
async function dialogWith(text) {
  const dialog = page.getByRole('dialog').filter({ hasText: text });
  await dialog.waitFor();
  return dialog;
}

/** Waits until the dialog showing `text` is gone. */
async function closed(text) {
  await page.getByRole('dialog').filter({ hasText: text }).waitFor({ state: 'detached' });
}

async function openTool(name) {
  // The previous flow's result stands where the tool's form goes.
  const results = page.getByRole('button', { name: 'Close results' });
  if ((await results.count()) > 0) await results.click();
  await page.getByRole('button', { name, exact: true }).click();
  await page.getByRole('button', { name: 'Execute Tool' }).waitFor();
}

/** The tool's result panel, once it shows `text`. */
async function resultWith(text) {
  const result = page.getByText(text).first();
  await result.waitFor();
  return result;
}

/** The card holding the open tool's form. */
const toolCard = () =>
  page
    .getByRole('button', { name: 'Execute Tool' })
    .locator('xpath=ancestor::div[contains(@class, "mantine-Paper-root")][1]');

const flows = {
  async 'every example tool renders its arguments as controls'() {
    for (const name of ['connect_github', 'delete_branch', 'deploy', 'list_branches']) {
      await openTool(name);
      // A schema the Inspector cannot render as controls falls back to a raw JSON editor.
      const editors = await toolCard().locator('.ace_editor').count();
      expect(editors === 0, `${name}: an argument is a raw JSON editor`);
    }
  },

  async 'deploy: environment is a select; approve; deployed'() {
    await openTool('deploy');
    const environment = page.getByRole('textbox', { name: 'Environment' });
    expect((await environment.getAttribute('aria-haspopup')) === 'listbox', 'Environment is not a select (no listbox)');
    expect(/mantine-Select-input/.test((await environment.getAttribute('class')) ?? ''), 'Environment is not a Select');
    await environment.click();
    const options = await page.getByRole('option').allInnerTexts();
    expect(JSON.stringify(options) === JSON.stringify(['staging', 'production']), `Environment options: ${options}`);
    // The tool's form with the open list of environments.
    const boxes = [await toolCard().boundingBox(), await page.getByRole('listbox').boundingBox()];
    const x = Math.min(...boxes.map((b) => b.x)) - 8;
    const y = Math.min(...boxes.map((b) => b.y)) - 8;
    const right = Math.max(...boxes.map((b) => b.x + b.width)) + 8;
    const bottom = Math.max(...boxes.map((b) => b.y + b.height)) + 8;
    await page.screenshot({
      path: join(results, 'deploy-select.png'),
      clip: { x, y, width: right - x, height: bottom - y },
      animations: 'disabled',
    });
    await page.getByRole('option', { name: 'staging' }).click();
    await page.getByRole('button', { name: 'Execute Tool' }).click();

    const dialog = await dialogWith("Deploy to 'staging'?");
    await dialog.getByText('Tick to deploy the current build.').waitFor();
    await dialog.getByText('Optional: why, for the deployment log').waitFor();
    await dialog.getByRole('checkbox', { name: 'Approve' }).check();
    await shot(dialog, 'deploy-form');
    await dialog.getByRole('button', { name: 'Submit' }).click();
    await closed("Deploy to 'staging'?");
    await resultWith('"deployed": true');
  },

  async 'deploy: a 300-character note is asked again, the problem on the note, approve pre-filled'() {
    await openTool('deploy');
    await page.getByRole('textbox', { name: 'Environment' }).click();
    await page.getByRole('option', { name: 'production' }).click();
    await page.getByRole('button', { name: 'Execute Tool' }).click();

    const dialog = await dialogWith("Deploy to 'production'?");
    await dialog.getByRole('switch', { name: 'Edit as JSON' }).check({ force: true });
    const editor = dialog.getByRole('textbox', { name: /JSON/ });
    await editor.focus();
    await page.keyboard.press('Control+A');
    await page.keyboard.insertText(JSON.stringify({ approve: true, note: 'n'.repeat(300) }));
    await dialog.getByRole('button', { name: 'Submit' }).click();

    // The problem on the note itself (before its own description); the message names the field.
    const line = 'Please correct: Note.';
    const hint = 'Use at most 200 characters (you entered 300).';
    const again = await dialogWith(line);
    await again.getByText(line).waitFor({ state: 'visible' });
    await again.getByText(hint).waitFor({ state: 'visible' });
    const approve = again.getByRole('checkbox', { name: 'Approve' });
    await approve.waitFor();
    expect(await approve.isChecked(), 'Approve is not pre-filled on the re-ask');
    const note = again.getByRole('textbox', { name: 'Note' });
    expect((await note.inputValue()) === '', 'the invalid note was pre-filled');
    await shot(again, 'deploy-reask');
    await again.getByRole('button', { name: 'Submit' }).click();
    await closed(line);
    await resultWith('"environment": "production"');
  },

  async 'connect_github: accepted early, asked again with a line; then completed'() {
    await openTool('connect_github');
    await page.getByRole('textbox', { name: 'account' }).fill('octocat');
    await page.getByRole('button', { name: 'Execute Tool' }).click();

    const message = "Authorize GitHub access for 'octocat'.";
    const dialog = await dialogWith(message);
    const popup = context.waitForEvent('page');
    await dialog.getByRole('button', { name: 'Open in Browser' }).click();
    await (await popup).close();
    // Consent, not completion: the flow page was never finished.
    await dialog.getByRole('button', { name: "I've completed it" }).click();

    const line = 'Not finished yet: complete it in the browser, then continue.';
    const again = await dialogWith(line);
    await again.getByText(line).waitFor({ state: 'visible' });
    expect((await again.innerText()).includes('/flows/'), 'the re-ask has no URL');
    await shot(again, 'github-reask');
    const next = context.waitForEvent('page');
    await again.getByRole('button', { name: /Open in Browser/ }).click();
    const flow = await next;
    await flow.getByRole('link', { name: 'Authorize' }).click();
    await flow.getByText('GitHub access authorized').waitFor();
    await flow.close();
    await again.getByRole('button', { name: "I've completed it" }).click();
    await closed(line);
    await resultWith('Connected octocat');
  },

  async 'delete_branch: a typo is asked again, the hint on the name; the right name deletes'() {
    await openTool('delete_branch');
    await page.getByRole('textbox', { name: 'name' }).fill('dev');
    await page.getByRole('button', { name: 'Execute Tool' }).click();

    const message = "Delete the branch 'dev'? Type its name to confirm.";
    const dialog = await dialogWith(message);
    await dialog.getByRole('textbox', { name: 'Branch name' }).fill('main');
    await dialog.getByRole('button', { name: 'Submit' }).click();

    // The gate's retry hint on its form's one field; the message names the field.
    const line = 'Please correct: Branch name.';
    const hint = 'That is not the branch name.';
    const again = await dialogWith(line);
    await again.getByText(line).waitFor({ state: 'visible' });
    await again.getByText(hint).waitFor({ state: 'visible' });
    const name = again.getByRole('textbox', { name: 'Branch name' });
    expect((await name.inputValue()) === '', 'the wrong name was pre-filled');
    await name.fill('dev');
    await shot(again, 'delete-retry');
    await again.getByRole('button', { name: 'Submit' }).click();
    await closed(line);
    await resultWith('Deleted branch dev');
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
      // Leave no dialog open for the next flow.
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
console.log(`ui-check [${era}]: ${passed} passed, ${failed} failed`);
process.exit(failed === 0 ? 0 : 1);

// Drives the console's "Connect a tool" view in headless Chromium as an operator would:
// reads the set-up shown for each tool, copies one with the Copy button, picks a key
// limited to some models, and gives an address the gateway refuses. The Go test
// (connect_test.go) compares what the page showed with what `caddy switchyard connect`
// prints. Last, it makes a key with the two-click "New key" and checks the dialog
// itself (newKeySteps): a failed check stops the run, which fails the Go test.
//
// Environment: SY_CONSOLE_URL, SY_CONSOLE_USER, SY_CONSOLE_PASSWORD, SY_KEY_ID (a key
// limited to some models), SY_OUT_DIR, SY_CHROMIUM. Output: one JSON object on stdout.

import { join } from 'node:path';

import { envReader, newReport, runInBrowser } from './browser.mjs';

const env = envReader('connect.mjs');
const consoleURL = env('SY_CONSOLE_URL');
const user = env('SY_CONSOLE_USER');
const password = env('SY_CONSOLE_PASSWORD');
const keyID = env('SY_KEY_ID');
const outDir = env('SY_OUT_DIR');
const executablePath = env('SY_CHROMIUM', '/usr/bin/chromium');
const TIMEOUT = 10000;
const report = newReport({ shown: {} });

// shown waits until the view has answered a request for client whose query includes
// want (the view records each answered request on the section), and reads it.
async function shown(page, client, want = '') {
  await page.waitForFunction(([c, w]) => {
    const r = document.getElementById('connect').dataset.request || '';
    return r.startsWith(c + '?') && r.includes(w);
  }, [client, want], { timeout: TIMEOUT });
  return page.evaluate(() => ({
    state: document.getElementById('connect').dataset.state,
    text: document.getElementById('connect-text').textContent,
    models: document.getElementById('connect-models').textContent,
    error: document.getElementById('connect-error').hidden ? '' : document.getElementById('connect-error').textContent,
  }));
}

async function run(page) {
  const response = await page.goto(consoleURL);
  report.page_status = response.status();
  await page.waitForFunction(() => document.querySelectorAll('[data-testid="model-card"]').length > 0, null, { timeout: TIMEOUT });
  report.limits = await page.$$eval('[data-testid="model-card"]', (cards) => cards.map((card) => {
    const dd = card.querySelector('[data-testid="model-limits"]');
    return { id: card.dataset.modelId, text: dd.textContent, context_window: Number(dd.dataset.contextWindow), max_output_tokens: Number(dd.dataset.maxOutputTokens) };
  }));
  report.base_url_field = await page.getByTestId('connect-base-url').inputValue();

  await page.getByTestId('nav-connect').click();
  report.shown.codex = await shown(page, 'codex');
  await page.getByTestId('connect-section').screenshot({ path: join(outDir, 'console-connect.png') });
  report.screenshots.push(join(outDir, 'console-connect.png'));
  await page.getByTestId('connect-copy').click();
  await page.waitForFunction(() => document.getElementById('connect-copy-status').textContent !== '', null, { timeout: TIMEOUT });
  report.copy_status = await page.getByTestId('connect-copy-status').textContent();
  report.clipboard = await page.evaluate(() => navigator.clipboard.readText()).catch((e) => 'unreadable: ' + e);

  for (const client of ['claude-code', 'openai', 'anthropic']) {
    await page.getByTestId('connect-client').selectOption(client);
    report.shown[client] = await shown(page, client);
  }

  // A key limited to some models: the set-up lists only those.
  await page.getByTestId('keys-refresh').click();
  await page.waitForFunction((id) => Array.from(document.querySelectorAll('#connect-key option')).some((o) => o.value === id), keyID, { timeout: TIMEOUT });
  await page.getByTestId('connect-client').selectOption('codex');
  await shown(page, 'codex');
  await page.getByTestId('connect-key').selectOption(keyID);
  report.shown.codex_key = await shown(page, 'codex', 'key=' + encodeURIComponent(keyID));

  // An address the gateway refuses: its message, no set-up to copy.
  await page.getByTestId('connect-key').selectOption('');
  await page.getByTestId('connect-base-url').fill(report.base_url_field + '/v1');
  await page.getByTestId('connect-base-url').press('Tab');
  report.shown.bad_address = await shown(page, 'codex', encodeURIComponent('/v1'));
  report.copy_disabled = await page.getByTestId('connect-copy').isDisabled();

  await newKeySteps(page);
}

// newKeySteps makes a key with the two-click "New key" (New key, Claude Code, Create) and
// holds the dialog to what it must show: a secret that works on the gateway, beside the
// set-up the console API gives for that very key; once closed, the secret is gone from
// the page. A step that does not hold throws, which fails the Go test.
async function newKeySteps(page) {
  const check = (ok, what) => { if (!ok) throw new Error('New key: ' + what); };
  await page.locator('#new-key').click();
  await page.locator('#new-key-client').selectOption('claude-code');
  await page.locator('#create-key').click();
  await page.waitForFunction(() => document.getElementById('new-key-result').dataset.state === 'ready', null, { timeout: TIMEOUT });
  const secret = (await page.locator('#key-secret').textContent()).trim();
  const setup = await page.locator('#connect-setup').textContent();
  check(/^sk-sy-[a-z2-7]{52}$/.test(secret), 'the secret shown is not a key: ' + JSON.stringify(secret.slice(0, 8)));
  const row = page.locator(`[data-testid="key-row"][data-prefix="${secret.slice(0, 12)}"]`);
  await row.waitFor({ timeout: TIMEOUT });
  const id = await row.getAttribute('data-key-id');
  const origin = new URL(consoleURL).origin;
  const api = await fetch(new URL('api/connect/claude-code?' + new URLSearchParams({ base_url: origin, key_env: 'SWITCHYARD_API_KEY', key: id }), consoleURL), {
    headers: { Authorization: 'Basic ' + Buffer.from(user + ':' + password).toString('base64') },
  });
  const want = (await api.json()).setup.text;
  check(setup === want, 'the set-up shown is not the API\'s for the new key:\n' + setup + '\n---\n' + want);
  check(!setup.includes(secret), 'the set-up holds the secret');
  const models = await fetch(origin + '/v1/models', { headers: { Authorization: 'Bearer ' + secret } });
  check(models.status === 200, 'the new key got ' + models.status + ' from the gateway');
  await page.getByTestId('new-key-dialog').screenshot({ path: join(outDir, 'console-new-key.png') });
  report.screenshots.push(join(outDir, 'console-new-key.png'));
  await page.locator('#new-key-done').click();
  await page.getByTestId('new-key-dialog').waitFor({ state: 'hidden', timeout: TIMEOUT });
  check(!(await page.evaluate((s) => document.documentElement.outerHTML.includes(s), secret)), 'the secret stays in the page after closing');
  report.new_key = { id, setup_lines: setup.split('\n').length };
}

await runInBrowser({
  name: 'connect', executablePath, user, password, consoleURL, outDir, report, timeout: TIMEOUT, clipboard: true,
}, run);

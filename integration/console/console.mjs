// Drives the Switchyard web console in headless Chromium as an operator would, and
// checks that what the page does reaches the gateway: a key created in the page works,
// and once revoked in the page it stops working; calls made with a key show up in the
// Usage section as the usage API counts them. The Go test (console_test.go) starts
// the gateway, runs this script and judges the JSON report it prints on stdout.
//
// Environment:
//   SY_CONSOLE_URL       the console page, e.g. http://127.0.0.1:1234/console/
//   SY_CONSOLE_USER      basic-auth user name for the console
//   SY_CONSOLE_PASSWORD  basic-auth password
//   SY_GATEWAY_URL       the gateway's base URL, e.g. http://127.0.0.1:1234
//   SY_MODEL             a Family A model id to call with the new key
//   SY_MESSAGES_MODEL    a Family B model id, called with the usage key
//   SY_OUT_DIR           where screenshots go
//   SY_CHROMIUM          the browser (default /usr/bin/chromium)
//
// Output: one JSON object on stdout. Progress goes to stderr. A step that throws ends
// the run with {"failed": "..."} in the report, a screenshot of the page at that moment,
// and exit status 1.

import { join } from 'node:path';

import { envReader, newReport, runInBrowser, screenshotTo } from './browser.mjs';

const env = envReader('console.mjs');

const consoleURL = env('SY_CONSOLE_URL');
const user = env('SY_CONSOLE_USER');
const password = env('SY_CONSOLE_PASSWORD');
const gatewayURL = env('SY_GATEWAY_URL').replace(/\/$/, '');
const model = env('SY_MODEL');
const messagesModel = env('SY_MESSAGES_MODEL');
const outDir = env('SY_OUT_DIR');
const executablePath = env('SY_CHROMIUM', '/usr/bin/chromium');

const STEP_TIMEOUT = 10000;
const report = newReport();
const log = (...args) => console.error('console.mjs:', ...args);

// ---- Calls to the gateway, as a client holding the key would make them ----------------

async function callGateway(secret) {
  const out = {};
  let res = await fetch(gatewayURL + '/v1/models', { headers: { Authorization: 'Bearer ' + secret } });
  out.models_status = res.status;
  out.models_type = res.headers.get('content-type') ?? '';
  out.models_body = await jsonOrText(res);
  res = await fetch(gatewayURL + '/v1/chat/completions', {
    method: 'POST',
    headers: { Authorization: 'Bearer ' + secret, 'Content-Type': 'application/json' },
    body: JSON.stringify({ model, messages: [{ role: 'user', content: 'Hello from the console test' }] }),
  });
  out.chat_status = res.status;
  out.chat_type = res.headers.get('content-type') ?? '';
  out.chat_body = await jsonOrText(res);
  return out;
}

// useKey makes the calls whose usage the Usage section must show: two chat completions
// (one asking for reasoning) and one message, each answered with the simulator's known
// token counts.
async function useKey(secret) {
  const statuses = [];
  const chat = (extra) => fetch(gatewayURL + '/v1/chat/completions', {
    method: 'POST',
    headers: { Authorization: 'Bearer ' + secret, 'Content-Type': 'application/json' },
    body: JSON.stringify({ model, messages: [{ role: 'user', content: 'Usage for the console' }], ...extra }),
  });
  statuses.push((await chat({ reasoning_effort: 'low' })).status);
  statuses.push((await chat({})).status);
  const res = await fetch(gatewayURL + '/v1/messages', {
    method: 'POST',
    headers: { 'x-api-key': secret, 'anthropic-version': '2023-06-01', 'Content-Type': 'application/json' },
    body: JSON.stringify({ model: messagesModel, max_tokens: 64, messages: [{ role: 'user', content: 'Usage for the console' }] }),
  });
  statuses.push(res.status);
  return statuses;
}

// consoleAPI reads the console's JSON API as the page does, with the console login.
async function consoleAPI(path) {
  const res = await fetch(new URL(path, consoleURL), {
    headers: { Authorization: 'Basic ' + Buffer.from(user + ':' + password).toString('base64'), Accept: 'application/json' },
  });
  const body = await jsonOrText(res);
  if (!res.ok) throw new Error(`GET ${path}: ${res.status} ${JSON.stringify(body)}`);
  return body;
}

async function jsonOrText(res) {
  const text = await res.text();
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}

// ---- Looking into the page ------------------------------------------------------------

// secretTraces reports every place in the page a secret could still be: the DOM (as
// HTML, as rendered text, and in form fields' live values), the current selection,
// web storage, the URL and the history entry.
async function secretTraces(page, secret) {
  return page.evaluate((s) => {
    const found = [];
    if (document.documentElement.outerHTML.includes(s)) found.push('html');
    if (document.body.innerText.includes(s)) found.push('text');
    for (const field of document.querySelectorAll('input, textarea, select')) {
      if (String(field.value).includes(s)) found.push('field:' + (field.id || field.name));
    }
    if (String(window.getSelection()).includes(s)) found.push('selection');
    for (const store of [window.localStorage, window.sessionStorage]) {
      for (let i = 0; i < store.length; i++) {
        const k = store.key(i);
        if (k.includes(s) || String(store.getItem(k)).includes(s)) found.push('storage');
      }
    }
    if (location.href.includes(s)) found.push('url');
    if (JSON.stringify(history.state ?? null).includes(s)) found.push('history');
    return found;
  }, secret);
}

async function rowOf(page, prefix) {
  const row = page.locator(`[data-testid="key-row"][data-prefix="${prefix}"]`);
  await row.waitFor({ timeout: STEP_TIMEOUT });
  return row;
}

async function waitForStatus(page, prefix, status) {
  await page.locator(`[data-testid="key-row"][data-prefix="${prefix}"][data-status="${status}"]`)
    .waitFor({ timeout: STEP_TIMEOUT });
}

// waitUsage waits until the Usage section has drawn the answer to its latest query.
async function waitUsage(page) {
  await page.waitForFunction(() => {
    const s = document.querySelector('[data-testid="usage-section"]').dataset.state;
    return s && s !== 'loading';
  }, null, { timeout: STEP_TIMEOUT });
}

// usageShown reads what the Usage section shows: its period, the table (raw integers
// from data-value, and the cost as written), the charts' day groups and legend.
async function usageShown(page) {
  return page.evaluate(() => {
    const section = document.querySelector('[data-testid="usage-section"]');
    const cells = (row) => {
      const out = {};
      for (const td of row.querySelectorAll('td[data-field]')) {
        out[td.dataset.field] = Number(td.dataset.value);
        if (td.dataset.field === 'cost_micros') out.cost_text = td.textContent;
      }
      return out;
    };
    const svg = (id) => {
      const node = document.querySelector(`[data-testid="${id}"]`);
      if (!node) return null;
      return {
        role: node.getAttribute('role'),
        label: node.getAttribute('aria-label') || '',
        days: Array.from(node.querySelectorAll('[data-testid="usage-day"]'), (g) => ({
          day: g.dataset.day,
          total: Number(g.dataset.total),
          title: g.querySelector('title') ? g.querySelector('title').textContent : '',
          series: Array.from(g.querySelectorAll('rect.seg'), (r) => r.dataset.series),
        })),
        y_ticks: Array.from(node.querySelectorAll('.tick-y'), (t) => t.textContent),
        x_ticks: Array.from(node.querySelectorAll('.tick-x'), (t) => t.textContent),
      };
    };
    const visible = (id) => {
      const node = document.querySelector(`[data-testid="${id}"]`);
      return !!node && node.getClientRects().length > 0;
    };
    const total = section.querySelector('[data-testid="usage-total-row"]');
    return {
      state: section.dataset.state,
      from: section.dataset.from || '',
      to: section.dataset.to || '',
      summary: section.querySelector('[data-testid="usage-summary"]').textContent,
      note: visible('usage-note') ? section.querySelector('[data-testid="usage-note"]').textContent : '',
      empty: visible('usage-empty') ? section.querySelector('[data-testid="usage-empty"]').textContent : '',
      charts_visible: visible('usage-charts'),
      table_visible: visible('usage-table'),
      stat_cost: section.querySelector('[data-testid="usage-stat-cost"]').textContent,
      stat_requests: section.querySelector('[data-testid="usage-stat-requests"]').textContent,
      models: Array.from(section.querySelectorAll('[data-testid="usage-model-row"]'), (r) => ({ model: r.dataset.model, ...cells(r) })),
      supply: Array.from(section.querySelectorAll('[data-testid="usage-supply-row"]'), (r) => ({
        model: r.dataset.model, candidate: r.dataset.candidate, channel: r.dataset.channel, ...cells(r) })),
      total: total ? cells(total) : null,
      tokens_chart: svg('usage-tokens-svg'),
      cost_chart: svg('usage-cost-svg'),
      tokens_legend: Array.from(section.querySelectorAll('[data-testid="usage-tokens-legend"] [data-testid="usage-legend-item"]'), (li) => li.dataset.series),
      key_options: Array.from(section.querySelectorAll('[data-testid="usage-key"] option'), (o) => o.value),
      model_options: Array.from(section.querySelectorAll('[data-testid="usage-model"] option'), (o) => o.value),
    };
  });
}

const screenshot = screenshotTo(outDir, report);

// waitLoaded waits until the keys and the models are on the page.
async function waitLoaded(page) {
  await page.waitForFunction(() => {
    const summary = document.querySelector('[data-testid="keys-summary"]');
    return summary && !summary.textContent.startsWith('Loading')
      && document.querySelectorAll('[data-testid="model-card"]').length > 0;
  }, null, { timeout: STEP_TIMEOUT });
}

// ---- The run --------------------------------------------------------------------------

async function run(page) {
  log('opening', consoleURL);
  const response = await page.goto(consoleURL);
  report.page_status = response.status();
  report.csp = response.headers()['content-security-policy'] ?? '';
  await waitLoaded(page);
  report.title = await page.title();

  // Every form control has a label, every button a name.
  report.unlabelled = await page.evaluate(() => {
    const out = [];
    for (const c of document.querySelectorAll('input, select, textarea')) {
      if (c.labels.length === 0 && !c.getAttribute('aria-label') && !c.getAttribute('aria-labelledby')) out.push(c.id || c.outerHTML);
    }
    for (const b of document.querySelectorAll('button')) {
      if (!(b.getAttribute('aria-label') || b.textContent.trim())) out.push(b.outerHTML);
    }
    return out;
  });

  // The models section.
  report.models_section = await page.$$eval('[data-testid="model-card"]', (cards) => cards.map((card) => ({
    id: card.dataset.modelId,
    protocols: Array.from(card.querySelectorAll('[data-testid="model-protocols"] .chip'), (c) => c.textContent),
    capabilities: Array.from(card.querySelectorAll('[data-testid="model-capabilities"] .chip'), (c) => c.textContent),
    candidates: Array.from(card.querySelectorAll('[data-testid="candidate-row"]'), (r) => ({
      name: r.dataset.candidate,
      state: r.dataset.state,
      shown: r.querySelector('[data-testid="candidate-state"]').textContent,
      priority: Number(r.querySelector('td.num').textContent),
    })),
  })));

  // Mistakes are explained in the page: a missing name (checked in the page) and a
  // lifetime the gateway refuses (its error message shown as it came).
  await page.getByTestId('create-submit').click();
  report.empty_name_error = await page.getByTestId('create-error').textContent();
  await page.getByTestId('create-name').fill('never-created');
  await page.getByTestId('create-lifetime').selectOption('custom');
  await page.getByTestId('create-lifetime-custom').fill('soon');
  await page.getByTestId('create-submit').click();
  await page.waitForFunction(() => {
    const e = document.querySelector('[data-testid="create-error"]');
    return e && !e.hidden && e.textContent.includes('expires_in');
  });
  report.server_error = await page.getByTestId('create-error').textContent();
  await page.getByTestId('create-lifetime').selectOption('30d');

  // Create a key through the form, allowed one model and living 30 days.
  const name = 'browser-test-' + Date.now().toString(36);
  report.key_name = name;
  log('creating', name);
  await page.getByTestId('create-name').fill(name);
  await page.locator(`[data-testid="model-option"][value="${model}"]`).check();
  await page.getByTestId('create-submit').click();
  const box = page.getByTestId('secret-box');
  await box.waitFor();
  const secret = (await page.getByTestId('secret-value').textContent()).trim();
  report.secret = secret;
  report.secret_title = await page.getByTestId('secret-title').textContent();
  report.secret_note = await page.getByTestId('secret-note').textContent();
  const prefix = secret.slice(0, 12);
  const row = await rowOf(page, prefix);
  report.created_row = {
    name: await row.getByTestId('key-name').textContent(),
    prefix: await row.getByTestId('key-prefix').textContent(),
    status: await row.getAttribute('data-status'),
    status_shown: await row.getByTestId('key-status').textContent(),
    models: await row.getByTestId('key-models').textContent(),
    expires: await row.getByTestId('key-expires').textContent(),
  };
  report.form_cleared = (await page.getByTestId('create-name').inputValue()) === '';

  // Copy: the button puts the secret on the clipboard.
  await page.getByTestId('secret-copy').click();
  await page.waitForFunction(() => document.querySelector('[data-testid="secret-copy-status"]').textContent !== '');
  report.copy_status = await page.getByTestId('secret-copy-status').textContent();
  report.clipboard_matches = (await page.evaluate(() => navigator.clipboard.readText()).catch(() => '')) === secret;
  report.secret_traces_while_shown = await secretTraces(page, secret);
  await screenshot(page, 'console-secret.png');

  // The key works on the gateway.
  log('calling the gateway with the new key');
  report.before_revoke = await callGateway(secret);

  // Dismissed, the secret is gone from the page.
  await page.getByTestId('secret-dismiss').click();
  await box.waitFor({ state: 'detached' });
  report.secret_traces_after_dismiss = await secretTraces(page, secret);

  // Revoke it in the page: a confirmation first, which can be cancelled.
  log('revoking', name);
  await row.getByTestId('revoke-button').click();
  const dialog = page.getByTestId('revoke-dialog');
  await dialog.waitFor({ state: 'visible' });
  report.revoke_dialog_text = await dialog.textContent();
  await page.getByTestId('revoke-cancel').click();
  await dialog.waitFor({ state: 'hidden' });
  report.status_after_cancel = await (await rowOf(page, prefix)).getAttribute('data-status');
  await (await rowOf(page, prefix)).getByTestId('revoke-button').click();
  await dialog.waitFor({ state: 'visible' });
  await screenshot(page, 'console-revoke-dialog.png');
  await page.getByTestId('revoke-confirm').click();
  await waitForStatus(page, prefix, 'revoked');
  const revokedRow = await rowOf(page, prefix);
  report.revoked_row = {
    status_shown: await revokedRow.getByTestId('key-status').textContent(),
    actions: await revokedRow.locator('button').count(),
  };
  report.status_message = await page.getByTestId('status-message').textContent();

  // The next call with the key is refused.
  log('calling the gateway with the revoked key');
  report.after_revoke = await callGateway(secret);

  // Rotation: a second key, rotated with no grace period while its secret is still
  // shown. Both secrets stay on the page, newest first, until each is dismissed; the
  // old secret stops working at once and the new one works.
  const rotName = name + '-rot';
  await page.getByTestId('create-name').fill(rotName);
  await page.getByTestId('create-submit').click();
  await box.waitFor();
  const oldSecret = (await page.getByTestId('secret-value').textContent()).trim();
  await (await rowOf(page, oldSecret.slice(0, 12))).getByTestId('rotate-button').click();
  await page.getByTestId('rotate-dialog').waitFor({ state: 'visible' });
  await page.getByTestId('rotate-grace').selectOption('0');
  await page.getByTestId('rotate-confirm').click();
  await page.waitForFunction(() => document.querySelectorAll('[data-testid="secret-box"]').length === 2);
  const shown = (await page.getByTestId('secret-value').allTextContents()).map((s) => s.trim());
  const newSecret = shown[0];
  const newest = box.first();
  report.rotate = {
    distinct: newSecret !== oldSecret && newSecret.startsWith('sk-sy-'),
    kept_earlier: shown[1] === oldSecret,
    title: await newest.getByTestId('secret-title').textContent(),
    extra: await newest.getByTestId('secret-extra').textContent(),
    old_status: null,
    new_status: null,
  };
  await waitForStatus(page, oldSecret.slice(0, 12), 'revoked');
  report.rotate.old_status = 'revoked';
  report.rotate.new_status = await (await rowOf(page, newSecret.slice(0, 12))).getAttribute('data-status');
  report.rotate.old_call = (await callGateway(oldSecret)).models_status;
  report.rotate.new_call = (await callGateway(newSecret)).models_status;
  await screenshot(page, 'console-rotated.png');
  await newest.getByTestId('secret-dismiss').click();
  await page.waitForFunction(() => document.querySelectorAll('[data-testid="secret-box"]').length === 1);
  report.rotate.left_after_one_dismiss = (await page.getByTestId('secret-value').textContent()).trim() === oldSecret;
  await page.getByTestId('secret-dismiss').click();
  await box.waitFor({ state: 'detached' });
  report.rotate.traces_after_dismiss = [
    ...await secretTraces(page, oldSecret), ...await secretTraces(page, newSecret),
  ];
  await screenshot(page, 'console-final.png');

  // A reload never brings a secret back.
  await page.reload();
  await waitLoaded(page);
  report.secret_traces_after_reload = [
    ...await secretTraces(page, secret), ...await secretTraces(page, oldSecret), ...await secretTraces(page, newSecret),
  ];
  report.secret_box_after_reload = await page.getByTestId('secret-box').count();
  report.status_after_reload = await (await rowOf(page, prefix)).getAttribute('data-status');

  await usageSteps(page, name, oldSecret);
}

// usageSteps: a key made in the page is used on both models; once the ledger has
// written the calls, the Usage section must show what the usage API answers, for every
// key and for that key alone, and a calm empty state for a key never used.
async function usageSteps(page, name, unusedSecret) {
  const usageName = name + '-usage';
  log('creating', usageName, 'and using it');
  await page.getByTestId('create-name').fill(usageName);
  await page.getByTestId('create-submit').click();
  await page.getByTestId('secret-box').waitFor();
  const secret = (await page.getByTestId('secret-value').textContent()).trim();
  const keyID = await (await rowOf(page, secret.slice(0, 12))).getAttribute('data-key-id');
  const unusedID = await (await rowOf(page, unusedSecret.slice(0, 12))).getAttribute('data-key-id');
  await page.getByTestId('secret-dismiss').click();
  await page.getByTestId('secret-box').waitFor({ state: 'detached' });
  const u = { key_id: keyID, unused_key_id: unusedID };
  report.usage = u;
  u.call_statuses = await useKey(secret);

  // The ledger writes in batches: wait until the three calls are in the store.
  const deadline = Date.now() + 15000;
  for (;;) {
    const answer = await consoleAPI('api/usage?key=' + encodeURIComponent(keyID));
    if (answer.total.requests >= 3 || Date.now() > deadline) break;
    await new Promise((r) => setTimeout(r, 100));
  }

  // The section, as opened from the navigation: every key, the last 30 days.
  await page.getByTestId('nav-usage').click();
  await page.getByTestId('usage-refresh').click();
  await waitUsage(page);
  const all = await usageShown(page);
  u.all = all;
  const period = 'from=' + all.from + '&to=' + all.to;
  u.api_all = {
    by_model: await consoleAPI('api/usage?' + period + '&group=model'),
    by_day: await consoleAPI('api/usage?' + period + '&group=day'),
  };
  await page.getByTestId('usage-section').screenshot({ path: join(outDir, 'console-usage.png') });
  report.screenshots.push(join(outDir, 'console-usage.png'));

  // Split by kind: the same days, now in four kinds of token.
  await page.locator('label[for="usage-split-kind"]').click();
  u.by_kind = await usageShown(page);
  await page.getByTestId('usage-section').screenshot({ path: join(outDir, 'console-usage-kinds.png') });
  report.screenshots.push(join(outDir, 'console-usage-kinds.png'));
  await page.locator('label[for="usage-split-model"]').click();

  // The key alone, over 7 days.
  await page.getByTestId('usage-range').selectOption('7');
  await waitUsage(page);
  await page.getByTestId('usage-key').selectOption(keyID);
  await waitUsage(page);
  const mine = await usageShown(page);
  u.key = mine;
  u.api_key = await consoleAPI('api/usage?from=' + mine.from + '&to=' + mine.to + '&key=' + encodeURIComponent(keyID) + '&group=model');

  // One model, every key, the last 30 days again.
  await page.getByTestId('usage-key').selectOption('');
  await waitUsage(page);
  await page.getByTestId('usage-range').selectOption('30');
  await waitUsage(page);
  await page.getByTestId('usage-model').selectOption(messagesModel);
  await waitUsage(page);
  u.model = await usageShown(page);
  await page.getByTestId('usage-model').selectOption('');
  await waitUsage(page);

  // A key never used: the empty state.
  await page.getByTestId('usage-key').selectOption(unusedID);
  await waitUsage(page);
  u.unused = await usageShown(page);
  await page.getByTestId('usage-section').screenshot({ path: join(outDir, 'console-usage-empty.png') });
  report.screenshots.push(join(outDir, 'console-usage-empty.png'));
  await page.getByTestId('usage-key').selectOption('');
  await waitUsage(page);
  await screenshot(page, 'console-usage-page.png');
}

await runInBrowser({
  name: 'console', executablePath, user, password, consoleURL, outDir, report, timeout: STEP_TIMEOUT, clipboard: true,
  before: async () => {
    // The console is behind basic auth: without credentials it must refuse.
    report.unauthenticated_status = (await fetch(consoleURL)).status;
  },
}, run);

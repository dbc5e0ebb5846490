// Drives the console's projects, limits and audit views in headless Chromium as an
// operator would: creates a project with a budget, creates a key in it, uses the key
// once, sets the key's budget in its Limits dialog to less than one request costs (after
// a mistake the dialog must explain), and reads the audit trail. The Go test
// (console_test.go) then calls the gateway with the key and judges the JSON report this
// script prints on stdout.
//
// Environment: SY_CONSOLE_URL, SY_CONSOLE_USER, SY_CONSOLE_PASSWORD, SY_GATEWAY_URL,
// SY_MODEL (a priced Family A model), SY_BUDGET (the key's budget to set), SY_OUT_DIR,
// SY_CHROMIUM.

import { envReader, newReport, runInBrowser, screenshotTo } from './browser.mjs';

const env = envReader('limits.mjs');
const consoleURL = env('SY_CONSOLE_URL');
const user = env('SY_CONSOLE_USER');
const password = env('SY_CONSOLE_PASSWORD');
const gatewayURL = env('SY_GATEWAY_URL').replace(/\/$/, '');
const model = env('SY_MODEL');
const keyBudget = env('SY_BUDGET');
const outDir = env('SY_OUT_DIR');
const executablePath = env('SY_CHROMIUM', '/usr/bin/chromium');
const TIMEOUT = 10000;
const report = newReport();
const log = (...args) => console.error('limits.mjs:', ...args);

const PROJECT = 'platform';
const KEY_NAME = 'limited-bot';

async function chat(secret) {
  const res = await fetch(gatewayURL + '/v1/chat/completions', {
    method: 'POST',
    headers: { Authorization: 'Bearer ' + secret, 'Content-Type': 'application/json' },
    body: JSON.stringify({ model, messages: [{ role: 'user', content: 'Hello from the limits test' }] }),
  });
  const text = await res.text();
  return { status: res.status, should_retry: res.headers.get('x-should-retry') ?? '', body: text };
}

const screenshot = screenshotTo(outDir, report);

// keyRow reads the key's row in the keys table.
async function keyRow(page, id) {
  return page.evaluate((keyID) => {
    const row = document.querySelector(`[data-testid="key-row"][data-key-id="${keyID}"]`);
    if (!row) return null;
    const spend = row.querySelector('[data-testid="spend"]');
    return {
      project: row.querySelector('[data-testid="key-project"]').dataset.project,
      project_shown: row.querySelector('[data-testid="key-project"]').textContent,
      spend_text: spend.textContent,
      limits: (spend.querySelector('[data-testid="limits-summary"]') || {}).textContent || '',
      has_meter: !!spend.querySelector('[role="meter"]'),
    };
  }, id);
}

async function run(page) {
  const response = await page.goto(consoleURL);
  report.page_status = response.status();
  await page.waitForFunction(() => document.querySelector('[data-testid="projects-section"]').dataset.state === 'ready'
    && !document.querySelector('[data-testid="keys-summary"]').textContent.startsWith('Loading'), null, { timeout: TIMEOUT });

  // A project with a budget.
  log('creating the project');
  await page.getByTestId('nav-projects').click();
  await page.getByTestId('project-id').fill(PROJECT);
  await page.getByTestId('project-name').fill('Platform team');
  await page.getByTestId('project-budget').fill('50/month');
  await page.getByTestId('project-submit').click();
  const projectRow = page.locator(`[data-testid="project-row"][data-project-id="${PROJECT}"]`);
  await projectRow.waitFor({ timeout: TIMEOUT });
  report.project_limits = await projectRow.getByTestId('project-limits').textContent();
  report.project_name = await projectRow.getByTestId('project-name').textContent();

  // A key in it, created in the page.
  log('creating the key');
  await page.waitForFunction((p) => Array.from(document.querySelectorAll('#create-project option')).some((o) => o.value === p), PROJECT, { timeout: TIMEOUT });
  await page.getByTestId('create-name').fill(KEY_NAME);
  await page.getByTestId('create-project').selectOption(PROJECT);
  await page.getByTestId('create-submit').click();
  const box = page.getByTestId('secret-box').first();
  await box.waitFor({ timeout: TIMEOUT });
  report.secret = (await box.getByTestId('secret-value').textContent()).trim();
  await box.getByTestId('secret-dismiss').click();
  const row = page.locator('[data-testid="key-row"]', { has: page.locator('[data-testid="key-name"]', { hasText: KEY_NAME }) });
  await row.waitFor({ timeout: TIMEOUT });
  report.key_id = await row.getAttribute('data-key-id');
  report.row_after_create = await keyRow(page, report.key_id);
  report.first_call = await chat(report.secret);

  // The project lists the key.
  await page.getByTestId('projects-refresh').click();
  await page.locator(`[data-testid="project-row"][data-project-id="${PROJECT}"] [data-testid="project-key"][data-key-id="${report.key_id}"]`)
    .waitFor({ timeout: TIMEOUT });
  report.project_keys = await projectRow.getByTestId('project-key').allTextContents();
  report.project_spend = await projectRow.getByTestId('project-spend').textContent();

  // The key's Limits dialog: a mistake first, which the dialog explains and keeps open.
  log('setting the key budget');
  await row.getByTestId('limits-button').click();
  const dialog = page.getByTestId('limits-dialog');
  await dialog.waitFor({ state: 'visible', timeout: TIMEOUT });
  report.dialog_project = await page.getByTestId('limits-project').inputValue();
  await page.getByTestId('limits-budget').fill('5/week');
  await page.getByTestId('limits-save').click();
  await page.getByTestId('limits-error').waitFor({ state: 'visible', timeout: TIMEOUT });
  report.dialog_error = await page.getByTestId('limits-error').textContent();
  report.dialog_open_after_error = await dialog.isVisible();
  await page.getByTestId('limits-rpm').fill('sixty');
  await page.getByTestId('limits-save').click();
  await page.waitForFunction(() => document.getElementById('limits-error').textContent.includes('Requests per minute'), null, { timeout: TIMEOUT });
  report.dialog_rpm_error = await page.getByTestId('limits-error').textContent();
  await page.getByTestId('limits-rpm').fill('');
  await page.getByTestId('limits-budget').fill(keyBudget);
  await page.getByTestId('limits-save').click();
  await dialog.waitFor({ state: 'hidden', timeout: TIMEOUT });
  await page.waitForFunction(([id, b]) => {
    const r = document.querySelector(`[data-testid="key-row"][data-key-id="${id}"] [data-testid="limits-summary"]`);
    return r && r.textContent.includes(b);
  }, [report.key_id, keyBudget], { timeout: TIMEOUT });
  report.row_after_limits = await keyRow(page, report.key_id);
  // At a laptop's width the tables fit their panels: nothing hides behind a scroll bar.
  report.overflow = await page.evaluate(() => Array.from(document.querySelectorAll('.table-wrap'))
    .filter((w) => w.scrollWidth > w.clientWidth + 1)
    .map((w) => (w.querySelector('table') || {}).dataset?.testid || '?'));
  report.status_message = await page.getByTestId('status-message').textContent();

  // A candidate's health is reset from the models view (the button sends the console's
  // change header, or the API would refuse it).
  log('resetting a candidate\'s health');
  await page.locator('[data-testid="model-card"][data-model-id="chat-a"] [data-testid="candidate-row"][data-candidate="main"] [data-testid="candidate-reset"]').click();

  // The audit trail lists each change with the console's user.
  log('reading the audit trail');
  await page.getByTestId('nav-audit').click();
  await page.waitForFunction((id) => {
    document.querySelector('[data-testid="audit-refresh"]').click();
    const rows = Array.from(document.querySelectorAll('[data-testid="audit-row"]'));
    return rows.some((r) => r.dataset.action === 'key.limits' && r.dataset.target === id) &&
      rows.some((r) => r.dataset.action === 'candidate.reset');
  }, report.key_id, { timeout: TIMEOUT, polling: 250 });
  report.audit = await page.$$eval('[data-testid="audit-row"]', (rows) => rows.map((r) => ({
    action: r.dataset.action,
    target: r.dataset.target,
    actor: r.querySelector('[data-testid="audit-actor"]').textContent,
    shown: r.querySelector('[data-testid="audit-action"]').textContent,
    detail: r.querySelector('[data-testid="audit-detail"]').textContent,
  })));
  await screenshot(page, 'console-limits.png');
}

await runInBrowser({
  name: 'limits', executablePath, user, password, consoleURL, outDir, report, timeout: TIMEOUT,
}, run);

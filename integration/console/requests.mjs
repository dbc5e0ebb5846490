// Drives the console's Requests view in headless Chromium as an operator would: filters
// the request log by model, opens the row of a request that failed over and reads its
// attempts, then filters by key. The Go test (requestlog_test.go) made the requests
// and judges the JSON report this script prints on stdout.
//
// Environment: SY_CONSOLE_URL, SY_CONSOLE_USER, SY_CONSOLE_PASSWORD, SY_MODEL (the model
// whose request failed over), SY_KEY_ID (a stored key that made requests), SY_OUT_DIR,
// SY_CHROMIUM.

import { envReader, newReport, runInBrowser, screenshotTo } from './browser.mjs';

const env = envReader('requests.mjs');
const consoleURL = env('SY_CONSOLE_URL');
const model = env('SY_MODEL');
const keyID = env('SY_KEY_ID');
const outDir = env('SY_OUT_DIR');
const TIMEOUT = 10000;
const report = newReport();
const screenshot = screenshotTo(outDir, report);

// shownRows reads the request rows the page shows.
async function shownRows(page) {
  return page.evaluate(() => Array.from(document.querySelectorAll('[data-testid="request-row"]')).map((row) => ({
    id: row.dataset.requestId,
    model: row.querySelector('[data-testid="request-model"]').textContent,
    key: row.querySelector('[data-testid="request-key"]').textContent,
    candidate: row.querySelector('[data-testid="request-candidate"]').textContent,
    status: row.querySelector('[data-testid="request-status"]').textContent,
    flags: Array.from(row.querySelectorAll('[data-testid="request-flag"]')).map((f) => f.textContent),
  })));
}

// choose picks value in a filter once the page has offered it, and waits for the rows
// to be the filtered ones.
async function choose(page, testid, value, keep) {
  const select = page.getByTestId(testid);
  await select.focus(); // fills the choices
  await page.waitForFunction(([id, v]) => Array.from(document.querySelectorAll(`[data-testid="${id}"] option`)).some((o) => o.value === v),
    [testid, value], { timeout: TIMEOUT });
  await select.selectOption(value);
  await page.waitForFunction(keep, value, { timeout: TIMEOUT });
}

async function run(page) {
  const response = await page.goto(consoleURL);
  report.page_status = response.status();
  await page.waitForFunction(() => document.querySelector('[data-testid="requests-section"]').dataset.state === 'ready'
    && document.querySelectorAll('[data-testid="request-row"]').length > 0, null, { timeout: TIMEOUT });
  report.all_rows = await shownRows(page);

  await choose(page, 'requests-model', model, (m) => {
    const rows = Array.from(document.querySelectorAll('[data-testid="request-row"]'));
    return rows.length > 0 && rows.every((r) => r.dataset.model === m);
  });
  report.model_rows = await shownRows(page);

  const row = page.locator('[data-testid="request-row"]').first();
  await row.getByTestId('request-toggle').click();
  const detail = page.getByTestId('request-detail').first();
  await detail.waitFor({ timeout: TIMEOUT });
  report.toggle_expanded = await row.getByTestId('request-toggle').getAttribute('aria-expanded');
  report.attempts = await detail.getByTestId('request-attempt').evaluateAll((items) => items.map((li) => ({
    candidate: li.dataset.candidate, reason: li.dataset.reason, text: li.textContent,
  })));
  await screenshot(page, 'requests-open.png');

  await choose(page, 'requests-model', '', () => document.querySelectorAll('[data-testid="request-row"]').length > 1);
  await choose(page, 'requests-key', keyID, () => {
    const rows = Array.from(document.querySelectorAll('[data-testid="request-row"]'));
    return rows.length > 0 && rows.every((r) => r.querySelector('[data-testid="request-key"]').textContent === 'browser-bot');
  });
  report.key_rows = await shownRows(page);
  report.overflow = await page.evaluate(() => {
    const wrap = document.querySelector('[data-testid="requests-table"]').parentElement;
    return wrap.scrollWidth > wrap.clientWidth + 1;
  });
}

await runInBrowser({
  name: 'requests', executablePath: env('SY_CHROMIUM', '/usr/bin/chromium'),
  user: env('SY_CONSOLE_USER'), password: env('SY_CONSOLE_PASSWORD'), consoleURL, outDir, report, timeout: TIMEOUT,
}, run);

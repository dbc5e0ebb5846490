// Reads the Models view's latency table in headless Chromium as an operator would see it:
// waits for the row of a model with traffic, then reads every row's cells. The Go test
// (latency_console_test.go) compares them with the latency API's answer.
//
// Environment: SY_CONSOLE_URL, SY_CONSOLE_USER, SY_CONSOLE_PASSWORD, SY_MODEL (a model
// with traffic in the last hour), SY_OUT_DIR, SY_CHROMIUM. Output: one JSON object on
// stdout.

import { join } from 'node:path';

import { envReader, newReport, runInBrowser } from './browser.mjs';

const env = envReader('latency.mjs');
const consoleURL = env('SY_CONSOLE_URL');
const user = env('SY_CONSOLE_USER');
const password = env('SY_CONSOLE_PASSWORD');
const model = env('SY_MODEL');
const outDir = env('SY_OUT_DIR');
const executablePath = env('SY_CHROMIUM', '/usr/bin/chromium');
const TIMEOUT = 10000;
const report = newReport({ rows: [] });

async function run(page) {
  const response = await page.goto(consoleURL);
  report.page_status = response.status();
  await page.waitForFunction((m) => document.querySelector(`[data-testid="latency-row"][data-model="${m}"]`) !== null, model, { timeout: TIMEOUT });
  report.heading = await page.locator('#latency-heading').textContent();
  report.rows = await page.$$eval('[data-testid="latency-row"]', (rows) => rows.map((tr) => {
    const cell = (id) => tr.querySelector(`[data-testid="${id}"]`).textContent;
    return {
      model: tr.dataset.model, candidate: tr.dataset.candidate, total: tr.classList.contains('latency-total'),
      requests: cell('latency-requests'), errors: cell('latency-errors'),
      ttft_p50: cell('latency-ttft-p50'), ttft_p95: cell('latency-ttft-p95'),
      duration_p50: cell('latency-duration-p50'), duration_p95: cell('latency-duration-p95'),
    };
  }));
  const table = page.getByTestId('latency-section');
  report.overflow = await table.evaluate((s) => s.scrollWidth > s.clientWidth + 1);
  await table.screenshot({ path: join(outDir, 'console-latency.png') });
  report.screenshots.push(join(outDir, 'console-latency.png'));
}

await runInBrowser({
  name: 'latency', executablePath, user, password, consoleURL, outDir, report, timeout: TIMEOUT,
}, run);

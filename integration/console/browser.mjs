// What the console's browser scripts share: reading their environment, and running one
// script's steps in a fresh headless Chromium logged in to the console, with page errors
// collected, a screenshot of the page when a step throws, and the JSON report written on
// stdout (exit status 1 when the run failed).

import { chromium } from 'playwright-core';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

// envReader returns env(name, fallback) for a script: a variable that is unset or empty,
// without a fallback, ends the script with status 2, naming it.
export function envReader(script) {
  return (name, fallback) => {
    const v = process.env[name] ?? fallback;
    if (v === undefined || v === '') {
      console.error(`${script}: ${name} is not set`);
      process.exit(2);
    }
    return v;
  };
}

// newReport is the report every script fills: screenshots taken, the page's errors.
export function newReport(extra = {}) {
  return { screenshots: [], page_errors: [], console_errors: [], ...extra };
}

// screenshotTo returns screenshot(page, name): a full-page shot in outDir, listed in the
// report; it answers the file's path.
export function screenshotTo(outDir, report) {
  return async (page, name) => {
    const path = join(outDir, name);
    await page.screenshot({ path, fullPage: true });
    report.screenshots.push(path);
    return path;
  };
}

// runInBrowser runs steps(page) and ends the process with the report. opts: name (for
// the profile and the failure screenshot), executablePath, user, password, consoleURL,
// outDir, report, timeout, clipboard (grant clipboard access to the console's origin),
// before (an async step run first, outside the browser).
export async function runInBrowser(opts, steps) {
  const { report } = opts;
  const shot = screenshotTo(opts.outDir, report);
  const main = async () => {
    if (opts.before) await opts.before();
    const profile = mkdtempSync(join(tmpdir(), `sy-${opts.name}-chromium-`));
    const context = await chromium.launchPersistentContext(profile, {
      executablePath: opts.executablePath, headless: true,
      args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
        '--disable-background-networking', '--disable-component-update', '--disable-sync'],
      httpCredentials: { username: opts.user, password: opts.password },
      viewport: { width: 1366, height: 900 }, locale: 'en-GB', timezoneId: 'UTC',
    });
    try {
      if (opts.clipboard) {
        await context.grantPermissions(['clipboard-read', 'clipboard-write'], { origin: new URL(opts.consoleURL).origin });
      }
      const page = context.pages()[0] ?? await context.newPage();
      page.setDefaultTimeout(opts.timeout);
      page.on('pageerror', (err) => report.page_errors.push(String(err)));
      page.on('console', (msg) => {
        if (msg.type() === 'error') report.console_errors.push(msg.text());
      });
      try {
        await steps(page);
      } catch (err) {
        report.failed = String(err && err.stack ? err.stack : err);
        await shot(page, `${opts.name}-failure.png`).catch(() => {});
      }
    } finally {
      await context.close();
      rmSync(profile, { recursive: true, force: true });
    }
  };
  await main().catch((err) => { report.failed = String(err && err.stack ? err.stack : err); });
  process.stdout.write(JSON.stringify(report) + '\n');
  process.exit(report.failed ? 1 : 0);
}

// Signs people in to the console through a real OpenID provider in headless Chromium,
// each in a fresh browser context (no basic auth, no shared cookies): the console's
// sign-in view, Sign in, the provider's form, the callback, and back to the console.
// Then it reads what the person is shown: who they are, the navigation, the keys and
// projects listed, the buttons that change things, and the session cookie's attributes.
// Per person it may also make a key with "New key" (and try it on the gateway from here:
// the report holds whether it worked, never the secret), type a wrong password first, or
// sign out. The Go test (signin_e2e_test.go) asserts what each role must and must not see.
//
// Environment: SY_CONSOLE_URL, SY_IDP_ISSUER, SY_GATEWAY_URL, SY_PEOPLE (a JSON array of
// {username, password, wrong_password, make_key, sign_out}), SY_OUT_DIR, SY_CHROMIUM.
// Output: one JSON object on stdout.

import { chromium } from 'playwright-core';

import { envReader, newReport, screenshotTo } from './browser.mjs';

const env = envReader('signin.mjs');
const consoleURL = env('SY_CONSOLE_URL');
const issuer = new URL(env('SY_IDP_ISSUER'));
const gatewayURL = env('SY_GATEWAY_URL');
const people = JSON.parse(env('SY_PEOPLE'));
const outDir = env('SY_OUT_DIR');
const executablePath = env('SY_CHROMIUM', '/usr/bin/chromium');
const TIMEOUT = 10000;
const SESSION_COOKIE = 'switchyard_session';
const STATE_COOKIE = 'switchyard_signin';
const NAV = ['keys', 'projects', 'models', 'usage', 'requests', 'connect', 'audit', 'alerts', 'people', 'tokens', 'settings'];
const consoleOrigin = new URL(consoleURL).origin;

const report = newReport({ people: [] });
const shot = screenshotTo(outDir, report);

const onProvider = (u) => u.origin === issuer.origin;
const onConsole = (u) => u.origin === consoleOrigin;

async function sessionCookie(context) {
  return (await context.cookies(consoleURL)).find((c) => c.name === SESSION_COOKIE);
}

// meStatus is what api/me answers this browser, asked from the console's own page.
async function meStatus(page) {
  return page.evaluate(async () => (await fetch('api/me', { cache: 'no-store' })).status);
}

async function signInView(page) {
  await page.locator('#signin-view').waitFor({ state: 'visible', timeout: TIMEOUT });
  return page.locator('#signin-button').isVisible();
}

// submitForm fills the provider's form and submits it, answering the provider's
// response to the post.
async function submitForm(page, who, password) {
  await page.locator('#username').fill(who);
  await page.locator('#password').fill(password);
  const answered = page.waitForResponse((r) => r.request().method() === 'POST' && onProvider(new URL(r.url())), { timeout: TIMEOUT });
  await page.locator('#submit').click();
  return answered;
}

// lists waits for the keys and projects the person may see, and reads them.
async function readLists(page, out) {
  const keysShown = await page.locator('#keys').isVisible();
  if (keysShown) {
    await page.waitForFunction(() => document.getElementById('keys-summary').textContent !== 'Loading keys…', null, { timeout: TIMEOUT });
    out.keys = await page.locator('[data-testid="key-row"] [data-testid="key-name"]').allTextContents();
  }
  if (await page.locator('#projects').isVisible()) {
    await page.waitForFunction(() => document.getElementById('projects-summary').textContent !== 'Loading projects…', null, { timeout: TIMEOUT });
    out.projects = await page.locator('[data-testid="project-row"]').evaluateAll((rows) => rows.map((r) => r.dataset.projectId));
  }
  out.new_key_button = await page.locator('#new-key').isVisible();
  out.create_form = await page.locator('#create-form').isVisible();
  const count = (testid) => page.locator(`[data-testid="${testid}"]:visible`).count();
  out.buttons = {
    rotate: await count('rotate-button'),
    revoke: await count('revoke-button'),
    limits: await count('limits-button'),
    project_members: await count('project-members-button'),
    project_limits: await count('project-limits-button'),
  };
}

// makeKey is the member's two clicks: New key, pick Codex, Create. The secret is tried
// on the gateway from here and only the answer's status is reported.
async function makeKey(page, name, out) {
  const result = {};
  await page.locator('#new-key').click();
  await page.getByTestId('new-key-dialog').waitFor({ state: 'visible', timeout: TIMEOUT });
  await page.locator('#new-key-client').selectOption('codex');
  await page.locator('#new-key-name').fill(name);
  await page.locator('#create-key').click();
  await page.locator('#new-key-result[data-state]').waitFor({ state: 'attached', timeout: TIMEOUT });
  result.state = await page.locator('#new-key-result').getAttribute('data-state');
  const secret = (await page.locator('#key-secret').textContent()).trim();
  const setup = await page.locator('#connect-setup').textContent();
  result.secret_shape = /^sk-sy-[a-z2-7]{52}$/.test(secret);
  result.setup_shown = setup.trim() !== '';
  result.setup_holds_secret = secret !== '' && setup.includes(secret);
  const models = await fetch(gatewayURL + '/v1/models', { headers: { Authorization: 'Bearer ' + secret } });
  result.models_status = models.status;
  await page.locator('#new-key-done').click();
  await page.getByTestId('new-key-dialog').waitFor({ state: 'hidden', timeout: TIMEOUT });
  result.secret_gone_after_close = secret !== '' && !(await page.evaluate((s) => document.documentElement.outerHTML.includes(s), secret));
  const row = page.locator('[data-testid="key-row"]').filter({ has: page.locator('[data-testid="key-name"]', { hasText: name }) });
  await row.waitFor({ timeout: TIMEOUT });
  result.owner_shown = (await row.locator('[data-testid="key-owner"]').textContent().catch(() => '')) || '';
  result.keys_after = await page.locator('[data-testid="key-row"] [data-testid="key-name"]').allTextContents();
  out.new_key = result;
}

async function signOut(page, context, out) {
  const old = (await sessionCookie(context)).value;
  await page.locator('#signout').click();
  const result = { signin_view: await signInView(page) };
  result.me_status = await meStatus(page);
  result.cookie_left = !!(await sessionCookie(context));
  // The cookie the browser no longer holds, sent again from here: the session must have
  // ended in the store, not only in this browser.
  const again = await fetch(new URL('api/me', consoleURL), { headers: { Cookie: SESSION_COOKIE + '=' + old } });
  result.old_cookie_status = again.status;
  out.sign_out = result;
}

async function person(browser, who) {
  const out = { username: who.username, page_errors: [], console_errors: [], failed_responses: [] };
  report.people.push(out);
  const context = await browser.newContext({ viewport: { width: 1366, height: 900 }, locale: 'en-GB', timezoneId: 'UTC' });
  const page = await context.newPage();
  page.setDefaultTimeout(TIMEOUT);
  page.on('pageerror', (err) => out.page_errors.push(String(err)));
  page.on('console', (msg) => { if (msg.type() === 'error') out.console_errors.push(msg.text() + ' at ' + msg.location().url); });
  page.on('response', (r) => {
    const u = new URL(r.url());
    if (r.status() >= 400) out.failed_responses.push(r.status() + ' ' + r.request().method() + ' ' + u.pathname);
    if (onConsole(u) && u.pathname.endsWith('/auth/callback')) out.callback_status = r.status();
  });
  try {
    await page.goto(consoleURL);
    out.signin_view_shown = await signInView(page);

    await page.locator('#signin-button').click();
    await page.waitForURL(onProvider, { timeout: TIMEOUT });
    const at = new URL(page.url());
    out.provider_origin = at.origin;
    out.provider_path = at.pathname;

    if (who.wrong_password) {
      const answer = await submitForm(page, who.username, who.password + '-wrong');
      out.wrong_password = {
        status: answer.status(),
        error_shown: await page.locator('#error').waitFor({ state: 'visible', timeout: TIMEOUT }).then(() => true, () => false),
        on_provider: onProvider(new URL(page.url())),
        session_cookie: !!(await sessionCookie(context)),
      };
    }
    await submitForm(page, who.username, who.password);
    await page.waitForURL(onConsole, { timeout: TIMEOUT });
    const landed = new URL(page.url());
    out.landed_origin = landed.origin;
    out.landed_path = landed.pathname;
    out.landed_search = landed.search;

    if (landed.pathname.endsWith('/auth/callback')) {
      // Refused: the callback's own page. Then the console itself, in this browser.
      const refusal = {
        title: await page.locator('h1').textContent(),
        text: await page.locator('body').innerText(),
        session_cookie: !!(await sessionCookie(context)),
      };
      await page.goto(consoleURL);
      refusal.signin_view = await signInView(page) && !(await page.locator('#main-nav').isVisible());
      refusal.me_status = await meStatus(page);
      out.refusal = refusal;
      return;
    }

    await page.locator('#whoami').waitFor({ state: 'visible', timeout: TIMEOUT });
    out.whoami = await page.locator('#whoami').textContent();
    out.whoami_email = await page.locator('#whoami').getAttribute('data-email');
    out.whoami_roles = await page.locator('#whoami').getAttribute('data-roles');
    out.me_status = await meStatus(page);
    out.nav = [];
    for (const route of NAV) {
      if (await page.locator('#nav-' + route).isVisible()) out.nav.push(route);
    }
    const cookie = await sessionCookie(context);
    out.cookie = {
      present: !!cookie,
      http_only: !!(cookie && cookie.httpOnly),
      same_site: cookie ? cookie.sameSite : '',
      secure: !!(cookie && cookie.secure),
      path: cookie ? cookie.path : '',
      in_document_cookie: await page.evaluate((name) => document.cookie.split(';').some((c) => c.trim().startsWith(name + '=')), SESSION_COOKIE),
      state_cookie_left: (await context.cookies(consoleURL)).some((c) => c.name === STATE_COOKIE),
    };
    await readLists(page, out);
    await shot(page, `signin-${who.username}.png`);
    if (who.make_key) await makeKey(page, who.make_key, out);
    if (who.sign_out) await signOut(page, context, out);
  } catch (err) {
    report.failed = `${who.username}: ` + String(err && err.stack ? err.stack : err);
    await shot(page, `signin-${who.username}-failure.png`).catch(() => {});
  } finally {
    await context.close();
  }
}

async function main() {
  const browser = await chromium.launch({
    executablePath, headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
  try {
    for (const who of people) {
      await person(browser, who);
      if (report.failed) break;
    }
  } finally {
    await browser.close();
  }
}

await main().catch((err) => { report.failed = String(err && err.stack ? err.stack : err); });
process.stdout.write(JSON.stringify(report) + '\n');
process.exit(report.failed ? 1 : 0);

// Switchyard console: keys, projects and their limits, models, usage and the audit
// trail over the console's JSON API.
//
// Rules this file keeps:
// - Every URL is relative ("api/keys"), because the console is mounted under a path
//   that Caddy strips (handle_path /console/*).
// - The Content-Security-Policy allows only this script and the stylesheet: no inline
//   code, no eval, no HTML built from strings. Elements are made with the DOM API and
//   text goes in through textContent.
// - A new secret goes straight from the API's answer into its secret box and is held
//   nowhere else: not in the page's state, not in storage, not in the URL. The box is
//   emptied and removed when dismissed, and every box when the page is left.
'use strict';

(function () {
  const CONSOLE_HEADER = 'X-Switchyard-Console';
  const MODELS_POLL_MS = 15000;

  const state = {
    keys: [],
    models: [],
    modelsLoaded: false,
    rotating: null, // the key the rotate dialog is about
    revoking: null, // the key the revoke dialog is about
    projects: [],
    limitsFor: null, // {kind: 'key'|'project', item} the limits dialog is about
    audit: [], // entries shown, newest first
  };

  const $ = (id) => document.getElementById(id);

  // ---- API -------------------------------------------------------------------------

  async function api(method, path, body) {
    const init = {
      method,
      headers: { Accept: 'application/json' },
      credentials: 'same-origin',
      cache: 'no-store',
    };
    if (method !== 'GET') {
      init.headers['Content-Type'] = 'application/json';
      init.headers[CONSOLE_HEADER] = '1';
      init.body = JSON.stringify(body || {});
    }
    let res;
    try {
      res = await fetch(path, init);
    } catch (err) {
      throw new Error('The gateway could not be reached (' + err.message + ').');
    }
    const text = await res.text();
    let data = null;
    if (text) {
      try {
        data = JSON.parse(text);
      } catch (_) {
        data = null;
      }
    }
    if (!res.ok) {
      let message = 'The gateway answered ' + res.status + (res.statusText ? ' ' + res.statusText : '') + '.';
      if (data && typeof data.error === 'string' && data.error) {
        message = data.error;
      } else if (res.status === 401) {
        message = 'Your console login was not accepted. Reload the page to sign in again.';
      }
      const err = new Error(message);
      err.status = res.status;
      throw err;
    }
    return data || {};
  }

  const keyPath = (id, action) => 'api/keys/' + encodeURIComponent(id) + '/' + action;

  // ---- DOM helpers -------------------------------------------------------------------

  // el('td', {className: 'x', testid: 'y', title: 'z'}, child, 'text', ...)
  function el(tag, props, ...children) {
    const node = document.createElement(tag);
    if (props) {
      for (const [name, value] of Object.entries(props)) {
        if (value === undefined || value === null || value === false) continue;
        if (name === 'className') node.className = value;
        else if (name === 'text') node.textContent = value;
        else if (name === 'testid') node.setAttribute('data-testid', value);
        else if (name === 'dataset') Object.assign(node.dataset, value);
        else if (name === 'onclick') node.addEventListener('click', value);
        else node.setAttribute(name, value === true ? '' : String(value));
      }
    }
    for (const child of children.flat()) {
      if (child === undefined || child === null || child === false) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  // ---- Times -------------------------------------------------------------------------

  const dateFormat = new Intl.DateTimeFormat(undefined, {
    year: 'numeric', month: 'short', day: 'numeric', hour: '2-digit', minute: '2-digit',
  });
  const dayFormat = new Intl.DateTimeFormat(undefined, { year: 'numeric', month: 'short', day: 'numeric' });
  const clockFormat = new Intl.DateTimeFormat(undefined, { hour: '2-digit', minute: '2-digit' });
  const fullFormat = new Intl.DateTimeFormat(undefined, { dateStyle: 'full', timeStyle: 'long' });
  const relFormat = new Intl.RelativeTimeFormat(undefined, { numeric: 'auto' });

  function parseTime(value) {
    if (!value || value.startsWith('0001-01-01')) return null;
    const d = new Date(value);
    return Number.isNaN(d.getTime()) ? null : d;
  }

  function relative(date) {
    const seconds = (date.getTime() - Date.now()) / 1000;
    const abs = Math.abs(seconds);
    if (abs < 45) return seconds <= 0 ? 'just now' : 'in a moment';
    const steps = [
      [3600, 60, 'minute'],
      [86400, 3600, 'hour'],
      [86400 * 45, 86400, 'day'],
      [86400 * 365, 86400 * 30, 'month'],
      [Infinity, 86400 * 365, 'year'],
    ];
    for (const [limit, size, unit] of steps) {
      if (abs < limit) return relFormat.format(Math.round(seconds / size), unit);
    }
    return '';
  }

  // shortDate is the day, or "Today" and the time of day (the full time is in the title).
  function shortDate(date) {
    if (date.toDateString() === new Date().toDateString()) return 'Today, ' + clockFormat.format(date);
    return dayFormat.format(date);
  }

  // timeNode shows a time as a date, relative to now, or both, with the full time on hover.
  function timeNode(date, style) {
    const node = el('time', { datetime: date.toISOString(), title: fullFormat.format(date) });
    if (style === 'relative') {
      node.textContent = relative(date);
    } else if (style === 'both') {
      node.append(el('span', { text: shortDate(date) }), el('span', { className: 'sub', text: relative(date) }));
    } else {
      node.textContent = shortDate(date);
    }
    return node;
  }

  // ---- Messages ----------------------------------------------------------------------

  let statusTimer = 0;

  function showError(message) {
    $('notice').querySelector('.notice-text').textContent = message;
    $('notice').hidden = false;
  }

  function clearError() {
    $('notice').hidden = true;
    $('notice').querySelector('.notice-text').textContent = '';
  }

  function say(message) {
    const line = $('status');
    line.textContent = message;
    clearTimeout(statusTimer);
    statusTimer = setTimeout(() => { line.textContent = ''; }, 10000);
  }

  // ---- Labels ------------------------------------------------------------------------

  const PROTOCOLS = {
    family_a: ['Family A', 'OpenAI-style: chat completions and responses'],
    family_b: ['Family B', 'Anthropic-style: messages'],
  };

  function protocolChip(token) {
    const [label, title] = PROTOCOLS[token] || [token, token];
    return el('span', { className: 'chip chip-proto proto-' + token.replace(/[^a-z0-9_-]/gi, ''), title, text: label });
  }

  const STATUSES = {
    active: 'Active',
    expired: 'Expired',
    revoked: 'Revoked',
  };

  const CIRCUITS = {
    closed: ['Closed', 'Healthy: requests go to this candidate in its turn.'],
    half_open: ['Half-open', 'Recovering: a few trial requests are let through to see whether it works again.'],
    open: ['Open', 'Failing: the candidate is skipped until its cooldown ends.'],
  };

  // ---- Keys --------------------------------------------------------------------------

  async function loadKeys() {
    try {
      const data = await api('GET', 'api/keys');
      state.keys = Array.isArray(data.keys) ? data.keys : [];
      renderKeys();
      renderProjects();
      renderUsageKeyChoices();
      renderConnectKeyChoices();
    } catch (err) {
      $('keys-summary').textContent = 'The keys could not be loaded.';
      showError(err.message);
    }
  }

  function renderKeys() {
    const body = $('keys-body');
    const byId = new Map(state.keys.map((k) => [k.id, k]));
    body.replaceChildren(...state.keys.map((k) => keyRow(k, byId)));
    $('keys-empty').hidden = state.keys.length > 0;

    const counts = { active: 0, expired: 0, revoked: 0 };
    for (const k of state.keys) counts[k.status] = (counts[k.status] || 0) + 1;
    const parts = [];
    for (const s of ['active', 'expired', 'revoked']) {
      if (counts[s]) parts.push(counts[s] + ' ' + s);
    }
    const n = state.keys.length;
    $('keys-summary').textContent = n === 0
      ? 'No keys yet.'
      : n + (n === 1 ? ' key' : ' keys') + ': ' + parts.join(', ') + '. Newest first.';
  }

  function keyRow(k, byId) {
    const status = STATUSES[k.status] ? k.status : 'active';
    const created = parseTime(k.created_at);
    const lastUsed = parseTime(k.last_used_at);
    const expires = parseTime(k.expires_at);
    const revoked = parseTime(k.revoked_at);

    const nameCell = el('td', { className: 'key-name' },
      el('span', { className: 'name', testid: 'key-name', text: k.name }));
    if (k.replaced_by) {
      const next = byId.get(k.replaced_by);
      nameCell.append(el('span', { className: 'sub' },
        'replaced by ', el('code', { text: next ? next.prefix + '…' : k.replaced_by })));
    }

    const statusCell = el('td', { className: 'key-status' },
      el('span', { className: 'badge badge-' + status, testid: 'key-status', text: STATUSES[status] }));
    if (status === 'revoked' && revoked) {
      statusCell.append(el('span', { className: 'sub' }, timeNode(revoked, 'relative')));
    } else if (status === 'active' && k.replaced_by && expires) {
      statusCell.append(el('span', { className: 'sub' }, 'grace ends ', timeNode(expires, 'relative')));
    }

    const modelsCell = el('td', { className: 'key-models', testid: 'key-models' });
    if (Array.isArray(k.models) && k.models.length) {
      modelsCell.append(el('span', { className: 'chips' }, k.models.map((m) => el('span', { className: 'chip', text: m }))));
    } else {
      modelsCell.append(el('span', { className: 'muted', text: 'All models' }));
    }

    const actions = el('td', { className: 'key-actions' });
    if (status === 'active') {
      actions.append(
        el('button', {
          type: 'button', className: 'btn btn-small', testid: 'limits-button',
          'aria-label': 'Limits and project of key ' + k.name, onclick: () => openLimits('key', k),
        }, 'Limits…'),
        el('button', {
          type: 'button', className: 'btn btn-small', testid: 'rotate-button',
          'aria-label': 'Rotate key ' + k.name, onclick: () => openRotate(k),
        }, 'Rotate…'),
        el('button', {
          type: 'button', className: 'btn btn-small btn-danger-quiet', testid: 'revoke-button',
          'aria-label': 'Revoke key ' + k.name, onclick: () => openRevoke(k),
        }, 'Revoke…'),
      );
    }

    return el('tr', {
      className: 'is-' + status, testid: 'key-row',
      dataset: { keyId: k.id, status, prefix: k.prefix || '' },
    },
    nameCell,
    el('td', {}, el('code', { className: 'prefix', testid: 'key-prefix', title: 'The first characters of the secret', text: (k.prefix || '') + '…' })),
    statusCell,
    el('td', { className: 'key-project', testid: 'key-project', dataset: { project: k.project_id || '' } },
      k.project_id ? projectLabel(k.project_id) : el('span', { className: 'muted', text: '—' })),
    el('td', { testid: 'key-spend' }, spendNode(k.standing, k.limits)),
    modelsCell,
    el('td', { testid: 'key-created' }, created ? timeNode(created) : el('span', { className: 'muted', text: '—' })),
    el('td', { testid: 'key-last-used' }, lastUsed ? timeNode(lastUsed, 'relative') : el('span', { className: 'muted', text: 'Never' })),
    el('td', { testid: 'key-expires' }, expires ? timeNode(expires, 'both') : el('span', { className: 'muted', text: 'Never' })),
    actions);
  }

  // ---- Create ------------------------------------------------------------------------

  function selectedModels() {
    return Array.from($('create-models-list').querySelectorAll('input[type=checkbox]:checked'), (box) => box.value);
  }

  function renderModelChoices() {
    const list = $('create-models-list');
    const checked = new Set(selectedModels());
    if (state.models.length === 0) {
      list.replaceChildren(el('p', { className: 'muted', text: 'This gateway has no models configured.' }));
      return;
    }
    list.replaceChildren(...state.models.map((m, i) => {
      const id = 'create-model-' + i;
      const label = el('label', { for: id, className: 'check' },
        el('input', { type: 'checkbox', id, value: m.id, name: 'models', testid: 'model-option', checked: checked.has(m.id) }),
        el('span', { className: 'check-id', text: m.id }));
      if (m.display_name && m.display_name !== m.id) {
        label.append(el('span', { className: 'check-sub', text: m.display_name }));
      }
      return label;
    }));
  }

  function lifetime() {
    const choice = $('create-lifetime').value;
    if (choice !== 'custom') return choice;
    return $('create-lifetime-custom').value.trim();
  }

  function showCreateError(message, focus) {
    const box = $('create-error');
    box.textContent = message;
    box.hidden = false;
    if (focus) focus.focus();
  }

  async function onCreate(event) {
    event.preventDefault();
    const form = $('create-form');
    const nameInput = $('create-name');
    const name = nameInput.value.trim();
    $('create-error').hidden = true;
    nameInput.removeAttribute('aria-invalid');
    if (!name) {
      nameInput.setAttribute('aria-invalid', 'true');
      showCreateError('Give the key a name.', nameInput);
      return;
    }
    const body = { name };
    if ($('create-project').value) body.project_id = $('create-project').value;
    const models = selectedModels();
    if (models.length) body.models = models;
    const life = lifetime();
    if ($('create-lifetime').value === 'custom' && !life) {
      showCreateError('Type a lifetime such as 12h or 45d, or choose one from the list.', $('create-lifetime-custom'));
      return;
    }
    if (life) body.expires_in = life;

    const submit = form.querySelector('button[type=submit]');
    submit.disabled = true;
    clearError();
    try {
      const data = await api('POST', 'api/keys', body);
      form.reset();
      $('create-lifetime-custom-wrap').hidden = true;
      showSecret(data.secret, 'Secret for the new key “' + data.key.name + '”', null);
      say('Key “' + data.key.name + '” created.');
      await Promise.all([loadKeys(), loadAudit()]);
    } catch (err) {
      showCreateError(err.message, null);
    } finally {
      submit.disabled = false;
    }
  }

  // ---- Secrets, each shown once ---------------------------------------------------------

  let secretCount = 0;

  // showSecret adds a box with a new secret above any still shown (creating or rotating
  // another key must not take away one the operator has not copied yet).
  function showSecret(secret, title, extra) {
    const box = $('secret-template').content.firstElementChild.cloneNode(true);
    const titleId = 'secret-title-' + (++secretCount);
    const heading = box.querySelector('[data-testid=secret-title]');
    heading.id = titleId;
    heading.textContent = title;
    box.setAttribute('aria-labelledby', titleId);
    box.querySelector('[data-testid=secret-value]').textContent = secret;
    if (extra) {
      const p = box.querySelector('[data-testid=secret-extra]');
      p.textContent = extra;
      p.hidden = false;
    }
    box.addEventListener('click', (event) => {
      const action = event.target.closest('[data-action]');
      if (!action) return;
      if (action.dataset.action === 'copy') copySecret(box);
      if (action.dataset.action === 'dismiss') {
        removeSecret(box);
        const next = $('secret-slot').querySelector('[data-action=copy]');
        if (next) next.focus();
        else $('keys-heading').focus();
        say('The secret was hidden. It cannot be shown again.');
      }
    });
    $('secret-slot').prepend(box);
    box.scrollIntoView({ block: 'nearest', behavior: 'smooth' });
    box.querySelector('[data-action=copy]').focus({ preventScroll: true });
  }

  // removeSecret empties a secret box and takes it out of the page.
  function removeSecret(box) {
    const value = box.querySelector('.secret-value');
    const selection = window.getSelection();
    if (selection && selection.anchorNode && box.contains(selection.anchorNode)) selection.removeAllRanges();
    value.textContent = '';
    box.remove();
  }

  function hideAllSecrets() {
    for (const box of $('secret-slot').querySelectorAll('.secret')) removeSecret(box);
  }

  function selectText(node) {
    const range = document.createRange();
    range.selectNodeContents(node);
    const selection = window.getSelection();
    selection.removeAllRanges();
    selection.addRange(range);
  }

  async function copySecret(box) {
    const value = box.querySelector('.secret-value');
    const note = box.querySelector('.secret-copied');
    if (navigator.clipboard && window.isSecureContext) {
      try {
        await navigator.clipboard.writeText(value.textContent);
        note.textContent = 'Copied to the clipboard.';
        box.classList.add('is-copied');
        return;
      } catch (_) {
        // Fall through: select the text so the operator can copy it by hand.
      }
    }
    selectText(value);
    let copied = false;
    try {
      copied = document.execCommand('copy');
    } catch (_) {
      copied = false;
    }
    if (copied) {
      note.textContent = 'Copied to the clipboard.';
      box.classList.add('is-copied');
    } else {
      note.textContent = 'This browser did not allow copying. The secret is selected: press Ctrl+C (⌘C on a Mac) to copy it.';
    }
  }

  // ---- Rotate and revoke ------------------------------------------------------------------

  function openRotate(k) {
    state.rotating = k;
    $('rotate-key-name').textContent = k.name + ' (' + k.prefix + '…)';
    const dialog = $('rotate-dialog');
    dialog.returnValue = '';
    dialog.showModal();
    $('rotate-grace').focus();
  }

  async function onRotateClosed() {
    const k = state.rotating;
    state.rotating = null;
    if (!k || $('rotate-dialog').returnValue !== 'rotate') return;
    const grace = $('rotate-grace').value;
    clearError();
    try {
      const data = await api('POST', keyPath(k.id, 'rotate'), { grace });
      const old = data.replaced || {};
      const ends = parseTime(old.expires_at);
      let extra = 'The old key ' + (old.prefix || k.prefix) + '… was revoked.';
      if (old.status === 'active' && ends) {
        extra = 'The old key ' + (old.prefix || k.prefix) + '… keeps working until ' + dateFormat.format(ends) + ' (' + relative(ends) + ').';
      }
      showSecret(data.secret, 'New secret for “' + data.key.name + '”', extra);
      say('Key “' + data.key.name + '” rotated.');
    } catch (err) {
      showError('Rotating “' + k.name + '” failed: ' + err.message);
    }
    await Promise.all([loadKeys(), loadAudit()]);
  }

  function openRevoke(k) {
    state.revoking = k;
    $('revoke-key-name').textContent = k.name;
    $('revoke-key-prefix').textContent = k.prefix;
    const dialog = $('revoke-dialog');
    dialog.returnValue = '';
    dialog.showModal();
    $('revoke-cancel').focus(); // the safe choice has the focus
  }

  async function onRevokeClosed() {
    const k = state.revoking;
    state.revoking = null;
    if (!k || $('revoke-dialog').returnValue !== 'revoke') return;
    clearError();
    try {
      await api('POST', keyPath(k.id, 'revoke'), {});
      say('Key “' + k.name + '” revoked. It no longer works.');
    } catch (err) {
      showError('Revoking “' + k.name + '” failed: ' + err.message);
    }
    await Promise.all([loadKeys(), loadAudit()]);
  }

  // ---- Limits: spend bars ------------------------------------------------------------
  //
  // Amounts come from the API as exact integers of micro-units (spent_micros, ...) and
  // are written with formatCost; budgets as operators write them ("50/month").

  const PERIODS = { day: 'today (UTC)', month: 'this month (UTC)', total: 'in total' };

  // budgetMicros reads "50/month" into micro-units exactly (the API checked it).
  function budgetMicros(budget) {
    const amount = String(budget || '').split('/')[0];
    const [whole, frac = ''] = amount.split('.');
    if (!/^\d*$/.test(whole) || !/^\d{0,6}$/.test(frac)) return 0n;
    return BigInt(whole || '0') * MICROS + BigInt((frac + '000000').slice(0, 6));
  }

  function periodOf(budget) {
    return String(budget || '').split('/')[1] || '';
  }

  // limitsSummary says a policy in a few words: "50/month · 60 rpm · 4 at once".
  function limitsSummary(l) {
    if (!l) return '';
    const parts = [];
    if (l.budget) parts.push(l.budget);
    if (l.rpm) parts.push(count(l.rpm) + ' req/min');
    if (l.tpm) parts.push(count(l.tpm) + ' tokens/min');
    if (l.concurrency) parts.push(count(l.concurrency) + ' at once');
    for (const [m, v] of Object.entries(l.models || {}).sort()) {
      const sub = limitsSummary(v);
      if (sub) parts.push(m + ': ' + sub);
    }
    return parts.join(' · ');
  }

  // spendNode shows a key's or a project's spend this period: a bar against its budget
  // (the settled part, then the part held by requests in flight), the figures, and what
  // is left of its per-minute rates.
  function spendNode(standing, limits) {
    const box = el('div', { className: 'spend', testid: 'spend' });
    if (!standing) {
      box.append(el('span', { className: 'muted limits-text', testid: 'limits-summary', text: limitsSummary(limits) || '—' }));
      return box;
    }
    const spent = BigInt(standing.spent_micros || 0);
    const reserved = BigInt(standing.reserved_micros || 0);
    box.dataset.spentMicros = String(spent);
    box.dataset.reservedMicros = String(reserved);
    if (standing.budget) {
      const budget = budgetMicros(standing.budget);
      box.dataset.budget = standing.budget;
      const pct = (v) => (budget > 0n ? Math.min(100, Number((v * 10000n) / budget) / 100) : (v > 0n ? 100 : 0));
      const used = spent + reserved;
      if (used >= budget) box.classList.add('is-full');
      else if (budget > 0n && used * 10n >= budget * 8n) box.classList.add('is-near');
      const meter = el('div', {
        className: 'meter', role: 'meter', 'aria-label': 'Spend ' + (PERIODS[periodOf(standing.budget)] || ''),
        'aria-valuemin': '0', 'aria-valuemax': costDecimal(budget), 'aria-valuenow': costDecimal(spent),
        'aria-valuetext': formatCost(spent) + ' of ' + formatCost(budget) + ' spent, ' + formatCost(reserved) + ' reserved',
      });
      const spentBar = el('span', { className: 'meter-spent' });
      const reservedBar = el('span', { className: 'meter-reserved', testid: 'spend-reserved' });
      // Through the CSSOM: the page's CSP allows no style attributes.
      spentBar.style.width = pct(spent) + '%';
      reservedBar.style.left = pct(spent) + '%';
      reservedBar.style.width = Math.max(0, Math.min(100 - pct(spent), pct(reserved))) + '%';
      meter.append(spentBar, reservedBar);
      let text = formatCost(spent) + ' of ' + formatCost(budget) + ' ' + (PERIODS[periodOf(standing.budget)] || '');
      if (reserved > 0n) text += ', ' + formatCost(reserved) + ' reserved';
      const reset = parseTime(standing.reset_at);
      box.append(el('span', { className: 'spend-text', testid: 'spend-text', text }), meter);
      if (reset) box.append(el('span', { className: 'sub' }, 'resets ', timeNode(reset, 'relative')));
    } else {
      let text = formatCost(spent) + ' this month, no budget';
      if (reserved > 0n) text += ', ' + formatCost(reserved) + ' reserved';
      box.append(el('span', { className: 'spend-text', testid: 'spend-text', text }));
    }
    const rates = [];
    if (standing.requests) rates.push(count(standing.requests.remaining) + '/' + count(standing.requests.limit) + ' requests');
    if (standing.tokens) rates.push(count(standing.tokens.remaining) + '/' + count(standing.tokens.limit) + ' tokens');
    if (rates.length) box.append(el('span', { className: 'rates', testid: 'spend-rates', text: rates.join(', ') + ' left this minute' }));
    if (standing.concurrency) box.append(el('span', { className: 'rates', text: count(standing.in_flight) + ' of ' + count(standing.concurrency) + ' in flight' }));
    const limitsText = limitsSummary(limits);
    if (limitsText) box.append(el('span', { className: 'sub limits-text', testid: 'limits-summary', text: limitsText }));
    return box;
  }

  // ---- Projects ------------------------------------------------------------------------

  function projectLabel(id) {
    const p = state.projects.find((x) => x.id === id);
    const node = el('span', { className: 'chip', text: id });
    if (p && p.name && p.name !== id) node.title = p.name;
    return node;
  }

  async function loadProjects() {
    try {
      const data = await api('GET', 'api/projects');
      state.projects = Array.isArray(data.projects) ? data.projects : [];
      $('projects').dataset.state = 'ready';
    } catch (err) {
      state.projects = [];
      $('projects').dataset.state = 'error';
      $('projects-summary').textContent = 'The projects could not be loaded: ' + err.message;
      renderProjectChoices();
      return;
    }
    renderProjects();
    renderProjectChoices();
    renderKeys();
  }

  function renderProjectChoices() {
    for (const id of ['create-project', 'limits-project']) {
      const select = $(id);
      const chosen = select.value;
      select.replaceChildren(el('option', { value: '', text: 'No project' }),
        ...state.projects.map((p) => el('option', { value: p.id, text: p.name && p.name !== p.id ? p.id + ' (' + p.name + ')' : p.id })));
      if (state.projects.some((p) => p.id === chosen)) select.value = chosen;
    }
  }

  function renderProjects() {
    if ($('projects').dataset.state === 'error') return;
    const n = state.projects.length;
    $('projects-summary').textContent = n === 0
      ? 'No projects yet. A project groups keys under shared limits.'
      : n + (n === 1 ? ' project' : ' projects') + '. A request must fit the limits of its key and of its project.';
    $('projects-empty').hidden = n > 0;
    $('projects-body').replaceChildren(...state.projects.map(projectRow));
  }

  function projectRow(p) {
    const keys = state.keys.filter((k) => k.project_id === p.id);
    const keysCell = el('td', { className: 'project-keys', testid: 'project-keys' });
    if (keys.length) {
      keysCell.append(el('span', { className: 'chips' }, keys.map((k) => el('span', {
        className: 'chip' + (k.status === 'active' ? '' : ' muted'), testid: 'project-key', dataset: { keyId: k.id },
        title: (STATUSES[k.status] || k.status) + ', ' + k.prefix + '…', text: k.name,
      }))));
    } else {
      keysCell.append(el('span', { className: 'muted', text: 'No keys' }));
    }
    return el('tr', { testid: 'project-row', dataset: { projectId: p.id } },
      el('td', { className: 'key-name' },
        el('span', { className: 'name', testid: 'project-name', text: p.name || p.id }),
        el('span', { className: 'sub' }, el('code', { testid: 'project-id', text: p.id }))),
      el('td', { testid: 'project-spend' }, spendNode(p.standing, p.limits)),
      el('td', { className: 'limits-text', testid: 'project-limits', text: limitsSummary(p.limits) || 'None' }),
      keysCell,
      el('td', { className: 'key-actions' }, el('button', {
        type: 'button', className: 'btn btn-small', testid: 'project-limits-button',
        'aria-label': 'Limits of project ' + p.id, onclick: () => openLimits('project', p),
      }, 'Limits…')));
  }

  // wholeNumber reads a rate field: empty is 0 (no limit); else a whole number.
  function wholeNumber(input, what) {
    const v = input.value.trim().replace(/[\s,_]/g, '');
    if (v === '') return 0;
    if (!/^\d{1,15}$/.test(v)) {
      input.setAttribute('aria-invalid', 'true');
      throw Object.assign(new Error(what + ': a whole number, or empty for no limit.'), { field: input });
    }
    return Number(v);
  }

  // readLimits reads the budget and rate fields named prefix-budget, prefix-rpm, ...
  function readLimits(prefix) {
    for (const f of ['budget', 'rpm', 'tpm', 'concurrency']) $(prefix + '-' + f).removeAttribute('aria-invalid');
    const l = {};
    const budget = $(prefix + '-budget').value.trim();
    if (budget) l.budget = budget;
    const rpm = wholeNumber($(prefix + '-rpm'), 'Requests per minute');
    const tpm = wholeNumber($(prefix + '-tpm'), 'Tokens per minute');
    const concurrency = wholeNumber($(prefix + '-concurrency'), 'Concurrent requests');
    if (rpm) l.rpm = rpm;
    if (tpm) l.tpm = tpm;
    if (concurrency) l.concurrency = concurrency;
    return l;
  }

  function showFormError(id, message, focus) {
    const box = $(id);
    box.textContent = message;
    box.hidden = false;
    if (focus) focus.focus();
  }

  async function onCreateProject(event) {
    event.preventDefault();
    const form = $('project-form');
    $('project-error').hidden = true;
    const idInput = $('project-id');
    idInput.removeAttribute('aria-invalid');
    const id = idInput.value.trim();
    if (!id) {
      idInput.setAttribute('aria-invalid', 'true');
      showFormError('project-error', 'Give the project an id, such as platform.', idInput);
      return;
    }
    let limits;
    try {
      limits = readLimits('project');
    } catch (err) {
      showFormError('project-error', err.message, err.field);
      return;
    }
    const body = { id, name: $('project-name').value.trim() };
    if (Object.keys(limits).length) body.limits = limits;
    const submit = form.querySelector('button[type=submit]');
    submit.disabled = true;
    clearError();
    try {
      const data = await api('POST', 'api/projects', body);
      form.reset();
      say('Project “' + data.project.id + '” created.');
      await Promise.all([loadProjects(), loadAudit()]);
    } catch (err) {
      showFormError('project-error', err.message, null);
    } finally {
      submit.disabled = false;
    }
  }

  // ---- The limits dialog: a key's limits and project, or a project's limits -------------

  function openLimits(kind, item) {
    state.limitsFor = { kind, item };
    const l = item.limits || {};
    $('limits-title').textContent = kind === 'key' ? 'Limits of key “' + item.name + '”' : 'Limits of project “' + (item.name || item.id) + '”';
    $('limits-intro').textContent = kind === 'key'
      ? 'What this key may use. Its requests must also fit its project\'s limits.'
      : 'What the keys of this project may use together. Each request must also fit its key\'s own limits.';
    $('limits-project-field').hidden = kind !== 'key';
    if (kind === 'key') {
      renderProjectChoices();
      $('limits-project').value = item.project_id || '';
    }
    $('limits-budget').value = l.budget || '';
    $('limits-rpm').value = l.rpm ? String(l.rpm) : '';
    $('limits-tpm').value = l.tpm ? String(l.tpm) : '';
    $('limits-concurrency').value = l.concurrency ? String(l.concurrency) : '';
    const models = state.models.map((m) => m.id);
    for (const m of Object.keys(l.models || {})) if (!models.includes(m)) models.push(m);
    $('limits-models-list').replaceChildren(...models.flatMap((m, i) => {
      const id = 'limits-model-' + i;
      const v = (l.models || {})[m] || {};
      return [
        el('label', { for: id, text: m }),
        el('input', { type: 'text', id, spellcheck: 'false', placeholder: 'no budget of its own', value: v.budget || '', testid: 'limits-model-budget', dataset: { model: m } }),
      ];
    }));
    $('limits-error').hidden = true;
    $('limits-dialog').showModal();
    $('limits-budget').focus();
  }

  async function onSaveLimits(event) {
    event.preventDefault();
    const target = state.limitsFor;
    if (!target) return;
    const { kind, item } = target;
    $('limits-error').hidden = true;
    let limits;
    try {
      limits = readLimits('limits');
    } catch (err) {
      showFormError('limits-error', err.message, err.field);
      return;
    }
    // Per-model budgets; a model's other limits (set through the API) are kept.
    const models = {};
    for (const [m, v] of Object.entries((item.limits || {}).models || {})) models[m] = Object.assign({}, v);
    for (const input of $('limits-models-list').querySelectorAll('input[data-model]')) {
      const m = input.dataset.model;
      const budget = input.value.trim();
      const v = Object.assign({}, models[m] || {});
      delete v.budget;
      if (budget) v.budget = budget;
      if (Object.keys(v).length) models[m] = v;
      else delete models[m];
    }
    if (Object.keys(models).length) limits.models = models;

    const save = $('limits-form').querySelector('button[type=submit]');
    save.disabled = true;
    clearError();
    try {
      const base = kind === 'key' ? keyPath(item.id, '') : 'api/projects/' + encodeURIComponent(item.id) + '/';
      await api('PUT', base + 'limits', limits);
      if (kind === 'key' && $('limits-project').value !== (item.project_id || '')) {
        await api('PUT', base + 'project', { project_id: $('limits-project').value });
      }
      state.limitsFor = null;
      $('limits-dialog').close('saved');
      say((kind === 'key' ? 'Key “' + item.name + '”' : 'Project “' + item.id + '”') + ' saved.');
      await Promise.all([loadKeys(), loadProjects(), loadAudit()]);
    } catch (err) {
      showFormError('limits-error', err.message, null);
    } finally {
      save.disabled = false;
    }
  }

  // ---- Audit trail ---------------------------------------------------------------------

  const ACTIONS = {
    'key.create': 'Created key',
    'key.rotate': 'Rotated key',
    'key.revoke': 'Revoked key',
    'key.limits': 'Set key limits',
    'key.project': 'Moved key',
    'project.create': 'Created project',
    'project.limits': 'Set project limits',
    'candidate.reset': 'Reset candidate health',
  };

  let auditSeq = 0;

  // loadAudit reads the newest page, or with older set, the page before the last entry
  // shown.
  async function loadAudit(older) {
    const seq = ++auditSeq;
    const params = new URLSearchParams({ limit: '50' });
    if (older && state.audit.length) params.set('before', String(state.audit[state.audit.length - 1].id));
    try {
      const data = await api('GET', 'api/audit?' + params.toString());
      if (seq !== auditSeq) return;
      const entries = Array.isArray(data.entries) ? data.entries : [];
      state.audit = older ? state.audit.concat(entries) : entries;
      $('audit-more').hidden = !data.more;
      $('audit-note').hidden = state.audit.length > 0;
      $('audit-note').textContent = 'No changes recorded yet.';
      $('audit').dataset.state = 'ready';
      renderAudit();
    } catch (err) {
      if (seq !== auditSeq) return;
      $('audit').dataset.state = 'error';
      $('audit-note').hidden = false;
      $('audit-note').textContent = 'The audit trail could not be loaded: ' + err.message;
    }
  }

  function auditTarget(e) {
    if (e.action.startsWith('key.')) {
      const k = state.keys.find((x) => x.id === e.target);
      return el('span', {}, k ? el('span', { text: k.name }) : null, el('code', { className: k ? 'sub' : '', text: e.target }));
    }
    return el('code', { text: e.target });
  }

  function renderAudit() {
    $('audit-body').replaceChildren(...state.audit.map((e) => {
      const at = parseTime(e.at);
      return el('tr', { testid: 'audit-row', dataset: { id: String(e.id), action: e.action, target: e.target, actor: e.actor } },
        el('td', { className: 'audit-when' }, at ? timeNode(at, 'both') : '—'),
        el('td', { className: 'audit-actor', testid: 'audit-actor', text: e.actor }),
        el('td', { testid: 'audit-action', text: ACTIONS[e.action] || e.action }),
        el('td', { testid: 'audit-target' }, auditTarget(e)),
        el('td', { className: 'audit-detail', testid: 'audit-detail', text: e.detail || '' }));
    }));
  }

  // ---- Alerts (read-only: webhooks are configured in the Caddyfile) ------------------

  let alertsSeq = 0;

  async function loadAlerts() {
    const seq = ++alertsSeq;
    try {
      const data = await api('GET', 'api/alerts');
      if (seq !== alertsSeq) return;
      renderAlerts(data);
      $('alerts').dataset.state = 'ready';
    } catch (err) {
      if (seq !== alertsSeq) return;
      $('alerts').dataset.state = 'error';
      $('alerts-note').hidden = false;
      $('alerts-note').textContent = 'The alerts could not be loaded: ' + err.message;
    }
  }

  function renderAlerts(data) {
    const hooks = Array.isArray(data.webhooks) ? data.webhooks : [];
    const rows = Array.isArray(data.deliveries) ? data.deliveries : [];
    const note = $('alerts-note');
    note.hidden = data.configured && rows.length > 0;
    note.textContent = data.configured ? 'No alert sent yet.' : 'No alerts are configured (see Alerts in docs/operations.md).';
    // Only a webhook's scheme and host are ever sent to the page.
    $('alerts-webhooks').replaceChildren(...hooks.map((h) => el('li', { testid: 'alerts-webhook' },
      el('code', { text: h.endpoint }), el('span', { className: 'muted', text: ' ' + h.format + ': ' + (h.events || []).join(', ') }))));
    $('alerts-body').replaceChildren(...rows.map((d) => {
      const at = parseTime(d.sent_at || d.created_at);
      let stateText = d.state;
      if (d.state !== 'sent' && d.last_error) stateText += ' (' + d.last_error + ')';
      return el('tr', { testid: 'alerts-row', dataset: { id: String(d.id), kind: d.kind, state: d.state } },
        el('td', { className: 'audit-when' }, at ? timeNode(at, 'both') : '—'),
        el('td', {}, el('code', { text: d.webhook })),
        el('td', { testid: 'alerts-text', text: d.text }),
        el('td', { testid: 'alerts-state', text: stateText }),
        el('td', { text: String(d.attempts) }));
    }));
  }

  // ---- Models ------------------------------------------------------------------------

  async function loadModels(quiet) {
    try {
      const data = await api('GET', 'api/models');
      const models = Array.isArray(data.models) ? data.models : [];
      const idsBefore = state.models.map((m) => m.id).join('\n');
      state.models = models;
      renderModels();
      if (!state.modelsLoaded || idsBefore !== models.map((m) => m.id).join('\n')) {
        renderModelChoices();
        renderUsageModelChoices();
        loadConnect();
        renderUsage(); // the models' colours follow their configured order
      }
      state.modelsLoaded = true;
    } catch (err) {
      if (!state.modelsLoaded) {
        $('create-models-list').replaceChildren(el('p', { className: 'muted', text: 'The models could not be loaded; the key will allow every model.' }));
        $('models-list').replaceChildren(el('p', { className: 'empty', text: 'The models could not be loaded.' }));
      }
      if (!quiet) showError(err.message);
    }
  }

  function renderModels() {
    const list = $('models-list');
    if (state.models.length === 0) {
      list.replaceChildren(el('p', { className: 'empty', text: 'This gateway has no models configured.' }));
      return;
    }
    list.replaceChildren(...state.models.map(modelCard));
  }

  function modelCard(m) {
    const caps = Object.entries(m.capabilities || {}).filter(([, on]) => on).map(([tag]) => tag).sort();
    const titleId = 'model-' + m.id.replace(/[^a-zA-Z0-9_-]/g, '_');
    const head = el('div', { className: 'model-head' },
      el('div', {},
        el('h3', { id: titleId, testid: 'model-id', text: m.id }),
        m.display_name && m.display_name !== m.id ? el('p', { className: 'muted model-display', text: m.display_name }) : null),
      el('dl', { className: 'model-facts' },
        el('div', {}, el('dt', { text: 'Protocols' }),
          el('dd', { className: 'chips', testid: 'model-protocols' }, (m.protocols || []).map(protocolChip))),
        el('div', {}, el('dt', { text: 'Limits' }),
          el('dd', { testid: 'model-limits', dataset: { contextWindow: String(m.context_window || 0), maxOutputTokens: String(m.max_output_tokens || 0) } },
            limitsText(m))),
        el('div', {}, el('dt', { text: 'Capabilities' }),
          el('dd', { className: 'chips', testid: 'model-capabilities' },
            caps.length ? caps.map((tag) => el('span', { className: 'chip chip-cap', text: tag })) : el('span', { className: 'muted', text: 'none' })))));

    const candidates = (m.candidates || []).slice().sort((a, b) => a.priority - b.priority);
    const table = el('table', { className: 'candidates', testid: 'candidates-table' },
      el('caption', { className: 'visually-hidden', text: 'Candidates of ' + m.id + ', in priority order' }),
      el('thead', {}, el('tr', {},
        el('th', { scope: 'col', text: 'Candidate' }),
        el('th', { scope: 'col', text: 'Protocol' }),
        el('th', { scope: 'col', className: 'num', text: 'Priority' }),
        el('th', { scope: 'col', text: 'Circuit' }),
        el('th', { scope: 'col', text: 'Health' }))),
      el('tbody', {}, candidates.map((c) => {
        const [label, help] = CIRCUITS[c.state] || [c.state, ''];
        return el('tr', { testid: 'candidate-row', dataset: { candidate: c.name, state: c.state } },
          el('th', { scope: 'row', className: 'cand-name', text: c.name }),
          el('td', {}, protocolChip(c.protocol)),
          el('td', { className: 'num', text: String(c.priority) }),
          el('td', {}, el('span', {
            className: 'state state-' + String(c.state).replace(/[^a-z_]/g, ''),
            testid: 'candidate-state', title: help, text: label,
          })),
          el('td', { className: 'key-actions' }, el('button', {
            type: 'button', className: 'btn btn-small', testid: 'candidate-reset',
            title: 'Closes its circuit and clears its cooldown, any pause its upstream asked for, and its demotion, on this gateway. Recorded in the audit trail.',
            'aria-label': 'Reset the health of candidate ' + c.name + ' of ' + m.id, onclick: () => resetCandidate(m.id, c.name),
          }, 'Reset')));
      })));

    return el('article', { className: 'model', testid: 'model-card', dataset: { modelId: m.id }, 'aria-labelledby': titleId },
      head, candidates.length ? table : el('p', { className: 'muted', text: 'No candidates.' }));
  }

  // resetCandidate clears a candidate's health through the API (audited there) and shows
  // the models again.
  async function resetCandidate(model, name) {
    clearError();
    try {
      await api('POST', 'api/health/' + encodeURIComponent(model) + '/' + encodeURIComponent(name) + '/reset');
    } catch (err) {
      showError(err.message);
      return;
    }
    await loadModels(true);
  }

  // ---- Latency (Models view) ----------------------------------------------------------
  //
  // The last hour per model and candidate from api/latency: a model's total row first,
  // then its candidates. Percentiles are the upper bounds of the ledger's buckets.

  function latencyMs(ms) {
    if (ms === null || ms === undefined) return '–';
    return ms < 1000 ? '≤ ' + ms + ' ms' : '≤ ' + (ms / 1000).toLocaleString('en', { maximumFractionDigits: 1 }) + ' s';
  }

  function latencyRow(r, isTotal) {
    const rate = (r.error_rate * 100).toLocaleString('en', { maximumFractionDigits: 1 }) + '%';
    return el('tr', { className: isTotal ? 'latency-total' : 'latency-cand', testid: 'latency-row',
      dataset: { model: r.model, candidate: r.candidate || '' } },
      isTotal ? el('th', { scope: 'row', className: 'cand-name', text: r.model })
        : el('td', { className: 'muted', text: r.model }),
      el('td', { className: 'cand-name', text: isTotal ? 'all' : r.candidate }),
      el('td', { className: 'num', testid: 'latency-requests', text: String(r.requests) }),
      el('td', { className: 'num', testid: 'latency-errors', title: r.errors + ' of ' + r.requests, text: rate }),
      el('td', { className: 'num', testid: 'latency-ttft-p50', text: latencyMs(r.ttft_p50_ms) }),
      el('td', { className: 'num', testid: 'latency-ttft-p95', text: latencyMs(r.ttft_p95_ms) }),
      el('td', { className: 'num', testid: 'latency-duration-p50', text: latencyMs(r.duration_p50_ms) }),
      el('td', { className: 'num', testid: 'latency-duration-p95', text: latencyMs(r.duration_p95_ms) }));
  }

  async function loadLatency(quiet) {
    const body = $('latency-rows');
    try {
      const d = await api('GET', 'api/latency?window=1h');
      const rows = Array.isArray(d.rows) ? d.rows : [];
      const totals = Array.isArray(d.models) ? d.models : [];
      if (totals.length === 0) {
        body.replaceChildren(el('tr', {}, el('td', { colspan: 8, className: 'empty', text: 'No requests in the last hour.' })));
        return;
      }
      body.replaceChildren(...totals.flatMap((t) => [latencyRow(t, true),
        ...rows.filter((r) => r.model === t.model).map((r) => latencyRow(r, false))]));
    } catch (err) {
      body.replaceChildren(el('tr', {}, el('td', { colspan: 8, className: 'empty', text: 'Latency could not be loaded: ' + err.message })));
      if (!quiet) showError(err.message);
    }
  }

  // ---- Usage -------------------------------------------------------------------------
  //
  // One query (api/usage grouped by day and model) feeds everything: the charts, drawn as
  // SVG through the DOM API, and the table of totals per model, which is the accessible
  // form of the charts. Token counts and costs are integers from the API; costs are
  // micro-units of the operator's currency and are turned into decimals by integer
  // arithmetic, never through floating point.

  const SVG_NS = 'http://www.w3.org/2000/svg';
  const MICROS = 1000000n;
  const PALETTE_SIZE = 8;

  // The kinds of token a day's bar is split into "by kind". Input counts cached tokens
  // and output counts reasoning tokens, so each pair is split to stack without overlap.
  const TOKEN_KINDS = [
    { id: 'input', label: 'Input', help: 'not from the cache', value: (r) => Math.max(0, r.input - r.cached_input) },
    { id: 'cached', label: 'Cached input', help: 'read from the prompt cache', value: (r) => r.cached_input },
    { id: 'output', label: 'Output', help: 'besides reasoning', value: (r) => Math.max(0, r.output - r.reasoning) },
    { id: 'reasoning', label: 'Reasoning', help: 'reasoning or thinking', value: (r) => r.reasoning },
  ];

  const USAGE_FIELDS = ['requests', 'input', 'cached_input', 'cache_write', 'output', 'reasoning', 'cost_micros', 'estimated'];

  const integerFormat = new Intl.NumberFormat(undefined, { maximumFractionDigits: 0 });
  const compactFormat = new Intl.NumberFormat(undefined, { notation: 'compact', maximumFractionDigits: 2 });
  const axisDayFormat = new Intl.DateTimeFormat(undefined, { day: 'numeric', month: 'short', timeZone: 'UTC' });
  const longDayFormat = new Intl.DateTimeFormat(undefined, {
    weekday: 'short', day: 'numeric', month: 'short', year: 'numeric', timeZone: 'UTC',
  });
  const periodFormat = new Intl.DateTimeFormat(undefined, { day: 'numeric', month: 'short', year: 'numeric', timeZone: 'UTC' });

  const usage = {
    data: null, // the last answer of api/usage
    seq: 0, // answers to older queries are dropped
    width: 0, // the width the charts were drawn for
    chartCtx: null, // what the charts were drawn from, to redraw them
  };

  const count = (n) => integerFormat.format(n);

  // costDecimal writes micro-units as an exact decimal string with six places.
  function costDecimal(micros) {
    let n = BigInt(Math.trunc(Number(micros) || 0));
    const negative = n < 0n;
    if (negative) n = -n;
    return (negative ? '-' : '') + (n / MICROS).toString() + '.' + (n % MICROS).toString().padStart(6, '0');
  }

  // formatCost shows micro-units as a decimal in the reader's locale, with up to six
  // places and at least minDigits. Intl formats a decimal string exactly as written.
  function formatCost(micros, minDigits) {
    const min = minDigits === undefined ? 2 : minDigits;
    return new Intl.NumberFormat(undefined, { minimumFractionDigits: min, maximumFractionDigits: 6 })
      .format(costDecimal(micros));
  }

  // costDigits is how many decimal places the costs need (2 to 6), so that a column of
  // them can share one and line up.
  function costDigits(values) {
    let digits = 2;
    for (const v of values) {
      const frac = costDecimal(v).split('.')[1].replace(/0+$/, '');
      digits = Math.max(digits, frac.length);
    }
    return digits;
  }

  // UTC calendar days as YYYY-MM-DD, the API's days.
  function isoDay(ms) {
    return new Date(ms).toISOString().slice(0, 10);
  }

  function dayMs(day) {
    return Date.parse(day + 'T00:00:00Z');
  }

  function daysBetween(from, to) {
    const out = [];
    for (let t = dayMs(from), end = dayMs(to); t <= end && out.length < 400; t += 86400000) out.push(isoDay(t));
    return out;
  }

  function emptyRow() {
    const r = {};
    for (const f of USAGE_FIELDS) r[f] = 0;
    return r;
  }

  function addRow(sum, r) {
    for (const f of USAGE_FIELDS) sum[f] += Number(r[f]) || 0;
    return sum;
  }

  const tokensOf = (r) => r.input + r.output;

  // modelColours gives each model a colour that stays put while filters change: the
  // configured models in their order, then any others (models since removed) by name.
  function modelColours(ids) {
    const known = state.models.map((m) => m.id);
    const others = ids.filter((id) => !known.includes(id)).sort();
    const order = known.concat(others);
    const out = new Map();
    for (const id of ids) out.set(id, 'sw-' + (order.indexOf(id) % PALETTE_SIZE));
    return out;
  }

  // ---- Filters ----

  function renderUsageKeyChoices() {
    const select = $('usage-key');
    const chosen = select.value;
    const options = [el('option', { value: '', text: 'All keys' })];
    const keys = state.keys.slice().sort((a, b) => (a.status === 'active' ? 0 : 1) - (b.status === 'active' ? 0 : 1));
    for (const k of keys) {
      const note = k.status === 'active' ? '' : ' — ' + (STATUSES[k.status] || k.status).toLowerCase();
      options.push(el('option', { value: k.id, text: k.name + ' (' + (k.prefix || k.id) + '…)' + note }));
    }
    if (chosen && !state.keys.some((k) => k.id === chosen)) options.push(el('option', { value: chosen, text: chosen }));
    select.replaceChildren(...options);
    select.value = chosen;
  }

  function renderUsageModelChoices() {
    const select = $('usage-model');
    const chosen = select.value;
    const options = [el('option', { value: '', text: 'All models' })];
    for (const m of state.models) options.push(el('option', { value: m.id, text: m.id }));
    if (chosen && !state.models.some((m) => m.id === chosen)) options.push(el('option', { value: chosen, text: chosen }));
    select.replaceChildren(...options);
    select.value = chosen;
  }

  function usagePeriod() {
    const days = [7, 30, 90].includes(Number($('usage-range').value)) ? Number($('usage-range').value) : 30;
    const today = Date.now();
    return { from: isoDay(today - (days - 1) * 86400000), to: isoDay(today) };
  }

  // ---- Loading ----

  function setUsageState(name) {
    $('usage').dataset.state = name;
  }

  function usageNote(text, tone) {
    const note = $('usage-note');
    note.textContent = text;
    note.className = 'usage-note' + (tone ? ' usage-note-' + tone : '');
    note.hidden = !text;
  }

  async function loadUsage(quiet) {
    const seq = ++usage.seq;
    const period = usagePeriod();
    const params = new URLSearchParams({ from: period.from, to: period.to, group: 'day,model' });
    if ($('usage-key').value) params.set('key', $('usage-key').value);
    if ($('usage-model').value) params.set('model', $('usage-model').value);
    if (!quiet) {
      setUsageState('loading');
      $('usage-summary').textContent = 'Loading usage…';
    }
    // Who served it, through which channel: asked for beside the main answer, so that
    // the section is ready only once both are drawn.
    const supplyParams = new URLSearchParams(params);
    supplyParams.set('group', 'model,candidate,channel');
    let data, supply;
    try {
      [data, supply] = await Promise.all([
        api('GET', 'api/usage?' + params.toString()),
        api('GET', 'api/usage?' + supplyParams.toString()).catch(() => null),
      ]);
    } catch (err) {
      if (seq !== usage.seq) return;
      usage.data = null;
      usage.chartCtx = null;
      $('usage-body').hidden = true;
      if (err.status === 503) {
        // A gateway without a usage store is a setup, not a failure.
        setUsageState('unavailable');
        $('usage-summary').textContent = 'Usage is not recorded on this gateway.';
        usageNote('Nothing to show yet (' + err.message.replace(/\.$/, '') + '). Usage appears here once the gateway\'s store records it.', 'calm');
      } else {
        setUsageState('error');
        $('usage-summary').textContent = 'The usage could not be loaded.';
        usageNote(err.message, 'bad');
      }
      return;
    }
    if (seq !== usage.seq) return;
    usage.data = {
      from: data.from || period.from,
      to: data.to || period.to,
      rows: Array.isArray(data.rows) ? data.rows.map((r) => addRow(Object.assign(emptyRow(), { day: r.day || '', model: r.model || '' }), r)) : [],
      total: addRow(emptyRow(), data.total || {}),
      key: params.get('key') || '',
      model: params.get('model') || '',
    };
    usageNote('', '');
    renderSupply(supply);
    renderUsage();
  }

  // renderSupply fills the table of totals per model, candidate and channel: who served
  // the usage above, and through which channel, at each candidate's own prices.
  function renderSupply(data) {
    const rows = data && Array.isArray(data.rows) ? data.rows : [];
    const digits = costDigits(rows.map((r) => r.cost_micros || 0));
    $('usage-supply-body').replaceChildren(...rows.map((r) => el('tr', { testid: 'usage-supply-row',
      dataset: { model: r.model || '', candidate: r.candidate || '', channel: r.channel || '' } },
    el('th', { scope: 'row', text: r.model || '(none)' }),
    el('td', { text: r.candidate || '' }),
    el('td', { text: r.channel || '' }),
    numCell('requests', r.requests || 0, count(r.requests || 0)),
    numCell('input', r.input || 0, count(r.input || 0)),
    numCell('output', r.output || 0, count(r.output || 0)),
    numCell('cost_micros', r.cost_micros || 0, formatCost(r.cost_micros || 0, digits)))));
  }

  // ---- Rendering ----

  function keyLabel(id) {
    const k = state.keys.find((x) => x.id === id);
    return '“' + (k ? k.name : id) + '”';
  }

  // usageSubject says whose usage is shown: "all keys, all models", "key “x”, all models".
  function usageSubject(d) {
    return (d.key ? 'key ' + keyLabel(d.key) : 'all keys') + ', ' + (d.model ? 'model ' + d.model : 'all models');
  }

  // filterPhrase is the same for the empty state: "" without filters, else " for key “x”
  // on model m".
  function filterPhrase(d) {
    if (d.key && d.model) return ' for key ' + keyLabel(d.key) + ' on model ' + d.model;
    if (d.key) return ' for key ' + keyLabel(d.key);
    if (d.model) return ' for model ' + d.model;
    return '';
  }

  function periodText(d) {
    if (d.from === d.to) return periodFormat.format(dayMs(d.from));
    return periodFormat.formatRange(dayMs(d.from), dayMs(d.to));
  }

  function renderUsage() {
    const d = usage.data;
    if (!d) return;
    const section = $('usage');
    section.dataset.from = d.from;
    section.dataset.to = d.to;
    const days = daysBetween(d.from, d.to);
    $('usage-summary').textContent = periodText(d) + ' (' + days.length + ' days, UTC), ' + usageSubject(d) + '.';
    $('usage-body').hidden = false;

    const empty = d.rows.length === 0 || d.total.requests === 0;
    $('usage-empty').textContent = 'No usage in this period' + filterPhrase(d) + '.';
    $('usage-empty').hidden = !empty;
    $('usage-charts').hidden = empty;
    section.querySelector('.usage-stats').hidden = empty;
    section.querySelector('.usage-table-wrap').hidden = empty;
    section.querySelector('.usage-foot').hidden = empty;
    if (empty) {
      $('usage-tokens-chart').replaceChildren();
      $('usage-cost-chart').replaceChildren();
      $('usage-tokens-legend').replaceChildren();
      $('usage-cost-legend').replaceChildren();
      $('usage-table-body').replaceChildren();
      $('usage-table-foot').replaceChildren();
      usage.chartCtx = null;
      setUsageState('empty');
      return;
    }

    // Sums per model, largest first; that order runs through legend, bars and table.
    const byModel = new Map();
    for (const r of d.rows) addRow(byModel.get(r.model) || byModel.set(r.model, emptyRow()).get(r.model), r);
    const models = Array.from(byModel.keys()).sort((a, b) =>
      tokensOf(byModel.get(b)) - tokensOf(byModel.get(a)) || byModel.get(b).cost_micros - byModel.get(a).cost_micros || (a < b ? -1 : 1));
    const colours = modelColours(models);

    // Each day's rows by model.
    const byDay = new Map();
    for (const r of d.rows) {
      if (!byDay.has(r.day)) byDay.set(r.day, new Map());
      const m = byDay.get(r.day);
      m.set(r.model, addRow(m.get(r.model) || emptyRow(), r));
    }

    // Costs in the table and the summary share a number of decimal places.
    const digits = costDigits(models.map((m) => byModel.get(m).cost_micros).concat([d.total.cost_micros]));
    renderUsageStats(d.total, digits);
    renderUsageCharts({ d, days, byDay, models, colours });
    renderUsageTable({ d, models, byModel, colours, digits });
    setUsageState('ready');
  }

  function renderUsageStats(t, digits) {
    $('usage-stat-requests').textContent = count(t.requests);
    $('usage-stat-tokens').textContent = count(tokensOf(t));
    $('usage-stat-cost').textContent = formatCost(t.cost_micros, digits);
    $('usage-stat-estimated').textContent = t.estimated ? count(t.estimated) + (t.estimated === 1 ? ' request' : ' requests') : 'None';
  }

  function renderUsageCharts(ctx) {
    ctx = ctx || usage.chartCtx;
    if (!ctx) return;
    usage.chartCtx = ctx;
    const { d, days, byDay, models, colours } = ctx;
    const frame = $('usage-tokens-chart');
    const width = Math.max(320, Math.floor(frame.clientWidth || frame.parentElement.clientWidth || 960));
    usage.width = width;
    const split = document.querySelector('input[name="usage-split"]:checked');
    const byKind = split && split.value === 'kind';

    const daysWith = days.filter((day) => byDay.has(day));
    if (daysWith.length === 0) { // rows outside the period: nothing to draw
      frame.replaceChildren();
      $('usage-cost-chart').replaceChildren();
      return;
    }
    const totals = new Map(daysWith.map((day) => [day, Array.from(byDay.get(day).values()).reduce((sum, r) => addRow(sum, r), emptyRow())]));
    const dayTotal = (day) => totals.get(day);

    // Tokens: stacked by model, or by kind.
    const tokenSeries = byKind
      ? TOKEN_KINDS.map((k) => ({ id: k.id, label: k.label, help: k.help, cls: 'kind-' + k.id, value: (day) => k.value(dayTotal(day)) }))
      : models.map((m) => ({ id: m, label: m, cls: colours.get(m), value: (day) => tokensOf(byDay.get(day).get(m) || emptyRow()) }));
    const tokenTotal = tokensOf(d.total);
    const busiest = daysWith.reduce((best, day) => (tokensOf(dayTotal(day)) > tokensOf(dayTotal(best)) ? day : best), daysWith[0]);
    frame.replaceChildren(barChart({
      testid: 'usage-tokens-svg',
      width, height: 280, days, daysWith,
      series: tokenSeries,
      tick: (v) => compactFormat.format(v),
      full: (v) => count(v) + ' tokens',
      headline: (day, total) => {
        const t = dayTotal(day);
        return count(total) + ' tokens in ' + count(t.requests) + (t.requests === 1 ? ' request' : ' requests') +
          (t.estimated ? ' (' + count(t.estimated) + ' partly estimated)' : '');
      },
      label: 'Tokens per day, ' + periodText(d) + ', ' + (byKind ? 'by kind' : 'by model') + ': ' + count(tokenTotal) +
        ' tokens on ' + daysWith.length + ' of ' + days.length + ' days; the most on ' +
        longDayFormat.format(dayMs(busiest)) + ' (' + count(tokensOf(dayTotal(busiest))) + '). The table below lists the totals per model.',
    }));
    $('usage-tokens-legend').replaceChildren(...tokenSeries.map(legendItem));

    // Cost: stacked by model. Its legend is the tokens chart's, unless that one is by kind.
    const costSeries = models.map((m) => ({ id: m, label: m, cls: colours.get(m), value: (day) => (byDay.get(day).get(m) || emptyRow()).cost_micros }));
    $('usage-cost-legend').hidden = !byKind;
    $('usage-cost-legend').replaceChildren(...(byKind ? costSeries.map(legendItem) : []));
    const dearest = daysWith.reduce((best, day) => (dayTotal(day).cost_micros > dayTotal(best).cost_micros ? day : best), daysWith[0]);
    const costFrame = $('usage-cost-chart');
    if (d.total.cost_micros <= 0) {
      costFrame.replaceChildren(el('p', { className: 'empty chart-empty', testid: 'usage-cost-none', text: 'No cost in this period: the models used have no prices configured.' }));
    } else {
      costFrame.replaceChildren(barChart({
        testid: 'usage-cost-svg',
        width, height: 190, days, daysWith,
        series: costSeries,
        tick: (v) => formatCost(v, 0),
        full: (v) => formatCost(v),
        headline: (day, total) => 'Cost ' + formatCost(total),
        label: 'Cost per day, ' + periodText(d) + ', by model: ' + formatCost(d.total.cost_micros) + ' in all; the most on ' +
          longDayFormat.format(dayMs(dearest)) + ' (' + formatCost(dayTotal(dearest).cost_micros) + ').',
      }));
    }
  }

  function legendItem(s) {
    return el('li', { testid: 'usage-legend-item', dataset: { series: s.id } },
      el('span', { className: 'swatch ' + s.cls, 'aria-hidden': 'true' }),
      el('span', { className: s.help ? '' : 'legend-model', text: s.label }),
      s.help ? el('span', { className: 'legend-help', text: s.help }) : null);
  }

  function svgEl(tag, attrs, ...children) {
    const node = document.createElementNS(SVG_NS, tag);
    for (const [name, value] of Object.entries(attrs || {})) {
      if (value === undefined || value === null) continue;
      if (name === 'testid') node.setAttribute('data-testid', value);
      else if (name === 'text') node.textContent = value;
      else node.setAttribute(name, String(value));
    }
    for (const child of children.flat()) {
      if (child) node.append(child);
    }
    return node;
  }

  // niceStep is a round step (1, 2, 2.5 or 5 times a power of ten, and a whole number)
  // that divides 0..max into about `ticks` parts.
  function niceStep(max, ticks) {
    const raw = max / ticks;
    const magnitude = Math.pow(10, Math.floor(Math.log10(raw)));
    for (const m of [1, 2, 2.5, 5, 10]) {
      const step = m * magnitude;
      if (step >= raw && Number.isInteger(step)) return step;
    }
    return Math.max(1, Math.ceil(raw));
  }

  // barChart draws stacked columns, one per day, with a y axis of round ticks and the
  // days along the bottom. Only days with data get a column group, each with a <title>
  // that lists what it is made of.
  function barChart(o) {
    const { width, height, days, series } = o;
    const values = new Map(o.daysWith.map((day) => [day, series.map((s) => s.value(day))]));
    let max = 0;
    for (const vs of values.values()) max = Math.max(max, vs.reduce((a, b) => a + b, 0));
    const step = niceStep(Math.max(max, 1), 5);
    const top = Math.max(step, Math.ceil(max / step) * step);
    const ticks = [];
    for (let v = 0; v <= top; v += step) ticks.push(v);

    const tickText = ticks.map(o.tick);
    const left = 14 + 7.2 * Math.max(...tickText.map((t) => t.length));
    const right = 8;
    const topPad = 12;
    const bottom = 30;
    const plotW = width - left - right;
    const plotH = height - topPad - bottom;
    const slot = plotW / days.length;
    const barW = Math.max(2, Math.min(46, slot * 0.68));
    const y = (v) => topPad + plotH - (v / top) * plotH;

    const root = svgEl('svg', {
      role: 'img', 'aria-label': o.label, testid: o.testid, class: 'chart-svg',
      width, height, viewBox: '0 0 ' + width + ' ' + height,
    });

    // Grid and y axis.
    const grid = svgEl('g', { class: 'grid', 'aria-hidden': 'true' });
    ticks.forEach((v, i) => {
      const ty = Math.round(y(v)) + 0.5;
      grid.append(
        svgEl('line', { x1: left, x2: width - right, y1: ty, y2: ty, class: v === 0 ? 'axis-line' : 'grid-line' }),
        svgEl('text', { x: left - 8, y: ty, class: 'tick tick-y', 'dominant-baseline': 'middle', 'text-anchor': 'end', text: tickText[i] }));
    });
    root.append(grid);

    // Day labels: every day when there is room, else every few days, counting back
    // from the last so that the newest day is always named.
    const every = [1, 2, 3, 7, 14, 30].find((k) => k * slot >= 58) || 30;
    const xAxis = svgEl('g', { class: 'x-axis', 'aria-hidden': 'true' });
    days.forEach((day, i) => {
      if ((days.length - 1 - i) % every !== 0) return;
      const cx = left + (i + 0.5) * slot;
      const base = topPad + plotH;
      xAxis.append(
        svgEl('line', { x1: cx, x2: cx, y1: base, y2: base + 4, class: 'axis-line' }),
        svgEl('text', { x: cx, y: base + 18, class: 'tick tick-x', 'text-anchor': 'middle', text: axisDayFormat.format(dayMs(day)) }));
    });
    root.append(xAxis);

    // The columns.
    const bars = svgEl('g', { class: 'bars' });
    days.forEach((day, i) => {
      const vs = values.get(day);
      if (!vs) return;
      const total = vs.reduce((a, b) => a + b, 0);
      const lines = [longDayFormat.format(dayMs(day)), o.headline(day, total)];
      series.forEach((s, j) => {
        if (vs[j]) lines.push(s.label + ': ' + o.full(vs[j]));
      });
      const group = svgEl('g', { class: 'bar', testid: 'usage-day', 'data-day': day, 'data-total': total },
        svgEl('title', { text: lines.join('\n') }),
        svgEl('rect', { class: 'hit', x: left + i * slot, y: topPad, width: slot, height: plotH }));
      const x = left + i * slot + (slot - barW) / 2;
      // Parts stack up from the axis, a pixel apart where they are tall enough to spare
      // it. A column too short to see is stretched to 3 px, its parts in proportion.
      const stretch = Math.max(1, 3 / ((total / top) * plotH));
      let edge = y(0);
      let first = true;
      series.forEach((s, j) => {
        if (!vs[j]) return;
        const h = (vs[j] / top) * plotH * stretch;
        const gap = !first && h > 4 ? 1 : 0;
        edge -= h;
        first = false;
        group.append(svgEl('rect', { class: 'seg ' + s.cls, x, y: edge, width: barW, height: h - gap, 'data-series': s.id }));
      });
      bars.append(group);
    });
    root.append(bars);
    return root;
  }

  function renderUsageTable(ctx) {
    const { d, models, byModel, colours, digits } = ctx;
    $('usage-table-caption').replaceChildren('Totals per model',
      el('span', { className: 'visually-hidden', text: ', ' + periodText(d) + ' (UTC), ' + usageSubject(d) }));
    const cells = (r) => [
      numCell('requests', r.requests, count(r.requests)),
      numCell('input', r.input, count(r.input)),
      numCell('cached_input', r.cached_input, count(r.cached_input)),
      numCell('output', r.output, count(r.output)),
      numCell('reasoning', r.reasoning, count(r.reasoning)),
      numCell('cost_micros', r.cost_micros, formatCost(r.cost_micros, digits)),
      numCell('estimated', r.estimated, count(r.estimated), r.estimated ? 'is-estimated' : ''),
    ];
    $('usage-table-body').replaceChildren(...models.map((m) => el('tr', { testid: 'usage-model-row', dataset: { model: m } },
      el('th', { scope: 'row' }, el('span', { className: 'usage-model' },
        el('span', { className: 'swatch ' + colours.get(m), 'aria-hidden': 'true' }),
        el('span', { className: 'usage-model-id', text: m || '(none)' }))),
      cells(byModel.get(m)))));
    $('usage-table-foot').replaceChildren(el('tr', { testid: 'usage-total-row' },
      el('th', { scope: 'row', text: 'Total' }),
      cells(d.total)));
  }

  function numCell(field, value, text, extra) {
    return el('td', { className: 'num' + (extra ? ' ' + extra : ''), dataset: { field, value: String(value) }, text });
  }

  // Redraw the charts when their width changes (the SVG is laid out in pixels, so its
  // text stays the size of the page's text).
  function watchUsageWidth() {
    if (typeof ResizeObserver !== 'function') return;
    let timer = 0;
    new ResizeObserver(() => {
      clearTimeout(timer);
      timer = setTimeout(() => {
        const frame = $('usage-tokens-chart');
        if (usage.data && !$('usage-charts').hidden && Math.abs(frame.clientWidth - usage.width) > 2) renderUsageCharts(null);
      }, 80);
    }).observe($('usage-charts'));
  }


  // ---- Connect a tool ------------------------------------------------------------------

  const countFormat = new Intl.NumberFormat(undefined);

  function limitsText(m) {
    const parts = [];
    if (m.context_window) parts.push('window ' + countFormat.format(m.context_window));
    if (m.max_output_tokens) parts.push('output ' + countFormat.format(m.max_output_tokens));
    return parts.length ? parts.join(', ') + ' tokens' : 'not declared';
  }

  function renderConnectKeyChoices() {
    const select = $('connect-key');
    const current = select.value;
    const active = state.keys.filter((k) => k.status === 'active');
    select.replaceChildren(el('option', { value: '', text: 'Any key: every model' }),
      ...active.map((k) => el('option', { value: k.id, text: k.name + ' (' + k.prefix + '…)' })));
    select.value = active.some((k) => k.id === current) ? current : '';
  }

  let connectSeq = 0;

  async function loadConnect() {
    const seq = ++connectSeq;
    const params = new URLSearchParams({ base_url: $('connect-base-url').value.trim(), key_env: $('connect-key-env').value.trim() });
    if ($('connect-key').value) params.set('key', $('connect-key').value);
    const client = $('connect-client').value;
    $('connect-copy-status').textContent = '';
    try {
      const data = await api('GET', 'api/connect/' + encodeURIComponent(client) + '?' + params.toString());
      if (seq !== connectSeq) return; // a newer choice is on its way
      const setup = data.setup || {};
      $('connect-error').hidden = true;
      $('connect-text').textContent = setup.text || '';
      $('connect-models').textContent = (setup.models || []).length
        ? 'Models: ' + setup.models.join(', ')
        : '';
      $('connect-copy').disabled = false;
      $('connect').dataset.state = 'ready';
      $('connect').dataset.request = client + '?' + params.toString();
    } catch (err) {
      if (seq !== connectSeq) return;
      $('connect-text').textContent = '';
      $('connect-models').textContent = '';
      $('connect-error').textContent = err.message;
      $('connect-error').hidden = false;
      $('connect-copy').disabled = true;
      $('connect').dataset.state = 'error';
      $('connect').dataset.request = client + '?' + params.toString();
    }
  }

  async function copyConnect() {
    const code = $('connect-text');
    const note = $('connect-copy-status');
    if (navigator.clipboard && window.isSecureContext) {
      try {
        await navigator.clipboard.writeText(code.textContent);
        note.textContent = 'Copied to the clipboard.';
        return;
      } catch (_) {
        // Fall through: select the text so it can be copied by hand.
      }
    }
    selectText(code);
    let copied = false;
    try {
      copied = document.execCommand('copy');
    } catch (_) {
      copied = false;
    }
    note.textContent = copied ? 'Copied to the clipboard.' : 'This browser did not allow copying. The set-up is selected: press Ctrl+C (⌘C on a Mac) to copy it.';
  }

  function startConnect() {
    $('connect-base-url').value = window.location.origin;
    let timer = 0;
    const later = () => { clearTimeout(timer); timer = setTimeout(loadConnect, 250); };
    $('connect-form').addEventListener('change', loadConnect);
    $('connect-form').addEventListener('input', later);
    $('connect-form').addEventListener('submit', (event) => { event.preventDefault(); loadConnect(); });
    $('connect-copy').addEventListener('click', copyConnect);
  }

  // ---- Requests ----------------------------------------------------------------------
  // The request log: one page at a time, newest first, from api/requests. A row opens
  // to show the request's attempts; the filters are sent to the API as they are.

  const requests = { rows: [], next: '', seq: 0, open: new Set() };

  const OUTCOME_TEXT = { refused: 'Refused', failed: 'Failed' };

  function fillRequestChoices() {
    const fill = (select, items, label) => {
      const chosen = select.value;
      select.replaceChildren(el('option', { value: '', text: label }),
        ...items.map((it) => el('option', { value: it.value, text: it.text })));
      select.value = items.some((it) => it.value === chosen) ? chosen : '';
    };
    fill($('requests-key'), state.keys.map((k) => ({ value: k.id, text: k.name })), 'All keys');
    fill($('requests-project'), state.projects.map((p) => ({ value: p.id, text: p.id })), 'All projects');
    fill($('requests-model'), state.models.map((m) => ({ value: m.id, text: m.id })), 'All models');
  }

  function requestParams(older) {
    const params = new URLSearchParams({ limit: '50' });
    const add = (name, id) => { const v = $(id).value.trim(); if (v) params.set(name, v); };
    add('key', 'requests-key');
    add('project', 'requests-project');
    add('model', 'requests-model');
    add('candidate', 'requests-candidate');
    add('status', 'requests-status');
    const since = $('requests-since').value;
    if (since) params.set('since', new Date(since + 'Z').toISOString());
    if (older && requests.next) params.set('cursor', requests.next);
    return params;
  }

  async function loadRequests(older) {
    const seq = ++requests.seq;
    const note = $('requests-note');
    try {
      const data = await api('GET', 'api/requests?' + requestParams(older).toString());
      if (seq !== requests.seq) return;
      const rows = Array.isArray(data.requests) ? data.requests : [];
      requests.rows = older ? requests.rows.concat(rows) : rows;
      requests.next = data.next || '';
      if (!older) requests.open.clear();
      $('requests-more').hidden = !requests.next;
      note.hidden = requests.rows.length > 0;
      note.textContent = 'No requests match.';
      $('requests').dataset.state = 'ready';
      renderRequests();
    } catch (err) {
      if (seq !== requests.seq) return;
      $('requests').dataset.state = 'error';
      note.hidden = false;
      note.textContent = 'The request log could not be loaded: ' + err.message;
    }
  }

  function requestFlags(r) {
    const flags = [];
    if (r.outcome === 'refused') flags.push(el('span', { className: 'flag flag-bad', testid: 'request-flag', text: 'Refused: ' + (r.refused_by || 'limit') }));
    if (r.outcome === 'failed') flags.push(el('span', { className: 'flag flag-bad', testid: 'request-flag', text: 'Failed' }));
    if (r.outcome === 'stream_error') flags.push(el('span', { className: 'flag flag-bad', testid: 'request-flag', text: 'Stream error' }));
    if (r.failed_over) flags.push(el('span', { className: 'flag', testid: 'request-flag', text: 'Failed over' }));
    if (r.retried) flags.push(el('span', { className: 'flag', testid: 'request-flag', text: 'Retried' }));
    return flags;
  }

  function attemptsTable(r) {
    if (!r.tries || r.tries.length === 0) {
      return el('p', { className: 'muted', testid: 'request-no-attempts',
        text: r.outcome === 'refused' ? 'Refused before any upstream was called.' : 'No attempts recorded.' });
    }
    return el('ol', { className: 'attempts', testid: 'request-attempts' }, r.tries.map((t) => {
      const why = t.reason ? 'moved on: ' + t.reason : (t.stream_error ? 'served, stream ended: ' + t.stream_error : 'served');
      const retry = t.retry ? 'retry ' + t.retry + ' after ' + t.wait_ms + ' ms, ' : '';
      return el('li', { testid: 'request-attempt', dataset: { candidate: t.candidate, reason: t.reason || '' } },
        el('strong', { text: t.candidate }), ' ', el('span', { text: (t.status ? t.status : 'no answer') + ', ' + t.duration_ms + ' ms, ' + retry + why }));
    }));
  }

  function renderRequests() {
    const cells = [];
    const digits = costDigits(requests.rows.map((r) => r.cost_micros || 0));
    for (const r of requests.rows) {
      const open = requests.open.has(r.request_id);
      const at = parseTime(r.time);
      const toggle = el('button', {
        type: 'button', className: 'btn btn-quiet btn-small', testid: 'request-toggle', 'aria-expanded': open ? 'true' : 'false',
        onclick: () => {
          if (requests.open.has(r.request_id)) requests.open.delete(r.request_id); else requests.open.add(r.request_id);
          renderRequests();
        },
      }, at ? timeNode(at, 'both') : r.time);
      cells.push(el('tr', { testid: 'request-row', dataset: { requestId: r.request_id, outcome: r.outcome, model: r.model } },
        el('td', {}, toggle),
        el('td', { testid: 'request-key', text: r.key_name || r.key_id || '—' }),
        el('td', { testid: 'request-model', text: r.model || '—' }),
        el('td', { testid: 'request-candidate', text: r.candidate || '—' }),
        el('td', { className: 'num', testid: 'request-status', text: String(r.status) }),
        el('td', { className: 'num', text: r.ttfb_ms + ' ms' }),
        el('td', { className: 'num', text: r.duration_ms + ' ms' }),
        el('td', { className: 'num', text: r.input + ' / ' + r.output }),
        el('td', { className: 'num', text: formatCost(r.cost_micros || 0, digits) }),
        el('td', { testid: 'request-flags' }, requestFlags(r))));
      if (open) {
        cells.push(el('tr', { className: 'request-detail', testid: 'request-detail', dataset: { requestId: r.request_id } },
          el('td', { colspan: '10' }, el('p', { className: 'sub', text: 'Request ' + r.request_id + ' · ' + r.operation }), attemptsTable(r))));
      }
    }
    $('requests-body').replaceChildren(...cells);
  }

  function startRequests() {
    $('requests-refresh').addEventListener('click', () => { fillRequestChoices(); loadRequests(false); });
    $('requests-more').addEventListener('click', () => loadRequests(true));
    $('requests-filters').addEventListener('change', () => loadRequests(false));
    $('requests-filters').addEventListener('submit', (event) => { event.preventDefault(); loadRequests(false); });
    // The key, project and model choices come from the other views' lists, loaded
    // meanwhile: refreshed whenever the operator opens one.
    for (const id of ['requests-key', 'requests-project', 'requests-model']) {
      $(id).addEventListener('focus', fillRequestChoices);
      $(id).addEventListener('pointerdown', fillRequestChoices);
    }
    loadRequests(false);
  }

  // ---- Start -------------------------------------------------------------------------

  function start() {
    $('create-form').addEventListener('submit', onCreate);
    $('create-lifetime').addEventListener('change', () => {
      const custom = $('create-lifetime').value === 'custom';
      $('create-lifetime-custom-wrap').hidden = !custom;
      if (custom) $('create-lifetime-custom').focus();
    });
    $('keys-refresh').addEventListener('click', () => { clearError(); loadKeys(); });
    $('models-refresh').addEventListener('click', () => { clearError(); loadModels(false); loadLatency(false); });
    $('notice-dismiss').addEventListener('click', clearError);
    $('project-form').addEventListener('submit', onCreateProject);
    $('projects-refresh').addEventListener('click', () => { clearError(); loadKeys(); loadProjects(); });
    $('limits-form').addEventListener('submit', onSaveLimits);
    $('limits-cancel').addEventListener('click', () => { state.limitsFor = null; $('limits-dialog').close('cancel'); });
    $('limits-dialog').addEventListener('close', () => { state.limitsFor = null; });
    $('audit-refresh').addEventListener('click', () => loadAudit(false));
    $('audit-more').addEventListener('click', () => loadAudit(true));
    $('alerts-refresh').addEventListener('click', () => loadAlerts());
    $('usage-refresh').addEventListener('click', () => loadUsage(false));
    $('usage-filters').addEventListener('change', () => loadUsage(false));
    $('usage-filters').addEventListener('submit', (event) => event.preventDefault());
    for (const radio of document.querySelectorAll('input[name="usage-split"]')) {
      radio.addEventListener('change', () => renderUsageCharts(null));
    }
    watchUsageWidth();
    startConnect();
    startRequests();

    $('rotate-dialog').addEventListener('close', onRotateClosed);
    $('rotate-cancel').addEventListener('click', () => $('rotate-dialog').close('cancel'));
    $('revoke-dialog').addEventListener('close', onRevokeClosed);
    $('revoke-cancel').addEventListener('click', () => $('revoke-dialog').close('cancel'));

    // Headings that focus moves to after an action.
    $('keys-heading').tabIndex = -1;

    // Never leave a secret behind in a page the browser may keep for back/forward.
    window.addEventListener('pagehide', hideAllSecrets);

    document.addEventListener('visibilitychange', () => {
      if (document.visibilityState === 'visible') {
        loadModels(true);
        loadKeys();
        loadProjects();
        loadUsage(true);
        loadLatency(true);
      }
    });
    setInterval(() => {
      if (document.visibilityState === 'visible') loadModels(true);
    }, MODELS_POLL_MS);

    loadModels(false);
    loadKeys();
    loadProjects();
    loadUsage(false);
    loadAudit(false);
    loadLatency(true);
    loadAlerts();
  }

  start();
})();

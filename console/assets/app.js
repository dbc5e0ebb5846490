// Switchyard console: keys and models over the console's JSON API.
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
      await loadKeys();
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
    await loadKeys();
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
    await loadKeys();
  }

  // ---- Models ------------------------------------------------------------------------

  async function loadModels(quiet) {
    try {
      const data = await api('GET', 'api/models');
      const models = Array.isArray(data.models) ? data.models : [];
      const idsBefore = state.models.map((m) => m.id).join('\n');
      state.models = models;
      renderModels();
      if (!state.modelsLoaded || idsBefore !== models.map((m) => m.id).join('\n')) renderModelChoices();
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
        el('th', { scope: 'col', text: 'Circuit' }))),
      el('tbody', {}, candidates.map((c) => {
        const [label, help] = CIRCUITS[c.state] || [c.state, ''];
        return el('tr', { testid: 'candidate-row', dataset: { candidate: c.name, state: c.state } },
          el('th', { scope: 'row', className: 'cand-name', text: c.name }),
          el('td', {}, protocolChip(c.protocol)),
          el('td', { className: 'num', text: String(c.priority) }),
          el('td', {}, el('span', {
            className: 'state state-' + String(c.state).replace(/[^a-z_]/g, ''),
            testid: 'candidate-state', title: help, text: label,
          })));
      })));

    return el('article', { className: 'model', testid: 'model-card', dataset: { modelId: m.id }, 'aria-labelledby': titleId },
      head, candidates.length ? table : el('p', { className: 'muted', text: 'No candidates.' }));
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
    $('models-refresh').addEventListener('click', () => { clearError(); loadModels(false); });
    $('notice-dismiss').addEventListener('click', clearError);

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
      }
    });
    setInterval(() => {
      if (document.visibilityState === 'visible') loadModels(true);
    }, MODELS_POLL_MS);

    loadModels(false);
    loadKeys();
  }

  start();
})();

// The Keys view: the keys the signed-in principal reaches (a member's own, a project
// admin's projects', everyone's for an owner), with who owns each; the full create form
// for those who govern keys; rotate and revoke for those who may change keys; and the
// limits dialog for those who govern them. The member's two-click "New key" is in
// newkey.js.

import { api, keyPath } from './api.js';
import { $, clearError, dateFormat, el, muted, parseTime, relative, say, showError, timeNode } from './dom.js';
import { openLimits, projectOptions, spendNode } from './limits.js';
import { showSecret } from './secrets.js';
import { STATUSES, can, emit, on, ownerText, provide, reachesEverywhere, reload, state } from './state.js';

let rotating = null; // the key the rotate dialog is about
let revoking = null; // the key the revoke dialog is about

export async function loadKeys() {
  try {
    const data = await api('GET', 'api/keys');
    state.keys = Array.isArray(data.keys) ? data.keys : [];
    renderKeys();
    emit('keys');
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
  let empty = 'No keys yet.';
  if (can('keys.write')) empty += can('keys.govern') ? ' Create the first one above.' : ' Make one with New key.';
  $('keys-empty').textContent = empty;

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

function projectLabel(id) {
  const p = state.projects.find((x) => x.id === id);
  const node = el('span', { className: 'chip', text: id });
  if (p && p.name && p.name !== id) node.title = p.name;
  return node;
}

function keyRow(k, byId) {
  const status = STATUSES[k.status] ? k.status : 'active';
  const created = parseTime(k.created_at);
  const lastUsed = parseTime(k.last_used_at);
  const expires = parseTime(k.expires_at);
  const revoked = parseTime(k.revoked_at);

  const nameCell = el('td', { className: 'key-name' },
    el('span', { className: 'name', testid: 'key-name', text: k.name }));
  if (k.owner) {
    nameCell.append(el('span', { className: 'sub key-owner', testid: 'key-owner', title: 'Owner: ' + k.owner, text: ownerText(k.owner) }));
  }
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
    modelsCell.append(muted('All models'));
  }

  const actions = el('td', { className: 'key-actions' });
  if (status === 'active') {
    if (can('keys.govern')) {
      actions.append(el('button', {
        type: 'button', className: 'btn btn-small', testid: 'limits-button',
        'aria-label': 'Limits and project of key ' + k.name, onclick: () => openLimits('key', k),
      }, 'Limits…'));
    }
    if (can('keys.write')) {
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
  }

  return el('tr', {
    className: 'is-' + status, testid: 'key-row',
    dataset: { keyId: k.id, status, prefix: k.prefix || '', owner: k.owner || '' },
  },
  nameCell,
  el('td', {}, el('code', { className: 'prefix', testid: 'key-prefix', title: 'The first characters of the secret', text: (k.prefix || '') + '…' })),
  statusCell,
  el('td', { className: 'key-project', testid: 'key-project', dataset: { project: k.project_id || '' } },
    k.project_id ? projectLabel(k.project_id) : muted('—')),
  el('td', { testid: 'key-spend' }, spendNode(k.standing, k.limits)),
  modelsCell,
  el('td', { testid: 'key-created' }, created ? timeNode(created) : muted('—')),
  el('td', { testid: 'key-last-used' }, lastUsed ? timeNode(lastUsed, 'relative') : muted('Never')),
  el('td', { testid: 'key-expires' }, expires ? timeNode(expires, 'both') : muted('Never')),
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
    list.replaceChildren(el('p', { className: 'muted', text: state.modelsLoaded ? 'This gateway has no models configured.' : 'The models could not be loaded; the key will allow every model.' }));
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
    await reload('keys', 'audit');
  } catch (err) {
    showCreateError(err.message, null);
  } finally {
    submit.disabled = false;
  }
}

// ---- Rotate and revoke ------------------------------------------------------------------

function openRotate(k) {
  rotating = k;
  $('rotate-key-name').textContent = k.name + ' (' + k.prefix + '…)';
  const dialog = $('rotate-dialog');
  dialog.returnValue = '';
  dialog.showModal();
  $('rotate-grace').focus();
}

async function onRotateClosed() {
  const k = rotating;
  rotating = null;
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
  await reload('keys', 'audit');
}

function openRevoke(k) {
  revoking = k;
  $('revoke-key-name').textContent = k.name;
  $('revoke-key-prefix').textContent = k.prefix;
  const dialog = $('revoke-dialog');
  dialog.returnValue = '';
  dialog.showModal();
  $('revoke-cancel').focus(); // the safe choice has the focus
}

async function onRevokeClosed() {
  const k = revoking;
  revoking = null;
  if (!k || $('revoke-dialog').returnValue !== 'revoke') return;
  clearError();
  try {
    await api('POST', keyPath(k.id, 'revoke'), {});
    say('Key “' + k.name + '” revoked. It no longer works.');
  } catch (err) {
    showError('Revoking “' + k.name + '” failed: ' + err.message);
  }
  await reload('keys', 'audit');
}

// ---- Start -------------------------------------------------------------------------

export function start() {
  provide('keys', loadKeys);
  // The full create form is for those who govern keys (owners, admins, project
  // admins): a member makes keys with "New key", inside the project's rules.
  const governs = can('keys.write') && can('keys.govern');
  $('create-form').hidden = !governs;
  if (governs) {
    $('create-form').addEventListener('submit', onCreate);
    $('create-lifetime').addEventListener('change', () => {
      const custom = $('create-lifetime').value === 'custom';
      $('create-lifetime-custom-wrap').hidden = !custom;
      if (custom) $('create-lifetime-custom').focus();
    });
    on('models', renderModelChoices);
    on('projects', () => projectOptions($('create-project'), state.projects, reachesEverywhere() ? 'No project' : null));
  }
  on('projects', renderKeys); // the project chips' titles
  on('people', renderKeys); // the owners' e-mails
  $('keys-refresh').addEventListener('click', () => { clearError(); loadKeys(); });
  $('rotate-dialog').addEventListener('close', onRotateClosed);
  $('rotate-cancel').addEventListener('click', () => $('rotate-dialog').close('cancel'));
  $('revoke-dialog').addEventListener('close', onRevokeClosed);
  $('revoke-cancel').addEventListener('click', () => $('revoke-dialog').close('cancel'));
  // Headings that focus moves to after an action.
  $('keys-heading').tabIndex = -1;
  return loadKeys();
}

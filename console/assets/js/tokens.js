// The API tokens view: tokens for automation (CI pipelines, infrastructure tools),
// each scoped like a role, to projects, with an expiry. A new token's secret is shown
// once; the gateway keeps only its hash. A token never reaches further than whoever
// made it, so only the roles up to the maker's own are offered (the API decides).

import { api } from './api.js';
import { $, clearError, confirmAction, el, muted, say, showError, showFormError, timeCell } from './dom.js';
import { showSecret } from './secrets.js';
import { ROLE_NAMES, can, grantText, on, provide, reload, state } from './state.js';

const RANK = { viewer: 1, member: 2, project_admin: 3, admin: 4, owner: 5 };

let tokens = [];

async function loadTokens() {
  try {
    const data = await api('GET', 'api/tokens');
    tokens = Array.isArray(data.tokens) ? data.tokens : [];
    $('tokens').dataset.state = 'ready';
    $('tokens-note').hidden = tokens.length > 0;
    $('tokens-note').textContent = 'No API tokens yet.';
  } catch (err) {
    $('tokens').dataset.state = 'error';
    $('tokens-note').hidden = false;
    $('tokens-note').textContent = 'The API tokens could not be loaded: ' + err.message;
  }
  renderTokens();
}

const isSet = (t) => !!(t && !t.startsWith('0001-'));

function renderTokens() {
  const writes = can('tokens.write');
  $('tokens-body').replaceChildren(...tokens.map((t) => {
    const revoked = isSet(t.revoked_at);
    const expired = !revoked && isSet(t.expires_at) && Date.parse(t.expires_at) <= Date.now();
    const status = revoked ? 'revoked' : (expired ? 'expired' : 'active');
    return el('tr', { className: 'is-' + status, testid: 'token-row', dataset: { tokenId: t.id, status, prefix: t.prefix || '' } },
      el('td', { className: 'key-name' },
        el('span', { className: 'name', testid: 'token-name', text: t.name }),
        el('span', { className: 'sub' }, el('code', { text: (t.prefix || t.id) + '…' }))),
      el('td', { testid: 'token-grant', text: t.grant ? grantText(t.grant) : '—' }),
      el('td', { className: 'audit-actor', text: t.created_by || '—' }),
      el('td', {}, timeCell(t.last_used_at, 'relative', 'Never')),
      el('td', {}, revoked ? el('span', { className: 'badge badge-revoked', text: 'Revoked' }) : timeCell(t.expires_at, 'both', 'Never')),
      el('td', { className: 'key-actions' }, writes && status === 'active' ? el('button', {
        type: 'button', className: 'btn btn-small btn-danger-quiet', testid: 'token-revoke',
        'aria-label': 'Revoke API token ' + t.name, onclick: () => revokeToken(t),
      }, 'Revoke…') : null));
  }));
}

async function revokeToken(t) {
  if (!await confirmAction('Revoke API token “' + t.name + '”?',
    'Whatever uses it is refused from its next call. This cannot be undone.', 'Revoke token')) return;
  clearError();
  try {
    await api('POST', 'api/tokens/' + encodeURIComponent(t.id) + '/revoke', {});
    say('API token “' + t.name + '” revoked.');
  } catch (err) {
    showError('Revoking “' + t.name + '” failed: ' + err.message);
  }
  await Promise.all([loadTokens(), reload('audit')]);
}

// renderRoleChoices offers the roles up to the signed-in principal's highest.
function renderRoleChoices() {
  const grants = (state.me && state.me.principal && state.me.principal.grants) || [];
  const top = Math.max(0, ...grants.map((g) => RANK[g.role] || 0));
  const select = $('token-role');
  const chosen = select.value;
  const roles = Object.keys(RANK).filter((r) => RANK[r] <= top).sort((a, b) => RANK[a] - RANK[b]);
  select.replaceChildren(...roles.map((r) => el('option', { value: r, text: ROLE_NAMES[r] })));
  select.value = roles.includes(chosen) ? chosen : (roles[0] || '');
}

function renderProjectChoices() {
  const checked = new Set(Array.from($('token-projects-list').querySelectorAll('input:checked'), (b) => b.value));
  if (!state.projects.length) {
    $('token-projects-list').replaceChildren(muted('No projects.'));
    return;
  }
  $('token-projects-list').replaceChildren(...state.projects.map((p, i) => {
    const id = 'token-project-' + i;
    return el('label', { for: id, className: 'check' },
      el('input', { type: 'checkbox', id, value: p.id, checked: checked.has(p.id), testid: 'token-project' }),
      el('span', { className: 'check-id', text: p.id }));
  }));
}

async function onCreateToken(event) {
  event.preventDefault();
  const form = $('token-form');
  const nameInput = $('token-name');
  $('token-error').hidden = true;
  nameInput.removeAttribute('aria-invalid');
  const name = nameInput.value.trim();
  if (!name) {
    nameInput.setAttribute('aria-invalid', 'true');
    showFormError('token-error', 'Give the token a name, such as ci-deploy.', nameInput);
    return;
  }
  const body = {
    name,
    role: $('token-role').value,
    projects: Array.from($('token-projects-list').querySelectorAll('input:checked'), (b) => b.value),
    expires_in: $('token-expiry').value,
  };
  const submit = $('token-create');
  submit.disabled = true;
  clearError();
  try {
    const data = await api('POST', 'api/tokens', body);
    form.reset();
    renderRoleChoices();
    const t = data.token || {};
    showSecret(data.secret, 'Secret for the new API token “' + (t.name || name) + '”',
      'Give it to the tool as a Bearer token (Authorization: Bearer …), or to the CLI with --token.', 'token-secret');
    say('API token “' + (t.name || name) + '” created.');
    await Promise.all([loadTokens(), reload('audit')]);
  } catch (err) {
    showFormError('token-error', err.message, null);
  } finally {
    submit.disabled = false;
  }
}

export function start() {
  provide('tokens', loadTokens);
  $('token-form').hidden = !can('tokens.write');
  if (can('tokens.write')) {
    renderRoleChoices();
    renderProjectChoices();
    on('projects', renderProjectChoices);
    $('token-form').addEventListener('submit', onCreateToken);
  }
  $('tokens-refresh').addEventListener('click', () => loadTokens());
  return loadTokens();
}

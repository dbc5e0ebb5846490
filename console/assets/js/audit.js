// The audit trail: every change to a key, a project, their limits, people, sessions and
// API tokens: who made it, what it was, when. Newest first, a page at a time.

import { api } from './api.js';
import { $, el, parseTime, timeNode } from './dom.js';
import { provide, state } from './state.js';

const ACTIONS = {
  'key.create': 'Created key',
  'key.rotate': 'Rotated key',
  'key.revoke': 'Revoked key',
  'key.limits': 'Set key limits',
  'key.project': 'Moved key',
  'project.create': 'Created project',
  'project.limits': 'Set project limits',
  'project.members': 'Set rules for members\' keys',
  'candidate.reset': 'Reset candidate health',
  'session.sign_in': 'Signed in',
  'session.sign_out': 'Signed out',
  'session.revoke': 'Ended session',
  'user.disable': 'Disabled person',
  'user.enable': 'Enabled person',
  'token.create': 'Created API token',
  'token.revoke': 'Revoked API token',
};

let entries = []; // shown, newest first
let auditSeq = 0;

// loadAudit reads the newest page, or with older set, the page before the last entry
// shown.
async function loadAudit(older) {
  const seq = ++auditSeq;
  const params = new URLSearchParams({ limit: '50' });
  if (older && entries.length) params.set('before', String(entries[entries.length - 1].id));
  try {
    const data = await api('GET', 'api/audit?' + params.toString());
    if (seq !== auditSeq) return;
    const page = Array.isArray(data.entries) ? data.entries : [];
    entries = older ? entries.concat(page) : page;
    $('audit-more').hidden = !data.more;
    $('audit-note').hidden = entries.length > 0;
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
  $('audit-body').replaceChildren(...entries.map((e) => {
    const at = parseTime(e.at);
    return el('tr', { testid: 'audit-row', dataset: { id: String(e.id), action: e.action, target: e.target, actor: e.actor } },
      el('td', { className: 'audit-when' }, at ? timeNode(at, 'both') : '—'),
      el('td', { className: 'audit-actor', testid: 'audit-actor', text: e.actor }),
      el('td', { testid: 'audit-action', text: ACTIONS[e.action] || e.action }),
      el('td', { testid: 'audit-target' }, auditTarget(e)),
      el('td', { className: 'audit-detail', testid: 'audit-detail', text: e.detail || '' }));
  }));
}

export function start() {
  provide('audit', () => loadAudit(false));
  $('audit-refresh').addEventListener('click', () => loadAudit(false));
  $('audit-more').addEventListener('click', () => loadAudit(true));
  return loadAudit(false);
}

// The People view (owners and admins): everyone who has signed in, with the roles their
// groups gave them, whether they are disabled, and their sessions. An owner disables or
// enables a person and ends a session.

import { api } from './api.js';
import { $, clearError, confirmAction, el, say, showError, timeCell } from './dom.js';
import { can, emit, grantsText, provide, state } from './state.js';

let sessions = [];

async function loadPeople() {
  try {
    const data = await api('GET', 'api/people');
    state.people = Array.isArray(data.people) ? data.people : (Array.isArray(data.users) ? data.users : []);
    $('people').dataset.state = 'ready';
    $('people-note').hidden = state.people.length > 0;
    $('people-note').textContent = 'No one has signed in yet.';
  } catch (err) {
    $('people').dataset.state = 'error';
    $('people-note').hidden = false;
    $('people-note').textContent = 'The people could not be loaded: ' + err.message;
  }
  renderPeople();
  renderSessions();
  emit('people');
}

async function loadSessions() {
  try {
    const data = await api('GET', 'api/sessions');
    sessions = Array.isArray(data.sessions) ? data.sessions : [];
    $('sessions-note').hidden = sessions.length > 0;
    $('sessions-note').textContent = 'No sessions.';
  } catch (err) {
    $('sessions-note').hidden = false;
    $('sessions-note').textContent = 'The sessions could not be loaded: ' + err.message;
  }
  renderSessions();
}

function renderPeople() {
  const writes = can('people.write');
  $('people-body').replaceChildren(...state.people.map((p) => {
    const disabled = !!(p.disabled_at && !p.disabled_at.startsWith('0001-'));
    const action = disabled ? 'enable' : 'disable';
    return el('tr', { testid: 'person-row', dataset: { personId: p.id, email: p.email || '', status: disabled ? 'disabled' : 'active' } },
      el('td', { className: 'key-name' },
        el('span', { className: 'name', testid: 'person-name', text: p.name || p.email || p.subject || p.id }),
        p.name && p.email ? el('span', { className: 'sub', testid: 'person-email', text: p.email }) : null),
      el('td', { testid: 'person-roles', text: grantsText(p.grants) }),
      el('td', { testid: 'person-last-sign-in' }, timeCell(p.last_sign_in, 'relative', 'Never')),
      el('td', { testid: 'person-status' },
        el('span', { className: 'badge badge-' + (disabled ? 'revoked' : 'active'), text: disabled ? 'Disabled' : 'Active' }),
        disabled && p.disabled_why ? el('span', { className: 'sub', text: p.disabled_why }) : null),
      el('td', { className: 'key-actions' }, writes ? el('button', {
        type: 'button', className: 'btn btn-small' + (disabled ? '' : ' btn-danger-quiet'), testid: 'person-' + action,
        'aria-label': (disabled ? 'Enable ' : 'Disable ') + (p.email || p.id), onclick: () => setPerson(p, action),
      }, disabled ? 'Enable' : 'Disable…') : null));
  }));
}

async function setPerson(p, action) {
  const who = p.email || p.name || p.id;
  if (action === 'disable' && !await confirmAction('Disable ' + who + '?',
    who + ' is signed out everywhere and cannot sign in again until enabled. What becomes of their keys is each project\'s rule for departed members.',
    'Disable')) return;
  clearError();
  try {
    await api('POST', 'api/people/' + encodeURIComponent(p.id) + '/' + action, {});
    say(who + (action === 'disable' ? ' disabled.' : ' enabled.'));
  } catch (err) {
    showError((action === 'disable' ? 'Disabling ' : 'Enabling ') + who + ' failed: ' + err.message);
  }
  await Promise.all([loadPeople(), loadSessions()]);
}

function personOf(userId) {
  const p = state.people.find((x) => x.id === userId);
  return p ? (p.email || p.name || p.id) : userId;
}

function renderSessions() {
  const writes = can('people.write');
  const mine = state.me && state.me.principal ? state.me.principal.session_id : '';
  $('sessions-body').replaceChildren(...sessions.map((s) => {
    const ended = !!(s.revoked_at && !s.revoked_at.startsWith('0001-'));
    const who = s.user_id ? personOf(s.user_id) : (s.name || s.kind);
    return el('tr', { testid: 'session-row', dataset: { sessionId: s.id, status: ended ? 'revoked' : 'active' } },
      el('td', { className: 'key-name' },
        el('span', { className: 'name', text: who }),
        el('span', { className: 'sub', text: (s.kind === 'break_glass' ? 'break-glass' : 'signed in') + (s.id === mine ? ', this session' : '') })),
      el('td', { text: s.addr || '—' }),
      el('td', {}, timeCell(s.created_at, 'both')),
      el('td', {}, timeCell(s.last_seen_at, 'relative')),
      el('td', {}, ended ? el('span', { className: 'badge badge-revoked', text: 'Ended' }) : timeCell(s.expires_at, 'relative')),
      el('td', { className: 'key-actions' }, writes && !ended ? el('button', {
        type: 'button', className: 'btn btn-small btn-danger-quiet', testid: 'session-revoke',
        'aria-label': 'End the session of ' + who, onclick: () => endSession(s, who),
      }, 'End…') : null));
  }));
}

async function endSession(s, who) {
  if (!await confirmAction('End this session?', who + ' is signed out of this session at once.', 'End session')) return;
  clearError();
  try {
    await api('POST', 'api/sessions/' + encodeURIComponent(s.id) + '/revoke', {});
    say('The session of ' + who + ' was ended.');
  } catch (err) {
    showError('Ending the session failed: ' + err.message);
  }
  await loadSessions();
}

export function start() {
  provide('people', loadPeople);
  $('people-refresh').addEventListener('click', () => { loadPeople(); loadSessions(); });
  return Promise.all([loadPeople(), loadSessions()]);
}

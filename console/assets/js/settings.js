// The Settings view (owners, read-only): how people sign in, as the Caddyfile sets it:
// the provider, the sessions' lifetimes, the mapping from the provider's groups to
// roles, and whether the break-glass password is on. The client secret is never sent.

import { api } from './api.js';
import { $, el, muted } from './dom.js';
import { goDuration } from './format.js';
import { ROLE_NAMES } from './state.js';

// The settings shown first, in this order, with their names in words; any other plain
// setting the API adds is listed after them as it comes.
const FIELDS = [
  ['issuer', 'Issuer'],
  ['client_id', 'Client id'],
  ['redirect_url', 'Redirect address'],
  ['scopes', 'Scopes'],
  ['groups_claim', 'Groups claim'],
  ['session_idle', 'Session ends after idle'],
  ['session_lifetime', 'Session lasts at most'],
  ['recheck', 'Provider asked again every'],
  ['break_glass', 'Break-glass password'],
];
const MAPPING = ['mapping', 'roles', 'role_mapping'];

// durationWords writes whole seconds as the Caddyfile would: 1d, 12h, 15m, 30s.
function durationWords(seconds) {
  for (const [size, unit] of [[86400, 'd'], [3600, 'h'], [60, 'm']]) {
    if (seconds >= size && seconds % size === 0) return seconds / size + unit;
  }
  return seconds + 's';
}

function valueText(name, v) {
  if (name === 'break_glass') return v ? 'on' : 'off';
  if (typeof v === 'boolean') return v ? 'yes' : 'no';
  if (Array.isArray(v)) return v.join(' ');
  // A Go duration as a string ("12h0m0s"), or as nanoseconds.
  if (typeof v === 'string' && v && /^(\d+h)?(\d+m)?(\d+(\.\d+)?s)?$/.test(v)) return goDuration(v) || v;
  if (typeof v === 'number' && /idle|lifetime|recheck/.test(name)) return durationWords(Math.round(v / 1e9));
  return String(v);
}

function renderSettings(s) {
  const shown = new Set();
  const rows = [];
  const add = (name, label) => {
    if (!(name in s) || s[name] === null || typeof s[name] === 'object' && !Array.isArray(s[name])) return;
    shown.add(name);
    rows.push(el('div', { testid: 'setting', dataset: { setting: name } },
      el('dt', { text: label }), el('dd', { text: valueText(name, s[name]) || '—' })));
  };
  for (const [name, label] of FIELDS) add(name, label);
  for (const name of Object.keys(s).sort()) {
    if (!shown.has(name) && !MAPPING.includes(name) && name !== 'client_secret') add(name, name.replace(/_/g, ' '));
  }
  $('settings-list').replaceChildren(...rows);

  const mapping = MAPPING.map((n) => s[n]).find(Array.isArray) || [];
  $('settings-roles-body').replaceChildren(...mapping.map((m) => el('tr', { testid: 'settings-role-row', dataset: { group: m.group || '', role: m.role || '' } },
    el('td', {}, el('code', { text: m.group || '' })),
    el('td', { text: ROLE_NAMES[m.role] || m.role || '' }),
    el('td', {}, m.projects && m.projects.length ? m.projects.join(', ') : muted('every project')))));
  $('settings-roles-empty').hidden = mapping.length > 0;
}

async function loadSettings() {
  try {
    const data = await api('GET', 'api/settings');
    renderSettings(data.settings || data.sign_in || data);
    $('settings').dataset.state = 'ready';
    $('settings-note').hidden = true;
  } catch (err) {
    $('settings').dataset.state = 'error';
    $('settings-note').hidden = false;
    $('settings-note').textContent = 'The settings could not be loaded: ' + err.message;
  }
}

export function start() {
  $('settings-refresh').addEventListener('click', loadSettings);
  return loadSettings();
}

// "New key": a key of one's own and the set-up for a tool, in two clicks. Click "New
// key", pick the tool (and the project, when there are several), click "Create": the
// secret is shown once, beside the set-up for Codex or Claude Code from api/connect
// for that key. A member's key follows the project's rules for members' keys (its
// models and longest lifetime), which the dialog applies and the API enforces.

import { api } from './api.js';
import { $, COPIED, clearError, copyRefused, copyText, el, say } from './dom.js';
import { fetchSetup } from './connect.js';
import { goDuration } from './format.js';
import { forget } from './secrets.js';
import { on, reachesEverywhere as everywhere, reload, state } from './state.js';

const KEY_ENV = 'SWITCHYARD_API_KEY';
const CLIENT_NAMES = { codex: 'Codex', 'claude-code': 'Claude Code' };

let nameTouched = false;

function grants() {
  return (state.me && state.me.principal && state.me.principal.grants) || [];
}


// writableProjects are the projects the principal may make keys in.
function writableProjects() {
  if (everywhere()) return state.projects;
  const ids = new Set(grants().filter((g) => g.role === 'project_admin' || g.role === 'member').flatMap((g) => g.projects || []));
  return state.projects.filter((p) => ids.has(p.id));
}

// memberRulesFor is the project's rules for members' keys when the principal makes the
// key only as a member there (an admin of the project is not bound by them).
function memberRulesFor(projectId) {
  if (!projectId || everywhere()) return null;
  const admin = grants().some((g) => g.role === 'project_admin' && (g.projects || []).includes(projectId));
  if (admin) return null;
  const p = state.projects.find((x) => x.id === projectId);
  return p ? (p.members || null) : null;
}

function renderProjectChoices() {
  const projects = writableProjects();
  const select = $('new-key-project');
  const chosen = select.value;
  const options = everywhere() ? [el('option', { value: '', text: 'No project' })] : [];
  select.replaceChildren(...options, ...projects.map((p) => el('option', { value: p.id, text: p.name && p.name !== p.id ? p.id + ' (' + p.name + ')' : p.id })));
  if (projects.some((p) => p.id === chosen)) select.value = chosen;
  else if (!everywhere() && projects.length) select.value = projects[0].id;
  // One project: nothing to pick; it is named instead.
  const one = options.length + projects.length === 1;
  $('new-key-project-field').hidden = one;
  $('new-key-project-one').hidden = !one || !projects.length;
  $('new-key-project-one').textContent = projects.length ? 'In project ' + projects[0].id + '.' : '';
  const none = !everywhere() && projects.length === 0;
  $('new-key-none').hidden = !none;
  $('create-key').disabled = none;
  renderRules();
}

function renderRules() {
  const r = memberRulesFor($('new-key-project').value);
  const parts = [];
  if (r && r.models && r.models.length) parts.push('It may use ' + r.models.join(', ') + '.');
  if (r && goDuration(r.max_expiry)) parts.push('It expires in ' + goDuration(r.max_expiry) + ', the longest the project allows.');
  $('new-key-rules').textContent = parts.join(' ');
  $('new-key-rules').hidden = parts.length === 0;
}

function defaultName() {
  return $('new-key-client').value + '-' + new Date().toISOString().slice(0, 10);
}

function openNewKey() {
  clearError();
  nameTouched = false;
  $('new-key-choose').hidden = false;
  $('new-key-result').hidden = true;
  $('new-key-error').hidden = true;
  renderProjectChoices();
  $('new-key-name').value = defaultName();
  $('new-key-dialog').showModal();
  $('new-key-client').focus();
}

function showNewKeyError(message) {
  $('new-key-error').textContent = message;
  $('new-key-error').hidden = false;
}

async function onCreate(event) {
  event.preventDefault();
  $('new-key-error').hidden = true;
  const name = $('new-key-name').value.trim();
  if (!name) {
    showNewKeyError('Give the key a name.');
    $('new-key-name').focus();
    return;
  }
  const client = $('new-key-client').value;
  const body = { name };
  const project = $('new-key-project').value;
  if (project) body.project_id = project;
  const rules = memberRulesFor(project);
  if (rules && rules.models && rules.models.length) body.models = rules.models;
  if (rules && goDuration(rules.max_expiry)) body.expires_in = goDuration(rules.max_expiry);
  const button = $('create-key');
  button.disabled = true;
  let created;
  try {
    created = await api('POST', 'api/keys', body);
  } catch (err) {
    showNewKeyError(err.message);
    button.disabled = false;
    return;
  }
  button.disabled = false;
  // The secret goes from the answer straight into the dialog, and nowhere else.
  $('key-secret').textContent = created.secret;
  $('new-key-result-title').textContent = 'Your key “' + created.key.name + '” for ' + (CLIENT_NAMES[client] || client);
  $('new-key-env').textContent = 'Put the key in the environment variable ' + KEY_ENV + ' (for example in your shell profile), then set up ' + (CLIENT_NAMES[client] || client) + ':';
  $('connect-setup').textContent = '';
  $('new-key-setup-error').hidden = true;
  $('new-key-copy-status').textContent = '';
  $('new-key-choose').hidden = true;
  $('new-key-result').hidden = false;
  $('key-secret-copy').focus();
  say('Key “' + created.key.name + '” created.');
  reload('keys', 'audit');
  try {
    const { setup } = await fetchSetup(client, created.key.id, window.location.origin, KEY_ENV);
    $('connect-setup').textContent = setup.text || '';
    $('new-key-result').dataset.state = 'ready';
  } catch (err) {
    $('new-key-setup-error').textContent = 'The set-up could not be loaded: ' + err.message;
    $('new-key-setup-error').hidden = false;
    $('new-key-result').dataset.state = 'error';
  }
}

async function copy(node, what) {
  const copied = await copyText(node);
  $('new-key-copy-status').textContent = copied ? COPIED : copyRefused(what);
}

function closed() {
  forget($('key-secret'));
  $('connect-setup').textContent = '';
  delete $('new-key-result').dataset.state;
  $('new-key-result').hidden = true;
  $('new-key-choose').hidden = false;
}

export function start() {
  $('new-key').hidden = false;
  $('new-key').addEventListener('click', openNewKey);
  $('new-key-form').addEventListener('submit', onCreate);
  $('new-key-client').addEventListener('change', () => { if (!nameTouched) $('new-key-name').value = defaultName(); });
  $('new-key-name').addEventListener('input', () => { nameTouched = true; });
  $('new-key-project').addEventListener('change', renderRules);
  $('new-key-cancel').addEventListener('click', () => $('new-key-dialog').close('cancel'));
  $('new-key-done').addEventListener('click', () => $('new-key-dialog').close('done'));
  $('key-secret-copy').addEventListener('click', () => copy($('key-secret'), 'key'));
  $('connect-setup-copy').addEventListener('click', () => copy($('connect-setup'), 'set-up'));
  $('new-key-dialog').addEventListener('close', closed);
  window.addEventListener('pagehide', closed);
  on('projects', renderProjectChoices);
}

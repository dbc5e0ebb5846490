// The Projects view: each project the principal reaches, its spend, limits and keys;
// creating a project (owners and admins); a project's limits and its rules for
// members' keys (those who govern the project: owners, admins, its project admins).

import { api } from './api.js';
import { $, clearError, el, muted, say, showFormError } from './dom.js';
import { apiDuration, goDuration } from './format.js';
import { fillLimits, limitsSummary, openLimits, readLimits, spendNode } from './limits.js';
import { STATUSES, can, emit, on, provide, reload, state } from './state.js';

let membersOf = null; // the project the member-rules dialog is about

export async function loadProjects() {
  try {
    const data = await api('GET', 'api/projects');
    state.projects = Array.isArray(data.projects) ? data.projects : [];
    $('projects').dataset.state = 'ready';
  } catch (err) {
    state.projects = [];
    $('projects').dataset.state = 'error';
    $('projects-summary').textContent = 'The projects could not be loaded: ' + err.message;
    emit('projects');
    return;
  }
  renderProjects();
  emit('projects');
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

// membersSummary says a project's rules for members' keys in a few words.
function membersSummary(r) {
  if (!r) return 'Members may not make keys here yet.';
  const parts = [];
  parts.push(r.models && r.models.length ? 'models ' + r.models.join(', ') : 'every model');
  const max = goDuration(r.max_expiry);
  if (max) parts.push('keys live at most ' + max);
  const own = limitsSummary(r.key_limits);
  if (own) parts.push('each key ' + own);
  const shared = limitsSummary(r.limits);
  if (shared) parts.push('each member ' + shared);
  if (r.departed === 'revoke') parts.push('departed members\' keys revoked' + (goDuration(r.revoke_after) ? ' after ' + goDuration(r.revoke_after) : ''));
  else parts.push('departed members\' keys kept');
  return 'Members: ' + parts.join(' · ');
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
    keysCell.append(muted('No keys'));
  }
  const actions = el('td', { className: 'key-actions' });
  if (can('projects.govern')) {
    actions.append(
      el('button', {
        type: 'button', className: 'btn btn-small', testid: 'project-limits-button',
        'aria-label': 'Limits of project ' + p.id, onclick: () => openLimits('project', p),
      }, 'Limits…'),
      el('button', {
        type: 'button', className: 'btn btn-small', testid: 'project-members-button',
        'aria-label': 'Rules for members\' keys in project ' + p.id, onclick: () => openMembers(p),
      }, 'Members…'));
  }
  return el('tr', { testid: 'project-row', dataset: { projectId: p.id } },
    el('td', { className: 'key-name' },
      el('span', { className: 'name', testid: 'project-name', text: p.name || p.id }),
      el('span', { className: 'sub' }, el('code', { testid: 'project-id', text: p.id })),
      el('span', { className: 'sub', testid: 'project-members', text: membersSummary(p.members) })),
    el('td', { testid: 'project-spend' }, spendNode(p.standing, p.limits)),
    el('td', { className: 'limits-text', testid: 'project-limits', text: limitsSummary(p.limits) || 'None' }),
    keysCell,
    actions);
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
    await reload('projects', 'audit');
  } catch (err) {
    showFormError('project-error', err.message, null);
  } finally {
    submit.disabled = false;
  }
}

// ---- Rules for members' keys ------------------------------------------------------------

function openMembers(p) {
  membersOf = p;
  const r = p.members || {};
  $('members-title').textContent = 'Members\' keys in “' + (p.name || p.id) + '”';
  const allowed = new Set(r.models || []);
  const ids = state.models.map((m) => m.id);
  for (const m of allowed) if (!ids.includes(m)) ids.push(m);
  $('members-models-list').replaceChildren(...ids.map((m, i) => {
    const id = 'members-model-' + i;
    return el('label', { for: id, className: 'check' },
      el('input', { type: 'checkbox', id, value: m, checked: allowed.has(m), testid: 'members-model' }),
      el('span', { className: 'check-id', text: m }));
  }));
  $('members-max-expiry').value = goDuration(r.max_expiry);
  fillLimits('members-key', r.key_limits);
  fillLimits('members-shared', r.limits);
  $('members-departed').value = r.departed === 'revoke' ? 'revoke' : 'keep';
  $('members-revoke-after').value = goDuration(r.revoke_after);
  $('members-revoke-after-field').hidden = r.departed !== 'revoke';
  $('members-error').hidden = true;
  $('members-dialog').showModal();
  $('members-max-expiry').focus();
}

async function onSaveMembers(event) {
  event.preventDefault();
  const p = membersOf;
  if (!p) return;
  $('members-error').hidden = true;
  const rules = {};
  try {
    const models = Array.from($('members-models-list').querySelectorAll('input:checked'), (box) => box.value);
    if (models.length) rules.models = models;
    const max = apiDuration($('members-max-expiry').value, 'Longest lifetime');
    if (max) rules.max_expiry = max;
    const own = readLimits('members-key');
    if (Object.keys(own).length) rules.key_limits = own;
    const shared = readLimits('members-shared');
    if (Object.keys(shared).length) rules.limits = shared;
    rules.departed = $('members-departed').value;
    if (rules.departed === 'revoke') {
      const after = apiDuration($('members-revoke-after').value, 'Revoke after');
      if (after) rules.revoke_after = after;
    }
  } catch (err) {
    showFormError('members-error', err.message, err.field);
    return;
  }
  const save = $('members-form').querySelector('button[type=submit]');
  save.disabled = true;
  clearError();
  try {
    await api('PUT', 'api/projects/' + encodeURIComponent(p.id) + '/members', rules);
    membersOf = null;
    $('members-dialog').close('saved');
    say('Rules for members\' keys in “' + p.id + '” saved.');
    await reload('projects', 'audit');
  } catch (err) {
    showFormError('members-error', err.message, null);
  } finally {
    save.disabled = false;
  }
}

export function start() {
  provide('projects', loadProjects);
  $('project-form').hidden = !can('projects.create');
  if (can('projects.create')) $('project-form').addEventListener('submit', onCreateProject);
  $('members-form').addEventListener('submit', onSaveMembers);
  $('members-cancel').addEventListener('click', () => { membersOf = null; $('members-dialog').close('cancel'); });
  $('members-dialog').addEventListener('close', () => { membersOf = null; });
  $('members-departed').addEventListener('change', () => {
    $('members-revoke-after-field').hidden = $('members-departed').value !== 'revoke';
  });
  $('projects-refresh').addEventListener('click', () => { clearError(); reload('keys'); loadProjects(); });
  on('keys', renderProjects);
  return loadProjects();
}

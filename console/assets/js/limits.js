// Limits: the spend bars of keys and projects, a policy in a few words, reading the
// limit fields of a form, and the dialog that sets a key's limits and project, or a
// project's limits.
//
// Amounts come from the API as exact integers of micro-units (spent_micros, ...) and
// are written with formatCost; budgets as operators write them ("50/month").

import { api, keyPath } from './api.js';
import { $, clearError, el, parseTime, say, showFormError, timeNode } from './dom.js';
import { MICROS, costDecimal, count, formatCost } from './format.js';
import { reachesEverywhere, reload, state } from './state.js';

const PERIODS = { day: 'today (UTC)', month: 'this month (UTC)', total: 'in total' };

let limitsFor = null; // {kind: 'key'|'project', item} the limits dialog is about

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
export function limitsSummary(l) {
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
export function spendNode(standing, limits) {
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
  const summary = limitsSummary(limits);
  if (summary) box.append(el('span', { className: 'sub limits-text', testid: 'limits-summary', text: summary }));
  return box;
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
export function readLimits(prefix) {
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

// fillLimits puts a policy's budget and rates in the fields named prefix-budget, ...
export function fillLimits(prefix, l) {
  l = l || {};
  $(prefix + '-budget').value = l.budget || '';
  $(prefix + '-rpm').value = l.rpm ? String(l.rpm) : '';
  $(prefix + '-tpm').value = l.tpm ? String(l.tpm) : '';
  $(prefix + '-concurrency').value = l.concurrency ? String(l.concurrency) : '';
}

// projectOptions fills a project choice with the projects known, keeping the choice.
export function projectOptions(select, projects, noneText) {
  const chosen = select.value;
  const options = noneText === null ? [] : [el('option', { value: '', text: noneText || 'No project' })];
  select.replaceChildren(...options,
    ...projects.map((p) => el('option', { value: p.id, text: p.name && p.name !== p.id ? p.id + ' (' + p.name + ')' : p.id })));
  if (projects.some((p) => p.id === chosen)) select.value = chosen;
}

// ---- The limits dialog: a key's limits and project, or a project's limits -------------

export function openLimits(kind, item) {
  limitsFor = { kind, item };
  const l = item.limits || {};
  $('limits-title').textContent = kind === 'key' ? 'Limits of key “' + item.name + '”' : 'Limits of project “' + (item.name || item.id) + '”';
  $('limits-intro').textContent = kind === 'key'
    ? 'What this key may use. Its requests must also fit its project\'s limits.'
    : 'What the keys of this project may use together. Each request must also fit its key\'s own limits.';
  $('limits-project-field').hidden = kind !== 'key';
  if (kind === 'key') {
    projectOptions($('limits-project'), state.projects, reachesEverywhere() ? 'No project' : null);
    $('limits-project').value = item.project_id || '';
  }
  fillLimits('limits', l);
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
  const target = limitsFor;
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
    limitsFor = null;
    $('limits-dialog').close('saved');
    say((kind === 'key' ? 'Key “' + item.name + '”' : 'Project “' + item.id + '”') + ' saved.');
    await reload('keys', 'projects', 'audit');
  } catch (err) {
    showFormError('limits-error', err.message, null);
  } finally {
    save.disabled = false;
  }
}

export function startLimits() {
  $('limits-form').addEventListener('submit', onSaveLimits);
  $('limits-cancel').addEventListener('click', () => { limitsFor = null; $('limits-dialog').close('cancel'); });
  $('limits-dialog').addEventListener('close', () => { limitsFor = null; });
}

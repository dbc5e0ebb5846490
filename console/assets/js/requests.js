// The Requests view, the request log: one page at a time, newest first, from api/requests. A row opens
// to show the request's attempts; the filters are sent to the API as they are.

import { api } from './api.js';
import { $, el, parseTime, timeNode } from './dom.js';
import { costDigits, formatCost } from './format.js';
import { on, ownerText, state } from './state.js';

const requests = { rows: [], next: '', seq: 0, open: new Set() };

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

// keyCell names the request's key and, when the key has an owner, the person (or
// service account) it belongs to.
function keyCell(r) {
  const key = state.keys.find((k) => k.id === r.key_id);
  const owner = r.owner || (key ? key.owner : '');
  return el('td', {},
    el('span', { testid: 'request-key', text: r.key_name || r.key_id || '—' }),
    owner ? el('span', { className: 'sub', testid: 'request-owner', title: 'Owner: ' + owner, text: ownerText(owner) }) : null);
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
      keyCell(r),
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

export function start() {
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
  on('people', renderRequests); // the owners' e-mails
  on('keys', renderRequests); // the keys' owners
  return loadRequests(false);
}

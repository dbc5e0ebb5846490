// The Models view: each model, the protocols it speaks, its candidates in priority order
// with their live circuit states (polled), a reset of a candidate's health for those who
// may, and the last hour's latency per model and candidate.

import { api } from './api.js';
import { $, clearError, el, showError } from './dom.js';
import { can, emit, provide, state } from './state.js';

const MODELS_POLL_MS = 15000;

const PROTOCOLS = {
  family_a: ['Family A', 'OpenAI-style: chat completions and responses'],
  family_b: ['Family B', 'Anthropic-style: messages'],
};

const CIRCUITS = {
  closed: ['Closed', 'Healthy: requests go to this candidate in its turn.'],
  half_open: ['Half-open', 'Recovering: a few trial requests are let through to see whether it works again.'],
  open: ['Open', 'Failing: the candidate is skipped until its cooldown ends.'],
};

const countFormat = new Intl.NumberFormat(undefined);

function protocolChip(token) {
  const [label, title] = PROTOCOLS[token] || [token, token];
  return el('span', { className: 'chip chip-proto proto-' + token.replace(/[^a-z0-9_-]/gi, ''), title, text: label });
}

function limitsText(m) {
  const parts = [];
  if (m.context_window) parts.push('window ' + countFormat.format(m.context_window));
  if (m.max_output_tokens) parts.push('output ' + countFormat.format(m.max_output_tokens));
  return parts.length ? parts.join(', ') + ' tokens' : 'not declared';
}

// loadModels reads the models; when the list of ids changed, the views that offer
// models as choices are told ("models").
export async function loadModels(quiet) {
  try {
    const data = await api('GET', 'api/models');
    const models = Array.isArray(data.models) ? data.models : [];
    const idsBefore = state.models.map((m) => m.id).join('\n');
    state.models = models;
    renderModels();
    const changed = !state.modelsLoaded || idsBefore !== models.map((m) => m.id).join('\n');
    state.modelsLoaded = true;
    if (changed) emit('models');
  } catch (err) {
    if (!state.modelsLoaded) {
      emit('models'); // the choices say the models could not be loaded
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
      el('div', {}, el('dt', { text: 'Limits' }),
        el('dd', { testid: 'model-limits', dataset: { contextWindow: String(m.context_window || 0), maxOutputTokens: String(m.max_output_tokens || 0) } },
          limitsText(m))),
      el('div', {}, el('dt', { text: 'Capabilities' }),
        el('dd', { className: 'chips', testid: 'model-capabilities' },
          caps.length ? caps.map((tag) => el('span', { className: 'chip chip-cap', text: tag })) : el('span', { className: 'muted', text: 'none' })))));

  const resets = can('health.reset');
  const candidates = (m.candidates || []).slice().sort((a, b) => a.priority - b.priority);
  const table = el('table', { className: 'candidates', testid: 'candidates-table' },
    el('caption', { className: 'visually-hidden', text: 'Candidates of ' + m.id + ', in priority order' }),
    el('thead', {}, el('tr', {},
      el('th', { scope: 'col', text: 'Candidate' }),
      el('th', { scope: 'col', text: 'Protocol' }),
      el('th', { scope: 'col', className: 'num', text: 'Priority' }),
      el('th', { scope: 'col', text: 'Circuit' }),
      resets ? el('th', { scope: 'col', text: 'Health' }) : null)),
    el('tbody', {}, candidates.map((c) => {
      const [label, help] = CIRCUITS[c.state] || [c.state, ''];
      return el('tr', { testid: 'candidate-row', dataset: { candidate: c.name, state: c.state } },
        el('th', { scope: 'row', className: 'cand-name', text: c.name }),
        el('td', {}, protocolChip(c.protocol)),
        el('td', { className: 'num', text: String(c.priority) }),
        el('td', {}, el('span', {
          className: 'state state-' + String(c.state).replace(/[^a-z_]/g, ''),
          testid: 'candidate-state', title: help, text: label,
        })),
        resets ? el('td', { className: 'key-actions' }, el('button', {
          type: 'button', className: 'btn btn-small', testid: 'candidate-reset',
          title: 'Closes its circuit and clears its cooldown, any pause its upstream asked for, and its demotion, on this gateway. Recorded in the audit trail.',
          'aria-label': 'Reset the health of candidate ' + c.name + ' of ' + m.id, onclick: () => resetCandidate(m.id, c.name),
        }, 'Reset')) : null);
    })));

  return el('article', { className: 'model', testid: 'model-card', dataset: { modelId: m.id }, 'aria-labelledby': titleId },
    head, candidates.length ? table : el('p', { className: 'muted', text: 'No candidates.' }));
}

// resetCandidate clears a candidate's health through the API (audited there) and shows
// the models again.
async function resetCandidate(model, name) {
  clearError();
  try {
    await api('POST', 'api/health/' + encodeURIComponent(model) + '/' + encodeURIComponent(name) + '/reset');
  } catch (err) {
    showError(err.message);
    return;
  }
  await loadModels(true);
}

// ---- Latency ------------------------------------------------------------------------
//
// The last hour per model and candidate from api/latency: a model's total row first,
// then its candidates. Percentiles are the upper bounds of the ledger's buckets.

function latencyMs(ms) {
  if (ms === null || ms === undefined) return '–';
  return ms < 1000 ? '≤ ' + ms + ' ms' : '≤ ' + (ms / 1000).toLocaleString('en', { maximumFractionDigits: 1 }) + ' s';
}

function latencyRow(r, isTotal) {
  const rate = (r.error_rate * 100).toLocaleString('en', { maximumFractionDigits: 1 }) + '%';
  return el('tr', { className: isTotal ? 'latency-total' : 'latency-cand', testid: 'latency-row',
    dataset: { model: r.model, candidate: r.candidate || '' } },
  isTotal ? el('th', { scope: 'row', className: 'cand-name', text: r.model })
    : el('td', { className: 'muted', text: r.model }),
  el('td', { className: 'cand-name', text: isTotal ? 'all' : r.candidate }),
  el('td', { className: 'num', testid: 'latency-requests', text: String(r.requests) }),
  el('td', { className: 'num', testid: 'latency-errors', title: r.errors + ' of ' + r.requests, text: rate }),
  el('td', { className: 'num', testid: 'latency-ttft-p50', text: latencyMs(r.ttft_p50_ms) }),
  el('td', { className: 'num', testid: 'latency-ttft-p95', text: latencyMs(r.ttft_p95_ms) }),
  el('td', { className: 'num', testid: 'latency-duration-p50', text: latencyMs(r.duration_p50_ms) }),
  el('td', { className: 'num', testid: 'latency-duration-p95', text: latencyMs(r.duration_p95_ms) }));
}

async function loadLatency(quiet) {
  const body = $('latency-rows');
  try {
    const d = await api('GET', 'api/latency?window=1h');
    const rows = Array.isArray(d.rows) ? d.rows : [];
    const totals = Array.isArray(d.models) ? d.models : [];
    if (totals.length === 0) {
      body.replaceChildren(el('tr', {}, el('td', { colspan: 8, className: 'empty', text: 'No requests in the last hour.' })));
      return;
    }
    body.replaceChildren(...totals.flatMap((t) => [latencyRow(t, true),
      ...rows.filter((r) => r.model === t.model).map((r) => latencyRow(r, false))]));
  } catch (err) {
    body.replaceChildren(el('tr', {}, el('td', { colspan: 8, className: 'empty', text: 'Latency could not be loaded: ' + err.message })));
    if (!quiet) showError(err.message);
  }
}

export function start() {
  provide('models', () => loadModels(true));
  provide('latency', () => loadLatency(true));
  $('models-refresh').addEventListener('click', () => { clearError(); loadModels(false); loadLatency(false); });
  setInterval(() => {
    if (document.visibilityState === 'visible' && state.me) loadModels(true);
  }, MODELS_POLL_MS);
  return Promise.all([loadModels(false), loadLatency(true)]);
}

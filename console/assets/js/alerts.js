// The Alerts view (read-only: webhooks are configured in the Caddyfile): the webhooks
// told of budget thresholds, circuits and the usage journal, and the latest deliveries.

import { api } from './api.js';
import { $, el, parseTime, timeNode } from './dom.js';

let alertsSeq = 0;

async function loadAlerts() {
  const seq = ++alertsSeq;
  try {
    const data = await api('GET', 'api/alerts');
    if (seq !== alertsSeq) return;
    renderAlerts(data);
    $('alerts').dataset.state = 'ready';
  } catch (err) {
    if (seq !== alertsSeq) return;
    $('alerts').dataset.state = 'error';
    $('alerts-note').hidden = false;
    $('alerts-note').textContent = 'The alerts could not be loaded: ' + err.message;
  }
}

function renderAlerts(data) {
  const hooks = Array.isArray(data.webhooks) ? data.webhooks : [];
  const rows = Array.isArray(data.deliveries) ? data.deliveries : [];
  const note = $('alerts-note');
  note.hidden = data.configured && rows.length > 0;
  note.textContent = data.configured ? 'No alert sent yet.' : 'No alerts are configured (see Alerts in docs/operations.md).';
  // Only a webhook's scheme and host are ever sent to the page.
  $('alerts-webhooks').replaceChildren(...hooks.map((h) => el('li', { testid: 'alerts-webhook' },
    el('code', { text: h.endpoint }), el('span', { className: 'muted', text: ' ' + h.format + ': ' + (h.events || []).join(', ') }))));
  $('alerts-body').replaceChildren(...rows.map((d) => {
    const at = parseTime(d.sent_at || d.created_at);
    let stateText = d.state;
    if (d.state !== 'sent' && d.last_error) stateText += ' (' + d.last_error + ')';
    return el('tr', { testid: 'alerts-row', dataset: { id: String(d.id), kind: d.kind, state: d.state } },
      el('td', { className: 'audit-when' }, at ? timeNode(at, 'both') : '—'),
      el('td', {}, el('code', { text: d.webhook })),
      el('td', { testid: 'alerts-text', text: d.text }),
      el('td', { testid: 'alerts-state', text: stateText }),
      el('td', { text: String(d.attempts) }));
  }));
}

export function start() {
  $('alerts-refresh').addEventListener('click', () => loadAlerts());
  return loadAlerts();
}

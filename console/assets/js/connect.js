// The "Connect a tool" view: the configuration a client needs for this gateway, for the
// models a key may call, as `caddy switchyard connect` prints it. It names the variable
// that holds the key, never the key.

import { api } from './api.js';
import { $, COPIED, copyRefused, copyText, el } from './dom.js';
import { on, state } from './state.js';

let connectSeq = 0;

// fetchSetup asks the API for a client's set-up; keyId may be "" (every model).
export async function fetchSetup(client, keyId, baseURL, keyEnv) {
  const params = new URLSearchParams({ base_url: baseURL, key_env: keyEnv });
  if (keyId) params.set('key', keyId);
  const data = await api('GET', 'api/connect/' + encodeURIComponent(client) + '?' + params.toString());
  return { setup: data.setup || {}, request: client + '?' + params.toString() };
}

function renderConnectKeyChoices() {
  const select = $('connect-key');
  const current = select.value;
  const active = state.keys.filter((k) => k.status === 'active');
  select.replaceChildren(el('option', { value: '', text: 'Any key: every model' }),
    ...active.map((k) => el('option', { value: k.id, text: k.name + ' (' + k.prefix + '…)' })));
  select.value = active.some((k) => k.id === current) ? current : '';
}

async function loadConnect() {
  const seq = ++connectSeq;
  const client = $('connect-client').value;
  const params = new URLSearchParams({ base_url: $('connect-base-url').value.trim(), key_env: $('connect-key-env').value.trim() });
  if ($('connect-key').value) params.set('key', $('connect-key').value);
  $('connect-copy-status').textContent = '';
  try {
    const { setup } = await fetchSetup(client, $('connect-key').value, params.get('base_url'), params.get('key_env'));
    if (seq !== connectSeq) return; // a newer choice is on its way
    $('connect-error').hidden = true;
    $('connect-text').textContent = setup.text || '';
    $('connect-models').textContent = (setup.models || []).length
      ? 'Models: ' + setup.models.join(', ')
      : '';
    $('connect-copy').disabled = false;
    $('connect').dataset.state = 'ready';
    $('connect').dataset.request = client + '?' + params.toString();
  } catch (err) {
    if (seq !== connectSeq) return;
    $('connect-text').textContent = '';
    $('connect-models').textContent = '';
    $('connect-error').textContent = err.message;
    $('connect-error').hidden = false;
    $('connect-copy').disabled = true;
    $('connect').dataset.state = 'error';
    $('connect').dataset.request = client + '?' + params.toString();
  }
}

async function copyConnect() {
  const copied = await copyText($('connect-text'));
  $('connect-copy-status').textContent = copied ? COPIED : copyRefused('set-up');
}

export function start() {
  $('connect-base-url').value = window.location.origin;
  let timer = 0;
  const later = () => { clearTimeout(timer); timer = setTimeout(loadConnect, 250); };
  $('connect-form').addEventListener('change', loadConnect);
  $('connect-form').addEventListener('input', later);
  $('connect-form').addEventListener('submit', (event) => { event.preventDefault(); loadConnect(); });
  $('connect-copy').addEventListener('click', copyConnect);
  on('keys', renderConnectKeyChoices);
  on('models', loadConnect);
}

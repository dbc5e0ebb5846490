// The console's JSON API, as every view calls it.
//
// Every URL is relative ("api/keys"), because the console is mounted under a path that
// Caddy strips (handle_path /console/*). A change (any method but GET) carries the
// console's header, which the API asks of every state-changing call made with a cookie.

const CONSOLE_HEADER = 'X-Switchyard-Console';

let unauthorized = () => {};

// onUnauthorized sets what a 401 turns into: main.js shows the sign-in view. The call
// that got it still fails, so its view stops where it was.
export function onUnauthorized(handler) {
  unauthorized = handler;
}

export async function api(method, path, body) {
  const init = {
    method,
    headers: { Accept: 'application/json' },
    credentials: 'same-origin',
    cache: 'no-store',
  };
  if (method !== 'GET') {
    init.headers['Content-Type'] = 'application/json';
    init.headers[CONSOLE_HEADER] = '1';
    init.body = JSON.stringify(body || {});
  }
  let res;
  try {
    res = await fetch(path, init);
  } catch (err) {
    throw new Error('The gateway could not be reached (' + err.message + ').');
  }
  const text = await res.text();
  let data = null;
  if (text) {
    try {
      data = JSON.parse(text);
    } catch (_) {
      data = null;
    }
  }
  if (!res.ok) {
    let message = 'The gateway answered ' + res.status + (res.statusText ? ' ' + res.statusText : '') + '.';
    if (data && typeof data.error === 'string' && data.error) {
      message = data.error;
    } else if (res.status === 401) {
      message = 'Your console login was not accepted. Reload the page to sign in again.';
    }
    const err = new Error(message);
    err.status = res.status;
    err.data = data;
    if (res.status === 401) unauthorized(data);
    throw err;
  }
  return data || {};
}

export const keyPath = (id, action) => 'api/keys/' + encodeURIComponent(id) + '/' + action;

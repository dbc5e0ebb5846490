// Signing in and out: the sign-in view shown when no one is signed in (the API answered
// 401), and, once someone is, who it is and a way to sign out.

import { api } from './api.js';
import { $, showError } from './dom.js';
import { hideAllSecrets } from './secrets.js';
import { grantsText, state } from './state.js';

// returnPath is where the provider's callback brings the person back to: the console's
// root with the view they were on ("/#/usage"), a path inside the console, as
// auth/login asks.
function returnPath() {
  return /^#\/[a-z]+$/.test(location.hash) ? '/' + location.hash : '/';
}

// signInWays reads how one may sign in from an answer of the API: api/me carries
// sign_in {provider, break_glass}; a 401 of another route names only the sign-in path
// ("sign_in": "auth/login"), and then what api/me said before is kept.
export function signInWays(data) {
  const s = data && data.sign_in;
  if (s && typeof s === 'object') return { provider: !!s.provider, break_glass: !!s.break_glass };
  if (state.me && state.me.sign_in) return state.me.sign_in;
  return { provider: typeof s === 'string', break_glass: false };
}

// showSignIn hides every view and offers the ways in this gateway allows.
export function showSignIn(ways) {
  hideAllSecrets();
  state.me = null;
  for (const dialog of document.querySelectorAll('dialog[open]')) dialog.close('cancel');
  document.body.dataset.signedIn = 'no';
  $('notice').hidden = true;
  $('main-nav').hidden = true;
  $('whoami-bar').hidden = true;
  for (const section of document.querySelectorAll('main section.view')) section.hidden = true;
  const login = new URLSearchParams({ return: returnPath() });
  $('signin-button').href = 'auth/login?' + login.toString();
  $('signin-provider').hidden = !ways.provider;
  $('signin-break-glass').hidden = !ways.break_glass;
  $('signin-none').hidden = ways.provider || ways.break_glass;
  $('signin-view').hidden = false;
  $('signin-heading').focus();
}

// whoText says who is signed in and with which roles: "Ada Lovelace <ada@example.com>,
// member of team-a".
function whoText(p) {
  let who = p.name || p.email || p.id || 'someone';
  if (p.email && p.email !== who) who += ' <' + p.email + '>';
  if (p.kind === 'token') who = 'API token ' + who;
  if (p.kind === 'break_glass') who = 'break-glass ' + who;
  return who + ', ' + grantsText(p.grants);
}

// showWhoami names the principal in the top bar, with Sign out when there is a session
// to end.
export function showWhoami(me, canSignOut) {
  const p = me.principal || {};
  $('signin-view').hidden = true;
  document.body.dataset.signedIn = 'yes';
  $('whoami').textContent = whoText(p);
  $('whoami').dataset.roles = (p.grants || []).map((g) => g.role).join(' ');
  $('whoami').dataset.email = p.email || '';
  $('signout').hidden = !canSignOut;
  $('whoami-bar').hidden = false;
}

async function signOut() {
  $('signout').disabled = true;
  try {
    await api('POST', 'auth/logout', {});
  } catch (err) {
    $('signout').disabled = false;
    showError('Signing out failed: ' + err.message);
    return;
  }
  // A fresh page: nothing the session could read stays behind in it, and api/me,
  // now without a session, brings up the sign-in view.
  hideAllSecrets();
  location.replace(location.pathname);
}

export function start() {
  $('signin-heading').tabIndex = -1;
  $('signout').addEventListener('click', signOut);
}

// Switchyard console: boot, who is signed in, which views they see, and the router.
//
// Rules every module of the console keeps:
// - Every URL is relative ("api/keys"): the console is mounted under a path that Caddy
//   strips (handle_path /console/*).
// - The Content-Security-Policy allows only these modules and the stylesheet: no inline
//   code, no eval, no HTML built from strings (see dom.js).
// - A secret is shown once and held nowhere but the element that shows it (secrets.js,
//   newkey.js).
// - A view or a button is shown only when api/me says the principal may take its
//   action; the API refuses the rest anyway.

import { api, onUnauthorized } from './api.js';
import { $, showError, startConfirm } from './dom.js';
import { startLimits } from './limits.js';
import { hideAllSecrets } from './secrets.js';
import { showSignIn, showWhoami, signInWays, start as startSignIn } from './signin.js';
import { can, reload, state } from './state.js';
import * as alerts from './alerts.js';
import * as audit from './audit.js';
import * as connect from './connect.js';
import * as keys from './keys.js';
import * as models from './models.js';
import * as newKey from './newkey.js';
import * as people from './people.js';
import * as projects from './projects.js';
import * as requests from './requests.js';
import * as settings from './settings.js';
import * as tokens from './tokens.js';
import * as usage from './usage.js';

// The views, in the order of the page and its navigation: each is a section with that
// id, a nav link #nav-<route> to #/<route>, and is shown when the principal may take
// its action.
const VIEWS = [
  { route: 'keys', action: 'keys.read', module: keys },
  { route: 'projects', action: 'projects.read', module: projects },
  { route: 'models', action: 'models.read', module: models },
  { route: 'usage', action: 'usage.read', module: usage },
  { route: 'requests', action: 'requests.read', module: requests },
  { route: 'connect', action: 'connect.read', module: connect },
  { route: 'audit', action: 'audit.read', module: audit },
  { route: 'alerts', action: 'alerts.read', module: alerts },
  { route: 'people', action: 'people.read', module: people },
  { route: 'tokens', action: 'tokens.read', module: tokens },
  { route: 'settings', action: 'settings.read', module: settings },
];

// ---- Router --------------------------------------------------------------------------
//
// Every view the principal may see is on the one page; a route (#/usage) brings its
// view into sight and names it as the current one in the navigation. Routes survive a
// reload and the return from sign-in.

function currentRoute() {
  const m = /^#\/([a-z]+)$/.exec(location.hash);
  return m ? m[1] : '';
}

// go brings the current route's view into sight and moves the focus to its heading;
// again (after the lists arrived) only if the focus is still there.
function go(again) {
  const route = currentRoute();
  for (const v of VIEWS) {
    const link = $('nav-' + v.route);
    if (v.route === route) link.setAttribute('aria-current', 'location');
    else link.removeAttribute('aria-current');
  }
  const view = VIEWS.find((v) => v.route === route && !$(v.route).hidden);
  if (!view) return;
  const heading = $(view.route).querySelector('h2');
  if (again === true && document.activeElement !== heading) return;
  heading.tabIndex = -1;
  $(view.route).scrollIntoView({ block: 'start' });
  heading.focus({ preventScroll: true });
}

function startRouter() {
  window.addEventListener('hashchange', () => go());
  // A link to the route already current changes no hash: bring its view back anyway.
  $('main-nav').addEventListener('click', (event) => {
    const link = event.target.closest('a');
    if (link && link.hash === location.hash) go();
  });
}

// ---- Boot ----------------------------------------------------------------------------

async function whoAmI() {
  return api('GET', 'api/me');
}

async function boot() {
  startConfirm();
  startSignIn();
  onUnauthorized((data) => showSignIn(signInWays(data)));
  let me;
  try {
    me = await whoAmI();
  } catch (err) {
    if (err.status !== 401) showError(err.message); // a 401 has shown the sign-in view
    return;
  }
  state.me = me;
  const canSignOut = (me.principal.kind === 'user' || me.principal.kind === 'break_glass');
  showWhoami(me, canSignOut);

  $('main-nav').hidden = false;
  for (const v of VIEWS) {
    const shown = can(v.action);
    $(v.route).hidden = !shown;
    $('nav-' + v.route).hidden = !shown;
  }
  if (can('keys.govern') || can('projects.govern')) startLimits();
  const loading = VIEWS.filter((v) => can(v.action)).map((v) => v.module.start());
  if (can('keys.write')) newKey.start();

  // Never leave a secret behind in a page the browser may keep for back/forward.
  window.addEventListener('pagehide', hideAllSecrets);
  document.addEventListener('visibilitychange', () => {
    if (document.visibilityState === 'visible' && state.me) reload('models', 'keys', 'projects', 'usage', 'latency');
  });
  startRouter();
  go();
  // The views above the route's grow as their lists arrive: once they have, bring the
  // route's view into sight again, unless the person has moved on meanwhile (go checks
  // that the focus is still on its heading).
  const route = location.hash;
  await Promise.allSettled(loading);
  if (route && location.hash === route) go(true);
}

boot();

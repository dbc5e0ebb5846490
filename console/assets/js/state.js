// What the views share: the lists they load (keys, projects, models, people), who is
// signed in and what they may do, and two ways of telling each other things: events
// ("keys" when the keys were loaded again) and reloads by name ("audit" after a change).

export const state = {
  me: null, // the answer of api/me: principal, can, sign_in
  keys: [],
  models: [],
  modelsLoaded: false,
  projects: [],
  people: [], // known only to those who may read people
};

const bus = new EventTarget();

// on runs fn after each emit(name).
export function on(name, fn) {
  bus.addEventListener(name, () => fn());
}

export function emit(name) {
  bus.dispatchEvent(new Event(name));
}

const loaders = new Map();

// provide registers how to load name again; a view that is not shown registers nothing,
// so reloading it does nothing.
export function provide(name, load) {
  loaders.set(name, load);
}

export function reload(...names) {
  return Promise.all(names.map((n) => (loaders.has(n) ? loaders.get(n)() : null)));
}

// reachesEverywhere reports whether the principal's grants reach every project (owner
// and admin): only they may put a key in no project.
export function reachesEverywhere() {
  const grants = (state.me && state.me.principal && state.me.principal.grants) || [];
  return grants.some((g) => g.role === 'owner' || g.role === 'admin');
}

// can reports whether the signed-in principal may take action somewhere. The console
// hides what the API would refuse; the API decides each call anyway.
export function can(action) {
  return !!(state.me && state.me.can && state.me.can[action]);
}

export const ROLE_NAMES = {
  owner: 'owner',
  admin: 'admin',
  project_admin: 'project admin',
  member: 'member',
  viewer: 'viewer',
};

// grantText says a grant in words: "member of team-a, team-b", "admin".
export function grantText(g) {
  const role = ROLE_NAMES[g.role] || g.role;
  return g.projects && g.projects.length ? role + ' of ' + g.projects.join(', ') : role;
}

export const grantsText = (grants) => (grants || []).map(grantText).join('; ') || 'no role';

// ownerText names a key's owner: the person's e-mail when the people list (or the
// signed-in principal) knows the user, a service account by its name, else the id.
export function ownerText(owner) {
  if (!owner) return '';
  const me = state.me && state.me.principal;
  if (me && me.id === owner && me.email) return me.email;
  const person = state.people.find((p) => p.id === owner);
  if (person) return person.email || person.name || owner;
  if (owner.startsWith('svc:')) return 'service ' + owner.slice(4);
  return owner;
}

export const STATUSES = {
  active: 'Active',
  expired: 'Expired',
  revoked: 'Revoked',
};

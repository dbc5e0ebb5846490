// Secrets, each shown once. A new secret goes straight from the API's answer into its
// secret box and is held nowhere else: not in the page's state, not in storage, not in
// the URL. The box is emptied and removed when dismissed, and every box when the page
// is left.

import { $, COPIED, copyRefused, copyText, say } from './dom.js';

let secretCount = 0;

// showSecret adds a box with a new secret above any still shown (creating or rotating
// another key must not take away one the operator has not copied yet). valueId, when
// given, is the id of the element holding the secret.
export function showSecret(secret, title, extra, valueId) {
  const box = $('secret-template').content.firstElementChild.cloneNode(true);
  const titleId = 'secret-title-' + (++secretCount);
  const heading = box.querySelector('[data-testid=secret-title]');
  heading.id = titleId;
  heading.textContent = title;
  box.setAttribute('aria-labelledby', titleId);
  const value = box.querySelector('[data-testid=secret-value]');
  value.textContent = secret;
  if (valueId) value.id = valueId;
  if (extra) {
    const p = box.querySelector('[data-testid=secret-extra]');
    p.textContent = extra;
    p.hidden = false;
  }
  box.addEventListener('click', async (event) => {
    const action = event.target.closest('[data-action]');
    if (!action) return;
    if (action.dataset.action === 'copy') {
      const copied = await copyText(value);
      box.querySelector('.secret-copied').textContent = copied ? COPIED : copyRefused('secret');
      if (copied) box.classList.add('is-copied');
    }
    if (action.dataset.action === 'dismiss') {
      removeSecret(box);
      const next = $('secret-slot').querySelector('[data-action=copy]');
      if (next) next.focus();
      else $('keys-heading').focus();
      say('The secret was hidden. It cannot be shown again.');
    }
  });
  $('secret-slot').prepend(box);
  box.scrollIntoView({ block: 'nearest', behavior: 'smooth' });
  box.querySelector('[data-action=copy]').focus({ preventScroll: true });
}

// forget empties an element that held a secret, and the selection if it was in it.
export function forget(node) {
  const selection = window.getSelection();
  if (selection && selection.anchorNode && node.contains(selection.anchorNode)) selection.removeAllRanges();
  node.textContent = '';
}

// removeSecret empties a secret box and takes it out of the page.
function removeSecret(box) {
  forget(box.querySelector('.secret-value'));
  box.remove();
}

export function hideAllSecrets() {
  for (const box of $('secret-slot').querySelectorAll('.secret')) removeSecret(box);
}

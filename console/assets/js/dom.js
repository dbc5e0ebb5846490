// What every view uses to build the page: elements made with the DOM API (the page's
// CSP allows no inline code and no HTML built from strings, so text always goes in
// through textContent), times, and the page's notice and status lines.

export const $ = (id) => document.getElementById(id);

// el('td', {className: 'x', testid: 'y', title: 'z'}, child, 'text', ...)
export function el(tag, props, ...children) {
  const node = document.createElement(tag);
  if (props) {
    for (const [name, value] of Object.entries(props)) {
      if (value === undefined || value === null || value === false) continue;
      if (name === 'className') node.className = value;
      else if (name === 'text') node.textContent = value;
      else if (name === 'testid') node.setAttribute('data-testid', value);
      else if (name === 'dataset') Object.assign(node.dataset, value);
      else if (name === 'onclick') node.addEventListener('click', value);
      else node.setAttribute(name, value === true ? '' : String(value));
    }
  }
  for (const child of children.flat()) {
    if (child === undefined || child === null || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

export const muted = (text) => el('span', { className: 'muted', text });

// ---- Times -------------------------------------------------------------------------

export const dateFormat = new Intl.DateTimeFormat(undefined, {
  year: 'numeric', month: 'short', day: 'numeric', hour: '2-digit', minute: '2-digit',
});
const dayFormat = new Intl.DateTimeFormat(undefined, { year: 'numeric', month: 'short', day: 'numeric' });
const clockFormat = new Intl.DateTimeFormat(undefined, { hour: '2-digit', minute: '2-digit' });
const fullFormat = new Intl.DateTimeFormat(undefined, { dateStyle: 'full', timeStyle: 'long' });
const relFormat = new Intl.RelativeTimeFormat(undefined, { numeric: 'auto' });

export function parseTime(value) {
  if (!value || value.startsWith('0001-01-01')) return null;
  const d = new Date(value);
  return Number.isNaN(d.getTime()) ? null : d;
}

export function relative(date) {
  const seconds = (date.getTime() - Date.now()) / 1000;
  const abs = Math.abs(seconds);
  if (abs < 45) return seconds <= 0 ? 'just now' : 'in a moment';
  const steps = [
    [3600, 60, 'minute'],
    [86400, 3600, 'hour'],
    [86400 * 45, 86400, 'day'],
    [86400 * 365, 86400 * 30, 'month'],
    [Infinity, 86400 * 365, 'year'],
  ];
  for (const [limit, size, unit] of steps) {
    if (abs < limit) return relFormat.format(Math.round(seconds / size), unit);
  }
  return '';
}

// shortDate is the day, or "Today" and the time of day (the full time is in the title).
function shortDate(date) {
  if (date.toDateString() === new Date().toDateString()) return 'Today, ' + clockFormat.format(date);
  return dayFormat.format(date);
}

// timeNode shows a time as a date, relative to now, or both, with the full time on hover.
export function timeNode(date, style) {
  const node = el('time', { datetime: date.toISOString(), title: fullFormat.format(date) });
  if (style === 'relative') {
    node.textContent = relative(date);
  } else if (style === 'both') {
    node.append(el('span', { text: shortDate(date) }), el('span', { className: 'sub', text: relative(date) }));
  } else {
    node.textContent = shortDate(date);
  }
  return node;
}

// timeCell is a time, or a muted word when there is none.
export function timeCell(value, style, none) {
  const d = parseTime(value);
  return d ? timeNode(d, style) : muted(none || '—');
}

// ---- Messages ----------------------------------------------------------------------

let statusTimer = 0;

export function showError(message) {
  // Signed out (a 401 brought up the sign-in view): the sign-in view says all there is.
  if (document.body.dataset.signedIn === 'no') return;
  $('notice').querySelector('.notice-text').textContent = message;
  $('notice').hidden = false;
}

export function clearError() {
  $('notice').hidden = true;
  $('notice').querySelector('.notice-text').textContent = '';
}

export function say(message) {
  const line = $('status');
  line.textContent = message;
  clearTimeout(statusTimer);
  statusTimer = setTimeout(() => { line.textContent = ''; }, 10000);
}

export function showFormError(id, message, focus) {
  const box = $(id);
  box.textContent = message;
  box.hidden = false;
  if (focus) focus.focus();
}

// ---- Copying -----------------------------------------------------------------------

export function selectText(node) {
  const range = document.createRange();
  range.selectNodeContents(node);
  const selection = window.getSelection();
  selection.removeAllRanges();
  selection.addRange(range);
}

// copyText puts node's text on the clipboard, or, where the browser allows neither the
// clipboard API nor the copy command, selects it for copying by hand. It answers
// whether the text was copied.
export async function copyText(node) {
  if (navigator.clipboard && window.isSecureContext) {
    try {
      await navigator.clipboard.writeText(node.textContent);
      return true;
    } catch (_) {
      // Fall through: select the text so it can be copied by hand.
    }
  }
  selectText(node);
  try {
    return document.execCommand('copy');
  } catch (_) {
    return false;
  }
}

export const COPIED = 'Copied to the clipboard.';
export const copyRefused = (what) => 'This browser did not allow copying. The ' + what + ' is selected: press Ctrl+C (⌘C on a Mac) to copy it.';

// ---- Confirmation ------------------------------------------------------------------

// confirmAction asks in the page's confirm dialog (never window.confirm, which a test
// browser dismisses on its own) and answers whether the person went ahead. The safe
// choice has the focus.
export function confirmAction(title, text, okLabel) {
  const dialog = $('confirm-dialog');
  $('confirm-title').textContent = title;
  $('confirm-text').textContent = text;
  $('confirm-ok').textContent = okLabel;
  dialog.returnValue = '';
  return new Promise((resolve) => {
    dialog.addEventListener('close', () => resolve(dialog.returnValue === 'ok'), { once: true });
    dialog.showModal();
    $('confirm-cancel').focus();
  });
}

export function startConfirm() {
  $('confirm-cancel').addEventListener('click', () => $('confirm-dialog').close('cancel'));
}

// Counts and amounts. Token counts and costs are integers from the API; costs are
// micro-units of the operator's currency and are turned into decimals by integer
// arithmetic, never through floating point.

export const MICROS = 1000000n;

const integerFormat = new Intl.NumberFormat(undefined, { maximumFractionDigits: 0 });

export const count = (n) => integerFormat.format(n);

// costDecimal writes micro-units as an exact decimal string with six places.
export function costDecimal(micros) {
  let n = BigInt(Math.trunc(Number(micros) || 0));
  const negative = n < 0n;
  if (negative) n = -n;
  return (negative ? '-' : '') + (n / MICROS).toString() + '.' + (n % MICROS).toString().padStart(6, '0');
}

// formatCost shows micro-units as a decimal in the reader's locale, with up to six
// places and at least minDigits. Intl formats a decimal string exactly as written.
export function formatCost(micros, minDigits) {
  const min = minDigits === undefined ? 2 : minDigits;
  return new Intl.NumberFormat(undefined, { minimumFractionDigits: min, maximumFractionDigits: 6 })
    .format(costDecimal(micros));
}

// costDigits is how many decimal places the costs need (2 to 6), so that a column of
// them can share one and line up.
export function costDigits(values) {
  let digits = 2;
  for (const v of values) {
    const frac = costDecimal(v).split('.')[1].replace(/0+$/, '');
    digits = Math.max(digits, frac.length);
  }
  return digits;
}

// goDuration reads a duration as the API writes it ("720h0m0s") into the console's
// words ("30d", "12h", "90m"); "" for none.
export function goDuration(value) {
  const m = /^(?:(\d+)h)?(?:(\d+)m)?(?:(\d+(?:\.\d+)?)s)?$/.exec(String(value || ''));
  if (!m) return String(value || '');
  const hours = Number(m[1] || 0);
  const minutes = Number(m[2] || 0);
  if (hours === 0 && minutes === 0) return '';
  if (minutes === 0) return hours % 24 === 0 ? hours / 24 + 'd' : hours + 'h';
  return hours * 60 + minutes + 'm';
}

// apiDuration writes "30d", "12h" or "90m" as the API reads durations ("720h"); it
// throws on anything else. "" stays "" (no bound).
export function apiDuration(text, what) {
  const v = String(text || '').trim();
  if (v === '') return '';
  const m = /^(\d{1,6})([dhm])$/.exec(v);
  if (!m) throw new Error(what + ': a number with d, h or m, such as 30d, 12h or 90m.');
  return m[2] === 'd' ? Number(m[1]) * 24 + 'h' : v;
}

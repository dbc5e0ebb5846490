// The Usage view: tokens and cost per day and per model, over the principal's reach
// (a member sees their own keys' usage, the API filters it).
//
// One query (api/usage grouped by day and model) feeds everything: the charts, drawn as
// SVG through the DOM API, and the table of totals per model, which is the accessible
// form of the charts. Token counts and costs are integers from the API; costs are
// micro-units of the operator's currency and are turned into decimals by integer
// arithmetic, never through floating point.

import { api } from './api.js';
import { $, el } from './dom.js';
import { costDigits, count, formatCost } from './format.js';
import { STATUSES, on, provide, state } from './state.js';

const SVG_NS = 'http://www.w3.org/2000/svg';
const PALETTE_SIZE = 8;

// The kinds of token a day's bar is split into "by kind". Input counts cached tokens
// and output counts reasoning tokens, so each pair is split to stack without overlap.
const TOKEN_KINDS = [
  { id: 'input', label: 'Input', help: 'not from the cache', value: (r) => Math.max(0, r.input - r.cached_input) },
  { id: 'cached', label: 'Cached input', help: 'read from the prompt cache', value: (r) => r.cached_input },
  { id: 'output', label: 'Output', help: 'besides reasoning', value: (r) => Math.max(0, r.output - r.reasoning) },
  { id: 'reasoning', label: 'Reasoning', help: 'reasoning or thinking', value: (r) => r.reasoning },
];

const USAGE_FIELDS = ['requests', 'input', 'cached_input', 'cache_write', 'output', 'reasoning', 'cost_micros', 'estimated'];

const compactFormat = new Intl.NumberFormat(undefined, { notation: 'compact', maximumFractionDigits: 2 });
const axisDayFormat = new Intl.DateTimeFormat(undefined, { day: 'numeric', month: 'short', timeZone: 'UTC' });
const longDayFormat = new Intl.DateTimeFormat(undefined, {
  weekday: 'short', day: 'numeric', month: 'short', year: 'numeric', timeZone: 'UTC',
});
const periodFormat = new Intl.DateTimeFormat(undefined, { day: 'numeric', month: 'short', year: 'numeric', timeZone: 'UTC' });

const usage = {
  data: null, // the last answer of api/usage
  seq: 0, // answers to older queries are dropped
  width: 0, // the width the charts were drawn for
  chartCtx: null, // what the charts were drawn from, to redraw them
};

// UTC calendar days as YYYY-MM-DD, the API's days.
function isoDay(ms) {
  return new Date(ms).toISOString().slice(0, 10);
}

function dayMs(day) {
  return Date.parse(day + 'T00:00:00Z');
}

function daysBetween(from, to) {
  const out = [];
  for (let t = dayMs(from), end = dayMs(to); t <= end && out.length < 400; t += 86400000) out.push(isoDay(t));
  return out;
}

function emptyRow() {
  const r = {};
  for (const f of USAGE_FIELDS) r[f] = 0;
  return r;
}

function addRow(sum, r) {
  for (const f of USAGE_FIELDS) sum[f] += Number(r[f]) || 0;
  return sum;
}

const tokensOf = (r) => r.input + r.output;

// modelColours gives each model a colour that stays put while filters change: the
// configured models in their order, then any others (models since removed) by name.
function modelColours(ids) {
  const known = state.models.map((m) => m.id);
  const others = ids.filter((id) => !known.includes(id)).sort();
  const order = known.concat(others);
  const out = new Map();
  for (const id of ids) out.set(id, 'sw-' + (order.indexOf(id) % PALETTE_SIZE));
  return out;
}

// ---- Filters ----

function renderUsageKeyChoices() {
  const select = $('usage-key');
  const chosen = select.value;
  const options = [el('option', { value: '', text: 'All keys' })];
  const keys = state.keys.slice().sort((a, b) => (a.status === 'active' ? 0 : 1) - (b.status === 'active' ? 0 : 1));
  for (const k of keys) {
    const note = k.status === 'active' ? '' : ' — ' + (STATUSES[k.status] || k.status).toLowerCase();
    options.push(el('option', { value: k.id, text: k.name + ' (' + (k.prefix || k.id) + '…)' + note }));
  }
  if (chosen && !state.keys.some((k) => k.id === chosen)) options.push(el('option', { value: chosen, text: chosen }));
  select.replaceChildren(...options);
  select.value = chosen;
}

function renderUsageModelChoices() {
  const select = $('usage-model');
  const chosen = select.value;
  const options = [el('option', { value: '', text: 'All models' })];
  for (const m of state.models) options.push(el('option', { value: m.id, text: m.id }));
  if (chosen && !state.models.some((m) => m.id === chosen)) options.push(el('option', { value: chosen, text: chosen }));
  select.replaceChildren(...options);
  select.value = chosen;
}

function usagePeriod() {
  const days = [7, 30, 90].includes(Number($('usage-range').value)) ? Number($('usage-range').value) : 30;
  const today = Date.now();
  return { from: isoDay(today - (days - 1) * 86400000), to: isoDay(today) };
}

// ---- Loading ----

function setUsageState(name) {
  $('usage').dataset.state = name;
}

function usageNote(text, tone) {
  const note = $('usage-note');
  note.textContent = text;
  note.className = 'usage-note' + (tone ? ' usage-note-' + tone : '');
  note.hidden = !text;
}

async function loadUsage(quiet) {
  const seq = ++usage.seq;
  const period = usagePeriod();
  const params = new URLSearchParams({ from: period.from, to: period.to, group: 'day,model' });
  if ($('usage-key').value) params.set('key', $('usage-key').value);
  if ($('usage-model').value) params.set('model', $('usage-model').value);
  if (!quiet) {
    setUsageState('loading');
    $('usage-summary').textContent = 'Loading usage…';
  }
  // Who served it, through which channel: asked for beside the main answer, so that
  // the section is ready only once both are drawn.
  const supplyParams = new URLSearchParams(params);
  supplyParams.set('group', 'model,candidate,channel');
  let data, supply;
  try {
    [data, supply] = await Promise.all([
      api('GET', 'api/usage?' + params.toString()),
      api('GET', 'api/usage?' + supplyParams.toString()).catch(() => null),
    ]);
  } catch (err) {
    if (seq !== usage.seq) return;
    usage.data = null;
    usage.chartCtx = null;
    $('usage-body').hidden = true;
    if (err.status === 503) {
      // A gateway without a usage store is a setup, not a failure.
      setUsageState('unavailable');
      $('usage-summary').textContent = 'Usage is not recorded on this gateway.';
      usageNote('Nothing to show yet (' + err.message.replace(/\.$/, '') + '). Usage appears here once the gateway\'s store records it.', 'calm');
    } else {
      setUsageState('error');
      $('usage-summary').textContent = 'The usage could not be loaded.';
      usageNote(err.message, 'bad');
    }
    return;
  }
  if (seq !== usage.seq) return;
  usage.data = {
    from: data.from || period.from,
    to: data.to || period.to,
    rows: Array.isArray(data.rows) ? data.rows.map((r) => addRow(Object.assign(emptyRow(), { day: r.day || '', model: r.model || '' }), r)) : [],
    total: addRow(emptyRow(), data.total || {}),
    key: params.get('key') || '',
    model: params.get('model') || '',
  };
  usageNote('', '');
  renderSupply(supply);
  renderUsage();
}

// renderSupply fills the table of totals per model, candidate and channel: who served
// the usage above, and through which channel, at each candidate's own prices.
function renderSupply(data) {
  const rows = data && Array.isArray(data.rows) ? data.rows : [];
  const digits = costDigits(rows.map((r) => r.cost_micros || 0));
  $('usage-supply-body').replaceChildren(...rows.map((r) => el('tr', { testid: 'usage-supply-row',
    dataset: { model: r.model || '', candidate: r.candidate || '', channel: r.channel || '' } },
  el('th', { scope: 'row', text: r.model || '(none)' }),
  el('td', { text: r.candidate || '' }),
  el('td', { text: r.channel || '' }),
  numCell('requests', r.requests || 0, count(r.requests || 0)),
  numCell('input', r.input || 0, count(r.input || 0)),
  numCell('output', r.output || 0, count(r.output || 0)),
  numCell('cost_micros', r.cost_micros || 0, formatCost(r.cost_micros || 0, digits)))));
}

// ---- Rendering ----

function keyLabel(id) {
  const k = state.keys.find((x) => x.id === id);
  return '“' + (k ? k.name : id) + '”';
}

// usageSubject says whose usage is shown: "all keys, all models", "key “x”, all models".
function usageSubject(d) {
  return (d.key ? 'key ' + keyLabel(d.key) : 'all keys') + ', ' + (d.model ? 'model ' + d.model : 'all models');
}

// filterPhrase is the same for the empty state: "" without filters, else " for key “x”
// on model m".
function filterPhrase(d) {
  if (d.key && d.model) return ' for key ' + keyLabel(d.key) + ' on model ' + d.model;
  if (d.key) return ' for key ' + keyLabel(d.key);
  if (d.model) return ' for model ' + d.model;
  return '';
}

function periodText(d) {
  if (d.from === d.to) return periodFormat.format(dayMs(d.from));
  return periodFormat.formatRange(dayMs(d.from), dayMs(d.to));
}

function renderUsage() {
  const d = usage.data;
  if (!d) return;
  const section = $('usage');
  section.dataset.from = d.from;
  section.dataset.to = d.to;
  const days = daysBetween(d.from, d.to);
  $('usage-summary').textContent = periodText(d) + ' (' + days.length + ' days, UTC), ' + usageSubject(d) + '.';
  $('usage-body').hidden = false;

  const empty = d.rows.length === 0 || d.total.requests === 0;
  $('usage-empty').textContent = 'No usage in this period' + filterPhrase(d) + '.';
  $('usage-empty').hidden = !empty;
  $('usage-charts').hidden = empty;
  section.querySelector('.usage-stats').hidden = empty;
  section.querySelector('.usage-table-wrap').hidden = empty;
  section.querySelector('.usage-foot').hidden = empty;
  if (empty) {
    $('usage-tokens-chart').replaceChildren();
    $('usage-cost-chart').replaceChildren();
    $('usage-tokens-legend').replaceChildren();
    $('usage-cost-legend').replaceChildren();
    $('usage-table-body').replaceChildren();
    $('usage-table-foot').replaceChildren();
    usage.chartCtx = null;
    setUsageState('empty');
    return;
  }

  // Sums per model, largest first; that order runs through legend, bars and table.
  const byModel = new Map();
  for (const r of d.rows) addRow(byModel.get(r.model) || byModel.set(r.model, emptyRow()).get(r.model), r);
  const models = Array.from(byModel.keys()).sort((a, b) =>
    tokensOf(byModel.get(b)) - tokensOf(byModel.get(a)) || byModel.get(b).cost_micros - byModel.get(a).cost_micros || (a < b ? -1 : 1));
  const colours = modelColours(models);

  // Each day's rows by model.
  const byDay = new Map();
  for (const r of d.rows) {
    if (!byDay.has(r.day)) byDay.set(r.day, new Map());
    const m = byDay.get(r.day);
    m.set(r.model, addRow(m.get(r.model) || emptyRow(), r));
  }

  // Costs in the table and the summary share a number of decimal places.
  const digits = costDigits(models.map((m) => byModel.get(m).cost_micros).concat([d.total.cost_micros]));
  renderUsageStats(d.total, digits);
  renderUsageCharts({ d, days, byDay, models, colours });
  renderUsageTable({ d, models, byModel, colours, digits });
  setUsageState('ready');
}

function renderUsageStats(t, digits) {
  $('usage-stat-requests').textContent = count(t.requests);
  $('usage-stat-tokens').textContent = count(tokensOf(t));
  $('usage-stat-cost').textContent = formatCost(t.cost_micros, digits);
  $('usage-stat-estimated').textContent = t.estimated ? count(t.estimated) + (t.estimated === 1 ? ' request' : ' requests') : 'None';
}

function renderUsageCharts(ctx) {
  ctx = ctx || usage.chartCtx;
  if (!ctx) return;
  usage.chartCtx = ctx;
  const { d, days, byDay, models, colours } = ctx;
  const frame = $('usage-tokens-chart');
  const width = Math.max(320, Math.floor(frame.clientWidth || frame.parentElement.clientWidth || 960));
  usage.width = width;
  const split = document.querySelector('input[name="usage-split"]:checked');
  const byKind = split && split.value === 'kind';

  const daysWith = days.filter((day) => byDay.has(day));
  if (daysWith.length === 0) { // rows outside the period: nothing to draw
    frame.replaceChildren();
    $('usage-cost-chart').replaceChildren();
    return;
  }
  const totals = new Map(daysWith.map((day) => [day, Array.from(byDay.get(day).values()).reduce((sum, r) => addRow(sum, r), emptyRow())]));
  const dayTotal = (day) => totals.get(day);

  // Tokens: stacked by model, or by kind.
  const tokenSeries = byKind
    ? TOKEN_KINDS.map((k) => ({ id: k.id, label: k.label, help: k.help, cls: 'kind-' + k.id, value: (day) => k.value(dayTotal(day)) }))
    : models.map((m) => ({ id: m, label: m, cls: colours.get(m), value: (day) => tokensOf(byDay.get(day).get(m) || emptyRow()) }));
  const tokenTotal = tokensOf(d.total);
  const busiest = daysWith.reduce((best, day) => (tokensOf(dayTotal(day)) > tokensOf(dayTotal(best)) ? day : best), daysWith[0]);
  frame.replaceChildren(barChart({
    testid: 'usage-tokens-svg',
    width, height: 280, days, daysWith,
    series: tokenSeries,
    tick: (v) => compactFormat.format(v),
    full: (v) => count(v) + ' tokens',
    headline: (day, total) => {
      const t = dayTotal(day);
      return count(total) + ' tokens in ' + count(t.requests) + (t.requests === 1 ? ' request' : ' requests') +
        (t.estimated ? ' (' + count(t.estimated) + ' partly estimated)' : '');
    },
    label: 'Tokens per day, ' + periodText(d) + ', ' + (byKind ? 'by kind' : 'by model') + ': ' + count(tokenTotal) +
      ' tokens on ' + daysWith.length + ' of ' + days.length + ' days; the most on ' +
      longDayFormat.format(dayMs(busiest)) + ' (' + count(tokensOf(dayTotal(busiest))) + '). The table below lists the totals per model.',
  }));
  $('usage-tokens-legend').replaceChildren(...tokenSeries.map(legendItem));

  // Cost: stacked by model. Its legend is the tokens chart's, unless that one is by kind.
  const costSeries = models.map((m) => ({ id: m, label: m, cls: colours.get(m), value: (day) => (byDay.get(day).get(m) || emptyRow()).cost_micros }));
  $('usage-cost-legend').hidden = !byKind;
  $('usage-cost-legend').replaceChildren(...(byKind ? costSeries.map(legendItem) : []));
  const dearest = daysWith.reduce((best, day) => (dayTotal(day).cost_micros > dayTotal(best).cost_micros ? day : best), daysWith[0]);
  const costFrame = $('usage-cost-chart');
  if (d.total.cost_micros <= 0) {
    costFrame.replaceChildren(el('p', { className: 'empty chart-empty', testid: 'usage-cost-none', text: 'No cost in this period: the models used have no prices configured.' }));
  } else {
    costFrame.replaceChildren(barChart({
      testid: 'usage-cost-svg',
      width, height: 190, days, daysWith,
      series: costSeries,
      tick: (v) => formatCost(v, 0),
      full: (v) => formatCost(v),
      headline: (day, total) => 'Cost ' + formatCost(total),
      label: 'Cost per day, ' + periodText(d) + ', by model: ' + formatCost(d.total.cost_micros) + ' in all; the most on ' +
        longDayFormat.format(dayMs(dearest)) + ' (' + formatCost(dayTotal(dearest).cost_micros) + ').',
    }));
  }
}

function legendItem(s) {
  return el('li', { testid: 'usage-legend-item', dataset: { series: s.id } },
    el('span', { className: 'swatch ' + s.cls, 'aria-hidden': 'true' }),
    el('span', { className: s.help ? '' : 'legend-model', text: s.label }),
    s.help ? el('span', { className: 'legend-help', text: s.help }) : null);
}

function svgEl(tag, attrs, ...children) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null) continue;
    if (name === 'testid') node.setAttribute('data-testid', value);
    else if (name === 'text') node.textContent = value;
    else node.setAttribute(name, String(value));
  }
  for (const child of children.flat()) {
    if (child) node.append(child);
  }
  return node;
}

// niceStep is a round step (1, 2, 2.5 or 5 times a power of ten, and a whole number)
// that divides 0..max into about `ticks` parts.
function niceStep(max, ticks) {
  const raw = max / ticks;
  const magnitude = Math.pow(10, Math.floor(Math.log10(raw)));
  for (const m of [1, 2, 2.5, 5, 10]) {
    const step = m * magnitude;
    if (step >= raw && Number.isInteger(step)) return step;
  }
  return Math.max(1, Math.ceil(raw));
}

// barChart draws stacked columns, one per day, with a y axis of round ticks and the
// days along the bottom. Only days with data get a column group, each with a <title>
// that lists what it is made of.
function barChart(o) {
  const { width, height, days, series } = o;
  const values = new Map(o.daysWith.map((day) => [day, series.map((s) => s.value(day))]));
  let max = 0;
  for (const vs of values.values()) max = Math.max(max, vs.reduce((a, b) => a + b, 0));
  const step = niceStep(Math.max(max, 1), 5);
  const top = Math.max(step, Math.ceil(max / step) * step);
  const ticks = [];
  for (let v = 0; v <= top; v += step) ticks.push(v);

  const tickText = ticks.map(o.tick);
  const left = 14 + 7.2 * Math.max(...tickText.map((t) => t.length));
  const right = 8;
  const topPad = 12;
  const bottom = 30;
  const plotW = width - left - right;
  const plotH = height - topPad - bottom;
  const slot = plotW / days.length;
  const barW = Math.max(2, Math.min(46, slot * 0.68));
  const y = (v) => topPad + plotH - (v / top) * plotH;

  const root = svgEl('svg', {
    role: 'img', 'aria-label': o.label, testid: o.testid, class: 'chart-svg',
    width, height, viewBox: '0 0 ' + width + ' ' + height,
  });

  // Grid and y axis.
  const grid = svgEl('g', { class: 'grid', 'aria-hidden': 'true' });
  ticks.forEach((v, i) => {
    const ty = Math.round(y(v)) + 0.5;
    grid.append(
      svgEl('line', { x1: left, x2: width - right, y1: ty, y2: ty, class: v === 0 ? 'axis-line' : 'grid-line' }),
      svgEl('text', { x: left - 8, y: ty, class: 'tick tick-y', 'dominant-baseline': 'middle', 'text-anchor': 'end', text: tickText[i] }));
  });
  root.append(grid);

  // Day labels: every day when there is room, else every few days, counting back
  // from the last so that the newest day is always named.
  const every = [1, 2, 3, 7, 14, 30].find((k) => k * slot >= 58) || 30;
  const xAxis = svgEl('g', { class: 'x-axis', 'aria-hidden': 'true' });
  days.forEach((day, i) => {
    if ((days.length - 1 - i) % every !== 0) return;
    const cx = left + (i + 0.5) * slot;
    const base = topPad + plotH;
    xAxis.append(
      svgEl('line', { x1: cx, x2: cx, y1: base, y2: base + 4, class: 'axis-line' }),
      svgEl('text', { x: cx, y: base + 18, class: 'tick tick-x', 'text-anchor': 'middle', text: axisDayFormat.format(dayMs(day)) }));
  });
  root.append(xAxis);

  // The columns.
  const bars = svgEl('g', { class: 'bars' });
  days.forEach((day, i) => {
    const vs = values.get(day);
    if (!vs) return;
    const total = vs.reduce((a, b) => a + b, 0);
    const lines = [longDayFormat.format(dayMs(day)), o.headline(day, total)];
    series.forEach((s, j) => {
      if (vs[j]) lines.push(s.label + ': ' + o.full(vs[j]));
    });
    const group = svgEl('g', { class: 'bar', testid: 'usage-day', 'data-day': day, 'data-total': total },
      svgEl('title', { text: lines.join('\n') }),
      svgEl('rect', { class: 'hit', x: left + i * slot, y: topPad, width: slot, height: plotH }));
    const x = left + i * slot + (slot - barW) / 2;
    // Parts stack up from the axis, a pixel apart where they are tall enough to spare
    // it. A column too short to see is stretched to 3 px, its parts in proportion.
    const stretch = Math.max(1, 3 / ((total / top) * plotH));
    let edge = y(0);
    let first = true;
    series.forEach((s, j) => {
      if (!vs[j]) return;
      const h = (vs[j] / top) * plotH * stretch;
      const gap = !first && h > 4 ? 1 : 0;
      edge -= h;
      first = false;
      group.append(svgEl('rect', { class: 'seg ' + s.cls, x, y: edge, width: barW, height: h - gap, 'data-series': s.id }));
    });
    bars.append(group);
  });
  root.append(bars);
  return root;
}

function renderUsageTable(ctx) {
  const { d, models, byModel, colours, digits } = ctx;
  $('usage-table-caption').replaceChildren('Totals per model',
    el('span', { className: 'visually-hidden', text: ', ' + periodText(d) + ' (UTC), ' + usageSubject(d) }));
  const cells = (r) => [
    numCell('requests', r.requests, count(r.requests)),
    numCell('input', r.input, count(r.input)),
    numCell('cached_input', r.cached_input, count(r.cached_input)),
    numCell('output', r.output, count(r.output)),
    numCell('reasoning', r.reasoning, count(r.reasoning)),
    numCell('cost_micros', r.cost_micros, formatCost(r.cost_micros, digits)),
    numCell('estimated', r.estimated, count(r.estimated), r.estimated ? 'is-estimated' : ''),
  ];
  $('usage-table-body').replaceChildren(...models.map((m) => el('tr', { testid: 'usage-model-row', dataset: { model: m } },
    el('th', { scope: 'row' }, el('span', { className: 'usage-model' },
      el('span', { className: 'swatch ' + colours.get(m), 'aria-hidden': 'true' }),
      el('span', { className: 'usage-model-id', text: m || '(none)' }))),
    cells(byModel.get(m)))));
  $('usage-table-foot').replaceChildren(el('tr', { testid: 'usage-total-row' },
    el('th', { scope: 'row', text: 'Total' }),
    cells(d.total)));
}

function numCell(field, value, text, extra) {
  return el('td', { className: 'num' + (extra ? ' ' + extra : ''), dataset: { field, value: String(value) }, text });
}

// Redraw the charts when their width changes (the SVG is laid out in pixels, so its
// text stays the size of the page's text).
function watchUsageWidth() {
  if (typeof ResizeObserver !== 'function') return;
  let timer = 0;
  new ResizeObserver(() => {
    clearTimeout(timer);
    timer = setTimeout(() => {
      const frame = $('usage-tokens-chart');
      if (usage.data && !$('usage-charts').hidden && Math.abs(frame.clientWidth - usage.width) > 2) renderUsageCharts(null);
    }, 80);
  }).observe($('usage-charts'));
}

export function start() {
  provide('usage', () => loadUsage(true));
  $('usage-refresh').addEventListener('click', () => loadUsage(false));
  $('usage-filters').addEventListener('change', () => loadUsage(false));
  $('usage-filters').addEventListener('submit', (event) => event.preventDefault());
  for (const radio of document.querySelectorAll('input[name="usage-split"]')) {
    radio.addEventListener('change', () => renderUsageCharts(null));
  }
  on('keys', renderUsageKeyChoices);
  on('models', () => {
    renderUsageModelChoices();
    renderUsage(); // the models' colours follow their configured order
  });
  watchUsageWidth();
  return loadUsage(false);
}

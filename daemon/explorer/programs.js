// programs.js: the cached programs, a page at a time, in a chosen order.
import { api, bytes, clear, el, header, ms, param, programLink, run, table, when } from './common.js';

const ORDERS = [['last_used', 'last used'], ['created', 'newest'], ['compile_time', 'slowest compile'],
  ['hits', 'most hits'], ['size', 'largest']];
const LIMIT = 50;

async function main() {
  header('/explorer/programs.html');
  const order = param('order') || 'last_used';
  const offset = Number(param('offset') || 0);
  const data = await api(`/api/programs?order=${encodeURIComponent(order)}&offset=${offset}&limit=${LIMIT}`);
  const rows = data.programs.map((p) => {
    const s = p.summary || {};
    const n = s.native;
    return el('tr', {},
      el('td', {}, programLink(p.key)),
      el('td', {}, s.where ? `${s.where.file}:${s.where.line}` : ''),
      el('td', {}, s.client || ''),
      el('td', { class: 'num' }, s.nodes === undefined ? '' : String(s.nodes)),
      el('td', {}, n ? `${n.native} / ${n.extern} / ${n.fallback}` : (s.native_failed ? 'native failed: ' + s.native_failed : 'ATen')),
      el('td', { class: 'num' }, ms(p.compile_ms)),
      el('td', { class: 'num' }, String(p.hits)),
      el('td', { class: 'num' }, bytes(p.size)),
      el('td', {}, when(p.created)),
      el('td', {}, when(p.last_used)));
  });
  const select = el('select', { id: 'order', onchange: (e) => { location.search = '?order=' + e.target.value; } },
    ORDERS.map(([v, t]) => el('option', { value: v, selected: v === data.order }, t)));
  const pager = el('p', { class: 'pager' },
    offset > 0 ? el('a', { href: `?order=${data.order}&offset=${Math.max(0, offset - LIMIT)}` }, '← newer') : null, ' ',
    `${data.total ? offset + 1 : 0}–${offset + data.programs.length} of ${data.total}`, ' ',
    offset + LIMIT < data.total ? el('a', { href: `?order=${data.order}&offset=${offset + LIMIT}`, class: 'next' }, 'more →') : null);
  clear(document.getElementById('content'), el('h1', {}, 'Programs'),
    el('p', {}, el('label', { for: 'order' }, 'Order by '), select),
    rows.length ? table(['program', 'source', 'client', 'nodes', 'native / extern / fallback', 'compile', 'hits', 'size', 'compiled', 'last used'], rows)
      : el('p', { class: 'muted' }, 'The cache is empty.'),
    pager);
}

run(main);

// requests.js: the requests this daemon answered lately, newest first:
// when, who, which key, how (hit, compiled, joined...), time per stage.
import { api, clear, el, header, ms, param, programLink, run, table } from './common.js';

function stages(r) {
  const parts = [['validate', r.validate_ms], ['key', r.key_ms], ['queue', r.queue_ms], ['compile', r.compile_ms]]
    .filter(([, v]) => v !== null).map(([k, v]) => `${k} ${ms(v)}`);
  const list = r.stages.length
    ? el('details', {}, el('summary', {}, parts.join(', ')),
      el('ul', { class: 'stages' }, r.stages.map((s) => el('li', {}, `${s.stage}: ${ms(s.ms)}`))))
    : parts.join(', ');
  return list;
}

async function main() {
  header('/explorer/requests.html');
  const before = param('before');
  const data = await api('/api/requests?limit=100' + (before ? '&before=' + encodeURIComponent(before) : ''));
  const rows = data.requests.map((r) => el('tr', { id: 'req-' + r.seq, class: 'outcome-' + r.outcome },
    el('td', {}, String(r.seq)),
    el('td', {}, new Date(r.at).toLocaleTimeString()),
    el('td', {}, r.peer || ''), el('td', {}, r.who || ''),
    el('td', {}, r.key ? programLink(r.key) : ''),
    el('td', {}, el('span', { class: 'badge ' + r.outcome }, r.outcome),
      r.missed ? el('a', { href: '/explorer/miss.html?seq=' + r.seq, class: 'why' }, 'why?') : null),
    el('td', { class: 'num' }, ms(r.total_ms)),
    el('td', {}, stages(r)),
    el('td', { class: 'err' }, r.error || '')));
  const content = document.getElementById('content');
  clear(content, el('h1', {}, 'Recent requests'),
    el('p', { class: 'muted' }, `The last ${data.capacity} Compile requests are kept in memory; newest first.`),
    rows.length ? table(['#', 'time', 'peer', 'token', 'program', 'outcome', 'total', 'stages', 'error'], rows)
      : el('p', { class: 'muted' }, 'No request yet.'),
    data.next_before ? el('p', {}, el('a', { href: '?before=' + data.next_before, class: 'more' }, 'older requests')) : null);
}

run(main);

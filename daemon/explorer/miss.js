// miss.js: why a request missed: the nearest cached program of the same
// graph, and what differs, in words.
import { api, clear, el, header, param, programLink, run } from './common.js';

async function main() {
  header('');
  const key = param('key'), seq = param('seq');
  const path = seq ? `/api/requests/${encodeURIComponent(seq)}/explain` : `/api/programs/${encodeURIComponent(key || '')}/explain`;
  const x = await api(path);
  const content = document.getElementById('content');
  const diffs = x.differences.map((d) => el('li', {}, el('span', { class: 'badge' }, d.component), ' ', d.what));
  clear(content, el('h1', {}, 'Why a request missed'),
    el('p', {}, 'Request for program ', programLink(x.key, x.key), x.cached ? ' (compiled since, now cached)' : ''),
    el('p', { class: 'summary', id: 'summary' }, x.summary),
    x.nearest ? el('p', {}, 'Nearest cached program: ', programLink(x.nearest.key, x.nearest.key), ` — found by ${x.found_by}.`) : null,
    diffs.length ? el('ul', { class: 'differences', id: 'differences' }, diffs) : null);
}

run(main);

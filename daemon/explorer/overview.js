// overview.js: the daemon at a glance: hit rate and compiles over the last
// hour, the compile queue and workers, memory, the cluster tier, the
// slowest compiles.
import { api, bytes, clear, el, header, kv, ms, programLink, run, table, when } from './common.js';

const SVG = 'http://www.w3.org/2000/svg';

function svg(tag, attrs, ...children) {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, String(v));
  for (const c of children) e.append(c);
  return e;
}

// Requests per interval: hits, misses and compiles as stacked bars.
function chart(series) {
  const W = 900, H = 160, buckets = series.buckets;
  const box = svg('svg', { viewBox: `0 0 ${W} ${H + 20}`, class: 'chart', role: 'img' });
  const title = svg('title', {});
  title.textContent = 'requests per 10 s over the last hour: hits, misses, compiles';
  box.append(title);
  if (!buckets.length) return el('p', { class: 'muted' }, 'No request in the last hour.');
  const now = Math.floor(Date.now() / 1000);
  const start = now - 3600;
  const max = Math.max(1, ...buckets.map((b) => b.requests));
  const bw = W / 360;
  for (const b of buckets) {
    const x = ((b.t - start) / 3600) * W;
    const hh = (b.hits / max) * H, mh = (b.misses / max) * H, ch = (b.compiles / max) * H;
    const t = svg('title', {});
    t.textContent = `${new Date(b.t * 1000).toLocaleTimeString()}: ${b.requests} requests, ${b.hits} hits, ${b.misses} misses, ${b.compiles} compiles, ${b.failures} failures`;
    const g = svg('g', {}, t);
    g.append(svg('rect', { x, y: H - hh, width: Math.max(bw, 2), height: hh, class: 'hit' }));
    g.append(svg('rect', { x, y: H - hh - mh, width: Math.max(bw, 2), height: mh, class: 'miss' }));
    g.append(svg('rect', { x, y: H - ch, width: Math.max(bw / 2, 1), height: ch, class: 'compile' }));
    box.append(g);
  }
  const axis = svg('text', { x: 0, y: H + 15, class: 'axis' });
  axis.textContent = `an hour ago … now (peak ${max} requests per 10 s)`;
  box.append(axis);
  return el('figure', {}, box,
    el('figcaption', {}, el('span', { class: 'sw hit' }), 'hits ', el('span', { class: 'sw miss' }), 'misses ',
      el('span', { class: 'sw compile' }), 'compiles'));
}

function meter(used, total) {
  const pct = total ? Math.min(100, (100 * used) / total) : 0;
  return el('span', { class: 'meter', title: `${bytes(used)} of ${bytes(total)}` },
    el('progress', { max: 100, value: pct.toFixed(1) }), ` ${bytes(used)} of ${bytes(total)}`);
}

async function main() {
  header('/explorer/');
  const o = await api('/api/overview');
  const r = o.requests;
  const c = o.cache;
  const content = document.getElementById('content');
  const slow = o.slowest.map((p) => el('tr', {},
    el('td', {}, programLink(p.key)), el('td', {}, ms(p.compile_ms)),
    el('td', {}, p.summary ? String(p.summary.nodes) : ''), el('td', {}, String(p.hits)),
    el('td', {}, p.summary && p.summary.client ? p.summary.client : ''), el('td', {}, when(p.created))));
  clear(content,
    el('h1', {}, 'Overview'),
    el('p', { class: 'muted' }, `compiled ${o.version}, build ${o.build_id.slice(0, 12)}, up since ${when(o.started)}${o.draining ? ' — draining' : ''}`),
    el('section', { class: 'cards' },
      el('div', { class: 'card' }, el('h2', {}, 'Requests'), kv([
        ['requests', String(r.total)],
        ['hit rate', r.hit_rate === null ? '—' : (100 * r.hit_rate).toFixed(1) + ' %'],
        ['hits (memory, sqlite, Redis)', `${r.hits} (${r.memory_hits}, ${r.hits - r.memory_hits}, ${r.l2_hits})`],
        ['misses (joined)', `${r.misses} (${r.joins})`],
        ['compiles (failed)', `${r.compiles} (${r.compile_failures})`],
        ['compile time saved', `${r.saved_s.toFixed(1)} s`]])),
      el('div', { class: 'card' }, el('h2', {}, 'Compile queue'), kv([
        ['queued', String(o.queue.queued)], ['running', `${o.queue.running} of ${o.queue.workers} workers`],
        ['queue limit', String(o.queue.max_queue)],
        ['refused: queue full', String(o.queue.rejected_busy)], ['refused: memory', String(o.queue.rejected_memory)]])),
      el('div', { class: 'card' }, el('h2', {}, 'Memory and cache'), kv([
        ['memory budget', meter(o.memory.in_use, o.memory.budget)],
        ['cache', meter(c.bytes, c.cap)],
        ['entries', String(c.entries)], ['evictions', String(c.evictions)],
        c.kept_requests ? ['requests kept', `${c.kept_requests.count} (${bytes(c.kept_requests.bytes)} of ${bytes(c.kept_requests.budget)})`] : null])),
      el('div', { class: 'card' }, el('h2', {}, 'Cluster tier'), kv(o.cluster.configured ? [
        ['Redis', o.cluster.up ? 'up' : 'DOWN'], ['errors', String(o.cluster.errors)],
        ['hits from Redis', String(o.cluster.l2_hits)], ['stored in Redis', String(o.cluster.l2_puts)],
        ['waited on another daemon', String(o.cluster.lease_waits)], ['took over', String(o.cluster.lease_takeovers)]]
        : [['Redis', 'not configured']]))),
    el('h2', {}, 'The last hour'), chart(o.series),
    el('h2', {}, 'Slowest compiles in the cache'),
    o.slowest.length ? table(['program', 'compile', 'nodes', 'hits', 'client', 'compiled'], slow)
      : el('p', { class: 'muted' }, 'The cache is empty.'));
}

run(main);

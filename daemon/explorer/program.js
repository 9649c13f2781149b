// program.js: one cached program: its summary, its graph (nodes with their
// source locations and the kernels that compute them), each pass's IR, the
// generated C (highlighted by highlight.js; each kernel's comment lists
// the graph nodes it computes, linked back), and the memory plan drawn as
// buffers over time. State lives in the URL's hash (#tab=graph&node=3), so
// that links between nodes and kernels, and the browser's back button,
// work.
import hljs from './vendor/highlight-core.js';
import c from './vendor/highlight-c.js';
import { api, bytes, clear, el, errorBox, header, kv, ms, param, programLink, run, table, when } from './common.js';

hljs.registerLanguage('c', c);

const key = param('key') || '';
const base = '/api/programs/' + encodeURIComponent(key);
const PAGE = 200;   // graph nodes per page
const LINES = 1000; // lines of text per page
const TABS = [['summary', 'Summary'], ['graph', 'Graph'], ['passes', 'Passes'], ['c', 'Generated C'], ['memory', 'Memory plan']];
const PASSES = ['graph', 'functionalize', 'lower', 'schedule', 'plan', 'codegen', 'program'];

let program = null; // GET /api/programs/{key}
let kernels = null; // GET .../kernels, once

function hashState() {
  const h = new URLSearchParams(location.hash.slice(1));
  return { tab: h.get('tab') || 'summary', node: h.get('node'), kernel: h.get('kernel'), pass: h.get('pass'), line: h.get('line'), offset: h.get('offset') };
}

function go(state) {
  const h = new URLSearchParams();
  for (const [k, v] of Object.entries(state)) if (v !== null && v !== undefined) h.set(k, v);
  location.hash = h.toString();
}

function nodeLink(id) {
  return el('a', { href: '#tab=graph&node=' + id, class: 'node-link', 'data-node': id }, 'node ' + id);
}

function kernelLink(name) {
  return el('a', { href: '#tab=c&kernel=' + encodeURIComponent(name), class: 'kernel-link', 'data-kernel': name }, name);
}

async function getKernels() {
  if (!kernels) kernels = (await api(base + '/kernels?limit=5000')).kernels;
  return kernels;
}

// ---- summary ----

async function showSummary(pane) {
  const p = program, e = p.entry, a = p.artifact || {}, n = a.native;
  const s = n && n.summary;
  const req = p.request;
  const parts = [
    ['key', p.key], ['compiled', when(e.created)], ['last used', when(e.last_used)], ['hits', String(e.hits)],
    ['compile time', ms(e.compile_ms)], ['artifact', `${bytes(e.size)} (${bytes(e.stored_size)} stored)`],
    ['compiler build', a.compiler_build_id ? a.compiler_build_id + (a.this_build ? ' (this daemon)' : ' (another build)') : ''],
  ];
  const reqRows = req ? [['client', req.client || ''], ['torch', req.torch_version || ''], ['captured by', req.producer || ''],
    ['nodes, inputs', `${req.nodes}, ${req.inputs}`],
    ['options', `opt level ${req.options.opt_level}, ${req.options.mode}` + (req.options.eager_random ? ', eager_random' : '') +
      (req.options.separate_temporaries ? ', separate_temporaries' : '') + (req.options.return_input_mutations ? ', return_input_mutations' : '')],
    ['target asked', req.target.arch ? `${req.target.arch} ${req.target.isa.join(',')}` : 'the daemon\'s']]
    : [['request', p.request_note || 'not kept']];
  const nat = s ? [['nodes', String(s.nodes)], ['native', String(s.native)], ['extern (library calls)', String(s.extern)],
    ['fallback (ATen calls)', String(s.fallback)], ['kernels', String(s.kernels)], ['kept in registers', String(s.local_buffers)],
    ['arena', bytes(n.arena_bytes)], ['built for', n.target || ''], ['shared object', bytes(n.shared_object_bytes)]]
    : [['native code', 'none: the program runs as ATen calls']];
  const diags = (a.diagnostics || []).map((d) => el('li', { class: d.severity }, `${d.severity}: `, d.message));
  const comps = Object.entries(p.components).map(([k, v]) => [k, el('code', {}, v.slice(0, 16))]);
  const fallbacks = el('div', { id: 'fallbacks' }, s && s.fallback ? el('p', { class: 'loading' }, 'Loading fallbacks…') : null);
  clear(pane,
    el('section', { class: 'cards' },
      el('div', { class: 'card' }, el('h2', {}, 'Entry'), kv(parts)),
      el('div', { class: 'card' }, el('h2', {}, 'Native code'), kv(nat)),
      el('div', { class: 'card' }, el('h2', {}, 'Request'), kv(reqRows)),
      el('div', { class: 'card' }, el('h2', {}, 'Key components'), kv(comps),
        el('p', {}, el('a', { href: '/explorer/miss.html?key=' + encodeURIComponent(p.key), id: 'why-link' }, 'Why was it compiled? (nearest other program)')))),
    diags.length ? el('section', {}, el('h2', {}, 'Diagnostics'), el('ul', {}, diags)) : null,
    s && s.fallback ? el('section', {}, el('h2', {}, 'Fallbacks and why'), fallbacks) : null);
  if (s && s.fallback && p.entry.kept) {
    try {
      const f = await api(base + '/fallbacks');
      clear(fallbacks, table(['node', 'operator', 'where', 'why'], f.fallbacks.map((x) => el('tr', {},
        el('td', {}, nodeLink(x.id)), el('td', {}, x.target), el('td', {}, where(x)), el('td', {}, x.reason)))));
    } catch (err) { clear(fallbacks, errorBox(err)); }
  } else if (s && s.fallback) {
    clear(fallbacks, el('p', {}, 'Operators: ', s.fallback_ops.join(', '), ' (the request was not kept: no reasons)'));
  }
}

function where(n) {
  if (!n.location) return n.module || '';
  const loc = `${n.location.file}:${n.location.line}` + (n.location.function ? ` in ${n.location.function}` : '');
  return n.module ? `${loc} (${n.module})` : loc;
}

// ---- graph ----

async function showGraph(pane, st) {
  if (!program.entry.kept) {
    clear(pane, el('p', {}, program.request_note || 'The request of this program was not kept: no graph to show.'));
    return;
  }
  const want = st.node === null ? null : Number(st.node);
  const offset = want === null ? Number(st.offset || 0) : Math.floor(want / PAGE) * PAGE;
  const g = await api(`${base}/graph?offset=${offset}&limit=${PAGE}`);
  const rows = g.nodes.map((n) => el('tr', { id: 'node-' + n.id, class: n.id === want ? 'selected' : null },
    el('td', { class: 'num' }, String(n.id)),
    el('td', { class: 'node' }, el('code', {}, n.text)),
    el('td', {}, where(n),
      n.stack_trace ? el('details', {}, el('summary', {}, 'stack'), el('pre', { class: 'stack' }, n.stack_trace)) : null),
    el('td', {}, el('span', { class: 'badge ' + n.status, title: n.reason }, n.status),
      n.status === 'fallback' ? el('div', { class: 'reason' }, n.reason) : null),
    el('td', {}, n.kernels.map((k, i) => [i ? ', ' : '', kernelLink(k)]))));
  const pager = el('p', { class: 'pager' },
    offset > 0 ? el('a', { href: '#tab=graph&offset=' + Math.max(0, offset - PAGE) }, '← previous') : null, ' ',
    `nodes ${offset}–${offset + g.nodes.length - 1} of ${g.total}`, ' ',
    offset + PAGE < g.total ? el('a', { href: '#tab=graph&offset=' + (offset + PAGE) }, 'next →') : null);
  clear(pane,
    g.functional ? null : el('p', { class: 'warn' }, 'Kept in eager form: ', g.eager_reason || ''),
    g.derive_note ? el('p', { class: 'warn' }, g.derive_note) : null,
    g.derive_error ? el('p', { class: 'warn' }, g.derive_error) : null,
    el('p', { class: 'muted' }, 'The functional graph the back half compiled; ids are those the generated C names in its kernel comments.'),
    pager, table(['id', 'node', 'source', 'status', 'kernels'], rows), pager.cloneNode(true));
  if (want !== null) {
    const row = document.getElementById('node-' + want);
    if (row) row.scrollIntoView({ block: 'center' });
  }
}

// ---- passes ----

async function showPasses(pane, st) {
  const pass = st.pass || 'lower';
  const offset = Number(st.offset || 0);
  const buttons = el('p', { class: 'tabs small' }, PASSES.map((p) =>
    el('a', { href: `#tab=passes&pass=${p}`, class: p === pass ? 'active' : null }, p)));
  if (!program.entry.kept) {
    clear(pane, buttons, el('p', {}, program.request_note || 'The request was not kept: the passes cannot be derived.'));
    return;
  }
  let t;
  try {
    t = await api(`${base}/passes/${pass}?offset=${offset}&limit=${LINES}`);
  } catch (err) {
    clear(pane, buttons, errorBox(err));
    return;
  }
  const pager = el('p', { class: 'pager' },
    offset > 0 ? el('a', { href: `#tab=passes&pass=${pass}&offset=${Math.max(0, offset - LINES)}` }, '← previous') : null, ' ',
    `lines ${offset + 1}–${offset + t.lines.length} of ${t.total_lines}${t.cut ? ' (cut)' : ''}`, ' ',
    offset + LINES < t.total_lines ? el('a', { href: `#tab=passes&pass=${pass}&offset=${offset + LINES}` }, 'next →') : null);
  clear(pane, buttons,
    el('p', { class: 'muted' }, 'Derived again from the kept request by this daemon (compilectl graph ' + pass + ' prints the same).'),
    pager, el('pre', { class: 'ir', id: 'pass-text' }, t.lines.join('\n')));
}

// ---- generated C ----

async function showC(pane, st) {
  const n = program.artifact && program.artifact.native;
  if (!n || !n.c) {
    clear(pane, el('p', {}, 'No generated C: the program runs as ATen calls (see its diagnostics).'));
    return;
  }
  let ks = [];
  if (program.entry.kept) {
    try { ks = await getKernels(); } catch (err) { ks = []; }
  }
  let line = st.line ? Number(st.line) : null;
  let kernel = null;
  if (st.kernel) {
    kernel = ks.find((k) => k.name === st.kernel) || null;
    if (kernel && kernel.line) line = kernel.line;
  }
  const offset = line ? Math.floor((line - 1) / LINES) * LINES : Number(st.offset || 0);
  const t = await api(`${base}/c?offset=${offset}&limit=${LINES}`);
  const code = el('code', { class: 'language-c hljs' });
  // highlight.js escapes the text it highlights; the page's CSP allows no
  // inline script either way
  code.innerHTML = hljs.highlight(t.lines.join('\n'), { language: 'c', ignoreIllegals: true }).value;
  const gutter = el('pre', { class: 'gutter', 'aria-hidden': 'true' },
    t.lines.map((_, i) => el('span', { id: 'L' + (offset + i + 1), class: offset + i + 1 === line ? 'hl' : null }, String(offset + i + 1) + '\n')));
  const onPage = ks.filter((k) => k.line && k.line > offset && k.line <= offset + t.lines.length);
  const side = el('aside', { class: 'kernels' }, el('h3', {}, 'Kernels on this page'),
    onPage.length ? el('ul', {}, onPage.map((k) => el('li', { class: kernel && k.name === kernel.name ? 'selected' : null },
      el('a', { href: `#tab=c&kernel=${encodeURIComponent(k.name)}` }, k.name), ' computes ',
      k.nodes.map((id, i) => [i ? ', ' : '', nodeLink(id)])))) : el('p', { class: 'muted' }, 'none'));
  const banner = kernel ? el('p', { class: 'banner', id: 'kernel-banner' }, 'Kernel ', el('strong', {}, kernel.name),
    kernel.line ? ` (line ${kernel.line})` : ` runs as an ATen call (${kernel.what || kernel.kind}) on the client: no C of its own`,
    ' computes graph ', kernel.nodes.map((id, i) => [i ? ', ' : '', nodeLink(id)])) : null;
  const pager = el('p', { class: 'pager' },
    offset > 0 ? el('a', { href: '#tab=c&offset=' + Math.max(0, offset - LINES) }, '← previous') : null, ' ',
    `lines ${offset + 1}–${offset + t.lines.length} of ${t.total_lines}`, ' ',
    offset + LINES < t.total_lines ? el('a', { href: '#tab=c&offset=' + (offset + LINES) }, 'next →') : null);
  clear(pane, banner, pager, el('div', { class: 'source' }, gutter, el('pre', { class: 'code' }, code), side));
  if (line) {
    const l = document.getElementById('L' + line);
    if (l) l.scrollIntoView({ block: 'start' });
  }
}

// ---- memory plan ----

const SVG = 'http://www.w3.org/2000/svg';
function svg(tag, attrs) {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, String(v));
  return e;
}

async function showMemory(pane) {
  if (!program.entry.kept) {
    clear(pane, el('p', {}, 'The request was not kept: the memory plan cannot be derived.'));
    return;
  }
  const m = await api(base + '/memory');
  if (!m.buffers.length) {
    clear(pane, el('p', {}, `No arena buffer: every intermediate is kept in registers or made by ATen (arena ${bytes(m.arena_bytes)}).`));
    return;
  }
  const W = 900, H = 360;
  const K = Math.max(1, m.kernels), B = Math.max(1, m.arena_bytes);
  const box = svg('svg', { viewBox: `0 0 ${W} ${H + 24}`, class: 'memory', role: 'img' });
  const title = svg('title', {});
  title.textContent = 'arena buffers: kernels (time) across, offset down';
  box.append(title);
  m.buffers.forEach((b, i) => {
    const x = (b.first / K) * W, w = Math.max(2, ((b.last - b.first + 1) / K) * W);
    const y = (b.offset / B) * H, h = Math.max(1, (b.bytes / B) * H);
    const r = svg('rect', { x, y, width: w, height: h, class: 'buf c' + (i % 8), 'data-buf': b.id });
    const t = svg('title', {});
    t.textContent = `buf${b.id}${b.value ? ' (' + b.value + ')' : ''}: ${b.dtype}${b.shape}, ${bytes(b.bytes)} at offset ${b.offset}, live in kernels ${b.first}..${b.last}` +
      (b.in_place_of !== null ? `, in place of buf${b.in_place_of}` : '');
    r.append(t);
    box.append(r);
  });
  const axis = svg('text', { x: 0, y: H + 18, class: 'axis' });
  axis.textContent = `kernel 0 … ${m.kernels - 1} (time) →   offset 0 … ${bytes(m.arena_bytes)} ↓`;
  box.append(axis);
  const rows = m.buffers.slice(0, 500).map((b) => el('tr', {},
    el('td', {}, 'buf' + b.id), el('td', {}, b.value || ''), el('td', {}, b.dtype + b.shape), el('td', { class: 'num' }, bytes(b.bytes)),
    el('td', { class: 'num' }, String(b.offset)), el('td', {}, `${b.first}..${b.last}`),
    el('td', {}, b.in_place_of === null ? '' : 'buf' + b.in_place_of)));
  clear(pane, el('p', {}, `Arena of ${bytes(m.arena_bytes)}, ${m.total_buffers} buffers over ${m.kernels} kernels` +
    (m.total_buffers > m.buffers.length ? ` (the ${m.buffers.length} largest drawn)` : '') + '.'),
  box, table(['buffer', 'value', 'type', 'bytes', 'offset', 'live (kernels)', 'in place of'], rows));
}

// ---- the page ----

async function render() {
  const st = hashState();
  const tabs = document.getElementById('tabs');
  for (const a of tabs.querySelectorAll('a')) a.classList.toggle('active', a.dataset.tab === st.tab);
  const pane = document.getElementById('pane');
  clear(pane, el('p', { class: 'loading' }, 'Loading…'));
  try {
    if (st.tab === 'graph') await showGraph(pane, st);
    else if (st.tab === 'passes') await showPasses(pane, st);
    else if (st.tab === 'c') await showC(pane, st);
    else if (st.tab === 'memory') await showMemory(pane);
    else await showSummary(pane);
  } catch (err) {
    clear(pane, errorBox(err));
  }
  pane.dataset.ready = st.tab;
}

async function main() {
  header('');
  program = await api(base);
  const content = document.getElementById('content');
  const s = program.entry.summary || {};
  clear(content,
    el('h1', {}, 'Program ', el('code', {}, program.key.slice(0, 16))),
    el('p', { class: 'muted' }, s.where ? `from ${s.where.file}:${s.where.line}` : '', s.client ? ` · client ${s.client}` : ''),
    el('nav', { class: 'tabs', id: 'tabs' }, TABS.map(([t, name]) => el('a', { href: '#tab=' + t, 'data-tab': t }, name))),
    el('div', { id: 'pane' }));
  window.addEventListener('hashchange', render);
  await render();
}

export { go };
run(main);

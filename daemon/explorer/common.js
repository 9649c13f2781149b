// common.js: what every page of the explorer shares. Pages build their
// content with el(), which sets every string as text (never as HTML), so
// whatever a client sent (names, stack traces, paths) is shown as is and
// cannot run. The Content-Security-Policy header forbids inline script.

export function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === 'class') e.className = v;
    else if (k === 'text') e.textContent = v;
    else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v === true ? '' : String(v));
  }
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined || c === false) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

export function clear(node, ...children) {
  node.replaceChildren(...children.flat(Infinity).filter((c) => c !== null && c !== undefined && c !== false));
  return node;
}

// GET an API path as JSON. A 401 sends the browser to the login form; a
// 503 (another program is being derived) is retried for a while.
export async function api(path) {
  for (let attempt = 0; ; attempt++) {
    const r = await fetch(path, { credentials: 'same-origin', headers: { Accept: 'application/json' } });
    if (r.status === 401) {
      location.href = '/explorer/login';
      throw new Error('not logged in');
    }
    let body = null;
    try { body = await r.json(); } catch (e) { body = null; }
    if (r.status === 503 && attempt < 60 && body && body.error && body.error.code === 'busy') {
      await new Promise((res) => setTimeout(res, 500));
      continue;
    }
    if (!r.ok) {
      const msg = body && body.error ? body.error.message : `HTTP ${r.status}`;
      const err = new Error(msg);
      err.status = r.status;
      err.code = body && body.error ? body.error.code : null;
      throw err;
    }
    return body;
  }
}

export function bytes(n) {
  if (n === null || n === undefined) return '';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  let v = Number(n);
  while (v >= 1024 && i < units.length - 1) { v /= 1024; i++; }
  return (i ? v.toFixed(1) : String(v)) + ' ' + units[i];
}

export function ms(v) {
  if (v === null || v === undefined) return '';
  const n = Number(v);
  return n >= 1000 ? (n / 1000).toFixed(2) + ' s' : n.toFixed(n < 10 ? 2 : 1) + ' ms';
}

export function when(unixSeconds) {
  if (!unixSeconds) return '';
  return new Date(unixSeconds * 1000).toLocaleString();
}

export function shortKey(k) {
  return k ? k.slice(0, 16) : '';
}

export function programLink(key, text) {
  return el('a', { href: '/explorer/program.html?key=' + encodeURIComponent(key), class: 'key' }, text || shortKey(key));
}

export function errorBox(err) {
  return el('div', { class: 'error', role: 'alert' }, String(err && err.message ? err.message : err));
}

export function param(name) {
  return new URLSearchParams(location.search).get(name);
}

const PAGES = [
  ['/explorer/', 'Overview'],
  ['/explorer/requests.html', 'Recent requests'],
  ['/explorer/programs.html', 'Programs'],
];

// The header: the pages, who is looking, and a log-out button for a
// session.
export async function header(active) {
  const nav = document.getElementById('nav');
  if (!nav) return;
  const links = PAGES.map(([href, name]) =>
    el('a', { href, class: href === active ? 'active' : null }, name));
  const who = el('span', { class: 'who' });
  clear(nav, el('span', { class: 'brand' }, 'compiled explorer'), ...links, who);
  try {
    const me = await api('/api/whoami');
    who.append(`${me.who} (${me.role})`);
    if (me.how === 'session') {
      who.append(' ', el('form', { method: 'post', action: '/explorer/logout', class: 'logout' },
        el('button', { type: 'submit' }, 'log out')));
    }
  } catch (e) { /* the page says what failed */ }
}

export function table(headers, rows) {
  return el('table', {},
    el('thead', {}, el('tr', {}, headers.map((h) => el('th', {}, h)))),
    el('tbody', {}, rows));
}

export function kv(pairs) {
  return el('table', { class: 'kv' }, el('tbody', {},
    pairs.filter((p) => p).map(([k, v]) => el('tr', {}, el('th', {}, k), el('td', {}, v)))));
}

// Reports a failed page load instead of leaving it blank.
export function run(main) {
  window.addEventListener('DOMContentLoaded', () => {
    main().catch((e) => {
      const c = document.getElementById('content');
      if (c) c.prepend(errorBox(e));
    });
  });
}

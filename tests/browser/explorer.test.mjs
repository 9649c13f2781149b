// explorer.test.mjs: the compile explorer's pages in a real browser:
// Debian's Chromium, headless, driven by playwright-core (never a browser
// of Playwright's own), against a real daemon that has compiled a few
// programs (tests/python/explorer_util.py starts it and prints what it
// made). Run by `make test-browser` (part of `make test`):
//
//   node --test tests/browser/
//
// $CHROMIUM picks another browser binary; $EXPLORER_SCREENSHOTS=DIR saves
// a PNG of each main page there (docs/explorer/ holds the committed ones).
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import path from 'node:path';
import { chromium } from 'playwright-core';
import { startFixture } from './fixture.mjs';

const SHOTS = process.env.EXPLORER_SCREENSHOTS || '';

let fx; // what the fixture made: {http, tokens, keys, evil}
let fixture;
let browser;

before(async () => {
  fixture = await startFixture();
  fx = fixture.fx;
  // As root Chromium needs --no-sandbox; the rest keep it off the network
  // (this machine has none) and quiet.
  browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    args: ['--no-sandbox', '--headless', '--disable-gpu', '--disable-dev-shm-usage', '--disable-quic',
      '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
});

after(async () => {
  if (browser) await browser.close();
  if (fixture) await fixture.stop();
});

// A browser context, optionally logged in with a token of `role` through
// the login form, and a list of every console error, page error and dialog
// its pages raise.
async function session(role) {
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  const problems = [];
  context.on('page', (p) => watch(p, problems));
  const page = await context.newPage();
  watch(page, problems);
  if (role) {
    await page.goto(fx.http + '/explorer/login');
    await page.fill('#token', fx.tokens[role]);
    await Promise.all([page.waitForURL(fx.http + '/explorer/'), page.click('button[type=submit]')]);
  }
  return { context, page, problems };
}

function watch(page, problems) {
  page.on('console', (m) => { if (m.type() === 'error') problems.push('console: ' + m.text()); });
  page.on('pageerror', (e) => problems.push('page error: ' + e.message));
  page.on('dialog', (d) => { problems.push('dialog: ' + d.message()); d.dismiss(); });
}

async function shot(page, name) {
  if (!SHOTS) return;
  mkdirSync(SHOTS, { recursive: true });
  await page.screenshot({ path: path.join(SHOTS, name + '.png') });
}

// Loads a page and waits until its script has replaced "Loading…".
async function open(page, url) {
  await page.goto(fx.http + url);
  await page.waitForFunction(() => !document.querySelector('main .loading'), null, { timeout: 60000 });
}

// Opens a tab of the program page and waits for it.
async function tab(page, key, hash, ready) {
  await page.goto(`${fx.http}/explorer/program.html?key=${key}#${hash}`);
  await page.waitForSelector(`#pane[data-ready=${ready}]`, { timeout: 60000 });
}

test('no token: the pages send to the login form and the API refuses', async () => {
  const { context, page, problems } = await session(null);
  for (const url of ['/explorer/', '/explorer/programs.html', `/explorer/program.html?key=${fx.keys.mlp}`]) {
    await page.goto(fx.http + url);
    assert.equal(new URL(page.url()).pathname, '/explorer/login', url);
    assert.equal(await page.locator('main').textContent().then((t) => t.includes(fx.keys.mlp)), false);
  }
  const status = await page.evaluate(async () => (await fetch('/api/programs')).status);
  assert.equal(status, 401);
  await page.fill('#token', 'not-a-token-0123456789');
  await Promise.all([page.waitForURL(/failed=1/), page.click('button[type=submit]')]);
  assert.equal(await page.isVisible('#failed'), true);
  await shot(page, 'login');
  await context.close();
  assert.deepEqual(problems.filter((p) => !p.includes('401')), []);
});

test('a read token sees every page, with no console error', async () => {
  const { context, page, problems } = await session('read');
  await open(page, '/explorer/');
  assert.match(await page.textContent('main'), /hit rate/);
  await shot(page, 'overview');
  await open(page, '/explorer/requests.html');
  assert.equal(await page.locator('tbody tr').count() >= 5, true);
  await shot(page, 'requests');
  await open(page, '/explorer/programs.html');
  assert.equal(await page.locator('tbody tr').count(), 5);
  await shot(page, 'programs');
  for (const name of ['mlp', 'batch2', 'transformer']) {
    const key = fx.keys[name];
    await tab(page, key, 'tab=summary', 'summary');
    assert.match(await page.textContent('#pane'), /Native code/);
    if (name === 'transformer') await shot(page, 'program-summary');
    await tab(page, key, 'tab=graph', 'graph');
    assert.equal(await page.locator('#pane tbody tr').count() > 2, true);
    if (name === 'batch2') await shot(page, 'program-graph');
    for (const pass of ['graph', 'functionalize', 'lower', 'schedule', 'plan', 'codegen', 'program']) {
      await tab(page, key, 'tab=passes&pass=' + pass, 'passes');
      assert.equal((await page.textContent('#pass-text')).length > 0, true, pass);
    }
    if (name === 'batch2') await shot(page, 'program-passes');
    await tab(page, key, 'tab=c', 'c');
    assert.equal(await page.locator('pre.code .hljs-comment').count() > 0, true, 'highlighted');
    await tab(page, key, 'tab=memory', 'memory');
    if (name === 'transformer') assert.equal(await page.locator('svg.memory rect.buf').count() > 1, true);
    if (name === 'transformer') await shot(page, 'program-memory');
  }
  await open(page, `/explorer/miss.html?key=${fx.keys.batch4}`);
  await context.close();
  assert.deepEqual(problems, []);
});

test('a node links to its kernel in the C, and the kernel back to the node', async () => {
  const { context, page, problems } = await session('read');
  const key = fx.keys.batch2;
  await tab(page, key, 'tab=graph', 'graph');
  const row = page.locator('#pane tbody tr', { hasText: 'aten::relu' }).first();
  const id = (await row.getAttribute('id')).replace('node-', '');
  const link = row.locator('a.kernel-link').first();
  const kernel = await link.getAttribute('data-kernel');
  await link.click();
  await page.waitForSelector('#pane[data-ready=c]');
  const banner = await page.textContent('#kernel-banner');
  assert.match(banner, new RegExp(kernel));
  assert.match(banner, new RegExp('node ' + id));
  // the kernel's comment line is marked, in view, and names the node
  const marked = page.locator('pre.gutter span.hl');
  assert.equal(await marked.count(), 1);
  assert.equal(await marked.isVisible(), true);
  const code = await page.textContent('pre.code');
  assert.match(code, new RegExp(`/\\* ${kernel}\\n \\*   graph node ${id}:`));
  await shot(page, 'program-c');
  // back: the banner's node link selects the node's row
  await page.locator('#kernel-banner a.node-link', { hasText: 'node ' + id }).click();
  await page.waitForSelector('#pane[data-ready=graph]');
  assert.equal(await page.getAttribute(`#node-${id}`, 'class'), 'selected');
  assert.equal(await page.isVisible(`#node-${id}`), true);
  await context.close();
  assert.deepEqual(problems, []);
});

test('the miss explanation names the changed input', async () => {
  const { context, page, problems } = await session('read');
  await open(page, '/explorer/requests.html');
  const row = page.locator('tbody tr', { has: page.locator(`a[href*="${fx.keys.batch4}"]`) });
  await row.locator('a.why').click();
  await page.waitForSelector('#summary');
  const summary = await page.textContent('#summary');
  assert.match(summary, /input 2 \(x\): dimension 0 is 4, the cached program's is 2/);
  await shot(page, 'miss');
  await context.close();
  assert.deepEqual(problems, []);
});

test('script sent by a client never runs: names, stack traces, paths, client ids', async () => {
  const { context, page, problems } = await session('read');
  const key = fx.keys.evil;
  const visits = [
    () => open(page, '/explorer/programs.html'),
    () => open(page, '/explorer/requests.html'),
    () => tab(page, key, 'tab=summary', 'summary'),
    () => tab(page, key, 'tab=graph', 'graph'),
    () => tab(page, key, 'tab=passes&pass=graph', 'passes'),
    () => tab(page, key, 'tab=passes&pass=codegen', 'passes'),
    () => tab(page, key, 'tab=c', 'c'),
    () => tab(page, key, 'tab=memory', 'memory'),
    () => open(page, `/explorer/miss.html?key=${key}`),
  ];
  const seen = new Set();
  for (const visit of visits) {
    await visit();
    // open every stack trace, hover everything: handlers would fire
    for (const d of await page.locator('details').all()) await d.evaluate((e) => { e.open = true; });
    await page.mouse.move(10, 10);
    const state = await page.evaluate(() => ({
      xss: window.__xss,
      injected: document.querySelectorAll('main img, main iframe, main script, main [onerror], main [onload]').length,
      text: document.querySelector('main').textContent,
    }));
    assert.equal(state.xss, undefined, page.url());
    assert.equal(state.injected, 0, page.url());
    for (const [what, s] of Object.entries(fx.evil)) if (state.text.includes(s)) seen.add(what);
  }
  // and each string was shown, as text, somewhere
  assert.deepEqual([...seen].sort(), Object.keys(fx.evil).sort());
  await context.close();
  assert.deepEqual(problems, []);
});

test('compile and admin tokens may look too', async () => {
  for (const role of ['compile', 'admin']) {
    const { context, page, problems } = await session(role);
    await open(page, '/explorer/programs.html');
    assert.match(await page.textContent('header'), new RegExp(`\\(${role}\\)`));
    await context.close();
    assert.deepEqual(problems, []);
  }
});

// client.test.mjs: the example client (client/ide/explorer.ts, compiled by
// `make test-browser` into $COMPILED_BUILD/ide) against a real daemon:
// what an IDE plugin would do with it.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import path from 'node:path';
import { promisify } from 'node:util';
import { BUILD, startFixture } from './fixture.mjs';

const { ExplorerClient, ExplorerError } = await import(path.join(BUILD, 'ide', 'explorer.js'));

let fixture;
let fx;

before(async () => {
  fixture = await startFixture('--no-torch');
  fx = fixture.fx;
});

after(async () => {
  if (fixture) await fixture.stop();
});

test('lists programs page by page and reads one with its C', async () => {
  const client = new ExplorerClient(fx.http, fx.tokens.read);
  const all = [];
  for await (const p of client.allPrograms('created', 1)) all.push(p.key);
  assert.deepEqual(all.sort(), Object.values(fx.keys).sort());
  const p = await client.program(fx.keys.mlp);
  assert.equal(p.key, fx.keys.mlp);
  assert.ok(p.artifact.native.summary.kernels >= 1);
  assert.deepEqual(p.passes.map((x) => x.name), ['graph', 'functionalize', 'lower', 'schedule', 'plan', 'codegen', 'program']);
  const kernels = await client.kernels(fx.keys.mlp);
  const loop = kernels.find((k) => k.kind === 'loop');
  const c = await client.kernelSource(fx.keys.mlp, loop);
  assert.match(c, new RegExp(`^/\\* ${loop.name}\\n`));
  assert.match(c, /\n}$/);
});

test('finds the programs and nodes of a source file, by line', async () => {
  const client = new ExplorerClient(fx.http, fx.tokens.read);
  // mlp.pb's stack traces name regen.py (tests/data/graphs/regen.py), line 42
  const hits = await client.programsForFile('regen.py');
  const mlp = hits.find((h) => h.key === fx.keys.mlp);
  assert.ok(mlp, 'mlp found');
  const nodes = mlp.lines.get(42);
  assert.ok(nodes && nodes.length >= 3, 'nodes of line 42');
  assert.ok(nodes.some((n) => n.status === 'native' && n.kernels.length > 0));
});

test('refuses without a token, and says why', async () => {
  const client = new ExplorerClient(fx.http);
  await assert.rejects(client.programs(), (e) => e instanceof ExplorerError && e.status === 401 && e.code === 'unauthenticated');
});

test('the command line prints JSON', async () => {
  const { stdout } = await promisify(execFile)('node', [path.join(BUILD, 'ide', 'cli.js'), '--url', fx.http,
    'program', fx.keys.transformer], { env: { ...process.env, COMPILED_TOKEN: fx.tokens.read } });
  const p = JSON.parse(stdout);
  assert.equal(p.key, fx.keys.transformer);
  assert.ok(p.artifact.native.arena_bytes > 0);
});

// fixture.mjs: starts tests/python/explorer_util.py (a daemon with the
// explorer and a few programs compiled) for the tests in this folder, and
// stops it (the fixture checks the daemon's clean exit).
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { createInterface } from 'node:readline';

export const SRC = process.env.COMPILED_SRC || path.resolve(import.meta.dirname, '..', '..');
export const BUILD = process.env.COMPILED_BUILD || path.join(SRC, 'build');
const PYTHON = process.env.PYTHON || path.join(SRC, '.venv', 'bin', 'python');

// Resolves to {fx: {http, tokens, keys, evil}, stop()}.
export async function startFixture(...args) {
  const folder = mkdtempSync(path.join(tmpdir(), 'explorer-test-'));
  const proc = spawn(PYTHON, [path.join(SRC, 'tests', 'python', 'explorer_util.py'), path.join(folder, 'd'), ...args], {
    env: {
      ...process.env,
      COMPILED_SRC: SRC,
      COMPILED_BUILD: BUILD,
      PYTHONPATH: [path.join(SRC, 'client', 'python'), path.join(SRC, 'tests', 'python')].join(':'),
    },
    stdio: ['pipe', 'pipe', 'inherit'],
  });
  const exited = new Promise((resolve) => proc.once('exit', resolve));
  const fx = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('the fixture did not start in 180 s')), 180000);
    createInterface({ input: proc.stdout }).once('line', (l) => { clearTimeout(timer); resolve(JSON.parse(l)); });
    exited.then((code) => reject(new Error('the fixture exited with ' + code)));
  });
  return {
    fx,
    async stop() {
      proc.stdin.end(); // the fixture then stops the daemon
      const code = await exited;
      rmSync(folder, { recursive: true, force: true });
      if (code !== 0) throw new Error('the fixture (and its daemon) did not end cleanly: ' + code);
    },
  };
}

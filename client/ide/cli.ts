// cli.ts: the explorer client on the command line, printing JSON:
//
//   node build/ide/cli.js --url http://127.0.0.1:9090 [--token T] programs
//   node build/ide/cli.js ... program KEY
//   node build/ide/cli.js ... explain KEY
//   node build/ide/cli.js ... file PATH      (programs from PATH, by line)
//
// $COMPILED_TOKEN is the token when --token is not given.
import { ExplorerClient, ExplorerError } from './explorer.js';

async function main(argv: string[]): Promise<number> {
  let url = 'http://127.0.0.1:9090';
  let token = process.env.COMPILED_TOKEN;
  const rest: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    if (argv[i] === '--url') url = argv[++i];
    else if (argv[i] === '--token') token = argv[++i];
    else rest.push(argv[i]);
  }
  const client = new ExplorerClient(url, token);
  const [cmd, arg] = rest;
  let out: unknown;
  if (cmd === 'programs') out = await client.programs({ limit: 200 });
  else if (cmd === 'program' && arg) out = await client.program(arg);
  else if (cmd === 'explain' && arg) out = await client.explain(arg);
  else if (cmd === 'file' && arg) {
    out = (await client.programsForFile(arg)).map((h) => ({
      key: h.key, summary: h.summary,
      lines: Object.fromEntries([...h.lines].map(([line, ns]) => [line, ns.map((n) => ({
        id: n.id, target: n.target, status: n.status, reason: n.reason, kernels: n.kernels }))])),
    }));
  } else {
    process.stderr.write('usage: cli.js [--url URL] [--token TOKEN] programs | program KEY | explain KEY | file PATH\n');
    return 2;
  }
  process.stdout.write(JSON.stringify(out, null, 2) + '\n');
  return 0;
}

main(process.argv.slice(2)).then((rc) => { process.exitCode = rc; }, (e: unknown) => {
  process.stderr.write(`cli.js: ${e instanceof ExplorerError ? `${e.message} (HTTP ${e.status})` : String(e)}\n`);
  process.exitCode = 1;
});

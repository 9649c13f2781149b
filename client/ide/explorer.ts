// explorer.ts: a client of the compile explorer's JSON API
// (docs/explorer.md): the core an IDE plugin (a VS Code extension, say)
// can start from to show, next to the user's code, what the daemon
// compiled from it: the programs, their native/extern/fallback counts and
// why each fallback fell back, the generated C of the kernel that computes
// a line, and why a program was compiled again.
//
// It needs only fetch (Node.js 18+, or a browser or VS Code's extension
// host). The token is a --tokens token of any role; it travels in the
// Authorization header, never in a URL.

export interface Where { file: string; line: number; function?: string | null }

export interface Summary {
  client?: string | null; nodes?: number; inputs?: number; torch_version?: string | null;
  producer?: string | null; where?: Where;
  native?: { nodes: number; native: number; extern: number; fallback: number; kernels: number };
  native_failed?: string;
}

export interface Entry {
  key: string; created: number; last_used: number; hits: number; size: number;
  compile_ms: number; stored_size: number; signed: boolean; kept: boolean; summary: Summary | null;
}

export interface ProgramsPage { total: number; offset: number; limit: number; order: string; programs: Entry[] }

export interface Node {
  id: number; text: string; target: string; module: string; stack_trace: string;
  location: Where | null; status: 'native' | 'extern' | 'fallback' | 'folded' | 'aten' | 'eager';
  reason: string; kernels: string[];
}

export interface Kernel { index: number; name: string; kind: 'loop' | 'call' | 'library'; what: string | null; line: number | null; nodes: number[] }

export interface TextPage { name: string; total_lines: number; offset: number; cut: boolean; lines: string[] }

export interface Program {
  key: string; entry: Entry; components: Record<string, string>;
  artifact: {
    version: string; compiler_build_id: string | null; this_build: boolean;
    diagnostics: { severity: string; message: string; node: number }[];
    native: null | {
      summary: { nodes: number; native: number; extern: number; fallback: number; kernels: number; fallback_ops: string[] } | null;
      arena_bytes: number; target: string | null; c?: { bytes: number; lines: number; text: string; cut: boolean };
    };
  };
  request: null | { client: string | null; torch_version: string | null; nodes: number; inputs: number };
  passes: { name: string; url: string }[];
  links: Record<string, string>;
}

export interface Explanation {
  key: string; cached: boolean; summary: string; nearest: Entry | null;
  differing?: string[]; differences: { component: string; what: string }[];
}

/** An error the API answered (status and its error code), or a network one. */
export class ExplorerError extends Error {
  constructor(message: string, readonly status: number, readonly code: string | null) {
    super(message);
  }
}

/** Where in the user's file a program's nodes come from. */
export interface FileHit { key: string; summary: Summary | null; lines: Map<number, Node[]> }

export class ExplorerClient {
  private readonly base: string;

  constructor(base: string, private readonly token?: string,
    private readonly fetchImpl: typeof fetch = fetch) {
    this.base = base.replace(/\/+$/, '');
  }

  /** GET an API path; a 503 while the daemon derives another program is retried. */
  async get<T>(path: string): Promise<T> {
    for (let attempt = 0; ; attempt++) {
      const headers: Record<string, string> = { Accept: 'application/json' };
      if (this.token) headers.Authorization = 'Bearer ' + this.token;
      const r = await this.fetchImpl(this.base + path, { headers });
      const body = await r.json().catch(() => null) as any;
      if (r.status === 503 && attempt < 30) {
        await new Promise((res) => setTimeout(res, 500));
        continue;
      }
      if (!r.ok) {
        throw new ExplorerError(body?.error?.message ?? `HTTP ${r.status}`, r.status, body?.error?.code ?? null);
      }
      return body as T;
    }
  }

  programs(opts: { order?: string; offset?: number; limit?: number } = {}): Promise<ProgramsPage> {
    const q = new URLSearchParams({ order: opts.order ?? 'last_used', offset: String(opts.offset ?? 0), limit: String(opts.limit ?? 50) });
    return this.get<ProgramsPage>('/api/programs?' + q.toString());
  }

  /** Every cached program, a page at a time. */
  async *allPrograms(order = 'last_used', pageSize = 200): AsyncGenerator<Entry> {
    for (let offset = 0; ; offset += pageSize) {
      const page = await this.programs({ order, offset, limit: pageSize });
      yield* page.programs;
      if (offset + page.programs.length >= page.total || page.programs.length === 0) return;
    }
  }

  program(key: string): Promise<Program> {
    return this.get<Program>('/api/programs/' + encodeURIComponent(key));
  }

  /** Every node of a program's graph (paged by the API). */
  async nodes(key: string, pageSize = 1000): Promise<Node[]> {
    const out: Node[] = [];
    for (let offset = 0; ; offset += pageSize) {
      const page = await this.get<{ total: number; nodes: Node[] }>(
        `/api/programs/${encodeURIComponent(key)}/graph?offset=${offset}&limit=${pageSize}`);
      out.push(...page.nodes);
      if (out.length >= page.total || page.nodes.length === 0) return out;
    }
  }

  async kernels(key: string): Promise<Kernel[]> {
    return (await this.get<{ kernels: Kernel[] }>(`/api/programs/${encodeURIComponent(key)}/kernels?limit=5000`)).kernels;
  }

  c(key: string, offset = 0, limit = 1000): Promise<TextPage> {
    return this.get<TextPage>(`/api/programs/${encodeURIComponent(key)}/c?offset=${offset}&limit=${limit}`);
  }

  /** The C of one kernel: from its comment to the end of its function. */
  async kernelSource(key: string, kernel: Kernel): Promise<string | null> {
    if (!kernel.line) return null;
    const page = await this.c(key, kernel.line - 1, 400);
    const lines: string[] = [];
    for (const l of page.lines) {
      lines.push(l);
      if (l === '}') break;
    }
    return lines.join('\n');
  }

  explain(key: string): Promise<Explanation> {
    return this.get<Explanation>('/api/programs/' + encodeURIComponent(key) + '/explain');
  }

  /**
   * The programs with nodes whose source location is in `file` (a path or
   * its tail, as the stack traces name it), with those nodes by line: what
   * an editor shows beside each line. Looks at the most recently used
   * `maxPrograms` programs whose summary names the file.
   */
  async programsForFile(file: string, maxPrograms = 50): Promise<FileHit[]> {
    const hits: FileHit[] = [];
    const matches = (f: string) => f === file || f.endsWith('/' + file) || file.endsWith('/' + f);
    for await (const p of this.allPrograms('last_used')) {
      if (hits.length >= maxPrograms) break;
      if (!p.kept || !p.summary?.where || !matches(p.summary.where.file)) continue;
      const lines = new Map<number, Node[]>();
      for (const n of await this.nodes(p.key)) {
        if (!n.location || !matches(n.location.file)) continue;
        const at = lines.get(n.location.line) ?? [];
        at.push(n);
        lines.set(n.location.line, at);
      }
      hits.push({ key: p.key, summary: p.summary, lines });
    }
    return hits;
  }
}

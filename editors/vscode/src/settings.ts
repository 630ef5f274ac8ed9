/**
 * Translation of the VS Code settings (section `rcaLsp`) into the object the server receives as
 * initializationOptions, as the answer to `workspace/configuration` and in `workspace/didChangeConfiguration`.
 * Pure: no `vscode` import.
 */
import * as os from 'node:os';
import * as path from 'node:path';

export const SECTION = 'rcaLsp';

export const DIAGNOSTIC_CODES = [
  'unknown-train-key',
  'unknown-rollout-key',
  'duplicate-key',
  'invalid-value',
  'json-syntax',
  'unpaired-mapping',
  'missing-op',
  'parameter-sync',
  'in-module-diff',
  'upstream-propagation',
  'fused-structural',
  'unmapped-train-module',
  'nan-inf',
  'rank-disagreement',
  'call-disagreement',
  'aligned-boundary',
  'needs-review',
  'dump-problem',
] as const;

export const SEVERITIES = ['error', 'warning', 'information', 'hint', 'off'] as const;
export type SeverityName = (typeof SEVERITIES)[number];

export const DTYPES = ['float32', 'bfloat16', 'float16'] as const;
export type DtypeName = (typeof DTYPES)[number];

export interface Pair {
  mappingKey: string;
  train: string;
  rollout: string;
  /** Passed through to the server, which validates them: which step, and the rank layouts. */
  step?: number;
  parallel?: string;
  rolloutParallel?: string;
}

/** What the server receives. Keys are only present when they carry a value. */
export interface ServerSettings {
  pairs: Pair[];
  tolerances: Partial<Record<DtypeName, number>>;
  severity: Record<string, SeverityName>;
  outDir: string;
}

export interface VariableContext {
  /** fsPath of the workspace folder that applies (the resource's folder, else the first one). */
  workspaceFolder?: string;
  userHome?: string;
}

/** Expands `${workspaceFolder}`, `${userHome}`, `${env:NAME}` and a leading `~`. Unknown variables stay. */
export function expandVariables(value: string, ctx: VariableContext, env: NodeJS.ProcessEnv = process.env): string {
  const home = ctx.userHome ?? os.homedir();
  let out = value.replace(/\$\{(workspaceFolder|workspaceRoot|userHome|env:([A-Za-z_][A-Za-z0-9_]*))\}/g, (m, name: string, envName?: string) => {
    if (name === 'workspaceFolder' || name === 'workspaceRoot') {
      return ctx.workspaceFolder ?? m;
    }
    if (name === 'userHome') {
      return home;
    }
    if (envName) {
      return env[envName] ?? '';
    }
    return m;
  });
  if (out === '~' || out.startsWith('~/') || out.startsWith('~\\')) {
    out = path.join(home, out.slice(1));
  }
  return out;
}

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/**
 * Builds the server settings from the raw `rcaLsp` configuration object. Invalid entries are dropped
 * and described in `problems` (shown in the output channel), never thrown.
 */
export function buildServerSettings(
  raw: unknown,
  vars: VariableContext,
  env: NodeJS.ProcessEnv = process.env,
): { settings: ServerSettings; problems: string[] } {
  const problems: string[] = [];
  const cfg = isRecord(raw) ? raw : {};
  const expand = (s: string): string => expandVariables(s, vars, env);

  const pairs: Pair[] = [];
  const rawPairs = cfg.pairs;
  if (rawPairs !== undefined && rawPairs !== null && !Array.isArray(rawPairs)) {
    problems.push('rcaLsp.pairs must be an array; ignored');
  }
  if (Array.isArray(rawPairs)) {
    rawPairs.forEach((p, i) => {
      if (
        isRecord(p) &&
        typeof p.mappingKey === 'string' &&
        typeof p.train === 'string' &&
        typeof p.rollout === 'string' &&
        p.mappingKey.trim() &&
        p.train.trim() &&
        p.rollout.trim()
      ) {
        const pair: Pair = { mappingKey: expand(p.mappingKey.trim()), train: expand(p.train.trim()), rollout: expand(p.rollout.trim()) };
        if (typeof p.step === 'number') {
          pair.step = p.step;
        }
        if (typeof p.parallel === 'string' && p.parallel.trim()) {
          pair.parallel = p.parallel.trim();
        }
        if (typeof p.rolloutParallel === 'string' && p.rolloutParallel.trim()) {
          pair.rolloutParallel = p.rolloutParallel.trim();
        }
        pairs.push(pair);
      } else {
        problems.push(`rcaLsp.pairs[${i}] needs non-empty strings mappingKey, train and rollout; ignored`);
      }
    });
  }

  const tolerances: Partial<Record<DtypeName, number>> = {};
  const rawTol = cfg.tolerances;
  if (isRecord(rawTol)) {
    for (const [k, v] of Object.entries(rawTol)) {
      if (v === null || v === undefined) {
        continue; // "use the server's default"
      }
      if (!(DTYPES as readonly string[]).includes(k)) {
        problems.push(`rcaLsp.tolerances.${k}: unknown dtype (expected ${DTYPES.join(', ')}); ignored`);
        continue;
      }
      if (typeof v !== 'number' || !Number.isFinite(v) || v <= 0) {
        problems.push(`rcaLsp.tolerances.${k} must be a positive number; ignored`);
        continue;
      }
      tolerances[k as DtypeName] = v;
    }
  }

  const severity: Record<string, SeverityName> = {};
  const rawSev = cfg.severity;
  if (isRecord(rawSev)) {
    for (const [code, v] of Object.entries(rawSev)) {
      const s = typeof v === 'string' ? v.trim().toLowerCase() : v;
      const normalised = s === 'info' ? 'information' : s === 'none' ? 'off' : s;
      if (typeof normalised !== 'string' || !(SEVERITIES as readonly string[]).includes(normalised)) {
        problems.push(`rcaLsp.severity["${code}"] must be one of ${SEVERITIES.join(', ')}; ignored`);
        continue;
      }
      if (!(DIAGNOSTIC_CODES as readonly string[]).includes(code)) {
        // Still forwarded: a newer server may know more codes than this client.
        problems.push(`rcaLsp.severity["${code}"]: code not known to this client version; forwarded anyway`);
      }
      severity[code] = normalised as SeverityName;
    }
  }

  const outDirRaw = typeof cfg.outDir === 'string' && cfg.outDir.trim() ? cfg.outDir.trim() : 'rca_out';
  return { settings: { pairs, tolerances, severity, outDir: expand(outDirRaw) }, problems };
}

export type ConfigChangeAction = 'restart' | 'notify' | 'none';

/**
 * What to do on a configuration change. `affects(section)` is `ConfigurationChangeEvent.affectsConfiguration`.
 * The interpreter needs a new process; the trace level is handled by vscode-languageclient itself;
 * everything else is pushed to the running server.
 */
export function classifyConfigChange(affects: (section: string) => boolean): ConfigChangeAction {
  if (!affects(SECTION)) {
    return 'none';
  }
  if (affects(`${SECTION}.interpreter`)) {
    return 'restart';
  }
  for (const key of ['pairs', 'tolerances', 'severity', 'outDir']) {
    if (affects(`${SECTION}.${key}`)) {
      return 'notify';
    }
  }
  return 'none';
}

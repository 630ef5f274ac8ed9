/**
 * Translation of the VS Code settings (section `rcaLsp`) into the object the server receives as
 * initializationOptions, as the answer to `workspace/configuration` and in `workspace/didChangeConfiguration`.
 * Validated by the rules the server applies (rca_lsp/data/settings_rules.json, bundled), with the server's
 * messages: tests/settings_cases.json is run against both. Pure: no `vscode` import.
 */
import * as os from 'node:os';
import * as path from 'node:path';
import RULES from '../../../rca_lsp/data/settings_rules.json';

export const SECTION = 'rcaLsp';

export const DIAGNOSTIC_CODES = [
  'unknown-train-key',
  'unknown-rollout-key',
  'not-dumped',
  'duplicate-key',
  'invalid-value',
  'json-syntax',
  'yaml-syntax',
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
  'input-data',
  'train-data-group',
  'aligned-boundary',
  'needs-review',
  'dump-problem',
] as const;

export const SEVERITIES: readonly string[] = RULES.severities;
export type SeverityName = 'error' | 'warning' | 'information' | 'hint' | 'off';
export const DEFAULT_OUT_DIR: string = RULES.defaultOutDir;

export interface Pair {
  mappingKey: string;
  train: string;
  rollout: string;
  /** Passed through to the server, which parses them: which step, the rank layouts, the rollout's step(s). */
  step?: number;
  parallel?: string;
  rolloutParallel?: string;
  rolloutStep?: number | string;
  trainRank?: number;
}

/** What the server receives. Keys are only present when they carry a value. */
export interface ServerSettings {
  pairs: Pair[];
  tolerances: Record<string, number>;
  severity: Record<string, SeverityName>;
  outDir: string;
  /** output_3's column names in writeOutputs (rca | msprobe); only when set. */
  columns?: string;
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

/** A non-blank string, trimmed; undefined otherwise. */
function text(v: unknown): string | undefined {
  return typeof v === 'string' && v.trim() ? v.trim() : undefined;
}

/** What a JSON value is, worded as the server words it. */
function jsonKind(v: unknown): string {
  if (typeof v === 'boolean') {
    return 'true or false';
  }
  if (typeof v === 'number') {
    return 'a number';
  }
  return Array.isArray(v) ? 'a list' : isRecord(v) ? 'an object' : 'text';
}

/** A value as Python's repr() shows it in the server's messages. */
function pyRepr(v: unknown): string {
  if (typeof v === 'string') {
    return `'${v}'`;
  }
  if (typeof v === 'boolean') {
    return v ? 'True' : 'False';
  }
  return typeof v === 'number' ? String(v) : JSON.stringify(v);
}

/** The server's dtype name for a tolerance key (`bf16`, `torch.float16` -> `bfloat16`, `float16`), as core does. */
function normaliseDtype(name: string): string {
  const last = (name.trim().split('.').pop() ?? '').toLowerCase();
  return (RULES.dtypeAliases as Record<string, string>)[last] ?? last;
}

function isStepNumber(v: unknown): v is number {
  return typeof v === 'number' && Number.isInteger(v) && v >= 0;
}

function buildPairs(raw: unknown, expand: (s: string) => string, problems: string[]): Pair[] {
  if (raw === undefined || raw === null) {
    return [];
  }
  if (!Array.isArray(raw)) {
    problems.push('rcaLsp.pairs must be a list of {mappingKey, train, rollout} objects');
    return [];
  }
  const pairs: Pair[] = [];
  raw.forEach((p: unknown, i) => {
    const required = isRecord(p) ? RULES.pairRequired.map((k) => text(p[k])) : [undefined];
    if (!isRecord(p) || !required.every((v) => v !== undefined)) {
      problems.push(`rcaLsp.pairs[${i}] needs string fields mappingKey, train and rollout`);
      return;
    }
    const step = p.step;
    if (step !== undefined && step !== null && !isStepNumber(step)) {
      problems.push(`rcaLsp.pairs[${i}].step must be a step number (0, 1, ...)`);
      return;
    }
    const rolloutStep = p.rolloutStep;
    if (rolloutStep !== undefined && rolloutStep !== null && !(typeof rolloutStep === 'string' || isStepNumber(rolloutStep))) {
      problems.push(`rcaLsp.pairs[${i}].rolloutStep must be a step number, "all" or a span "0-4"`);
      return;
    }
    const trainRank = p.trainRank;
    if (trainRank !== undefined && trainRank !== null && !isStepNumber(trainRank)) {
      problems.push(`rcaLsp.pairs[${i}].trainRank must be a rank number (0, 1, ...)`);
      return;
    }
    const layouts = RULES.pairOptionalText.map((k) => p[k]);
    if (layouts.some((v) => v !== undefined && v !== null && typeof v !== 'string')) {
      problems.push(`rcaLsp.pairs[${i}].parallel must be text such as "tp=2,pp=2"`);
      return;
    }
    const [mappingKey, train, rollout] = required as string[];
    const pair: Pair = { mappingKey: expand(mappingKey), train: expand(train), rollout: expand(rollout) };
    if (typeof step === 'number') {
      pair.step = step;
    }
    const [parallel, rolloutParallel] = layouts.map(text);
    if (parallel) {
      pair.parallel = parallel;
    }
    if (rolloutParallel) {
      pair.rolloutParallel = rolloutParallel;
    }
    if (typeof rolloutStep === 'number' || typeof rolloutStep === 'string') {
      pair.rolloutStep = rolloutStep;
    }
    if (typeof trainRank === 'number') {
      pair.trainRank = trainRank;
    }
    pairs.push(pair);
  });
  return pairs;
}

function buildTolerances(raw: unknown, problems: string[]): Record<string, number> {
  if (raw === undefined || raw === null) {
    return {};
  }
  if (!isRecord(raw)) {
    problems.push('rcaLsp.tolerances must be an object such as {"bfloat16": 0.03}');
    return {};
  }
  const tolerances: Record<string, number> = {};
  for (const [name, v] of Object.entries(raw)) {
    if (v === null || v === undefined) {
      continue; // "use the server's default"
    }
    const dtype = normaliseDtype(name);
    if (!RULES.dtypes.includes(dtype)) {
      problems.push(`rcaLsp.tolerances.${name}: unknown dtype ${pyRepr(name)} (expected ${RULES.dtypes.join(', ')}); ignored`);
    } else if (typeof v !== 'number' || !Number.isFinite(v) || v <= 0) {
      problems.push(`rcaLsp.tolerances.${name}: the tolerance for ${dtype} must be a positive number, got ${pyRepr(v)}; ignored`);
    } else {
      tolerances[dtype] = v;
    }
  }
  return tolerances;
}

function buildSeverity(raw: unknown, problems: string[]): Record<string, SeverityName> {
  if (raw === undefined || raw === null) {
    return {};
  }
  if (!isRecord(raw)) {
    problems.push('rcaLsp.severity must be an object such as {"missing-op": "error"}');
    return {};
  }
  const severity: Record<string, SeverityName> = {};
  for (const [code, level] of Object.entries(raw)) {
    if (typeof level !== 'string' || !SEVERITIES.includes(level)) {
      problems.push(`rcaLsp.severity.${code} must be one of ${SEVERITIES.join(', ')}`);
      continue;
    }
    if (!(DIAGNOSTIC_CODES as readonly string[]).includes(code)) {
      problems.push(`rcaLsp.severity.${code}: unknown diagnostic code`); // still passed on, as the server keeps it
    }
    severity[code] = level as SeverityName;
  }
  return severity;
}

function buildOutDir(raw: unknown, problems: string[]): string {
  if (raw !== undefined && raw !== null && typeof raw !== 'string') {
    problems.push(`rcaLsp.outDir must be a folder path, got ${jsonKind(raw)}; using ${DEFAULT_OUT_DIR}`);
  }
  return text(raw) ?? DEFAULT_OUT_DIR;
}

function buildColumns(raw: unknown, problems: string[]): string | undefined {
  const styles: string[] = RULES.columnStyles;
  if (raw === undefined || raw === null) {
    return undefined;
  }
  if (typeof raw === 'string' && styles.includes(raw)) {
    return raw;
  }
  problems.push(`rcaLsp.columns must be one of ${styles.join(', ')}; using ${styles[0]}`);
  return undefined;
}

/**
 * Builds the server settings from the raw `rcaLsp` configuration object. Invalid entries are dropped and described
 * in `problems` (shown in the output channel), never thrown.
 */
export function buildServerSettings(
  raw: unknown,
  vars: VariableContext,
  env: NodeJS.ProcessEnv = process.env,
): { settings: ServerSettings; problems: string[] } {
  const problems: string[] = [];
  const cfg = isRecord(raw) ? raw : {};
  const expand = (s: string): string => expandVariables(s, vars, env);
  const settings: ServerSettings = {
    pairs: buildPairs(cfg.pairs, expand, problems),
    tolerances: buildTolerances(cfg.tolerances, problems),
    severity: buildSeverity(cfg.severity, problems),
    outDir: expand(buildOutDir(cfg.outDir, problems)),
  };
  const columns = buildColumns(cfg.columns, problems);
  if (columns !== undefined) {
    settings.columns = columns;
  }
  return { settings, problems };
}

/** The raw `rcaLsp` settings of one scope (`readServerSettings`) and the variables there. */
export interface ScopedSettings {
  raw: Record<string, unknown>;
  vars: VariableContext;
}

/**
 * The server's settings in a workspace of one or several folders. The server keeps one set: those of `scope` (the
 * active mapping file, else the first folder), with the pairs of every folder added, each expanded in its own folder,
 * so that a folder's pairs apply to its mapping files whichever editor is active.
 */
export function buildWorkspaceSettings(
  scope: ScopedSettings,
  folders: readonly ScopedSettings[],
  env: NodeJS.ProcessEnv = process.env,
): { settings: ServerSettings; problems: string[] } {
  const { settings, problems } = buildServerSettings(scope.raw, scope.vars, env);
  const seen = new Set(settings.pairs.map((pair) => JSON.stringify(pair)));
  for (const folder of folders) {
    const built = buildServerSettings({ pairs: folder.raw.pairs }, folder.vars, env);
    problems.push(...built.problems.filter((p) => !problems.includes(p)));
    for (const pair of built.settings.pairs) {
      const key = JSON.stringify(pair);
      if (!seen.has(key)) {
        seen.add(key);
        settings.pairs.push(pair);
      }
    }
  }
  return { settings, problems };
}

/** The `rcaLsp` settings the server receives (read with `readServerSettings`, pushed on a change). */
export const SERVER_SETTING_KEYS = ['pairs', 'tolerances', 'severity', 'outDir', 'columns'] as const;

/** The raw server settings for `buildServerSettings`; `get` is `WorkspaceConfiguration.get` of section `rcaLsp`. */
export function readServerSettings(get: (key: string) => unknown): Record<string, unknown> {
  return Object.fromEntries(SERVER_SETTING_KEYS.map((key) => [key, get(key)]));
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
  for (const key of SERVER_SETTING_KEYS) {
    if (affects(`${SECTION}.${key}`)) {
      return 'notify';
    }
  }
  return 'none';
}

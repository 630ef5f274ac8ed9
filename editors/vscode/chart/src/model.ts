/**
 * What the chart plots, as plain arrays (no DOM): the error series of one view (a call, optionally one rank), in
 * full detail or aggregated into buckets that never cross a layer (the worst module of each bucket stands for it).
 */
import { errorsFor, severity, toNumber } from './ranks';
import { ChartCall, ChartData, Kind, KINDS, Stats, TargetStats } from './types';

export { toNumber };

/** One call's modules with the string columns read through the chart's string table. */
export class Modules {
  readonly labels: string[];
  readonly count: number;

  constructor(
    private readonly data: ChartData,
    readonly call: ChartCall,
  ) {
    const strings = data.strings;
    this.labels = call.modules.label.map((i) => strings[i]);
    this.count = this.labels.length;
  }

  threshold(index: number | null | undefined): number | null {
    return index === null || index === undefined ? null : this.data.thresholds[index];
  }

  text(index: number | null | undefined): string | null {
    return index === null || index === undefined ? null : this.data.strings[index];
  }

  private key(parts: number[]): string {
    const strings = this.data.strings;
    const out: string[] = [];
    for (let at = 0; at < parts.length; at += 3) {
      out.push(strings[parts[at]] + strings[parts[at + 1]] + strings[parts[at + 2]]);
    }
    return out.join(' + ');
  }

  trainKey(index: number): string {
    return this.key(this.call.modules.train_key[index]);
  }

  rolloutKey(index: number): string {
    return this.key(this.call.modules.rollout_key[index]);
  }

  /** Both sides' statistics ([target, train, rollout]) of every target of a marked module, else of the output. */
  stats(index: number): [number, Stats | null, Stats | null][] {
    const m = this.call.modules;
    const table = this.data.stats;
    const side = (i: number | null): Stats | null => (i === null ? null : table[i]);
    const all: TargetStats[] = m.details[String(index)] ?? [];
    if (all.length) {
      return all.map(([target, train, rollout]) => [target, side(train), side(rollout)]);
    }
    const target = m.output.target[index];
    return target === null ? [] : [[target, side(m.output_train[index]), side(m.output_rollout[index])]];
  }
}

/** Errors at or below this are drawn on the chart's floor (a log axis has no 0: identical statistics). */
export const LOWEST = 1e-10;
/** Above this many modules in view the chart shows buckets, at most about this many. */
export const DETAIL_LIMIT = 4000;
export const BUCKETS = 1200;

/** A value as the log axis shows it: exact agreement at the floor, a non-finite error at the top. */
export function plotted(value: number | null, top: number): number | null {
  if (value === null || Number.isNaN(value)) {
    return value === null ? null : top;
  }
  if (!Number.isFinite(value)) {
    return top;
  }
  return value <= LOWEST ? LOWEST : value;
}

export interface View {
  /** module index of each point (ascending) */
  x: number[];
  /** per kind, the plotted error of each point */
  errors: Record<Kind, (number | null)[]>;
  floor: (number | null)[];
  tolerance: (number | null)[];
  aggregated: boolean;
  top: number;
}

/** The raw errors a selection shows in a call (ranks.ts: merged, one rank's copies, the worst rank). */
export function rawErrors(data: ChartData, call: ChartCall, selection: string): Record<Kind, (number | null)[]> {
  return errorsFor(data, call, selection).errors;
}

/** The top of the axis: a decade above the largest finite error (non-finite errors are drawn there). */
export function axisTop(errors: Record<Kind, (number | null)[]>): number {
  let top = 1;
  for (const kind of KINDS) {
    for (const v of errors[kind]) {
      if (v !== null && Number.isFinite(v) && v > top) {
        top = v;
      }
    }
  }
  return 10 ** Math.ceil(Math.log10(top) + 1);
}

/** Bucket boundaries over [from, to): each bucket within one layer, about (to - from) / BUCKETS modules. */
export function buckets(call: ChartCall, from: number, to: number, count = BUCKETS): [number, number][] {
  const size = Math.max(1, Math.ceil((to - from) / count));
  const out: [number, number][] = [];
  for (const span of call.layers) {
    const start = Math.max(span.start, from);
    const end = Math.min(span.end, to);
    for (let s = start; s < end; s += size) {
      out.push([s, Math.min(end, s + size)]);
    }
  }
  return out;
}

/** The view of modules [from, to): every module when few are in view, else one point per bucket. */
export function view(data: ChartData, call: ChartCall, selection: string, from = 0, to = call.modules.label.length): View {
  const errors = rawErrors(data, call, selection);
  const top = axisTop(errors);
  const n = call.modules.label.length;
  from = Math.max(0, Math.floor(from));
  to = Math.min(n, Math.ceil(to));
  const tolerance = call.modules.output.tolerance;
  const floor = call.modules.noise_floor;
  const threshold = (at: number | null | undefined): number | null => (at === null || at === undefined ? null : data.thresholds[at]);
  const result: View = {
    x: [],
    errors: { output: [], input: [], parameters: [] },
    floor: [],
    tolerance: [],
    aggregated: to - from > DETAIL_LIMIT,
    top,
  };
  const push = (index: number, picked: Record<Kind, number | null>): void => {
    result.x.push(index);
    for (const kind of KINDS) {
      result.errors[kind].push(plotted(picked[kind], top));
    }
    result.floor.push(threshold(floor[index]));
    result.tolerance.push(threshold(tolerance[index]));
  };
  if (!result.aggregated) {
    for (let i = 0; i < n; i++) {
      push(i, { output: errors.output[i], input: errors.input[i], parameters: errors.parameters[i] });
    }
    return result;
  }
  // Outside the window: nothing (the axis shows only the window); inside: the worst module of each bucket.
  for (const [start, end] of buckets(call, from, to)) {
    let worst = start;
    let worstValue = -1;
    const picked: Record<Kind, number | null> = { output: null, input: null, parameters: null };
    for (let i = start; i < end; i++) {
      for (const kind of KINDS) {
        const v = errors[kind][i];
        if (v !== null) {
          const current = picked[kind];
          picked[kind] = current === null || severity(v) > severity(current) ? v : current;
        }
      }
      const v = errors.output[i];
      if (v !== null && severity(v) > worstValue) {
        worstValue = severity(v);
        worst = i;
      }
    }
    push(worst, picked);
  }
  return result;
}

/** Axis ticks for modules [from, to): each module when few are in view, else layer starts thinned to `room`. */
export function ticks(call: ChartCall, labels: string[], from: number, to: number, room: number): { at: number[]; labels: string[] } {
  const n = labels.length;
  from = Math.max(0, Math.ceil(from));
  to = Math.min(n - 1, Math.floor(to));
  if (to - from + 1 <= room) {
    const at: number[] = [];
    for (let i = from; i <= to; i++) {
      at.push(i);
    }
    return { at, labels: at.map((i) => labels[i]) };
  }
  const spans = call.layers.filter((s) => s.end > from && s.start <= to);
  const step = Math.max(1, Math.ceil(spans.length / Math.max(1, room)));
  const shown = spans.filter((_, i) => i % step === 0);
  return { at: shown.map((s) => Math.max(s.start, from)), labels: shown.map((s) => s.label) };
}

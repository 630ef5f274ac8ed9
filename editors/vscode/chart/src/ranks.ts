/**
 * The rank views of a call, expanded from the chart's sparse data (ChartCall.ranks, ChartCall.shared) when one is
 * selected: a rank's own copies against the other side, or the worst rank of each module. A selection is a string
 * that survives a new analysis of the same files: '' (all ranks merged), 'worst', or '<side>:<rank>'.
 */
import { ChartCall, ChartData, ChartRank, Kind, KINDS, Num, RankCopies } from './types';

export type Series = Record<Kind, (number | null)[]>;

export const MERGED = '';
export const WORST = 'worst';

export function toNumber(value: Num | null | undefined): number | null {
  if (value === null || value === undefined) {
    return null;
  }
  return typeof value === 'number' ? value : Number(value);
}

/** How bad an error is: a non-finite one is the worst. */
export function severity(v: number): number {
  return Number.isNaN(v) || !Number.isFinite(v) ? Infinity : v;
}

export function selectionOf(rank: ChartRank): string {
  return `${rank.side}:${rank.rank}`;
}

/** The ChartData.ranks index a selection names, if the data has that rank. */
export function rankIndex(data: ChartData, selection: string): number | undefined {
  const at = data.ranks.findIndex((r) => selectionOf(r) === selection);
  return at < 0 ? undefined : at;
}

/** Whether the call can show the selection (its data has the rank, or any rank for 'worst'). */
export function available(data: ChartData, call: ChartCall, selection: string): boolean {
  if (selection === MERGED) {
    return true;
  }
  if (selection === WORST) {
    return call.ranks.some((r) => r.held.length > 0);
  }
  const at = rankIndex(data, selection);
  return at !== undefined && call.ranks.some((r) => r.rank === at && r.held.length > 0);
}

/** "train rank 3 (tp=1, pp=1)" */
export function rankName(rank: ChartRank): string {
  const side = rank.side === 'both' ? '' : `${rank.side} `;
  return `${side}rank ${rank.rank}${rank.coordinates ? ` (${rank.coordinates})` : ''}`;
}

const merged = new WeakMap<ChartCall, Series>();
const expanded = new WeakMap<ChartCall, Map<string, RankErrors>>();

export interface RankErrors {
  errors: Series;
  /** per kind and module: the ChartData.ranks index the error is of (the worst view), -1 where none holds it */
  of?: Record<Kind, Int32Array>;
}

/** The call's merged errors, read once. */
export function mergedErrors(call: ChartCall): Series {
  let found = merged.get(call);
  if (!found) {
    found = {} as Series;
    for (const kind of KINDS) {
      found[kind] = call.modules[kind].error.map(toNumber);
    }
    merged.set(call, found);
  }
  return found;
}

/** The errors a selection shows in a call (computed when first asked, then kept with the call). */
export function errorsFor(data: ChartData, call: ChartCall, selection: string): RankErrors {
  if (selection === MERGED) {
    return { errors: mergedErrors(call) };
  }
  let known = expanded.get(call);
  if (!known) {
    known = new Map();
    expanded.set(call, known);
  }
  let found = known.get(selection);
  if (!found) {
    found = selection === WORST ? worst(data, call) : { errors: rankSeries(data, call, rankIndex(data, selection)) };
    known.set(selection, found);
  }
  return found;
}

/** One rank's errors: null where it holds no copy; its side's shared errors (the merged ones but where the side's
 * SharedCopies differ) where it holds one, but where its own differ. */
function rankSeries(data: ChartData, call: ChartCall, at: number | undefined): Series {
  const n = call.modules.label.length;
  const out = {} as Series;
  const copy = at === undefined ? undefined : call.ranks.find((r) => r.rank === at);
  const base = mergedErrors(call);
  const whole = copy !== undefined && copy.held.length === 2 && copy.held[0] === 0 && copy.held[1] === n;
  for (const kind of KINDS) {
    out[kind] = whole ? base[kind].slice() : new Array<number | null>(n).fill(null);
  }
  if (!copy || at === undefined) {
    return out;
  }
  const held = new Uint8Array(n);
  for (let h = 0; h + 1 < copy.held.length; h += 2) {
    held.fill(1, copy.held[h], copy.held[h + 1]);
    if (!whole) {
      for (const kind of KINDS) {
        for (let i = copy.held[h]; i < copy.held[h + 1]; i++) {
          out[kind][i] = base[kind][i];
        }
      }
    }
  }
  const shared = call.shared.find((s) => s.side === data.ranks[at].side);
  if (shared) {
    overlay(out, shared.changed, shared, held);
  }
  overlay(out, copy.changed, copy, held);
  return out;
}

function overlay(out: Series, changed: number[], values: Record<Kind, (Num | null)[]>, held: Uint8Array): void {
  changed.forEach((i, j) => {
    if (held[i]) {
      for (const kind of KINDS) {
        out[kind][i] = toNumber(values[kind][j]);
      }
    }
  });
}

/** Per module and kind, the largest error of any rank holding the module, and whose it is. */
function worst(data: ChartData, call: ChartCall): RankErrors {
  const n = call.modules.label.length;
  const errors = {} as Series;
  const of = {} as Record<Kind, Int32Array>;
  for (const kind of KINDS) {
    errors[kind] = new Array<number | null>(n).fill(null);
    of[kind] = new Int32Array(n).fill(-1);
  }
  for (const copy of call.ranks) {
    const mine = errorsFor(data, call, selectionOf(data.ranks[copy.rank])).errors;
    for (const kind of KINDS) {
      const column = mine[kind];
      for (let i = 0; i < n; i++) {
        const v = column[i];
        const known = errors[kind][i];
        if (v !== null && (known === null || severity(v) > severity(known))) {
          errors[kind][i] = v;
          of[kind][i] = copy.rank;
        }
      }
    }
  }
  return { errors, of };
}

/** Where the selection first parts from the other ranks: the module and the rank (the worst view: any rank). */
export function firstParting(data: ChartData, call: ChartCall, selection: string): { index: number; rank: ChartRank } | undefined {
  let found: { index: number; rank: ChartRank } | undefined;
  const consider = (copy: RankCopies): void => {
    if (copy.mismatch.length && (!found || copy.mismatch[0] < found.index)) {
      found = { index: copy.mismatch[0], rank: data.ranks[copy.rank] };
    }
  };
  if (selection === WORST) {
    call.ranks.forEach(consider);
  } else if (selection !== MERGED) {
    const at = rankIndex(data, selection);
    call.ranks.filter((r) => r.rank === at).forEach(consider);
  }
  return found;
}

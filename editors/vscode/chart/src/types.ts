/**
 * The chart data as rca_lsp/report/chart.py writes it (ChartData): columnar, one element per mapped module of a
 * call; string columns hold indexes into ChartData.strings (a key: head, label, tail indexes per part).
 * Non-finite numbers arrive as the strings "NaN", "Infinity", "-Infinity".
 */
export type Num = number | string;
/** [dtype, shape] (string indexes), then Max, Min, Mean, Norm of one side's tensor (ChartData.stats). */
export type Stats = [number, number, Num | null, Num | null, Num | null, Num | null];

export interface TargetSeries {
  error: (Num | null)[];
  /** indexes into ChartData.thresholds */
  tolerance: (number | null)[];
  consistency: number[];
  target: (number | null)[];
}

/** [target, train, rollout]: the sides' statistics as indexes into ChartData.stats */
export type TargetStats = [number, number | null, number | null];

export interface ChartModules {
  train_key: number[][];
  rollout_key: number[][];
  label: number[];
  layer: (number | null)[];
  bucket: number[];
  suspect: (number | null)[];
  /** indexes into ChartData.thresholds */
  noise_floor: (number | null)[];
  output: TargetSeries;
  input: TargetSeries;
  parameters: TargetSeries;
  output_train: (number | null)[];
  output_rollout: (number | null)[];
  details: Record<string, TargetStats[]>;
}

export interface LayerSpan {
  label: string;
  layer: number | null;
  start: number;
  end: number;
}

export interface Marker {
  index: number;
  train_key: string;
  rollout_key: string;
  classification: string | null;
}

export interface OneSidedOp {
  side: 'train' | 'rollout';
  key: string;
  after: number;
  explains: boolean;
}

/** A rank the chart can show the own copies of (ChartData.ranks). */
export interface ChartRank {
  /** train | rollout | both (train rank r against rollout rank r: both sides laid out alike) */
  side: 'train' | 'rollout' | 'both';
  rank: number;
  /** e.g. "tp=1, pp=0": its place in the layout ("" when unknown) */
  coordinates: string;
  /** what its copies are compared with: "rollout merged", "rollout rank 1" */
  against: string;
}

/** One rank's copies in a call, sparse (see rca_lsp/report/chart_schema.py). */
export interface RankCopies {
  /** index into ChartData.ranks */
  rank: number;
  /** flattened [start, end) module index ranges it holds a copy of */
  held: number[];
  /** where its errors are its own (the error columns one element each) */
  changed: number[];
  output: (Num | null)[];
  input: (Num | null)[];
  parameters: (Num | null)[];
  /** where it parts from the other ranks */
  mismatch: number[];
}

/** What every rank of a side shows where it holds a module and its RankCopies do not say otherwise: the merged
 * errors but at `changed`. */
export interface SharedCopies {
  side: 'train' | 'rollout' | 'both';
  changed: number[];
  output: (Num | null)[];
  input: (Num | null)[];
  parameters: (Num | null)[];
}

export interface ChartCall {
  call_index: number;
  label: string;
  note: string;
  modules: ChartModules;
  layers: LayerSpan[];
  first_divergence: Marker | null;
  boundary: Marker | null;
  one_sided: OneSidedOp[];
  ranks: RankCopies[];
  shared: SharedCopies[];
}

export interface ChartData {
  version: number;
  title: string;
  train_path: string;
  rollout_path: string;
  mapping_path: string;
  run_id: string | null;
  top_hypothesis: string;
  calibration: Record<string, { noise_floor: number; threshold: number; fixed_tolerance: number; fallback: boolean }>;
  calls: ChartCall[];
  default_call: number;
  ranks: ChartRank[];
  strings: string[];
  stats: Stats[];
  thresholds: number[];
}

export const KINDS = ['output', 'input', 'parameters'] as const;
export type Kind = (typeof KINDS)[number];

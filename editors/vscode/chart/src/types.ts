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

export interface RankSeries {
  rank: number;
  output: (Num | null)[];
  input: (Num | null)[];
  parameters: (Num | null)[];
  mismatch: number[];
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
  ranks: RankSeries[];
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
  rank_side: string | null;
  strings: string[];
  stats: Stats[];
  thresholds: number[];
}

export const KINDS = ['output', 'input', 'parameters'] as const;
export type Kind = (typeof KINDS)[number];

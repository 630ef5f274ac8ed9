/**
 * The chart data as rca_lsp/core/chart.py writes it (ChartData): columnar, one element per mapped module of a
 * call. Non-finite numbers arrive as the strings "NaN", "Infinity", "-Infinity".
 */
export type Num = number | string;
/** [dtype, shape, Max, Min, Mean, Norm] of one side's tensor. */
export type Stats = [string | null, number[] | null, Num | null, Num | null, Num | null, Num | null];

export interface TargetSeries {
  error: (Num | null)[];
  tolerance: (number | null)[];
  consistency: string[];
  target: (string | null)[];
  train: (Stats | null)[];
  rollout: (Stats | null)[];
}

export interface ChartModules {
  train_key: string[];
  rollout_key: string[];
  label: string[];
  layer: (number | null)[];
  bucket: string[];
  suspect: (string | null)[];
  noise_floor: (number | null)[];
  output: TargetSeries;
  input: TargetSeries;
  parameters: TargetSeries;
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
}

export const KINDS = ['output', 'input', 'parameters'] as const;
export type Kind = (typeof KINDS)[number];

/** A synthetic chart for the unit tests. */
import { ChartCall, ChartData, LayerSpan } from '../src/types';

/** A call of `n` modules in `layers` equal layers; output errors from `error(i)`. */
export function chart(n: number, layers: number, error: (i: number) => number | string | null): { data: ChartData; call: ChartCall } {
  const per = Math.ceil(n / layers);
  const spans: LayerSpan[] = [];
  for (let l = 0; l * per < n; l++) {
    spans.push({ label: `layer ${l}`, layer: l, start: l * per, end: Math.min(n, (l + 1) * per) });
  }
  const series = (f: (i: number) => number | string | null) => ({
    error: Array.from({ length: n }, (_, i) => f(i)),
    tolerance: Array.from({ length: n }, () => 0),
    consistency: Array.from({ length: n }, () => 0),
    target: Array.from({ length: n }, () => 0),
  });
  const call: ChartCall = {
    call_index: 0,
    label: 'forward.0',
    note: '',
    modules: {
      train_key: Array.from({ length: n }, () => [0, 0, 0]),
      rollout_key: Array.from({ length: n }, () => [0, 0, 0]),
      label: Array.from({ length: n }, () => 0),
      layer: Array.from({ length: n }, (_, i) => Math.floor(i / per)),
      bucket: Array.from({ length: n }, () => 0),
      suspect: Array.from({ length: n }, () => null),
      noise_floor: Array.from({ length: n }, () => 1),
      output: series(error),
      input: series(() => null),
      parameters: series(() => 0),
      output_train: Array.from({ length: n }, () => null),
      output_rollout: Array.from({ length: n }, () => null),
      details: {},
    },
    layers: spans,
    first_divergence: null,
    boundary: null,
    one_sided: [],
    ranks: [],
    shared: [],
  };
  const data: ChartData = {
    version: 2, title: '', train_path: '', rollout_path: '', mapping_path: '', run_id: null, top_hypothesis: '',
    calibration: {}, calls: [call], default_call: 0, ranks: [], strings: [''], stats: [], thresholds: [9.5e-7, 1.2e-7],
  };
  return { data, call };
}

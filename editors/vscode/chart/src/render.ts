/**
 * The divergence chart in a page (the HTML report, the VS Code webview): uPlot draws it; this module wires the data,
 * the controls (call, rank), the markers, the hover card and clicks.
 */
import uPlot from 'uplot';
import { AXIS_FONT, axisSize, elide, LABEL_ANGLE, LABEL_MAX_PX, LABEL_SPACING, rightPadding, spaced } from './axis';
import { axisTop, DETAIL_LIMIT, LOWEST, Modules, rawErrors, ticks, toNumber, view, View } from './model';
import { available, errorsFor, firstParting, MERGED, rankIndex, rankName, selectionOf, WORST } from './ranks';
import { ChartCall, ChartData, Kind, KINDS } from './types';

/** What the reader chose: the call (its call_index) and the rank view ('' merged, 'worst', '<side>:<rank>'). */
export interface ChartState {
  call?: number;
  rank?: string;
}

export interface MountOptions {
  /** A point (or a marker) was clicked: the module's mapping entry. */
  onSelect?: (trainKey: string, call: ChartCall, index: number) => void;
  /** Height of the plot in CSS pixels (default: fills the container's height, at least 320). */
  height?: number;
  /** The choice to open on (kept by the host across reloads of the page), where the data has it. */
  state?: ChartState;
  /** The reader chose another call or rank view: what the host keeps for the next load. */
  onState?: (state: ChartState) => void;
}

export interface ChartHandle {
  update(data: ChartData): void;
  /** The data's keys, verdicts and statistics arrived after the first draw (the HTML report reads them later). */
  detailsLoaded(): void;
  destroy(): void;
  /** ms from mount (or the last update) to the first drawn frame */
  readonly renderMs: number | undefined;
}

const KIND_LABEL: Record<Kind, string> = { output: 'output', input: 'input', parameters: 'parameters' };
const STAT_NAMES = ['Max', 'Min', 'Mean', 'Norm'];

function el<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  className?: string,
  text?: string,
  parent?: HTMLElement,
): HTMLElementTagNameMap[K] {
  const node = document.createElement(tag);
  if (className) {
    node.className = className;
  }
  if (text !== undefined) {
    node.textContent = text;
  }
  parent?.appendChild(node);
  return node;
}

function cssColor(name: string, fallback: string): string {
  const value = getComputedStyle(document.documentElement).getPropertyValue(name).trim();
  return value || fallback;
}

function palette(): Record<string, string> {
  return {
    fg: cssColor('--rca-fg', '#1f2328'),
    muted: cssColor('--rca-muted', '#6e7781'),
    grid: cssColor('--rca-grid', 'rgba(128,128,128,0.18)'),
    output: cssColor('--rca-output', '#1f77b4'),
    input: cssColor('--rca-input', '#e07b00'),
    parameters: cssColor('--rca-parameters', '#8e44ad'),
    floor: cssColor('--rca-floor', '#7f8c8d'),
    tolerance: cssColor('--rca-tolerance', '#b7950b'),
    band: cssColor('--rca-band', 'rgba(183,149,11,0.12)'),
    divergence: cssColor('--rca-divergence', '#d62728'),
    boundary: cssColor('--rca-boundary', '#2ca02c'),
    rank: cssColor('--rca-rank', '#e67e22'),
  };
}

let measuring: CanvasRenderingContext2D | null | undefined;
const measured = new Map<string, number>();

/** The width of `text` in the axis font (CSS px), measured once per text. */
function measureText(text: string): number {
  let width = measured.get(text);
  if (width === undefined) {
    if (measuring === undefined) {
      measuring = document.createElement('canvas').getContext('2d');
      if (measuring) {
        measuring.font = AXIS_FONT;
      }
    }
    width = measuring ? measuring.measureText(text).width : text.length * 7;
    measured.set(text, width);
  }
  return width;
}

function format(value: number | string | null | undefined): string {
  const v = toNumber(value ?? null);
  if (v === null) {
    return '–';
  }
  if (!Number.isFinite(v)) {
    return String(v);
  }
  if (v === 0) {
    return '0';
  }
  const a = Math.abs(v);
  return a >= 1e-3 && a < 1e5 ? String(Number(v.toPrecision(5))) : v.toExponential(3);
}

class Chart implements ChartHandle {
  private data!: ChartData;
  private call!: ChartCall;
  private mods!: Modules;
  private selection: string = MERGED;
  private wanted: ChartState;
  private plot: uPlot | undefined;
  private current!: View;
  private window: [number, number] = [0, 0];
  private readonly header: HTMLDivElement;
  private readonly controls: HTMLDivElement;
  private readonly summary: HTMLDivElement;
  private readonly plotBox: HTMLDivElement;
  private readonly card: HTMLDivElement;
  private readonly observers: { disconnect(): void }[] = [];
  private started = 0;
  private tickCache: { id: string; at: number[]; labels: string[] } | undefined;
  renderMs: number | undefined;

  constructor(
    private readonly root: HTMLElement,
    private readonly options: MountOptions,
  ) {
    this.wanted = { ...options.state };
    root.classList.add('rca-chart');
    this.header = el('div', 'rca-header', undefined, root);
    this.controls = el('div', 'rca-controls', undefined, this.header);
    this.summary = el('div', 'rca-summary', undefined, this.header);
    this.plotBox = el('div', 'rca-plot', undefined, root);
    this.card = el('div', 'rca-card', undefined, root);
    this.card.hidden = true;
    el('div', 'rca-help', 'Drag to zoom into modules, double-click to zoom out; zoomed out, each point is the worst module of its stretch of a layer. Click a point to select its mapping entry.', root);
    const rebuild = (): void => {
      if (this.plot) {
        this.build();
      }
    };
    const themes = new MutationObserver(rebuild);
    themes.observe(document.body, { attributes: true, attributeFilter: ['class'] });
    themes.observe(document.documentElement, { attributes: true, attributeFilter: ['style', 'class'] });
    this.observers.push(themes);
    const sizes = new ResizeObserver(() => this.plot?.setSize(this.size()));
    sizes.observe(this.plotBox);
    this.observers.push(sizes);
  }

  update(data: ChartData): void {
    this.started = performance.now();
    this.renderMs = undefined;
    this.root.dataset.updates = String(Number(this.root.dataset.updates ?? 0) + 1);
    // the reader's choice is kept across new data (an analysis after a save) where the data still has it
    const count = this.call?.modules.label.length;
    const shown = this.wanted.call ?? (this.data ? this.call?.call_index : undefined);
    this.data = data;
    const same = data.calls.find((c) => c.call_index === shown);
    this.setCall(same ?? data.calls[data.default_call] ?? data.calls[0]);
    this.selection = this.call && available(data, this.call, this.wanted.rank ?? MERGED) ? (this.wanted.rank ?? MERGED) : MERGED;
    this.root.dataset.rank = this.selection;
    this.renderControls();
    this.renderSummary();
    if (!this.call || this.call.modules.label.length === 0) {
      this.plot?.destroy();
      this.plot = undefined;
      this.plotBox.textContent = 'No mapped module pair was compared: nothing to chart.';
      this.root.dataset.rendered = 'empty';
      return;
    }
    if (count !== this.call.modules.label.length) {
      this.window = [-0.5, this.call.modules.label.length - 0.5];
    }
    this.build();
  }

  /** The reader chose: remember it (also for the host) and redraw. */
  private choose(state: ChartState): void {
    this.wanted = { ...this.wanted, ...state };
    this.options.onState?.({ ...this.wanted });
  }

  private setCall(call: ChartCall | undefined): void {
    this.call = call as ChartCall;
    if (call) {
      this.mods = new Modules(this.data, call);
    }
  }

  private size(): { width: number; height: number } {
    const width = Math.max(320, this.plotBox.clientWidth || 800);
    const height = this.options.height ?? 420;
    return { width, height };
  }

  private renderControls(): void {
    this.controls.textContent = '';
    const data = this.data;
    if (data.calls.length > 1) {
      const label = el('label', undefined, 'call ', this.controls);
      const select = el('select', 'rca-call', undefined, label);
      for (const c of data.calls) {
        const option = el('option', undefined, `${c.label}${c.first_divergence ? ' (diverges)' : ''}`, select);
        option.value = String(c.call_index);
        option.selected = c === this.call;
      }
      select.addEventListener('change', () => {
        this.setCall(data.calls.find((c) => String(c.call_index) === select.value) ?? this.call);
        if (!available(data, this.call, this.selection)) {
          this.selection = MERGED;
        }
        this.root.dataset.rank = this.selection;
        this.choose({ call: this.call.call_index, rank: this.selection });
        this.window = [-0.5, this.call.modules.label.length - 0.5];
        this.renderControls();
        this.renderSummary();
        this.build();
      });
    }
    if (this.call && this.call.ranks.some((r) => r.held.length > 0)) {
      const label = el('label', undefined, 'rank ', this.controls);
      const select = el('select', 'rca-rank', undefined, label);
      const option = (parent: HTMLElement, value: string, text: string): void => {
        const item = el('option', undefined, text, parent);
        item.value = value;
        item.selected = value === this.selection;
      };
      option(select, MERGED, 'all ranks merged');
      option(select, WORST, 'worst rank of each module');
      for (const side of ['train', 'rollout', 'both'] as const) {
        const copies = this.call.ranks.filter((r) => data.ranks[r.rank].side === side && r.held.length > 0);
        if (copies.length === 0) {
          continue;
        }
        const against = data.ranks[copies[0].rank].against;
        const group = el('optgroup', undefined, undefined, select);
        group.label = side === 'both' ? `train rank against ${against.replace(/ \d+$/, '')} (rank by rank)` : `${side} ranks, against the ${against}`;
        for (const copy of copies) {
          const rank = data.ranks[copy.rank];
          option(group, selectionOf(rank), `${rankName(rank)}${copy.mismatch.length ? ` · parts from the others at ${copy.mismatch.length}` : ''}`);
        }
      }
      select.addEventListener('change', () => {
        this.selection = select.value;
        this.root.dataset.rank = this.selection;
        this.choose({ call: this.call.call_index, rank: this.selection });
        shown.textContent = this.viewText();
        this.build();
      });
      const shown = el('span', 'rca-view', this.viewText(), this.controls);
    }
  }

  private renderSummary(): void {
    this.summary.textContent = '';
    const call = this.call;
    if (!call) {
      return;
    }
    const fd = call.first_divergence;
    if (fd) {
      const line = el('div', 'rca-summary-divergence', undefined, this.summary);
      el('span', 'rca-swatch rca-swatch-divergence', undefined, line);
      line.append('first divergence: ');
      const link = el('a', 'rca-link', this.mods.labels[fd.index], line);
      link.href = '#';
      link.title = fd.train_key;
      link.addEventListener('click', (e) => {
        e.preventDefault();
        this.select(fd.index);
      });
      line.append(` (layer ${call.modules.layer[fd.index] ?? '–'}, ${fd.classification ?? 'divergence'})`);
    } else {
      el('div', 'rca-summary-divergence', 'no credible divergence in this call: every mapped module is within the noise', this.summary);
    }
    if (call.boundary) {
      const line = el('div', 'rca-summary-boundary', undefined, this.summary);
      el('span', 'rca-swatch rca-swatch-boundary', undefined, line);
      line.append(`last aligned boundary: ${this.mods.labels[call.boundary.index]} (layer ${call.modules.layer[call.boundary.index] ?? '–'})`);
    }
    const explaining = call.one_sided.filter((op) => op.explains);
    if (explaining.length) {
      el('div', 'rca-summary-ops', `one-sided between them: ${explaining.map((op) => `${op.side} ${shortKey(op.key)}`).join(', ')}`, this.summary);
    }
    if (call.note) {
      el('div', 'rca-summary-note', call.note, this.summary);
    }
  }

  private build(): void {
    const call = this.call;
    const colours = palette();
    this.tickCache = undefined;
    this.plot?.destroy();
    this.plotBox.textContent = '';
    this.current = this.viewFor(this.window);
    const top = this.current.top;
    const bottom = this.bottom();
    const n = call.modules.label.length;
    const line = (stroke: string, width: number, points: boolean, dash?: number[]): uPlot.Series => ({
      stroke,
      width,
      dash,
      spanGaps: false,
      points: { show: points, size: 5, fill: stroke, stroke },
    });
    const opts: uPlot.Options = {
      ...this.size(),
      pxAlign: 0,
      scales: {
        x: { time: false, auto: false, range: () => this.window },
        y: { distr: 3, log: 10, auto: false, range: () => [bottom, top] },
      },
      series: [
        { label: 'module', value: (_u, v) => (v === null || v === undefined ? '–' : this.mods.labels[v] ?? '–') },
        { ...line(colours.output, 1.5, true), label: 'output', value: (_u, v) => this.legendValue(v) },
        { ...line(colours.input, 1, true, [4, 3]), label: 'input', value: (_u, v) => this.legendValue(v) },
        { ...line(colours.parameters, 0, true), paths: () => null, label: 'parameters', value: (_u, v) => this.legendValue(v) },
        { ...line(colours.floor, 1, false, [2, 3]), label: 'noise floor', value: (_u, v) => format(v) },
        { ...line(colours.tolerance, 1, false, [6, 3]), label: 'tolerance', value: (_u, v) => format(v) },
      ],
      bands: [{ series: [5, 4], fill: colours.band }],
      // the right padding leaves room for the rightmost labels (see axis.ts); the others are uPlot's
      padding: [null, (u) => this.rightPadding(u), null, null],
      axes: [
        {
          stroke: colours.fg,
          font: AXIS_FONT,
          grid: { stroke: colours.grid, width: 1 },
          ticks: { stroke: colours.grid, width: 1 },
          splits: (u) => this.xTicks(u).at,
          values: (u, splits) => {
            const { at, labels } = this.xTicks(u);
            return splits.map((s) => labels[at.indexOf(s)] ?? '');
          },
          rotate: -LABEL_ANGLE,
          size: (_u, values) => axisSize(values ?? [], measureText),
        },
        {
          stroke: colours.fg,
          grid: { stroke: colours.grid, width: 1 },
          ticks: { stroke: colours.grid, width: 1 },
          label: 'relative error (log)',
          splits: (_u, _i, min, max) => decades(min, max, Math.floor(this.size().height / 40)),
          filter: (_u, splits) => splits,
          values: (_u, splits) => splits.map((v) => (v === null ? '' : v <= LOWEST ? '≤1e-10' : `1e${Math.round(Math.log10(v))}`)),
          size: 60,
        },
      ],
      cursor: {
        drag: { x: true, y: false, setScale: true },
        bind: { dblclick: () => () => null },
        points: { size: 8 },
      },
      legend: { show: true, live: true },
      hooks: {
        setScale: [(u, key) => key === 'x' && this.onZoom(u)],
        setCursor: [(u) => this.showCard(u)],
        draw: [(u) => this.decorate(u, colours)],
      },
    };
    this.plot = new uPlot(opts, this.aligned(this.current), this.plotBox);
    const over = this.plot.over;
    let down: [number, number] | undefined;
    over.addEventListener('mousedown', (e) => {
      down = [e.clientX, e.clientY];
    });
    over.addEventListener('click', (e) => {
      const moved = down ? Math.abs(e.clientX - down[0]) + Math.abs(e.clientY - down[1]) : 0;
      const idx = this.plot?.cursor.idx;
      if (moved < 4 && idx !== null && idx !== undefined) {
        this.select(this.current.x[idx]);
      }
    });
    over.addEventListener('dblclick', () => this.plot?.setScale('x', { min: -0.5, max: n - 0.5 }));
    over.addEventListener('mouseleave', () => {
      this.card.hidden = true;
    });
  }

  /** The plot's left edge (CSS px): the y axis and its label; it does not depend on the right padding. */
  private plotLeft(u: uPlot): number {
    return u.bbox.width > 0 ? u.bbox.left / devicePixelRatio : 90;
  }

  /** The x ticks of the current range and width, their labels elided to fit (computed once per layout). */
  private xTicks(u: uPlot): { at: number[]; labels: string[] } {
    const n = this.call.modules.label.length;
    const min = u.scales.x.min ?? -0.5;
    const max = u.scales.x.max ?? n - 0.5;
    // the room along the axis from the full width less the y axis: the same in every layout pass whatever the
    // right padding, so the labels the padding is made for are the labels drawn
    const room = Math.floor((u.width - this.plotLeft(u)) / LABEL_SPACING);
    const id = `${min}|${max}|${room}`;
    if (this.tickCache?.id !== id) {
      const found = ticks(this.call, this.mods.labels, min, max, room);
      const apart = spaced(found.at, min, max, u.width - this.plotLeft(u));
      this.tickCache = {
        id,
        at: apart.map((i) => found.at[i]),
        labels: apart.map((i) => elide(found.labels[i], LABEL_MAX_PX, measureText)),
      };
    }
    return this.tickCache;
  }

  private rightPadding(u: uPlot): number {
    const minimum = 16;
    const min = u.scales.x.min;
    const max = u.scales.x.max;
    if (min === undefined || max === undefined || min === null || max === null || !(max > min)) {
      return minimum;
    }
    const { at, labels } = this.xTicks(u);
    const placed = at.map((value, i) => ({ fraction: (value - min) / (max - min), text: labels[i] }));
    return rightPadding(placed, u.width, this.plotLeft(u), minimum, measureText);
  }

  private viewFor([from, to]: [number, number]): View {
    return view(this.data, this.call, this.selection, from + 0.5, to + 0.5);
  }

  private bottom(): number {
    let low = Infinity;
    let exact = false;
    const errors = rawErrors(this.data, this.call, this.selection);
    for (const kind of KINDS) {
      for (const v of errors[kind]) {
        if (v !== null && v > LOWEST && v < low) {
          low = v;
        }
        exact = exact || (v !== null && v <= LOWEST);
      }
    }
    for (const at of this.call.modules.noise_floor) {
      const v = this.mods.threshold(at);
      if (v !== null && v > LOWEST && v < low) {
        low = v;
      }
    }
    const floor = Number.isFinite(low) ? 10 ** Math.floor(Math.log10(low) - 1) : 1e-9;
    // exact agreement is drawn at LOWEST: keep it in view, just above the bottom
    return Math.max(LOWEST / 10, Math.min(floor, axisTop(errors) / 1e3, exact ? LOWEST / 2 : Infinity));
  }

  private aligned(v: View): uPlot.AlignedData {
    return [v.x, v.errors.output, v.errors.input, v.errors.parameters, v.floor, v.tolerance];
  }

  private legendValue(v: number | null | undefined): string {
    if (v === null || v === undefined) {
      return '–';
    }
    return v <= LOWEST ? '≤1e-10' : v >= this.current.top ? 'non-finite' : format(v);
  }

  /** What the plot shows of the ranks: the merged tensors, or the rank view chosen. */
  private viewText(): string {
    if (this.selection === WORST) {
      return 'each module: the rank whose own copy differs most from the other side (hover: which rank)';
    }
    const at = rankIndex(this.data, this.selection);
    if (at === undefined) {
      return 'the ranks merged';
    }
    const rank = this.data.ranks[at];
    const how = rank.side === 'both' ? 'every slot, shard against shard' : 'the slots it holds whole';
    return `${rankName(rank)}'s own copy against the ${rank.against} (${how}; nothing where it holds no copy)`;
  }

  private onZoom(u: uPlot): void {
    const min = u.scales.x.min ?? -0.5;
    const max = u.scales.x.max ?? this.call.modules.label.length - 0.5;
    this.window = [min, max];
    const wanted = max - min > DETAIL_LIMIT;
    if (wanted || this.current.aggregated) {
      this.current = this.viewFor(this.window);
      queueMicrotask(() => this.plot?.setData(this.aligned(this.current), false));
    }
  }

  private decorate(u: uPlot, colours: Record<string, string>): void {
    const call = this.call;
    const ctx = u.ctx;
    const { left, top, width, height } = u.bbox;
    const inView = (x: number): boolean => x >= (u.scales.x.min ?? 0) && x <= (u.scales.x.max ?? 0);
    const vertical = (index: number, colour: string, dash: number[]): void => {
      if (!inView(index)) {
        return;
      }
      const x = u.valToPos(index, 'x', true);
      ctx.save();
      ctx.strokeStyle = colour;
      ctx.lineWidth = 2 * devicePixelRatio;
      ctx.setLineDash(dash.map((d) => d * devicePixelRatio));
      ctx.beginPath();
      ctx.moveTo(x, top);
      ctx.lineTo(x, top + height);
      ctx.stroke();
      ctx.restore();
    };
    const parting = firstParting(this.data, call, this.selection);
    if (parting) {
      vertical(parting.index, colours.rank, [2, 2]);
    }
    if (call.boundary) {
      vertical(call.boundary.index, colours.boundary, [6, 4]);
    }
    if (call.first_divergence) {
      vertical(call.first_divergence.index, colours.divergence, []);
    }
    // one-sided ops: a triangle on the floor of the plot between the modules they ran between
    const size = 6 * devicePixelRatio;
    for (const op of call.one_sided) {
      const at = op.after + 0.5;
      if (!inView(at)) {
        continue;
      }
      const x = u.valToPos(at, 'x', true);
      const y = top + height;
      ctx.save();
      ctx.fillStyle = op.explains ? colours.divergence : colours.muted;
      ctx.beginPath();
      ctx.moveTo(x, y - size * 1.6);
      ctx.lineTo(x - size, y);
      ctx.lineTo(x + size, y);
      ctx.closePath();
      ctx.fill();
      ctx.restore();
    }
    ctx.save();
    ctx.fillStyle = colours.muted;
    ctx.font = `${11 * devicePixelRatio}px sans-serif`;
    ctx.textAlign = 'right';
    ctx.fillText(this.current.aggregated ? 'zoomed out: worst module per stretch of a layer' : 'every module', left + width - 4, top + 14 * devicePixelRatio);
    ctx.restore();
    this.placeMarkers(u);
    if (this.renderMs === undefined) {
      const now = performance.now();
      this.renderMs = now - this.started;
      this.root.dataset.drawnAt = String(now); // since the page's navigation started
      this.root.dataset.rendered = String(this.renderMs);
    }
  }

  /** DOM markers over the plot (labels that follow the theme, and what tests and screen readers find). */
  private placeMarkers(u: uPlot): void {
    const call = this.call;
    for (const old of Array.from(u.over.querySelectorAll('.rca-marker'))) {
      old.remove();
    }
    const add = (index: number, kind: string, text: string, key: string, position: number): void => {
      if (position < (u.scales.x.min ?? 0) || position > (u.scales.x.max ?? 0)) {
        return;
      }
      const marker = el('div', `rca-marker rca-marker-${kind}`, text, u.over);
      // centred on its module, but kept inside the plot near either edge (never cut by the page)
      const width = marker.offsetWidth;
      const room = u.over.clientWidth;
      const x = u.valToPos(position, 'x');
      marker.style.left = `${Math.max(0, Math.min(x - width / 2, room - width))}px`;
      marker.dataset.x = String(x); // where its module is (CSS px from the plot's left edge): the label may be shifted
      marker.dataset.trainKey = key;
      marker.dataset.index = String(index);
      marker.title = key;
    };
    if (call.first_divergence) {
      const fd = call.first_divergence;
      add(fd.index, 'divergence', `first divergence: ${this.mods.labels[fd.index]}`, fd.train_key, fd.index);
    }
    if (call.boundary) {
      const b = call.boundary;
      add(b.index, 'boundary', `aligned: ${this.mods.labels[b.index]}`, b.train_key, b.index);
    }
    const parting = firstParting(this.data, call, this.selection);
    if (parting) {
      const first = parting.index;
      const key = this.hasDetails() ? this.mods.trainKey(first) : '';
      add(first, 'rank', `${rankName(parting.rank)} parts: ${this.mods.labels[first]}`, key, first);
      const marker = u.over.querySelector<HTMLElement>('.rca-marker-rank');
      if (marker) {
        marker.dataset.rank = selectionOf(parting.rank);
      }
    }
    for (const op of call.one_sided) {
      if (op.explains) {
        add(op.after, 'op', `${op.side} only: ${shortKey(op.key)}`, op.key, op.after + 0.5);
      }
    }
  }

  private showCard(u: uPlot): void {
    const idx = u.cursor.idx;
    if (idx === null || idx === undefined || u.cursor.left === undefined || u.cursor.left < 0) {
      this.card.hidden = true;
      return;
    }
    const index = this.current.x[idx];
    this.fillCard(index);
    const box = this.plotBox.getBoundingClientRect();
    const root = this.root.getBoundingClientRect();
    const x = box.left - root.left + u.bbox.left / devicePixelRatio + (u.cursor.left ?? 0);
    this.card.hidden = false;
    const width = this.card.offsetWidth;
    // beside the cursor, on the side with room; inside the chart's area either way
    const left = x + 16 + width <= root.width ? x + 16 : x - 16 - width;
    this.card.style.left = `${Math.max(0, Math.min(left, root.width - width))}px`;
    this.card.style.top = `${box.top - root.top + 8}px`;
  }

  private fillCard(index: number): void {
    const call = this.call;
    const mods = this.mods;
    const m = call.modules;
    const card = this.card;
    card.textContent = '';
    if (!this.hasDetails()) {
      el('div', 'rca-card-title', `${mods.labels[index]} (reading the details…)`, card);
      return;
    }
    el('div', 'rca-card-title', `${mods.labels[index]}${m.layer[index] !== null ? ` · layer ${m.layer[index]}` : ''}`, card);
    el('div', 'rca-card-key', mods.trainKey(index), card);
    el('div', 'rca-card-key', `↔ ${mods.rolloutKey(index)}`, card);
    const suspect = mods.text(m.suspect[index]);
    const bucket = mods.text(m.bucket[index]);
    el('div', 'rca-card-verdict', `verdict: ${suspect ? `${suspect} (${bucket})` : bucket}`, card);
    if (call.first_divergence?.index === index) {
      el('div', 'rca-card-flag', 'first divergence', card);
    }
    if (call.boundary?.index === index) {
      el('div', 'rca-card-flag', 'last aligned boundary', card);
    }
    const shown = this.selection === MERGED ? undefined : errorsFor(this.data, call, this.selection);
    const chosen = rankIndex(this.data, this.selection);
    const verdicts = el('table', 'rca-card-table', undefined, card);
    const head = el('tr', undefined, undefined, verdicts);
    const column = this.selection === WORST ? 'worst rank' : chosen !== undefined ? rankName(this.data.ranks[chosen]) : '';
    for (const h of ['', 'worst target', 'rel. err', ...(shown ? [column] : []), 'tolerance', 'verdict']) {
      el('th', undefined, h, head);
    }
    for (const kind of KINDS) {
      const s = m[kind];
      const consistency = mods.text(s.consistency[index]) ?? '–';
      if (consistency === 'not_applicable') {
        continue;
      }
      const row = el('tr', undefined, undefined, verdicts);
      el('td', 'rca-card-kind', KIND_LABEL[kind], row);
      el('td', undefined, mods.text(s.target[index]) ?? '–', row);
      el('td', 'rca-num', format(s.error[index]), row);
      if (shown) {
        const whose = shown.of?.[kind][index];
        const value = format(shown.errors[kind][index]);
        el('td', 'rca-num', whose !== undefined && whose >= 0 ? `${value} (${rankName(this.data.ranks[whose])})` : value, row);
      }
      el('td', 'rca-num', format(mods.threshold(s.tolerance[index])), row);
      el('td', `rca-verdict-${consistency}`, consistency, row);
    }
    const stats = mods.stats(index);
    if (stats.length) {
      const table = el('table', 'rca-card-table', undefined, card);
      const top = el('tr', undefined, undefined, table);
      for (const h of ['statistics', 'side', 'dtype', 'shape', ...STAT_NAMES]) {
        el('th', undefined, h, top);
      }
      for (const [target, train, rollout] of stats) {
        ([['train', train], ['rollout', rollout]] as const).forEach(([side, values], i) => {
          const row = el('tr', i === 0 ? 'rca-card-first' : undefined, undefined, table);
          el('td', undefined, i === 0 ? (mods.text(target) ?? '') : '', row);
          el('td', undefined, side, row);
          el('td', undefined, values ? (mods.text(values[0]) ?? '–') : '–', row);
          el('td', undefined, values ? (mods.text(values[1]) || '–') : '–', row);
          for (let k = 2; k < 6; k++) {
            el('td', 'rca-num', format(values ? values[k] : null), row);
          }
        });
      }
    }
    if (m.noise_floor[index] !== null) {
      el('div', 'rca-card-note', `noise floor of the output's dtype: ${format(mods.threshold(m.noise_floor[index]))}`, card);
    }
    for (const op of call.one_sided.filter((o) => o.after === index)) {
      el('div', 'rca-card-note', `then, ${op.side} only: ${op.key}`, card);
    }
  }

  detailsLoaded(): void {
    this.root.dataset.details = 'loaded';
  }

  /** Whether the keys, verdicts and statistics are there (not yet while the HTML report reads them). */
  private hasDetails(): boolean {
    return this.call.modules.train_key !== undefined;
  }

  select(index: number): void {
    if (!this.hasDetails()) {
      return;
    }
    const key = this.mods.trainKey(index);
    this.root.dataset.selected = key;
    this.options.onSelect?.(key, this.call, index);
  }

  destroy(): void {
    this.plot?.destroy();
    for (const o of this.observers) {
      o.disconnect();
    }
    this.root.textContent = '';
  }
}

/** Powers of ten from `min` to `max`, every k-th so at most `room` of them. */
function decades(min: number, max: number, room: number): number[] {
  const low = Math.ceil(Math.log10(min) - 1e-9);
  const high = Math.floor(Math.log10(max) + 1e-9);
  const step = Math.max(1, Math.ceil((high - low + 1) / Math.max(2, room)));
  const out: number[] = [];
  for (let e = high; e >= low; e -= step) {
    out.unshift(10 ** e);
  }
  return out;
}

function shortKey(key: string): string {
  const parts = key.split('.');
  return parts.length > 3 ? parts.slice(-4, -2).join('.') : key;
}

export function mount(root: HTMLElement, data: ChartData | null, options: MountOptions = {}): ChartHandle {
  const chart = new Chart(root, options);
  if (data) {
    chart.update(data);
  }
  return chart;
}

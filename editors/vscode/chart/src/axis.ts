/**
 * The x axis's module labels, laid out so that none is clipped at any width: drawn at LABEL_ANGLE (rotated down to
 * the right from their tick), long ones elided at the front to LABEL_MAX_PX (the hover names the module whole), the
 * axis as tall as its longest label needs and the plot's right padding as wide as the rightmost labels need.
 */

/** The axis labels' font (uPlot scales it by the device pixel ratio when drawing; measurements are in CSS px). */
export const AXIS_FONT = '12px system-ui, sans-serif';
export const LABEL_ANGLE = 30; // degrees, down to the right
export const LABEL_MAX_PX = 170;
/** Minimum spacing of x labels along the axis (CSS px): fewer ticks than this allows are shown. */
export const LABEL_SPACING = 70;
const TICK_PX = 10; // uPlot's tick size and gap below the plot
const GAP_PX = 5;
const MARGIN_PX = 4;

const RAD = (LABEL_ANGLE * Math.PI) / 180;
const COS = Math.cos(RAD);
const SIN = Math.sin(RAD);

/** The width of a text in the axis font (CSS px). */
export type Measure = (text: string) => number;

/** The label's height in the axis font: its box is this tall around the baseline ("middle" for rotated labels). */
export function labelHeight(): number {
  return 12 * 1.25;
}

/** `text`, or its end after an ellipsis, no wider than `max` (the end of a module path names it best). */
export function elide(text: string, max: number, measure: Measure): string {
  if (measure(text) <= max) {
    return text;
  }
  let low = 0; // characters dropped from the front: the smallest count that fits is wanted
  let high = text.length;
  while (low < high) {
    const mid = (low + high) >> 1;
    if (measure(`…${text.slice(mid)}`) <= max) {
      high = mid;
    } else {
      low = mid + 1;
    }
  }
  return `…${text.slice(low)}`;
}

/** How far a label reaches right of its tick and down from the axis line (CSS px). */
export function labelExtent(text: string, measure: Measure): { right: number; down: number } {
  const w = measure(text);
  const h = labelHeight();
  return { right: w * COS + (h / 2) * SIN + MARGIN_PX, down: w * SIN + (h / 2) * COS };
}

/** The x axis's height (CSS px) for these labels: ticks, gap and the lowest reaching label. */
export function axisSize(labels: string[], measure: Measure): number {
  let down = labelHeight();
  for (const text of labels) {
    if (text) {
      down = Math.max(down, labelExtent(text, measure).down);
    }
  }
  return Math.ceil(TICK_PX + GAP_PX + down + MARGIN_PX);
}

/**
 * The right padding (CSS px) that keeps every label inside the canvas: a tick at fraction f of the plot's width
 * sits at left + f * (width - left - right), so its label ends inside when right >= (reach - (1 - f) * (width -
 * left)) / f. `ticks`: the labels' positions as fractions of the x range, with their texts.
 */
export function rightPadding(
  ticks: { fraction: number; text: string }[],
  width: number,
  left: number,
  minimum: number,
  measure: Measure,
): number {
  let right = minimum;
  const room = width - left;
  for (const { fraction, text } of ticks) {
    if (!text || fraction <= 0) {
      continue; // at the plot's left edge a label reaches right into the plot, never past the canvas
    }
    const reach = labelExtent(text, measure).right;
    right = Math.max(right, (reach - (1 - fraction) * room) / fraction);
  }
  return Math.ceil(Math.min(right, room / 2));
}

/**
 * The indexes of the ticks to label: each far enough from the previous labelled one that their (parallel, rotated)
 * labels do not overlap; `width`: the axis's length in CSS px (about: the plot's, before its right padding).
 */
export function spaced(at: number[], min: number, max: number, width: number): number[] {
  const apart = labelHeight() / Math.sin(RAD) + 6; // a label's height across its slant, and a gap
  const kept: number[] = [];
  let last = -Infinity;
  at.forEach((value, i) => {
    const x = ((value - min) / (max - min)) * width;
    if (x - last >= apart) {
      kept.push(i);
      last = x;
    }
  });
  return kept;
}

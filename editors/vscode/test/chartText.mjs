// The chart's canvas texts, for the Chromium tests (test/report, test/e2e): what every fillText on a canvas of the
// chart drew, as the device-pixel box of its measured text under the transform it was drawn with, and the canvas
// size then; and which of them are cut at the canvas's edge.

/** Records the chart's canvas texts in globalThis.rcaTexts. Runs in the page before its scripts (an init script). */
export function recordCanvasTexts() {
  /* global CanvasRenderingContext2D -- runs in the page */
  const proto = CanvasRenderingContext2D.prototype;
  const fill = proto.fillText;
  globalThis.rcaTexts = [];
  proto.fillText = function (text, x, y, ...rest) {
    if (this.canvas.closest && this.canvas.closest('#rca-chart')) {
      const m = this.measureText(text);
      const t = this.getTransform();
      const corners = [[x - m.actualBoundingBoxLeft, y - m.actualBoundingBoxAscent], [x + m.actualBoundingBoxRight, y - m.actualBoundingBoxAscent],
        [x - m.actualBoundingBoxLeft, y + m.actualBoundingBoxDescent], [x + m.actualBoundingBoxRight, y + m.actualBoundingBoxDescent]]
        .map(([px, py]) => [t.a * px + t.c * py + t.e, t.b * px + t.d * py + t.f]);
      const xs = corners.map((c) => c[0]);
      const ys = corners.map((c) => c[1]);
      globalThis.rcaTexts.push({ text: String(text), canvas: [this.canvas.width, this.canvas.height],
        box: [Math.min(...xs), Math.min(...ys), Math.max(...xs), Math.max(...ys)] });
    }
    return fill.call(this, text, x, y, ...rest);
  };
}

/** The recorded texts that reach past their canvas (by more than a pixel), described. */
export function clippedTexts(texts) {
  return texts
    .filter(({ canvas: [w, h], box: [x0, y0, x1, y1] }) => x0 < -1 || y0 < -1 || x1 > w + 1 || y1 > h + 1)
    .map((t) => `"${t.text}" ${t.box.map(Math.round)} in ${t.canvas}`);
}

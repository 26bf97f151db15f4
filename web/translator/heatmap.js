// The encoder-decoder attention as a heatmap: one row per piece the model wrote, one column per
// source piece, drawn as the book's charts draw attention (Vega's "blues" scheme on [0, 1],
// labels at 50 degrees, the weight in a tooltip), in plain SVG.

const SVG = "http://www.w3.org/2000/svg";
// ColorBrewer's Blues, the colours Vega interpolates for its "blues" scheme.
const BLUES = ["#f7fbff", "#deebf7", "#c6dbef", "#9ecae1", "#6baed6", "#4292c6", "#2171b5", "#08519c", "#08306b"];
const CELL = 18; // pixels a side
const LABEL_FONT = 12;

/** The colour of a weight in [0, 1]. */
export function blues(weight) {
  const at = Math.min(Math.max(weight, 0), 1) * (BLUES.length - 1);
  const low = Math.floor(at);
  const high = Math.min(low + 1, BLUES.length - 1);
  const mix = (a, b) => Math.round(a + (b - a) * (at - low));
  const rgb = (hex) => [1, 3, 5].map((i) => parseInt(hex.slice(i, i + 2), 16));
  const [from, to] = [rgb(BLUES[low]), rgb(BLUES[high])];
  return `rgb(${from.map((value, i) => mix(value, to[i])).join(",")})`;
}

function element(name, attributes = {}, text = null) {
  const node = document.createElementNS(SVG, name);
  for (const [key, value] of Object.entries(attributes)) node.setAttribute(key, value);
  if (text !== null) node.textContent = text;
  return node;
}

/** Roughly how wide a label is drawn, to leave room for it. */
function labelWidth(labels) {
  return Math.max(0, ...labels.map((label) => label.length)) * LABEL_FONT * 0.62;
}

/**
 * Replace the contents of `container` with a heatmap.
 * @param {HTMLElement} container
 * @param {{rows: string[], columns: string[], weight: (row: number, column: number) => number,
 *   title: string}} map row and column labels, the weight of each cell, a title
 */
export function drawHeatmap(container, { rows, columns, weight, title }) {
  const left = labelWidth(rows) + 40;
  const bottom = labelWidth(columns) * 0.77 + 40; // labels at 50 degrees
  const width = Math.max(left + columns.length * CELL, left + title.length * LABEL_FONT * 0.62) + 20;
  const height = 30 + rows.length * CELL + bottom;
  const svg = element("svg", {
    width,
    height,
    viewBox: `0 0 ${width} ${height}`,
    role: "img",
    "aria-label": title,
    class: "translator-heatmap",
    "data-rows": rows.length,
    "data-columns": columns.length,
  });
  svg.append(element("text", { x: left, y: 16, class: "translator-heatmap-title" }, title));
  const top = 30;
  rows.forEach((row, r) => {
    svg.append(
      element("text", { x: left - 6, y: top + (r + 0.7) * CELL, "text-anchor": "end", class: "translator-row-label" }, row),
    );
    columns.forEach((column, c) => {
      const value = weight(r, c);
      const cell = element("rect", {
        x: left + c * CELL,
        y: top + r * CELL,
        width: CELL,
        height: CELL,
        fill: blues(value),
        class: "translator-cell",
        "data-row": r,
        "data-column": c,
        "data-weight": value.toFixed(3),
      });
      cell.append(element("title", {}, `${row} ← ${column}: ${value.toFixed(3)}`));
      svg.append(cell);
    });
  });
  const below = top + rows.length * CELL + 8;
  columns.forEach((column, c) => {
    const x = left + (c + 0.6) * CELL;
    svg.append(
      element(
        "text",
        { x, y: below, transform: `rotate(-50 ${x} ${below})`, "text-anchor": "end", class: "translator-column-label" },
        column,
      ),
    );
  });
  svg.append(element("text", { x: left, y: height - 6, class: "translator-axis-title" }, "source pieces"));
  const middle = top + (rows.length * CELL) / 2;
  svg.append(
    element(
      "text",
      { x: 12, y: middle, transform: `rotate(-90 12 ${middle})`, "text-anchor": "middle", class: "translator-axis-title" },
      "pieces written",
    ),
  );
  container.replaceChildren(svg);
}

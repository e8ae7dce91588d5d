// Draws every chart of the page: each .ds-chart has its Vega-Lite spec in the
// <script type="application/json" class="ds-spec"> after it (a data block: never executed).
// vegaEmbed comes from assets/vega-bundle.js (vl-convert's offline bundle), loaded as a module
// before this. The site's Content-Security-Policy allows no eval, so Vega evaluates its
// expressions with its interpreter (ast: true), and the specs' inline CSV is parsed here:
// Vega's CSV reader (d3-dsv) compiles a function from the header row.
const dark = () => document.body.getAttribute("data-md-color-scheme") === "slate";

// CSV as polars writes it (",", fields with , " or a line break quoted, "" inside quotes) -> row objects.
function csvRows(text) {
  const rows = [];
  let row = [], field = "", quoted = false;
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (quoted) {
      if (c !== '"') field += c;
      else if (text[i + 1] === '"') { field += '"'; i++; }
      else quoted = false;
    } else if (c === '"') quoted = true;
    else if (c === ",") { row.push(field); field = ""; }
    else if (c === "\n") { row.push(field); rows.push(row); row = []; field = ""; }
    else if (c !== "\r") field += c;
  }
  if (field !== "" || row.length) { row.push(field); rows.push(row); }
  const [header = [], ...body] = rows;
  return body.map((r) => Object.fromEntries(header.map((name, j) => [name, r[j] ?? ""])));
}

// The spec with its inline CSV as rows (the declared field types still apply).
function withRows(spec) {
  const data = spec.data;
  if (!data || typeof data.values !== "string" || !data.format || data.format.type !== "csv") return spec;
  const { type, ...format } = data.format;
  return { ...spec, data: { ...data, values: csvRows(data.values), format } };
}

function draw() {
  for (const spec of document.querySelectorAll("script.ds-spec")) {
    const el = document.getElementById(spec.dataset.for);
    if (!el) continue;
    const options = { actions: { export: true, source: false, compiled: false, editor: false },
                      theme: dark() ? "dark" : undefined, renderer: "svg", ast: true };
    window.vegaEmbed(el, withRows(JSON.parse(spec.textContent)), options).catch((err) => {
      el.textContent = "chart failed: " + err;
      console.error(err);
    });
  }
}

draw();
// Redraw in the other palette when the dark-mode toggle flips.
new MutationObserver(draw).observe(document.body, { attributes: true, attributeFilter: ["data-md-color-scheme"] });

// Draws every chart of the page: each .ds-chart's Vega-Lite spec is window.dumpscopeCharts[its id],
// set by the page's chart file (<page>.charts.js beside it, a classic script loaded by the page's
// first chart: flows/publish/site.py), so a night that moved a chart's rows and nothing else
// rewrites that small file, not the page.
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

// The series pages' charts leave the window's ends to this script (transforms/site/charts.py,
// small_multiples_by with ends): a row with b "s" stands for its line at the window's first run,
// b "n" at the latest run. Which runs those are, window.dumpscopeStatus says (assets/status-data.js,
// written each night), so a night that moved none of a series' figures leaves its page as it was.
// The time axis is then reckoned from the rows as charts.py reckons it for the other charts
// (_time_domain, _run_ticks, _is_daily), with the constants the spec's usermeta carries.
const DAY = 864e5;
const sitePath = (href) => typeof href === "string" && /^[a-z0-9][\w./-]*(#[\w-]+)?$/.test(href) && !href.includes("..");

function localTime(t) {  // "2026-11-20T02:00", as polars writes the rows and Vega reads them: local time
  const m = /^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2})$/.exec(t);
  return m ? new Date(+m[1], m[2] - 1, +m[3], +m[4], +m[5]).getTime() : NaN;
}

function dateTime(ms) {  // a Vega-Lite DateTime, to the minute (charts.py's _datetime)
  const at = new Date(ms);
  return { year: at.getFullYear(), month: at.getMonth() + 1, date: at.getDate(), hours: at.getHours(), minutes: at.getMinutes() };
}

function setTimeAxis(node, axis) {  // every temporal x encoding of the spec (charts.py's _set_time_domain)
  if (Array.isArray(node)) { node.forEach((n) => setTimeAxis(n, axis)); return; }
  if (!node || typeof node !== "object") return;
  const x = node.encoding && node.encoding.x;
  if (x && x.type === "temporal") {
    if (axis.domain) x.scale = { ...(x.scale || {}), domain: axis.domain };
    const { tickCount, ...rest } = x.axis || {};
    x.axis = axis.values ? { ...rest, values: axis.values } : axis.daily ? { ...rest, tickCount: { interval: "day", step: 1 } } : rest;
  }
  for (const [key, value] of Object.entries(node)) if (key !== "data") setTimeAxis(value, axis);
}

function withEnds(spec) {
  const meta = spec.usermeta && spec.usermeta.dumpscopeEnds;
  if (!meta || !spec.data || !Array.isArray(spec.data.values)) return spec;
  const status = window.dumpscopeStatus;
  const ends = status && typeof status === "object" && status.window_ends || {};
  const values = [];
  for (const row of spec.data.values) {
    const run = row.b ? ends[row.b] : null;
    if (!row.b) values.push(row);
    else if (run && typeof run.run === "string" && Number.isFinite(localTime(run.t))) {
      const href = sitePath(run.href) ? meta.root + run.href : "";
      values.push({ ...row, t: run.t, r: run.run, c: typeof run.commit === "string" ? run.commit : "", h: href, i: href });
    }  // else no status data: the line keeps the runs where it moved
  }
  const times = [...new Set(values.map((r) => localTime(r.t)).filter(Number.isFinite))].sort((a, b) => a - b);
  if (times.length) {
    const first = times[0], last = times[times.length - 1], span = Math.max(last - first, DAY);
    setTimeAxis(spec, {
      domain: [dateTime(first - span * meta.left), dateTime(last + span * meta.right)],
      values: times.length <= meta.maxTicks ? times.map(dateTime) : null,
      daily: Math.floor((last - first) / DAY) <= meta.dailyDays,
    });
  }
  return { ...spec, data: { ...spec.data, values } };
}

// Every chart fits its container: its title and legend cut to its width. Small multiples (a facet
// of panels) fill it: as many columns as fit panels of at least MIN_PANEL px (at most the spec's
// columns, and no more than there are panels), each as wide as the row allows, and a little taller
// when wide. A spec's own panel size is for a reader without this script (the export).
// PANEL_CHROME: a panel's y axis, its spacing and the padding.
const MIN_PANEL = 240, MAX_PANEL = 1200, PANEL_CHROME = 78, ACTIONS = 40;  // vega-embed: the actions button's 38 px

function fitWidth(spec, width) {
  if (!(width > 0)) return spec;
  const out = { ...spec };
  if (typeof spec.title === "string" && spec.title) out.title = { text: spec.title, limit: width };
  const legend = (spec.config && spec.config.legend) || {};
  out.config = { ...spec.config, legend: { ...legend, labelLimit: Math.min(legend.labelLimit || 420, width - 60),
                                           columns: width < 520 ? 1 : legend.columns } };
  const inner = spec.spec;
  if (!spec.facet || !inner || typeof inner.width !== "number") return out;
  const field = spec.facet.field;
  const panels = new Set(Array.isArray(spec.data && spec.data.values) ? spec.data.values.map((r) => r[field]) : []).size || 1;
  const fit = Math.max(1, Math.floor(width / (MIN_PANEL + PANEL_CHROME)));
  const columns = Math.max(1, Math.min(spec.columns || 1, panels, fit));
  const panel = Math.min(MAX_PANEL, Math.floor(width / columns) - PANEL_CHROME);
  if (panel < 80) return out;  // no room to reckon with: the spec's size, scrolled in its box
  const height = Math.round(Math.min(220, Math.max(inner.height || 110, panel * 0.4)));
  const facet = { ...spec.facet, header: { ...(spec.facet.header || {}), labelLimit: panel } };
  return { ...out, facet, columns, spec: { ...inner, width: panel, height } };
}

function draw() {
  const specs = window.dumpscopeCharts;
  if (!specs || typeof specs !== "object") return;
  for (const el of document.querySelectorAll(".ds-chart[id]")) {
    const spec = Object.hasOwn(specs, el.id) ? specs[el.id] : null;
    if (!spec || typeof spec !== "object") continue;
    const options = { actions: { export: true, source: false, compiled: false, editor: false },
                      theme: dark() ? "dark" : undefined, renderer: "svg", ast: true };
    // A copy: withRows and withEnds make new objects, and a redraw starts from the file's spec.
    window.vegaEmbed(el, fitWidth(withEnds(withRows(structuredClone(spec))), el.clientWidth - ACTIONS), options).catch((err) => {
      el.textContent = "chart failed: " + err;
      console.error(err);
    });
  }
}

draw();
// Redraw in the other palette when the dark-mode toggle flips, and to the new width when the
// window's changes (a phone turned), once it has settled.
new MutationObserver(draw).observe(document.body, { attributes: true, attributeFilter: ["data-md-color-scheme"] });
let drawnWidth = window.innerWidth, resizing = null;
window.addEventListener("resize", () => {
  clearTimeout(resizing);
  resizing = setTimeout(() => { if (window.innerWidth !== drawnWidth) { drawnWidth = window.innerWidth; draw(); } }, 250);
});

// The status line of every page (overrides/main.html): when the site was built and the latest
// run, from window.dumpscopeStatus (assets/status-data.js, written each night by
// flows/publish/site.py), so that a night changes that one file and not every page's HTML.
// Likewise on a series page (series.md.j2): the latest run, and from window.dumpscopeSeries
// (assets/series-data.js, loaded here) how many runs saw the series and its dump in the latest run.
// Written as text nodes and attributes, never as markup: the run id and the commit are data.
// Each time gets its age beside it ("2 days ago"), reckoned when the page is read, so a site that
// stopped being rebuilt says so. A classic script (loads from file:// too): the site's root is
// the directory above this file.
(() => {
  const status = window.dumpscopeStatus;
  const line = document.querySelector(".ds-status");
  if (!line || !status || typeof status !== "object" || typeof status.built_at !== "string") return;
  const root = new URL("..", document.currentScript.src);
  // A page of the site, from its root ("runs/2026-11-20.html"): nothing else becomes a link.
  const isSitePath = (href) => typeof href === "string" && /^[a-z0-9][\w./-]*(#[\w-]+)?$/.test(href) && !href.includes("..");
  const ago = (ms) => {
    const minutes = Math.round(ms / 60000);
    if (minutes < 1) return "just now";
    if (minutes < 90) return `${minutes} min ago`;
    const hours = Math.round(minutes / 60);
    if (hours < 36) return `${hours} h ago`;
    return `${Math.round(hours / 24)} days ago`;
  };
  const element = (tag, text, attributes = {}) => {
    const el = document.createElement(tag);
    el.textContent = String(text);
    for (const [name, value] of Object.entries(attributes)) el.setAttribute(name, String(value));
    return el;
  };
  const time = (at, text) => {
    const el = element("time", text, {datetime: at});
    const when = Date.parse(at);
    const age = element("span", Number.isNaN(when) ? "" : ` (${ago(Date.now() - when)})`, {class: "ds-age"});
    return [el, age];
  };
  const parts = [];
  if (typeof status.run === "string") {
    const run = element("a", "");
    run.append(element("strong", status.run));
    if (isSitePath(status.run_href)) {
      run.setAttribute("href", new URL(status.run_href, root).href);
    }
    parts.push("Latest run ", run, ", started ", ...time(status.run_at, status.run_started));
    if (status.commit) parts.push(", commit ", element("code", status.commit));
    parts.push(" · ");
  } else {
    parts.push("No run yet · ");
  }
  parts.push("site built ", ...time(status.built_at, status.built));
  line.replaceChildren(...parts);

  const latestRun = () => {
    const a = element("a", status.run);
    if (isSitePath(status.run_href)) a.setAttribute("href", new URL(status.run_href, root).href);
    return a;
  };
  if (typeof status.run === "string") {
    for (const cell of document.querySelectorAll(".ds-latest-run")) cell.replaceChildren(latestRun());
  }
  // A series page (series.md.j2) loads the series' data: not every page needs its few hundred kB.
  const fill = () => {
    const series = window.dumpscopeSeries;
    if (!series || typeof series !== "object") return;
    const entryOf = (span) => Object.hasOwn(series, span.dataset.series) ? series[span.dataset.series] : null;
    for (const span of document.querySelectorAll(".ds-series-runs")) {
      const entry = entryOf(span);
      if (entry && Number.isInteger(entry.runs)) span.textContent = `, seen in ${entry.runs} run${entry.runs === 1 ? "" : "s"}`;
    }
    for (const span of document.querySelectorAll(".ds-series-dump")) {
      const entry = entryOf(span);
      if (!entry || typeof entry.dump !== "string" || typeof status.run !== "string") continue;
      const path = element("code", entry.dump);
      let dump = path;
      // The bucket's URL (the settings' bucket_url, the path percent-encoded): a web or file link only.
      if (typeof entry.dump_href === "string" && /^(https?|file):/i.test(entry.dump_href)) {
        dump = element("a", "", {class: "ds-dump", href: entry.dump_href});
        dump.append(path);
      }
      span.replaceChildren("Its dump in the latest run, ", latestRun(), ": ", dump, ".");
    }
  };
  if (document.querySelector(".ds-series-runs, .ds-series-dump")) {
    const script = document.createElement("script");
    script.addEventListener("load", fill);
    script.src = new URL("assets/series-data.js", root).href;
    document.body.append(script);
  }
})();

// Draws every chart of the page: each .ds-chart has its Vega-Lite spec in the
// <script type="application/json" class="ds-spec"> after it. vegaEmbed comes from
// assets/vega-bundle.js (vl-convert's offline bundle), loaded as a module before this.
const dark = () => document.body.getAttribute("data-md-color-scheme") === "slate";

function draw() {
  for (const spec of document.querySelectorAll("script.ds-spec")) {
    const el = document.getElementById(spec.dataset.for);
    if (!el) continue;
    const options = { actions: { export: true, source: false, compiled: false, editor: false },
                      theme: dark() ? "dark" : undefined, renderer: "svg" };
    window.vegaEmbed(el, JSON.parse(spec.textContent), options).catch((err) => {
      el.textContent = "chart failed: " + err;
      console.error(err);
    });
  }
}

draw();
// Redraw in the other palette when the dark-mode toggle flips.
new MutationObserver(draw).observe(document.body, { attributes: true, attributeFilter: ["data-md-color-scheme"] });

// Tables that do not fit their box become cards (dumpscope.css, table.ds-cards): each row a block,
// each cell a line led by its column's name, read from the table's header row. A phone shows
// every column of a row one above the other instead of one column and a sideways scroll; a wide
// screen, whose tables fit, keeps them as tables. Measured at load, when a closed block opens
// (its tables had no width), and when the window's width changes. The names are written as
// attributes (data-label, shown by CSS), never as markup: a column's title may be data. A
// reader without this script scrolls a wide table sideways in its box, its first column in view.
(() => {
  const labelled = new WeakSet();
  const label = (table) => {
    if (labelled.has(table)) return true;
    const head = table.querySelector("thead tr");
    if (!head) return false;
    const names = Array.from(head.children, (cell) => cell.textContent.trim());
    for (const row of table.querySelectorAll("tbody tr")) {
      Array.from(row.children).forEach((cell, i) => cell.setAttribute("data-label", names[i] || ""));
    }
    labelled.add(table);
    return true;
  };
  const fit = () => {
    for (const table of document.querySelectorAll("article table")) {
      const box = table.closest(".md-typeset__scrollwrap, .ds-scroll") || table.parentElement;
      table.classList.remove("ds-cards");
      if (!box.clientWidth) continue;  // not shown (a closed block): measured when it opens
      if (box.scrollWidth > box.clientWidth + 1 && label(table)) table.classList.add("ds-cards");
    }
  };
  // Material wraps each table in its scroll box once the page is set up (its document$, after this
  // script ran): measured then, and again when everything has loaded (fonts, the status line's cells).
  if (window.document$ && typeof window.document$.subscribe === "function") window.document$.subscribe(() => requestAnimationFrame(fit));
  else requestAnimationFrame(fit);
  window.addEventListener("load", () => requestAnimationFrame(fit));
  document.addEventListener("toggle", (event) => { if (event.target.open) fit(); }, true);
  let width = window.innerWidth, waiting = null;
  window.addEventListener("resize", () => {
    clearTimeout(waiting);
    waiting = setTimeout(() => { if (window.innerWidth !== width) { width = window.innerWidth; fit(); } }, 150);
  });
})();

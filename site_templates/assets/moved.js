// The 404 page (overrides/404.html): a run before the site's window, or an incident closed before
// it, has no page any more but a row on its month's archive page. archive/moved.json maps each such
// page (its address from the site's root: "incidents/i-1a2b3c4d.html") to that row; a link
// published while it had a page lands there. On every other page this does nothing.
const note = document.getElementById("ds-moved");
const asked = location.pathname.match(/^(.*\/)((?:runs|incidents)\/[a-z0-9-]+\.html)$/);
if (note && asked) {
  const root = new URL(asked[1], location.href);
  fetch(new URL("archive/moved.json", root))
    .then((response) => (response.ok ? response.json() : {}))
    .then((moved) => {
      const row = Object.hasOwn(moved, asked[2]) ? moved[asked[2]] : null;
      if (typeof row === "string" && row.startsWith("archive/")) location.replace(new URL(row, root));
    })
    .catch(() => {});
}

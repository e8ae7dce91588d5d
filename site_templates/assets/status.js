// The status line of every page (overrides/main.html): each <time> of it gets its age beside
// it ("2 days ago"), reckoned when the page is read, so a site that stopped being rebuilt says so.
const ago = (ms) => {
  const minutes = Math.round(ms / 60000);
  if (minutes < 1) return "just now";
  if (minutes < 90) return `${minutes} min ago`;
  const hours = Math.round(minutes / 60);
  if (hours < 36) return `${hours} h ago`;
  return `${Math.round(hours / 24)} days ago`;
};
for (const el of document.querySelectorAll(".ds-status time[datetime]")) {
  const at = Date.parse(el.getAttribute("datetime"));
  if (Number.isNaN(at)) continue;
  const age = document.createElement("span");
  age.className = "ds-age";
  age.textContent = ` (${ago(Date.now() - at)})`;
  el.after(age);
}

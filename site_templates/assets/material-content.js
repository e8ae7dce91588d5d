// Material for MkDocs 9.8.1, partials/javascripts/content.html: its inline script as a file, because the
// site's Content-Security-Policy runs no inline script (site_templates/overrides/).
// (the "content.tabs.link" part is left out: the site does not enable that feature).
var target=document.getElementById(location.hash.slice(1));target&&target.name&&(target.checked=target.name.startsWith("__tabbed_"))

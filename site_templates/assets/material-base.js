// Material for MkDocs 9.8.1, partials/javascripts/base.html: its inline script as a file, because the
// site's Content-Security-Policy runs no inline script (site_templates/overrides/).
// The scope is the site's root (this file is <root>/assets/material-base.js), as base_url is.
__md_scope=new URL("..",document.currentScript.src),__md_hash=e=>[...e].reduce(((e,_)=>(e<<5)-e+_.charCodeAt(0)),0),__md_get=(e,_=localStorage,t=__md_scope)=>JSON.parse(_.getItem(t.pathname+"."+e)),__md_set=(e,_,t=localStorage,a=__md_scope)=>{try{t.setItem(a.pathname+"."+e,JSON.stringify(_))}catch(e){}}

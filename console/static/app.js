// Cairn console. Every value that came from the store is put in the page
// as text (textContent, attributes), never parsed as HTML.
import { h, fmtSize, fmtTime, fmtAge, toast, ask, api, encPath, state } from "./lib.js";
import { uploadFiles, filesFromDrop } from "./upload.js";
import { renderAccess } from "./access.js";
import { renderCluster } from "./cluster.js";
import { renderActivity } from "./activity.js";

const view = document.getElementById("view");
const PAGE = 200; // entries per listing request

async function boot() {
  document.getElementById("signin").addEventListener("submit", signIn);
  document.getElementById("signout").addEventListener("click", signOut);
  window.addEventListener("hashchange", route);
  prefetchListing();
  try {
    state.session = await api("GET", "/api/session");
  } catch { state.session = null; }
  route();
}

// listURL is the listing request of one page of a directory.
function listURL(ns, base, prefix, cursor) {
  const q = new URLSearchParams({ limit: PAGE });
  if (prefix) q.set("prefix", prefix);
  if (cursor) q.set("cursor", cursor);
  return "/api/fs/" + encodeURIComponent(ns) + "/" + encPath(base) + "?" + q;
}

// A page opened on a directory asks for its first listing beside the
// session, not after it: one round trip less before files show. A failed
// prefetch is forgotten and the listing asked for again.
const prefetched = new Map(); // url -> Promise of the listing
function prefetchListing() {
  const [page, ns, ...dir] = location.hash.replace(/^#\/?/, "").split("/").map(decodeURIComponent).filter((x) => x !== "");
  if (page !== "files" || !ns) return;
  const url = listURL(ns, dir.length ? dir.join("/") + "/" : "", "", "");
  const p = fetch(url, { credentials: "same-origin" }).then((r) => (r.ok ? r.json() : Promise.reject(new Error(r.statusText))));
  p.catch(() => {});
  prefetched.set(url, p);
}

async function listing(url) {
  const p = prefetched.get(url);
  prefetched.delete(url);
  if (p) { try { return await p; } catch {} }
  return api("GET", url);
}

async function signIn(ev) {
  ev.preventDefault();
  const err = document.getElementById("si-error");
  err.textContent = "";
  try {
    state.session = await api("POST", "/api/session", {
      access_key: document.getElementById("si-key").value.trim(),
      secret: document.getElementById("si-secret").value,
    });
    document.getElementById("si-secret").value = "";
    if (!location.hash || location.hash === "#/") location.hash = "#/files"; else route();
  } catch (e) { err.textContent = e.message; }
}

async function signOut() {
  try { await api("DELETE", "/api/session"); } catch {}
  state.session = null;
  location.hash = "#/";
  route();
}

let stopView = null; // the current view's timers
function route() {
  if (stopView) { stopView(); stopView = null; }
  closePanel();
  const signedIn = !!state.session;
  document.getElementById("signin").hidden = signedIn;
  document.getElementById("top").hidden = !signedIn;
  view.replaceChildren();
  if (!signedIn) { document.getElementById("si-key").focus(); return; }
  document.getElementById("who").textContent = state.session.access_key + (state.session.root ? " (root)" : "");
  for (const a of document.querySelectorAll("[data-root]")) a.hidden = !state.session.root;
  const parts = location.hash.replace(/^#\/?/, "").split("/");
  const page = parts[0] || "files";
  for (const a of document.querySelectorAll("[data-nav]")) {
    if (a.dataset.nav === page) a.setAttribute("aria-current", "page"); else a.removeAttribute("aria-current");
  }
  const rest = parts.slice(1).map(decodeURIComponent);
  switch (page) {
    case "files": stopView = renderFiles(rest); break;
    case "access": stopView = renderAccess(view); break;
    case "cluster": stopView = renderCluster(view); break;
    case "activity": stopView = renderActivity(view); break;
    default: location.hash = "#/files";
  }
}
state.onUnauthenticated = () => { state.session = null; route(); };

// ---- Files ----------------------------------------------------------------

function filesHash(ns, dir) {
  let s = "#/files";
  if (ns) s += "/" + encodeURIComponent(ns);
  for (const d of dir) s += "/" + encodeURIComponent(d);
  return s;
}

function renderFiles(rest) {
  const [ns, ...dir] = rest.filter((x) => x !== "");
  if (!ns) { renderNamespaces(); return null; }
  return renderDir(ns, dir);
}

async function renderNamespaces() {
  document.title = "Namespaces · Cairn";
  const tbody = h("tbody");
  const form = h("form", { class: "toolbar", "aria-label": "Create namespace" },
    h("label", { for: "ns-new" }, "New namespace"),
    h("input", { id: "ns-new", required: "", pattern: "[a-z0-9][a-z0-9.\\-]*", placeholder: "name" }),
    h("label", {}, h("input", { type: "checkbox", id: "ns-public" }), " public"),
    h("button", { type: "submit", class: "primary" }, "Create"));
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const name = form.querySelector("#ns-new").value.trim();
    const vis = form.querySelector("#ns-public").checked ? "public" : "private";
    try { await api("PUT", "/api/ns/" + encodeURIComponent(name) + "?visibility=" + vis); toast("Created " + name); renderNamespaces(); }
    catch (e) { toast(e.message, true); }
  });
  view.replaceChildren(h("h1", {}, "Namespaces"), form,
    h("div", { class: "scroll" }, h("table", { "aria-label": "Namespaces" },
      h("thead", {}, h("tr", {}, h("th", {}, "Name"), h("th", {}, "Visibility"), h("th", { class: "hide-sm" }, "Owner"), h("th", { class: "hide-sm" }, "Created"))),
      tbody)));
  let list;
  try { list = await api("GET", "/api/ns"); } catch (e) { toast(e.message, true); return; }
  for (const n of list.namespaces) {
    tbody.append(h("tr", { class: "row", "data-name": n.name },
      h("td", {}, h("a", { class: "name", href: filesHash(n.name, []) }, h("span", { class: "icon", "aria-hidden": "true" }, "▣"), n.name)),
      h("td", {}, h("span", { class: "badge " + (n.visibility === "public" ? "warn" : "muted") }, n.visibility)),
      h("td", { class: "hide-sm" }, n.owner), h("td", { class: "hide-sm" }, fmtTime(n.created))));
  }
  if (!list.namespaces.length) tbody.append(h("tr", {}, h("td", { colspan: 4, class: "muted" }, "No namespaces yet: create one above.")));
}

function renderDir(ns, dir) {
  document.title = [ns, ...dir].join("/") + " · Cairn";
  const base = dir.length ? dir.join("/") + "/" : "";
  let cursor = "", loading = false, done = false, prefix = "", entries = [];
  let sortKey = "name", sortDir = 1, gen = 0;

  const crumbs = h("ol", { class: "crumbs" }, h("li", {}, h("a", { href: "#/files" }, "Namespaces")),
    h("li", {}, h("a", { href: filesHash(ns, []) }, ns)),
    ...dir.map((d, i) => h("li", {}, h("a", { href: filesHash(ns, dir.slice(0, i + 1)) }, d))));
  const search = h("input", { type: "search", id: "search", placeholder: "Filter by prefix  ( / )", "aria-label": "Filter by name prefix" });
  const fileInput = h("input", { type: "file", id: "file-input", multiple: "", hidden: "" });
  const dirInput = h("input", { type: "file", id: "dir-input", multiple: "", hidden: "", webkitdirectory: "" });
  const visBtn = h("button", { type: "button", id: "visibility" }, "Visibility…");
  const toolbar = h("div", { class: "toolbar" },
    h("div", { class: "grow" }, search),
    h("button", { type: "button", id: "mkdir" }, "New folder"),
    h("button", { type: "button", id: "upload-files", class: "primary" }, "Upload files"),
    h("button", { type: "button", id: "upload-dir" }, "Upload folder"),
    visBtn, fileInput, dirInput);
  const tbody = h("tbody", { id: "rows" });
  const th = (key, label, cls) => {
    const b = h("button", { type: "button", class: "sort" }, label);
    const cell = h("th", { class: cls || "", "data-key": key, "aria-sort": key === sortKey ? "ascending" : "none" }, b);
    b.addEventListener("click", () => {
      sortDir = sortKey === key ? -sortDir : 1; sortKey = key;
      for (const c of table.querySelectorAll("th[data-key]")) c.setAttribute("aria-sort", c.dataset.key === key ? (sortDir > 0 ? "ascending" : "descending") : "none");
      draw();
    });
    return cell;
  };
  const table = h("table", { id: "list", "aria-label": "Files in " + [ns, ...dir].join("/") },
    h("thead", {}, h("tr", {}, th("name", "Name"), th("size", "Size", "num"), th("mtime", "Modified", "hide-sm"), h("th", { class: "actions" }, h("span", { class: "sr" }, "Actions")))),
    tbody);
  const more = h("div", { class: "more", id: "more" });
  const sentinel = h("div", { "aria-hidden": "true" });
  view.replaceChildren(h("nav", { "aria-label": "Breadcrumbs" }, crumbs), toolbar, h("div", { class: "scroll" }, table), more, sentinel);

  const entryPath = (e) => base + e.name.replace(/\/$/, "");
  const rowFor = (e) => {
    const name = e.name.replace(/\/$/, "");
    const link = e.dir
      ? h("a", { class: "name", href: filesHash(ns, [...dir, name]) }, h("span", { class: "icon", "aria-hidden": "true" }, "▸"), name)
      : h("a", { class: "name", href: "#", role: "button" }, h("span", { class: "icon", "aria-hidden": "true" }, "·"), name);
    if (!e.dir) link.addEventListener("click", (ev) => { ev.preventDefault(); showDetails(ns, entryPath(e), reload); });
    const ren = h("button", { type: "button", "aria-label": "Rename " + name }, "Rename");
    const del = h("button", { type: "button", class: "danger", "aria-label": "Delete " + name }, "Delete");
    ren.addEventListener("click", () => renameEntry(ns, entryPath(e), reload));
    del.addEventListener("click", () => deleteEntry(ns, entryPath(e), e.dir, reload));
    const tr = h("tr", { class: "row", "data-name": name, "data-dir": e.dir ? "1" : "" },
      h("td", {}, link), h("td", { class: "num" }, e.dir ? "—" : fmtSize(e.size)),
      h("td", { class: "hide-sm" }, fmtTime(e.mtime)), h("td", { class: "actions" }, ren, " ", del));
    tr.addEventListener("keydown", (ev) => {
      if (ev.key === "Delete") { ev.preventDefault(); del.click(); }
      if (ev.key === "F2") { ev.preventDefault(); ren.click(); }
    });
    return tr;
  };
  // Only what is loaded is sorted: a directory is read a page at a time in
  // name order, never whole.
  const draw = () => {
    const sorted = sortKey === "name" && sortDir === 1 ? entries : [...entries].sort((a, b) => {
      const va = sortKey === "name" ? a.name : sortKey === "size" ? a.size : a.mtime || "";
      const vb = sortKey === "name" ? b.name : sortKey === "size" ? b.size : b.mtime || "";
      return (va < vb ? -1 : va > vb ? 1 : 0) * sortDir;
    });
    const frag = document.createDocumentFragment();
    for (const e of sorted) frag.append(rowFor(e));
    tbody.replaceChildren(frag);
    if (!entries.length && done) tbody.append(h("tr", {}, h("td", { colspan: 4, class: "muted" }, prefix ? "Nothing starts with that." : "Empty folder. Drop files here to upload.")));
  };
  const status = () => {
    more.replaceChildren(done ? `${entries.length} item${entries.length === 1 ? "" : "s"}` : `${entries.length} loaded `);
    if (!done) {
      const b = h("button", { type: "button", id: "load-more" }, "Load more");
      b.addEventListener("click", loadMore);
      more.append(b);
    }
  };
  async function loadMore() {
    if (loading || done) return;
    loading = true;
    const my = gen;
    try {
      const r = await listing(listURL(ns, base, prefix, cursor));
      if (my !== gen) return;
      const first = !entries.length;
      entries = entries.concat(r.entries);
      cursor = r.next_cursor; done = !cursor;
      if (first || sortKey !== "name" || sortDir !== 1) draw();
      else { const frag = document.createDocumentFragment(); for (const e of r.entries) frag.append(rowFor(e)); tbody.append(frag); }
      status();
      table.dataset.loaded = String(entries.length);
      if (first && window.__listedAt === undefined) window.__listedAt = performance.now();
    } catch (e) { toast(e.message, true); } finally { loading = false; }
  }
  function reload() { gen++; cursor = ""; done = false; entries = []; loading = false; tbody.replaceChildren(); loadMore(); }

  const obs = new IntersectionObserver((es) => { if (es.some((x) => x.isIntersecting)) loadMore(); });
  obs.observe(sentinel);
  let t;
  search.addEventListener("input", () => { clearTimeout(t); t = setTimeout(() => { prefix = search.value; reload(); }, 150); });
  const onKey = (ev) => {
    if (ev.key === "/" && document.activeElement.tagName !== "INPUT") { ev.preventDefault(); search.focus(); }
    if ((ev.key === "ArrowDown" || ev.key === "ArrowUp") && document.activeElement.closest && document.activeElement.closest("#rows")) {
      ev.preventDefault();
      const rows = [...tbody.querySelectorAll("a.name")];
      const i = rows.indexOf(document.activeElement.closest("tr").querySelector("a.name"));
      const next = rows[i + (ev.key === "ArrowDown" ? 1 : -1)];
      if (next) next.focus();
    }
  };
  document.addEventListener("keydown", onKey);
  toolbar.querySelector("#mkdir").addEventListener("click", async () => {
    const name = await ask("New folder", "Folder name", "");
    if (!name) return;
    try { await api("PUT", "/api/fs/" + encodeURIComponent(ns) + "/" + encPath(base + name) + "/"); toast("Created " + name); reload(); }
    catch (e) { toast(e.message, true); }
  });
  toolbar.querySelector("#upload-files").addEventListener("click", () => fileInput.click());
  toolbar.querySelector("#upload-dir").addEventListener("click", () => dirInput.click());
  const startUploads = (list) => uploadFiles(ns, base, list, reload);
  fileInput.addEventListener("change", () => { startUploads([...fileInput.files].map((f) => ({ file: f, rel: f.name }))); fileInput.value = ""; });
  dirInput.addEventListener("change", () => { startUploads([...dirInput.files].map((f) => ({ file: f, rel: f.webkitRelativePath || f.name }))); dirInput.value = ""; });
  visBtn.addEventListener("click", () => toggleVisibility(ns));
  const zone = document.body;
  const over = (ev) => { ev.preventDefault(); view.classList.add("drop"); };
  const leave = () => view.classList.remove("drop");
  const drop = async (ev) => { ev.preventDefault(); leave(); startUploads(await filesFromDrop(ev.dataTransfer)); };
  zone.addEventListener("dragover", over); zone.addEventListener("dragleave", leave); zone.addEventListener("drop", drop);
  loadMore();
  return () => {
    obs.disconnect(); document.removeEventListener("keydown", onKey);
    zone.removeEventListener("dragover", over); zone.removeEventListener("dragleave", leave); zone.removeEventListener("drop", drop);
  };
}

async function toggleVisibility(ns) {
  let cur;
  try { cur = (await api("GET", "/api/ns")).namespaces.find((n) => n.name === ns); } catch (e) { toast(e.message, true); return; }
  const next = cur && cur.visibility === "public" ? "private" : "public";
  const ok = await ask("Make " + ns + " " + next + "?", next === "public" ? "Anyone will be able to read every file in it without credentials." : "Only its owner and granted keys will read it.", null, "Make " + next);
  if (!ok) return;
  try { await api("PUT", "/api/ns/" + encodeURIComponent(ns) + "?visibility=" + next); toast(ns + " is now " + next); }
  catch (e) { toast(e.message, true); }
}

async function renameEntry(ns, p, reload) {
  const to = await ask("Rename or move", "New path in " + ns, p);
  if (!to || to === p) return;
  try {
    await api("POST", "/api/fs/" + encodeURIComponent(ns) + "/" + encPath(p) + "?rename=" + encodeURIComponent("/" + to.replace(/^\/+/, "")));
    toast("Renamed to " + to); closePanel(); reload();
  } catch (e) { toast(e.message, true); }
}

async function deleteEntry(ns, p, dir, reload) {
  const ok = await ask("Delete " + p + "?", dir ? "The folder and everything in it will be deleted." : "The file will be deleted.", null, "Delete");
  if (!ok) return;
  try {
    await api("DELETE", "/api/fs/" + encodeURIComponent(ns) + "/" + encPath(p) + (dir ? "?recursive" : ""));
    toast("Deleted " + p); closePanel(); reload();
  } catch (e) { toast(e.message, true); }
}

// ---- Details and previews -------------------------------------------------

let panel = null;
function closePanel() { if (panel) { panel.remove(); panel = null; } }

function kindOf(ct, name) {
  const ext = (name.split(".").pop() || "").toLowerCase();
  const t = ct || "";
  if (t.startsWith("image/") && t !== "image/svg+xml" || ["png", "jpg", "jpeg", "gif", "webp", "avif", "bmp"].includes(ext)) return "image";
  if (t.startsWith("video/") || ["mp4", "webm", "ogv", "mov"].includes(ext)) return "video";
  if (t.startsWith("audio/") || ["mp3", "ogg", "wav", "flac", "m4a", "opus"].includes(ext)) return "audio";
  if (t === "application/pdf" || ext === "pdf") return "pdf";
  if (t.includes("json") || ext === "json") return "json";
  if (t.startsWith("text/") || ["txt", "md", "csv", "log", "go", "js", "py", "yaml", "yml", "toml", "xml", "html", "css", "sh"].includes(ext)) return "text";
  return "";
}

async function showDetails(ns, p, reload) {
  closePanel();
  const url = "/api/fs/" + encodeURIComponent(ns) + "/" + encPath(p);
  const close = h("button", { type: "button", "aria-label": "Close details" }, "Close");
  panel = h("aside", { class: "panel", id: "details", "aria-label": "Details of " + p, tabindex: "-1" },
    h("div", { class: "toolbar" }, h("h2", { class: "grow" }, p.split("/").pop()), close));
  close.addEventListener("click", closePanel);
  panel.addEventListener("keydown", (ev) => { if (ev.key === "Escape") closePanel(); });
  document.body.append(panel);
  panel.focus();
  let st;
  try { st = await api("GET", url + "?stat"); } catch (e) { panel.append(h("p", { class: "error" }, e.message)); return; }
  const dl = h("dl", {}, h("dt", {}, "Path"), h("dd", {}, ns + "/" + p), h("dt", {}, "Size"), h("dd", {}, fmtSize(st.size) + " (" + st.size.toLocaleString() + " bytes)"),
    h("dt", {}, "Type"), h("dd", {}, st.content_type || "—"), h("dt", {}, "ETag"), h("dd", {}, st.etag || "—"),
    h("dt", {}, "Modified"), h("dd", {}, fmtTime(st.mtime)));
  for (const [k, v] of Object.entries(st.meta || {})) dl.append(h("dt", {}, k), h("dd", {}, v));
  const dlBtn = h("a", { class: "button", href: url + "?download", download: "", id: "download" }, "Download");
  const ren = h("button", { type: "button" }, "Rename");
  const del = h("button", { type: "button", class: "danger" }, "Delete");
  const shr = h("button", { type: "button", id: "share" }, "Share link");
  ren.addEventListener("click", () => renameEntry(ns, p, reload));
  del.addEventListener("click", () => deleteEntry(ns, p, false, reload));
  shr.addEventListener("click", () => shareDialog(ns, p));
  const prev = h("div", { class: "preview", id: "preview" });
  panel.append(h("div", { class: "toolbar" }, dlBtn, ren, shr, del), dl, prev);
  const kind = kindOf(st.content_type, p);
  if (kind === "image") prev.append(h("img", { src: url, alt: "Preview of " + p }));
  else if (kind === "video") prev.append(h("video", { src: url, controls: "", preload: "metadata", "aria-label": "Video " + p }));
  else if (kind === "audio") prev.append(h("audio", { src: url, controls: "", preload: "metadata", "aria-label": "Audio " + p }));
  else if (kind === "pdf") prev.append(h("iframe", { src: url, title: "PDF " + p }));
  else if (kind === "text" || kind === "json") {
    try {
      const r = await fetch(url, { headers: { Range: "bytes=0-262143" }, credentials: "same-origin" });
      let text = await r.text();
      if (kind === "json" && st.size <= 262144) { try { text = JSON.stringify(JSON.parse(text), null, 2); } catch {} }
      prev.append(h("pre", { tabindex: "0" }, text + (st.size > 262144 ? "\n… (first 256 KiB)" : "")));
    } catch (e) { prev.append(h("p", { class: "error" }, e.message)); }
  } else prev.append(h("p", { class: "muted" }, "No preview for this type."));
}

async function shareDialog(ns, p) {
  const sel = h("select", { id: "share-ttl", "aria-label": "Link expires after" },
    h("option", { value: "3600" }, "1 hour"), h("option", { value: "86400", selected: "" }, "1 day"), h("option", { value: "604800" }, "7 days"));
  const go = h("button", { type: "button", class: "primary", id: "share-create" }, "Create link");
  const out = h("div", { id: "share-out" });
  const box = h("section", { "aria-label": "Share link" }, h("h2", {}, "Share link"), h("p", { class: "muted" }, "Anyone with the link can read this file until it expires."), h("div", { class: "toolbar" }, sel, go), out);
  document.getElementById("preview").before(box);
  go.addEventListener("click", async () => {
    try {
      const r = await api("POST", "/api/share/" + encodeURIComponent(ns) + "/" + encPath(p), { expires_in: Number(sel.value) });
      const input = h("input", { id: "share-url", readonly: "", value: r.url, "aria-label": "Share URL", class: "grow" });
      const copy = h("button", { type: "button", id: "share-copy" }, "Copy");
      copy.addEventListener("click", async () => {
        try { await navigator.clipboard.writeText(r.url); } catch { input.select(); document.execCommand("copy"); }
        toast("Link copied");
      });
      out.replaceChildren(h("div", { class: "toolbar" }, input, copy), h("p", { class: "muted" }, "Expires " + fmtTime(r.expires)));
    } catch (e) { toast(e.message, true); }
  });
}

export { fmtAge };
boot();

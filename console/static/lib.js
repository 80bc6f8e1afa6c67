// Shared helpers. h() builds elements from text and attributes only.
export const state = { session: null, onUnauthenticated: null };

export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === false || v === null || v === undefined) continue;
    if (k === "value") el.value = v; else el.setAttribute(k, v);
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : String(c));
  }
  return el;
}

// encPath encodes each component of a path for a URL.
export function encPath(p) { return p.split("/").map(encodeURIComponent).join("/"); }

export function fmtSize(n) {
  if (n === undefined || n === null) return "";
  const u = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
  let i = 0, v = Number(n);
  while (v >= 1024 && i < u.length - 1) { v /= 1024; i++; }
  return (i ? v.toFixed(v < 10 ? 1 : 0) : String(v)) + " " + u[i];
}

// One formatter for every date: toLocaleString builds a new one per call,
// which cost about 5 ms a row on a slow machine.
const dateFmt = new Intl.DateTimeFormat(undefined, { dateStyle: "medium", timeStyle: "short" });
export function fmtTime(s) {
  if (!s) return "";
  const d = new Date(s);
  return isNaN(d) ? "" : dateFmt.format(d);
}

export function fmtAge(s, now) {
  if (!s) return "never";
  const sec = Math.max(0, ((now ? new Date(now) : new Date()) - new Date(s)) / 1000);
  if (sec < 90) return Math.round(sec) + " s ago";
  if (sec < 5400) return Math.round(sec / 60) + " min ago";
  return Math.round(sec / 3600) + " h ago";
}

export function fmtDuration(sec) {
  if (!isFinite(sec)) return "—";
  sec = Math.round(sec);
  if (sec < 60) return sec + " s";
  if (sec < 3600) return Math.floor(sec / 60) + " min " + (sec % 60) + " s";
  return Math.floor(sec / 3600) + " h " + Math.floor((sec % 3600) / 60) + " min";
}

let toastTimer;
export function toast(msg, bad) {
  const t = document.getElementById("toast");
  t.textContent = msg;
  t.classList.toggle("bad", !!bad);
  t.classList.add("show");
  clearTimeout(toastTimer);
  toastTimer = setTimeout(() => t.classList.remove("show"), bad ? 6000 : 3000);
}

// ask shows the dialog: with a label it asks for a value (resolves to it
// or null); without, it confirms (resolves true or false).
export function ask(title, label, value, okText) {
  const d = document.getElementById("ask");
  const input = document.getElementById("ask-input");
  document.getElementById("ask-title").textContent = title;
  const confirmOnly = value === null || value === undefined;
  document.getElementById("ask-text").textContent = confirmOnly ? label : "";
  document.getElementById("ask-label").textContent = confirmOnly ? "" : label;
  input.hidden = confirmOnly;
  input.required = !confirmOnly;
  input.value = confirmOnly ? "" : value;
  document.getElementById("ask-ok").textContent = okText || "OK";
  d.returnValue = "";
  return new Promise((resolve) => {
    d.addEventListener("close", () => {
      const ok = d.returnValue === "ok";
      resolve(confirmOnly ? ok : ok ? input.value.trim() : null);
    }, { once: true });
    d.showModal();
    if (!confirmOnly) { input.focus(); input.select(); } else document.getElementById("ask-ok").focus();
  });
}

// api calls the console's API: JSON in and out, the CSRF token on every
// request that may change something.
export async function api(method, url, body) {
  const headers = {};
  if (method !== "GET" && method !== "HEAD" && state.session) headers["X-CSRF-Token"] = state.session.csrf;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const r = await fetch(url, { method, headers, body: body === undefined ? undefined : JSON.stringify(body), credentials: "same-origin" });
  if (r.status === 204) return null;
  let data = null;
  try { data = await r.json(); } catch {}
  if (!r.ok) {
    const msg = (data && data.error && (data.error.message || data.error.code)) || r.status + " " + r.statusText;
    if (r.status === 401 && url !== "/api/session" && state.onUnauthenticated) state.onUnauthenticated();
    const e = new Error(msg); e.status = r.status; e.code = data && data.error && data.error.code;
    throw e;
  }
  return data;
}

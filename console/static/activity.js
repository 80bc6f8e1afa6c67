// Activity: request rate, bytes, latency and errors per API over the last
// 15 minutes, from the server's sampled counters (the same as /metrics).
import { h, fmtSize, toast, api } from "./lib.js";

const NS = "http://www.w3.org/2000/svg";
const COLORS = ["#2b59c3", "#d1495b", "#2a9d8f", "#e9a03b", "#7b2cbf", "#6c757d"];

function chart(title, series, fmt) {
  const W = 600, H = 160, P = 4;
  const svg = document.createElementNS(NS, "svg");
  svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
  svg.setAttribute("preserveAspectRatio", "none");
  svg.setAttribute("role", "img");
  let maxV = 0, n = 0;
  for (const s of series) { n = Math.max(n, s.values.length); for (const v of s.values) maxV = Math.max(maxV, v); }
  const top = maxV > 0 ? maxV * 1.1 : 1;
  const last = [];
  series.forEach((s, i) => {
    const pts = s.values.map((v, j) => `${(P + (j * (W - 2 * P)) / Math.max(n - 1, 1)).toFixed(1)},${(H - P - (v / top) * (H - 2 * P)).toFixed(1)}`);
    const pl = document.createElementNS(NS, "polyline");
    pl.setAttribute("points", pts.join(" "));
    pl.setAttribute("fill", "none");
    pl.setAttribute("stroke", COLORS[i % COLORS.length]);
    pl.setAttribute("stroke-width", "2");
    pl.setAttribute("vector-effect", "non-scaling-stroke");
    svg.append(pl);
    last.push(s.name + " " + fmt(s.values.length ? s.values[s.values.length - 1] : 0));
  });
  svg.setAttribute("aria-label", title + ", latest: " + (last.join(", ") || "no data"));
  const legend = h("div", { class: "legend" }, ...series.map((s, i) => {
    const sw = h("i"); sw.style.background = COLORS[i % COLORS.length];
    return h("span", {}, sw, s.name + ": " + fmt(s.values.length ? s.values[s.values.length - 1] : 0));
  }), h("span", { class: "muted" }, "peak " + fmt(maxV)));
  return h("section", { class: "card chart", "aria-label": title }, h("h2", {}, title), svg, legend);
}

export function renderActivity(view) {
  document.title = "Activity · Cairn";
  const charts = h("div", { class: "charts", id: "charts" });
  const note = h("p", { class: "muted", id: "activity-note" });
  view.replaceChildren(h("h1", {}, "Activity"), note, charts);
  let every = 2;
  async function load() {
    let a;
    try { a = await api("GET", "/api/activity"); } catch (e) { toast(e.message, true); return; }
    every = a.every_s;
    const get = (api, f) => a.samples.map((s) => (s.roles[api] ? f(s.roles[api]) : 0));
    const num = (v) => (v >= 100 ? v.toFixed(0) : v.toFixed(v >= 10 ? 1 : 2));
    const errOps = new Set();
    for (const s of a.samples) for (const api of a.apis) for (const op of Object.keys((s.roles[api] || {}).errors_op || {})) errOps.add(api + " " + op);
    note.textContent = `Last ${Math.round((a.samples.length * every) / 60)} min, one point per ${every} s, refreshed every ${every} s. APIs: ${a.apis.join(", ")}.`;
    charts.dataset.samples = String(a.samples.length);
    charts.replaceChildren(
      chart("Requests per second", a.apis.map((x) => ({ name: x, values: get(x, (r) => r.rps) })), (v) => num(v) + "/s"),
      chart("Bytes per second", a.apis.flatMap((x) => [{ name: x + " in", values: get(x, (r) => r.in_bps) }, { name: x + " out", values: get(x, (r) => r.out_bps) }]), (v) => fmtSize(Math.round(v)) + "/s"),
      chart("Latency p50 / p99", a.apis.flatMap((x) => [{ name: x + " p50", values: get(x, (r) => r.p50_ms) }, { name: x + " p99", values: get(x, (r) => r.p99_ms) }]), (v) => num(v) + " ms"),
      chart("Errors per second", [...a.apis.map((x) => ({ name: x, values: get(x, (r) => r.eps) })),
        ...[...errOps].slice(0, 4).map((k) => { const [api, op] = k.split(" "); return { name: k, values: get(api, (r) => (r.errors_op || {})[op] || 0) }; })], (v) => num(v) + "/s"));
  }
  load();
  const t = setInterval(load, 2000);
  return () => clearInterval(t);
}

// Cluster (root): data servers, volumes and their replica health, repairs.
import { h, fmtSize, fmtAge, toast, api } from "./lib.js";

const bar = (done, total) => {
  const s = h("span");
  s.style.width = (total ? Math.min(100, (100 * done) / total) : 0).toFixed(1) + "%";
  return h("div", { class: "bar", role: "img", "aria-label": Math.round(total ? (100 * done) / total : 0) + "%" }, s);
};

export function renderCluster(view) {
  document.title = "Cluster · Cairn";
  const servers = h("tbody", { id: "servers" }), volumes = h("tbody", { id: "volumes" }), repairs = h("tbody", { id: "repairs" });
  const summary = h("p", { id: "cluster-summary", "aria-live": "polite" });
  view.replaceChildren(h("h1", {}, "Cluster"), summary,
    h("h2", {}, "Data servers"),
    h("div", { class: "scroll" }, h("table", { "aria-label": "Data servers" }, h("thead", {}, h("tr", {}, h("th", {}, "Server"), h("th", {}, "State"), h("th", {}, "Last heartbeat"), h("th", { class: "hide-sm" }, "Use"), h("th", { class: "num" }, "Volumes"), h("th", { class: "hide-sm" }, "Labels"))), servers)),
    h("h2", {}, "Repairs and drains"),
    h("div", { class: "scroll" }, h("table", { "aria-label": "Repairs" }, h("thead", {}, h("tr", {}, h("th", {}, "Volume"), h("th", {}, "Kind"), h("th", {}, "From → to"), h("th", {}, "Progress"))), repairs)),
    h("h2", {}, "Volumes"),
    h("div", { class: "scroll" }, h("table", { "aria-label": "Volumes" }, h("thead", {}, h("tr", {}, h("th", {}, "Volume"), h("th", {}, "Health"), h("th", {}, "Replicas"), h("th", { class: "hide-sm" }, "Servers"), h("th", { class: "num" }, "Size"))), volumes)));
  async function load() {
    let st;
    try { st = await api("GET", "/api/cluster"); } catch (e) { toast(e.message, true); return; }
    const alive = st.servers.filter((s) => s.alive).length;
    const bad = st.volumes.filter((v) => v.health !== "ok").length;
    summary.textContent = `${alive} of ${st.servers.length} data servers alive · ${st.volumes.length} volumes, ${bad} not fully replicated · ${st.repairs.length} repairs running, ${st.repairs_done} done · repair rate ${fmtSize(st.repair_bytes_per_sec)}/s per copy`;
    servers.replaceChildren(...st.servers.map((s) => {
      const state = !s.alive ? ["dead", "bad"] : s.draining ? ["draining", "warn"] : s.suspect ? ["suspect", "warn"] : ["alive", "ok"];
      return h("tr", { class: "row", "data-addr": s.addr, "data-state": state[0] },
        h("td", {}, s.addr, h("br"), h("span", { class: "muted" }, s.id)),
        h("td", {}, h("span", { class: "badge " + state[1] }, state[0])),
        h("td", {}, fmtAge(s.last_heartbeat, st.now)),
        h("td", { class: "hide-sm" }, bar(s.capacity - s.free, s.capacity), `${fmtSize(s.used)} in volumes · ${fmtSize(s.free)} free of ${fmtSize(s.capacity)}`),
        h("td", { class: "num" }, s.volumes),
        h("td", { class: "hide-sm" }, Object.entries(s.labels || {}).map(([k, v]) => k + "=" + v).join(" ")));
    }));
    repairs.replaceChildren(...(st.repairs.length ? st.repairs.map((r) => h("tr", {},
      h("td", {}, r.volume), h("td", {}, r.kind), h("td", {}, (r.from || "—") + " → " + r.to),
      h("td", {}, bar(r.bytes_done, r.bytes_total), `${fmtSize(r.bytes_done)} of ${fmtSize(r.bytes_total)}`))) : [h("tr", {}, h("td", { colspan: 4, class: "muted" }, "None running."))]));
    volumes.replaceChildren(...st.volumes.map((v) => h("tr", { "data-volume": v.id, "data-health": v.health },
      h("td", {}, v.id, v.read_only ? h("span", { class: "muted" }, " (read-only)") : ""),
      h("td", {}, h("span", { class: "badge " + (v.health === "ok" ? "ok" : v.health === "lost" ? "bad" : "warn") }, v.health)),
      h("td", {}, `${v.live} of ${v.replication}`), h("td", { class: "hide-sm" }, v.servers.join(", ")), h("td", { class: "num" }, fmtSize(v.size)))));
  }
  load();
  const t = setInterval(load, 3000);
  return () => clearInterval(t);
}

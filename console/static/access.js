// Access (root): users, keys and their grants.
import { h, fmtTime, toast, ask, api } from "./lib.js";

export function renderAccess(view) {
  document.title = "Access · Cairn";
  const users = h("tbody"), keys = h("tbody");
  const userForm = h("form", { class: "toolbar", id: "user-form", "aria-label": "Create user" },
    h("label", { for: "user-name" }, "New user"), h("input", { id: "user-name", required: "", autocomplete: "off" }),
    h("button", { type: "submit", class: "primary" }, "Create user"));
  const keyUser = h("select", { id: "key-user", "aria-label": "User of the new key", required: "" });
  const keyGrants = h("input", { id: "key-grants", placeholder: "photos=read, logs=write", "aria-label": "Grants: namespace=read or write, comma separated" });
  const keyForm = h("form", { class: "toolbar", id: "key-form", "aria-label": "Create key" },
    h("label", { for: "key-user" }, "New key for"), keyUser, keyGrants, h("button", { type: "submit", class: "primary" }, "Create key"));
  const secretBox = h("div", { id: "secret-box", "aria-live": "polite" });
  view.replaceChildren(h("h1", {}, "Access"),
    h("h2", {}, "Users"), userForm,
    h("div", { class: "scroll" }, h("table", { "aria-label": "Users" }, h("thead", {}, h("tr", {}, h("th", {}, "User"), h("th", {}, "Created"), h("th", { class: "actions" }, ""))), users)),
    h("h2", {}, "Keys"), keyForm, secretBox,
    h("div", { class: "scroll" }, h("table", { "aria-label": "Keys" }, h("thead", {}, h("tr", {}, h("th", {}, "Access key"), h("th", {}, "User"), h("th", {}, "Grants"), h("th", { class: "hide-sm" }, "Created"), h("th", { class: "actions" }, ""))), keys)));

  async function load() {
    let u, k;
    try { [u, k] = await Promise.all([api("GET", "/api/access/users"), api("GET", "/api/access/keys")]); } catch (e) { toast(e.message, true); return; }
    users.replaceChildren(...u.users.map((x) => {
      const rm = h("button", { type: "button", class: "danger", "aria-label": "Remove user " + x.name }, "Remove");
      rm.addEventListener("click", async () => {
        if (!(await ask("Remove user " + x.name + "?", "The user and all their keys are removed.", null, "Remove"))) return;
        try { await api("DELETE", "/api/access/users/" + encodeURIComponent(x.name)); load(); } catch (e) { toast(e.message, true); }
      });
      return h("tr", { class: "row" }, h("td", {}, x.name), h("td", {}, fmtTime(x.created)), h("td", { class: "actions" }, rm));
    }));
    keyUser.replaceChildren(...u.users.map((x) => h("option", { value: x.name }, x.name)));
    keys.replaceChildren(...k.keys.map((x) => {
      const grants = Object.entries(x.grants).map(([b, a]) => b + "=" + a).join(", ") || (x.root ? "everything (root)" : "own namespaces only");
      const grant = h("button", { type: "button", "aria-label": "Change grants of " + x.access_key }, "Grant");
      const rm = h("button", { type: "button", class: "danger", "aria-label": "Revoke key " + x.access_key }, "Revoke");
      grant.addEventListener("click", async () => {
        const g = await ask("Grant " + x.access_key, "namespace=read, write or none", "");
        if (!g) return;
        const [ns, access] = g.split("=").map((s) => s.trim());
        try { await api("POST", "/api/access/grants/" + encodeURIComponent(x.access_key), { ns, access }); load(); } catch (e) { toast(e.message, true); }
      });
      rm.addEventListener("click", async () => {
        if (!(await ask("Revoke key " + x.access_key + "?", "Clients using it stop working (within a minute on every gateway).", null, "Revoke"))) return;
        try { await api("DELETE", "/api/access/keys/" + encodeURIComponent(x.access_key)); load(); } catch (e) { toast(e.message, true); }
      });
      return h("tr", { class: "row", "data-key": x.access_key }, h("td", { class: "mono" }, x.access_key), h("td", {}, x.user), h("td", {}, grants),
        h("td", { class: "hide-sm" }, fmtTime(x.created)), h("td", { class: "actions" }, x.root ? "" : grant, " ", x.root ? "" : rm));
    }));
  }
  userForm.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    try { await api("POST", "/api/access/users", { name: userForm.querySelector("#user-name").value.trim() }); userForm.reset(); load(); } catch (e) { toast(e.message, true); }
  });
  keyForm.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const grants = {};
    for (const g of keyGrants.value.split(",").map((s) => s.trim()).filter(Boolean)) {
      const [ns, a] = g.split("=").map((s) => s.trim());
      grants[ns] = a || "read";
    }
    try {
      const k = await api("POST", "/api/access/keys", { user: keyUser.value, grants });
      secretBox.replaceChildren(h("p", {}, "Copy the secret now: it is not shown again."),
        h("div", { class: "secret", id: "new-secret" }, "Access key: ", h("b", { id: "new-key" }, k.access_key), h("br"), "Secret: ", h("b", { id: "new-secret-value" }, k.secret)));
      keyGrants.value = "";
      load();
    } catch (e) { toast(e.message, true); }
  });
  load();
  return null;
}

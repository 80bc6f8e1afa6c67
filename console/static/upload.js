// Uploads: small files in one PUT, large ones in parts over the console's
// upload protocol (/api/uploads, S3 multipart as the user), 3 parts in
// flight, each retried with backoff after a dropped connection. The
// upload id is kept in localStorage, so dropping the same file again
// after a reload resumes with the parts not yet stored.
import { h, fmtSize, fmtDuration, toast, encPath, state } from "./lib.js";

const PARALLEL_PARTS = 3, PARALLEL_FILES = 2;
const list = document.getElementById("upload-list");
const section = document.getElementById("uploads");
const queue = [];
let running = 0;

// filesFromDrop walks dropped files and folders.
export async function filesFromDrop(dt) {
  const out = [];
  const walk = async (entry, prefix) => {
    if (entry.isFile) {
      const f = await new Promise((res, rej) => entry.file(res, rej));
      out.push({ file: f, rel: prefix + f.name });
    } else if (entry.isDirectory) {
      const reader = entry.createReader();
      for (;;) {
        const batch = await new Promise((res, rej) => reader.readEntries(res, rej));
        if (!batch.length) break;
        for (const e of batch) await walk(e, prefix + entry.name + "/");
      }
    }
  };
  const entries = [...dt.items].map((i) => i.webkitGetAsEntry && i.webkitGetAsEntry()).filter(Boolean);
  if (!entries.length) return [...dt.files].map((f) => ({ file: f, rel: f.name }));
  for (const e of entries) await walk(e, "");
  return out;
}

export function uploadFiles(ns, base, files, done) {
  if (!files.length) return;
  section.hidden = false;
  for (const { file, rel } of files) {
    const u = new Upload(ns, base + rel, file, done);
    queue.push(u);
  }
  pump();
}

function pump() {
  while (running < PARALLEL_FILES && queue.length) {
    const u = queue.shift();
    running++;
    u.run().finally(() => { running--; pump(); });
  }
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const fsURL = (ns, p) => "/api/fs/" + encodeURIComponent(ns) + "/" + encPath(p);
const upURL = (ns, p) => "/api/uploads/" + encodeURIComponent(ns) + "/" + encPath(p);

class Upload {
  constructor(ns, path, file, done) {
    Object.assign(this, { ns, path, file, done, sent: 0, inflight: new Map(), xhrs: new Set(), cancelled: false });
    this.bar = h("progress", { max: String(Math.max(file.size, 1)), value: "0", "aria-label": "Upload progress of " + path });
    this.stat = h("span", { class: "ustat" }, "waiting");
    this.cancelBtn = h("button", { type: "button", "aria-label": "Cancel upload of " + path }, "Cancel");
    this.cancelBtn.addEventListener("click", () => this.cancel());
    this.li = h("li", { "data-path": path, "data-state": "waiting" }, h("span", { class: "uname" }, path), this.cancelBtn, this.bar, this.stat);
    list.prepend(this.li);
    this.samples = [];
  }
  setState(s, text) { this.li.dataset.state = s; this.stat.textContent = text; }
  loaded() { let n = this.sent; for (const v of this.inflight.values()) n += v; return n; }
  tick() {
    const now = performance.now(), n = this.loaded();
    this.bar.value = n;
    this.samples.push([now, n]);
    while (this.samples.length > 2 && now - this.samples[0][0] > 3000) this.samples.shift();
    const [t0, n0] = this.samples[0];
    const speed = now > t0 ? ((n - n0) * 1000) / (now - t0) : 0;
    if (this.li.dataset.state === "uploading") {
      this.stat.textContent = `${fmtSize(n)} of ${fmtSize(this.file.size)} · ${fmtSize(speed)}/s · ${speed > 0 ? fmtDuration((this.file.size - n) / speed) : "—"} left`;
    }
  }
  cancel() {
    this.cancelled = true;
    for (const x of this.xhrs) x.abort();
    if (this.id) {
      fetch(upURL(this.ns, this.path) + "?id=" + encodeURIComponent(this.id), { method: "DELETE", headers: { "X-CSRF-Token": state.session.csrf } });
      localStorage.removeItem(this.key());
    }
    this.setState("cancelled", "cancelled");
    this.cancelBtn.disabled = true;
  }
  key() { return "cairn-upload:" + this.ns + "/" + this.path + ":" + this.file.size + ":" + this.file.lastModified; }

  // send PUTs a body with progress; resolves with the response text.
  send(method, url, body, slot) {
    return new Promise((resolve, reject) => {
      const x = new XMLHttpRequest();
      this.xhrs.add(x);
      x.open(method, url);
      x.setRequestHeader("X-CSRF-Token", state.session.csrf);
      if (this.file.type && slot === "whole") x.setRequestHeader("Content-Type", this.file.type);
      x.upload.onprogress = (e) => { this.inflight.set(slot, e.loaded); this.tick(); };
      const fail = (msg, retry) => { this.xhrs.delete(x); this.inflight.delete(slot); const e = new Error(msg); e.retry = retry; reject(e); };
      x.onload = () => {
        this.xhrs.delete(x); this.inflight.delete(slot);
        if (x.status >= 200 && x.status < 300) { resolve(x.responseText); return; }
        let msg = x.status + "";
        try { msg = JSON.parse(x.responseText).error.message; } catch {}
        fail(msg, x.status >= 500 || x.status === 408 || x.status === 429);
      };
      x.onerror = () => fail("connection lost", true);
      x.onabort = () => fail("cancelled", false);
      x.send(body);
    });
  }

  // withRetry runs f until it succeeds, backing off after each dropped
  // connection; other errors and cancel end it.
  async withRetry(f) {
    for (let attempt = 0; ; attempt++) {
      if (this.cancelled) throw new Error("cancelled");
      try { return await f(); } catch (e) {
        if (!e.retry || this.cancelled) throw e;
        const wait = Math.min(500 * 2 ** attempt, 10000);
        this.retries = (this.retries || 0) + 1;
        this.setState("retrying", `${e.message}: retrying in ${fmtDuration(wait / 1000)}`);
        await sleep(wait);
        this.setState("uploading", "resuming");
      }
    }
  }

  async run() {
    if (this.cancelled) return;
    this.setState("uploading", "starting");
    this.timer = setInterval(() => this.tick(), 500);
    try {
      if (this.file.size <= 8 << 20 || !state.session.s3) {
        await this.withRetry(() => this.send("PUT", fsURL(this.ns, this.path), this.file, "whole"));
        this.sent = this.file.size;
      } else {
        await this.parted();
      }
      this.bar.value = this.file.size;
      this.setState("done", `${fmtSize(this.file.size)} uploaded` + (this.retries ? ` (resumed after ${this.retries} interruption${this.retries > 1 ? "s" : ""})` : ""));
      this.cancelBtn.disabled = true;
      this.done && this.done();
    } catch (e) {
      if (!this.cancelled) { this.setState("failed", "failed: " + e.message); toast("Upload of " + this.path + " failed: " + e.message, true); }
    } finally { clearInterval(this.timer); }
  }

  async parted() {
    const base = upURL(this.ns, this.path);
    const hdr = () => ({ "X-CSRF-Token": state.session.csrf, "Content-Type": "application/json" });
    const json = async (r) => { const d = await r.json().catch(() => null); if (!r.ok) { const e = new Error((d && d.error && d.error.message) || r.status); e.retry = r.status >= 500; throw e; } return d; };
    const call = (method, url, body) => this.withRetry(async () => {
      let r;
      try { r = await fetch(url, { method, headers: hdr(), body: body && JSON.stringify(body) }); } catch { const e = new Error("connection lost"); e.retry = true; throw e; }
      return json(r);
    });
    let partSize = 8 << 20;
    const done = new Map();
    const saved = localStorage.getItem(this.key());
    if (saved) {
      try {
        const r = await call("GET", base + "?id=" + encodeURIComponent(saved));
        this.id = saved;
        for (const p of r.parts) done.set(p.part, p);
      } catch { localStorage.removeItem(this.key()); }
    }
    if (!this.id) {
      const r = await call("POST", base + "?type=" + encodeURIComponent(this.file.type || ""));
      this.id = r.id; partSize = r.part_size;
      localStorage.setItem(this.key(), this.id);
    }
    const n = Math.ceil(this.file.size / partSize);
    const todo = [];
    for (let i = 1; i <= n; i++) {
      const size = Math.min(partSize, this.file.size - (i - 1) * partSize);
      const have = done.get(i);
      if (have && have.size === size) this.sent += size; else todo.push(i);
    }
    if (done.size) this.setState("uploading", `resuming: ${n - todo.length} of ${n} parts already stored`);
    const etags = new Map([...done].map(([k, v]) => [k, v.etag]));
    const worker = async () => {
      while (todo.length && !this.cancelled) {
        const i = todo.shift();
        const blob = this.file.slice((i - 1) * partSize, Math.min(i * partSize, this.file.size));
        const text = await this.withRetry(() => this.send("PUT", `${base}?id=${encodeURIComponent(this.id)}&part=${i}`, blob, i));
        etags.set(i, JSON.parse(text).etag);
        this.sent += blob.size;
        this.tick();
      }
    };
    await Promise.all(Array.from({ length: PARALLEL_PARTS }, worker));
    if (this.cancelled) throw new Error("cancelled");
    const parts = [...etags].sort((a, b) => a[0] - b[0]).map(([part, etag]) => ({ part, etag }));
    await call("POST", base + "?id=" + encodeURIComponent(this.id), { parts });
    localStorage.removeItem(this.key());
  }
}

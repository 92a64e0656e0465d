// ckptlog viewer: one page over the JSON API of `ckptlog serve` (eventlog/serve.py).
// Every id and value is put on the page as text (textContent / text nodes), never as HTML.
"use strict";

const $ = (id) => document.getElementById(id);

// Script errors are kept where the browser tests look for them.
const noteError = (message) => { (window.__ckptlogErrors = window.__ckptlogErrors || []).push(String(message)); };
window.addEventListener("error", (e) => noteError(e.message));
window.addEventListener("unhandledrejection", (e) => noteError(e.reason && e.reason.message ? e.reason.message : e.reason));

const present = (kids) => kids.flat().filter((k) => k !== null && k !== undefined && k !== false);
// Children are Nodes or strings (strings become text nodes, never HTML).
function put(parent, ...kids) { parent.append(...present(kids)); }
function fill(parent, ...kids) { parent.replaceChildren(...present(kids)); }

function el(tag, props, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(props || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "class") e.className = v;
    else if (k === "text") e.textContent = v;
    else if (k === "style") e.style.cssText = v; // CSSOM: allowed by the page's CSP, unlike a style attribute
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v === true ? "" : String(v));
  }
  for (const kid of kids.flat()) {
    if (kid === null || kid === undefined || kid === false) continue;
    e.append(kid instanceof Node ? kid : String(kid));
  }
  return e;
}

async function api(path, params) {
  const query = new URLSearchParams(params || {});
  const resp = await fetch(`/api/${path}?${query}`, { credentials: "same-origin" });
  let body;
  try { body = await resp.json(); } catch (e) { body = { error: resp.statusText }; }
  if (!resp.ok) throw new Error(body.error || `${resp.status} ${resp.statusText}`);
  return body;
}

function fmtTime(t) {
  if (t === null || t === undefined || !isFinite(t)) return "-";
  const d = new Date(t * 1000);
  return isNaN(d) ? String(t) : d.toISOString().replace("T", " ").replace("Z", "Z");
}

function fmtGap(s) {
  if (s === null || s === undefined || !isFinite(s)) return "-";
  const a = Math.abs(s);
  if (a < 1) return `${(s * 1e3).toFixed(1)}ms`;
  if (a < 120) return `${s.toFixed(1)}s`;
  return `${(s / 60).toFixed(1)}min`;
}

const fmtN = (n) => (n === null || n === undefined ? "-" : Number(n).toLocaleString("en-US"));

function showError(where, err) {
  fill(where, el("p", { class: "error" }, String(err.message || err)));
}

// -- state -------------------------------------------------------------------------------------

const S = {
  offset: 0, limit: 50, q: "", status: "", family: "", total: 0,
  frames: -1, sel: null, view: null,
};

// -- the invocation list -----------------------------------------------------------------------

async function loadList() {
  let data;
  try {
    data = await api("invocations", {
      q: S.q, status: S.status, family: S.family, offset: S.offset, limit: S.limit,
    });
  } catch (err) { showError($("inv-list"), err); return; }
  S.total = data.total;
  $("inv-count").textContent = `${fmtN(data.total)} streams`;
  const pages = Math.max(1, Math.ceil(data.total / S.limit));
  $("inv-page").textContent = `page ${Math.floor(S.offset / S.limit) + 1} of ${pages}`;
  $("inv-prev").disabled = S.offset === 0;
  $("inv-next").disabled = S.offset + S.limit >= data.total;
  fill($("inv-list"), ...data.rows.map(invRow));
}

function familyLabel(r) {
  if (r.family === "langgraph") return `LangGraph thread ${r.thread_id} · ns ${r.namespace === "" ? "(root)" : r.namespace}`;
  if (r.family === "techrevati") return `techrevati thread ${r.thread_id}`;
  if (r.family === "apflow") return `apflow task ${r.task_id}`;
  if (r.records) return r.kind ? `${r.kind}` : "events";
  return r.noun || r.family;
}

function progressBar(done, errors, total) {
  const bar = el("div", { class: "bar", title: `${fmtN(done)} of ${fmtN(total)} done, ${fmtN(errors)} failed` });
  const ok = total ? (100 * (done - errors)) / total : 0;
  const bad = total ? (100 * errors) / total : 0;
  put(bar, el("span", { class: "ok", style: `width:${ok}%` }), el("span", { class: "bad", style: `width:${bad}%` }));
  return bar;
}

function invRow(r) {
  const li = el("li", {
    class: "inv" + (S.sel && S.sel.id === r.id ? " selected" : ""),
    tabindex: "0",
    "data-id": r.id,
    onclick: () => select(r),
    onkeydown: (e) => { if (e.key === "Enter") select(r); },
  });
  put(li, 
    el("div", { class: "inv-id mono" }, r.id),
    el("div", { class: "inv-meta" },
      r.status !== "-" ? el("span", { class: `badge ${r.status}` }, r.status) : null,
      el("span", { class: "dim" }, familyLabel(r)),
      r.correlation_id ? el("span", { class: "dim mono" }, `corr ${r.correlation_id}`) : null),
    el("div", { class: "inv-meta dim" },
      `${fmtN(r.saves)} ${r.records && r.kind !== "event" && r.kind ? "saves" : "frames"} · first ${fmtTime(r.first_saved_at)} · last ${fmtTime(r.last_saved_at)}`),
    r.instances ? el("div", { class: "inv-meta" }, progressBar(r.completed, r.errors, r.instances),
      el("span", { class: "dim" }, `${fmtN(r.completed)}/${fmtN(r.instances)} done` + (r.errors ? `, ${fmtN(r.errors)} failed` : ""))) : null,
  );
  return li;
}

function select(r) {
  S.sel = r;
  for (const li of document.querySelectorAll("#inv-list li")) li.classList.toggle("selected", li.dataset.id === r.id);
  const detail = $("detail");
  fill(detail);
  detail.removeAttribute("data-timeline");
  if (r.family === "langgraph") S.view = new LangGraphView(r, detail);
  else if (r.family === "techrevati") S.view = new HistoryView(r, detail, "techrevati");
  else if (r.family === "apflow") S.view = new HistoryView(r, detail, "apflow");
  else if (r.records) S.view = new InvocationView(r, detail);
  else S.view = new StepsView(r, detail);
}

// -- a value as a collapsible tree -------------------------------------------------------------

// node: what serve.tree() returns. fetch(path, offset) -> Promise<node> or null (no lazy load).
function renderTree(node, fetch, path, open) {
  path = path || [];
  if (node.t === "dict" || node.t === "list") {
    const det = el("details", { class: "tree" });
    if (open) det.open = true;
    const label = node.t === "dict" ? `{${fmtN(node.n)} keys}` : `[${fmtN(node.n)} items]`;
    put(det, el("summary", { class: "dim" }, label));
    const body = el("div", { class: "tree-body" });
    put(det, body);
    const addItems = (n, offset) => {
      n.items.forEach((item, i) => {
        const key = n.t === "dict" ? item[0] : offset + i;
        const child = n.t === "dict" ? item[1] : item;
        const row = el("div", { class: "tree-row" },
          el("span", { class: "key mono" }, n.t === "dict" ? JSON.stringify(key) : String(key)), ": ",
          renderTree(child, fetch, path.concat([key]), false));
        put(body, row);
      });
      const shown = offset + n.items.length;
      if (shown < n.n) {
        if (fetch) {
          const more = el("button", { type: "button", class: "link" }, `show more (${fmtN(n.n - shown)} left)`);
          more.addEventListener("click", async () => {
            more.disabled = true;
            try { const next = await fetch(path, shown); more.remove(); addItems(next, shown); }
            catch (err) { more.textContent = String(err.message); }
          });
          put(body, more);
        } else put(body, el("span", { class: "dim" }, `… ${fmtN(n.n - shown)} more`));
      }
    };
    addItems(node, node.offset || 0);
    return det;
  }
  if (node.t === "more") {
    const label = node.kind === "dict" ? `{${fmtN(node.n)} keys}` : `[${fmtN(node.n)} items]`;
    if (!fetch) return el("span", { class: "dim" }, label);
    const btn = el("button", { type: "button", class: "link" }, label);
    btn.addEventListener("click", async () => {
      try { const got = await fetch(path, 0); btn.replaceWith(renderTree(got, fetch, path, true)); }
      catch (err) { btn.textContent = String(err.message); }
    });
    return btn;
  }
  if (node.t === "str") {
    const cut = node.n > node.v.length ? ` (${fmtN(node.n)} chars, cut)` : "";
    return el("span", { class: "str mono" }, JSON.stringify(node.v) + cut);
  }
  if (node.t === "bytes") return el("span", { class: "mono" }, `bytes(${fmtN(node.n)}) ${node.v}`);
  if (node.t === "num") return el("span", { class: "num mono" }, node.v);
  return el("span", { class: "lit mono" }, JSON.stringify(node.v));
}

// -- canvas helpers ----------------------------------------------------------------------------

function canvas(cls, height) {
  const c = el("canvas", { class: cls, height: String(height) });
  c.style.height = `${height}px`;
  return c;
}

function sizeCanvas(c) {
  const ratio = window.devicePixelRatio || 1;
  const w = c.clientWidth || 600, h = c.clientHeight || 100;
  c.width = Math.round(w * ratio); c.height = Math.round(h * ratio);
  const ctx = c.getContext("2d");
  ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
  ctx.clearRect(0, 0, w, h);
  return [ctx, w, h];
}

const COLORS = { ok: "#2e9d4f", bad: "#d7263d", pending: "#c9ced6", flight: "#f0a202", line: "#3358c4", pause: "#f07f00" };

// -- one checkpoint invocation -----------------------------------------------------------------

class InvocationView {
  constructor(row, root) {
    this.id = row.id; this.row = row; this.root = root;
    this.seq = 0; this.last = row.saves; this.follow = true;
    this.range = null; // [lo, hi] zoom of the timeline, null: everything
    this.tl = null; this.fan = 0; this.grid = null; this.gridRange = [0, 0];
    this.build();
    this.refresh(true);
  }

  build() {
    const r = this.row;
    this.seqRange = el("input", { type: "range", min: "0", max: String(this.last), value: String(this.last), id: "seq-range", "aria-label": "seq" });
    this.seqInput = el("input", { type: "number", min: "0", max: String(this.last), value: String(this.last), id: "seq-input", class: "seq-input" });
    this.followBox = el("input", { type: "checkbox", id: "follow", checked: true });
    this.seqRange.addEventListener("input", () => { this.seqInput.value = this.seqRange.value; });
    this.seqRange.addEventListener("change", () => this.goto(Number(this.seqRange.value)));
    this.seqInput.addEventListener("change", () => this.goto(Number(this.seqInput.value)));
    this.followBox.addEventListener("change", () => { this.follow = this.followBox.checked; if (this.follow) this.goto(this.last); });
    this.savesCanvas = canvas("chart", 150);
    this.fansCanvas = canvas("chart", 110);
    for (const c of [this.savesCanvas, this.fansCanvas]) this.chartMouse(c);
    this.tlStatus = el("div", { class: "dim", id: "tl-status" });
    this.pauses = el("div", { class: "pauses" });
    this.fanLegend = el("div", { class: "legend" });
    this.recBox = el("div", { id: "record" });
    this.failBox = el("div", { id: "failures" });
    this.diffA = el("input", { type: "number", min: "0", value: "0", id: "diff-a", class: "seq-input" });
    this.diffB = el("input", { type: "number", min: "0", value: String(this.last), id: "diff-b", class: "seq-input" });
    this.diffOut = el("pre", { id: "diff-out", class: "diff" });
    this.framesBox = el("div", { id: "frames" });
    put(this.root, 
      el("h2", { class: "mono", id: "inv-title" }, r.id),
      el("div", { class: "dim" }, `${familyLabel(r)} · status ${r.status}` + (r.correlation_id ? ` · correlation ${r.correlation_id}` : "")),
      el("section", { class: "card" },
        el("h3", {}, "Timeline"),
        el("div", { class: "dim small" }, "x: seq; top: time since the first save (a jump is a pause, red ticks are failures); bottom: each fan-out's completed / failed / pending instances by their own save times. Click to pick a seq, drag to zoom."),
        this.savesCanvas, this.fansCanvas, this.fanLegend,
        el("div", { class: "scrub" },
          el("label", { for: "seq-range" }, "seq"), this.seqRange, this.seqInput,
          el("label", {}, this.followBox, " follow latest"),
          el("button", { type: "button", id: "zoom-reset", onclick: () => { this.range = null; this.loadTimeline(); } }, "reset zoom")),
        this.tlStatus, this.pauses),
      el("section", { class: "card" }, el("h3", {}, "Record"), this.recBox),
      el("section", { class: "card" }, el("h3", {}, "Failed instances, in the order they failed"), this.failBox),
      el("section", { class: "card" },
        el("h3", {}, "Diff"),
        el("div", { class: "scrub" }, "from seq ", this.diffA, " to seq ", this.diffB,
          el("button", { type: "button", id: "diff-go", onclick: () => this.diff() }, "diff"),
          el("button", { type: "button", onclick: () => { this.diffA.value = Math.max(0, this.seq - 1); this.diffB.value = this.seq; this.diff(); } }, "what this seq changed")),
        this.diffOut),
      el("section", { class: "card" },
        el("h3", {}, "Frames"),
        el("button", { type: "button", onclick: () => this.loadFrames(0) }, "list stored frames"), this.framesBox),
    );
    window.addEventListener("resize", () => { this.draw(); this.drawGrid(); });
  }

  // new frames in the log (or first open)
  async refresh(first) {
    await this.loadTimeline();
    if (first || this.follow) {
      const target = this.follow ? this.last : this.seq;
      if (first || target !== this.seq) await this.goto(target, true);
    }
  }

  // One timeline request at a time; a refresh asked for meanwhile runs after it.
  async loadTimeline() {
    if (this.tlBusy) { this.tlAgain = true; return; }
    this.tlBusy = true;
    let more = false;
    try { more = await this.fetchTimeline(); } finally { this.tlBusy = false; }
    if (more || this.tlAgain) {
      this.tlAgain = false;
      setTimeout(() => { if (S.view === this) this.loadTimeline(); }, 30);
    }
  }

  // false once the timeline is fully indexed (true: ask again for the rest)
  async fetchTimeline() {
    const params = { id: this.id, bins: 400 };
    if (this.range) { params.lo = this.range[0]; params.hi = this.range[1]; }
    let tl;
    try { tl = await api("timeline", params); } catch (err) { this.tlStatus.textContent = String(err.message); return false; }
    if (S.view !== this) return false;
    this.tl = tl;
    this.last = tl.last_seq;
    for (const input of [this.seqRange, this.seqInput, this.diffA, this.diffB]) input.max = String(this.last);
    this.seqRange.max = String(this.last);
    this.draw();
    const complete = tl.indexed >= tl.last_seq;
    this.tlStatus.textContent = complete
      ? `${fmtN(tl.indexed)} frames · showing seqs ${fmtN(tl.lo)}..${fmtN(tl.hi)} · ${fmtN(tl.failure_seqs)} saves with failures` + (tl.unreadable.length ? ` · ${tl.unreadable.length} unreadable ranges` : "")
      : `indexing the history: ${fmtN(tl.indexed)} of ${fmtN(tl.last_seq)} frames…`;
    fill(this.pauses, 
      tl.pauses.length ? el("span", { class: "dim" }, "longest pauses: ") : null,
      ...tl.pauses.slice(0, 8).map((p) => el("button", { type: "button", class: "chip", onclick: () => this.goto(p.seq) }, `${fmtGap(p.gap)} before seq ${fmtN(p.seq)}`)),
    );
    if (!complete) return true;
    this.root.dataset.timeline = "ready";
    this.loadFailures(0);
    return false;
  }

  xOf(seq, w) {
    const tl = this.tl;
    const lo = tl.lo, hi = Math.max(tl.hi, lo + 1);
    return 40 + ((seq - lo) / (hi - lo)) * (w - 50);
  }

  seqAt(x, w) {
    const tl = this.tl;
    const lo = tl.lo, hi = Math.max(tl.hi, lo + 1);
    return Math.max(0, Math.min(this.last, Math.round(lo + ((x - 40) / (w - 50)) * (hi - lo))));
  }

  draw() {
    const tl = this.tl;
    if (!tl) return;
    const [ctx, w, h] = sizeCanvas(this.savesCanvas);
    ctx.font = "11px sans-serif";
    if (!tl.bins.length) { ctx.fillStyle = "#666"; ctx.fillText("no frames", 50, 20); return; }
    const t0 = tl.bins[0].t0, t1 = Math.max(...tl.bins.map((b) => b.t1));
    const span = t1 - t0 || 1;
    const yOf = (t) => h - 18 - ((t - t0) / span) * (h - 30);
    ctx.strokeStyle = "#ddd"; ctx.beginPath(); ctx.moveTo(40, h - 18); ctx.lineTo(w - 10, h - 18); ctx.stroke();
    ctx.fillStyle = "#555";
    ctx.fillText(`+${fmtGap(span)}`, 2, 14);
    ctx.fillText("0", 2, h - 20);
    ctx.fillText(`seq ${fmtN(tl.lo)}`, 40, h - 4);
    const hiText = `seq ${fmtN(tl.hi)}`;
    ctx.fillText(hiText, w - 10 - ctx.measureText(hiText).width, h - 4);
    ctx.strokeStyle = COLORS.line; ctx.lineWidth = 1.5; ctx.beginPath();
    tl.bins.forEach((b, i) => {
      if (i === 0) ctx.moveTo(this.xOf(b.lo, w), yOf(b.t0));
      ctx.lineTo(this.xOf(b.hi, w), yOf(b.t1));
    });
    ctx.stroke();
    for (const p of tl.pauses) {
      if (p.seq < tl.lo || p.seq > tl.hi) continue;
      const x = this.xOf(p.seq, w);
      ctx.strokeStyle = COLORS.pause; ctx.lineWidth = 3; ctx.beginPath();
      ctx.moveTo(x, yOf(p.t - p.gap)); ctx.lineTo(x, yOf(p.t)); ctx.stroke();
    }
    ctx.fillStyle = COLORS.bad;
    for (const b of tl.bins) if (b.failures) ctx.fillRect(this.xOf(b.lo, w), h - 17, Math.max(2, this.xOf(b.hi, w) - this.xOf(b.lo, w)), 5);
    this.cursor(ctx, w, h);
    this.drawFans();
  }

  drawFans() {
    const tl = this.tl;
    const [ctx, w, h] = sizeCanvas(this.fansCanvas);
    ctx.font = "11px sans-serif";
    fill(this.fanLegend);
    if (!tl.fan_outs.length) { ctx.fillStyle = "#888"; ctx.fillText("no fan-out in this invocation", 50, 20); return; }
    const k = Math.min(this.fan, tl.fan_outs.length - 1);
    const fo = tl.fan_outs[k];
    const total = fo.count || 1;
    const yOf = (n) => h - 4 - (n / total) * (h - 10);
    const layers = [[0, COLORS.ok], [1, COLORS.bad], [2, COLORS.pending]];
    let base = tl.bins.map(() => 0);
    for (const [j, color] of layers) {
      ctx.fillStyle = color; ctx.beginPath();
      tl.bins.forEach((b, i) => { const x = this.xOf(b.hi, w); const y = yOf(base[i] + b.fan_outs[k][j]); if (i === 0) ctx.moveTo(this.xOf(b.lo, w), y); ctx.lineTo(x, y); });
      for (let i = tl.bins.length - 1; i >= 0; i--) { const b = tl.bins[i]; ctx.lineTo(this.xOf(b.hi, w), yOf(base[i])); if (i === 0) ctx.lineTo(this.xOf(b.lo, w), yOf(base[i])); }
      ctx.closePath(); ctx.fill();
      base = base.map((v, i) => v + tl.bins[i].fan_outs[k][j]);
    }
    ctx.fillStyle = "#333";
    ctx.fillText(`${fmtN(fo.count)}`, 2, 12);
    this.cursor(ctx, w, h);
    const last = tl.bins[tl.bins.length - 1].fan_outs[k];
    const pick = el("select", { id: "fan-pick" }, ...tl.fan_outs.map((f, i) => el("option", { value: String(i), selected: i === k }, `${f.name}${f.namespace.length ? " in " + f.namespace.join("/") : ""} (${fmtN(f.count)})`)));
    pick.addEventListener("change", () => { this.fan = Number(pick.value); this.drawFans(); this.gridRange = [0, 0]; this.loadGrid(); this.loadFailures(0); });
    put(this.fanLegend, pick, el("span", { class: "dim" }, `at seq ${fmtN(tl.hi)}:`),
      el("span", { class: "key-ok" }, `completed ${fmtN(last[0])}`),
      el("span", { class: "key-bad" }, `failed ${fmtN(last[1])}`),
      el("span", { class: "key-pending" }, `pending ${fmtN(last[2])}`),
      el("span", { class: "dim" }, `(in flight ${fmtN(last[3])})`));
  }

  cursor(ctx, w, h) {
    if (this.seq < this.tl.lo || this.seq > this.tl.hi) return;
    const x = this.xOf(this.seq, w);
    ctx.strokeStyle = "#111"; ctx.lineWidth = 1; ctx.setLineDash([3, 3]);
    ctx.beginPath(); ctx.moveTo(x, 0); ctx.lineTo(x, h); ctx.stroke(); ctx.setLineDash([]);
  }

  chartMouse(c) {
    let down = null;
    c.addEventListener("mousedown", (e) => { down = e.offsetX; });
    c.addEventListener("mouseup", (e) => {
      if (down === null || !this.tl) return;
      const start = down;
      down = null;
      const w = c.clientWidth;
      if (Math.abs(e.offsetX - start) > 6) {
        const a = this.seqAt(Math.min(start, e.offsetX), w), b = this.seqAt(Math.max(start, e.offsetX), w);
        if (b > a) { this.range = [Math.max(1, a), b]; this.loadTimeline(); return; }
      }
      this.goto(this.seqAt(e.offsetX, w));
    });
  }

  async goto(seq, keepFollow) {
    seq = Math.max(0, Math.min(this.last, Math.round(seq)));
    if (!keepFollow && seq !== this.last) { this.follow = false; this.followBox.checked = false; }
    this.seq = seq;
    this.seqRange.value = String(seq); this.seqInput.value = String(seq);
    this.draw();
    let rec;
    try { rec = await api("record", { id: this.id, seq }); } catch (err) { showError(this.recBox, err); return; }
    if (S.view !== this || rec.seq !== this.seq) return;
    this.rec = rec;
    this.renderRecord(rec);
  }

  renderRecord(rec) {
    const box = this.recBox;
    const head = el("div", { class: "rec-head" },
      el("strong", { id: "rec-seq" }, `seq ${fmtN(rec.seq)} of ${fmtN(rec.last_seq)}`),
      el("span", { class: "dim" }, ` · ${rec.kind || "-"} · saved ${fmtTime(rec.saved_at)}` + (rec.instance_changes ? ` · ${fmtN(rec.instance_changes)} instance changes` : "")));
    if (!rec.record) {
      fill(box, head, el("p", { class: "dim" }, rec.seq === 0 ? "seq 0: before the first save" : "no record here (deleted, or an event stream)"));
      return;
    }
    const r = rec.record;
    const fetchState = (path, offset) => api("value", { id: this.id, seq: rec.seq, what: "state", path: JSON.stringify(path), offset }).then((x) => x.node);
    const positions = el("details", {},
      el("summary", {}, `completed positions (${fmtN(r.positions_total)})`),
      el("ol", { class: "mono small" }, ...r.positions.map((p) => el("li", {}, `${p.namespace.length ? p.namespace.join("/") + "/" : ""}${p.node_name} step ${p.step}` + (p.attempt_index ? ` attempt ${p.attempt_index}` : "") + (p.fan_out_index !== null ? ` [${p.fan_out_index}]` : "")))));
    const fans = el("table", { class: "fans" },
      el("tr", {}, ...["fan-out", "namespace", "instances", "completed", "failed", "in flight", "not started"].map((h) => el("th", {}, h))),
      ...r.fan_outs.map((f, i) => el("tr", { class: i === this.fan ? "selected" : "", onclick: () => { this.fan = i; this.gridRange = [0, 0]; this.renderRecord(this.rec); this.drawFans(); this.loadFailures(0); } },
        el("td", { class: "mono" }, f.name), el("td", { class: "mono" }, f.namespace.join("/") || "-"), el("td", {}, fmtN(f.count)),
        el("td", {}, fmtN(f.completed)), el("td", { class: f.failed ? "bad" : "" }, fmtN(f.failed)), el("td", {}, fmtN(f.in_flight)), el("td", {}, fmtN(f.not_started)))));
    this.gridCanvas = el("canvas", { class: "grid", id: "grid" });
    this.gridCanvas.style.height = "192px";
    this.gridInfo = el("div", { class: "dim small", id: "grid-info" });
    this.instBox = el("div", { id: "instance" });
    const goIndex = el("input", { type: "number", min: "0", placeholder: "instance #", class: "seq-input", id: "inst-index" });
    goIndex.addEventListener("change", () => this.openInstance(Number(goIndex.value)));
    this.gridCanvas.addEventListener("click", (e) => this.gridClick(e));
    this.gridCanvas.addEventListener("mousemove", (e) => this.gridHover(e));
    fill(box, head,
      el("div", { class: "dim" }, `correlation ${r.correlation_id} · schema ${r.schema_version || "-"} · ${fmtN(r.parent_states)} parent states`),
      rec.forked_from ? el("div", { class: "dim", id: "forked-from" }, `forked from ${rec.forked_from.invocation_id}@${rec.forked_from.seq} (source frame checksum ${rec.forked_from.checksum})`) : null,
      el("h4", {}, "state"), renderTree(r.state, fetchState, [], true),
      positions,
      r.fan_outs.length ? el("div", {}, el("h4", {}, "fan-outs"), fans,
        el("div", { class: "scrub" }, el("span", { class: "dim" }, "instances (click a cell to zoom in, a single instance to open it)"),
          el("button", { type: "button", id: "grid-out", onclick: () => { this.gridRange = [0, 0]; this.loadGrid(); } }, "zoom out"), goIndex),
        this.gridCanvas, this.gridInfo, this.instBox) : null);
    if (r.fan_outs.length) this.loadGrid();
  }

  async loadGrid() {
    if (!this.rec || !this.rec.record || !this.gridCanvas) return;
    const fans = this.rec.record.fan_outs;
    if (this.fan >= fans.length) this.fan = 0;
    const cols = Math.max(10, Math.floor((this.gridCanvas.clientWidth || 600) / 12));
    const rows = 16;
    const [lo, hi] = this.gridRange;
    let g;
    try { g = await api("instances", { id: this.id, seq: this.rec.seq, fan: this.fan, lo, hi, bins: cols * rows }); }
    catch (err) { this.gridInfo.textContent = String(err.message); return; }
    // Few cells (zoomed in): bigger ones, as many rows as they need.
    const width = this.gridCanvas.clientWidth || 600;
    const size = g.bins.length * 24 * 24 <= width * rows * 12 ? 24 : 12;
    const perRow = Math.max(1, Math.floor(width / size));
    this.grid = { ...g, cols: perRow, size };
    this.gridCanvas.style.height = `${Math.max(1, Math.ceil(g.bins.length / perRow)) * size}px`;
    this.gridRange = [g.lo, g.hi];
    this.drawGrid();
    this.gridInfo.textContent = `instances ${fmtN(g.lo)}..${fmtN(g.hi - 1)} of ${fmtN(g.count)}, ${fmtN(g.width)} per cell`;
  }

  drawGrid() {
    const g = this.grid;
    if (!g || !this.gridCanvas) return;
    const [ctx] = sizeCanvas(this.gridCanvas);
    const cw = g.size, ch = g.size;
    g.bins.forEach((b, i) => {
      const [, ns, flight, done, failed] = b;
      const n = ns + flight + done + failed;
      let color = COLORS.pending;
      if (failed) color = COLORS.bad;
      else if (flight) color = COLORS.flight;
      else if (done === n) color = COLORS.ok;
      else if (done) color = "#9fd3ad";
      ctx.fillStyle = color;
      ctx.globalAlpha = failed ? Math.max(0.35, failed / n) : 1;
      ctx.fillRect((i % g.cols) * cw + 1, Math.floor(i / g.cols) * ch + 1, cw - 2, ch - 2);
    });
    ctx.globalAlpha = 1;
  }

  cellAt(e) {
    const g = this.grid;
    if (!g) return null;
    const col = Math.floor(e.offsetX / g.size);
    if (col >= g.cols) return null;
    const i = Math.floor(e.offsetY / g.size) * g.cols + col;
    return i >= 0 && i < g.bins.length ? g.bins[i] : null;
  }

  gridHover(e) {
    const b = this.cellAt(e);
    if (!b) return;
    const g = this.grid;
    const last = Math.min(g.hi, b[0] + g.width) - 1;
    this.gridInfo.textContent = `instances ${fmtN(b[0])}..${fmtN(last)}: ${fmtN(b[3])} completed, ${fmtN(b[4])} failed, ${fmtN(b[2])} in flight, ${fmtN(b[1])} not started`;
  }

  gridClick(e) {
    const b = this.cellAt(e);
    if (!b) return;
    const g = this.grid;
    if (g.width <= 1) { this.openInstance(b[0]); return; }
    this.gridRange = [b[0], Math.min(g.hi, b[0] + g.width)];
    this.loadGrid();
  }

  async openInstance(index) {
    let inst;
    try { inst = await api("instance", { id: this.id, seq: this.rec.seq, fan: this.fan, index }); }
    catch (err) { showError(this.instBox, err); return; }
    const fetchResult = (path, offset) => api("value", { id: this.id, seq: this.rec.seq, what: "result", path: JSON.stringify([this.fan, index].concat(path)), offset }).then((x) => x.node);
    fill(this.instBox, el("div", { class: "instance card-inner" },
      el("h4", { id: "inst-title" }, `instance ${fmtN(index)}: ${inst.state}` + (inst.result_is_error ? " (error)" : "")),
      (inst.failed_at || []).length ? el("div", { class: "dim" }, "failed at " + inst.failed_at.map((f) => `${fmtTime(f.t)} (seq ${fmtN(f.seq)})`).join(", ")) : null,
      el("div", { class: inst.result_is_error ? "bad" : "" }, inst.result_is_error ? "error: " : "result: ", renderTree(inst.result, fetchResult, [], true)),
      inst.inner_positions.length ? el("div", { class: "dim small" }, `${inst.inner_positions.length} inner positions completed`) : null));
  }

  async loadFailures(offset) {
    if (!this.tl || !this.tl.fan_outs.length) { fill(this.failBox, el("p", { class: "dim" }, "no fan-out")); return; }
    let f;
    try { f = await api("failures", { id: this.id, fan: this.fan, offset, limit: 10 }); } catch (err) { showError(this.failBox, err); return; }
    if (!f.total) { fill(this.failBox, el("p", { class: "dim" }, "no instance of this fan-out failed")); return; }
    fill(this.failBox, 
      el("div", { class: "dim" }, `${fmtN(f.total)} failures`),
      el("table", {}, el("tr", {}, el("th", {}, "#"), el("th", {}, "instance"), el("th", {}, "failed at"), el("th", {}, "seq")),
        ...f.rows.map((x, i) => el("tr", { class: "click", onclick: () => this.goto(x.seq).then(() => this.openInstance(x.index)) },
          el("td", {}, fmtN(offset + i + 1)), el("td", { class: "mono" }, fmtN(x.index)), el("td", {}, fmtTime(x.t)), el("td", {}, fmtN(x.seq))))),
      el("div", { class: "pager" },
        el("button", { type: "button", disabled: offset === 0, onclick: () => this.loadFailures(Math.max(0, offset - 10)) }, "←"),
        el("button", { type: "button", disabled: offset + 10 >= f.total, onclick: () => this.loadFailures(offset + 10) }, "→")));
  }

  async diff() {
    const a = Number(this.diffA.value), b = Number(this.diffB.value);
    this.diffOut.textContent = "…";
    try {
      const d = await api("diff", { id: this.id, a, b, limit: 500 });
      this.diffOut.textContent = `${d.invocation_id}: seq ${d.from_seq} -> seq ${d.to_seq}\n` + d.lines.join("\n") + (d.total > d.lines.length ? `\n… ${d.total - d.lines.length} more lines (ckptlog diff --full)` : "");
    } catch (err) { this.diffOut.textContent = String(err.message); }
  }

  async loadFrames(offset) {
    let f;
    try { f = await api("frames", { id: this.id, offset, limit: 50 }); } catch (err) { showError(this.framesBox, err); return; }
    fill(this.framesBox, 
      el("table", {}, el("tr", {}, el("th", {}, "seq"), el("th", {}, "saved"), el("th", {}, "frame")),
        ...f.rows.map((x) => el("tr", {}, el("td", {}, fmtN(x.seq)), el("td", {}, fmtTime(x.saved_at)),
          el("td", {}, x.unreadable ? el("span", { class: "bad" }, x.unreadable) : renderTree(x.content, null, [], false))))),
      el("div", { class: "pager" },
        el("button", { type: "button", disabled: offset === 0, onclick: () => this.loadFrames(Math.max(0, offset - 50)) }, "←"),
        el("span", { class: "dim" }, `${fmtN(offset + 1)}..${fmtN(Math.min(f.total, offset + 50))} of ${fmtN(f.total)}`),
        el("button", { type: "button", disabled: offset + 50 >= f.total, onclick: () => this.loadFrames(offset + 50) }, "→")));
  }
}

// -- LangGraph: checkpoints as a tree of parents -----------------------------------------------

class LangGraphView {
  constructor(row, root) {
    this.row = row; this.root = root;
    this.treeBox = el("div", { id: "lg-tree" });
    this.detail = el("div", { id: "lg-detail" });
    put(root, el("h2", { class: "mono" }, row.thread_id),
      el("div", { class: "dim" }, `LangGraph thread · namespace ${row.namespace === "" ? "(root)" : row.namespace} · ${fmtN(row.saves)} frames`),
      el("section", { class: "card" }, el("h3", {}, "Checkpoints (tree of parents; forks marked)"), this.treeBox),
      el("section", { class: "card" }, el("h3", {}, "Checkpoint"), this.detail));
    this.refresh(true);
  }

  async refresh() {
    let data;
    try { data = await api("langgraph", { thread: this.row.thread_id, ns: this.row.namespace, limit: 500 }); }
    catch (err) { showError(this.treeBox, err); return; }
    const byId = new Map(data.rows.map((r) => [r.id, { ...r, children: [] }]));
    const roots = [];
    for (const n of byId.values()) {
      const p = n.parent_id && byId.get(n.parent_id);
      if (p) p.children.push(n); else roots.push(n);
    }
    const render = (n) => {
      n.children.sort((a, b) => (a.id < b.id ? -1 : 1));
      const step = n.metadata && n.metadata.t === "dict" ? n.metadata.items.find((i) => i[0] === "step") : null;
      const source = n.metadata && n.metadata.t === "dict" ? n.metadata.items.find((i) => i[0] === "source") : null;
      const line = el("div", { class: "lg-node click", "data-id": n.id, onclick: () => this.show(n) },
        el("span", { class: "mono" }, n.id),
        step ? el("span", { class: "dim" }, ` step ${step[1].v}`) : null,
        source ? el("span", { class: "dim" }, ` ${source[1].v}`) : null,
        el("span", { class: "dim" }, ` ${n.ts || ""}`),
        n.pending_writes.length ? el("span", { class: "badge running" }, `${n.pending_writes.length} pending writes`) : null,
        n.children.length > 1 ? el("span", { class: "badge failed" }, `fork: ${n.children.length} branches`) : null);
      return el("li", {}, line, n.children.length ? el("ul", {}, ...n.children.map(render)) : null);
    };
    fill(this.treeBox, el("ul", { class: "lg-tree" }, ...roots.map(render)),
      data.rows.length >= 500 ? el("div", { class: "dim" }, "the newest 500 checkpoints") : null);
    if (data.rows.length) this.show(byId.get(data.rows[0].id));
  }

  show(n) {
    for (const node of this.treeBox.querySelectorAll(".lg-node")) node.classList.toggle("selected", node.dataset.id === n.id);
    fill(this.detail, 
      el("div", { class: "mono" }, `checkpoint ${n.id}`), el("div", { class: "dim" }, `parent ${n.parent_id || "-"}`),
      el("h4", {}, "channel values"), renderTree(n.channels, null, [], true),
      el("h4", {}, "metadata"), renderTree(n.metadata, null, [], false),
      el("h4", {}, `pending writes (${n.pending_writes.length})`),
      el("table", {}, el("tr", {}, el("th", {}, "task"), el("th", {}, "channel"), el("th", {}, "value")),
        ...n.pending_writes.map((w) => el("tr", {}, el("td", { class: "mono" }, w.task_id), el("td", { class: "mono" }, w.channel), el("td", {}, renderTree(w.value, null, [], false))))));
  }
}

// -- techrevati threads and apflow tasks: their history ----------------------------------------

class HistoryView {
  constructor(row, root, kind) {
    this.row = row; this.root = root; this.kind = kind; this.offset = 0;
    this.box = el("div", { id: "history" });
    const name = kind === "apflow" ? `apflow task ${row.task_id}` : `techrevati thread ${row.thread_id}`;
    put(root, el("h2", { class: "mono" }, kind === "apflow" ? row.task_id : row.thread_id),
      el("div", { class: "dim" }, `${name} · ${fmtN(row.saves)} frames`),
      el("section", { class: "card" }, el("h3", {}, kind === "apflow" ? "Saved attempts (retries in order)" : "Checkpoints and steps"), this.box));
    this.refresh();
  }

  async refresh() {
    const params = this.kind === "apflow" ? { task: this.row.task_id } : { thread: this.row.thread_id };
    let data;
    try { data = await api(this.kind, { ...params, offset: this.offset, limit: 100 }); } catch (err) { showError(this.box, err); return; }
    const cols = this.kind === "apflow" ? ["seq", "kind", "at", "step", "attempt", "data"] : ["seq", "kind", "at", "value"];
    fill(this.box, el("table", {}, el("tr", {}, ...cols.map((c) => el("th", {}, c))),
      ...data.rows.map((r) => this.kind === "apflow"
        ? el("tr", {}, el("td", {}, fmtN(r.seq)), el("td", { class: r.kind === "delete" ? "dim" : "" }, r.kind), el("td", {}, fmtTime(r.at)), el("td", { class: "mono" }, r.step_name ?? "-"), el("td", {}, r.attempt ?? "-"), el("td", {}, r.kind === "delete" ? `${r.n} hidden` : renderTree(r.data, null, [], false)))
        : el("tr", {}, el("td", {}, fmtN(r.seq)), el("td", {}, r.kind), el("td", {}, fmtTime(r.at)), el("td", {}, renderTree(r.value, null, [], false))))),
      el("div", { class: "pager" },
        el("button", { type: "button", disabled: this.offset === 0, onclick: () => { this.offset = Math.max(0, this.offset - 100); this.refresh(); } }, "←"),
        el("button", { type: "button", disabled: data.rows.length < 100, onclick: () => { this.offset += 100; this.refresh(); } }, "→")));
  }
}

// -- any other kind of stream: its view's steps (/api/steps) ---------------------------------

class StepsView {
  constructor(row, root) {
    this.row = row; this.root = root; this.offset = 0;
    this.box = el("div", { id: "steps" });
    put(root, el("h2", { class: "mono" }, row.display || row.id),
      el("div", { class: "dim" }, `${row.noun || row.family} · ${fmtN(row.saves)} frames`),
      el("section", { class: "card" }, el("h3", {}, "Frames, each with the stream as of it"), this.box));
    this.refresh();
  }

  async refresh() {
    let data;
    try { data = await api("steps", { id: this.row.id, offset: this.offset, limit: 100 }); } catch (err) { showError(this.box, err); return; }
    const cols = ["seq", "saved at", "kind", "node", "value"];
    fill(this.box, el("table", {}, el("tr", {}, ...cols.map((c) => el("th", {}, c))),
      ...data.rows.map((r) => r.unreadable
        ? el("tr", {}, el("td", {}, fmtN(r.seq)), el("td", { class: "error", colspan: "4" }, r.unreadable))
        : el("tr", {}, el("td", {}, fmtN(r.seq)), el("td", {}, fmtTime(r.saved_at)), el("td", { class: r.kind === "delete" ? "dim" : "" }, r.title),
          el("td", { class: "mono" }, r.node ?? "-"), el("td", {}, r.value.t === "lit" && r.value.v === null ? "(nothing live)" : renderTree(r.value, null, [], false))))),
      el("div", { class: "pager" },
        el("button", { type: "button", disabled: this.offset === 0, onclick: () => { this.offset = Math.max(0, this.offset - 100); this.refresh(); } }, "←"),
        el("button", { type: "button", disabled: this.offset + 100 >= data.total, onclick: () => { this.offset += 100; this.refresh(); } }, "→")));
  }
}

// -- verify and stats --------------------------------------------------------------------------

function overlay(...kids) {
  fill($("overlay-body"), ...kids);
  $("overlay").hidden = false;
}

async function showStats() {
  let s;
  try { s = await api("stats"); } catch (err) { overlay(el("p", { class: "error" }, err.message)); return; }
  const st = s.stats;
  const rows = [["path", st.path], ["frames", fmtN(st.frames)], ["streams", fmtN(st.streams)], ["live invocations", fmtN(st.invocations)],
    ["streams without head", fmtN(st.streams_without_head)], ["snapshots", fmtN(st.snapshots)], ["data file", `${fmtN(st.data_file_bytes)} bytes`],
    ["bytes per frame", st.bytes_per_frame.toFixed(1)], ["oldest save", fmtTime(st.oldest_saved_at)], ["newest save", fmtTime(st.newest_saved_at)],
    ["format", JSON.stringify(st.format)]];
  overlay(el("h3", {}, "Stats"), el("table", { id: "stats-table" }, ...rows.map(([k, v]) => el("tr", {}, el("th", {}, k), el("td", { class: "mono" }, v)))),
    el("h4", {}, "largest streams"), el("table", {}, ...st.largest.map((x) => el("tr", {}, el("td", { class: "mono" }, x.invocation_id), el("td", {}, fmtN(x.frames))))));
}

async function showVerify() {
  const status = el("p", { id: "verify-status" }, "verifying…");
  overlay(el("h3", {}, "Verify"), status);
  let v = await api("verify", { start: "1" });
  while (v.state === "running") {
    status.textContent = `verifying… ${fmtN(v.done)} of ${fmtN(v.total)} frames`;
    await new Promise((r) => setTimeout(r, 300));
    v = await api("verify");
  }
  if (v.state === "failed") { status.textContent = `verify could not run: ${v.error}`; return; }
  status.textContent = v.ok ? "OK: every checksum, chain, index entry and materialized row checks out" : `${fmtN(v.problems.length)} problems`;
  status.className = v.ok ? "ok" : "bad";
  if (!v.ok) {
    put($("overlay-body"), el("table", { id: "verify-problems" }, el("tr", {}, el("th", {}, "kind"), el("th", {}, "stream"), el("th", {}, "seq"), el("th", {}, "detail")),
      ...v.problems.map((p) => el("tr", {}, el("td", {}, p.kind), el("td", { class: "mono" }, p.stream ?? "-"), el("td", {}, p.seq ?? "-"), el("td", {}, p.detail)))));
  }
}

// -- live updates ------------------------------------------------------------------------------

async function poll() {
  try {
    const c = await api("changes");
    $("live").classList.remove("stale");
    if (c.frames !== S.frames) {
      const first = S.frames < 0;
      S.frames = c.frames;
      $("live").title = `${fmtN(c.frames)} frames · updated ${new Date().toLocaleTimeString()}`;
      if (!first) {
        await loadList();
        if (S.view && S.view.refresh) S.view.refresh(false);
      }
    }
  } catch (err) { $("live").classList.add("stale"); $("live").title = String(err.message); }
  setTimeout(poll, 1500);
}

async function init() {
  $("search").addEventListener("input", () => { S.q = $("search").value; S.offset = 0; clearTimeout(S.typing); S.typing = setTimeout(loadList, 200); });
  $("status").addEventListener("change", () => { S.status = $("status").value; S.offset = 0; loadList(); });
  $("family").addEventListener("change", () => { S.family = $("family").value; S.offset = 0; loadList(); });
  $("inv-prev").addEventListener("click", () => { S.offset = Math.max(0, S.offset - S.limit); loadList(); });
  $("inv-next").addEventListener("click", () => { S.offset += S.limit; loadList(); });
  $("btn-stats").addEventListener("click", showStats);
  $("btn-verify").addEventListener("click", showVerify);
  $("overlay-close").addEventListener("click", () => { $("overlay").hidden = true; });
  try {
    const info = await api("info");
    $("logpath").textContent = info.path;
    if (info.problems.length) {
      $("problems").hidden = false;
      fill($("problems"), ...info.problems.map((p) => el("div", {}, `${p.kind}: ${p.detail}`)));
    }
  } catch (err) { $("logpath").textContent = String(err.message); }
  await loadList();
  document.body.dataset.ready = "1";
  window.__ckptlogReady = performance.now();
  poll();
}

init();

/* Small SVG charts for the run dashboard: line charts (time or step on x) and column charts.
   Hand-written so the page ships as three static files with no build step and no network. */
"use strict";

const Charts = (() => {
  const NS = "http://www.w3.org/2000/svg";
  const PALETTE = ["#8b7cff", "#38bdf8", "#34d399", "#fbbf24", "#f87171", "#f472b6", "#a3e635"];

  function el(name, attrs, parent) {
    const node = document.createElementNS(NS, name);
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
    if (parent) parent.appendChild(node);
    return node;
  }

  /* "nice" axis ticks covering [lo, hi] */
  function ticks(lo, hi, count) {
    if (!(hi > lo)) { const pad = Math.abs(lo) > 0 ? Math.abs(lo) * 0.5 : 1; lo -= pad; hi += pad; }
    const raw = (hi - lo) / Math.max(1, count);
    const mag = Math.pow(10, Math.floor(Math.log10(raw)));
    const step = [1, 2, 2.5, 5, 10].map((m) => m * mag).find((s) => s >= raw) || raw;
    const start = Math.floor(lo / step) * step;
    const out = [+start.toPrecision(12)];
    while (out[out.length - 1] < hi - step * 1e-9) out.push(+(start + step * out.length).toPrecision(12));
    return out;
  }

  function compact(v) {
    if (v === null || v === undefined || !isFinite(v)) return "–";
    const a = Math.abs(v);
    if (a >= 1e9) return (v / 1e9).toFixed(1) + "G";
    if (a >= 1e6) return (v / 1e6).toFixed(1) + "M";
    if (a >= 1e4) return (v / 1e3).toFixed(1) + "k";
    if (a >= 100) return v.toFixed(0);
    if (a >= 1) return +v.toFixed(2) + "";
    if (a === 0) return "0";
    return +v.toPrecision(2) + "";
  }

  function timeLabel(ms, spanMs) {
    const d = new Date(ms);
    const hh = String(d.getHours()).padStart(2, "0"), mm = String(d.getMinutes()).padStart(2, "0");
    if (spanMs > 2 * 86400e3) return `${d.getMonth() + 1}/${d.getDate()} ${hh}:${mm}`;
    if (spanMs < 10 * 60e3) return `${hh}:${mm}:${String(d.getSeconds()).padStart(2, "0")}`;
    return `${hh}:${mm}`;
  }

  /* line chart: opts = {xs, xKind: "time"|"number", series: [{name, ys, color}], height, yFormat, tooltip} */
  function line(container, opts) {
    container.innerHTML = "";
    container.classList.add("chart");
    const width = Math.max(260, container.clientWidth || 520);
    const height = opts.height || 200;
    const m = { l: 46, r: 12, t: 8, b: 22 };
    const xs = opts.xs;
    const all = opts.series.flatMap((s) => s.ys.filter((v) => v !== null && isFinite(v)));
    if (!xs.length || !all.length) { container.innerHTML = '<div class="empty">No points in this range yet</div>'; return; }
    let xlo = Math.min(...xs), xhi = Math.max(...xs);
    if (xhi === xlo) { const pad = opts.xKind === "time" ? 30e3 : 1; xlo -= pad; xhi += pad; }
    const ylo0 = Math.min(0, ...all), yhi0 = Math.max(...all);
    const yt = ticks(ylo0, yhi0 === ylo0 ? ylo0 + 1 : yhi0, 4);
    const ylo = yt[0], yhi = yt[yt.length - 1];
    const X = (v) => m.l + ((v - xlo) / (xhi - xlo)) * (width - m.l - m.r);
    const Y = (v) => height - m.b - ((v - ylo) / (yhi - ylo || 1)) * (height - m.t - m.b);
    const svg = el("svg", { viewBox: `0 0 ${width} ${height}`, height, role: "img" }, container);
    const defs = el("defs", {}, svg);
    const axis = el("g", { class: "axis" }, svg);
    for (const v of yt) {
      el("line", { class: "grid-line", x1: m.l, x2: width - m.r, y1: Y(v), y2: Y(v) }, axis);
      el("text", { x: m.l - 8, y: Y(v) + 3.5, "text-anchor": "end" }, axis).textContent = (opts.yFormat || compact)(v);
    }
    const xt = opts.xKind === "time" ? ticks(xlo, xhi, 5).filter((v) => v >= xlo && v <= xhi) : ticks(xlo, xhi, 6).filter((v) => v >= xlo && v <= xhi && Number.isInteger(v));
    for (const v of xt) {
      el("text", { x: X(v), y: height - 6, "text-anchor": "middle" }, axis).textContent = opts.xKind === "time" ? timeLabel(v, xhi - xlo) : String(v);
    }
    opts.series.forEach((s, i) => {
      const color = s.color || PALETTE[i % PALETTE.length];
      const pts = xs.map((x, j) => [x, s.ys[j]]).filter(([, y]) => y !== null && isFinite(y));
      if (!pts.length) return;
      const d = pts.map(([x, y], j) => `${j ? "L" : "M"}${X(x).toFixed(1)},${Y(y).toFixed(1)}`).join("");
      if (i === 0 && opts.series.length <= 2) {
        const id = `g${Math.random().toString(36).slice(2, 8)}`;
        const grad = el("linearGradient", { id, x1: 0, x2: 0, y1: 0, y2: 1 }, defs);
        el("stop", { offset: "0%", "stop-color": color, "stop-opacity": 0.28 }, grad);
        el("stop", { offset: "100%", "stop-color": color, "stop-opacity": 0 }, grad);
        const base = Y(Math.max(ylo, 0));
        el("path", { d: `${d}L${X(pts[pts.length - 1][0]).toFixed(1)},${base}L${X(pts[0][0]).toFixed(1)},${base}Z`, fill: `url(#${id})` }, svg);
      }
      el("path", { class: "series", d, stroke: color }, svg);
      if (pts.length <= 40) for (const [x, y] of pts) el("circle", { cx: X(x), cy: Y(y), r: 2.6, fill: color }, svg);
    });
    hover(container, svg, { X, xs, width, height, m, opts });
  }

  function hover(container, svg, { X, xs, height, m, opts }) {
    const guide = el("line", { y1: m.t, y2: height - m.b, stroke: "#5d6579", "stroke-dasharray": "3 3", visibility: "hidden" }, svg);
    const tip = document.createElement("div");
    tip.className = "tooltip hidden";
    container.appendChild(tip);
    svg.addEventListener("mousemove", (ev) => {
      const box = svg.getBoundingClientRect();
      const px = ((ev.clientX - box.left) / box.width) * svg.viewBox.baseVal.width;
      let best = 0;
      xs.forEach((x, j) => { if (Math.abs(X(x) - px) < Math.abs(X(xs[best]) - px)) best = j; });
      guide.setAttribute("x1", X(xs[best])); guide.setAttribute("x2", X(xs[best])); guide.setAttribute("visibility", "visible");
      const head = opts.xKind === "time" ? new Date(xs[best]).toLocaleTimeString() : `${opts.xLabel || "x"} ${xs[best]}`;
      tip.innerHTML = `<div style="color:#8c95aa">${head}</div>` + opts.series.map((s, i) =>
        `<div><span style="color:${s.color || PALETTE[i % PALETTE.length]}">●</span> ${s.name} <b>${(opts.valueFormat || compact)(s.ys[best])}</b></div>`).join("");
      tip.classList.remove("hidden");
      const left = (X(xs[best]) / svg.viewBox.baseVal.width) * box.width;
      tip.style.left = `${Math.min(left + 12, box.width - tip.offsetWidth - 4)}px`;
      tip.style.top = "8px";
    });
    svg.addEventListener("mouseleave", () => { guide.setAttribute("visibility", "hidden"); tip.classList.add("hidden"); });
  }

  /* column chart: opts = {labels, values, color, height, valueFormat, labelPrefix} */
  function columns(container, opts) {
    container.innerHTML = "";
    container.classList.add("chart");
    const width = Math.max(260, container.clientWidth || 520);
    const height = opts.height || 200;
    const m = { l: 46, r: 8, t: 20, b: 24 };
    const vals = opts.values.map((v) => (v === null || !isFinite(v) ? 0 : v));
    if (!vals.length) { container.innerHTML = '<div class="empty">No rows yet</div>'; return; }
    const yt = ticks(Math.min(0, ...vals), Math.max(...vals) || 1, 4);
    const ylo = yt[0], yhi = yt[yt.length - 1];
    const Y = (v) => height - m.b - ((v - ylo) / (yhi - ylo || 1)) * (height - m.t - m.b);
    const svg = el("svg", { viewBox: `0 0 ${width} ${height}`, height, role: "img" }, container);
    const axis = el("g", { class: "axis" }, svg);
    for (const v of yt) {
      el("line", { class: "grid-line", x1: m.l, x2: width - m.r, y1: Y(v), y2: Y(v) }, axis);
      el("text", { x: m.l - 8, y: Y(v) + 3.5, "text-anchor": "end" }, axis).textContent = (opts.axisFormat || compact)(v);
    }
    const slot = (width - m.l - m.r) / vals.length;
    const bw = Math.min(46, slot * 0.62);
    const every = Math.ceil(vals.length / 16);
    vals.forEach((v, i) => {
      const x = m.l + slot * i + (slot - bw) / 2;
      const y0 = Y(Math.max(0, ylo)), y1 = Y(v);
      const rect = el("rect", { x, y: Math.min(y0, y1), width: bw, height: Math.max(1, Math.abs(y0 - y1)), rx: 3, fill: opts.color || PALETTE[0], opacity: 0.9 }, svg);
      el("title", {}, rect).textContent = `${opts.labelPrefix || ""}${opts.labels[i]}: ${(opts.valueFormat || compact)(opts.values[i])}${opts.notes ? ` (${opts.notes[i]})` : ""}`;
      if (i % every === 0) el("text", { x: x + bw / 2, y: height - 7, "text-anchor": "middle" }, axis).textContent = `${opts.labelPrefix || ""}${opts.labels[i]}`;
      if (vals.length <= 16) el("text", { x: x + bw / 2, y: Math.min(y0, y1) - 4, "text-anchor": "middle", fill: "#c9cfdc", "font-size": 10.5 }, svg).textContent = (opts.valueFormat || compact)(opts.values[i]);
    });
  }

  return { line, columns, compact, PALETTE };
})();

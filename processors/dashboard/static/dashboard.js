/* agl-stream run dashboard: fetches the Grafana panels' results from /api/panels and draws them.
   Views: #/overview, #/training, #/rollouts, #/rollout/<rollout id>. Auto-refreshes the view shown. */
"use strict";

(() => {
  const TABS = [
    { key: "overview", title: "Overview", sections: ["overview", "rewards"] },
    { key: "rewards", title: "Rewards", sections: ["rewards"] },
    { key: "training", title: "Training", sections: ["training"] },
    { key: "rollouts", title: "Rollouts", sections: ["rollouts", "data", "more"] },
  ];
  const STATUS_COLORS = {
    succeeded: "#34d399", failed: "#f87171", running: "#60a5fa", preparing: "#22d3ee",
    queuing: "#94a3b8", requeuing: "#fbbf24", cancelled: "#64748b",
  };

  /* ------------------------------------------------------------ formatting */
  const fmt = {
    int: (v) => (v === null || v === undefined ? "–" : Math.round(v).toLocaleString("en-US")),
    num: (v, digits = 3) => {
      if (v === null || v === undefined || !isFinite(v)) return "–";
      if (Number.isInteger(v)) return v.toLocaleString("en-US");
      const a = Math.abs(v);
      if (a >= 1000) return v.toLocaleString("en-US", { maximumFractionDigits: 0 });
      if (a >= 1) return v.toFixed(2);
      if (a === 0) return "0";
      return v.toPrecision(digits);
    },
    pct: (v) => (v === null || v === undefined ? "–" : `${(v * 100).toFixed(v >= 0.995 || v === 0 ? 0 : 1)}%`),
    rate: (v) => (v === null || v === undefined ? "–" : v >= 100 ? v.toFixed(0) : v >= 10 ? v.toFixed(1) : v.toFixed(2)),
    secs: (v) => {
      if (v === null || v === undefined || !isFinite(v)) return "–";
      if (v < 1) return `${Math.round(v * 1000)} ms`;
      if (v < 60) return `${v.toFixed(v < 10 ? 2 : 1)} s`;
      const m = Math.floor(v / 60), s = Math.round(v % 60);
      return m < 60 ? `${m}m ${String(s).padStart(2, "0")}s` : `${Math.floor(m / 60)}h ${String(m % 60).padStart(2, "0")}m`;
    },
    ms: (v) => (v === null || v === undefined ? "–" : v === 0 ? "0 ms" : v < 1 ? `${(v * 1000).toFixed(0)} µs` : v < 1000 ? `${v.toFixed(v < 10 ? 1 : 0)} ms` : `${(v / 1000).toFixed(2)} s`),
    time: (ms) => {
      if (ms === null || ms === undefined) return "–";
      const d = new Date(ms), now = Date.now();
      const t = d.toLocaleTimeString("en-GB", { hour12: false });
      return now - ms < 20 * 3600e3 ? t : `${d.toISOString().slice(0, 10)} ${t}`;
    },
    ago: (ms) => {
      if (ms === null || ms === undefined) return "–";
      const s = Math.max(0, (Date.now() - ms) / 1000);
      return s < 60 ? `${Math.round(s)}s ago` : s < 3600 ? `${Math.round(s / 60)}m ago` : fmt.time(ms);
    },
  };
  const esc = (s) => String(s ?? "").replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
  const badge = (status) => `<span class="badge ${esc(status)}">${esc(status || "–")}</span>`;
  const rowsOf = (res) => (res && res.rows ? res.rows.map((r) => Object.fromEntries(res.columns.map((c, i) => [c, r[i]]))) : []);
  const isTimeCol = (c) => /(^time$|_at$|^started$|^finished$|^first_|^last_|^updated$)/.test(c);

  /* ------------------------------------------------------------ panel views */
  function tiles(fields) {
    return (body, res) => {
      const row = rowsOf(res)[0];
      if (!row) return empty(body, "No data yet");
      body.innerHTML = `<div class="tiles">${Object.entries(fields).map(([col, f]) => {
        const v = row[col];
        const tone = f.tone ? f.tone(v, row) : "";
        return `<div class="tile ${tone}" data-field="${col}"><div class="label">${esc(f.label)}</div><div class="value">${f.fmt(v, row)}</div></div>`;
      }).join("")}</div>`;
    };
  }

  function donut(rows, total) {
    const r = 52, c = 2 * Math.PI * r;
    let offset = 0;
    const arcs = rows.map((row) => {
      const len = (row.rollouts / total) * c;
      const arc = `<circle r="${r}" cx="64" cy="64" fill="none" stroke="${STATUS_COLORS[row.status] || "#94a3b8"}" stroke-width="14"
        stroke-dasharray="${len} ${c - len}" stroke-dashoffset="${-offset}" transform="rotate(-90 64 64)"><title>${esc(row.status)}: ${row.rollouts}</title></circle>`;
      offset += len;
      return arc;
    }).join("");
    return `<svg class="donut" viewBox="0 0 128 128" width="132" height="132"><circle r="${r}" cx="64" cy="64" fill="none" stroke="#1b2130" stroke-width="14"/>${arcs}
      <text x="64" y="62" text-anchor="middle" class="donut-total">${fmt.int(total)}</text><text x="64" y="80" text-anchor="middle" class="donut-label">rollouts</text></svg>`;
  }

  function statusBars(body, res) {
    const rows = rowsOf(res);
    if (!rows.length) return empty(body, "No rollouts yet");
    const max = Math.max(...rows.map((r) => r.rollouts));
    const total = rows.reduce((n, r) => n + r.rollouts, 0);
    body.innerHTML = `<div class="outcomes">${donut(rows, total)}<div class="bars">${rows.map((r) => `
      <div class="bar-row"><div>${badge(r.status)}</div>
        <div class="bar-track"><div class="bar-fill" style="width:${(100 * r.rollouts) / max}%;background:${STATUS_COLORS[r.status] || "#94a3b8"}"></div></div>
        <div class="bar-value"><b>${fmt.int(r.rollouts)}</b> · ${fmt.pct(r.share)}${r.retried ? ` · ${fmt.int(r.retried)} retried` : ""}</div></div>`).join("")}</div></div>`;
  }

  function lines(series, opts = {}) {
    return (body, res) => {
      const rows = rowsOf(res);
      if (!rows.length) return empty(body, opts.empty || "No points in this range yet");
      const x = opts.x || "time";
      const last = rows[rows.length - 1];
      const plotted = series.filter((s) => !s.legendOnly);
      body.innerHTML = `<div class="legend">${series.map((s, i) => `<span style="--c:${s.legendOnly ? "transparent" : Charts.PALETTE[plotted.indexOf(s)]}">${esc(s.label || s.col)}<b>${(s.fmt || fmt.num)(last[s.col])}</b></span>`).join("")}</div><div class="plot"></div>`;
      Charts.line(body.querySelector(".plot"), {
        xs: rows.map((r) => r[x]), xKind: x === "time" ? "time" : "number", xLabel: x,
        series: plotted.map((s) => ({ name: s.label || s.col, ys: rows.map((r) => r[s.col]) })), height: opts.height || 190,
      });
    };
  }

  function multiples(x, series) {
    return (body, res) => {
      const rows = rowsOf(res).sort((a, b) => a[x] - b[x]);
      if (!rows.length) return empty(body, "No learner steps yet: they appear as the learner publishes them on agl.training_steps");
      const last = rows[rows.length - 1];
      body.innerHTML = `<div class="tiles" style="margin-bottom:14px">
          <div class="tile"><div class="label">Learner step</div><div class="value">${fmt.int(last.step)}</div></div>
          <div class="tile"><div class="label">Policy version</div><div class="value">v${fmt.int(last.policy_version)}</div></div>
          <div class="tile"><div class="label">Batch reward</div><div class="value">${fmt.num(last.reward_mean)}</div></div>
          <div class="tile"><div class="label">Learner tokens/s</div><div class="value">${fmt.num(last.tokens_per_second)}</div></div>
          <div class="tile"><div class="label">Last step</div><div class="value" style="font-size:16px">${fmt.ago(last.time)}</div></div>
        </div><div class="multiples">${series.map((s, i) => `<div class="multiple"><div class="m-head"><span class="m-title">${esc(s.label)}</span>
          <span class="m-last" style="color:${Charts.PALETTE[i % Charts.PALETTE.length]}">${(s.fmt || fmt.num)(last[s.col])}</span></div><div class="plot" data-i="${i}"></div></div>`).join("")}</div>`;
      series.forEach((s, i) => Charts.line(body.querySelector(`.plot[data-i="${i}"]`), {
        xs: rows.map((r) => r[x]), xKind: "number", xLabel: x, height: 150,
        series: [{ name: s.label, ys: rows.map((r) => r[s.col]), color: Charts.PALETTE[i % Charts.PALETTE.length] }],
      }));
    };
  }

  function rewardColumns(body, res) {
    const rows = rowsOf(res);
    if (!rows.length) return empty(body, "No trajectories yet");
    const total = rows.reduce((n, r) => n + (r.trajectories || 0), 0);
    body.innerHTML = `<div class="legend"><span style="--c:${Charts.PALETTE[0]}">mean final reward of the trajectories each policy version produced</span>
      <span style="--c:transparent">trajectories<b>${fmt.int(total)}</b></span></div><div class="plot"></div>`;
    Charts.columns(body.querySelector(".plot"), {
      labels: rows.map((r) => r.policy_version ?? "–"), values: rows.map((r) => r.mean_final_reward), labelPrefix: "v",
      notes: rows.map((r) => `${fmt.int(r.trajectories)} trajectories, reward ${fmt.num(r.min_final_reward)}–${fmt.num(r.max_final_reward)}`),
      valueFormat: (v) => fmt.num(v), height: 214,
    });
  }

  function accuracyColumns(body, res) {
    const rows = rowsOf(res);
    if (!rows.length) return empty(body, "No evaluation yet: held-out accuracy appears once validation rollouts finish");
    body.innerHTML = `<div class="legend"><span style="--c:${Charts.PALETTE[0]}">held-out accuracy (right answers) per policy version</span>
      <span style="--c:transparent">pass@k = at least one right of k samples</span></div><div class="plot"></div>
      <div class="table-slot"></div>`;
    Charts.columns(body.querySelector(".plot"), {
      labels: rows.map((r) => r.policy_version ?? "–"), values: rows.map((r) => r.accuracy), labelPrefix: "v",
      notes: rows.map((r) => `${r.evaluation || "evaluation"}: ${fmt.int(r.answers)} answers to ${fmt.int(r.items)} items, ` +
        `pass@${fmt.int(r.samples_per_item)} ${fmt.pct(r.pass_at_k)}, mean reward ${fmt.num(r.mean_final_reward)}`),
      valueFormat: (v) => fmt.pct(v), height: 214,
    });
    table(["policy_version", "evaluation", "items", "samples_per_item", "accuracy", "pass_at_k", "mean_final_reward", "reward_parts"])(
      body.querySelector(".table-slot"), res);
  }

  function table(columns, options = {}) {
    return (body, res, bare) => {
      const rows = rowsOf(res);
      if (!rows.length) return empty(body, options.empty || "No rows yet");
      const cols = columns || res.columns;
      const head = cols.map((c) => `<th class="${numericCol(rows, c) ? "num" : ""}">${esc(c.replace(/_s$/, "").replace(/_/g, " "))}</th>`).join("");
      const body_ = rows.map((r) => {
        const link = options.link ? ` class="link" data-rollout="${esc(r[options.link])}"` : "";
        return `<tr${link}>${cols.map((c) => cell(c, r[c], options)).join("")}</tr>`;
      }).join("");
      const html = `<table><thead><tr>${head}</tr></thead><tbody>${body_}</tbody></table>`;
      if (bare) body.innerHTML = html;
      else body.innerHTML = `<div class="table-wrap">${html}</div>`;
      body.querySelectorAll("tr.link").forEach((tr) => tr.addEventListener("click", () => { location.hash = `#/rollout/${tr.dataset.rollout}`; }));
    };
  }

  function numericCol(rows, c) { return rows.some((r) => typeof r[c] === "number") && !isTimeCol(c); }

  function cell(col, v, options) {
    if (options.badges && options.badges.includes(col)) return `<td>${badge(v)}</td>`;
    if (v === null || v === undefined || v === "") return `<td class="num" style="color:var(--faint)">–</td>`;
    if (isTimeCol(col) && typeof v === "number") return `<td>${fmt.time(v)}</td>`;
    if (/_s$/.test(col) && typeof v === "number") return `<td class="num">${fmt.secs(v)}</td>`;
    if (/rate$|^share$/.test(col) && typeof v === "number") return `<td class="num">${fmt.pct(v)}</td>`;
    if (typeof v === "number") return `<td class="num">${fmt.num(v)}</td>`;
    if (typeof v === "boolean") return `<td>${v ? "yes" : "no"}</td>`;
    if (Array.isArray(v)) return `<td><span class="tokens" title="${esc(v.join(" "))}">${esc(v.join(" "))}</span></td>`;
    if (typeof v === "object") return `<td class="mono">${esc(JSON.stringify(v))}</td>`;
    const mono = /(_id$|^attempt_id$|^adapter$)/.test(col) ? "mono" : "";
    return `<td class="${mono}" title="${esc(v)}">${esc(v)}</td>`;
  }

  function latencyTable(body, res) {
    const rows = rowsOf(res);
    if (!rows.length) return empty(body, "No finished attempts yet");
    const max = Math.max(...rows.map((r) => r.p99_s || 0), 1e-9);
    const names = { enqueue_to_start: "Enqueue → start", start_to_finish: "Start → finish", finish_to_triplet_row: "Finish → triplet row" };
    body.innerHTML = `<table><thead><tr><th>stage</th><th class="num">samples</th><th class="num">p50</th><th class="num">p90</th><th class="num">p99</th><th style="width:34%">p50 · p99</th></tr></thead><tbody>${rows.map((r) => `
      <tr><td>${esc(names[r.stage] || r.stage)}</td><td class="num">${fmt.int(r.samples)}</td><td class="num">${fmt.secs(r.p50_s)}</td>
      <td class="num">${fmt.secs(r.p90_s)}</td><td class="num">${fmt.secs(r.p99_s)}</td>
      <td><div class="bar-track" style="position:relative"><div class="bar-fill" style="position:absolute;width:${(100 * Math.max(0, r.p99_s)) / max}%;background:rgba(139,124,255,.35)"></div>
      <div class="bar-fill" style="position:absolute;width:${(100 * Math.max(0, r.p50_s)) / max}%;background:#8b7cff"></div></div></td></tr>`).join("")}</tbody></table>`;
  }

  const KIND_COLORS = [
    [/^openai\.|chat\.completion|^gen_ai|llm/i, "#8b7cff"],
    [/reward/i, "#34d399"],
    [/annotation/i, "#fbbf24"],
    [/operation|tool/i, "#38bdf8"],
    [/exception|error/i, "#f87171"],
  ];
  const kindColor = (name, status) => (status === "ERROR" ? "#f87171" : (KIND_COLORS.find(([re]) => re.test(name)) || [null, "#94a3b8"])[1]);

  function spanTree(body, res) {
    const spans = rowsOf(res);
    if (!spans.length) return empty(body, "No spans stored for this rollout yet");
    const attempts = new Map();
    for (const s of spans) { if (!attempts.has(s.attemptId)) attempts.set(s.attemptId, []); attempts.get(s.attemptId).push(s); }
    const t0 = Math.min(...spans.map((s) => s.startTime));
    const t1 = Math.max(...spans.map((s) => s.startTime + (s.duration || 0)));
    const total = Math.max(t1 - t0, 1e-3);
    const byId = new Map(spans.map((s) => [s.spanID, s]));
    const ordered = [];
    for (const [attemptId, list] of attempts) {
      const children = new Map();
      const roots = [];
      for (const s of list) {
        if (s.parentSpanID && byId.has(s.parentSpanID) && byId.get(s.parentSpanID).attemptId === attemptId) {
          if (!children.has(s.parentSpanID)) children.set(s.parentSpanID, []);
          children.get(s.parentSpanID).push(s);
        } else roots.push(s);
      }
      const order = (a, b) => a.startTime - b.startTime || a.sequenceId - b.sequenceId;
      ordered.push({ attempt: attemptId, count: list.length });
      const walk = (s, depth, prefix, lastChild) => {
        ordered.push({ span: s, depth, twig: depth ? prefix + (lastChild ? "└ " : "├ ") : "" });
        const kids = (children.get(s.spanID) || []).sort(order);
        kids.forEach((k, i) => walk(k, depth + 1, depth ? prefix + (lastChild ? "  " : "│ ") : "", i === kids.length - 1));
      };
      roots.sort(order).forEach((r) => walk(r, 0, "", true));
    }
    if (!ordered.some((o) => o.span && o.span.spanID === state.selectedSpan)) {
      const llm = ordered.find((o) => o.span && /chat\.completion|gen_ai|llm/i.test(o.span.operationName)) || ordered.find((o) => o.span);
      state.selectedSpan = llm.span.spanID;
    }
    const ticks = [0, 0.25, 0.5, 0.75, 1].map((f) => `<span>${fmt.ms(f * total)}</span>`).join("");
    const row = (o, i) => {
      const s = o.span, color = kindColor(s.operationName, s.statusCode), open = s.spanID === state.selectedSpan;
      return `<div class="wf-row${open ? " selected" : ""}" data-span="${esc(s.spanID)}">
          <div class="wf-name"><span class="twig">${esc(o.twig)}</span><span class="kind-dot" style="background:${color}"></span>
            <span class="label" title="${esc(s.operationName)}">${esc(s.operationName)}</span><span class="seq">#${s.sequenceId}</span></div>
          <div class="wf-lane"><div class="wf-bar" style="left:${(100 * (s.startTime - t0)) / total}%;width:${Math.max(0.3, (100 * (s.duration || 0)) / total)}%;background:${color}"></div>
            <span class="wf-dur">${fmt.ms(s.duration)}</span></div></div>${open ? `<div class="wf-detail">${spanDetail(s, t0)}</div>` : ""}`;
    };
    body.innerHTML = `<div class="waterfall">
        <div class="wf-head"><span>${spans.length} spans · ${attempts.size} attempt${attempts.size > 1 ? "s" : ""} · click a span for its attributes</span><span class="ticks">${ticks}</span></div>
        ${ordered.map((o, i) => (o.attempt !== undefined ? `<div class="wf-attempt">attempt <b>${esc(o.attempt)}</b> · ${o.count} spans</div>` : row(o, i))).join("")}
      </div>`;
    body.querySelectorAll(".wf-row").forEach((r) => r.addEventListener("click", () => {
      state.selectedSpan = state.selectedSpan === r.dataset.span ? "" : r.dataset.span;
      spanTree(body, res);
    }));
  }

  function shortValue(v) {
    const text = String(v ?? "");
    if (text.length <= 240) return esc(text);
    const list = text.startsWith("[") ? (() => { try { return JSON.parse(text); } catch (e) { return null; } })() : null;
    const note = Array.isArray(list) ? `${list.length} values` : `${text.length} characters`;
    return `${esc(text.slice(0, 200))}<span class="more">… (${note})</span>`;
  }

  function spanDetail(s, t0) {
    const kv = (entries) => entries.length
      ? `<div class="kv">${entries.map(([k, v]) => `<div class="k">${esc(k)}</div><div class="v" title="${esc(String(v ?? "").slice(0, 2000))}">${shortValue(v)}</div>`).join("")}</div>`
      : `<div class="none">none</div>`;
    const attrs = (s.tags || []).map((t) => [t.key, t.value]).sort((a, b) => a[0].localeCompare(b[0]));
    const resource = (s.serviceTags || []).map((t) => [t.key, t.value]).sort((a, b) => a[0].localeCompare(b[0]));
    const facts = [["span", s.spanID], ["parent", s.parentSpanID || "–"], ["trace", s.traceID], ["sequence id", s.sequenceId],
      ["start", `+${fmt.ms(s.startTime - t0)}`], ["duration", fmt.ms(s.duration)],
      ["status", s.statusCode + (s.statusMessage ? `: ${s.statusMessage}` : "")], ["kind", s.kind || "–"]];
    return `<div class="facts-row">${facts.map(([k, v]) => `<span><em>${esc(k)}</em> ${esc(v)}</span>`).join("")}</div>
      <h5>Attributes · ${attrs.length}</h5>${kv(attrs)}<h5>Resource · ${resource.length}</h5>${kv(resource)}`;
  }

  const VIEWS = {
    rollout_rates: { span: 12, render: tiles({
      rollouts: { label: "Rollouts", fmt: fmt.int },
      in_flight: { label: "In flight", fmt: fmt.int },
      success_rate: { label: "Succeeded", fmt: fmt.pct, tone: (v) => (v >= 0.9 ? "good" : v < 0.5 ? "bad" : "warn") },
      failure_rate: { label: "Failed", fmt: fmt.pct, tone: (v) => (v > 0.1 ? "bad" : "") },
      cancel_rate: { label: "Cancelled", fmt: fmt.pct },
      retry_rate: { label: "Retried", fmt: fmt.pct, tone: (v) => (v > 0.1 ? "warn" : "") },
    }) },
    throughput: { span: 12, render: tiles({
      rollouts_per_s_1m: { label: "Rollouts/s · last minute", fmt: (v) => `${fmt.rate(v)}<small>/s</small>` },
      spans_per_s_1m: { label: "Spans/s · last minute", fmt: (v) => `${fmt.rate(v)}<small>/s</small>` },
      rollouts_per_s: { label: "Rollouts/s · whole run", fmt: (v) => `${fmt.rate(v)}<small>/s</small>` },
      spans_per_s: { label: "Spans/s · whole run", fmt: (v) => `${fmt.rate(v)}<small>/s</small>` },
      run_seconds: { label: "Run time", fmt: (v) => fmt.secs(v) },
    }) },
    rollout_outcomes: { span: 6, render: statusBars },
    throughput_over_time: { span: 6, render: lines([{ col: "rollouts_per_s", label: "rollouts/s", fmt: fmt.rate }, { col: "spans_per_s", label: "spans/s", fmt: fmt.rate }]) },
    stage_latency: { span: 6, render: latencyTable },
    dead_letters_by_reason: { span: 6, render: table(null, { empty: "No dead letters: every record was processed" }) },
    accuracy_by_policy_version: { span: 12, render: accuracyColumns },
    reward_by_policy_version: { span: 6, render: rewardColumns },
    reward_over_time: { span: 6, render: lines([{ col: "mean_final_reward", label: "mean final reward" },
      { col: "trajectories", label: "trajectories in the last bucket", fmt: fmt.int, legendOnly: true }]) },
    reward_by_resources_version: { span: 12, render: table() },
    training_progress: { span: 12, render: multiples("step", [
      { col: "loss", label: "loss" }, { col: "reward_mean", label: "batch reward (mean)" }, { col: "kl", label: "KL" },
      { col: "entropy", label: "entropy" }, { col: "staleness_mean", label: "staleness (versions behind)" },
      { col: "publish_seconds", label: "publish time", fmt: fmt.secs },
    ]) },
    learning_signal: { span: 12, render: multiples("step", [
      { col: "zero_variance_fraction", label: "groups without signal (fraction)" }, { col: "signal_groups", label: "groups with signal", fmt: fmt.int },
      { col: "effective_batch_size", label: "rows with non-zero advantage", fmt: fmt.int }, { col: "grad_norm", label: "gradient norm" },
    ]) },
    trajectory_aggregation: { span: 12, render: multiples("step", [
      { col: "merge_rate", label: "calls merged (fraction)" }, { col: "prefix_breaks", label: "prefix breaks", fmt: fmt.int },
      { col: "learner_tokens", label: "learner tokens", fmt: fmt.int }, { col: "tokens_per_row", label: "tokens per row", fmt: fmt.int },
    ]) },
    prefix_breaks: { span: 12, render: table(null, { link: "rollout_id", empty: "No prefix breaks: every call extended the previous one" }) },
    recent_rollouts: { span: 12, render: table(null, { link: "rollout_id", badges: ["status"] }) },
    rollout_outcomes_over_time: { span: 6, render: lines([{ col: "succeeded", fmt: fmt.int }, { col: "failed", fmt: fmt.int }, { col: "cancelled", fmt: fmt.int }, { col: "retried", fmt: fmt.int }], { empty: "No finished rollouts in this range yet" }) },
    top_failing_tasks: { span: 6, render: table(null, { empty: "No failing tasks" }) },
    workers: { span: 12, render: table(null, { badges: ["status"] }) },
    spans_over_time: { span: 6, render: lines([{ col: "spans", fmt: fmt.int }, { col: "rollouts", fmt: fmt.int }]) },
    spans_per_rollout_summary: { span: 6, render: tiles({
      rollouts: { label: "Rollouts with spans", fmt: fmt.int }, spans: { label: "Spans", fmt: fmt.int },
      mean_spans: { label: "Mean per rollout", fmt: (v) => fmt.num(v) }, p50_spans: { label: "Median", fmt: fmt.int },
      p99_spans: { label: "p99", fmt: fmt.int }, max_spans: { label: "Max", fmt: fmt.int },
    }) },
    spans_per_rollout: { span: 6, render: table(null, { link: "rollout_id" }) },
    token_counts: { span: 6, render: table() },
    tokens_over_time: { span: 12, render: lines([{ col: "prompt_tokens", label: "prompt tokens", fmt: fmt.int }, { col: "response_tokens", label: "response tokens", fmt: fmt.int }]) },
    rollout_attempts: { span: 12, render: table(null, { badges: ["status"], empty: "No attempt events for this rollout yet" }) },
    rollout_spans: { span: 12, render: spanTree },
    rollout_triplets: { span: 12, render: table(null, { empty: "No triplets: the attempt has not finished, or its spans hold no LLM call" }) },
  };

  function empty(body, text) { body.innerHTML = `<div class="empty">${esc(text)}</div>`; body.closest(".card").dataset.state = "empty"; }

  /* ------------------------------------------------------------ state, fetching, routing */
  const state = { layout: null, panels: {}, view: null, rollout: null, paused: false, timer: null, inflight: false, selectedSpan: null };
  const $ = (sel) => document.querySelector(sel);

  async function api(path) {
    const response = await fetch(path, { credentials: "same-origin", headers: { Accept: "application/json" } });
    const doc = await response.json().catch(() => ({ error: `HTTP ${response.status}` }));
    if (!response.ok) throw Object.assign(new Error(doc.error || `HTTP ${response.status}`), { status: response.status });
    return doc;
  }

  function route() {
    const m = location.hash.match(/^#\/(overview|rewards|training|rollouts|rollout)(?:\/([\w-]+))?/);
    const view = m ? m[1] : "overview";
    state.rollout = view === "rollout" ? m[2] : null;
    if (view !== "rollout") state.selectedSpan = null;
    state.view = view;
    document.querySelectorAll(".tabs a").forEach((a) => a.classList.toggle("active", a.dataset.view === view || (view === "rollout" && a.dataset.view === "rollouts")));
    render();
    refresh();
  }

  function sectionsOf(view) {
    if (view === "rollout") return ["rollout"];
    return (TABS.find((t) => t.key === view) || TABS[0]).sections;
  }

  function render() {
    const main = $("#view");
    const sections = state.layout.sections.filter((s) => sectionsOf(state.view).includes(s.key));
    let html = "";
    if (state.view === "rollout") {
      html += `<div class="detail-head"><a class="back" href="#/rollouts">← Rollouts</a><h1>${esc(state.rollout)}</h1><span id="rollout-status"></span><div class="facts" id="rollout-facts"></div></div>`;
    }
    for (const section of sections) {
      const title = section.key === "rollout" ? "" : `<h2>${esc(section.title)}</h2>`;
      const tools = section.key === "rollouts"
        ? `<form class="open-rollout" id="open-rollout" style="margin-bottom:10px">Open a rollout <input type="text" name="id" placeholder="ro-0123456789ab" autocomplete="off"><button>Open</button></form>` : "";
      html += `<section class="section" data-section="${section.key}">${title}${tools}<div class="grid">${section.panels.map(card).join("")}</div></section>`;
    }
    main.innerHTML = html;
    main.querySelectorAll(".sql-toggle").forEach((b) => b.addEventListener("click", () => b.closest(".card").querySelector("pre.sql").classList.toggle("hidden")));
    const form = $("#open-rollout");
    if (form) form.addEventListener("submit", (ev) => { ev.preventDefault(); const id = form.id.value.trim(); if (id) location.hash = `#/rollout/${id}`; });
  }

  function card(panel) {
    const view = VIEWS[panel.name] || { span: 6, render: table() };
    return `<article class="card span-${view.span}" data-panel="${panel.name}" data-state="loading" data-rows="0">
      <header><h3>${esc(panel.title)}</h3><span class="info" title="${esc(panel.description)}">i</span>
        <span class="meta" data-meta></span><button class="sql-toggle" type="button" title="the panel's SQL (the Grafana panel's query)">SQL</button></header>
      <div class="body"><div class="loading">loading…</div></div>
      <pre class="sql hidden">${esc(panel.sql)}\n\n-- agl-stream sql --saved ${esc(panel.name)}${panel.variables.length ? " " + panel.variables.map((v) => `-p ${v}=...`).join(" ") : ""}</pre></article>`;
  }

  async function refresh() {
    if (state.inflight || !state.layout) return;
    const names = [...document.querySelectorAll("[data-panel]")].map((n) => n.dataset.panel);
    if (!names.length) return;
    const range = +$("#range").value;
    const now = Date.now() / 1000;
    const params = new URLSearchParams({ names: names.join(","), from: range ? String(Math.floor(now - range)) : "0", to: String(Math.ceil(now + 60)) });
    if (state.rollout) params.set("rollout_id", state.rollout);
    state.inflight = true;
    try {
      const doc = await api(`/api/panels?${params}`);
      showSource(doc.source);
      for (const [name, res] of Object.entries(doc.panels)) draw(name, res);
      if (state.view === "rollout") rolloutFacts(doc.panels);
      setLive("ok", `live · ${new Date().toLocaleTimeString("en-GB", { hour12: false })}`);
      $("#banner").classList.add("hidden");
    } catch (err) {
      setLive("down", err.status === 503 ? "store unavailable" : "disconnected");
      const banner = $("#banner");
      banner.textContent = err.status === 401 || err.status === 403 ? `${err.message} Reopen the address agl-stream dashboard printed (it carries ?token=...).` : err.message;
      banner.classList.remove("hidden");
    } finally {
      state.inflight = false;
    }
  }

  function draw(name, res) {
    const node = document.querySelector(`[data-panel="${name}"]`);
    if (!node) return;
    const body = node.querySelector(".body");
    node.querySelector("[data-meta]").textContent = res.ms !== undefined ? `${res.ms} ms` : "";
    if (res.error) {
      node.dataset.state = "error";
      body.innerHTML = `<div class="failed">${esc(res.error)}</div>`;
      return;
    }
    node.dataset.state = "ok";
    node.dataset.rows = String(res.rows.length);
    try {
      (VIEWS[name] || { render: table() }).render(body, res);
    } catch (err) {
      node.dataset.state = "error";
      body.innerHTML = `<div class="failed">cannot draw this panel: ${esc(err.message)}</div>`;
    }
  }

  function rolloutFacts(panels) {
    const attempts = rowsOf(panels.rollout_attempts);
    const last = attempts[attempts.length - 1];
    $("#rollout-status").innerHTML = last ? badge(last.status) : "";
    const spans = panels.rollout_spans && panels.rollout_spans.rows ? panels.rollout_spans.rows.length : 0;
    const triplets = rowsOf(panels.rollout_triplets);
    const reward = triplets.length ? triplets[triplets.length - 1].final_reward : null;
    $("#rollout-facts").innerHTML = `<span><b>${attempts.length}</b> attempt${attempts.length === 1 ? "" : "s"}</span><span><b>${spans}</b> spans</span>
      <span><b>${triplets.length}</b> triplets</span><span>final reward <b>${reward === null || reward === undefined ? "–" : fmt.num(reward)}</b></span>`;
  }

  function showSource(source) {
    if (!source) return;
    $("#source").textContent = source.where;
    $("#source").title = `reading ${source.where}`;
  }

  function setLive(kind, text) {
    const live = $("#live");
    live.className = `live ${state.paused ? "paused" : kind}`;
    $("#live-text").textContent = state.paused ? "paused" : text;
  }

  async function start() {
    if (new URLSearchParams(location.search).has("token")) history.replaceState(null, "", location.pathname + location.hash);
    $("#tabs").innerHTML = TABS.map((t) => `<a href="#/${t.key}" data-view="${t.key}">${t.title}</a>`).join("");
    try {
      state.layout = await api("/api/layout");
    } catch (err) {
      setLive("down", "unavailable");
      $("#banner").textContent = err.message;
      $("#banner").classList.remove("hidden");
      return;
    }
    showSource(state.layout.source);
    $("#range").addEventListener("change", refresh);
    $("#live").addEventListener("click", () => { state.paused = !state.paused; setLive("ok", "resumed"); if (!state.paused) refresh(); });
    window.addEventListener("hashchange", route);
    state.timer = setInterval(() => { if (!state.paused && !document.hidden) refresh(); }, 1000 * (state.layout.refresh_seconds || 5));
    route();
  }

  start();
})();

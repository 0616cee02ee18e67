/* rollout-cli report page: plots and tables from the embedded data (no network). */
(function () {
  "use strict";
  var DATA = JSON.parse(document.getElementById("report-data").textContent);
  var SPLITS = Object.keys(DATA.splits);
  var state = { split: SPLITS[0], step: null, rollout: null, group: null };
  var CONFIG = { displaylogo: false, responsive: true, modeBarButtonsToRemove: ["lasso2d", "select2d"] };
  var COLORS = ["#2f81f7", "#d4731c", "#1a7f37", "#8250df", "#cf222e"];

  function $(id) { return document.getElementById(id); }
  function el(tag, attrs) {
    var e = document.createElement(tag);
    if (attrs) for (var k in attrs) {
      if (k === "text") e.textContent = attrs[k];
      else if (k === "cls") e.className = attrs[k];
      else e.setAttribute(k, attrs[k]);
    }
    for (var i = 2; i < arguments.length; i++) {
      var c = arguments[i];
      if (c == null) continue;
      e.appendChild(typeof c === "string" ? document.createTextNode(c) : c);
    }
    return e;
  }
  function clear(e) { while (e.firstChild) e.removeChild(e.firstChild); return e; }
  var NOT_RECORDED = "not recorded";  // a reward the framework did not record (inspect's wording)

  function versionsText(p) {  // a step's weight versions, each with the samples holding it
    var v = p.weight_versions || {}, ks = Object.keys(v);
    if (!ks.length) return "";
    return "; weight versions " + ks.map(function (k) { return k + " (" + v[k] + ")"; }).join(", ") +
      (p.multi_version_samples ? ", " + p.multi_version_samples + " sample(s) of more than one" : "");
  }

  function fmt(v) {
    if (v === null || v === undefined) return "-";
    if (typeof v === "number") {
      if (Number.isInteger(v)) return String(v);
      return Math.abs(v) < 1e6 ? String(+v.toPrecision(4)) : v.toExponential(3);
    }
    if (typeof v === "boolean") return v ? "yes" : "no";
    if (Array.isArray(v)) return "[" + v.map(fmt).join(", ") + "]";
    return String(v);
  }
  function sd() { return DATA.splits[state.split]; }
  function layout(title, xtitle, ytitle, extra) {
    var l = {
      title: { text: title, font: { size: 14 }, x: 0.02 },
      margin: { l: 56, r: 16, t: 36, b: 78 },
      xaxis: { title: { text: xtitle }, zeroline: false },
      yaxis: { title: { text: ytitle }, zeroline: false },
      legend: { orientation: "h", y: -0.3, yanchor: "top", font: { size: 11 } },
      hovermode: "x unified",
      font: { family: "system-ui, sans-serif", size: 12 },
      paper_bgcolor: "#fff", plot_bgcolor: "#fff"
    };
    for (var k in extra || {}) l[k] = extra[k];
    return l;
  }

  // ------------------------------------------------------------------ header, tabs, summary
  function renderHeader() {
    $("inputs").textContent = "inputs: " + DATA.inputs.join(", ");
    var nav = clear($("splits"));
    SPLITS.forEach(function (s) {
      var b = el("button", { type: "button", role: "tab", "data-split": s, "aria-selected": String(s === state.split), text: s });
      b.addEventListener("click", function () { selectSplit(s); });
      nav.appendChild(b);
    });
    $("footer").textContent = DATA.generator + " \u00b7 plotly.js " + DATA.plotly +
      " \u00b7 every number is from the inspect library (rollout-cli inspect --json)";
  }

  function renderSummary() {
    var s = sd().inspect.summary;
    var box = clear($("summary"));
    var what = s.input === "converted" ? "converted output" : "dumps";
    box.appendChild(el("p", { cls: "muted", text: s.split + " split of " + what + ": " + s.files + " file(s)" }));
    var cards = el("div", { cls: "cards" });
    function card(k, v) { cards.appendChild(el("div", { cls: "card" }, el("div", { cls: "v", text: fmt(v) }), el("div", { cls: "k", text: k }))); }
    card("steps", s.steps); card("samples", s.samples); card("kept rows", s.rows); card("rejected", s.rejected);
    card("rollouts", s.rollouts); card("prompt groups", s.prompt_groups); card("response tokens", s.tokens.response);
    card("loss-mask sum", s.tokens.mask_sum); card("truncation rate", s.truncation_rate);
    var unrecorded = s.rows && s.rewards_not_recorded === s.rows;  // the framework wrote no rewards
    card("raw reward mean", unrecorded ? NOT_RECORDED : s.rewards.raw_reward.mean);
    card("reward mean", unrecorded ? NOT_RECORDED : s.rewards.reward.mean);
    card("anomalies", Object.values(s.anomaly_counts).reduce(function (a, b) { return a + b; }, 0));
    if (s.not_token_exact) card("rows not token-exact (text tokenized by --tokenizer)", s.not_token_exact);
    box.appendChild(cards);
    s.notes.forEach(function (n) { box.appendChild(el("p", { cls: "muted", text: "note: " + n })); });
  }

  // ------------------------------------------------------------------ trends
  function band(x, mean, std, name, color) {
    var up = [], lo = [];
    for (var i = 0; i < x.length; i++) {
      var ok = mean[i] != null && std[i] != null;
      up.push(ok ? mean[i] + std[i] : null); lo.push(ok ? mean[i] - std[i] : null);
    }
    return [
      { x: x, y: up, mode: "lines", line: { width: 0 }, hoverinfo: "skip", showlegend: false, legendgroup: name },
      { x: x, y: lo, mode: "lines", line: { width: 0 }, fill: "tonexty", fillcolor: color + "22", name: name + " \u00b1 std",
        hoverinfo: "skip", legendgroup: name },
      { x: x, y: mean, mode: "lines+markers", line: { color: color }, name: name + " mean", legendgroup: name,
        customdata: std, hovertemplate: "%{y:.4g} (std %{customdata:.4g})" }
    ];
  }

  function renderTrends() {
    var d = sd(), per = d.inspect.summary.per_step;
    var x = per.map(function (p) { return p.step; });
    var t = per.map(function (p) { return d.trends[String(p.step)] || {}; });
    function col(arr, k) { return arr.map(function (r) { return r[k] === undefined ? null : r[k]; }); }
    var mode = x.length > 60 ? "lines" : "lines+markers";
    var stepAxis = x.length <= 20 ? { title: { text: "step" }, tickvals: x, zeroline: false } : { title: { text: "step" }, zeroline: false };
    var reward = band(x, col(per, "raw_reward_mean"), col(t, "raw_reward_std"), "raw reward", COLORS[1])
      .concat(band(x, col(per, "reward_mean"), col(per, "reward_std"), "reward", COLORS[0]));
    Plotly.react("plot-reward", reward, layout("Reward: raw and post-processed", "step", "reward", { xaxis: stepAxis }), CONFIG);
    Plotly.react("plot-length", [
      { x: x, y: col(t, "response_length_p50"), mode: mode, name: "median", line: { color: COLORS[0] } },
      { x: x, y: col(t, "response_length_p90"), mode: mode, name: "p90", line: { color: COLORS[1] } },
      { x: x, y: col(per, "response_length_mean"), mode: mode, name: "mean", line: { color: COLORS[2], dash: "dot" } }
    ], layout("Response length (tokens)", "step", "tokens", { xaxis: stepAxis }), CONFIG);
    Plotly.react("plot-rates", [
      { x: x, y: col(per, "truncation_rate"), mode: mode, name: "truncation rate", line: { color: COLORS[4] } },
      { x: x, y: col(t, "zero_variance_share"), mode: mode, name: "zero-variance group share", line: { color: COLORS[3] } }
    ], layout("Truncation and zero-variance groups", "step", "share", { xaxis: stepAxis, yaxis: { title: { text: "share" }, rangemode: "tozero" } }), CONFIG);
    Plotly.react("plot-spr", [
      { x: x, y: col(t, "samples_per_rollout_mean"), mode: mode, name: "samples per rollout (mean)", line: { color: COLORS[0] } },
      { x: x, y: col(t, "samples_per_rollout_max"), mode: mode, name: "samples per rollout (max)", line: { color: COLORS[1], dash: "dot" } },
      { x: x, y: col(per, "rollouts"), mode: mode, name: "rollouts", yaxis: "y2", line: { color: COLORS[2] } }
    ], layout("Samples per rollout", "step", "samples", {
      xaxis: stepAxis,
      yaxis: { title: { text: "samples" }, rangemode: "tozero" },
      yaxis2: { title: { text: "rollouts" }, overlaying: "y", side: "right", rangemode: "tozero", tickformat: "d", showgrid: false },
      margin: { l: 56, r: 56, t: 36, b: 78 }
    }), CONFIG);
    // a vision-language run: its raw images and processor patches per step (inspect's per-step counts)
    var media = $("plot-media");
    if (per.some(function (p) { return p.images || p.patches; })) {
      media.style.display = "";
      Plotly.react("plot-media", [
        { x: x, y: col(per, "patches"), mode: mode, name: "patches", line: { color: COLORS[0] } },
        { x: x, y: col(per, "images"), mode: mode, name: "images", yaxis: "y2", line: { color: COLORS[1] } }
      ], layout("Images and patches", "step", "patches", {
        xaxis: stepAxis,
        yaxis: { title: { text: "patches" }, rangemode: "tozero" },
        yaxis2: { title: { text: "images" }, overlaying: "y", side: "right", rangemode: "tozero", tickformat: "d", showgrid: false },
        margin: { l: 56, r: 56, t: 36, b: 78 }
      }), CONFIG);
    } else {
      media.style.display = "none";
    }
    ["plot-reward", "plot-length", "plot-rates", "plot-spr"].forEach(function (id) {
      var gd = $(id);
      if (gd.removeAllListeners) gd.removeAllListeners("plotly_click");
      gd.on("plotly_click", function (ev) {
        if (ev.points && ev.points.length) { selectDrill(ev.points[0].x, null, null, true); }
      });
    });
  }

  // ------------------------------------------------------------------ distributions
  function histTrace(h, name, color) {
    var x = h.x.map(function (v) { return h.w > 0 ? v + h.w / 2 : v; });
    return { type: "bar", x: x, y: h.n, width: h.w > 0 ? h.w * 0.95 : undefined, name: name, marker: { color: color }, opacity: 0.75,
      customdata: h.x.map(function (v) { return h.w > 0 ? fmt(v) + " \u2013 " + fmt(v + h.w) : fmt(v); }),
      hovertemplate: "%{customdata}: %{y}<extra>" + name + "</extra>" };
  }
  function countTrace(c, name, color) {
    var ks = Object.keys(c).map(Number).sort(function (a, b) { return a - b; });
    return { type: "bar", x: ks, y: ks.map(function (k) { return c[String(k)]; }), name: name, marker: { color: color },
      hovertemplate: "size %{x}: %{y}<extra></extra>" };
  }
  function renderDistributions() {
    var d = sd().distributions;
    Plotly.react("dist-length", [histTrace(d.response_length, "samples", COLORS[0])],
      layout("Response length", "tokens", "samples", { hovermode: "closest", showlegend: false }), CONFIG);
    Plotly.react("dist-reward", [histTrace(d.raw_reward, "raw reward", COLORS[1]), histTrace(d.reward, "reward", COLORS[0])],
      layout("Reward: raw and post-processed", "reward", "samples", { hovermode: "closest", barmode: "overlay" }), CONFIG);
    Plotly.react("dist-groups", [countTrace(d.group_sizes, "groups", COLORS[2])],
      layout("Prompt-group sizes", "samples in the group", "groups", { hovermode: "closest", showlegend: false, xaxis: { dtick: 1, title: { text: "samples in the group" } } }), CONFIG);
    Plotly.react("dist-spr", [countTrace(d.samples_per_rollout, "rollouts", COLORS[3])],
      layout("Samples per rollout", "samples in the rollout", "rollouts", { hovermode: "closest", showlegend: false, xaxis: { dtick: 1, title: { text: "samples in the rollout" } } }), CONFIG);
  }

  // ------------------------------------------------------------------ anomalies
  function whereText(w) {
    if (!w || !w.length) return "-";
    var f = w[0], s = f.file;
    ["line", "row", "sample"].forEach(function (k) { if (k in f) s += ":" + k + " " + f[k]; });
    return s + (w.length > 1 ? " (+" + (w.length - 1) + ")" : "");
  }
  function anomalyId(i) { return "anomaly-" + state.split + "-" + i; }
  function renderAnomalies() {
    var ins = sd().inspect, counts = ins.summary.anomaly_counts;
    var box = clear($("anomaly-counts"));
    var kinds = Object.keys(counts);
    if (!kinds.length) box.appendChild(el("span", { cls: "muted", text: "none" }));
    kinds.forEach(function (k) { box.appendChild(el("span", { cls: "badge", text: k + " " + counts[k] })); });
    var sel = $("anomaly-kind"), keep = sel.value;
    while (sel.options.length > 1) sel.remove(1);
    kinds.forEach(function (k) { sel.appendChild(el("option", { value: k, text: k })); });
    sel.value = kinds.indexOf(keep) >= 0 ? keep : "";
    var body = clear(document.querySelector("#anomaly-table tbody"));
    ins.anomalies.forEach(function (a, i) {
      if (sel.value && a.kind !== sel.value) return;
      var id = anomalyId(i);
      var tr = el("tr", { id: id });
      tr.appendChild(el("td", null, el("a", { href: "#" + id, text: String(i + 1) })));
      tr.appendChild(el("td", { cls: "level-" + a.level, text: a.level }));
      tr.appendChild(el("td", { text: a.kind }));
      var stepTd = el("td", { cls: "num" });
      if (a.step != null) stepTd.appendChild(drillLink(a.step, null, null, String(a.step)));
      tr.appendChild(stepTd);
      var ridTd = el("td", { cls: "num" });
      if (a.rollout_id != null && a.step != null) ridTd.appendChild(drillLink(a.step, a.rollout_id, null, String(a.rollout_id)));
      else if (a.group_index != null && a.step != null) ridTd.appendChild(drillLink(a.step, null, a.group_index, "group " + a.group_index));
      tr.appendChild(ridTd);
      tr.appendChild(el("td", { text: whereText(a.where), title: (a.where || []).map(function (w) { return whereText([w]); }).join("\n") }));
      tr.appendChild(el("td", { text: a.message }));
      body.appendChild(tr);
    });
    var total = kinds.reduce(function (s, k) { return s + counts[k]; }, 0);
    $("anomaly-note").textContent = ins.anomalies.length < total
      ? ins.anomalies.length + " of " + total + " listed (at most --max-anomalies of each kind; the counts are complete)" : "";
  }


  // ------------------------------------------------------------------ trainer (audit)
  var TR = DATA.trainer || null;
  function trainerShown() { return TR != null && state.split === "train"; }
  function divergencesOf(step, rid) {
    return TR ? TR.audit.divergences.filter(function (r) { return r.step === step && r.rollout_id === rid; }) : [];
  }
  function divText(v) {
    if (v === null || v === undefined) return "-";
    if (typeof v === "object" && !Array.isArray(v)) return Object.keys(v).map(function (k) { return k + " " + fmt(v[k]); }).join(", ");
    return fmt(v);
  }
  function divField(r) { return r.field + (r.index != null ? "[" + r.index + "]" : "") + (r.differing > 1 ? " (" + r.differing + " differ)" : ""); }
  function renderTrainer() {
    var sec = $("trainer");
    sec.hidden = !trainerShown();
    if (sec.hidden) return;
    var a = TR.audit, s = a.summary;
    var fields = Object.keys(s.divergences_by_field).map(function (k) { return k + " " + s.divergences_by_field[k]; }).join(", ");
    $("trainer-summary").textContent = "audit against " + DATA.train_inputs.join(", ") + ": " + s.paired_steps +
      " paired step(s), " + s.samples + " paired samples, " + s.divergences + " divergence(s)" + (fields ? " (" + fields + ")" : "") +
      ". d = train log-prob \u2212 rollout log-prob, over the tokens the trainer trained on (loss mask 1): masked positions never count.";
    renderRules(a.rules || []);
    var steps = a.steps.filter(function (st) { return st.mismatch; });
    var x = steps.map(function (st) { return st.step; });
    function m(k) { return steps.map(function (st) { return st.mismatch[k]; }); }
    var mode = x.length > 60 ? "lines" : "lines+markers";
    Plotly.react("plot-mismatch", [
      { x: x, y: m("mean_abs_diff"), mode: mode, name: "mean |d|", line: { color: COLORS[0] } },
      { x: x, y: m("max_abs_diff"), mode: mode, name: "max |d|", yaxis: "y2", line: { color: COLORS[4], dash: "dot" } },
      { x: x, y: m("k3"), mode: mode, name: "k3", line: { color: COLORS[2] } }
    ], layout("Train-inference mismatch per step", "step", "mean |d|, k3", {
      xaxis: x.length <= 20 ? { title: { text: "step" }, tickvals: x, zeroline: false } : { title: { text: "step" }, zeroline: false },
      yaxis: { title: { text: "mean |d|, k3" }, rangemode: "tozero" },
      yaxis2: { title: { text: "max |d|" }, overlaying: "y", side: "right", rangemode: "tozero", showgrid: false },
      margin: { l: 56, r: 56, t: 36, b: 78 }
    }), CONFIG);
    var gd = $("plot-mismatch");
    if (gd.removeAllListeners) gd.removeAllListeners("plotly_click");
    gd.on("plotly_click", function (ev) { if (ev.points && ev.points.length) selectDrill(ev.points[0].x, null, null, true); });
    Plotly.react("dist-d", [histTrace(TR.d_hist, "tokens", COLORS[3])],
      layout("Distribution of d over trained tokens", "d", "tokens", { hovermode: "closest", showlegend: false, yaxis: { type: "log", title: { text: "tokens" } } }), CONFIG);
    var body = clear(document.querySelector("#trainer-table tbody"));
    a.steps.forEach(function (st) {
      var mm = st.mismatch || {}, tr = el("tr");
      var td0 = el("td");
      td0.appendChild(st.rollout_file ? drillLink(st.step, null, null, String(st.step)) : document.createTextNode(String(st.step)));
      tr.appendChild(td0);
      [st.samples.paired, mm.tokens, mm.mean_abs_diff, mm.max_abs_diff, mm.k1, mm.k3, mm.ratio_above_2, mm["ratio_below_0.5"], st.divergences]
        .forEach(function (v) { tr.appendChild(el("td", { cls: "num", text: fmt(v) })); });
      body.appendChild(tr);
    });
    var dbody = clear(document.querySelector("#divergence-table tbody"));
    a.divergences.forEach(function (r) {
      var tr = el("tr", { cls: "divergence" });
      tr.appendChild(el("td", { cls: "num", text: String(r.step) }));
      var rt = el("td", { cls: "num" });
      if (r.rollout_id != null) rt.appendChild(drillLink(r.step, r.rollout_id, null, String(r.rollout_id)));
      else rt.textContent = r.rollout_position == null ? "whole step" : "position " + r.rollout_position;
      tr.appendChild(rt);
      tr.appendChild(el("td", { text: divField(r) }));
      tr.appendChild(el("td", { text: divText(r.expected) }));
      tr.appendChild(el("td", { text: divText(r.got) }));
      tr.appendChild(el("td", { text: (r.rollout || "-") + (r.train ? " \u00b7 train " + r.train : "") }));
      dbody.appendChild(tr);
    });
    $("divergence-note").textContent = a.divergences.length < s.divergences
      ? a.divergences.length + " of " + s.divergences + " listed (at most --max-anomalies per step; the counts are complete)"
      : (s.divergences ? "" : "no divergence: the trainer trained on what the rollout dumps determine");
  }

  // the rules the trainer ran where they are not the expected ones: audit's `rules`, its numbers
  function g3(x) { return x == null ? "-" : String(Number(x.toPrecision(3))); }
  function someOf(ps) { return ps.slice(0, 6).join(", ") + (ps.length > 6 ? ", ..." : ""); }
  var MOVERS_SHOWN = 3;
  function ruleText(e) {
    var t = "step " + e.step + ": " + e.field + ": the trainer ran " + e.trainer_rule + " (" + e.source +
      (e.case ? "; " + e.case : "") + "), not " + e.expected_rule + ": " + e.samples + " sample(s) differ (positions " + someOf(e.positions) + ")";
    if (e.field === "reward") {
      if (e.max_abs_delta != null) t += ", max |delta| " + g3(e.max_abs_delta);
      var flips = e.cost.advantage_sign_changes, mixed = e.cost.groups_normalised_with_others;
      t += "; " + flips.length + " advantage(s) change sign";
      if (mixed.length) t += "; prompt groups " + someOf(mixed) + " normalised together with other prompts' samples";
      return t;
    }
    var lw = e.cost.loss_weight;
    if (!lw.length) return t + "; no rollout's loss weight moves";
    return t + "; loss weight, expected \u2192 trainer: " + lw.slice(0, MOVERS_SHOWN).map(function (r) {
      var mode = Object.keys(r.share).reduce(function (b, m) {
        return Math.abs(r.trainer_share[m] - r.share[m]) > Math.abs(r.trainer_share[b] - r.share[b]) ? m : b; });
      return "rollout " + r.rollout_id + " " + g3(r.share[mode]) + " \u2192 " + g3(r.trainer_share[mode]) + " (" + mode + ")";
    }).join(", ") + (lw.length > MOVERS_SHOWN ? " and " + (lw.length - MOVERS_SHOWN) + " more" : "");
  }
  function renderRules(rules) {
    var ul = clear($("trainer-rules"));
    ul.hidden = !rules.length;
    rules.forEach(function (e) { ul.appendChild(el("li", { text: ruleText(e) })); });
  }

  var D_SCALE = 0.25;  // |d| drawn at full colour (an importance ratio of e^0.25 = 1.28)
  function dColor(d, trained) {
    if (!trained) return "rgb(208,215,222)";
    if (d === null || d === undefined) return "rgb(255,255,255)";
    var t = Math.min(Math.abs(d) / D_SCALE, 1), c = d > 0 ? [207, 34, 46] : [9, 105, 218];
    return "rgb(" + c.map(function (v) { return Math.round(255 + (v - 255) * Math.max(t, 0.08)); }).join(",") + ")";
  }
  function dStrip(tok) {
    var n = tok.d.length, cv = el("canvas", { cls: "dstrip", width: String(Math.max(n, 1)), height: "1" });
    var g = cv.getContext("2d"), counted = 0, mx = 0;
    for (var i = 0; i < n; i++) {
      g.fillStyle = dColor(tok.d[i], tok.mask[i]);
      g.fillRect(i, 0, 1, 1);
      if (tok.mask[i] && tok.d[i] != null) { counted++; mx = Math.max(mx, Math.abs(tok.d[i])); }
    }
    cv.setAttribute("data-tokens", String(n));
    cv.setAttribute("data-counted", String(counted));
    cv.setAttribute("data-max-abs-d", String(mx));
    cv.setAttribute("role", "img");
    cv.setAttribute("aria-label", "d per response token: " + counted + " of " + n + " counted, max |d| " + fmt(mx));
    cv.addEventListener("mousemove", function (ev) {
      var r = cv.getBoundingClientRect(), i = Math.min(n - 1, Math.floor((ev.clientX - r.left) / r.width * n));
      cv.title = "response token " + i + ": " + (tok.mask[i] ? "d = " + fmt(tok.d[i]) : "masked (mask 0): not counted");
    });
    return cv;
  }
  function trainerCard(r, k) {
    if (!TR || state.split !== "train") return null;
    var toks = TR.tokens[r.step + ":" + r.rollout_id];
    if (!toks || !toks[k]) return null;
    var tok = toks[k], box = el("div", { cls: "trainer-tokens" });
    box.appendChild(dStrip(tok));
    var mx = 0;
    tok.d.forEach(function (v, i) { if (tok.mask[i] && v != null) mx = Math.max(mx, Math.abs(v)); });
    box.appendChild(el("div", { cls: "mask-legend" }, "d per response token (rollout position " + tok.rollout_position + "):",
      el("span", { cls: "sw dpos" }), "train above rollout", el("span", { cls: "sw dneg" }), "below",
      el("span", { cls: "sw m0" }), "masked by the trainer (never counted) \u00b7 full colour at |d| \u2265 " + D_SCALE + " \u00b7 max |d| " + fmt(mx)));
    return box;
  }
  function rolloutDivergences(step, rid) {
    var list = divergencesOf(step, rid);
    if (!list.length) return null;
    var ul = el("ul", { cls: "divergences" });
    list.forEach(function (r) {
      ul.appendChild(el("li", { cls: "level-error", text: divField(r) + ": expected " + divText(r.expected) + ", got " + divText(r.got) +
        " (" + (r.rollout || "-") + "; train " + (r.train || "-") + ")" }));
    });
    return el("div", null, el("p", { text: "rollout " + step + ":" + rid + ": " + list.length + " divergence(s) from the trainer's data" }), ul);
  }

  // ------------------------------------------------------------------ drill-down
  function hashFor(step, rollout, group) {
    var h = "#" + (rollout != null ? "rollout-" : group != null ? "group-" : "step-") + state.split + "-" + step;
    if (rollout != null) h += "-" + rollout; else if (group != null) h += "-" + group;
    return h;
  }
  function drillLink(step, rollout, group, text) {
    var a = el("a", { href: hashFor(step, rollout, group), text: text });
    return a;
  }
  function stepData(step) { return sd().steps[String(step)]; }

  function fillSelect(sel, values, labels, current) {
    clear(sel);
    values.forEach(function (v, i) { sel.appendChild(el("option", { value: v == null ? "" : String(v), text: labels[i] })); });
    sel.value = current == null ? "" : String(current);
  }

  function selectDrill(step, rollout, group, scroll) {
    var steps = sd().inspect.summary.per_step.map(function (p) { return p.step; });
    if (steps.indexOf(Number(step)) < 0) step = steps[0];
    state.step = Number(step);
    var t = stepData(state.step);
    if (rollout == null && group == null && t && t.rollouts.id.length) rollout = t.rollouts.id[0];
    state.rollout = rollout == null ? null : Number(rollout);
    state.group = rollout == null && group != null ? Number(group) : null;
    renderDrill();
    var h = hashFor(state.step, state.rollout, state.group);
    if (location.hash !== h) history.replaceState(null, "", h);
    if (scroll) $("drilldown").scrollIntoView();
  }

  function renderDrill() {
    var steps = sd().inspect.summary.per_step.map(function (p) { return p.step; });
    fillSelect($("drill-step"), steps, steps.map(String), state.step);
    var t = stepData(state.step), view = clear($("drill-view"));
    if (!t) { view.appendChild(el("p", { cls: "muted", text: "no rows in this step" })); return; }
    var details = sd().details;
    fillSelect($("drill-rollout"), [null].concat(t.rollouts.id), ["-"].concat(t.rollouts.id.map(function (id, i) {
      return id + " (" + t.rollouts.n[i] + (t.rollouts.n[i] === 1 ? " sample" : " samples") + (details[state.step + ":" + id] ? ", mask" : "") + ")";
    })), state.rollout);
    var groups = [], seen = {};
    t.samples.group_index.forEach(function (g) { var k = String(g); if (!(k in seen)) { seen[k] = 1; groups.push(g); } });
    groups.sort(function (a, b) { return (a == null) - (b == null) || a - b; });
    var gvals = groups.filter(function (g) { return g != null; });
    fillSelect($("drill-group"), [null].concat(gvals), ["-"].concat(gvals.map(String)), state.group);
    $("drill-link").setAttribute("href", hashFor(state.step, state.rollout, state.group));
    var p = sd().inspect.summary.per_step.filter(function (q) { return q.step === state.step; })[0] || {};
    var rewards = p.rows && p.rewards_not_recorded === p.rows ? "rewards " + NOT_RECORDED
      : "reward mean " + fmt(p.reward_mean) + ", raw reward mean " + fmt(p.raw_reward_mean);
    $("drill-step-summary").textContent = "step " + state.step + ": " + fmt(p.samples) + " samples, " + fmt(p.rollouts) +
      " rollouts, " + fmt(p.prompt_groups) + " prompt groups, " + rewards + ", truncation rate " + fmt(p.truncation_rate) +
      versionsText(p) + " (" + p.source + ")";

    // the rows of the chosen rollout, or of every rollout of the chosen group
    var S = t.samples, pick = [], start = 0, rids = [];
    t.rollouts.id.forEach(function (id, i) {
      var n = t.rollouts.n[i];
      for (var j = start; j < start + n; j++) {
        if ((state.rollout != null && id === state.rollout) || (state.group != null && S.group_index[j] === state.group)) {
          pick.push(j);
          if (rids.indexOf(id) < 0) rids.push(id);
        }
      }
      start += n;
    });
    var title = state.rollout != null ? "rollout " + state.step + ":" + state.rollout : "prompt group " + state.group + " of step " + state.step;
    view.appendChild(el("h3", { text: title + ": " + pick.length + " sample(s) in " + rids.length + " rollout(s)" }));
    var table = el("table", { id: "drill-table" });
    var cols = ["rollout", "sample_index", "group_index", "status", "reward", "raw_reward", "prompt_length", "response_length", "mask_sum", "truncated", "weight_versions"];
    var hr = el("tr");
    cols.forEach(function (c) { hr.appendChild(el("th", { cls: c === "status" || c === "rollout" ? "" : "num", text: c.replace("_", " ") })); });
    table.appendChild(el("thead", null, hr));
    var tb = el("tbody");
    var rolloutOf = [];
    start = 0;
    t.rollouts.id.forEach(function (id, i) { for (var j = 0; j < t.rollouts.n[i]; j++) rolloutOf[start + j] = id; start += t.rollouts.n[i]; });
    pick.forEach(function (j) {
      var tr = el("tr");
      var none = S.raw_reward[j] === null;  // not recorded by the framework
      var vals = [rolloutOf[j], S.sample_index[j], S.group_index[j], sd().statuses[S.status[j]],
        none ? NOT_RECORDED : S.reward[j], none ? NOT_RECORDED : S.raw_reward[j],
        S.prompt_length[j], S.response_length[j], S.mask_sum[j], S.truncated[j] ? "yes" : "no",
        S.weight_versions ? S.weight_versions[j] : null];
      vals.forEach(function (v, k) {
        var td = el("td", { cls: k === 0 || k === 3 || k === 10 ? "" : "num" });
        if (k === 0 && state.rollout == null) td.appendChild(drillLink(state.step, v, null, String(v)));
        else td.textContent = fmt(v);
        tr.appendChild(td);
      });
      tb.appendChild(tr);
    });
    table.appendChild(tb);
    view.appendChild(el("div", { cls: "table-wrap" }, table));

    rids.forEach(function (rid) {
      var r = details[state.step + ":" + rid];
      if (!r) {
        view.appendChild(el("p", { cls: "muted missing-detail", text: "rollout " + state.step + ":" + rid +
          ": loss-mask positions and text not embedded (the page embeds " + DATA.details_budget +
          " rollouts; raise --details, or run rollout-cli inspect PATH --show " + state.step + ":" + rid + ")" }));
        return;
      }
      if (r.note) view.appendChild(el("p", { cls: "muted", text: "note: " + r.note }));
      var dv = trainerShown() ? rolloutDivergences(state.step, rid) : null;
      if (dv) view.appendChild(dv);
      r.samples.forEach(function (smp, k) { view.appendChild(sampleCard(r, smp, k)); });
      (r.rejected || []).forEach(function (rej) {
        view.appendChild(el("p", { cls: "level-error", text: "rejected: " + whereText([rej.where]) + ": " + (rej.field ? rej.field + ": " : "") + rej.reason }));
      });
    });
  }

  function maskStrip(runs, total) {
    var strip = el("div", { cls: "mask", role: "img" });
    var pos = 0, trained = 0;
    runs.forEach(function (r) {
      var v = r[0], n = r[1];
      var span = el("span", { cls: v ? "m1" : "m0", title: "response tokens " + pos + "\u2013" + (pos + n - 1) + ": " + (v ? "trained (mask 1)" : "masked (mask 0, e.g. tool output)") });
      span.style.flexGrow = String(n);
      strip.appendChild(span);
      pos += n; if (v) trained += n;
    });
    strip.setAttribute("aria-label", "loss mask: " + trained + " of " + total + " response tokens trained");
    return strip;
  }

  // the sample's tokens decoded through --tokenizer: one span per token (its id on hover), the
  // prompt, trained and loss-masked tokens told apart
  function decodedTokens(dec) {
    var box = el("div", { cls: "tokens" });
    dec.pieces.forEach(function (p, i) {
      box.appendChild(el("span", { cls: "tok tok-" + dec.roles[i], title: "id " + dec.ids[i] + " \u00b7 " + dec.roles[i], text: p }));
    });
    var more = dec.clipped ? " (first " + dec.pieces.length + " of " + dec.clipped + " tokens)" : "";
    return el("details", { open: "" }, el("summary", { text: "tokens, decoded" + more + ": prompt, trained, loss-masked" }), box);
  }

  // the sample's images: thumbnails, each a link to the lossless full-resolution PNG (held once
  // per page in the split's images table, by digest)
  function imageStrip(smp) {
    var all = sd().images || {}, box = el("div", { cls: "images" });
    smp.images.forEach(function (key, i) {
      var uri = all[key];
      if (!uri) return;
      box.appendChild(el("a", { href: uri, target: "_blank", title: "image " + (i + 1) + " (lossless PNG)" },
        el("img", { cls: "thumb", src: uri, alt: "image " + (i + 1) })));
    });
    var what = smp.images.length + (smp.images.length === 1 ? " image" : " images") +
      (smp.patches ? ", " + smp.patches + " patches" : "");
    return el("details", { open: "" }, el("summary", { text: what + " (click for full resolution)" }), box);
  }

  function sampleCard(r, smp, k) {
    var card = el("div", { cls: "sample" });
    card.appendChild(el("h3", { text: "sample " + (k + 1) + "/" + r.samples.length + " \u00b7 rollout " + r.step + ":" + r.rollout_id + " \u00b7 " + whereText([smp.where]) }));
    var facts = el("div", { cls: "facts" });
    var none = smp.raw_reward === null;
    [["sample_index", smp.sample_index], ["group_index", smp.group_index], ["status", smp.status],
      ["reward", none ? NOT_RECORDED : smp.reward], ["raw_reward", none ? NOT_RECORDED : smp.raw_reward],
      ["weight versions", smp.weight_versions ? smp.weight_versions.join(", ") : null], ["prompt", smp.prompt_length + " tok"], ["response", smp.response_length + " tok"],
      ["loss mask", smp.mask_sum + "/" + smp.response_length + " trained"], ["source", smp.source_name]].forEach(function (f) {
      facts.appendChild(el("span", null, f[0] + " ", el("b", { text: fmt(f[1]) })));
    });
    card.appendChild(facts);
    if (smp.mask_runs) {
      card.appendChild(maskStrip(smp.mask_runs, smp.response_length));
      card.appendChild(el("div", { cls: "mask-legend" }, "loss mask over the " + smp.response_length + " response tokens:",
        el("span", { cls: "sw m1" }), "trained", el("span", { cls: "sw m0" }), "masked (tool spans)",
        "  \u00b7 runs " + smp.mask_runs.map(function (x) { return x[0] + "\u00d7" + x[1]; }).join(" ")));
    }
    var tc = trainerCard(r, k);
    if (tc) card.appendChild(tc);
    if (smp.decoded) card.appendChild(decodedTokens(smp.decoded));
    if (smp.images && smp.images.length) card.appendChild(imageStrip(smp));
    if (r.text) {
      ["prompt", "response", "label"].forEach(function (f) {
        if (smp[f] == null) return;
        var d = el("details", f === "response" ? { open: "" } : null, el("summary", { text: f }), el("pre", { text: smp[f] }));
        card.appendChild(d);
      });
    }
    return card;
  }

  // ------------------------------------------------------------------ routing
  function selectSplit(s, keepDrill) {
    state.split = s;
    Array.prototype.forEach.call(document.querySelectorAll("#splits button"), function (b) {
      b.setAttribute("aria-selected", String(b.getAttribute("data-split") === s));
    });
    renderSummary(); renderTrends(); renderDistributions(); renderAnomalies(); renderTrainer();
    if (!keepDrill) selectDrill(sd().inspect.summary.per_step.length ? sd().inspect.summary.per_step[0].step : null, null, null, false);
  }

  function applyHash() { return applyLink(location.hash); }

  // a link: #rollout-SPLIT-STEP-ID, #group-SPLIT-STEP-ID, #step-SPLIT-STEP or #anomaly-SPLIT-N
  function applyLink(hash) {
    var h = decodeURIComponent(hash.slice(1));
    var m = /^(rollout|group|step|anomaly)-(\w+)-(-?\d+)(?:-(-?\d+))?$/.exec(h);
    if (!m || SPLITS.indexOf(m[2]) < 0) return false;
    if (m[2] !== state.split) selectSplit(m[2], true);
    if (m[1] === "anomaly") {
      $("anomaly-kind").value = ""; renderAnomalies();
      var row = $(h);
      if (row) { row.classList.add("hl"); row.scrollIntoView({ block: "center" }); }
      if (location.hash !== hash) history.replaceState(null, "", hash);
      return true;
    }
    var step = Number(m[3]), id = m[4] == null ? null : Number(m[4]);
    selectDrill(step, m[1] === "rollout" ? id : null, m[1] === "group" ? id : null, true);
    return true;
  }

  $("drill-step").addEventListener("change", function (e) { selectDrill(e.target.value, null, null, false); });
  $("drill-rollout").addEventListener("change", function (e) { if (e.target.value !== "") selectDrill(state.step, e.target.value, null, false); });
  $("drill-group").addEventListener("change", function (e) { if (e.target.value !== "") selectDrill(state.step, null, e.target.value, false); });
  $("anomaly-kind").addEventListener("change", renderAnomalies);
  window.addEventListener("hashchange", applyHash);

  renderHeader();
  var opened = location.hash;  // read first: selecting the split points the hash at its first rollout
  selectSplit(state.split);
  applyLink(opened);
  document.body.setAttribute("data-ready", "1");
})();

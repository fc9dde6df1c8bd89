// The live page: polls api/live for the figures and the history points it has not seen, draws one
// uPlot chart per GPU (utilization against SM activity, the gap filled) and the figures beside it.
// Every text from the exporter goes in through textContent: GPU, trace and app names are not markup.
"use strict";
(function () {
  const FLAG_LABELS = {
    high_util_low_sm: "busy, SMs idle",
    low_efficiency: "low efficiency",
    high_util_low_work: "busy, no unit working",
    no_profiling: "no SM activity read",
    sm_above_engine: "implausible: SM above engine",
    pipe_above_sm: "implausible: pipe above SM",
    occupancy_above_sm: "implausible: occupancy above SM",
    sm_zero_while_busy: "implausible: SM 0 while busy",
    profiling_zero_under_load: "implausible: profiling reads 0",
  };
  const state = { after: 0, capacity: 600, classes: {}, times: [], series: new Map(), cards: new Map(), updates: 0, error: null };
  window.gpueffPage = state; // for the browser test and the curious

  const byId = (id) => document.getElementById(id);
  function element(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined) node.textContent = text;
    return node;
  }
  const percent = (value) => (value === null || value === undefined ? "–" : Math.round(value * 100) + " %");
  const fixed = (value, digits) => (value === null || value === undefined ? "–" : value.toFixed(digits));
  function si(value, unit) {
    if (value === null || value === undefined) return "–";
    if (value === 0) return "0 " + unit;
    const prefixes = [[1e15, "P"], [1e12, "T"], [1e9, "G"], [1e6, "M"], [1e3, "k"]];
    for (const [scale, prefix] of prefixes) {
      if (Math.abs(value) >= scale) return (value / scale).toPrecision(3) + " " + prefix + unit;
    }
    return value.toPrecision(3) + " " + unit;
  }
  function duration(seconds) {
    if (seconds === null || seconds === undefined) return "–";
    if (seconds < 120) return Math.round(seconds) + " s";
    if (seconds < 7200) return Math.round(seconds / 60) + " min";
    return (seconds / 3600).toFixed(1) + " h";
  }
  const clock = (date) => date.toLocaleTimeString([], { hour12: false });

  function setStatus(kind, text) {
    const status = byId("status");
    status.className = "status" + (kind ? " " + kind : "");
    status.textContent = text;
  }

  function mergeHistory(history) {
    let skip = 0; // the points sent that this page holds already (a page far behind gets the whole window)
    if (history.last < state.after || (state.after > 0 && history.first > state.after + 1)) {
      state.times = []; // the exporter restarted, or this page fell behind its window: start afresh
      state.series = new Map();
    } else if (state.after > 0) {
      skip = Math.max(0, state.after + 1 - history.first);
    }
    state.capacity = history.capacity;
    const known = state.times.length;
    const times = history.times.slice(skip);
    for (const [uuid, series] of Object.entries(history.gpus)) {
      if (!state.series.has(uuid)) state.series.set(uuid, { utilization: new Array(known).fill(null), sm_active: new Array(known).fill(null) });
      const held = state.series.get(uuid);
      const ratio = (value) => (value === null ? null : value / history.scale); // sent as thousandths
      held.utilization.push(...series.utilization.slice(skip).map(ratio));
      held.sm_active.push(...series.sm_active.slice(skip).map(ratio));
    }
    for (const [uuid, held] of state.series) {
      if (!(uuid in history.gpus)) {
        held.utilization.push(...times.map(() => null));
        held.sm_active.push(...times.map(() => null));
      }
    }
    state.times.push(...times);
    const excess = state.times.length - state.capacity;
    if (excess > 0) {
      state.times.splice(0, excess);
      for (const held of state.series.values()) {
        held.utilization.splice(0, excess);
        held.sm_active.splice(0, excess);
      }
    }
    state.after = history.last;
  }

  function chartFor(container) {
    const width = Math.max(280, container.clientWidth || 340);
    return new uPlot(
      {
        width: width,
        height: 130,
        legend: { show: false },
        cursor: { show: false },
        // At least a minute wide, so the first seconds do not fill the chart with sub-second ticks.
        scales: { x: { time: true, range: (u, min, max) => [Math.min(min, max - 60), max] }, y: { range: [0, 1] } },
        axes: [
          { size: 28, space: 80, values: (u, splits) => splits.map((v) => clock(new Date(v * 1000))) },
          { size: 50, values: (u, splits) => splits.map((v) => Math.round(v * 100) + "%") },
        ],
        series: [
          {},
          { label: "utilization", stroke: "#8a8f98", width: 1.5, points: { show: false } },
          { label: "SM activity", stroke: "#1f9d55", width: 1.5, points: { show: false } },
        ],
        bands: [{ series: [1, 2], fill: "rgba(214, 39, 40, 0.28)" }],
      },
      [[], [], []],
      container,
    );
  }

  function meter(label) {
    const row = element("div", "meter");
    const bar = element("div", "bar");
    const fill = element("i");
    bar.appendChild(fill);
    const text = element("span");
    row.append(element("span", null, label), bar, text);
    return { row, fill, text };
  }

  function card(gpu) {
    let held = state.cards.get(gpu.uuid);
    if (held) return held;
    const root = element("section", "gpu");
    root.dataset.uuid = gpu.uuid;
    const head = element("div", "head");
    const badge = element("span", "badge");
    head.append(element("span", "idx", "GPU " + gpu.index), element("span", "model", gpu.model), element("span", "source", gpu.source), badge);
    const figures = element("div", "figures");
    const chart = element("div", "chart");
    const tryLine = element("div", "try");
    const tensor = meter("tensor-busy");
    const dram = meter("DRAM");
    const misc = element("div", "misc");
    const apps = element("div", "apps");
    const flags = element("div", "flags");
    root.append(head, figures, chart, tryLine, tensor.row, dram.row, misc, apps, flags);
    byId("gpus").appendChild(root);
    held = { root, badge, figures, chart, tryLine, tensor, dram, misc, apps, flags, plot: chartFor(chart) };
    state.cards.set(gpu.uuid, held);
    return held;
  }

  function setMeter(held, value, peak, unit) {
    const share = value !== null && peak ? Math.min(1, value / peak) : 0;
    held.fill.style.width = (share * 100).toFixed(1) + "%";
    held.text.textContent = value === null ? "no estimate" : si(value, unit) + " of " + si(peak, unit);
  }

  function renderGpu(gpu) {
    const held = card(gpu);
    held.root.classList.toggle("down", !gpu.up);
    held.root.classList.toggle("flagged", gpu.mismatch.length > 0);
    const name = gpu.up ? gpu.bottleneck || "unknown" : "down";
    held.badge.className = "badge class-" + (gpu.up ? name : "unknown");
    held.badge.textContent = name;
    held.figures.replaceChildren(
      "utilization ", element("b", null, percent(gpu.utilization)),
      " · SM activity ", element("b", null, percent(gpu.sm_active)),
      " · efficiency ", element("b", null, fixed(gpu.efficiency, 2)),
    );
    const described = state.classes[gpu.bottleneck];
    held.tryLine.textContent = gpu.up && described ? "What to try: " + described.what_to_try : gpu.up ? "" : "Not read in the last poll.";
    setMeter(held.tensor, gpu.tensor_flops, gpu.peak_tensor_flops, "FLOP/s");
    setMeter(held.dram, gpu.dram_bytes_per_second, gpu.peak_dram_bytes_per_second, "B/s");
    const memory = gpu.memory_used_bytes !== null && gpu.memory_total_bytes ? si(gpu.memory_used_bytes, "B") + " of " + si(gpu.memory_total_bytes, "B") : "–";
    held.misc.textContent = "power " + si(gpu.power_watts, "W") + " · " + "busy " + si(gpu.busy_flop_per_joule, "FLOP/J") + " · memory " + memory + " · busy while SMs idle " + duration(gpu.busy_idle_sm_seconds);
    held.apps.replaceChildren(...gpu.apps.map((app) => {
      const line = element("div");
      line.append(element("b", null, app.name), app.up ? ": " + si(app.throughput, app.unit + "/s") + " · " + si(app.units_per_joule, app.unit + "/J") : ": not answering");
      return line;
    }));
    held.flags.replaceChildren(...gpu.flags.map((flag) => {
      const chip = element("span", "flag" + (flag === "no_profiling" ? " info" : ""), FLAG_LABELS[flag] || flag);
      chip.title = flag;
      return chip;
    }));
    const series = state.series.get(gpu.uuid);
    if (series) held.plot.setData([state.times, series.utilization, series.sm_active]);
  }

  function renderFleet(data) {
    const fleet = data.fleet;
    const parts = [
      fleet.gpus + " GPUs (" + fleet.up + " up)",
      "utilization " + percent(fleet.utilization),
      "SM activity " + percent(fleet.sm_active),
      "efficiency " + fixed(fleet.efficiency, 2),
      fleet.flagged + " busy but not working",
    ];
    if (fleet.tensor_flops !== null) parts.push("tensor-busy " + si(fleet.tensor_flops, "FLOP/s") + " of " + si(fleet.peak_tensor_flops, "FLOP/s"));
    if (fleet.power_watts !== null) parts.push("power " + si(fleet.power_watts, "W"));
    if (fleet.busy_idle_sm_seconds !== null) parts.push("busy while SMs idle " + duration(fleet.busy_idle_sm_seconds) + " of GPU time since start");
    byId("fleet").textContent = parts.join(" · ");
    byId("classes").replaceChildren(...Object.entries(fleet.classes).sort().map(([name, count]) => {
      const badge = element("span", "badge class-" + name, name + " " + count);
      if (state.classes[name]) badge.title = state.classes[name].meaning;
      return badge;
    }));
  }

  function renderJobs(jobs) {
    byId("jobs").replaceChildren(...(jobs || []).map((job) => {
      const parts = [
        job.kind + " " + job.name + ": GPUs " + job.gpus.join(", "),
        "efficiency " + fixed(job.efficiency, 2),
        Object.entries(job.classes).sort().map(([name, count]) => name + " " + count).join(", "),
      ];
      if (job.nvlink_bytes_per_second !== null) parts.push("NVLink " + si(job.nvlink_bytes_per_second, "B/s"));
      if (job.straggler !== null) parts.push("GPUs " + job.waiting.join(", ") + " wait on GPU " + job.straggler + ", losing " + percent(job.peer_wait) + " of the job's GPU time");
      return element("li", job.straggler !== null ? "job straggling" : "job", parts.join(" · "));
    }));
  }

  function apply(data) {
    if (data.classes) state.classes = data.classes;
    mergeHistory(data.history);
    renderFleet(data);
    renderJobs(data.jobs);
    for (const gpu of data.gpus) renderGpu(gpu);
    const listed = new Set(data.gpus.map((gpu) => gpu.uuid));
    for (const [uuid, held] of state.cards) {
      if (!listed.has(uuid)) {
        held.plot.destroy();
        held.root.remove();
        state.cards.delete(uuid);
      }
    }
    state.updates += 1;
    state.error = null;
    if (data.stale) {
      setStatus("stale", "The exporter answers, but its last poll is " + Math.round(data.age_seconds) + " s old: every GPU is shown as down until polls work again.");
    } else {
      setStatus("", "Updated " + clock(new Date()) + " · " + data.backend + " backend · polled every " + data.collect_interval_seconds + " s");
    }
  }

  async function poll() {
    let delay = 2000;
    try {
      const response = await fetch("api/live?after=" + state.after, { cache: "no-store", credentials: "same-origin" });
      if (response.status === 503) {
        setStatus("", "Waiting for the exporter's first poll…");
      } else if (!response.ok) {
        throw new Error("it answered HTTP " + response.status + " " + (await response.text()).trim().slice(0, 200));
      } else {
        const data = await response.json();
        apply(data);
        delay = Math.min(5000, Math.max(1000, data.collect_interval_seconds * 1000));
      }
    } catch (error) {
      // fetch() rejects with a TypeError when nothing answers (the exporter stopped, or the network is down).
      state.error = error instanceof TypeError ? "no answer: it has stopped or cannot be reached" : String(error.message || error);
      const since = state.lostAt || (state.lostAt = new Date());
      setStatus("error", "Lost contact with the exporter at " + clock(since) + " (" + state.error + "). The charts show the last figures received; retrying every " + delay / 1000 + " s.");
      setTimeout(poll, delay);
      return;
    }
    state.lostAt = null;
    setTimeout(poll, delay);
  }

  poll();
})();

// The live page: polls api/live for the figures and the history points it has not seen, puts the GPUs
// in the chosen order (by default the GPU time spent busy while the SMs idled over the charts' window,
// most first), names the flagged ones in the summary, and draws one uPlot chart per GPU (utilization
// against SM activity, the gap filled) with the figures beside it.
// Every text from the exporter goes in through textContent: GPU, trace, pod and app names are not markup.
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
  const FLAGGED_NAMED = 6; // flagged GPUs named in the summary; the rest are counted, one click away
  const descending = (key) => (a, b) => (b[key] ?? -1) - (a[key] ?? -1);
  const SORTS = {
    waste: (a, b) => b.waste - a.waste || (b.busy_idle_sm_seconds ?? 0) - (a.busy_idle_sm_seconds ?? 0),
    utilization: descending("utilization"),
    sm_active: descending("sm_active"),
    efficiency: (a, b) => (a.efficiency ?? 2) - (b.efficiency ?? 2),
    power: descending("power_watts"),
    index: () => 0,
  };
  // A key from outside (the address, the exporter's answer) is looked up as an own property only:
  // "__proto__" or "constructor" is in every object through its prototype.
  const own = (object, key) => (Object.prototype.hasOwnProperty.call(object, key) ? object[key] : undefined);
  const sortNamed = (name) => (own(SORTS, name) ? name : "waste");
  const params = new URLSearchParams(location.search);
  const state = {
    after: 0, capacity: 600, classes: {}, paths: {}, reasons: {}, times: [], series: new Map(), cards: new Map(), updates: 0, error: null,
    sort: sortNamed(params.get("sort")),
    only: params.get("only") || "", // a class name, "flagged", or "" for every GPU
    query: (params.get("q") || "").slice(0, 200), // the search's words (search.js), or "" for every GPU
    order: [], // the GPUs' uuids in the order shown
    jobsOf: new Map(), // GPU index -> the multi-GPU jobs it is part of (docs/jobs.md)
    last: null, // the last answer
  };
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
  // "19.1 of 989 TFLOP/s": the value in its peak's unit.
  function ofPeak(value, peak, unit) {
    if (!peak) return si(value, unit);
    const [, number, prefixed] = si(peak, unit).match(/^(\S+) (.*)$/);
    const scaled = value / (peak / Number(number));
    const shown = scaled === 0 ? "0" : scaled < 0.01 ? "<0.01" : String(Number(scaled.toPrecision(3)));
    return shown + " of " + number + " " + prefixed;
  }
  function duration(seconds) {
    if (seconds === null || seconds === undefined) return "–";
    if (seconds < 120) return Math.round(seconds) + " s";
    if (seconds < 7200) return Math.round(seconds / 60) + " min";
    return (seconds / 3600).toFixed(1) + " h";
  }
  const clock = (date) => date.toLocaleTimeString([], { hour12: false });
  const windowText = () => duration(state.times.length > 1 ? state.times[state.times.length - 1] - state.times[0] : 0);

  function setStatus(kind, text) {
    const status = byId("status");
    status.hidden = false;
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
    const sent = new Set(Object.keys(history.gpus)); // a Set, not "in": a uuid could be "__proto__"
    for (const [uuid, held] of state.series) {
      if (!sent.has(uuid)) {
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

  // GPU-seconds busy while the SMs idled over the held window: the red area of the GPU's chart.
  function waste(uuid) {
    const series = state.series.get(uuid);
    if (!series) return 0;
    let total = 0;
    for (let i = 1; i < state.times.length; i++) {
      const util = series.utilization[i], sm = series.sm_active[i];
      if (util !== null && sm !== null && util > sm) total += (util - sm) * (state.times[i] - state.times[i - 1]);
    }
    return total;
  }

  function chartFor(container) {
    const plot = new uPlot(
      {
        width: Math.max(200, container.clientWidth || 320),
        height: 84,
        legend: { show: false },
        cursor: { show: false },
        // At least a minute wide, so the first seconds do not fill the chart with sub-second ticks.
        scales: { x: { time: true, range: (u, min, max) => [Math.min(min, max - 60), max] }, y: { range: [0, 1] } },
        axes: [
          { size: 26, space: 80, values: (u, splits) => splits.map((v) => clock(new Date(v * 1000))) },
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
    // The card's width follows the window (a phone turned, a column more or less): so does the chart.
    new ResizeObserver(() => {
      const width = Math.max(200, container.clientWidth);
      if (width !== plot.width) plot.setSize({ width: width, height: 84 });
    }).observe(container);
    return plot;
  }

  function meter(label) {
    const row = element("div", "meter");
    const bar = element("div", "bar");
    const fill = element("i");
    bar.appendChild(fill);
    const text = element("span");
    row.append(label + " ", text, bar);
    return { row, fill, text };
  }

  function card(gpu) {
    let held = state.cards.get(gpu.uuid);
    if (held) return held;
    const root = element("section", "gpu");
    root.dataset.uuid = gpu.uuid;
    const head = element("div", "head");
    const badge = element("span", "badge");
    const index = element("span", "idx");
    const model = element("span", "model");
    const source = element("span", "source");
    head.append(index, badge, model, source);
    const owner = element("div", "owner");
    const figures = element("div", "figures");
    const chart = element("div", "chart");
    const tryLine = element("div", "try");
    const tensor = meter("tensor-busy");
    const dram = meter("DRAM");
    const meters = element("div", "meters");
    meters.append(tensor.row, dram.row);
    const misc = element("div", "misc");
    const apps = element("div", "apps");
    const procs = element("details", "procs");
    const procsSummary = element("summary");
    const procsTable = element("table");
    procs.append(procsSummary, procsTable);
    const flags = element("div", "flags");
    root.append(head, owner, figures, chart, tryLine, meters, misc, apps, procs, flags);
    byId("gpus").appendChild(root);
    held = { root, index, model, source, badge, owner, figures, chart, tryLine, tensor, dram, misc, apps, procs, procsSummary, procsTable, procsSeen: false, flags, plot: chartFor(chart) };
    state.cards.set(gpu.uuid, held);
    return held;
  }

  function setMeter(held, value, peak, unit) {
    const share = value !== null && peak ? Math.min(1, value / peak) : 0;
    held.fill.style.width = (share * 100).toFixed(1) + "%";
    held.text.textContent = value === null ? "no estimate" : ofPeak(value, peak, unit);
    held.row.title = held.row.textContent;
  }

  // Whose the GPU is: the pods the kubelet assigned it to, and the (Slurm) jobs its processes run in.
  function ownerParts(gpu) {
    const parts = [];
    const pods = gpu.pods || [];
    if (pods.length) {
      const shown = pods.slice(0, 2).map((pod) => pod.namespace + "/" + pod.pod + (pod.container ? " (" + pod.container + ")" : ""));
      parts.push([pods.length > 1 ? pods.length + " pods" : "pod", shown.join(", ") + (pods.length > 2 ? ", …" : "")]);
    }
    const jobs = gpu.slurm_jobs || [];
    if (jobs.length) parts.push([jobs.length > 1 ? "Slurm jobs" : "Slurm job", jobs.map((job) => job.id + (job.user_id ? " (uid " + job.user_id + ")" : "")).join(", ")]);
    // On a bare host (no pod, no job), the Unix users whose processes hold it.
    const users = [...new Set(((gpu.processes || {}).rows || []).filter((row) => row.holder_kind === "process" || row.holder_kind === "user").map((row) => row.holder.split(":")[0] || row.user_id))];
    if (!pods.length && !jobs.length && users.length) parts.push([users.length > 1 ? "users" : "user", users.slice(0, 3).join(", ") + (users.length > 3 ? ", …" : "")]);
    for (const job of state.jobsOf.get(gpu.index) || []) parts.push(["job", job.kind + " " + job.name + " (GPUs " + job.gpus.join(", ") + ")"]);
    return parts;
  }

  const mib = (bytes) => (bytes === null || bytes === undefined ? "–" : Math.round(bytes / 1048576) + " MiB");
  // Whose one process is: its pod (by UID: a cgroup names no pod name), its Slurm job, or on a bare host its Unix user.
  function processOwner(row) {
    if (row.holder_kind === "pod") return "pod " + row.holder;
    if (row.holder_kind === "slurm_job") return "job " + row.holder;
    if (row.holder_kind === "process" || row.holder_kind === "user") return "user " + (row.holder.split(":")[0] || row.user_id);
    return "–";
  }

  // The GPU's compute processes (pipeline/processes.py): at most 16, the most memory first, the rest on one line.
  function renderProcesses(held, gpu) {
    const listed = gpu.processes;
    held.procs.hidden = !listed;
    if (!listed) return;
    const rows = listed.rows;
    const count = rows.length + listed.others;
    const used = rows.reduce((sum, row) => sum + (row.memory_bytes || 0), listed.others_memory_bytes || 0);
    held.procsSummary.textContent = count === 0 ? "no compute process" : count + (count === 1 ? " process · " : " processes · ") + mib(used);
    held.procs.classList.toggle("none", count === 0);
    if (count === 0) held.procs.open = false;
    if (!held.procsSeen) {
      held.procs.open = count > 0 && count <= 4; // a few are shown at once; more are one click away
      held.procsSeen = true;
    }
    const head = element("tr");
    for (const name of ["PID", "user", "memory", "busy", "owner", "command"]) head.appendChild(element("th", null, name));
    const lines = rows.map((row) => {
      const line = element("tr");
      const cells = [String(row.pid), row.user_id || "–", mib(row.memory_bytes), percent(row.busy_share), processOwner(row), row.name || "–"];
      for (const text of cells) line.appendChild(element("td", null, text));
      line.title = cells.join(" · ");
      return line;
    });
    if (listed.others || listed.others_memory_bytes !== null || listed.others_busy_share !== null) {
      const line = element("tr", "rest");
      for (const text of [listed.others ? "+" + listed.others + " more" : "the rest", "", mib(listed.others_memory_bytes), percent(listed.others_busy_share), "", ""]) line.appendChild(element("td", null, text));
      lines.push(line);
    }
    held.procsTable.replaceChildren(...(count ? [head, ...lines] : []));
  }

  // Why no owner is named (gpueff_gpu_attribution_info): [label, text, meaning], or null where a series names it.
  function attributionPart(gpu) {
    const found = gpu.attribution;
    if (!found) return null;
    if (found.path === "demo") return ["demo", "(made-up owner)", own(state.paths, "demo") || ""];
    if (found.reason === "ok" || found.reason === "processes_not_listed") return null;
    const via = found.path === "none" ? "" : " (found by " + found.path.replace(/_/g, " ") + ")";
    return [found.reason === "no_process" ? "free" : "no owner", found.reason.replace(/_/g, " ") + via, own(state.reasons, found.reason) || ""];
  }

  function renderGpu(gpu) {
    const held = card(gpu);
    held.root.id = "gpu-" + gpu.index;
    held.root.classList.toggle("down", !gpu.up);
    held.root.classList.toggle("flagged", gpu.mismatch.length > 0);
    held.index.textContent = "GPU " + gpu.index;
    held.model.textContent = gpu.model;
    held.source.textContent = gpu.source;
    const name = gpu.up ? gpu.bottleneck || "unknown" : "down";
    held.badge.className = "badge class-" + (gpu.up ? name : "unknown");
    held.badge.textContent = name;
    const owners = ownerParts(gpu);
    const why = attributionPart(gpu);
    if (why) owners.push(why);
    held.owner.hidden = owners.length === 0;
    held.owner.replaceChildren(...owners.flatMap(([label, text], i) => [i ? " · " : "", element("span", null, label + " "), text]));
    held.owner.title = owners.map(([label, text, meaning]) => label + " " + text + (meaning ? ": " + meaning : "")).join("\n");
    held.figures.replaceChildren(
      element("span", "key util", "utilization"), " ", element("b", null, percent(gpu.utilization)),
      " · ", element("span", "key sm", "SM activity"), " ", element("b", null, percent(gpu.sm_active)),
      " · efficiency ", element("b", null, fixed(gpu.efficiency, 2)),
    );
    const described = own(state.classes, gpu.bottleneck);
    held.tryLine.textContent = gpu.up && described ? "What to try: " + described.what_to_try : gpu.up ? "" : "Not read in the last poll.";
    setMeter(held.tensor, gpu.tensor_flops, gpu.peak_tensor_flops, "FLOP/s");
    setMeter(held.dram, gpu.dram_bytes_per_second, gpu.peak_dram_bytes_per_second, "B/s");
    const memory = gpu.memory_used_bytes !== null && gpu.memory_total_bytes ? si(gpu.memory_used_bytes, "B") + " of " + si(gpu.memory_total_bytes, "B") : "–";
    held.misc.replaceChildren(
      element("span", "key gap", "busy while SMs idle"),
      " " + duration(gpu.waste) + " in the last " + windowText() + ", " + duration(gpu.busy_idle_sm_seconds) + " since start · power " + si(gpu.power_watts, "W") +
        " · busy " + si(gpu.busy_flop_per_joule, "FLOP/J") + (gpu.estimated_flops === null ? "" : " · work est. " + si(gpu.estimated_flops, "FLOP/s")) + " · memory " + memory +
        (gpu.temperature_celsius === null ? "" : " · " + Math.round(gpu.temperature_celsius) + "\u00a0°C"),
    );
    held.apps.replaceChildren(...gpu.apps.map((app) => {
      const line = element("div");
      line.append(element("b", null, app.name), app.up ? ": " + si(app.throughput, app.unit + "/s") + " · " + si(app.units_per_joule, app.unit + "/J") : ": not answering");
      return line;
    }));
    renderProcesses(held, gpu);
    held.flags.replaceChildren(...gpu.flags.map((flag) => {
      const chip = element("span", "flag" + (flag === "no_profiling" ? " info" : ""), own(FLAG_LABELS, flag) || flag);
      chip.title = flag;
      return chip;
    }));
    const series = state.series.get(gpu.uuid);
    if (series) held.plot.setData([state.times, series.utilization, series.sm_active]);
    return held;
  }

  // One click to a GPU's card: scrolled to, outlined, and shown even where the class filter hid it.
  function reveal(gpu) {
    const held = state.cards.get(gpu.uuid);
    if (!held) return;
    if (held.root.hidden) {
      state.only = "";
      setQuery(""); // a GPU asked for by name is shown, whatever hid it
    }
    for (const other of state.cards.values()) other.root.classList.remove("target");
    held.root.classList.add("target");
    held.root.scrollIntoView({ block: "start" });
    setTimeout(() => held.root.classList.remove("target"), 3000); // an outline to find it by, not a lasting mark
  }

  function gpuLink(gpu, text) {
    const link = element("a", null, text);
    link.href = "#gpu-" + gpu.index;
    link.addEventListener("click", (event) => {
      event.preventDefault();
      history.replaceState(null, "", location.pathname + location.search + "#gpu-" + gpu.index);
      reveal(gpu);
    });
    return link;
  }

  const inClass = (gpu) => !state.only || (state.only === "flagged" ? gpu.mismatch.length > 0 : gpu.up && gpu.bottleneck === state.only);
  const shown = (gpu) => inClass(gpu) && gpueffSearch.matches(gpu, state.query, state.jobsOf.get(gpu.index));

  function setOnly(only) {
    state.only = only;
    remember();
    if (state.last) render(state.last);
  }

  function setQuery(query) {
    state.query = query.slice(0, 200);
    if (byId("search").value !== state.query) byId("search").value = state.query;
    remember();
    if (state.last) render(state.last);
  }

  function remember() {
    const query = new URLSearchParams();
    if (state.sort !== "waste") query.set("sort", state.sort);
    if (state.only) query.set("only", state.only);
    if (state.query) query.set("q", state.query);
    const search = query.toString();
    history.replaceState(null, "", location.pathname + (search ? "?" + search : "") + location.hash);
  }

  function chip(label, value, className, title) {
    const button = element("button", "chip " + className, label);
    button.type = "button";
    button.dataset.only = value;
    button.setAttribute("aria-pressed", String(state.only === value));
    if (state.only && state.only !== value) button.classList.add("dimmed");
    if (title) button.title = title;
    button.addEventListener("click", () => setOnly(state.only === value ? "" : value));
    return button;
  }

  // Whose the GPUs are (gpueff_gpu_attribution_info): how many each path named the owner of, then
  // each reason none did, with its GPUs one click away; free GPUs last. Hidden where nothing but a
  // backend that lists no processes is to be said (no owner can be named, nothing to fix per GPU).
  function renderOwners(gpus) {
    const named = new Map();
    const missing = new Map();
    for (const gpu of gpus) {
      const found = gpu.attribution;
      if (!found) continue;
      if (found.reason === "ok") named.set(found.path, (named.get(found.path) || 0) + 1);
      else missing.set(found.reason, [...(missing.get(found.reason) || []), gpu]);
    }
    const line = byId("owners");
    line.hidden = named.size === 0 && [...missing.keys()].every((reason) => reason === "processes_not_listed");
    const paths = [...named].sort((a, b) => (a[0] < b[0] ? -1 : 1)).map(([path, count]) => (path === "demo" ? "demo (declared, not real) " : path.replace(/_/g, " ") + " ") + count);
    const parts = [element("span", null, "owners: "), paths.join(", ") || "none named"];
    const reasons = [...missing].sort((a, b) => (a[0] === "no_process") - (b[0] === "no_process") || b[1].length - a[1].length || (a[0] < b[0] ? -1 : 1));
    for (const [reason, held] of reasons) {
      const label = element("span", null, (reason === "no_process" ? "free" : reason.replace(/_/g, " ")) + ": ");
      label.title = own(state.reasons, reason) || "";
      const links = held.slice(0, 4).flatMap((gpu, i) => [i ? ", " : "", gpuLink(gpu, "GPU " + gpu.index)]);
      parts.push(" · ", label, ...links, held.length > 4 ? " +" + (held.length - 4) : "");
    }
    line.replaceChildren(...parts);
  }

  function renderSummary(data, ordered) {
    const fleet = data.fleet;
    const parts = [
      fleet.gpus + " GPUs (" + fleet.up + " up)",
      "utilization " + percent(fleet.utilization),
      "SM activity " + percent(fleet.sm_active),
      "efficiency " + fixed(fleet.efficiency, 2),
    ];
    if (fleet.tensor_flops !== null) parts.push("tensor-busy " + ofPeak(fleet.tensor_flops, fleet.peak_tensor_flops, "FLOP/s"));
    if (fleet.estimated_flops !== null) parts.push("work est. " + si(fleet.estimated_flops, "FLOP/s"));
    if (fleet.power_watts !== null) parts.push("power " + si(fleet.power_watts, "W"));
    if (fleet.busy_idle_sm_seconds !== null) parts.push("busy, SMs idle: " + duration(fleet.busy_idle_sm_seconds) + " GPU time since start");
    byId("fleet").textContent = parts.join(" · ");
    renderOwners(data.gpus);
    byId("fleet").title = fleet.estimated_flops === null ? "" : "work est.: the point estimate summed over the " + fleet.estimated_gpus + " of " + fleet.up + " GPUs whose counters support one";

    // The flagged GPUs by name, most waste first, each one click from its card.
    const flagged = ordered.filter((gpu) => gpu.up && gpu.mismatch.length > 0);
    const line = byId("flagged");
    line.classList.toggle("none", flagged.length === 0);
    if (flagged.length === 0) {
      line.replaceChildren(fleet.up ? "No GPU is busy but not working." : "No GPU is up.");
    } else {
      const named = flagged.slice(0, FLAGGED_NAMED).flatMap((gpu, i) => {
        const whose = ownerParts(gpu).map(([, text]) => text)[0] || gpu.source;
        const text = "GPU " + gpu.index + " " + (gpu.bottleneck || "unknown") + (whose ? " (" + whose + ")" : "");
        return [i ? ", " : "", gpuLink(gpu, text)];
      });
      const rest = flagged.length - FLAGGED_NAMED;
      if (rest > 0) {
        const more = element("a", null, "and " + rest + " more");
        more.href = "?only=flagged";
        more.addEventListener("click", (event) => { event.preventDefault(); setOnly("flagged"); });
        named.push(", ", more);
      }
      line.replaceChildren(flagged.length + " busy but not working: ", ...named);
    }

    const chips = [chip("all " + fleet.gpus, "", "all", "Show every GPU")];
    if (flagged.length) chips.push(chip("flagged " + flagged.length, "flagged", "class-underfilled", "Show only the GPUs busy but not working"));
    for (const [name, count] of Object.entries(fleet.classes).sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : 1))) {
      chips.push(chip(name + " " + count, name, "class-" + name, own(state.classes, name) ? state.classes[name].meaning : ""));
    }
    if (state.only && !chips.some((button) => button.dataset.only === state.only)) chips.push(chip(state.only + " 0", state.only, "class-unknown", ""));
    byId("classes").replaceChildren(...chips);

    // The ranking: every GPU as a small tile in the chosen order, with its utilization and SM activity.
    byId("ranking").replaceChildren(...ordered.filter(shown).map((gpu) => {
      const item = element("li");
      const name = gpu.up ? gpu.bottleneck || "unknown" : "down";
      const link = gpuLink(gpu, String(gpu.index));
      link.className = "class-" + (gpu.up ? name : "unknown") + (gpu.mismatch.length ? " flagged" : "") + (gpu.up ? "" : " down");
      link.title = "GPU " + gpu.index + " · " + name + " · utilization " + percent(gpu.utilization) + " · SM activity " + percent(gpu.sm_active) + " · busy while SMs idle " + duration(gpu.waste) + " in the last " + windowText();
      const mini = element("span", "mini");
      const busy = element("i");
      busy.style.width = ((gpu.utilization || 0) * 100).toFixed(1) + "%";
      const working = element("b");
      working.style.width = (Math.min(gpu.utilization || 0, gpu.sm_active || 0) * 100).toFixed(1) + "%";
      mini.append(busy, working);
      link.appendChild(mini);
      item.appendChild(link);
      return item;
    }));
  }

  // The multi-GPU jobs: one line each, the one with a straggler red and its straggler one click away.
  function renderJobs(jobs, gpus) {
    state.jobsOf = new Map();
    for (const job of jobs) for (const index of job.gpus) state.jobsOf.set(index, [...(state.jobsOf.get(index) || []), job]);
    byId("jobs").replaceChildren(...jobs.map((job) => {
      const parts = [
        job.kind + " " + job.name + ": GPUs " + job.gpus.join(", "),
        "efficiency " + fixed(job.efficiency, 2),
        Object.entries(job.classes).sort().map(([name, count]) => name + " " + count).join(", "),
      ];
      if (job.nvlink_bytes_per_second !== null) parts.push("NVLink " + si(job.nvlink_bytes_per_second, "B/s"));
      const line = element("li", job.straggler !== null ? "job straggling" : "job", parts.join(" · "));
      const straggler = gpus.find((gpu) => gpu.index === job.straggler);
      if (straggler) line.append((job.waiting.length === 1 ? " · GPU " + job.waiting[0] + " waits on " : " · GPUs " + job.waiting.join(", ") + " wait on "), gpuLink(straggler, "GPU " + job.straggler), ", losing " + percent(job.peer_wait) + " of the job's GPU time");
      return line;
    }));
  }

  function render(data) {
    renderJobs(data.jobs || [], data.gpus);
    for (const gpu of data.gpus) gpu.waste = waste(gpu.uuid);
    const ordered = [...data.gpus].sort((a, b) => SORTS[state.sort](a, b) || a.index - b.index);
    state.order = ordered.map((gpu) => gpu.uuid);
    renderSummary(data, ordered);
    const main = byId("gpus");
    const cards = ordered.map((gpu) => {
      const held = renderGpu(gpu);
      held.root.hidden = !shown(gpu);
      return held.root;
    });
    const placed = [...main.querySelectorAll(":scope > .gpu")];
    if (cards.some((root, i) => placed[i] !== root)) main.append(...cards); // appending moves them: the cards follow the order
    const listed = new Set(state.order);
    for (const [uuid, held] of state.cards) {
      if (!listed.has(uuid)) {
        held.plot.destroy();
        held.root.remove();
        state.cards.delete(uuid);
      }
    }
    const found = ordered.filter(shown).length;
    byId("found").textContent = state.query ? found + " of " + data.gpus.length + " GPUs" : "";
    let empty = main.querySelector(":scope > .empty");
    if (data.gpus.length === 0 || (state.query && found === 0)) {
      if (!empty) main.appendChild((empty = element("p", "empty")));
      empty.textContent = data.gpus.length === 0 ? "No GPU in the exporter's last poll." : "No GPU matches the search.";
    } else if (empty) {
      empty.remove();
    }
  }

  function apply(data) {
    if (data.classes) state.classes = data.classes;
    if (data.attribution) [state.paths, state.reasons] = [data.attribution.paths, data.attribution.reasons];
    mergeHistory(data.history);
    state.last = data;
    byId("summary").hidden = false;
    render(data);
    state.updates += 1;
    state.error = null;
    const fresh = "Updated " + clock(new Date()) + " · " + data.backend + " backend · polled every " + data.collect_interval_seconds + " s";
    if (data.stale) {
      setStatus("stale", "The exporter answers, but its last poll is " + Math.round(data.age_seconds) + " s old: every GPU is shown as down until polls work again.");
    } else if (!data.ready) {
      setStatus("pending", "Not ready (/-/ready answers 503): " + data.note + " " + fresh);
    } else {
      setStatus("", fresh);
    }
  }

  async function poll() {
    let delay = 2000;
    let data = null;
    try {
      const response = await fetch("api/live?after=" + state.after, { cache: "no-store", credentials: "same-origin" });
      if (response.status === 503) {
        setStatus("pending", "Not ready: waiting for the exporter's first poll (/-/ready answers 503 until it has one)…");
      } else if (!response.ok) {
        throw new Error("it answered HTTP " + response.status + " " + (await response.text()).trim().slice(0, 200));
      } else {
        data = await response.json();
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
    if (data) {
      try {
        apply(data);
        delay = Math.min(5000, Math.max(1000, data.collect_interval_seconds * 1000));
      } catch (error) { // the exporter answered: a failure to show it is this page's, not lost contact
        state.error = String(error.message || error);
        setStatus("error", "The exporter answered, but this page could not show it (" + state.error + "); retrying every " + delay / 1000 + " s.");
      }
    }
    setTimeout(poll, delay);
  }

  const search = byId("search");
  search.value = state.query;
  search.addEventListener("input", () => setQuery(search.value));
  const select = byId("sort");
  select.value = state.sort;
  select.addEventListener("change", () => {
    state.sort = sortNamed(select.value);
    remember();
    if (state.last) render(state.last);
  });
  setStatus("pending", "Loading the first figures…");
  poll();
})();

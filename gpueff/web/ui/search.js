// The live page's search: the GPUs whose names, owners or class hold every word of the query, letter
// case aside. A word may name the field it looks in (pod:llama, ns:ml, job:48213, user:1001,
// class:host, name:h200); without one it looks in all of them. The same words and fields as top's
// filter (gpueff/commands/top/search.py). Words come from the address and the person: a field is
// looked up as an object's own property only ("__proto__:x" is a plain word, as any unknown field).
"use strict";
(function (root) {
  const FIELDS = ["name", "pod", "namespace", "job", "user", "class"];
  const ALIASES = { ns: "namespace", gpu: "name", model: "name", command: "name" };
  const own = (object, key) => (Object.prototype.hasOwnProperty.call(object, key) ? object[key] : undefined);

  // The query's words as [field or "", text], lower-cased.
  function words(query) {
    return String(query || "").toLowerCase().split(/\s+/).filter(Boolean).map((word) => {
      const colon = word.indexOf(":");
      if (colon < 0) return ["", word];
      const named = word.slice(0, colon), text = word.slice(colon + 1);
      const field = own(ALIASES, named) || named;
      return FIELDS.includes(field) && text ? [field, text] : ["", word];
    });
  }

  // What each field of one GPU (an /api/live entry) holds; jobs: the multi-GPU jobs it is part of.
  function fields(gpu, jobs) {
    const rows = (gpu.processes && gpu.processes.rows) || [];
    const pods = gpu.pods || [];
    const slurm = gpu.slurm_jobs || [];
    return {
      name: [gpu.model, gpu.source, String(gpu.index), ...rows.map((row) => row.name)],
      pod: [...pods.map((pod) => pod.namespace + "/" + pod.pod), ...pods.map((pod) => pod.container), ...rows.filter((row) => row.holder_kind === "pod").map((row) => row.holder)],
      namespace: pods.map((pod) => pod.namespace),
      job: [...slurm.map((job) => job.id), ...(jobs || []).map((job) => job.name), ...rows.filter((row) => row.holder_kind === "slurm_job").map((row) => row.holder)],
      user: [...rows.map((row) => row.user_id), ...slurm.map((job) => job.user_id), ...rows.filter((row) => row.holder_kind === "process" || row.holder_kind === "user").map((row) => row.holder.split(":")[0])],
      class: [gpu.up ? gpu.bottleneck || "" : "down"],
    };
  }

  // Whether every word is in the field it names (or in any field).
  function matches(gpu, query, jobs) {
    const wanted = words(query);
    if (!wanted.length) return true;
    const held = fields(gpu, jobs);
    for (const name of FIELDS) held[name] = held[name].filter((value) => value).map((value) => String(value).toLowerCase());
    return wanted.every(([field, text]) => (field ? [field] : FIELDS).some((name) => held[name].some((value) => value.includes(text))));
  }

  root.gpueffSearch = { words, fields, matches };
})(typeof window === "undefined" ? globalThis : window);

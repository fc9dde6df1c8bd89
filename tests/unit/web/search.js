// The live page's search (gpueff/web/ui/search.js) under node: prints, one JSON line each, which
// of a few GPUs each query finds, and how words are read.
const fs = require("fs");
new Function(fs.readFileSync(process.argv[2], "utf8"))();
const { words, matches } = globalThis.gpueffSearch;
const gpus = [
  { index: 0, model: "NVIDIA H200", source: "spin_1sm", up: true, bottleneck: "underfilled", pods: [{ namespace: "research", pod: "sweep-lr-3e4-0", container: "trainer" }], slurm_jobs: [], processes: { rows: [{ pid: 7, user_id: "", name: "python3", holder_kind: "pod", holder: "5926e42f-d893" }] } },
  { index: 1, model: "NVIDIA H100", source: "", up: true, bottleneck: "host", pods: [], slurm_jobs: [{ id: "48213", user_id: "2001" }], processes: { rows: [{ pid: 8, user_id: "2001", name: "训练", holder_kind: "slurm_job", holder: "48213" }] } },
  { index: 2, model: "NVIDIA H100", source: "", up: true, bottleneck: "host", pods: [], slurm_jobs: [], processes: { rows: [{ pid: 9, user_id: "1003", name: "bench", holder_kind: "process", holder: "1003:bench" }] } },
  { index: 3, model: "NVIDIA H100", source: "", up: false, bottleneck: null, pods: [], slurm_jobs: [], processes: null },
];
const jobs = { 1: [{ name: "torchrun:0-3" }] };
const queries = ["", "ns:research", "NS:RESEARCH", "pod:sweep", "pod:5926e42f", "job:48213", "job:torchrun", "user:2001", "user:1003", "class:host", "host 48213",
  "name:训练", "class:down", "serving", "__proto__:x", "constructor:", "toString", "hasOwnProperty:1", "ns:research class:host", "h100"];
for (const query of queries) console.log(JSON.stringify([query, gpus.filter((gpu) => matches(gpu, query, jobs[gpu.index] || [])).map((gpu) => gpu.index)]));
console.log(JSON.stringify(words(" ns:ml  __proto__:x pod: model:h200 ")));

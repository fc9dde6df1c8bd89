// The live page's mergeHistory, run alone under node: a whole-window answer to a page that holds
// part of it (what /api/live sends a page more than 8 points behind) adds only the points it lacks.
const fs = require("fs");
const src = fs.readFileSync(process.argv[2], "utf8");
const start = src.indexOf("  function mergeHistory(history) {");
let depth = 0, end = start;
for (let i = src.indexOf("{", start); i < src.length; i++) { if (src[i] === "{") depth++; if (src[i] === "}") { depth--; if (depth === 0) { end = i + 1; break; } } }
const state = { after: 0, capacity: 600, times: [], series: new Map() };
const mergeHistory = new Function("state", src.slice(start, end) + "; return mergeHistory;")(state);
const h = (first, last) => ({ capacity: 600, first, last, scale: 1000, times: Array.from({length: last - first + 1}, (_, i) => first + i), gpus: { a: { utilization: Array.from({length: last - first + 1}, (_, i) => (first + i)), sm_active: Array.from({length: last - first + 1}, () => 0) } } });
mergeHistory(h(1, 10));           // new page: whole window
mergeHistory(h(11, 12));          // exact recent
mergeHistory(h(1, 14));           // far behind answer: whole window, the page skips what it holds
mergeHistory(h(15, 15));
console.log(JSON.stringify(state.times), state.after, JSON.stringify(state.series.get("a").utilization.map(v => Math.round(v * 1000))));
mergeHistory(h(1, 3));            // exporter restarted: last < after -> start afresh
console.log(JSON.stringify(state.times), state.after);

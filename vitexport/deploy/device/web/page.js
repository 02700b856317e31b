// Runs this package's model in this browser: verifies every file against manifest.json (SHA-256),
// runs the golden inputs with the execution provider asked for (?ep=wasm or ?ep=webgpu), compares the
// outputs with PyTorch's within the golden tolerance and builds device-report.json. The page only
// finds outputs out of tolerance: the verdict is `vitexport verify --device-report`'s, which also
// applies the precision's top-1 and accuracy gates and the task's gates (numbers this page does not
// compute), as every other target's report is judged. The runtime is driven by the runner the manifest names (runner.js).
//
// Query: ep (wasm|webgpu), threads (wasm threads; 0: the runner's choice), budget_s (seconds of timed
// runs per case), warmup_s, repeats (runs per case instead of a budget), report=post (check.py's:
// the page posts its result to /report).

const SCHEMA = { manifest: "vitexport.package/1", golden: "vitexport.golden/1", report: "vitexport.device-report/1" };
const CODE = { ok: 0, failure: 1, usage: 2, unavailable: 3, mismatch: 4 };
const BURST_S = 0.25; // as vitexport's roundstats.py: rounds of about this long, 8 to 200 of them
const MIN_ROUNDS = 8;
const MAX_ROUNDS = 200;

class Stop extends Error {
  constructor(code, message) {
    super(message);
    this.code = code;
  }
}

function say(text) {
  document.getElementById("status").textContent = text;
}

function options() {
  const q = new URLSearchParams(location.search);
  const number = (name, fallback) => {
    if (!q.has(name)) return fallback;
    const value = Number(q.get(name));
    if (!Number.isFinite(value) || value < 0) throw new Stop(CODE.usage, `${name} must be a number >= 0`);
    return value;
  };
  const ep = q.get("ep") || "wasm";
  if (!["wasm", "webgpu"].includes(ep)) throw new Stop(CODE.usage, `ep must be wasm or webgpu, got ${ep}`);
  const budget = number("budget_s", 3);
  if (!(budget > 0)) throw new Stop(CODE.usage, "budget_s must be more than 0");
  const repeats = number("repeats", null);
  return {
    ep, threads: Math.floor(number("threads", 0)), budget_s: budget, repeats: repeats && Math.floor(repeats),
    warmup_s: number("warmup_s", repeats ? 0 : Math.min(1, budget / 4)), post: q.get("report") === "post",
  };
}

// --- files ---------------------------------------------------------------------------------------------

async function bytesOf(name) {
  const response = await fetch(name, { cache: "no-store" });
  if (!response.ok) throw new Stop(CODE.mismatch, `${name}: missing (HTTP ${response.status}): the package is incomplete`);
  return new Uint8Array(await response.arrayBuffer());
}

async function sha256(bytes) {
  const digest = new Uint8Array(await crypto.subtle.digest("SHA-256", bytes));
  return Array.from(digest, (b) => b.toString(16).padStart(2, "0")).join("");
}

async function verifyFiles(manifest) {
  const names = Object.keys(manifest.files || {}).sort();
  if (!names.length) throw new Stop(CODE.usage, "manifest.json lists no files");
  for (const [i, name] of names.entries()) {
    say(`verifying ${name} (${i + 1} of ${names.length})`);
    const bytes = await bytesOf(name);
    const entry = manifest.files[name];
    if (bytes.length !== entry.size || (await sha256(bytes)) !== entry.sha256) {
      throw new Stop(CODE.mismatch, `${name}: sha256 differs from manifest.json: the file is damaged or was changed`);
    }
  }
  return names.length;
}

// A .npy file as numpy writes it: little-endian float32 in C order (all golden files are).
function parseNpy(bytes, name) {
  const magic = String.fromCharCode(...bytes.slice(1, 6));
  if (bytes[0] !== 0x93 || magic !== "NUMPY") throw new Stop(CODE.usage, `${name} is not a .npy file`);
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const major = bytes[6];
  const length = major === 1 ? view.getUint16(8, true) : view.getUint32(8, true);
  const start = major === 1 ? 10 : 12;
  const header = new TextDecoder().decode(bytes.slice(start, start + length));
  const descr = /'descr':\s*'([^']*)'/.exec(header);
  if (!descr || descr[1] !== "<f4" || /'fortran_order':\s*True/.test(header)) {
    throw new Stop(CODE.usage, `${name} is not little-endian float32 in C order`);
  }
  const shape = /'shape':\s*\(([^)]*)\)/.exec(header)[1].split(",").filter((s) => s.trim()).map(Number);
  const data = new Float32Array(bytes.slice(start + length).buffer);
  if (data.length !== shape.reduce((a, b) => a * b, 1)) throw new Stop(CODE.usage, `${name}: data and shape disagree`);
  return { shape, data };
}

// --- timing, as vitexport bench times (its roundstats.py, in JavaScript) --------------------------------

function percentile(values, q) {
  const ordered = [...values].sort((a, b) => a - b);
  const pos = ((ordered.length - 1) * q) / 100;
  const lo = Math.floor(pos);
  const hi = Math.ceil(pos);
  return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo);
}

const median = (values) => percentile(values, 50);

// Python's round: a tie goes to the even neighbour (Math.round takes it up), so that a budget gives
// the page the rounds roundstats.round_count gives bench.
function roundHalfEven(x) {
  const down = Math.floor(x);
  const rest = x - down;
  return rest > 0.5 || (rest === 0.5 && down % 2 !== 0) ? down + 1 : down;
}

function roundCount(budget_s) {
  return Math.max(MIN_ROUNDS, Math.min(MAX_ROUNDS, roundHalfEven(budget_s / BURST_S)));
}

function relativeSpread(values) {
  if (values.length < 2) return null;
  const m = median(values);
  return m > 0 ? (1.4826 * median(values.map((v) => Math.abs(v - m)))) / m : null;
}

// Rows of x in runs of exactly `batch`, the last padded by repeating its final row: [data, dims, real rows].
function* batches(x, batch) {
  const [rows, ...rest] = x.shape;
  const size = rest.reduce((a, b) => a * b, 1);
  for (let start = 0; start < rows; start += batch) {
    const real = Math.min(batch, rows - start);
    const part = new Float32Array(batch * size);
    part.set(x.data.subarray(start * size, (start + real) * size));
    for (let r = real; r < batch; r++) part.copyWithin(r * size, (real - 1) * size, real * size);
    yield [part, [batch, ...rest], real];
  }
}

function sameBits(a, b) {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) {
    if (a[i] !== b[i] && !(Number.isNaN(a[i]) && Number.isNaN(b[i]))) return false;
  }
  return true;
}

async function timedCase(runner, c, opts) {
  const parts = [...batches(c.x, c.batch)];
  const [first, dims] = parts[0];
  let warm = 0;
  let start = performance.now();
  while (warm < 1 || performance.now() - start < opts.warmup_s * 1000) {
    await runner.run(first, dims);
    warm++;
  }
  const warmup_s = (performance.now() - start) / 1000;
  const count = opts.repeats ? Math.min(opts.repeats, MIN_ROUNDS) : roundCount(opts.budget_s);
  const quota = opts.repeats ? Array.from({ length: count }, (_, r) => Math.floor(opts.repeats / count) + (r < opts.repeats % count)) : null;
  const burst = (opts.budget_s / count) * 1000;
  const samples = [];
  const medians = [];
  let firstOut = null;
  let lastOut = null;
  for (let r = 0; r < count; r++) {
    const round = [];
    const began = performance.now();
    while (!round.length || (quota ? round.length < quota[r] : performance.now() - began < burst)) {
      const t0 = performance.now();
      const result = await runner.run(first, dims);
      round.push(performance.now() - t0);
      if (!firstOut) firstOut = result;
      lastOut = result;
    }
    samples.push(...round);
    medians.push(median(round));
  }
  const deterministic = firstOut.outputs.every((o, i) => sameBits(o, lastOut.outputs[i]));
  // Every row's outputs: the first batch from the timed runs, the others run once.
  const pieces = [{ result: firstOut, real: parts[0][2] }];
  for (const [part, partDims, real] of parts.slice(1)) pieces.push({ result: await runner.run(part, partDims), real });
  const outputs = firstOut.outputs.map((_, i) => {
    const rowSize = firstOut.outputs[i].length / c.batch;
    const joined = new Float32Array(c.x.shape[0] * rowSize);
    let at = 0;
    for (const p of pieces) {
      joined.set(p.result.outputs[i].subarray(0, p.real * rowSize), at);
      at += p.real * rowSize;
    }
    return { data: joined, shape: [c.x.shape[0], ...firstOut.shapes[i].slice(1)] };
  });
  const mean = samples.reduce((a, b) => a + b, 0) / samples.length;
  const timing = {
    batch: c.batch, runs: samples.length, warmup: warm, warmup_s, rounds: count, mean_ms: mean,
    p50_ms: percentile(samples, 50), p90_ms: percentile(samples, 90), p99_ms: percentile(samples, 99),
    min_ms: Math.min(...samples), max_ms: Math.max(...samples), per_round: { median_ms: medians, reference_ms: [] },
    spread: relativeSpread(medians),
  };
  return { outputs, timing, deterministic };
}

// --- comparison (the rule of the package's check.py and of vitexport's parity check) ------------------

function compare(reference, candidate, tol) {
  if (reference.shape.join() !== candidate.shape.join()) {
    return { passed: false, reason: `shape [${candidate.shape}] != reference [${reference.shape}]` };
  }
  const ref = reference.data;
  const cand = candidate.data;
  let maxDiff = 0;
  let dot = 0;
  let nr = 0;
  let nc = 0;
  let finite = true;
  let within = true;
  for (let i = 0; i < ref.length; i++) {
    const d = Math.abs(ref[i] - cand[i]);
    if (!Number.isFinite(cand[i])) finite = false;
    if (!(d <= tol.atol + tol.rtol * Math.abs(ref[i]))) within = false;
    if (d > maxDiff || Number.isNaN(d)) maxDiff = Number.isNaN(d) ? NaN : Math.max(maxDiff, d);
    dot += ref[i] * cand[i];
    nr += ref[i] * ref[i];
    nc += cand[i] * cand[i];
  }
  const denom = Math.sqrt(nr) * Math.sqrt(nc);
  const cosine = denom > 0 ? dot / denom : sameBits(ref, cand) ? 1 : 0;
  let top1 = 1;
  if (reference.shape.length >= 2 && ref.length) {
    const rows = reference.shape[0];
    const width = ref.length / rows;
    let agree = 0;
    for (let r = 0; r < rows; r++) {
      agree += argmax(ref, r * width, width) === argmax(cand, r * width, width);
    }
    top1 = agree / rows;
  }
  const reasons = [];
  if (!finite) reasons.push("non-finite values");
  if (!within) reasons.push(`max abs error ${maxDiff.toPrecision(3)} exceeds atol ${tol.atol} + rtol ${tol.rtol}*|ref|`);
  if (!(cosine >= tol.min_cosine)) reasons.push(`cosine ${cosine.toFixed(6)} < ${tol.min_cosine}`);
  return {
    passed: !reasons.length, reason: reasons.join("; ") || null, max_abs_error: Number.isNaN(maxDiff) ? "NaN" : maxDiff,
    cosine_similarity: Number.isFinite(cosine) ? cosine : null, top1_agreement: top1,
  };
}

function argmax(values, start, length) {
  let best = start;
  for (let i = start + 1; i < start + length; i++) if (values[i] > values[best]) best = i;
  return best - start;
}

function encoded(output) {
  const data = Array.from(output.data, (v) => (Number.isFinite(v) ? v : Number.isNaN(v) ? "NaN" : v > 0 ? "Infinity" : "-Infinity"));
  return { shape: output.shape, data };
}

// --- the page ------------------------------------------------------------------------------------------

function packageName() {
  const parts = location.pathname.split("/").filter(Boolean);
  return parts.length >= 2 ? decodeURIComponent(parts[parts.length - 2]) : null;
}

function describeDevice(facts) {
  const adapter = facts.webgpu_adapter;
  if (facts.provider === "webgpu" && adapter) {
    const name = [adapter.vendor, adapter.architecture].filter(Boolean).join(" ") || adapter.description || "adapter";
    const placed = facts.webgpu_cpu_nodes;
    const cpu = placed && placed.nodes ? `; ${placed.nodes} of ${placed.of} nodes on the CPU: ${Object.entries(placed.ops).map(([op, n]) => `${op} x${n}`).join(", ")}` : "";
    return `WebGPU: ${name}${adapter.software ? " (software adapter: a CPU's speed)" : ""}${cpu}`;
  }
  return `WebAssembly: ${facts.wasm_threads} thread(s), SIMD${facts.cross_origin_isolated ? "" : ", not cross-origin isolated"}`;
}

function show(report, lines) {
  const verdict = document.getElementById("verdict");
  // Not "PASS": within tolerance is necessary, not sufficient (vitexport verify applies the gates).
  verdict.textContent = report.verdict.passed ? "within tolerance" : "FAIL";
  verdict.className = report.verdict.passed ? "pass" : "fail";
  document.getElementById("device").textContent = `${report.device.runtime} on ${describeDevice(report.device)}`;
  const body = document.querySelector("#cases tbody");
  for (const row of lines) {
    const tr = document.createElement("tr");
    for (const cell of row) {
      const td = document.createElement("td");
      td.textContent = cell;
      tr.appendChild(td);
    }
    body.appendChild(tr);
  }
  const save = document.getElementById("save");
  save.hidden = false;
  save.onclick = () => {
    const link = document.createElement("a");
    link.href = URL.createObjectURL(new Blob([JSON.stringify(report)], { type: "application/json" }));
    link.download = "device-report.json";
    link.click();
  };
}

async function post(result) {
  await fetch("report", { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(result) });
}

async function check(opts) {
  const manifestBytes = await bytesOf("manifest.json");
  const manifest = JSON.parse(new TextDecoder().decode(manifestBytes));
  if (manifest.schema !== SCHEMA.manifest) throw new Stop(CODE.usage, `manifest.json is not a vitexport package manifest (${SCHEMA.manifest})`);
  const count = await verifyFiles(manifest); // before anything of the package is read or run
  const golden = JSON.parse(new TextDecoder().decode(await bytesOf("golden/golden.json")));
  if (golden.schema !== SCHEMA.golden) throw new Stop(CODE.usage, `golden/golden.json is not vitexport golden data (${SCHEMA.golden})`);
  const cases = [];
  for (const c of golden.cases) {
    cases.push({
      name: c.name, batch: c.batch, x: parseNpy(await bytesOf(c.input), c.input),
      reference: await Promise.all(c.outputs.map(async (f) => parseNpy(await bytesOf(f), f))),
    });
  }
  say(`loading the model with ${opts.ep}`);
  const { openRunner } = await import(`./${manifest.runner.file}`);
  let start = performance.now();
  const runner = await openRunner(manifest.runner.settings, opts);
  const load_ms = performance.now() - start;
  const tol = golden.tolerance;
  const results = [];
  const timings = {};
  const lines = [];
  let deterministic = true;
  let first_inference_ms;
  try {
    const [x, dims] = batches(cases[0].x, cases[0].batch).next().value;
    start = performance.now();
    await runner.run(x, dims); // the first inference, alone
    first_inference_ms = performance.now() - start;
    for (const c of cases) {
      say(`timing ${c.name}`);
      const { outputs, timing, deterministic: same } = await timedCase(runner, c, opts);
      deterministic = deterministic && same;
      timings[c.name] = timing;
      const checks = golden.output_names.map((name, i) => ({ output: name, ...compare(c.reference[i], outputs[i], tol) }));
      results.push({ name: c.name, outputs: Object.fromEntries(golden.output_names.map((n, i) => [n, encoded(outputs[i])])), checks });
      for (const k of checks) {
        lines.push([c.name, k.output, typeof k.max_abs_error === "number" ? k.max_abs_error.toPrecision(3) : String(k.max_abs_error ?? ""),
          k.cosine_similarity == null ? "" : k.cosine_similarity.toFixed(6), timing.p50_ms.toFixed(2), k.passed ? "ok" : `FAIL: ${k.reason}`]);
      }
    }
  } finally {
    await runner.close();
  }
  const failures = results.flatMap((r) => r.checks.filter((k) => !k.passed).map((k) => `${r.name} ${k.output}: ${k.reason}`));
  if (!deterministic) failures.push("the same input gave different outputs twice");
  const facts = runner.facts;
  if (!facts.compute_units) {
    const adapter = facts.webgpu_adapter;
    facts.compute_units = adapter ? `WebGPU on ${[adapter.vendor, adapter.architecture].filter(Boolean).join(" ") || "an adapter"}${adapter.software ? " (software adapter)" : ""}`
      : `WebAssembly, ${facts.wasm_threads} thread${facts.wasm_threads === 1 ? "" : "s"}`;
  }
  const report = {
    schema: SCHEMA.report, created: new Date().toISOString(),
    package: {
      name: packageName(), manifest_sha256: await sha256(manifestBytes), target: manifest.target, backend: manifest.artifact.backend,
      artifact: manifest.artifact.file, files_verified: count, batches: [...new Set(cases.map((c) => c.batch))].sort((a, b) => a - b),
    },
    device: facts,
    timings: { budget_s: opts.repeats ? null : opts.budget_s, load_ms, first_inference_ms, cases: timings },
    conditions: { platform: "web", threads: facts.provider === "wasm" ? facts.wasm_threads : null },
    deterministic,
    verdict: { passed: !failures.length, tolerance: tol, failures, task: golden.task || "classification" },
    cases: results,
  };
  show(report, lines);
  say(`${count} files verified; ${failures.length ? "FAIL" : "every output within tolerance"} (atol ${tol.atol}, rtol ${tol.rtol}, ` +
    `min cosine ${tol.min_cosine}); the verdict is vitexport verify --device-report's (it also applies the precision's and the task's gates)`);
  return report;
}

async function main() {
  let opts = { post: new URLSearchParams(location.search).get("report") === "post" };
  try {
    opts = options();
    const report = await check(opts);
    if (opts.post) await post({ report });
  } catch (e) {
    const code = e instanceof Stop ? e.code : e && e.unavailable ? CODE.unavailable : CODE.failure;
    const message = String((e && e.message) || e);
    say(`${code === CODE.failure ? "the runtime failed: " : ""}${message}`);
    const verdict = document.getElementById("verdict");
    verdict.textContent = code === CODE.mismatch ? "FAIL" : "not run";
    verdict.className = "fail";
    if (opts.post) await post({ error: message, code });
  }
}

main();

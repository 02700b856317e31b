// Times this model inside the page for `vitexport bench` (onnxruntime-web, onnxruntime-webgpu): the
// Python side (vitexport/backends/onnx/browser.py) puts tasks on GET /command and reads the answers
// this page posts to /report. Each run is timed here with performance.now(), so what is measured is
// ONNX Runtime Web in this browser, not the channel to Python.
import { openRunner } from "./runner.js";

const query = new URLSearchParams(location.search);

async function post(answer) {
  await fetch("report", { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(answer) });
}

async function burst(runner, data, task) {
  let warm = 0;
  const start = performance.now();
  while (warm < (task.warmup_runs || 0) || performance.now() - start < (task.warmup_s || 0) * 1000) {
    await runner.run(data, task.dims);
    warm++;
  }
  const samples = [];
  const began = performance.now();
  const most = task.max_runs || Infinity;
  while (!samples.length || (samples.length < most && (task.runs ? samples.length < task.runs : performance.now() - began < task.ms))) {
    const t0 = performance.now();
    await runner.run(data, task.dims);
    samples.push(performance.now() - t0);
  }
  return samples;
}

async function main() {
  let runner;
  try {
    const settings = await (await fetch("blob/settings")).json();
    const t0 = performance.now();
    runner = await openRunner(settings, { ep: query.get("ep"), threads: Number(query.get("threads") || 0) });
    await post({ ok: true, op: "open", load_ms: performance.now() - t0, facts: runner.facts });
  } catch (e) {
    await post({ ok: false, op: "open", error: String((e && e.message) || e), unavailable: Boolean(e && e.unavailable) });
    return;
  }
  const feeds = {};
  for (;;) {
    const task = await (await fetch("command")).json();
    if (task.op === "wait") continue;
    if (task.op === "close") {
      await runner.close();
      await post({ ok: true, op: "close" });
      return;
    }
    try {
      if (!(task.feed in feeds)) feeds[task.feed] = new Float32Array(await (await fetch(`blob/${task.feed}`)).arrayBuffer());
      const data = feeds[task.feed];
      if (task.op === "run") {
        const t0 = performance.now();
        const result = await runner.run(data, task.dims);
        const ms = performance.now() - t0;
        await post({ ok: true, op: "run", ms, outputs: result.outputs.map((o) => Array.from(o)), shapes: result.shapes });
      } else if (task.op === "burst") {
        await post({ ok: true, op: "burst", samples_ms: await burst(runner, data, task) });
      } else {
        await post({ ok: false, op: task.op, error: `unknown task ${task.op}` });
      }
    } catch (e) {
      await post({ ok: false, op: task.op, error: String((e && e.message) || e) });
    }
  }
}

main();

// Runs this package's ONNX model in ONNX Runtime Web (ort/, the release named in manifest.json), for
// the page (page.js). settings (manifest.json's runner.settings): file, external_data, input_name,
// output_names, input_dtype, builds (the module each execution provider loads).

// ONNX Runtime logs where it placed each node (at verbose level, while the session is created) to the
// console; the runner reads those lines instead of printing them: the nodes the WebGPU provider left
// to the CPU (WebAssembly) are named in the report.
const captured = [];
let capturing = false;
for (const level of ["log", "info", "warn", "error", "debug"]) {
  const original = console[level].bind(console);
  console[level] = (...args) => (capturing ? captured.push(args.map(String).join(" ")) : original(...args));
}

// "Node(s) placed on [CPUExecutionProvider]. Number of nodes: 12", then one "  OpType (name)" line each
// ("All nodes placed on [...]" when one provider took them all).
function placements(lines) {
  const found = {};
  let current = null;
  for (const line of lines) {
    const head = /(?:Node\(s\)|All nodes) placed on \[(\w+)\]\. Number of nodes: (\d+)/.exec(line);
    if (head) {
      current = found[head[1]] = { nodes: Number(head[2]), ops: {} };
      continue;
    }
    const node = /VerifyEachNodeIsAssignedToAnEp\]\s{3,}(\w+) \(/.exec(line);
    if (node && current) current.ops[node[1]] = (current.ops[node[1]] || 0) + 1;
    else if (!/VerifyEachNodeIsAssignedToAnEp/.test(line)) current = null;
  }
  return found;
}

function unavailable(message) {
  const error = new Error(message);
  error.unavailable = true;
  return error;
}

// What the WebGPU adapter is, and whether it is software (SwiftShader, a fallback adapter): its speed
// is then a CPU's, though its numerics and operator coverage are WebGPU's.
async function adapterFacts() {
  if (!("gpu" in navigator)) {
    throw unavailable("this browser has no WebGPU (navigator.gpu is missing; Chromium needs a secure context, " +
                      "and on Linux --enable-unsafe-webgpu)");
  }
  const adapter = await navigator.gpu.requestAdapter();
  if (!adapter) {
    throw unavailable("WebGPU gives no adapter here (no GPU the browser may use; --webgpu-adapter swiftshader " +
                      "runs WebGPU on the CPU)");
  }
  const info = adapter.info || {};
  const text = [info.vendor, info.architecture, info.device, info.description].join(" ").toLowerCase();
  const fallback = Boolean(info.isFallbackAdapter || adapter.isFallbackAdapter);
  const facts = {
    vendor: info.vendor || null, architecture: info.architecture || null, device: info.device || null,
    description: info.description || null, fallback,
    software: fallback || /swiftshader|llvmpipe|lavapipe|warp|software/.test(text),
  };
  return { facts, adapter };
}

function toFloat32(tensor) {
  const data = tensor.data;
  if (data instanceof Float32Array) {
    return new Float32Array(data); // a copy: the runtime may reuse its buffers
  }
  if (typeof Float16Array !== "undefined" && data instanceof Float16Array) {
    return Float32Array.from(data);
  }
  if (data instanceof Uint16Array) { // float16 as bits, where the browser has no Float16Array
    return Float32Array.from(data, halfToFloat);
  }
  return Float32Array.from(data, Number);
}

function halfToFloat(bits) {
  const sign = bits & 0x8000 ? -1 : 1;
  const exponent = (bits >> 10) & 0x1f;
  const fraction = bits & 0x3ff;
  if (exponent === 0) return sign * 2 ** -14 * (fraction / 1024);
  if (exponent === 31) return fraction ? NaN : sign * Infinity;
  return sign * 2 ** (exponent - 15) * (1 + fraction / 1024);
}

export async function openRunner(settings, options) {
  const ep = options.ep;
  if (!(ep in settings.builds)) {
    throw new Error(`no execution provider ${ep} in this package (it carries ${Object.keys(settings.builds)})`);
  }
  const chosen = ep === "webgpu" ? await adapterFacts() : null;
  const adapter = chosen ? chosen.facts : null;
  const ort = await import(`./ort/${settings.builds[ep]}`);
  if (chosen) {
    // The runtime on the very adapter recorded, not one it would ask for again (another, on a machine with two).
    ort.env.webgpu.adapter = chosen.adapter;
    adapter.given_to_runtime = ort.env.webgpu.adapter === chosen.adapter;
  }
  // Threads need SharedArrayBuffer, which only a cross-origin isolated page has (COOP/COEP headers).
  const threads = self.crossOriginIsolated ? (options.threads || Math.min(4, navigator.hardwareConcurrency || 1)) : 1;
  ort.env.wasm.numThreads = threads;
  ort.env.wasm.proxy = false;
  ort.env.logLevel = "warning";
  const externalData = (settings.external_data || []).map((name) => ({ path: name, data: name }));
  const bytes = new Uint8Array(await (await fetch(settings.file)).arrayBuffer());
  let session;
  const verbose = ep === "webgpu"; // where the nodes go matters only beside the CPU
  try {
    ort.env.logLevel = verbose ? "verbose" : "warning";
    capturing = verbose;
    session = await ort.InferenceSession.create(bytes, {
      executionProviders: [ep], graphOptimizationLevel: "all", externalData,
      logSeverityLevel: verbose ? 0 : 2, logVerbosityLevel: 0,
    });
  } catch (e) {
    if (ep === "webgpu" && /webgpu|adapter|device/i.test(String(e && e.message))) {
      throw unavailable(`the WebGPU provider cannot start: ${e.message}`);
    }
    throw e;
  } finally {
    capturing = false;
    ort.env.logLevel = "warning";
  }
  const placed = verbose ? placements(captured.splice(0)) : {};
  const gpu = placed.WebGpuExecutionProvider || placed.JsExecutionProvider;
  const cpu = placed.CPUExecutionProvider;
  const fallback = gpu || cpu ? {
    nodes: cpu ? cpu.nodes : 0, of: (cpu ? cpu.nodes : 0) + (gpu ? gpu.nodes : 0), ops: cpu ? cpu.ops : {},
  } : null;
  const dtype = settings.input_dtype === "float16" ? "float16" : "float32";
  const half = dtype === "float16" && typeof Float16Array !== "undefined";
  if (dtype === "float16" && !half) {
    throw unavailable("this model takes float16 input and this browser has no Float16Array");
  }
  const outputNames = settings.output_names;
  return {
    facts: {
      runtime: `ONNX Runtime Web ${ort.env.versions ? ort.env.versions.web || ort.env.versions.common : ""}`.trim(),
      provider: ep, wasm_threads: threads, wasm_simd: true, cross_origin_isolated: Boolean(self.crossOriginIsolated),
      webgpu_adapter: adapter, webgpu_cpu_nodes: fallback, user_agent: navigator.userAgent,
    },
    async run(data, dims) {
      const values = half ? Float16Array.from(data) : data;
      const feeds = { [settings.input_name]: new ort.Tensor(dtype, values, dims) };
      const results = await session.run(feeds, outputNames, { logSeverityLevel: 3 });
      const outputs = outputNames.map((name) => toFloat32(results[name]));
      const shapes = outputNames.map((name) => Array.from(results[name].dims));
      for (const name of outputNames) {
        if (results[name].dispose) results[name].dispose();
      }
      return { outputs, shapes };
    },
    async close() {
      await session.release();
    },
  };
}

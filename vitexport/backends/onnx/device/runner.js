// Runs this package's ONNX model in ONNX Runtime Web (ort/, the release named in manifest.json), for
// the page (page.js). settings (manifest.json's runner.settings): file, external_data, input_name,
// output_names, input_dtype, builds (the module each execution provider loads).

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
  return {
    vendor: info.vendor || null, architecture: info.architecture || null, device: info.device || null,
    description: info.description || null, fallback,
    software: fallback || /swiftshader|llvmpipe|lavapipe|warp|software/.test(text),
  };
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
  const adapter = ep === "webgpu" ? await adapterFacts() : null;
  const ort = await import(`./ort/${settings.builds[ep]}`);
  // Threads need SharedArrayBuffer, which only a cross-origin isolated page has (COOP/COEP headers).
  const threads = self.crossOriginIsolated ? (options.threads || Math.min(4, navigator.hardwareConcurrency || 1)) : 1;
  ort.env.wasm.numThreads = threads;
  ort.env.wasm.proxy = false;
  ort.env.logLevel = "warning";
  const externalData = (settings.external_data || []).map((name) => ({ path: name, data: name }));
  const bytes = new Uint8Array(await (await fetch(settings.file)).arrayBuffer());
  let session;
  try {
    session = await ort.InferenceSession.create(bytes, {
      executionProviders: [ep], graphOptimizationLevel: "all", externalData, logSeverityLevel: 2,
    });
  } catch (e) {
    if (ep === "webgpu" && /webgpu|adapter|device/i.test(String(e && e.message))) {
      throw unavailable(`the WebGPU provider cannot start: ${e.message}`);
    }
    throw e;
  }
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
      webgpu_adapter: adapter, user_agent: navigator.userAgent,
    },
    async run(data, dims) {
      const values = half ? Float16Array.from(data) : data;
      const feeds = { [settings.input_name]: new ort.Tensor(dtype, values, dims) };
      const results = await session.run(feeds, outputNames);
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

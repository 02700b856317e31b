"""What a package tells people: preprocessing.json (the model's input in words a mobile developer can
follow, from the sidecar's preprocessing) and the README for its target."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from vitexport.backends.base import DeviceCheck, DeviceTarget
    from vitexport.export.sidecar import ArtifactRecord


def preprocessing(record: "ArtifactRecord", labels: list[str] | None, input_dtype: str) -> dict[str, Any]:
    """preprocessing.json: input name, layout, dtype, channel order, resize/crop, mean/std, the steps in
    words, labels when the model has them."""
    pre = record.source.preprocessing
    shape = list(record.input_shape)
    channels, height, width = record.source.input_shape[1:]
    mean = pre.get("mean") or [0.0] * channels
    std = pre.get("std") or [1.0] * channels
    colour = "RGB" if channels == 3 else "grayscale (one channel)" if channels == 1 else f"{channels} channels"
    batch = (f"1 to {record.options.get('max_batch') or 8} images" if record.dynamic_batch
             else f"exactly {shape[0]} image{'s' if shape[0] != 1 else ''}")
    steps = _steps(pre, channels, height, width, mean, std)
    image_input = bool(record.info.get("image_input"))
    doc = {
        "input": {"name": record.input_names[0], "layout": "NCHW", "shape": shape, "dtype": input_dtype,
                  "batch": batch, "channel_order": colour},
        "outputs": list(record.output_names),
        "mean": mean, "std": std,
        "steps": steps,
        "in_words": " ".join(s["words"] for s in steps),
        "labels": labels,
    }
    if image_input:
        doc["image_input"] = ("This Core ML package takes the RGB image itself (8-bit values 0-255, e.g. a "
                              "CVPixelBuffer); the mean/std normalisation is inside the model, so do the resize and "
                              "crop only.")
    if pre.get("description"):
        doc["processor"] = pre.get("processor")
        doc["processor_description"] = pre["description"]
    return doc


def _steps(pre: dict, channels: int, height: int, width: int, mean, std) -> list[dict[str, Any]]:
    """The steps vitexport itself applies to --images (vitexport.verify.feeds.preprocess), in order."""
    colour = "RGB" if channels == 3 else "8-bit grayscale" if channels == 1 else f"{channels}-channel"
    steps: list[dict[str, Any]] = [{"step": "decode", "to": colour,
                                    "words": f"Decode the image to {colour} with 8 bits per channel"
                                             + (" (drop alpha, convert palette and CMYK)." if channels == 3 else ".")}]
    proc = pre.get("processor")
    if proc:  # a Hugging Face image processor: its own steps
        if proc.get("resize"):
            resize = proc["resize"]
            size = (f"the shorter side to {resize['shortest_edge']} pixels" if "shortest_edge" in resize
                    else f"{resize['width']}x{resize['height']} pixels")
            steps.append({"step": "resize", **resize, "interpolation": proc.get("resample"), "antialias": True,
                          "words": f"Resize {size} with {proc.get('resample')} interpolation (antialiased)."})
        if proc.get("center_crop"):
            crop = proc["center_crop"]
            steps.append({"step": "center_crop", **crop,
                          "words": f"Crop the centre {crop['width']}x{crop['height']} pixels."})
    else:
        crop_pct = pre.get("crop_pct") or 1.0
        shorter = round(max(height, width) / crop_pct)
        interpolation = "bicubic" if pre.get("interpolation") == "bicubic" else "bilinear"
        steps.append({"step": "resize", "shorter_side": shorter, "interpolation": interpolation,
                      "words": f"Resize so the shorter side is {shorter} pixels ({interpolation}; skipped when the "
                               f"image is already {width}x{height})."})
        steps.append({"step": "center_crop", "width": width, "height": height,
                      "words": f"Crop the centre {width}x{height} pixels (left = (w - {width}) // 2, "
                               f"top = (h - {height}) // 2)."})
    steps.append({"step": "scale", "divide_by": 255.0, "words": "Divide each 8-bit value by 255 (0..1)."})
    steps.append({"step": "normalize", "mean": list(mean), "std": list(std),
                  "words": f"Per channel{' (R, G, B)' if channels == 3 else ''}: subtract mean "
                           f"{_list(mean)} and divide by std {_list(std)}."})
    steps.append({"step": "layout", "layout": "NCHW",
                  "words": f"Lay the values out channel by channel (planar, NCHW: {channels}x{height}x{width} "
                           "floats per image), not pixel by pixel."})
    return steps


def _list(values) -> str:
    return "[" + ", ".join(f"{v:.4g}" for v in values) + "]"


def readme(target: "DeviceTarget", check: "DeviceCheck", folder: str, record: "ArtifactRecord",
           golden: dict[str, Any], pre: dict[str, Any]) -> str:
    """The package's README.md: what it holds, how to put it on the device, how to run the check, what
    to send back."""
    tol = golden["tolerance"]
    cases = ", ".join(f"{c['name']} ({c['rows']} x batch {c['batch']})" for c in golden["cases"])
    head = [f"# {folder}: {record.source.model} as {record.backend} ({record.precision}) for {target.device}", "",
            f"This folder proves the artifact on the device: its check verifies every file against `manifest.json` "
            f"(sha256), runs it with {check.runtime} on the golden inputs in `golden/` ({cases}), compares the outputs "
            f"with PyTorch's (atol {tol['atol']:g}, rtol {tol['rtol']:g}, min cosine {tol['min_cosine']}) and writes "
            "`device-report.json`: the outputs, timings and the device's facts.", ""]
    body = HOW[target.language](target, check, folder)
    back = ["## Send the report back", "",
            "Copy `device-report.json` to the machine with this package and judge it there:", "",
            "```bash", f"vitexport verify --device-report device-report.json --package {folder}", "```", "",
            "It prints the parity table with the device named and exits 0 when every output is within tolerance, 4 "
            "when not, and 2 when the report does not come from this package (its manifest's sha256 differs).", ""]
    model = ["## The model's input", "", pre["in_words"], ""]
    if pre.get("image_input"):
        model += [pre["image_input"], ""]
    model += [f"Input `{pre['input']['name']}`: {pre['input']['dtype']}, {pre['input']['layout']} "
              f"{pre['input']['shape']} ({pre['input']['batch']}); outputs: "
              + ", ".join(f"`{n}`" for n in pre["outputs"]) + ". Everything is in `preprocessing.json`"
              + (" (with the class names)" if pre.get("labels") else "") + ".", ""]
    notes = ["## Notes", ""] + [f"- {n}" for n in check.notes] + [""] if check.notes else []
    return "\n".join(head + body + back + model + notes).rstrip() + "\n"


def _python(target: "DeviceTarget", check: "DeviceCheck", folder: str) -> list[str]:
    copy = {"jetson": f"scp -r {folder} jetson:", "macos": f"scp -r {folder} mac:",
            "linux": f"scp -r {folder} device:"}[target.name]
    return ["## Run the check", "",
            f"1. Copy this folder to {target.device}: `{copy}` (any copy that keeps the bytes).",
            f"2. Install what it needs there: Python 3.8 or newer, numpy, and {check.install}. vitexport itself is "
            "not needed.",
            "3. Run `python3 check.py` in the folder (`--help` lists its options). Exit 0: every output matches "
            "PyTorch; 4: a file differs from `manifest.json` (nothing ran) or an output is out of tolerance; "
            "3: the runtime is missing.",
            "4. It also times each case as `vitexport bench` does: a warm-up, then short rounds within "
            "`--budget-s` seconds (default 3) with a small reference kernel between them, p50/p90/p99 and the spread "
            "of the round medians, and what the device says of its state (steal and clock on Linux; power mode, "
            "clocks and temperatures on a Jetson), with `devicetiming.py` and `roundstats.py` (bench's statistics), "
            "and what the load cost (a cold load with `pagecache.py`, the first inference, the memory it added), "
            "each file verified against `manifest.json` like every other.",
            "5. A model that does not classify is judged in its task's terms too (a depth map by its depth error, "
            "boxes by the detections they keep), with `taskmeasures.py`: the numbers vitexport's parity check "
            "computes, and the gate of the package's precision.", ""]


def _swift(target: "DeviceTarget", check: "DeviceCheck", folder: str) -> list[str]:
    return ["## Run the check (XCTest)", "",
            "1. In Xcode, add a Unit Testing Bundle target to your app's project (File > New > Target), "
            f"and add `DeviceCheckTests.swift` and `{check.runner_name}` to it.",
            f"2. Drag this folder (`{folder}`) into that target as a folder reference (\"Create folder "
            "references\", a blue folder), so the files keep their names and bytes: the test verifies each "
            "against `manifest.json` and compiles the model itself on the device.",
            f"3. {sentence(check.install)}",
            "4. Run the tests on the device: in Xcode (Product > Test), or "
            "`xcodebuild test -scheme YourApp -destination 'platform=iOS,name=Your iPhone' "
            "-only-testing:YourAppTests/DeviceCheckTests`. One test per compute-unit setting: `testAll`, "
            "`testCPUOnly`, `testCPUAndGPU`, `testCPUAndNeuralEngine` (the Neural Engine computes in fp16).",
            "5. Each writes `device-report-<units>.json` into the test's Documents folder and attaches it to the "
            "test result; get it with `xcrun xcresulttool export attachments --path Test.xcresult "
            "--output-path reports/` (or from the report navigator in Xcode).", "",
            "These sources are written against Apple's and ExecuTorch's documented APIs; vitexport's own tests "
            "cannot compile or run them (no Xcode there).", ""]


def _kotlin(target: "DeviceTarget", check: "DeviceCheck", folder: str) -> list[str]:
    return ["## Run the check (instrumented test)", "",
            f"1. Put `DeviceCheckTest.kt` and `{check.runner_name}` in your app module's "
            "`src/androidTest/java/org/vitexport/devicecheck/`.",
            f"2. Put this folder (`{folder}`) in `src/androidTest/assets/` as it is: the test copies it to the "
            "device's storage and verifies each file against `manifest.json`.",
            f"3. {sentence(check.install)}",
            "4. Run it on a connected phone: `./gradlew connectedAndroidTest "
            "-Pandroid.testInstrumentationRunnerArguments.class=org.vitexport.devicecheck.DeviceCheckTest`.",
            "5. The report is written to the app's external files folder; fetch it with "
            "`adb pull /sdcard/Android/data/<your.app.id>/files/device-report.json` (the test also logs its "
            "path under the tag `vitexport`).", "",
            "These sources are written against ExecuTorch's documented Android API; vitexport's own tests cannot "
            "compile or run them (no Android toolchain there).", ""]


def _web(target: "DeviceTarget", check: "DeviceCheck", folder: str) -> list[str]:
    version = check.settings.get("onnxruntime_web", "")
    return ["## Run the check (a page in a browser)", "",
            f"1. {sentence(check.install)}",
            "2. Run `python3 check.py` in the folder (`--ep webgpu` for WebGPU; `--browser PATH` for another "
            "Chromium or Chrome; `--help` lists the options). It verifies every file against `manifest.json`, "
            "serves the folder on 127.0.0.1 with the cross-origin isolation headers WebAssembly threads need, opens "
            "`index.html` in a headless browser, waits for the page's result and writes `device-report.json`. Exit "
            "0: the page ran and every output is within the golden tolerance; 4: a file differs from "
            "`manifest.json` or an output is out of tolerance; 3: no browser, or no WebGPU adapter in it. The "
            "verdict is `vitexport verify --device-report`'s: it also applies the precision's top-1 and accuracy "
            "gates and the task's gates, which the page does not compute.",
            f"3. The page runs the golden inputs with ONNX Runtime Web {version} from `ort/` (nothing from a CDN: it "
            "runs with the network off), times each case as `vitexport bench` does (a warm-up, then rounds within "
            "`--budget-s`, p50/p90/p99 and the spread of the round medians), and records the WebGPU adapter (a "
            "software one, such as SwiftShader, is marked as such: its speed is a CPU's).",
            "4. In a browser of your own: `python3 check.py --serve`, open the address it prints (add `?ep=webgpu` "
            "for WebGPU); the page shows the verdict and saves the report (any server works that sends "
            "`Cross-Origin-Opener-Policy: same-origin` and `Cross-Origin-Embedder-Policy: require-corp`; without "
            "them WebAssembly runs on one thread).", ""]


HOW = {"python": _python, "swift": _swift, "kotlin": _kotlin, "web": _web}


def sentence(text: str) -> str:
    """A backend's phrase ("nothing to install or link (...)") as a step of the README: capital, full stop."""
    text = text.strip().rstrip(".")
    return text[:1].upper() + text[1:] + "."

// Proves this package's model on an iPhone or iPad: verifies every file against manifest.json
// (sha256), runs the golden inputs through the backend's runner (CoreMLRunner.swift or
// ExecuTorchRunner.swift, beside this file), compares the outputs with PyTorch's and writes
// device-report-<units>.json for `vitexport verify --device-report`. See README.md.
//
// Each case is timed as `vitexport bench` and check.py time it: a warm-up, then rounds within a
// budget (VITEXPORT_BUDGET_S in the test's environment, default 3 s per case) with a small reference
// kernel between them, p50/p90/p99 over all runs and the spread of the round medians (RoundStats
// below: the formulas of vitexport/core/roundstats.py), and the device's state: the worst
// ProcessInfo.thermalState seen while timing and Low Power Mode.
//
// Written by vitexport for Xcode 15 / iOS 16 or newer; vitexport's own tests cannot compile it.
import Accelerate
import CryptoKit
import Foundation
import XCTest

/// One output of one run: values in row-major order and the shape.
struct Output {
    var values: [Float]
    var shape: [Int]
}

/// What a backend's runner file provides (with `makeRunner(package:settings:computeUnits:)`).
protocol ArtifactRunner {
    var facts: [String: Any] { get }
    func run(_ input: [Float], shape: [Int]) throws -> [Output]
}

struct CheckError: LocalizedError {
    let errorDescription: String?
    init(_ message: String) { errorDescription = message }
}

final class DeviceCheckTests: XCTestCase {
    // One test per Core ML compute-unit setting (names as ExecuTorch's Core ML delegate takes them).
    func testAll() async throws { try await check(computeUnits: "all") }
    func testCPUOnly() async throws { try await check(computeUnits: "cpu_only") }
    func testCPUAndGPU() async throws { try await check(computeUnits: "cpu_and_gpu") }
    func testCPUAndNeuralEngine() async throws { try await check(computeUnits: "cpu_and_ne") }

    let warmup = 1  // untimed runs before timing a case, at least (and warmupSeconds)

    /// Seconds of timed runs per case: VITEXPORT_BUDGET_S in the test's environment (the scheme's Test
    /// action, or TEST_RUNNER_VITEXPORT_BUDGET_S given to xcodebuild), else 3, as check.py's --budget-s.
    let budgetSeconds: Double = {
        if let text = ProcessInfo.processInfo.environment["VITEXPORT_BUDGET_S"], let value = Double(text),
           value > 0, value <= 3600 {
            return value
        }
        return 3.0
    }()

    private func check(computeUnits: String) async throws {
        let package = try packageFolder()
        let manifest = try json(package.appendingPathComponent("manifest.json"))
        let verified = try verifyFiles(package, manifest)  // before anything of the package is run
        let golden = try json(package.appendingPathComponent("golden/golden.json"))
        let runnerInfo = manifest["runner"] as? [String: Any] ?? [:]
        let settings = runnerInfo["settings"] as? [String: Any] ?? [:]
        let footprintBefore = footprintMB()
        let loadStart = now()
        let runner = try await makeRunner(package: package, settings: settings, computeUnits: computeUnits)
        let loadMs = milliseconds(since: loadStart)
        var loadCosts: [String: Any] = [:]
        if let before = footprintBefore, let after = footprintMB() {
            loadCosts["load_anon_mb"] = max(0, after - before)  // the footprint counts owned memory, not mapped files
        }

        let names = golden["output_names"] as? [String] ?? []
        let tolerance = golden["tolerance"] as? [String: Double] ?? [:]
        var cases: [[String: Any]] = [], timings: [String: Any] = [:], failures: [String] = []
        var deterministic = true
        var batches = Set<Int>()
        let rounds = Rounds()
        for entry in golden["cases"] as? [[String: Any]] ?? [] {
            let name = entry["name"] as? String ?? "?", batch = entry["batch"] as? Int ?? 1
            let input = try readNpy(package.appendingPathComponent(entry["input"] as? String ?? ""))
            let references = try (entry["outputs"] as? [String] ?? []).map {
                try readNpy(package.appendingPathComponent($0))
            }
            batches.insert(batch)
            let (outputs, timing, same) = try runCase(runner, input, batch: batch, rounds: rounds)
            deterministic = deterministic && same
            timings[name] = timing
            var encoded: [String: Any] = [:], checks: [[String: Any]] = []
            for (i, output) in outputs.enumerated() where i < names.count {
                encoded[names[i]] = ["shape": output.shape, "data": output.values.map { jsonNumber(Double($0)) }]
                var result = compare(references[i], output, tolerance)
                result["output"] = names[i]
                checks.append(result)
                if result["passed"] as? Bool != true {
                    failures.append("\(name) \(names[i]): \(result["reason"] ?? "")")
                }
            }
            cases.append(["name": name, "outputs": encoded, "checks": checks])
        }
        if !deterministic { failures.append("the same input gave different outputs twice") }

        var device: [String: Any] = ["model": machine(), "os": ProcessInfo.processInfo.operatingSystemVersionString,
                                     "processors": ProcessInfo.processInfo.activeProcessorCount]
        device.merge(runner.facts) { _, new in new }
        let manifestDigest = try sha256(package.appendingPathComponent("manifest.json"))
        let report: [String: Any] = [
            "schema": "vitexport.device-report/1",
            "created": ISO8601DateFormatter().string(from: Date()),
            "package": ["name": package.lastPathComponent,
                        "manifest_sha256": manifestDigest,
                        "target": manifest["target"] ?? NSNull(),
                        "backend": (manifest["artifact"] as? [String: Any])?["backend"] ?? NSNull(),
                        "artifact": (manifest["artifact"] as? [String: Any])?["file"] ?? NSNull(),
                        "files_verified": verified, "batches": batches.sorted()] as [String: Any],
            "device": device,
            "timings": (["budget_s": budgetSeconds, "load_ms": loadMs, "cases": timings] as [String: Any])
                .merging(loadCosts) { old, _ in old },
            "conditions": rounds.conditions(),
            "deterministic": deterministic,
            "verdict": ["passed": failures.isEmpty, "tolerance": tolerance, "failures": failures],
            "cases": cases,
        ]
        let data = try JSONSerialization.data(withJSONObject: report)
        let documents = try FileManager.default.url(for: .documentDirectory, in: .userDomainMask,
                                                    appropriateFor: nil, create: true)
        let file = documents.appendingPathComponent("device-report-\(computeUnits).json")
        try data.write(to: file, options: .atomic)
        let attachment = XCTAttachment(data: data, uniformTypeIdentifier: "public.json")
        attachment.name = file.lastPathComponent
        attachment.lifetime = .keepAlways
        add(attachment)
        print("vitexport: \(failures.isEmpty ? "PASS" : "FAIL") with compute units \(computeUnits); report \(file.path)")
        XCTAssertTrue(failures.isEmpty, failures.prefix(3).joined(separator: "; "))
    }

    /// The package folder among the test bundle's resources: the one whose manifest.json is vitexport's.
    private func packageFolder() throws -> URL {
        guard let resources = Bundle(for: DeviceCheckTests.self).resourceURL else {
            throw CheckError("the test bundle has no resources: add the package folder to this test target")
        }
        let folders = try FileManager.default.contentsOfDirectory(at: resources, includingPropertiesForKeys: nil)
        let packages = folders.filter {
            (try? json($0.appendingPathComponent("manifest.json")))?["schema"] as? String == "vitexport.package/1"
        }
        guard packages.count == 1 else {
            throw CheckError("expected one vitexport package folder in the test bundle, found \(packages.count): "
                + "add it as a folder reference (a blue folder) to this test target")
        }
        return packages[0]
    }

    /// Every file the manifest lists has its size and sha256; throws naming the first that does not.
    private func verifyFiles(_ package: URL, _ manifest: [String: Any]) throws -> Int {
        guard let files = manifest["files"] as? [String: [String: Any]], !files.isEmpty else {
            throw CheckError("manifest.json lists no files")
        }
        for name in files.keys.sorted() {
            let url = package.appendingPathComponent(name)
            let size = (try? FileManager.default.attributesOfItem(atPath: url.path)[.size] as? NSNumber)?.intValue
            guard let size else { throw CheckError("\(name): missing (manifest.json lists it): copy the package again") }
            let changed = CheckError("\(name): sha256 differs from manifest.json: the file is damaged or was changed")
            if size != files[name]?["size"] as? Int { throw changed }
            if try sha256(url) != files[name]?["sha256"] as? String { throw changed }
        }
        return files.count
    }

    /// Rows in runs of `batch` (the last padded with its final row); the first run timed after a
    /// warm-up, in rounds within the budget with the reference kernel between them.
    private func runCase(_ runner: ArtifactRunner, _ input: Npy, batch: Int, rounds: Rounds) throws
        -> ([Output], [String: Any], Bool) {
        let row = input.values.count / max(input.shape[0], 1)
        let shape = [batch] + input.shape.dropFirst()
        func rows(_ start: Int) -> ([Float], Int) {
            let real = min(batch, input.shape[0] - start)
            var values = Array(input.values[(start * row)..<((start + real) * row)])
            for _ in real..<batch { values += input.values[((start + real - 1) * row)..<((start + real) * row)] }
            return (values, real)
        }
        let (first, firstReal) = rows(0)
        let warmupSeconds = min(1.0, budgetSeconds / 4), warmStart = now()
        var warm = 0
        while warm < max(1, warmup) || milliseconds(since: warmStart) < warmupSeconds * 1000 {
            _ = try runner.run(first, shape: shape)
            warm += 1
        }
        let warmedSeconds = milliseconds(since: warmStart) / 1000
        let count = RoundStats.roundCount(budgetSeconds), burstMs = budgetSeconds * 1000 / Double(count)
        var times: [Double] = [], medians: [Double] = [], references: [Double] = []
        var kept: [Output] = [], last: [Output] = []
        for _ in 0..<count {
            let (timed, reference) = try rounds.round {
                var samples: [Double] = []
                let began = now()
                while samples.isEmpty || milliseconds(since: began) < burstMs {
                    let start = now()
                    last = try runner.run(first, shape: shape)
                    samples.append(milliseconds(since: start))
                    if kept.isEmpty { kept = last }
                }
                return samples
            }
            times += timed
            medians.append(RoundStats.median(timed))
            references.append(reference)
        }
        let same = zip(kept, last).allSatisfy { a, b in
            a.values.elementsEqual(b.values) { x, y in x == y || (x.isNaN && y.isNaN) }
        }
        var outputs = kept.map { trimmed($0, to: firstReal) }
        var start = batch
        while start < input.shape[0] {
            let (values, real) = rows(start)
            for (i, out) in try runner.run(values, shape: shape).enumerated() where i < outputs.count {
                let part = trimmed(out, to: real)
                outputs[i].values += part.values
                outputs[i].shape[0] += real
            }
            start += batch
        }
        let timing: [String: Any] = [
            "batch": batch, "runs": times.count, "warmup": warm, "warmup_s": warmedSeconds, "rounds": count,
            "mean_ms": times.reduce(0, +) / Double(times.count), "min_ms": times.min() ?? 0, "max_ms": times.max() ?? 0,
            "p50_ms": RoundStats.percentile(times, 50), "p90_ms": RoundStats.percentile(times, 90),
            "p99_ms": RoundStats.percentile(times, 99),
            "per_round": ["median_ms": medians, "reference_ms": references],
            "spread": RoundStats.relativeSpread(medians).map { $0 as Any } ?? NSNull(),
        ]
        return (outputs, timing, same)
    }

    private func trimmed(_ output: Output, to rows: Int) -> Output {
        let per = output.values.count / max(output.shape.first ?? 1, 1)
        return Output(values: Array(output.values.prefix(rows * per)), shape: [rows] + output.shape.dropFirst())
    }

    /// The rule vitexport's parity check applies, on this output.
    private func compare(_ reference: Npy, _ output: Output, _ tolerance: [String: Double]) -> [String: Any] {
        guard reference.shape == output.shape else {
            return ["passed": false, "reason": "shape \(output.shape) != reference \(reference.shape)"]
        }
        let atol = tolerance["atol"] ?? 0, rtol = tolerance["rtol"] ?? 0, minCosine = tolerance["min_cosine"] ?? 1
        var maxError = 0.0, dot = 0.0, normRef = 0.0, normOut = 0.0, within = true, finite = true
        for (r, o) in zip(reference.values.map(Double.init), output.values.map(Double.init)) {
            finite = finite && o.isFinite
            let error = abs(r - o)
            maxError = max(maxError, error.isNaN ? .infinity : error)
            within = within && error <= atol + rtol * abs(r)
            dot += r * o; normRef += r * r; normOut += o * o
        }
        let cosine = normRef * normOut > 0 ? dot / (normRef * normOut).squareRoot() : (maxError == 0 ? 1 : 0)
        var reasons: [String] = []
        if !finite { reasons.append("non-finite values") }
        if !within { reasons.append("max abs error \(maxError) exceeds atol \(atol) + rtol \(rtol)*|ref|") }
        if cosine < minCosine { reasons.append("cosine \(cosine) < \(minCosine)") }
        return ["passed": reasons.isEmpty, "reason": reasons.isEmpty ? NSNull() : reasons.joined(separator: "; "),
                "max_abs_error": jsonNumber(maxError), "cosine_similarity": jsonNumber(cosine)]
    }
}

/// The statistics of vitexport/core/roundstats.py (which bench and check.py run), formula for formula.
enum RoundStats {
    static let burstSeconds = 0.25, minRounds = 8, maxRounds = 200
    static let disturbedShare = 0.25

    /// Linear interpolation between closest ranks (numpy's default).
    static func percentile(_ values: [Double], _ q: Double) -> Double {
        let ordered = values.sorted()
        let position = Double(ordered.count - 1) * q / 100
        let low = Int(position.rounded(.down)), high = Int(position.rounded(.up))
        return ordered[low] + (ordered[high] - ordered[low]) * (position - Double(low))
    }

    static func median(_ values: [Double]) -> Double {
        let ordered = values.sorted(), mid = ordered.count / 2
        return ordered.count % 2 == 1 ? ordered[mid] : (ordered[mid - 1] + ordered[mid]) / 2
    }

    /// 1.4826 x the median absolute deviation over the median; nil below two rounds.
    static func relativeSpread(_ values: [Double]) -> Double? {
        guard values.count >= 2 else { return nil }
        let m = median(values)
        return m > 0 ? 1.4826 * median(values.map { abs($0 - m) }) / m : nil
    }

    /// Rounds of about burstSeconds that fill the budget (Python's round: half to even).
    static func roundCount(_ budget: Double) -> Int {
        max(minRounds, min(maxRounds, Int((budget / burstSeconds).rounded(.toNearestOrEven))))
    }

    /// Per round: did its reference kernel take more than 25 % longer than the fastest round's?
    static func disturbed(_ references: [Double]) -> [Bool] {
        guard let best = references.filter({ $0 > 0 }).min() else { return references.map { _ in false } }
        return references.map { $0 > 0 && $0 > (1 + disturbedShare) * best }
    }

    static func phaseChanges(_ references: [Double]) -> Int {
        let flags = disturbed(references)
        return zip(flags, flags.dropFirst()).filter { $0 != $1 }.count
    }
}

/// bench's reference kernel in Accelerate: a float32 product of two 256 x 256 matrices, timed between
/// rounds; when it slows, the device was busy with something else, or throttled.
final class ReferenceKernel {
    static let n = 256
    let what = "Accelerate vDSP_mmul float32 256³"
    let flop = 2.0 * Double(ReferenceKernel.n * ReferenceKernel.n * ReferenceKernel.n)
    private var a: [Float], b: [Float], c: [Float]

    init() {
        var state: UInt64 = 0x9E3779B97F4A7C15
        func next() -> Float {  // a fixed pseudo-random sequence in [-1, 1)
            state = state &* 6364136223846793005 &+ 1442695040888963407
            return Float(state >> 40) / Float(1 << 23) - 1
        }
        let count = ReferenceKernel.n * ReferenceKernel.n
        a = (0..<count).map { _ in next() }
        b = (0..<count).map { _ in next() }
        c = [Float](repeating: 0, count: count)
    }

    private func product() {
        let n = vDSP_Length(ReferenceKernel.n)
        vDSP_mmul(a, 1, b, 1, &c, 1, n, n, n)
    }

    /// One burst of about 15 ms after an untimed product; the median of its products in ms.
    func burst() -> Double {
        product()
        var samples: [Double] = []
        let start = now()
        while samples.isEmpty || milliseconds(since: start) < 15 {
            let t = now()
            product()
            samples.append(milliseconds(since: t))
        }
        return RoundStats.median(samples)
    }
}

/// Every round of every case, as bench keeps them: the reference kernel either side of a round (the
/// slower of the two is the round's), the round's seconds, and the worst thermal state seen.
final class Rounds {
    struct State {
        let referenceMs: Double
        let referenceEachMs: [Double]
        let seconds: Double
    }

    let kernel = ReferenceKernel()
    private(set) var states: [State] = []
    private var last: Double?
    private var worstThermal = ProcessInfo.processInfo.thermalState

    func round(_ burst: () throws -> [Double]) rethrows -> ([Double], Double) {
        let before = last ?? kernel.burst()
        let start = now()
        let samples = try burst()
        let seconds = milliseconds(since: start) / 1000
        let after = kernel.burst()
        last = after
        let thermal = ProcessInfo.processInfo.thermalState
        if thermal.rawValue > worstThermal.rawValue { worstThermal = thermal }
        states.append(State(referenceMs: max(before, after), referenceEachMs: [before, after], seconds: seconds))
        return (samples, max(before, after))
    }

    /// The report's `conditions`, in the shape of bench's (steal and the clock cannot be read on iOS).
    func conditions() -> [String: Any] {
        let references = states.map { $0.referenceMs }
        let known = states.flatMap { $0.referenceEachMs }
        var kernelEntry: Any = NSNull()
        if let fastest = known.min(), let slowest = known.max() {
            let middle = RoundStats.median(known)
            kernelEntry = ["what": kernel.what, "ms": ["median": middle, "min": fastest, "max": slowest],
                           "gflops": ["median": kernel.flop / middle / 1e6, "best": kernel.flop / fastest / 1e6,
                                      "worst": kernel.flop / slowest / 1e6]] as [String: Any]
        }
        return [
            "rounds": states.count, "seconds": states.reduce(0.0) { $0 + $1.seconds },
            "steal": NSNull(), "clock_ghz": NSNull(), "reference_kernel": kernelEntry,
            "phase_changes": RoundStats.phaseChanges(references),
            "disturbed_rounds": RoundStats.disturbed(references).filter { $0 }.count,
            "per_round": states.map { ["reference_ms": $0.referenceMs, "reference_each_ms": $0.referenceEachMs,
                                       "seconds": $0.seconds] as [String: Any] },
            "platform": "ios",
            "ios": ["thermal_state": thermalName(worstThermal),
                    "low_power_mode": ProcessInfo.processInfo.isLowPowerModeEnabled] as [String: Any],
        ]
    }

    private func thermalName(_ state: ProcessInfo.ThermalState) -> Any {
        switch state {
        case .nominal: return "nominal"
        case .fair: return "fair"
        case .serious: return "serious"
        case .critical: return "critical"
        @unknown default: return NSNull()
        }
    }
}

/// A .npy file of little-endian float32 in C order (what vitexport writes into golden/).
struct Npy {
    let shape: [Int]
    let values: [Float]
}

func readNpy(_ url: URL) throws -> Npy {
    let bytes = [UInt8](try Data(contentsOf: url))
    guard bytes.count > 10, bytes[0] == 0x93, Array(bytes[1...5]) == Array("NUMPY".utf8) else {
        throw CheckError("\(url.lastPathComponent) is not a .npy file")
    }
    let long = bytes[6] >= 2
    let length = long ? Int(bytes[8]) | Int(bytes[9]) << 8 | Int(bytes[10]) << 16 | Int(bytes[11]) << 24
                      : Int(bytes[8]) | Int(bytes[9]) << 8
    let start = long ? 12 : 10
    let header = String(decoding: bytes[start..<(start + length)], as: UTF8.self)
    guard header.contains("'descr': '<f4'"), header.contains("'fortran_order': False"),
          let open = header.range(of: "'shape': ("), let close = header[open.upperBound...].firstIndex(of: ")") else {
        throw CheckError("\(url.lastPathComponent) is not little-endian float32 in C order")
    }
    let shape = header[open.upperBound..<close].split(separator: ",").compactMap {
        Int($0.trimmingCharacters(in: .whitespaces))
    }
    var values = [Float](repeating: 0, count: shape.reduce(1, *))
    let body = bytes[(start + length)...]
    guard body.count == values.count * 4 else { throw CheckError("\(url.lastPathComponent) is truncated") }
    values.withUnsafeMutableBytes { $0.copyBytes(from: body) }
    return Npy(shape: shape, values: values)
}

func sha256(_ url: URL) throws -> String {
    let handle = try FileHandle(forReadingFrom: url)
    defer { try? handle.close() }
    var hasher = SHA256()
    while let chunk = try handle.read(upToCount: 1 << 20), !chunk.isEmpty { hasher.update(data: chunk) }
    return hasher.finalize().map { String(format: "%02x", $0) }.joined()
}

func json(_ url: URL) throws -> [String: Any] {
    guard let object = try JSONSerialization.jsonObject(with: Data(contentsOf: url)) as? [String: Any] else {
        throw CheckError("\(url.lastPathComponent) is not a JSON object")
    }
    return object
}

/// JSON has no NaN or infinity: they travel as the strings vitexport reads back.
func jsonNumber(_ value: Double) -> Any {
    value.isFinite ? value : (value.isNaN ? "NaN" : (value > 0 ? "Infinity" : "-Infinity"))
}

/// The hardware model identifier, e.g. iPhone16,1.
func machine() -> String {
    var info = utsname()
    uname(&info)
    return withUnsafeBytes(of: &info.machine) { raw in String(decoding: raw.prefix { $0 != 0 }, as: UTF8.self) }
}

func now() -> UInt64 { DispatchTime.now().uptimeNanoseconds }

/// The process's memory footprint in MB (phys_footprint: what Xcode's memory gauge shows and what iOS
/// holds against an app's limit); nil when the kernel does not answer.
func footprintMB() -> Double? {
    var info = task_vm_info_data_t()
    var count = mach_msg_type_number_t(MemoryLayout<task_vm_info_data_t>.size / MemoryLayout<integer_t>.size)
    let result = withUnsafeMutablePointer(to: &info) {
        $0.withMemoryRebound(to: integer_t.self, capacity: Int(count)) {
            task_info(mach_task_self_, task_flavor_t(TASK_VM_INFO), $0, &count)
        }
    }
    return result == KERN_SUCCESS ? Double(info.phys_footprint) / 1e6 : nil
}

func milliseconds(since start: UInt64) -> Double { Double(DispatchTime.now().uptimeNanoseconds - start) / 1e6 }

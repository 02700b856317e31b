// Runs this package's Core ML model for DeviceCheckTests.swift: compiles the .mlpackage on the
// device (MLModel.compileModel) and loads it with the compute units under test
// (MLModelConfiguration.computeUnits). Written by vitexport for iOS 16 or newer.
import CoreML
import CoreVideo
import Foundation

func makeRunner(package: URL, settings: [String: Any], computeUnits: String) async throws -> ArtifactRunner {
    try await CoreMLRunner(package: package, settings: settings, computeUnits: computeUnits)
}

final class CoreMLRunner: ArtifactRunner {
    static let units: [String: MLComputeUnits] = ["all": .all, "cpu_only": .cpuOnly, "cpu_and_gpu": .cpuAndGPU,
                                                  "cpu_and_ne": .cpuAndNeuralEngine]
    private let model: MLModel
    private let inputName: String
    private let outputNames: [String]
    private let imageInput: Bool
    private let bgr: Bool  // Core ML hands such a model the image's planes as BGR
    private let mean: [Float], std: [Float]
    let facts: [String: Any]

    init(package: URL, settings: [String: Any], computeUnits: String) async throws {
        guard let file = settings["file"] as? String, let unit = CoreMLRunner.units[computeUnits] else {
            throw CheckError("manifest.json's runner settings name no model file, or \(computeUnits) is no compute unit")
        }
        let compiled = try await MLModel.compileModel(at: package.appendingPathComponent(file))
        let configuration = MLModelConfiguration()
        configuration.computeUnits = unit
        model = try MLModel(contentsOf: compiled, configuration: configuration)
        inputName = settings["input_name"] as? String ?? "pixel_values"
        outputNames = settings["output_names"] as? [String] ?? ["logits"]
        imageInput = settings["image_input"] as? Bool ?? false
        bgr = settings["channel_order"] as? String == "BGR"
        mean = (settings["mean"] as? [Double] ?? [0, 0, 0]).map(Float.init)
        std = (settings["std"] as? [Double] ?? [1, 1, 1]).map(Float.init)
        facts = ["runtime": "Core ML", "compute_units": computeUnits, "provider": "coreml-\(computeUnits)"]
    }

    func run(_ input: [Float], shape: [Int]) throws -> [Output] {
        let value: MLFeatureValue
        if imageInput {
            value = MLFeatureValue(pixelBuffer: try pixelBuffer(input, shape: shape))
        } else {
            let array = try MLMultiArray(shape: shape.map { NSNumber(value: $0) }, dataType: .float32)
            array.withUnsafeMutableBufferPointer(ofType: Float.self) { buffer, strides in
                forEachOffset(shape: shape, strides: strides) { i, offset in buffer[offset] = input[i] }
            }
            value = MLFeatureValue(multiArray: array)
        }
        let result = try model.prediction(from: try MLDictionaryFeatureProvider(dictionary: [inputName: value]))
        return try outputNames.map { name in
            guard let array = result.featureValue(for: name)?.multiArrayValue else {
                throw CheckError("the model returned no array named \(name)")
            }
            return Output(values: floats(array), shape: array.shape.map { $0.intValue })
        }
    }

    /// The normalised input back to the 8-bit RGB image it came from, as the camera would give it.
    private func pixelBuffer(_ input: [Float], shape: [Int]) throws -> CVPixelBuffer {
        guard shape.count == 4, shape[0] == 1, shape[1] == 3 else {
            throw CheckError("an image-input package takes one RGB image per prediction, got shape \(shape)")
        }
        let (height, width) = (shape[2], shape[3])
        var made: CVPixelBuffer?
        guard CVPixelBufferCreate(kCFAllocatorDefault, width, height, kCVPixelFormatType_32BGRA, nil, &made)
                == kCVReturnSuccess, let buffer = made else { throw CheckError("cannot make a pixel buffer") }
        CVPixelBufferLockBaseAddress(buffer, [])
        defer { CVPixelBufferUnlockBaseAddress(buffer, []) }
        let base = CVPixelBufferGetBaseAddress(buffer)!.assumingMemoryBound(to: UInt8.self)
        let rowBytes = CVPixelBufferGetBytesPerRow(buffer), plane = height * width
        for y in 0..<height {
            for x in 0..<width {
                for c in 0..<3 {  // BGRA: blue first; a BGR model's planes are in that order already
                    let value = (input[c * plane + y * width + x] * std[c] + mean[c]) * 255
                    base[y * rowBytes + x * 4 + (bgr ? c : 2 - c)] = UInt8(max(0, min(255, value.rounded())))
                }
                base[y * rowBytes + x * 4 + 3] = 255
            }
        }
        return buffer
    }
}

/// An output's values in row-major order, whatever its strides and element type.
func floats(_ array: MLMultiArray) -> [Float] {
    let shape = array.shape.map { $0.intValue }
    var values = [Float](repeating: 0, count: shape.reduce(1, *))
    array.withUnsafeBytes { raw in
        forEachOffset(shape: shape, strides: array.strides.map { $0.intValue }) { i, offset in
            switch array.dataType {
            case .float32: values[i] = raw.load(fromByteOffset: offset * 4, as: Float.self)
            case .double: values[i] = Float(raw.load(fromByteOffset: offset * 8, as: Double.self))
            case .float16: values[i] = Float(raw.load(fromByteOffset: offset * 2, as: Float16.self))
            case .int32: values[i] = Float(raw.load(fromByteOffset: offset * 4, as: Int32.self))
            default: values[i] = .nan
            }
        }
    }
    return values
}

/// Calls `body(i, offset)` for every element in row-major order: `i` its index in C order, `offset`
/// where it is stored (the sum of index times stride, in elements).
func forEachOffset(shape: [Int], strides: [Int], _ body: (Int, Int) -> Void) {
    var index = [Int](repeating: 0, count: shape.count)
    for i in 0..<shape.reduce(1, *) {
        body(i, zip(index, strides).reduce(0) { $0 + $1.0 * $1.1 })
        var d = shape.count - 1
        while d >= 0 {
            index[d] += 1
            if index[d] < shape[d] { break }
            index[d] = 0
            d -= 1
        }
    }
}

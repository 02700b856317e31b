// Classify a camera frame with a package written by `vitexport coreml --image-input`.
//
// Add the .mlpackage to the Xcode project (Xcode compiles it into the app bundle as .mlmodelc).
// With --image-input the model takes RGB pixels 0-255 and normalises them itself, so a
// CVPixelBuffer goes in as it is: no per-channel mean/std on the app side.
import CoreML
import CoreVideo
import Foundation

final class ViTClassifier {
    private let model: MLModel
    private let inputName: String
    private let outputName: String
    private let labels: [String]

    /// `resource` is the package's file name without extension, e.g. "tiny".
    init(resource: String, computeUnits: MLComputeUnits = .all) throws {
        guard let url = Bundle.main.url(forResource: resource, withExtension: "mlmodelc") else {
            throw NSError(domain: "ViTClassifier", code: 1,
                          userInfo: [NSLocalizedDescriptionKey: "\(resource).mlmodelc is not in the app bundle"])
        }
        let configuration = MLModelConfiguration()
        configuration.computeUnits = computeUnits  // .all lets Core ML use the Neural Engine
        model = try MLModel(contentsOf: url, configuration: configuration)
        let description = model.modelDescription
        inputName = description.inputDescriptionsByName.keys.first ?? "pixel_values"
        outputName = description.outputDescriptionsByName.keys.first ?? "logits"
        // vitexport stores class names (--labels FILE) as JSON in the package's metadata.
        let metadata = description.metadata[.creatorDefinedKey] as? [String: String]
        if let json = metadata?["com.vitexport.labels"], let data = json.data(using: .utf8),
           let names = try? JSONDecoder().decode([String].self, from: data) {
            labels = names
        } else {
            labels = []
        }
    }

    /// The pixel buffer must already have the model's input size (e.g. 224x224, 32BGRA or 32ARGB);
    /// scale and crop it first (vImage or Core Image), as the model's preprocessing says.
    func classify(_ pixelBuffer: CVPixelBuffer, top k: Int = 5) throws -> [(label: String, score: Float)] {
        let input = try MLDictionaryFeatureProvider(
            dictionary: [inputName: MLFeatureValue(pixelBuffer: pixelBuffer)])
        let output = try model.prediction(from: input)
        guard let logits = output.featureValue(for: outputName)?.multiArrayValue else { return [] }
        let count = logits.count
        var scores = [Float](repeating: 0, count: count)
        for i in 0..<count { scores[i] = logits[i].floatValue }
        // softmax over the logits
        let maxScore = scores.max() ?? 0
        let exps = scores.map { expf($0 - maxScore) }
        let total = exps.reduce(0, +)
        return exps.enumerated()
            .sorted { $0.element > $1.element }
            .prefix(k)
            .map { (labels.indices.contains($0.offset) ? labels[$0.offset] : "class \($0.offset)", $0.element / total) }
    }
}

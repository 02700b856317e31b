// Classify an image with a program written by `vitexport executorch` (XNNPACK or Core ML delegate).
//
// Link with Swift Package Manager (https://github.com/pytorch/executorch, branch `swiftpm-<version>`,
// the release of the executorch that wrote the .pte: the sidecar's tools.executorch):
//   executorch         the runtime (this file's `import ExecuTorch`)
//   backend_xnnpack    for `--delegate xnnpack` (fp32, fp16, int8)
//   backend_coreml     for `--delegate coreml`
//   kernels_optimized  for the ops a delegate leaves outside (the sidecar's info.delegation.not_delegated)
//   kernels_quantized  as well for `--precision int8`
// and add `-all_load` to Other Linker Flags: backends and kernels register themselves at startup,
// and the linker drops them otherwise ("backend not registered" / "missing operator" at load time).
//
// Input layout: one float32 tensor, NCHW [1, 3, H, W] (H, W: the sidecar's input_shape), pixels
// scaled to 0-1 and normalised with the sidecar's source.preprocessing mean/std. A `--dynamic-batch`
// program takes [N, 3, H, W] for N up to its --max-batch; an XNNPACK `--precision fp16` program takes
// float16 (use Tensor<Float16>). Output: logits [N, classes], float32.
import ExecuTorch
import Foundation

final class ViTExecuTorchClassifier {
    private let module: Module
    private let height: Int
    private let width: Int
    private let mean: [Float]
    private let std: [Float]

    /// `resource` is the program's file name without extension, e.g. "tiny" for tiny.pte.
    init(resource: String, height: Int = 224, width: Int = 224,
         mean: [Float] = [0.485, 0.456, 0.406], std: [Float] = [0.229, 0.224, 0.225]) throws {
        guard let path = Bundle.main.path(forResource: resource, ofType: "pte") else {
            throw NSError(domain: "ViTExecuTorchClassifier", code: 1,
                          userInfo: [NSLocalizedDescriptionKey: "\(resource).pte is not in the app bundle"])
        }
        module = Module(filePath: path)
        try module.load("forward")  // load once: planning memory and initialising the delegate cost time
        self.height = height
        self.width = width
        self.mean = mean
        self.std = std
    }

    /// `rgb` holds height * width * 3 bytes, row by row, R G B interleaved, already resized and
    /// centre-cropped to the model's input size.
    func classify(rgb: [UInt8], top k: Int = 5) throws -> [(index: Int, score: Float)] {
        let plane = height * width
        precondition(rgb.count == plane * 3, "expected \(plane * 3) bytes of RGB")
        var chw = [Float](repeating: 0, count: 3 * plane)
        for i in 0..<plane {  // (h, w, c) bytes -> (c, h, w) normalised floats
            for c in 0..<3 {
                chw[c * plane + i] = (Float(rgb[i * 3 + c]) / 255 - mean[c]) / std[c]
            }
        }
        let input = Tensor<Float>(chw, shape: [1, 3, height, width])
        let logits: Tensor<Float> = try module.forward(input)
        let scores = logits.scalars()
        let maxScore = scores.max() ?? 0
        let exps = scores.map { expf($0 - maxScore) }  // softmax over the logits
        let total = exps.reduce(0, +)
        return exps.enumerated()
            .sorted { $0.element > $1.element }
            .prefix(k)
            .map { (index: $0.offset, score: $0.element / total) }
    }
}

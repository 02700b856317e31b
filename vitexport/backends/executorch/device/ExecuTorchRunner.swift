// Runs this package's ExecuTorch program for DeviceCheckTests.swift through ExecuTorch's Swift API
// (Module, Tensor, Value). A Core ML-delegated program gets the compute units under test through
// the delegate's load-time option (BackendOptionsMap, ExecuTorch 1.4 or newer); XNNPACK and
// portable programs run on the CPU whatever the test's setting. Written by vitexport.
import ExecuTorch
import Foundation

func makeRunner(package: URL, settings: [String: Any], computeUnits: String) async throws -> ArtifactRunner {
    try ExecuTorchRunner(package: package, settings: settings, computeUnits: computeUnits)
}

final class ExecuTorchRunner: ArtifactRunner {
    private let module: Module
    private let outputCount: Int
    let facts: [String: Any]

    init(package: URL, settings: [String: Any], computeUnits: String) throws {
        guard let file = settings["file"] as? String else {
            throw CheckError("manifest.json's runner settings name no program file")
        }
        module = Module(filePath: package.appendingPathComponent(file).path)
        let delegate = settings["delegate"] as? String ?? "xnnpack"
        if delegate == "coreml" {
            let options = try BackendOptionsMap(options: ["CoreMLBackend": [BackendOption("compute_unit", computeUnits)]])
            try module.load("forward", options: options)
        } else {
            try module.load("forward")
        }
        outputCount = (settings["output_names"] as? [String] ?? ["logits"]).count
        facts = ["runtime": "ExecuTorch", "provider": "executorch-\(delegate)",
                 "compute_units": delegate == "coreml" ? computeUnits : "cpu"]
    }

    func run(_ input: [Float], shape: [Int]) throws -> [Output] {
        let outputs: [Value] = try module.forward(Tensor<Float>(input, shape: shape))
        return try outputs.prefix(outputCount).map { value in
            guard let tensor: Tensor<Float> = value.tensor() else {
                throw CheckError("an output of the program is not a float32 tensor")
            }
            return Output(values: tensor.scalars(), shape: tensor.shape)
        }
    }
}

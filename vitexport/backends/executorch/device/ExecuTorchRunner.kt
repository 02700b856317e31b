// Runs this package's ExecuTorch program for DeviceCheckTest.kt through ExecuTorch's Android API
// (org.pytorch.executorch: Module, Tensor, EValue). Written by vitexport.
package org.vitexport.devicecheck

import java.io.File
import org.json.JSONObject
import org.pytorch.executorch.EValue
import org.pytorch.executorch.ExecuTorchRuntime
import org.pytorch.executorch.Module
import org.pytorch.executorch.Tensor

fun makeRunner(packageDir: File, settings: JSONObject): ArtifactRunner = ExecuTorchRunner(packageDir, settings)

class ExecuTorchRunner(packageDir: File, settings: JSONObject) : ArtifactRunner {
    // Memory-mapped from the copy on the device's storage; 0 threads: the runtime's default.
    private val module = Module.load(File(packageDir, settings.getString("file")).absolutePath, Module.LOAD_MODE_MMAP, 0)
    private val outputCount = settings.getJSONArray("output_names").length()
    private val delegate = settings.optString("delegate", "xnnpack")

    init {
        module.loadMethod("forward")  // throws naming ExecuTorch's error when the program cannot load
    }

    override val facts: Map<String, Any?> = mapOf(
        "runtime" to "ExecuTorch (Android)",
        "provider" to "executorch-$delegate",
        "registered_backends" to ExecuTorchRuntime.getRegisteredBackends().joinToString(", "),
    )

    override fun run(input: FloatArray, shape: LongArray): List<Output> {
        val outputs = module.forward(EValue.from(Tensor.fromBlob(input, shape)))
        return outputs.take(outputCount).map { value ->
            val tensor = value.toTensor()
            Output(tensor.dataAsFloatArray, tensor.shape())
        }
    }

    override fun close() = module.destroy()
}

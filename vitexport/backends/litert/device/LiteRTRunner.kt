// Runs this package's LiteRT model for DeviceCheckTest.kt through LiteRT's compiled-model API
// (com.google.ai.edge.litert: Model, CompiledModel, TensorBuffer) on the accelerator asked for:
// `-Pandroid.testInstrumentationRunnerArguments.accelerator=cpu|gpu|npu` (default cpu). Written by vitexport.
package org.vitexport.devicecheck

import androidx.test.platform.app.InstrumentationRegistry
import com.google.ai.edge.litert.Accelerator
import com.google.ai.edge.litert.CompiledModel
import com.google.ai.edge.litert.Model
import java.io.File
import org.json.JSONObject

fun makeRunner(packageDir: File, settings: JSONObject): ArtifactRunner = LiteRTRunner(packageDir, settings)

class LiteRTRunner(packageDir: File, settings: JSONObject) : ArtifactRunner {
    private val asked = InstrumentationRegistry.getArguments().getString("accelerator", "cpu").lowercase()
    private val accelerator = when (asked) {
        "cpu" -> Accelerator.CPU
        "gpu" -> Accelerator.GPU
        "npu" -> Accelerator.NPU
        else -> throw IllegalArgumentException("accelerator must be cpu, gpu or npu, not $asked")
    }
    private val signature = settings.getJSONObject("signature")
    private val key = signature.getString("key")
    private val inputName = signature.getJSONArray("inputs").getString(0)
    private val outputNames = List(settings.getJSONArray("output_names").length()) {
        signature.getJSONArray("outputs").getString(it)
    }
    // The model stays open beside its compiled form: it says each output's shape.
    private val model = Model.load(File(packageDir, settings.getString("file")).absolutePath)
    private val compiled = CompiledModel.create(model, CompiledModel.Options(accelerator))
    // By name, so the outputs come back in the package's order whatever order the model lists them in.
    private val inputs = mapOf(inputName to compiled.createInputBuffer(inputName, key))
    private val outputs = outputNames.associateWith { compiled.createOutputBuffer(it, key) }

    override val facts: Map<String, Any?> = mapOf(
        "runtime" to "LiteRT (Android, compiled-model API)",
        "provider" to "litert-$asked",
        "accelerator" to asked,
    )

    override fun run(input: FloatArray, shape: LongArray): List<Output> {
        inputs.getValue(inputName).writeFloat(input)
        compiled.run(inputs, outputs, key)
        return outputNames.map { name ->
            val dims = model.getOutputTensorType(name, key).layout?.dimensions ?: intArrayOf()
            Output(outputs.getValue(name).readFloat(), LongArray(dims.size) { dims[it].toLong() })
        }
    }

    override fun close() {
        (inputs.values + outputs.values).forEach { it.close() }
        compiled.close()
        model.close()
    }
}

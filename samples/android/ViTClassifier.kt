// Classify an image with a program written by `vitexport executorch --delegate xnnpack` on Android.
//
// app/build.gradle.kts:
//     dependencies { implementation("org.pytorch:executorch-android:<version>") }
// with <version> the release of the executorch that wrote the .pte (the sidecar's tools.executorch).
// The AAR carries the runtime, the XNNPACK delegate and the portable, optimized and quantized kernels
// for arm64-v8a and x86_64; there is no Core ML on Android, so export with --delegate xnnpack
// (fp32 or int8; this sample feeds float32, so not an fp16 program, which takes float16) or portable.
//
// Input layout: one float32 tensor, NCHW [1, 3, H, W] (H, W: the sidecar's input_shape), pixels scaled
// to 0-1 and normalised with the sidecar's source.preprocessing mean/std. A --dynamic-batch program
// takes [N, 3, H, W] for N up to its --max-batch. Output: logits [N, classes], float32.
package org.vitexport.sample

import android.graphics.Bitmap
import org.pytorch.executorch.EValue
import org.pytorch.executorch.Module
import org.pytorch.executorch.Tensor
import kotlin.math.exp

class ViTClassifier(
    modelPath: String,  // a file path: copy the .pte out of the APK's assets first (it is memory-mapped)
    threads: Int = 0,  // 0: the runtime's default for this device
    private val mean: FloatArray = floatArrayOf(0.485f, 0.456f, 0.406f),
    private val std: FloatArray = floatArrayOf(0.229f, 0.224f, 0.225f),
) {
    private val module: Module = Module.load(modelPath, Module.LOAD_MODE_MMAP, threads)

    init {
        // Load once up front (memory planning, delegate setup); throws naming ExecuTorch's error.
        module.loadMethod("forward")
    }

    /** `bitmap` must already have the model's input size (e.g. 224x224): scale and crop it first. */
    fun classify(bitmap: Bitmap, top: Int = 5): List<Pair<Int, Float>> {
        val height = bitmap.height
        val width = bitmap.width
        val plane = height * width
        val pixels = IntArray(plane)
        bitmap.getPixels(pixels, 0, width, 0, 0, width, height)
        val chw = FloatArray(3 * plane)
        for (i in 0 until plane) {  // ARGB ints (h, w) -> (c, h, w) normalised floats
            val p = pixels[i]
            val rgb = intArrayOf((p shr 16) and 0xFF, (p shr 8) and 0xFF, p and 0xFF)
            for (c in 0 until 3) {
                chw[c * plane + i] = (rgb[c] / 255f - mean[c]) / std[c]
            }
        }
        val input = Tensor.fromBlob(chw, longArrayOf(1, 3, height.toLong(), width.toLong()))
        val logits = module.forward(EValue.from(input))[0].toTensor().dataAsFloatArray
        val maxLogit = logits.maxOrNull() ?: 0f
        val exps = logits.map { exp((it - maxLogit).toDouble()).toFloat() }  // softmax over the logits
        val total = exps.sum()
        return exps.withIndex().sortedByDescending { it.value }.take(top).map { it.index to it.value / total }
    }

    fun close() = module.destroy()
}

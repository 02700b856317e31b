// Proves this package's model on an Android phone: copies the package from the test APK's assets,
// verifies every file against manifest.json (sha256), runs the golden inputs through the backend's
// runner (ExecuTorchRunner.kt, beside this file), compares the outputs with PyTorch's and writes
// device-report.json for `vitexport verify --device-report`. See README.md.
//
// Written by vitexport against AndroidX Test and org.json; vitexport's own tests cannot compile it.
package org.vitexport.devicecheck

import android.content.res.AssetManager
import android.os.Build
import android.util.Log
import androidx.test.ext.junit.runners.AndroidJUnit4
import androidx.test.platform.app.InstrumentationRegistry
import java.io.Closeable
import java.io.File
import java.nio.ByteBuffer
import java.nio.ByteOrder
import java.security.MessageDigest
import java.text.SimpleDateFormat
import java.util.Date
import java.util.Locale
import java.util.TimeZone
import org.json.JSONArray
import org.json.JSONObject
import org.junit.Assert.assertTrue
import org.junit.Test
import org.junit.runner.RunWith

/** One output of one run: values in row-major order and the shape. */
class Output(val values: FloatArray, val shape: LongArray)

/** What a backend's runner file provides (with `makeRunner(packageDir, settings)`). */
interface ArtifactRunner : Closeable {
    val facts: Map<String, Any?>
    fun run(input: FloatArray, shape: LongArray): List<Output>
}

/** A .npy file of little-endian float32 in C order (what vitexport writes into golden/). */
class Npy(val shape: LongArray, val values: FloatArray)

@RunWith(AndroidJUnit4::class)
class DeviceCheckTest {
    private val warmup = 3
    private val repeats = 10

    @Test
    fun packageMatchesPyTorchOnThisDevice() {
        val instrumentation = InstrumentationRegistry.getInstrumentation()
        val assets = instrumentation.context.assets  // the test APK's own assets
        val target = instrumentation.targetContext
        val name = packageName(assets)
        val dir = File(target.cacheDir, name).apply { deleteRecursively() }
        copyAssets(assets, name, dir)
        val manifest = JSONObject(File(dir, "manifest.json").readText())
        val verified = verifyFiles(dir, manifest)  // before anything of the package is run
        val golden = JSONObject(File(dir, "golden/golden.json").readText())
        val settings = manifest.getJSONObject("runner").getJSONObject("settings")
        val names = golden.getJSONArray("output_names").let { a -> List(a.length()) { a.getString(it) } }
        val tolerance = golden.getJSONObject("tolerance")
        val cases = JSONArray()
        val timings = JSONObject()
        val failures = mutableListOf<String>()
        var deterministic = true
        val loadStart = System.nanoTime()
        val facts = makeRunner(dir, settings).use { runner ->
            val loadMs = (System.nanoTime() - loadStart) / 1e6
            val goldenCases = golden.getJSONArray("cases")
            for (c in 0 until goldenCases.length()) {
                val entry = goldenCases.getJSONObject(c)
                val caseName = entry.getString("name")
                val input = readNpy(File(dir, entry.getString("input")))
                val references = entry.getJSONArray("outputs").let { a -> List(a.length()) { readNpy(File(dir, a.getString(it))) } }
                val (outputs, timing, same) = runCase(runner, input, entry.getInt("batch"))
                deterministic = deterministic && same
                timings.put(caseName, timing)
                val encoded = JSONObject()
                val checks = JSONArray()
                outputs.forEachIndexed { i, output ->
                    if (i >= names.size) return@forEachIndexed
                    encoded.put(names[i], JSONObject().put("shape", JSONArray(output.shape.toList()))
                        .put("data", JSONArray(output.values.map { jsonNumber(it.toDouble()) })))
                    val result = compare(references[i], output, tolerance).put("output", names[i])
                    checks.put(result)
                    if (!result.getBoolean("passed")) failures.add("$caseName ${names[i]}: ${result.opt("reason")}")
                }
                cases.put(JSONObject().put("name", caseName).put("outputs", encoded).put("checks", checks))
            }
            runner.facts + mapOf("load_ms" to loadMs)
        }
        if (!deterministic) failures.add("the same input gave different outputs twice")
        val device = JSONObject()
            .put("model", "${Build.MANUFACTURER} ${Build.MODEL}")
            .put("os", "Android ${Build.VERSION.RELEASE} (API ${Build.VERSION.SDK_INT})")
            .put("abi", Build.SUPPORTED_ABIS.firstOrNull())
            .put("soc", if (Build.VERSION.SDK_INT >= 31) Build.SOC_MODEL else null)
            .put("processors", Runtime.getRuntime().availableProcessors())
        facts.filterKeys { it != "load_ms" }.forEach { (k, v) -> device.put(k, v ?: JSONObject.NULL) }
        val artifact = manifest.getJSONObject("artifact")
        val report = JSONObject()
            .put("schema", "vitexport.device-report/1")
            .put("created", utcNow())
            .put("package", JSONObject().put("name", name).put("manifest_sha256", sha256(File(dir, "manifest.json")))
                .put("target", manifest.optString("target")).put("backend", artifact.optString("backend"))
                .put("artifact", artifact.optString("file")).put("files_verified", verified))
            .put("device", device)
            .put("timings", JSONObject().put("load_ms", facts["load_ms"]).put("cases", timings))
            .put("deterministic", deterministic)
            .put("verdict", JSONObject().put("passed", failures.isEmpty()).put("tolerance", tolerance)
                .put("failures", JSONArray(failures)))
            .put("cases", cases)
        val out = File(target.getExternalFilesDir(null) ?: target.filesDir, "device-report.json")
        val tmp = File(out.parentFile, ".device-report.json.tmp")
        tmp.writeText(report.toString())
        check(tmp.renameTo(out)) { "cannot write $out" }
        Log.i("vitexport", "${if (failures.isEmpty()) "PASS" else "FAIL"}; report: ${out.absolutePath}")
        assertTrue(failures.take(3).joinToString("; "), failures.isEmpty())
    }

    /** The one asset folder whose manifest.json is a vitexport package manifest. */
    private fun packageName(assets: AssetManager): String {
        val found = (assets.list("") ?: emptyArray()).filter { folder ->
            runCatching {
                assets.open("$folder/manifest.json").bufferedReader().use { JSONObject(it.readText()) }
                    .optString("schema") == "vitexport.package/1"
            }.getOrDefault(false)
        }
        check(found.size == 1) { "expected one vitexport package folder in src/androidTest/assets, found $found" }
        return found[0]
    }

    private fun copyAssets(assets: AssetManager, path: String, to: File) {
        val children = assets.list(path) ?: emptyArray()
        if (children.isEmpty()) {  // a file
            to.parentFile?.mkdirs()
            assets.open(path).use { input -> to.outputStream().use { input.copyTo(it) } }
            return
        }
        children.forEach { copyAssets(assets, "$path/$it", File(to, it)) }
    }

    /** Every file the manifest lists has its size and sha256; fails naming the first that does not. */
    private fun verifyFiles(dir: File, manifest: JSONObject): Int {
        val files = manifest.getJSONObject("files")
        val names = files.keys().asSequence().sorted().toList()
        check(names.isNotEmpty()) { "manifest.json lists no files" }
        for (name in names) {
            val file = File(dir, name)
            val entry = files.getJSONObject(name)
            check(file.isFile) { "$name: missing (manifest.json lists it): copy the package again" }
            check(file.length() == entry.getLong("size") && sha256(file) == entry.getString("sha256")) {
                "$name: sha256 differs from manifest.json: the file is damaged or was changed"
            }
        }
        return names.size
    }

    /** Rows in runs of `batch` (the last padded with its final row); the first run timed after warm-up. */
    private fun runCase(runner: ArtifactRunner, input: Npy, batch: Int): Triple<List<Output>, JSONObject, Boolean> {
        val total = input.shape[0].toInt()
        val row = input.values.size / maxOf(total, 1)
        val shape = longArrayOf(batch.toLong()) + input.shape.copyOfRange(1, input.shape.size)
        fun rows(start: Int): Pair<FloatArray, Int> {
            val real = minOf(batch, total - start)
            val values = FloatArray(batch * row)
            for (r in 0 until batch) {
                val source = start + minOf(r, real - 1)
                System.arraycopy(input.values, source * row, values, r * row, row)
            }
            return values to real
        }
        val (first, firstReal) = rows(0)
        repeat(warmup) { runner.run(first, shape) }
        val times = mutableListOf<Double>()
        var kept: List<Output> = emptyList()
        var last: List<Output> = emptyList()
        repeat(repeats) { i ->
            val start = System.nanoTime()
            last = runner.run(first, shape)
            times.add((System.nanoTime() - start) / 1e6)
            if (i == 0) kept = last
        }
        val same = kept.zip(last).all { (a, b) -> a.values.contentEquals(b.values) }
        val parts = mutableListOf(kept.map { trimmed(it, firstReal) })
        var start = batch
        while (start < total) {
            val (values, real) = rows(start)
            parts.add(runner.run(values, shape).map { trimmed(it, real) })
            start += batch
        }
        val outputs = kept.indices.map { i ->
            val pieces = parts.map { it[i] }
            Output(pieces.map { it.values }.reduce { a, b -> a + b },
                longArrayOf(pieces.sumOf { it.shape[0] }) + pieces[0].shape.copyOfRange(1, pieces[0].shape.size))
        }
        times.sort()
        val timing = JSONObject().put("batch", batch).put("runs", times.size).put("warmup", warmup)
            .put("mean_ms", times.average()).put("p50_ms", times[times.size / 2]).put("min_ms", times[0])
        return Triple(outputs, timing, same)
    }

    private fun trimmed(output: Output, rows: Int): Output {
        val per = output.values.size / maxOf(output.shape[0].toInt(), 1)
        return Output(output.values.copyOf(rows * per),
            longArrayOf(rows.toLong()) + output.shape.copyOfRange(1, output.shape.size))
    }

    /** The rule vitexport's parity check applies, on this output. */
    private fun compare(reference: Npy, output: Output, tolerance: JSONObject): JSONObject {
        if (!reference.shape.contentEquals(output.shape)) {
            return JSONObject().put("passed", false)
                .put("reason", "shape ${output.shape.toList()} != reference ${reference.shape.toList()}")
        }
        val atol = tolerance.getDouble("atol")
        val rtol = tolerance.getDouble("rtol")
        val minCosine = tolerance.getDouble("min_cosine")
        var maxError = 0.0; var dot = 0.0; var normRef = 0.0; var normOut = 0.0
        var within = true; var finite = true
        for (i in reference.values.indices) {
            val r = reference.values[i].toDouble()
            val o = output.values[i].toDouble()
            finite = finite && o.isFinite()
            val error = Math.abs(r - o)
            maxError = maxOf(maxError, if (error.isNaN()) Double.POSITIVE_INFINITY else error)
            within = within && error <= atol + rtol * Math.abs(r)
            dot += r * o; normRef += r * r; normOut += o * o
        }
        val cosine = if (normRef * normOut > 0) dot / Math.sqrt(normRef * normOut) else if (maxError == 0.0) 1.0 else 0.0
        val reasons = mutableListOf<String>()
        if (!finite) reasons.add("non-finite values")
        if (!within) reasons.add("max abs error $maxError exceeds atol $atol + rtol $rtol*|ref|")
        if (cosine < minCosine) reasons.add("cosine $cosine < $minCosine")
        return JSONObject().put("passed", reasons.isEmpty())
            .put("reason", if (reasons.isEmpty()) JSONObject.NULL else reasons.joinToString("; "))
            .put("max_abs_error", jsonNumber(maxError)).put("cosine_similarity", jsonNumber(cosine))
    }
}

fun readNpy(file: File): Npy {
    val bytes = file.readBytes()
    check(bytes.size > 10 && bytes[0] == 0x93.toByte() && String(bytes, 1, 5, Charsets.US_ASCII) == "NUMPY") {
        "${file.name} is not a .npy file"
    }
    val buffer = ByteBuffer.wrap(bytes).order(ByteOrder.LITTLE_ENDIAN)
    val long = bytes[6] >= 2
    val length = if (long) buffer.getInt(8) else buffer.getShort(8).toInt() and 0xFFFF
    val start = if (long) 12 else 10
    val header = String(bytes, start, length, Charsets.US_ASCII)
    check("'descr': '<f4'" in header && "'fortran_order': False" in header) {
        "${file.name} is not little-endian float32 in C order"
    }
    val shape = header.substringAfter("'shape': (").substringBefore(")").split(",")
        .map { it.trim() }.filter { it.isNotEmpty() }.map { it.toLong() }.toLongArray()
    val count = shape.fold(1L) { a, b -> a * b }.toInt()
    check(bytes.size - start - length == count * 4) { "${file.name} is truncated" }
    val values = FloatArray(count)
    buffer.position(start + length)
    buffer.asFloatBuffer().get(values)
    return Npy(shape, values)
}

fun utcNow(): String = SimpleDateFormat("yyyy-MM-dd'T'HH:mm:ss'Z'", Locale.US)
    .apply { timeZone = TimeZone.getTimeZone("UTC") }.format(Date())

fun sha256(file: File): String {
    val digest = MessageDigest.getInstance("SHA-256")
    file.inputStream().use { input ->
        val block = ByteArray(1 shl 20)
        while (true) {
            val n = input.read(block)
            if (n < 0) break
            digest.update(block, 0, n)
        }
    }
    return digest.digest().joinToString("") { "%02x".format(it) }
}

/** JSON has no NaN or infinity: they travel as the strings vitexport reads back. */
fun jsonNumber(value: Double): Any =
    if (value.isFinite()) value else if (value.isNaN()) "NaN" else if (value > 0) "Infinity" else "-Infinity"

// Proves this package's model on an Android phone: copies the package from the test APK's assets,
// verifies every file against manifest.json (sha256), runs the golden inputs through the backend's
// runner (ExecuTorchRunner.kt, beside this file), compares the outputs with PyTorch's and writes
// device-report.json for `vitexport verify --device-report`. See README.md.
//
// Each case is timed as `vitexport bench` and check.py time it: a warm-up, then rounds within a
// budget (the instrumentation argument budget_s, default 3 s per case) with a small reference kernel
// between them, p50/p90/p99 over all runs and the spread of the round medians (RoundStats below: the
// formulas of vitexport/core/roundstats.py), and the phone's state: the worst
// PowerManager.currentThermalStatus seen while timing, and whether the battery was charging and its
// temperature (the ACTION_BATTERY_CHANGED sticky intent).
//
// Written by vitexport against AndroidX Test and org.json; vitexport's own tests cannot compile it.
package org.vitexport.devicecheck

import android.content.Context
import android.content.Intent
import android.content.IntentFilter
import android.content.res.AssetManager
import android.os.BatteryManager
import android.os.Build
import android.os.Debug
import android.os.PowerManager
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
    private val warmup = 1  // untimed runs before timing a case, at least (and warmupSeconds)

    /** Seconds of timed runs per case: `-Pandroid.testInstrumentationRunnerArguments.budget_s=2`, else 3
     *  (as check.py's --budget-s). */
    private val budgetSeconds: Double =
        InstrumentationRegistry.getArguments().getString(BUDGET_ARGUMENT)?.toDoubleOrNull()
            ?.takeIf { it > 0 && it <= 3600 } ?: 3.0

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
        val batches = sortedSetOf<Int>()
        val rounds = Rounds(target)
        val before = residentMb()
        val loadStart = System.nanoTime()
        val facts = makeRunner(dir, settings).use { runner ->
            val loadMs = (System.nanoTime() - loadStart) / 1e6
            val after = residentMb()
            val goldenCases = golden.getJSONArray("cases")
            for (c in 0 until goldenCases.length()) {
                val entry = goldenCases.getJSONObject(c)
                val caseName = entry.getString("name")
                val input = readNpy(File(dir, entry.getString("input")))
                val references = entry.getJSONArray("outputs").let { a -> List(a.length()) { readNpy(File(dir, a.getString(it))) } }
                batches.add(entry.getInt("batch"))
                val (outputs, timing, same) = runCase(runner, input, entry.getInt("batch"), rounds)
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
            runner.facts + mapOf("load_ms" to loadMs,
                "load_anon_mb" to Math.max(0.0, after.first - before.first),
                "load_file_mb" to Math.max(0.0, after.second - before.second))
        }
        if (!deterministic) failures.add("the same input gave different outputs twice")
        val device = JSONObject()
            .put("model", "${Build.MANUFACTURER} ${Build.MODEL}")
            .put("os", "Android ${Build.VERSION.RELEASE} (API ${Build.VERSION.SDK_INT})")
            .put("abi", Build.SUPPORTED_ABIS.firstOrNull())
            .put("soc", if (Build.VERSION.SDK_INT >= 31) Build.SOC_MODEL else null)
            .put("processors", Runtime.getRuntime().availableProcessors())
        val loadKeys = setOf("load_ms", "load_anon_mb", "load_file_mb")
        facts.filterKeys { it !in loadKeys }.forEach { (k, v) -> device.put(k, v ?: JSONObject.NULL) }
        val artifact = manifest.getJSONObject("artifact")
        val report = JSONObject()
            .put("schema", "vitexport.device-report/1")
            .put("created", utcNow())
            .put("package", JSONObject().put("name", name).put("manifest_sha256", sha256(File(dir, "manifest.json")))
                .put("target", manifest.optString("target")).put("backend", artifact.optString("backend"))
                .put("artifact", artifact.optString("file")).put("files_verified", verified)
                .put("batches", JSONArray(batches.toList())))
            .put("device", device)
            .put("timings", JSONObject().put("budget_s", budgetSeconds).put("load_ms", facts["load_ms"])
                .put("load_anon_mb", facts["load_anon_mb"]).put("load_file_mb", facts["load_file_mb"])
                .put("cases", timings))
            .put("conditions", rounds.conditions())
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

    /** Rows in runs of `batch` (the last padded with its final row); the first run timed after a warm-up,
     *  in rounds within the budget with the reference kernel between them. */
    private fun runCase(runner: ArtifactRunner, input: Npy, batch: Int,
                        rounds: Rounds): Triple<List<Output>, JSONObject, Boolean> {
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
        val warmupSeconds = minOf(1.0, budgetSeconds / 4)
        val warmStart = System.nanoTime()
        var warm = 0
        while (warm < maxOf(1, warmup) || (System.nanoTime() - warmStart) / 1e9 < warmupSeconds) {
            runner.run(first, shape)
            warm++
        }
        val warmedSeconds = (System.nanoTime() - warmStart) / 1e9
        val count = RoundStats.roundCount(budgetSeconds)
        val burstMs = budgetSeconds * 1000 / count
        val times = mutableListOf<Double>()
        val medians = mutableListOf<Double>()
        val references = mutableListOf<Double>()
        var kept: List<Output> = emptyList()
        var last: List<Output> = emptyList()
        repeat(count) {
            val (timed, reference) = rounds.round {
                val samples = mutableListOf<Double>()
                val began = System.nanoTime()
                while (samples.isEmpty() || (System.nanoTime() - began) / 1e6 < burstMs) {
                    val start = System.nanoTime()
                    last = runner.run(first, shape)
                    samples.add((System.nanoTime() - start) / 1e6)
                    if (kept.isEmpty()) kept = last.map { Output(it.values.copyOf(), it.shape.copyOf()) }
                }
                samples
            }
            times.addAll(timed)
            medians.add(RoundStats.median(timed))
            references.add(reference)
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
        val timing = JSONObject().put("batch", batch).put("runs", times.size).put("warmup", warm)
            .put("warmup_s", warmedSeconds).put("rounds", count)
            .put("mean_ms", times.average()).put("min_ms", times.minOrNull()).put("max_ms", times.maxOrNull())
            .put("p50_ms", RoundStats.percentile(times, 50.0)).put("p90_ms", RoundStats.percentile(times, 90.0))
            .put("p99_ms", RoundStats.percentile(times, 99.0))
            .put("per_round", JSONObject().put("median_ms", JSONArray(medians))
                .put("reference_ms", JSONArray(references)))
            .put("spread", RoundStats.relativeSpread(medians) ?: JSONObject.NULL)
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

const val BUDGET_ARGUMENT = "budget_s"

/** The statistics of vitexport/core/roundstats.py (which bench and check.py run), formula for formula. */
object RoundStats {
    const val BURST_SECONDS = 0.25
    const val MIN_ROUNDS = 8
    const val MAX_ROUNDS = 200
    const val DISTURBED = 0.25

    /** Linear interpolation between closest ranks (numpy's default). */
    fun percentile(values: List<Double>, q: Double): Double {
        val ordered = values.sorted()
        val position = (ordered.size - 1) * q / 100
        val low = Math.floor(position).toInt()
        val high = Math.ceil(position).toInt()
        return ordered[low] + (ordered[high] - ordered[low]) * (position - low)
    }

    fun median(values: List<Double>): Double {
        val ordered = values.sorted()
        val mid = ordered.size / 2
        return if (ordered.size % 2 == 1) ordered[mid] else (ordered[mid - 1] + ordered[mid]) / 2
    }

    /** 1.4826 x the median absolute deviation over the median; null below two rounds. */
    fun relativeSpread(values: List<Double>): Double? {
        if (values.size < 2) return null
        val m = median(values)
        return if (m > 0) 1.4826 * median(values.map { Math.abs(it - m) }) / m else null
    }

    /** Rounds of about BURST_SECONDS that fill the budget (Python's round: half to even, as Math.rint). */
    fun roundCount(budget: Double): Int = maxOf(MIN_ROUNDS, minOf(MAX_ROUNDS, Math.rint(budget / BURST_SECONDS).toInt()))

    /** Per round: did its reference kernel take more than 25 % longer than the fastest round's? */
    fun disturbed(references: List<Double>): List<Boolean> {
        val best = references.filter { it > 0 }.minOrNull() ?: return references.map { false }
        return references.map { it > 0 && it > (1 + DISTURBED) * best }
    }

    fun phaseChanges(references: List<Double>): Int {
        val flags = disturbed(references)
        return flags.zipWithNext().count { (a, b) -> a != b }
    }
}

/** bench's reference kernel, in plain Kotlin (no BLAS on every phone): a float32 product of two
 *  128 x 128 matrices, timed between rounds; when it slows, the phone was busy or throttled. */
class ReferenceKernel {
    val n = 128
    val what = "Kotlin float32 matmul ${n}³ on one thread"
    val flop = 2.0 * n * n * n
    private val random = java.util.Random(0)
    private val a = FloatArray(n * n) { random.nextFloat() * 2 - 1 }
    private val b = FloatArray(n * n) { random.nextFloat() * 2 - 1 }
    private val c = FloatArray(n * n)

    private fun product() {
        java.util.Arrays.fill(c, 0f)
        for (i in 0 until n) for (k in 0 until n) {
            val x = a[i * n + k]
            for (j in 0 until n) c[i * n + j] += x * b[k * n + j]
        }
    }

    /** One burst of about 15 ms after an untimed product; the median of its products in ms. */
    fun burst(): Double {
        product()
        val samples = mutableListOf<Double>()
        val start = System.nanoTime()
        while (samples.isEmpty() || (System.nanoTime() - start) / 1e6 < 15) {
            val t = System.nanoTime()
            product()
            samples.add((System.nanoTime() - t) / 1e6)
        }
        return RoundStats.median(samples)
    }
}

/** Every round of every case, as bench keeps them: the reference kernel either side of a round (the
 *  slower of the two is the round's), the round's seconds, and the worst thermal status seen. */
class Rounds(private val context: Context) {
    private class State(val referenceMs: Double, val referenceEachMs: List<Double>, val seconds: Double)

    private val kernel = ReferenceKernel()
    private val states = mutableListOf<State>()
    private var last: Double? = null
    private var worstThermal = -1

    fun round(burst: () -> List<Double>): Pair<List<Double>, Double> {
        val before = last ?: kernel.burst()
        val start = System.nanoTime()
        val samples = burst()
        val seconds = (System.nanoTime() - start) / 1e9
        val after = kernel.burst()
        last = after
        if (Build.VERSION.SDK_INT >= 29) {  // PowerManager.getCurrentThermalStatus: API 29
            val power = context.getSystemService(Context.POWER_SERVICE) as PowerManager
            worstThermal = maxOf(worstThermal, power.currentThermalStatus)
        }
        states.add(State(maxOf(before, after), listOf(before, after), seconds))
        return samples to maxOf(before, after)
    }

    /** The report's `conditions`, in the shape of bench's (steal and the clock are not an app's to read). */
    fun conditions(): JSONObject {
        val references = states.map { it.referenceMs }
        val known = states.flatMap { it.referenceEachMs }
        val kernelEntry: Any = if (known.isEmpty()) JSONObject.NULL else {
            val middle = RoundStats.median(known)
            val fastest = known.minOrNull()!!
            val slowest = known.maxOrNull()!!
            JSONObject().put("what", kernel.what)
                .put("ms", JSONObject().put("median", middle).put("min", fastest).put("max", slowest))
                .put("gflops", JSONObject().put("median", kernel.flop / middle / 1e6)
                    .put("best", kernel.flop / fastest / 1e6).put("worst", kernel.flop / slowest / 1e6))
        }
        // The sticky battery intent: registering no receiver only reads its latest state.
        val battery: Intent? = context.registerReceiver(null, IntentFilter(Intent.ACTION_BATTERY_CHANGED))
        val status = battery?.getIntExtra(BatteryManager.EXTRA_STATUS, -1) ?: -1
        val tenths = battery?.getIntExtra(BatteryManager.EXTRA_TEMPERATURE, Int.MIN_VALUE) ?: Int.MIN_VALUE
        val android = JSONObject()
            .put("thermal_status", THERMAL_NAMES.getOrNull(worstThermal) ?: JSONObject.NULL)
            .put("charging", if (status < 0) JSONObject.NULL else
                status == BatteryManager.BATTERY_STATUS_CHARGING || status == BatteryManager.BATTERY_STATUS_FULL)
            .put("battery_temp_c", if (tenths == Int.MIN_VALUE) JSONObject.NULL else tenths / 10.0)
        return JSONObject()
            .put("rounds", states.size).put("seconds", states.sumOf { it.seconds })
            .put("steal", JSONObject.NULL).put("clock_ghz", JSONObject.NULL).put("reference_kernel", kernelEntry)
            .put("phase_changes", RoundStats.phaseChanges(references))
            .put("disturbed_rounds", RoundStats.disturbed(references).count { it })
            .put("per_round", JSONArray(states.map {
                JSONObject().put("reference_ms", it.referenceMs).put("reference_each_ms", JSONArray(it.referenceEachMs))
                    .put("seconds", it.seconds)
            }))
            .put("platform", "android")
            .put("android", android)
    }

    companion object {
        // PowerManager.THERMAL_STATUS_NONE (0) to THERMAL_STATUS_SHUTDOWN (6), named as PowerManager names them.
        val THERMAL_NAMES = listOf("none", "light", "moderate", "severe", "critical", "emergency", "shutdown")
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

/** The process's own memory and its mapped files' pages in MB, as Android's memory profiler splits
 *  them (Debug.MemoryInfo: private dirty; private and shared clean). */
fun residentMb(): Pair<Double, Double> {
    val info = Debug.MemoryInfo()
    Debug.getMemoryInfo(info)
    return Pair(info.totalPrivateDirty / 1024.0, (info.totalPrivateClean + info.totalSharedClean) / 1024.0)
}

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

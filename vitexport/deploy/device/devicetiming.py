"""Timing on the device, for check.py: bench's reference kernel (numpy), the rounds with the
reference either side of each, what the platform says of its state (Linux: steal and the clock;
a Jetson: also nvpmodel's power mode, the clocks from sysfs and the thermal zones), and what the
model's load cost (the memory it added: Linux). The statistics
are roundstats.py's, passed in as `stats`: the file vitexport's bench computes with.

Carried in the package and listed in its manifest.json; check.py imports it only after every file's
sha256 matched. Python 3.8 or newer, numpy; not vitexport.
"""
from __future__ import annotations

import os
import platform
import time

REFERENCE_N = 256  # bench's reference kernel: a float32 product of two 256 x 256 matrices
REFERENCE_MS = 15.0  # one reference burst; its median is kept
# The reference runs in the runtime's process (bench gives it a process of its own): right after a
# round, the runtime's thread pool is still spinning, and a kernel started then waits for those
# threads' time slices (on 2 cores, 0.15 ms became 30 ms). A short pause lets the pool go to sleep.
SETTLE_S = 0.05


class Reference:
    """The small kernel timed between rounds: when it slows, the device was disturbed (another load,
    a clock or power change), and so was the round beside it."""

    def __init__(self, stats):
        import numpy as np

        rng = np.random.RandomState(0)  # numpy 1.17's API: older devices' numpy
        self.a = rng.standard_normal((REFERENCE_N, REFERENCE_N)).astype(np.float32)
        self.b = rng.standard_normal((REFERENCE_N, REFERENCE_N)).astype(np.float32)
        self.c = np.empty((REFERENCE_N, REFERENCE_N), dtype=np.float32)
        self.stats = stats
        self.info = {"what": "numpy float32 matmul {}³".format(REFERENCE_N), "flop": 2.0 * REFERENCE_N ** 3}

    def burst(self):
        import numpy as np

        time.sleep(SETTLE_S)
        np.matmul(self.a, self.b, out=self.c)  # one untimed run: its caches are the model's after a round
        samples, start = [], time.perf_counter()
        while not samples or (time.perf_counter() - start) * 1000.0 < REFERENCE_MS:
            t0 = time.perf_counter()
            np.matmul(self.a, self.b, out=self.c)
            samples.append((time.perf_counter() - t0) * 1000.0)
        return self.stats.median(samples)


def read_text(path):
    try:
        with open(path, "rb") as f:
            return f.read(1 << 16).decode("utf-8", "replace")
    except OSError:
        return None


def cpu_times():
    """(steal, total) jiffies of all CPUs from /proc/stat; None where there is none (not Linux)."""
    text = read_text("/proc/stat")
    if not text or not text.startswith("cpu "):
        return None
    fields = [int(v) for v in text.splitlines()[0].split()[1:]]
    return (fields[7] if len(fields) > 7 else 0), sum(fields[:8])


def steal_share(before, after):
    if before is None or after is None or after[1] <= before[1]:
        return None
    return (after[0] - before[0]) / (after[1] - before[1])


def clock_ghz():
    """The cores' current clock in GHz, averaged, and where it was read (Linux)."""
    import glob

    khz = [read_text(p) for p in glob.glob("/sys/devices/system/cpu/cpu[0-9]*/cpufreq/scaling_cur_freq")]
    khz = [int(k) for k in khz if k and k.strip().isdigit()]
    if khz:
        return sum(khz) / len(khz) / 1e6, "cpufreq"
    mhz = []
    for line in (read_text("/proc/cpuinfo") or "").splitlines():
        if line.lower().startswith("cpu mhz"):
            try:
                mhz.append(float(line.split(":", 1)[1]))
            except ValueError:
                pass
    return (sum(mhz) / len(mhz) / 1000, "cpuinfo") if mhz else (None, "not readable")


def number_in(path, scale):
    text = read_text(path)
    try:
        return int(text.strip()) / scale if text and text.strip() else None
    except ValueError:
        return None


def jetson_readings(facts, root="/"):
    """A Jetson's power mode (nvpmodel's name), its CPU, GPU and memory (EMC) clocks in MHz, and every
    thermal zone in degrees C; null where the board or the user's rights do not allow reading them
    (EMC's clock is in debugfs, usually root's). `root`: where sysfs is mounted, / on the device."""
    import glob

    def under(*pattern):
        return sorted(glob.glob(os.path.join(root, *pattern)))

    cpus = [number_in(p, 1000.0) for p in under("sys/devices/system/cpu/cpu[0-9]*/cpufreq/scaling_cur_freq")]
    cpus = [mhz for mhz in cpus if mhz]
    gpus = [p for p in under("sys/class/devfreq/*/cur_freq") + under("sys/devices/gpu.0/devfreq/*/cur_freq")
            if any(k in p for k in ("gpu", "ga10b", "gv11b", "gp10b", "gb10b"))]  # the GPU's devfreq by board
    gpu = next((mhz for mhz in (number_in(p, 1e6) for p in gpus) if mhz), None)
    emc = next((mhz for mhz in (number_in(os.path.join(root, p), 1e6) for p in (
        "sys/kernel/debug/bpmp/debug/clk/emc/rate", "sys/kernel/debug/clk/emc/clk_rate")) if mhz), None)
    thermal = {}
    for zone in under("sys/class/thermal/thermal_zone*"):
        name = (read_text(os.path.join(zone, "type")) or "").strip() or os.path.basename(zone)
        celsius = number_in(os.path.join(zone, "temp"), 1000.0)
        if celsius is not None and -100 < celsius < 250:  # a zone switched off reads -256 or the like
            thermal[name] = celsius
    return {"power_mode": facts.get("jetson_power_mode"),
            "clocks": {"cpu_mhz": sum(cpus) / len(cpus) if cpus else None, "gpu_mhz": gpu, "emc_mhz": emc},
            "thermal_c": thermal or None}


def platform_name(facts):
    if facts.get("jetson_l4t"):
        return "jetson"
    return "macos" if platform.system() == "Darwin" else "linux"


class Rounds:
    """Every round of every case, as bench keeps them: the reference kernel either side of a round (the
    slower of the two is the round's), steal, the clock and the round's seconds."""

    def __init__(self, stats, reference):
        self.stats, self.reference = stats, reference
        self.states = []
        self.last = None  # the latest reference reading, the next round's "before"

    def run(self, burst):
        before = self.last if self.last is not None else self.reference.burst()
        times, t0 = cpu_times(), time.monotonic()
        samples = burst()
        seconds = time.monotonic() - t0
        after = self.last = self.reference.burst()
        ghz, _ = clock_ghz()
        state = {"reference_ms": self.stats.slower(before, after), "steal": steal_share(times, cpu_times()),
                 "clock_ghz": ghz, "seconds": seconds, "reference_each_ms": [before, after]}
        self.states.append(state)
        return samples, state["reference_ms"]


def conditions(stats, rounds, facts, threads=None):
    """The report's `conditions`: bench's summary of the rounds (with the runtime's threads when the
    check was told them, as bench's), the platform and its own readings."""
    out = stats.summary(rounds.states, rounds.reference.info, clock_ghz())
    if threads:
        out = dict({"threads": threads}, **out)
    out["platform"] = platform_name(facts)
    if out["platform"] == "jetson":
        out["jetson"] = jetson_readings(facts)
    return out


def describe_timing(timings, c):
    """One line: the budget, the rounds, the reference kernel, steal and the disturbed rounds."""
    budget = ("{:g} s per case".format(timings["budget_s"]) if timings.get("budget_s")
              else "a fixed number of runs per case")
    parts = ["timing: {}, {} rounds in {:.1f} s".format(budget, c["rounds"], c["seconds"])]
    kernel = c.get("reference_kernel")
    if kernel and kernel.get("gflops"):
        parts.append("reference kernel {:.0f} GFLOP/s".format(kernel["gflops"]["median"]))
    if c.get("steal"):
        parts.append("steal {:.1%}".format(c["steal"]["mean"]))
    if c.get("clock_ghz"):
        parts.append("clock {:.2f} GHz".format(c["clock_ghz"]["median"]))
    parts.append("{} of {} rounds disturbed".format(c["disturbed_rounds"], c["rounds"]))
    return "; ".join(parts)


# --- what the load cost (Linux's /proc; elsewhere None) ------------------------------------------------

def resident_mb():
    """This process's resident memory in MB: anonymous (its own) and file-backed (mapped files); None
    where /proc/self/status is not there."""
    try:
        with open("/proc/self/status") as f:
            fields = dict(line.split(":", 1) for line in f if ":" in line)
        return {"anon": int(fields["RssAnon"].split()[0]) * 1024 / 1e6,
                "file": int(fields["RssFile"].split()[0]) * 1024 / 1e6}
    except (OSError, KeyError, ValueError):
        return None


def load_costs(before, after, cold, first_ms):
    """The report's load figures: whether the load was cold, the first inference's time, and the memory
    the load added to the process (the runtime's own start included: it starts with the model)."""
    costs = {"cold_load": cold, "first_inference_ms": first_ms}
    if before is not None and after is not None:
        costs["load_anon_mb"] = round(max(0.0, after["anon"] - before["anon"]), 1)
        costs["load_file_mb"] = round(max(0.0, after["file"] - before["file"]), 1)
    return costs


def describe_load(timings):
    """One line: the load's time (cold or not), the first inference, the memory the load added."""
    parts = ["load {:.0f} ms{}".format(timings["load_ms"], " (cold: read from storage)" if timings.get("cold_load")
                                       else "")]
    if timings.get("first_inference_ms") is not None:
        parts.append("first inference {:.1f} ms".format(timings["first_inference_ms"]))
    if timings.get("load_anon_mb") is not None:
        parts.append("memory added {:.0f} MB own + {:.0f} MB mapped".format(timings["load_anon_mb"],
                                                                            timings["load_file_mb"]))
    return "; ".join(parts)

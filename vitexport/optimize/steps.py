"""optimize's steps on its candidates, each through the cache: build one (export without the check),
time a set of them in one benchmark run, check one (with the accuracy search of a backend that can
keep more of a failing graph in float), and `settle`: time every built candidate, then check in order
of speed until one passes at every batch, as `fastest` would pick had every one been checked."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any

from vitexport import backends
from vitexport.core.errors import ParityError, VitexportError
from vitexport.optimize.cache import (BUILD_ROOMS, CHECK_ROOMS, Cache, code_digest, digest, model_digest,
                                      options_of)
from vitexport.optimize.ranking import attach_speed, speed_at

NOT_CHECKED = "not checked: slower than the pick"


class Steps:
    """The steps of one optimize run on one loaded model; `seconds` adds up the time of each kind."""

    def __init__(self, loaded, cache: Cache, *, images, seed: int, gate, batches: list[int], progress):
        from vitexport.matrix.keys import Digests

        self.loaded, self.cache, self.images, self.seed, self.gate = loaded, cache, images, seed, gate
        self.batches, self.progress, self.digests = batches, progress, Digests()
        self.seconds = {"build_s": 0.0, "time_s": 0.0, "check_s": 0.0}
        self.aside: dict[str, float] = {}  # build key -> seconds, of what the helper process built this run
        self.aside_note: dict[str, Any] = {"candidates": [], "refused": None}
        t0 = time.perf_counter()
        self.model = digest({"model": model_digest(loaded), "code": code_digest(BUILD_ROOMS), "seed": seed})
        self.seconds["key_s"] = time.perf_counter() - t0
        self.checks = {"images": self.digests.of(images) if images else None, "gate": dataclasses.asdict(gate),
                       "seed": seed, "code": code_digest(CHECK_ROOMS)}
        self.check_inputs = digest(self.checks)  # what a published pick was checked on

    def build_key(self, backend: str, options) -> str:
        from vitexport.matrix.plan import names_a_path

        files = {f.name: self.digests.of(getattr(options, f.name)) for f in dataclasses.fields(options)
                 if names_a_path(f) and isinstance(getattr(options, f.name), str)}
        return digest({"kind": "build", "model": self.model, "backend": backend, "options": options.to_dict(),
                       "option_files": files, "tools": self.digests.tools(backend)})

    # ------------------------------------------------------------------------------------- build

    def build_all(self, rows: list[dict], options: list) -> None:
        """Every candidate's artifact (`build`), one backend's built here while a helper process builds
        the others' (vitexport.optimize.aside); what the helper did not build is built here after it."""
        from vitexport.optimize.aside import Aside, split

        t0 = time.perf_counter()
        here, aside = split([(r["backend"], o) for r, o in zip(rows, options)])
        todo = [i for i in aside if not self.cache.has(self.build_key(rows[i]["backend"], options[i]))]
        helper = Aside()
        try:
            if todo:
                self.progress.step(f"building {', '.join(rows[i]['candidate'] for i in todo)} in a second process")
                helper.start({"spec": self.loaded.spec.to_dict(), "model": self.model, "seed": self.seed,
                              "images": str(self.images) if self.images else None, "cache": str(self.cache.root),
                              "candidates": [{"key": self.build_key(rows[i]["backend"], options[i]),
                                              "backend": rows[i]["backend"], "label": rows[i]["candidate"],
                                              "options": options[i].to_dict()} for i in todo]})
            for i in here:
                self.build(rows[i], options[i])
            if todo:
                self.progress.step("waiting for the second process's builds")
            self.aside, why = helper.finish()
            self.aside_note = {"candidates": [rows[i]["candidate"] for i in todo], "refused": why}
            for i in aside:
                self.build(rows[i], options[i])
        finally:
            helper.stop()
        self.seconds["build_s"] += time.perf_counter() - t0

    def build(self, row: dict, options) -> None:
        """The candidate's artifact, from the cache (or the helper process) or exported now without its
        check; a candidate that cannot be built is kept in the table with why, and never timed."""
        from vitexport.export.pipeline import export

        key = self.build_key(row["backend"], options)
        row.update(passed=False, checked=False, artifact=None, parity=None, build_key=key)
        fresh = key in self.aside
        path = self.cache.built(key, fresh=fresh)
        row["build_cached"] = path is not None and not fresh
        if fresh and path is not None:
            row["built_aside_s"] = round(self.aside[key], 2)
        if path is None:
            self.progress.step(f"candidate {row['candidate']}: building")
            try:
                path = self.cache.build(key, row["candidate"], lambda stage: export(
                    row["backend"], self.loaded.spec, options, stage, verify=False, images=self.images,
                    seed=self.seed, name=row["candidate"], progress=self.progress, loaded=self.loaded)["artifact"])
            except VitexportError as e:  # its library failed on this model: the others still compete
                row["reason"] = f"not built: {e}"
        if path is not None:
            row.update(artifact=str(path), artifact_sha256=artifact_sha256(path))

    # ------------------------------------------------------------------------------------ timing

    def time(self, rows: list[dict], timing: dict[str, Any]) -> dict | None:
        """Time every built candidate not known to fail, in one benchmark run (or the cached one of
        the same candidates, settings and machine); each row gets its p50 at each batch."""
        from vitexport.bench.fingerprint import fingerprint
        from vitexport.bench.run import bench
        from vitexport.matrix.keys import stable_fingerprint
        from vitexport.report.files import write_all

        t0 = time.perf_counter()
        live = [r for r in rows if r["artifact"] and r.get("check") != "failed"]
        if not live:
            return None
        timers = list(dict.fromkeys(r["runtime"] for r in live))
        key = digest({"kind": "timing", "artifacts": sorted((Path(r["artifact"]).name, r["artifact_sha256"])
                                                             for r in live),
                      "timers": timers, "batches": self.batches, "settings": timing, "seed": self.seed,
                      "machine": stable_fingerprint(fingerprint(timing.get("threads")))})
        cached = self.cache.timing(key)
        report = {"results": cached["results"], "files": cached.get("files")} if cached else None
        if report is None:
            self.progress.step(f"timing {len(live)} candidates in one benchmark run")
            try:
                # Ranking needs the candidates side by side, not the machine's GEMM rate (bench reports it).
                report = bench(None, timers, self.batches, artifacts=[r["artifact"] for r in live],
                               seed=self.seed, out_dir=self.cache.root, roofline=False, start_together=True,
                               progress=self.progress, write_files=write_all, **timing)
            except VitexportError as e:  # nothing could run: no candidate can be ranked
                report = {"results": [], "files": None, "error": str(e)}
            if not report.get("error") and all(r.get("available") for r in report["results"]):
                self.cache.put_timing(key, {"results": report["results"], "files": report.get("files"),
                                            "seconds": time.perf_counter() - t0})
        attach_speed(live, report, self.batches)
        whys = {Path(r["artifact"]).name: r.get("reason") for r in report["results"] if not r.get("available")}
        for row in live:
            row.pop("retime", None)
            if not any(speed_at(row, b).get("p50_ms") for b in self.batches):
                row["not_timed"] = whys.get(Path(row["artifact"]).name) or report.get("error") or "no timed runs"
        self.seconds["time_s"] += time.perf_counter() - t0
        return report

    # ------------------------------------------------------------------------------------- check

    def check(self, row: dict) -> None:
        """Check the candidate (or take the cached verdict on the same artifact and check inputs). One
        that fails and whose backend can keep more of it in float is built again that way (checked as
        it is built) and must then be timed again (`retime`)."""
        t0 = time.perf_counter()
        check_key = digest({"kind": "check", "build": row["build_key"], **self.checks})
        verdict = self.cache.check(row["build_key"], check_key, row["artifact_sha256"])
        if verdict is not None and verdict["status"] == "passed" and not self._computes_this_model(row):
            verdict = None  # the entry was another model's: built again above, checked now
            if row["artifact"] is None:  # and could not be built again: the row says why
                self.seconds["check_s"] += time.perf_counter() - t0
                return
        row["check_cached"] = verdict is not None
        if verdict is None:
            verdict = self._check_now(row)
            self.cache.put_check(row["build_key"], check_key, verdict)
        apply(row, verdict)
        if verdict["status"] == "failed" and verdict.get("refined_options") and not row.get("refined"):
            self._refine(row, verdict["refined_options"])
        self.seconds["check_s"] += time.perf_counter() - t0

    def _computes_this_model(self, row: dict) -> bool:
        """Whether the cached artifact a kept verdict speaks for computes the model being optimised (a
        cache entry's files, its records included, can be replaced whole); if not, the entry is
        removed and the candidate built again, to be checked and timed anew."""
        from vitexport.export.checking import computes

        why = computes(Path(row["artifact"]), self.loaded, seed=self.seed, gate=self.gate)
        if why is None:
            return True
        self.cache.forget(row["build_key"])
        be = backends.get(row["backend"])
        self.build(row, be.Options(**options_of(row["options"])))
        row.update(retime=row["artifact"] is not None,  # a new artifact is timed before it is ranked
                   cache_note=f"its cached build did not compute this model ({why}): built again")
        return False

    def _check_now(self, row: dict) -> dict[str, Any]:
        from vitexport.export import sidecar
        from vitexport.export.checking import check_built

        self.progress.step(f"candidate {row['candidate']}: checking")
        t0, path = time.perf_counter(), Path(row["artifact"])
        refined = None
        try:
            result = check_built(path, self.loaded, images=self.images, seed=self.seed, gate=self.gate,
                                 progress=self.progress)
            skipped = (result["parity"] or {}).get("skipped")
            status, why = ("passed", None) if result["status"] == "verified" else \
                ("unchecked", f"not checked here: {skipped or result['status']}")
        except ParityError as e:
            result, status, why = e.result, "failed", str(e).split(":", 1)[-1].strip()
            if not result.get("artifact_modified"):
                be = backends.get(row["backend"])
                found = be.refine(self.loaded, be.Options(**options_of(row["options"])), path, sidecar.read(path))
                refined = found[0].to_dict() if found else None
        return {"artifact_sha256": row["artifact_sha256"], "status": status, "reason": why,
                "parity": result.get("parity"), "provider": result.get("provider"), "refined_options": refined,
                "seconds": time.perf_counter() - t0}

    def _refine(self, row: dict, refined: dict) -> None:
        """Build the failing candidate again keeping more of it in float (the export's accuracy search,
        checked as it goes); when that passes, the row becomes it, to be timed again."""
        from vitexport.export import sidecar
        from vitexport.export.pipeline import export

        be = backends.get(row["backend"])
        options = be.Options(**options_of(refined))
        key = self.build_key(row["backend"], options)
        path = self.cache.built(key)
        if path is None:
            self.progress.step(f"candidate {row['candidate']}: keeping more of it in float")
            try:
                path = self.cache.build(key, row["candidate"], lambda stage: export(
                    row["backend"], self.loaded.spec, options, stage, images=self.images, seed=self.seed,
                    gate=self.gate, name=row["candidate"], progress=self.progress, loaded=self.loaded)["artifact"])
            except VitexportError as e:
                row["reason"] += f"; keeping more of it in float did not pass either: {str(e)[:200]}"
                row["refined"] = True
                return
        record = sidecar.read(path)
        row["refined"] = True
        if record.status != "verified":  # built, but this machine cannot check it: never picked
            row["reason"] += f"; kept more of it in float, it was not checked here: {record.status}"
            return
        row.update(artifact=str(path), artifact_sha256=record.artifact_sha256, build_key=key, options=record.options,
                   retime=True, passed=True, checked=True, check="passed",
                   parity=record.parity.to_dict() if record.parity else None, provider=record.provider)
        row.pop("reason", None)
        for stale in ("by_batch", "p50_ms", "speedup", "timing"):  # the speed of the artifact it replaces
            row.pop(stale, None)

    # ------------------------------------------------------------------------------------ settle

    def settle(self, rows: list[dict], timing: dict[str, Any], check_all: bool) -> dict | None:
        """Time every built candidate, then at each batch check in order of speed until one passes (a
        candidate checked once is not checked again); with `check_all`, every candidate. A candidate
        rebuilt by the accuracy search is timed again with the others before the order is trusted."""
        report = None
        while True:
            report = self.time(rows, timing) or report
            retime = False
            for batch in self.batches:
                for row in sorted((r for r in rows if r["artifact"] and speed_at(r, batch).get("p50_ms")),
                                  key=lambda r: speed_at(r, batch)["p50_ms"]):
                    if not row["checked"]:
                        self.check(row)
                    retime = retime or bool(row.get("retime"))
                    if retime or (row["passed"] and not check_all):
                        break
                if retime:
                    break
            if check_all and not retime:
                for row in rows:
                    if row["artifact"] and not row["checked"]:
                        self.check(row)
                        retime = retime or bool(row.get("retime"))
            if not retime:
                break
        for row in rows:
            if row["artifact"] and not row["checked"]:
                row["reason"] = f"not checked: not timed: {row['not_timed']}" if row.get("not_timed") else NOT_CHECKED
        return report


def apply(row: dict, verdict: dict[str, Any]) -> None:
    row.update(checked=True, check=verdict["status"], passed=verdict["status"] == "passed",
               parity=verdict.get("parity"), reason=verdict.get("reason"))
    if verdict.get("provider") and not row.get("provider"):
        row["provider"] = verdict["provider"]
    if row["reason"] is None:
        row.pop("reason")


def artifact_sha256(path: Path) -> str:
    from vitexport.export import sidecar

    return sidecar.read(path).artifact_sha256

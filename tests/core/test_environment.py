"""Library versions: read from metadata once per installed state, read again once it changes."""

import os

from vitexport.core import environment


def test_versions_are_read_once_until_a_distribution_is_installed(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    environment._versions.cache_clear()
    scans = []
    real = environment.metadata.distributions
    monkeypatch.setattr(environment.metadata, "distributions", lambda: scans.append(1) or real())
    wanted = ("vitexport-test-dist", "torch")
    first = environment.versions(wanted)
    assert "vitexport-test-dist" not in first and first == environment.versions(wanted) and len(scans) == 1

    info = tmp_path / "vitexport_test_dist-1.2.dist-info"  # as pip installs it, into a folder on the path
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: vitexport-test-dist\nVersion: 1.2\n")
    before = os.stat(tmp_path).st_mtime_ns
    os.utime(tmp_path, ns=(before, before + 10**9))  # a later time, whatever the file system's clock grain
    after = environment.versions(wanted)
    assert after == {**first, "vitexport-test-dist": "1.2"} and len(scans) == 2
    assert list(after) == sorted(after)

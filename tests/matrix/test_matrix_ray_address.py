"""A Ray head address nothing answers at is refused at once, in one line of ours (exit 3), before Ray
starts retrying; a connection that times out says so with the timeout."""

import socket
import time

import pytest
from typer.testing import CliRunner

from vitexport.cli.app import app

PLAN = '[bench]\nbatches = [1]\n\n[[models]]\nconfig = "tiny"\nset = { depth = 1 }\n\n[[targets]]\nbackend = "onnx"\n'


def closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    return port


def test_an_address_nothing_answers_at_is_unavailable_in_one_line(tmp_path):
    pytest.importorskip("ray")
    plan = tmp_path / "plan.toml"
    plan.write_text(PLAN)
    address = f"127.0.0.1:{closed_port()}"
    start = time.monotonic()
    result = CliRunner().invoke(app, ["matrix", str(plan), "--ray", address, "--out", str(tmp_path / "out")])
    assert result.exit_code == 3, result.output
    assert time.monotonic() - start < 60  # not Ray's minutes of retries
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert f"cannot reach the Ray cluster at {address}" in lines[-1] and "within 10 s" in lines[-1]
    assert "Traceback" not in result.output


def test_a_connection_that_times_out_names_the_timeout(monkeypatch):
    from vitexport.core.errors import BackendUnavailable
    from vitexport.matrix import ray_pool

    def silent(*args, **kwargs):
        raise socket.timeout("timed out")

    monkeypatch.setattr(socket, "create_connection", silent)
    with pytest.raises(BackendUnavailable, match=r"ray://head:10001 within 3 s: nothing answered"):
        ray_pool.check_reachable("ray://head:10001", timeout_s=3)


def test_node_wait_is_refused_without_ray_and_below_zero_before_any_work(tmp_path):
    plan = tmp_path / "plan.toml"
    plan.write_text(PLAN)
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["matrix", str(plan), "--out", str(out), "--node-wait", "5"])
    assert result.exit_code == 2 and "--node-wait applies to --ray runs" in result.output
    result = CliRunner().invoke(app, ["matrix", str(plan), "--out", str(out), "--ray", "local", "--node-wait", "-1"])
    assert result.exit_code == 2 and "--node-wait must be >= 0, got -1" in result.output
    assert "Traceback" not in result.output and not (out / "cache").exists()

"""Watching a Ray cluster without one: the bookkeeping of a device whose nodes left (said once, a
bounded wait, then its timings given up, with the reason), the head and raylet knocks on real
sockets, and the lines for a cluster that wants a token."""

from __future__ import annotations

import socket
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vitexport.core.errors import BackendUnavailable
from vitexport.matrix import ray_auth
from vitexport.matrix.ray_watch import Left, Node, Placement, Watch

EDGE = Node("e1" * 28, "10.0.0.7", 40001, {"device:edge": 1, "CPU": 4})
OTHER = Node("f2" * 28, "10.0.0.8", 40002, {"device:edge": 1, "CPU": 4})
SMALL = Node("a3" * 28, "10.0.0.9", 40003, {"device:edge": 1, "CPU": 2})


def placement(wait_s: float = 60) -> Placement:
    return Placement(wait_s, {"edge": 4}, {"edge": [EDGE]})


def test_a_device_whose_node_left_is_said_once_then_given_up_after_the_wait():
    p = placement(wait_s=60)
    left = {EDGE.id: Left(EDGE, "13:45:02", "its raylet stopped answering")}
    notices, expired = p.update({}, left, {"edge"}, now=100)
    assert notices == ["no node carries device:edge since node e1e1e1e1 (10.0.0.7) left at 13:45:02 (its raylet "
                       "stopped answering); waiting up to 60 s for one to join (--node-wait)"]
    assert expired == set()
    assert p.update({}, left, {"edge"}, now=110) == ([], set())  # said once
    assert p.update({}, left, {"edge"}, now=159.9)[1] == set()
    notices, expired = p.update({}, left, {"edge"}, now=160)
    assert expired == {"edge"}
    assert p.reason("edge") == ("no node carries device:edge since node e1e1e1e1 (10.0.0.7) left at 13:45:02 (its "
                                "raylet stopped answering); none joined within 60 s (--node-wait)")


def test_a_node_that_joins_in_time_ends_the_wait_and_is_named():
    p = placement()
    left = {EDGE.id: Left(EDGE, "13:45:02", "Ray marked it dead")}
    p.update({}, left, {"edge"}, now=0)
    notices, expired = p.update({OTHER.id: OTHER}, left, {"edge"}, now=30)
    assert notices == ["device:edge is back: node f2f2f2f2 (10.0.0.8) answers again; its timings go on"]
    assert expired == set() and "edge" not in p.gone
    # it leaves too: the wait starts again from then, naming it
    left[OTHER.id] = Left(OTHER, "13:50:00", "its raylet stopped answering")
    notices, _ = p.update({}, left, {"edge"}, now=40)
    assert "since node f2f2f2f2 (10.0.0.8) left at 13:50:00" in notices[0]
    assert p.update({}, left, {"edge"}, now=99.9)[1] == set() and p.update({}, left, {"edge"}, now=100)[1] == {"edge"}


def test_nothing_is_said_while_no_timing_needs_the_device_but_the_wait_counts_from_its_leaving():
    p = placement(wait_s=10)
    left = {EDGE.id: Left(EDGE, "13:45:02", "its raylet stopped answering")}
    assert p.update({}, left, set(), now=0) == ([], set())
    assert p.update({}, left, {"edge"}, now=20)[1] == {"edge"}  # a timing submitted later gives up at once


def test_a_node_with_fewer_cpus_than_a_timing_takes_does_not_count():
    p = placement()
    left = {EDGE.id: Left(EDGE, "13:45:02", "Ray marked it dead")}
    p.update({}, left, {"edge"}, now=0)
    assert p.update({SMALL.id: SMALL}, left, {"edge"}, now=61)[1] == {"edge"}  # it could never take the timing


def test_a_long_wait_is_recalled():
    p = placement(wait_s=300)
    left = {EDGE.id: Left(EDGE, "13:45:02", "Ray marked it dead")}
    p.update({}, left, {"edge"}, now=0)
    assert p.update({}, left, {"edge"}, now=29)[0] == []
    assert p.update({}, left, {"edge"}, now=30)[0] == ["no node carries device:edge since node e1e1e1e1 (10.0.0.7) "
                                                       "left at 13:45:02 (Ray marked it dead); 270 s left for one to "
                                                       "join (--node-wait)"]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.floats(0.01, 20), st.booleans()), min_size=1, max_size=30), st.floats(0, 50))
def test_a_device_is_given_up_only_after_its_nodes_were_gone_for_the_whole_wait(steps, wait_s):
    """Whatever the sequence of leavings and joinings: expired exactly when no carrier has been seen
    since the wait began."""
    p = placement(wait_s=wait_s)
    left = {EDGE.id: Left(EDGE, "13:45:02", "Ray marked it dead")}
    now, gone_since = 0.0, None
    for step, present in steps:
        now += step
        _, expired = p.update({EDGE.id: EDGE} if present else {}, left, {"edge"}, now)
        gone_since = None if present else (now if gone_since is None else gone_since)
        assert (expired == {"edge"}) == (gone_since is not None and now - gone_since >= wait_s)


def listener() -> socket.socket:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen()
    return s


def closed_port() -> int:
    s = listener()
    port = s.getsockname()[1]
    s.close()
    return port


def wait_until(condition, timeout: float = 15) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline
        time.sleep(0.05)


def test_the_watch_sees_a_raylet_stop_and_a_dead_node_then_the_head_go():
    head, raylet = listener(), listener()
    head_port = head.getsockname()[1]
    table = [{"NodeID": EDGE.id, "Alive": True, "NodeManagerAddress": "127.0.0.1",
              "NodeManagerPort": raylet.getsockname()[1], "Resources": {"device:edge": 1.0, "CPU": 4.0}},
             {"NodeID": OTHER.id, "Alive": True, "NodeManagerAddress": "127.0.0.1", "NodeManagerPort": 1,
              "Resources": {"CPU": 1.0}},  # no device: its raylet is not knocked on
             {"NodeID": SMALL.id, "Alive": True, "NodeManagerAddress": "127.0.0.1", "NodeManagerPort": closed_port(),
              "Resources": {"device:lab": 1.0}}]  # never answered here (a firewall?): Ray alone decides
    watch = Watch(lambda: table, head.getsockname(), period=0.05, head_period=0.05).start()
    try:
        wait_until(watch.seen.is_set)
        assert set(watch.snapshot()[0]) == {EDGE.id, OTHER.id, SMALL.id} and watch.head_lost is None
        raylet.close()  # killed: its port refuses
        wait_until(lambda: EDGE.id in watch.snapshot()[1])
        alive, left = watch.snapshot()
        assert set(alive) == {OTHER.id, SMALL.id} and left[EDGE.id].why == "its raylet stopped answering"
        table[1] = {**table[1], "Alive": False, "DeathReasonMessage": "health check failed"}
        wait_until(lambda: OTHER.id in watch.snapshot()[1])
        assert watch.snapshot()[1][OTHER.id].why == "Ray marked it dead: health check failed"
        head.close()
        wait_until(lambda: watch.head_lost is not None)
        assert watch.head_lost.startswith("its head stopped answering at ")
        assert watch.head_lost.endswith(f"(127.0.0.1:{head_port}: connections refused)")
    finally:
        watch.stop()
        head.close()



def test_confirm_knocks_at_once_on_the_head_and_this_machines_raylet():
    """Before a call into Ray's object store, which ends the process without a word once this
    machine's node is gone: the answer now, not at the watch's next period."""
    head, raylet = listener(), listener()
    watch = Watch(lambda: [], head.getsockname(), local=raylet.getsockname(), head_period=0.05)  # threads not started
    try:
        assert watch.confirm() is None
        port = raylet.getsockname()[1]
        raylet.close()
        lost = watch.confirm()
        assert lost.startswith("this machine's Ray node stopped answering at ")
        assert lost.endswith(f"(127.0.0.1:{port}: connections refused)")
        assert watch.head_lost == lost and watch.confirm() == lost  # remembered: every later call says the same
        other = Watch(lambda: [], head.getsockname(), head_period=0.05)
        assert other.confirm() is None
        head_port = head.getsockname()[1]
        head.close()
        assert other.confirm().endswith(f"(127.0.0.1:{head_port}: connections refused)")
        assert other.head_lost.startswith("its head stopped answering at ")
    finally:
        head.close()
        raylet.close()

# ------------------------------------------------------------------------------------------ tokens

@pytest.fixture
def no_token(monkeypatch, tmp_path):
    for name in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    return tmp_path


def test_the_token_is_read_where_ray_reads_it_in_its_order(no_token, monkeypatch):
    assert ray_auth.token_source() is None
    default = no_token / ".ray" / "auth_token"
    default.parent.mkdir()
    default.write_text("t" * 32)
    assert ray_auth.token_source() == str(default)
    named = no_token / "named"
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(named))
    assert ray_auth.token_source() is None  # Ray reads only the file it names, which is not there
    named.write_text("n" * 32)
    assert ray_auth.token_source() == f"{named} (RAY_AUTH_TOKEN_PATH)"
    monkeypatch.setenv("RAY_AUTH_TOKEN", "e" * 32)
    assert ray_auth.token_source() == "RAY_AUTH_TOKEN"


def test_token_mode_without_a_token_is_said_before_ray_is_asked(no_token, monkeypatch):
    ray_auth.check_token_given("10.0.0.5:6379")  # no token mode: nothing to send
    monkeypatch.setenv("RAY_AUTH_MODE", "token")
    with pytest.raises(BackendUnavailable, match=r"RAY_AUTH_MODE=token, but no token was found \(neither "
                                                 r"RAY_AUTH_TOKEN nor ~/.ray/auth_token holds one\); give the"):
        ray_auth.check_token_given("10.0.0.5:6379")
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(no_token / "missing"))
    with pytest.raises(BackendUnavailable, match=r"RAY_AUTH_TOKEN_PATH names .*missing, which holds no token"):
        ray_auth.check_token_given("10.0.0.5:6379")


def test_a_refusal_says_what_was_sent_and_how_to_give_the_token(no_token, monkeypatch):
    line = ray_auth.refused("10.0.0.5:6379")
    assert line.startswith("the Ray cluster at 10.0.0.5:6379 requires a token (authentication failed: none was sent)")
    assert "RAY_AUTH_TOKEN" in line and "RAY_AUTH_MODE=token" in line and "`ray get-auth-token`" in line
    (no_token / ".ray").mkdir()
    (no_token / ".ray" / "auth_token").write_text("t" * 32)
    assert f"Ray sends the one in {no_token}/.ray/auth_token only with RAY_AUTH_MODE=token" in \
        ray_auth.refused("10.0.0.5:6379")
    monkeypatch.setenv("RAY_AUTH_MODE", "token")
    assert ray_auth.refused("10.0.0.5:6379").startswith(
        f"the Ray cluster at 10.0.0.5:6379 refused the token from {no_token}/.ray/auth_token: authentication failed")


def test_a_port_that_is_no_ray_head_is_refused_within_the_timeout(monkeypatch):
    pytest.importorskip("ray")
    server = listener()  # accepts TCP, never speaks Ray's protocol
    monkeypatch.setattr(ray_auth, "ASK_TIMEOUT_S", 1)
    try:
        address = "127.0.0.1:%d" % server.getsockname()[1]
        with pytest.raises(BackendUnavailable, match="something answers there, but not as a Ray head within 1 s"):
            ray_auth.check_authenticated(address, address)
    finally:
        server.close()

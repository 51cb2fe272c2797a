"""``kproto cluster ctl``: a running ``kproto cluster`` controlled from another process (its
nodes stopped, killed, started, isolated and healed), what clients see of it through
Metadata, and the control channel's refusals."""
from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import stat
import subprocess
import sys
import time
from typing import Any, Callable

import pytest

from kproto.broker.cluster import Cluster
from kproto.broker.cluster.control import CONTROL_FILE, ControlError, ControlServer, control
from kproto.cli.main import main
from kproto.client.connection import Connection
from kproto.codecs import request as request_codec
from kproto.schemas.api_keys import ApiKey

KPROTO = [sys.executable, "-m", "kproto"]


class Ran:
    def __init__(self, returncode: int, stdout: str, stderr: str) -> None:
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr


@pytest.fixture
def ctl(capsys: pytest.CaptureFixture[str]) -> Callable[..., Ran]:
    """``kproto cluster ctl DATA ARGS...`` through the command's entry point in this process
    (the cluster runs in its own); its exit code, stdout and stderr."""
    def run(data: Any, *args: str) -> Ran:
        capsys.readouterr()
        code = main(["cluster", "ctl", str(data), *args])
        out, err = capsys.readouterr()
        return Ran(code, out, err)
    return run


def partition_state(address: str, topic: str) -> tuple[int, list[int]]:
    """(leader, ISR) of ``topic``'s partition 0 in the Metadata answer of the broker at
    ``address``; (-1, []) while it knows no such partition."""
    async def ask() -> tuple[int, list[int]]:
        host, port = address.rsplit(":", 1)
        cls = request_codec(ApiKey.METADATA).cls
        async with await Connection.open(host, int(port), request_timeout=5) as conn:
            md = await conn.request(cls(topics=[cls.MetadataRequestTopic(name=topic)],
                                        allow_auto_topic_creation=False))
        parts = [p for t in md.topics if t.name == topic for p in t.partitions if p.partition_index == 0]
        return (parts[0].leader_id, sorted(parts[0].isr_nodes)) if parts else (-1, [])
    return asyncio.run(ask())


def create_topic(address: str, topic: str, replicas: int) -> None:
    async def create() -> None:
        host, port = address.rsplit(":", 1)
        cls = request_codec(ApiKey.CREATE_TOPICS).cls
        body = cls(topics=[cls.CreatableTopic(name=topic, num_partitions=1, replication_factor=replicas,
                                              assignments=[], configs=[])],
                   timeout_ms=15000, validate_only=False)
        async with await Connection.open(host, int(port), request_timeout=20) as conn:
            resp = await conn.request(body)
        assert resp.topics[0].error_code == 0, resp
    asyncio.run(create())


def until(what: str, fn: Callable[[], Any], ok: Callable[[Any], bool], timeout: float = 30.0) -> Any:
    """The first value of ``fn()`` that is ``ok``, polled for ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = fn()
        if ok(value):
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def test_nodes_of_a_running_cluster_stopped_started_isolated_and_healed(tmp_path, ctl) -> None:
    data = tmp_path / "cluster"
    proc = subprocess.Popen([*KPROTO, "cluster", "--brokers", "3", "--data", str(data),
                             "--session-timeout-ms", "3000", "--heartbeat-interval-ms", "500"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        lines = [proc.stdout.readline().strip() for _ in range(3)]
        assert all(line.startswith("listening on 127.0.0.1:") for line in lines), lines
        address = {n: line.split()[-1] for n, line in zip((1, 2, 3), lines)}
        assert stat.S_IMODE(os.stat(data / CONTROL_FILE).st_mode) == 0o600

        status = subprocess.run([*KPROTO, "cluster", "ctl", str(data), "status", "--json"],
                                capture_output=True, text=True, timeout=60)
        assert status.returncode == 0, status.stderr
        nodes = {n["node"]: n for n in json.loads(status.stdout)["nodes"]}
        assert sorted(nodes) == [1, 2, 3, 3001]
        assert all(n["running"] and n["cut_from"] == [] for n in nodes.values())
        assert {n: nodes[n]["address"] for n in (1, 2, 3)} == address and nodes[3001]["active"]
        text = ctl(data, "status").stdout.splitlines()
        assert len(text) == 5 and text[4].split()[:4] == ["3001", "controller", nodes[3001]["address"],
                                                          "running"]

        create_topic(address[1], "ctl", 3)
        leader, isr = until("a leader", lambda: partition_state(address[1], "ctl"), lambda s: s[0] > 0)
        assert isr == [1, 2, 3]

        # kill the leader: another broker leads, and says so through Metadata
        killed = ctl(data, "stop", str(leader), "--abrupt")
        assert (killed.returncode, killed.stdout) == (0, f"node {leader} killed (abrupt)\n")
        watcher = address[min(set(address) - {leader})]
        new_leader, _ = until("a new leader", lambda: partition_state(watcher, "ctl"),
                              lambda s: s[0] not in (-1, leader))
        assert not {n["node"]: n for n in json.loads(ctl(data, "status", "--json").stdout)["nodes"]}[
            leader]["running"]

        # start it again: it recovers its log and rejoins the ISR
        started = ctl(data, "start", str(leader))
        assert (started.returncode, started.stdout) == (0, f"node {leader} started\n")
        until("the restarted broker in the ISR", lambda: partition_state(watcher, "ctl"),
              lambda s: leader in s[1])

        # isolate the new leader: fenced by the controller, it loses the leadership; healed, it is back
        assert ctl(data, "isolate", str(new_leader)).returncode == 0
        watcher = address[min(set(address) - {new_leader})]
        until("leadership away from the isolated broker", lambda: partition_state(watcher, "ctl"),
              lambda s: s[0] not in (-1, new_leader))
        cut = {n["node"]: n for n in json.loads(ctl(data, "status", "--json").stdout)["nodes"]}
        assert cut[new_leader]["cut_from"] == sorted({1, 2, 3, 3001} - {new_leader})
        healed = ctl(data, "heal", str(new_leader))
        assert (healed.returncode, healed.stdout) == (0, f"node {new_leader}'s links healed\n")
        until("the healed broker in the ISR", lambda: partition_state(watcher, "ctl"),
              lambda s: new_leader in s[1])

        # bad use: one line on stderr, exit 2; a second cluster over the same directory is refused
        for args, message in [(("stop", "7"), "no node 7 (brokers 1, 2, 3, controllers 3001)"),
                              (("heal", "4"), "no node 4")]:
            bad = ctl(data, *args)
            assert bad.returncode == 2 and bad.stdout == "" and message in bad.stderr
            assert bad.stderr.count("\n") == 1 and bad.stderr.startswith("kproto cluster ctl: ")
        second = subprocess.run([*KPROTO, "cluster", "--data", str(data)], capture_output=True,
                                text=True, timeout=60)
        assert second.returncode == 2 and "a cluster already runs over" in second.stderr
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            out, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
    assert proc.returncode == 0, err[-3000:]
    assert not (data / CONTROL_FILE).exists()
    gone = subprocess.run([*KPROTO, "cluster", "ctl", str(data), "status"], capture_output=True,
                          text=True, timeout=60)
    assert gone.returncode == 2 and gone.stderr == (f"kproto cluster ctl: no running cluster in {data} "
                                                    f"(no {CONTROL_FILE})\n")


def test_a_directory_without_a_running_cluster(tmp_path) -> None:
    with pytest.raises(ControlError, match="no running cluster") as no_file:
        control(tmp_path, "status")
    assert no_file.value.usage
    # a control file left by a killed cluster: nothing listens on its port any more
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    (tmp_path / CONTROL_FILE).write_text(json.dumps({"host": "127.0.0.1", "port": port, "token": "x"}))
    with pytest.raises(ControlError, match=f"nothing listens on 127.0.0.1:{port}") as stale:
        control(tmp_path, "status")
    assert stale.value.usage
    (tmp_path / CONTROL_FILE).write_text("{not json")
    with pytest.raises(ControlError, match="cannot read"):
        control(tmp_path, "status")


def test_the_control_server_refuses_what_it_cannot_do(tmp_path) -> None:
    """In one process: a controller stopped and started through the channel; a wrong token,
    an unknown command, an unknown node and a line that is no command are refused, each
    with the usage flag; the file goes with the server."""
    async def main() -> None:
        async with Cluster(brokers=1, controllers=1, data_dir=tmp_path / "c",
                           broker_session_timeout_ms=3000, broker_heartbeat_interval_ms=500) as cluster:
            async with ControlServer(cluster) as server:
                def call(command: str, **args: Any) -> Any:
                    return asyncio.to_thread(control, tmp_path / "c", command, timeout=30, **args)

                assert (await call("stop", node=3001))["was_running"]
                assert not cluster.controllers[3001].running
                assert not (await call("stop", node=3001))["was_running"]
                assert not (await call("start", node=3001))["was_running"]
                assert cluster.controllers[3001].running
                await cluster.wait_for(lambda: cluster.active_controller() == 3001, 30, "a leader")
                assert (await call("partition", node=1, peer=3001)) == {"ok": True}
                assert cluster.network.is_cut(3001, 1)
                await call("heal")
                assert not cluster.network.is_cut(3001, 1)
                for command, args, message in [("reboot", {}, "unknown command 'reboot'"),
                                               ("stop", {"node": 2}, "no node 2"),
                                               ("stop", {"node": "1"}, "no node 1"),
                                               ("partition", {"node": 1}, "no node None")]:
                    with pytest.raises(ControlError, match=message) as refused:
                        await call(command, **args)
                    assert refused.value.usage

                info = json.loads((tmp_path / "c" / CONTROL_FILE).read_text())
                host, port = "127.0.0.1", info["port"]
                unhashable = json.dumps({"token": info["token"], "command": ["status"]}).encode() + b"\n"
                for line in (b'{"token": "wrong", "command": "status"}\n', b"[1, 2]\n", b"\xff\n",
                             unhashable):
                    reader, writer = await asyncio.open_connection(host, port)
                    writer.write(line)
                    answer = json.loads(await reader.readline())
                    writer.close()
                    assert answer["ok"] is False and answer["usage"] is True
                    assert answer["error"] in ("wrong token: not this cluster's control file",
                                               "not a control command (one JSON object a line)",
                                               "unknown command ['status'] (one of status, stop, "
                                               "start, isolate, partition, heal)")
                assert server.path == os.path.join(cluster.data_dir, CONTROL_FILE)
            assert not os.path.exists(server.path)

    asyncio.run(main())


def test_the_control_client_loads_no_broker() -> None:
    """A shell's ``ctl`` command imports the control module alone, not the broker it controls."""
    code = ("import sys, kproto.broker.cluster.control; "
            "print(sorted(m for m in sys.modules if m.startswith('kproto.broker')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "['kproto.broker', 'kproto.broker.cluster', 'kproto.broker.cluster.control']", out.stderr


def test_kproto_cluster_still_needs_its_data_directory(capsys: pytest.CaptureFixture[str]) -> None:
    """``--data`` is checked by the command (argparse cannot require it of ``cluster`` alone
    while ``cluster ctl DIR`` takes the directory as an argument)."""
    assert main(["cluster", "--brokers", "1"]) == 2
    assert capsys.readouterr().err == "kproto cluster: --data DIR is required\n"

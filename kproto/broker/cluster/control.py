"""Control of a running :class:`~kproto.broker.cluster.local.Cluster` from another process:
stop, start, isolate and heal its nodes, and ask their state.

The cluster's process serves a :class:`ControlServer` on a loopback port and writes where, with
a random token, to ``kproto-control.json`` in the cluster's data directory (readable by its
owner alone: whoever can read it may control the cluster). :func:`control` reads that file,
sends one command and returns the answer. A connection carries one command: a JSON object on
one line, answered by one.

    with ... a cluster running over data_dir ...:
        control(data_dir, "stop", node=2, abrupt=True)     # kill -9 of broker 2
        control(data_dir, "start", node=2)
        control(data_dir, "isolate", node=2); control(data_dir, "heal", node=2)
        control(data_dir, "status")["nodes"]
"""
from __future__ import annotations

import asyncio
import hmac
import json
import os
import secrets
import socket
from typing import TYPE_CHECKING, Any, Optional

if TYPE_CHECKING:  # the client side (control) runs in a shell command: it loads no broker
    from kproto.broker.cluster.local import Cluster

__all__ = ["COMMANDS", "CONTROL_FILE", "ControlError", "ControlServer", "control"]

CONTROL_FILE = "kproto-control.json"
#: command -> the node arguments it takes
COMMANDS = {"status": (), "stop": ("node",), "start": ("node",), "isolate": ("node",),
            "partition": ("node", "peer"), "heal": ("node?",)}
_MAX_LINE = 1 << 16  # a command or an answer is a few hundred bytes; a status a few kB


class ControlError(Exception):
    """A command that was not carried out. ``usage``: the command or its target was wrong (no
    running cluster in the directory, an unknown node or command), not the cluster."""

    def __init__(self, message: str, usage: bool = False) -> None:
        super().__init__(message)
        self.usage = usage


class ControlServer:
    """Serves commands for ``cluster`` on 127.0.0.1 and writes the control file into its data
    directory; an async context manager (the file is removed at close)."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.path = os.path.join(cluster.data_dir, CONTROL_FILE)
        self._token = secrets.token_hex(16)
        self._server: Optional[asyncio.AbstractServer] = None
        self._lock = asyncio.Lock()  # one command at a time: a node stops before it starts

    async def start(self) -> ControlServer:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0, limit=_MAX_LINE)
        port = self._server.sockets[0].getsockname()[1]
        _write_private(self.path, json.dumps({"host": "127.0.0.1", "port": port, "token": self._token,
                                              "pid": os.getpid()}).encode())
        return self

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
        try:
            with open(self.path, "rb") as f:
                ours = json.loads(f.read()).get("token") == self._token
        except (OSError, ValueError):
            ours = False
        if ours:  # a later cluster on the same directory may have written its own
            os.remove(self.path)

    async def __aenter__(self) -> ControlServer:
        return await self.start()

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            line = await asyncio.wait_for(reader.readline(), 10)
            try:
                request = json.loads(line)
                if not isinstance(request, dict):
                    raise ValueError
            except ValueError:
                answer: dict[str, Any] = _refusal("not a control command (one JSON object a line)")
            else:
                token = request.pop("token", None)
                if not isinstance(token, str) or not hmac.compare_digest(token, self._token):
                    answer = _refusal("wrong token: not this cluster's control file")
                else:
                    async with self._lock:
                        answer = await self.execute(request)
            writer.write(json.dumps(answer).encode() + b"\n")
            await writer.drain()
        except (OSError, ValueError, asyncio.TimeoutError):
            pass  # a client gone or one that sends no line: nothing to answer
        finally:
            writer.close()

    async def execute(self, request: dict[str, Any]) -> dict[str, Any]:
        """Carry out one command (``{"command": ..., "node": ..., ...}``): ``{"ok": True, ...}``
        or ``{"ok": False, "error": ..., "usage": ...}``."""
        command = request.get("command")
        if not isinstance(command, str) or command not in COMMANDS:
            return _refusal(f"unknown command {command!r} (one of {', '.join(COMMANDS)})")
        nodes = []
        for arg in COMMANDS[command]:
            value = request.get(arg.rstrip("?"))
            if value is None and arg.endswith("?"):
                continue
            if type(value) is not int or not self._known(value):
                return _refusal(f"no node {value} (brokers {_ids(self.cluster.broker_ids)}, "
                                f"controllers {_ids(self.cluster.controller_ids)})")
            nodes.append(value)
        c = self.cluster
        try:
            if command == "status":
                return {"ok": True, **self.status()}
            if command == "stop":
                was = self._running(nodes[0])
                await c.stop(nodes[0], abrupt=bool(request.get("abrupt")))
                return {"ok": True, "was_running": was}
            if command == "start":
                was = self._running(nodes[0])
                await c.start(nodes[0])
                return {"ok": True, "was_running": was}
            if command == "isolate":
                c.isolate(nodes[0])
            elif command == "partition":
                c.partition_network(nodes[0], nodes[1])
            else:
                c.heal(nodes[0] if nodes else None)
            return {"ok": True}
        except Exception as exc:  # the cluster's process keeps serving; the client is told
            return {"ok": False, "error": f"{command} failed: {type(exc).__name__}: {exc}",
                    "usage": False}

    def status(self) -> dict[str, Any]:
        """The nodes (id, role, address, running, the nodes it is cut from, active controller,
        a broker's fencing in the freshest metadata) and the cluster's bootstrap list."""
        c = self.cluster
        everyone = c.broker_ids + c.controller_ids
        try:
            image_brokers = c.image().brokers
        except RuntimeError:  # no node running
            image_brokers = {}
        nodes = []
        for n in everyone:
            node = c.brokers.get(n) or c.controllers[n]
            entry: dict[str, Any] = {
                "node": n, "role": "broker" if n in c.brokers else "controller",
                "address": node.bootstrap, "running": node.running,
                "cut_from": [m for m in everyone if m != n and c.network.is_cut(n, m)]}
            if n in c.brokers:
                registered = image_brokers.get(n)
                entry["fenced"] = None if registered is None else bool(registered.fenced)
            else:
                entry["active"] = c.controllers[n].is_leader
            nodes.append(entry)
        return {"cluster_id": c.cluster_id, "bootstrap": c.bootstrap, "nodes": nodes}

    def _known(self, node: int) -> bool:
        return node in self.cluster.brokers or node in self.cluster.controllers

    def _running(self, node: int) -> bool:
        c = self.cluster
        return (c.brokers.get(node) or c.controllers[node]).running


def control(data_dir: str | os.PathLike[str], command: str, *, timeout: float = 60.0,
            **args: Any) -> dict[str, Any]:
    """Send ``command`` (one of :data:`COMMANDS`, with ``node=``, ``peer=``, ``abrupt=``) to the
    cluster running over ``data_dir``; its answer. Raises :class:`ControlError`."""
    where = os.fspath(data_dir)
    path = os.path.join(where, CONTROL_FILE)
    try:
        with open(path, "rb") as f:
            info = json.loads(f.read())
        host, port, token = str(info["host"]), int(info["port"]), str(info["token"])
    except FileNotFoundError:
        raise ControlError(f"no running cluster in {where} (no {CONTROL_FILE})", usage=True) from None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ControlError(f"cannot read {path}: {exc}", usage=True) from None
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.sendall(json.dumps({"token": token, "command": command, **args}).encode() + b"\n")
            answer = _read_line(sock)
    except ConnectionRefusedError:
        raise ControlError(f"no running cluster in {where} (nothing listens on {host}:{port}; "
                           f"{CONTROL_FILE} is left from a cluster that was killed)", usage=True) from None
    except socket.timeout:
        raise ControlError(f"no answer from the cluster in {where} within {timeout:g} s") from None
    except OSError as exc:
        raise ControlError(f"cannot reach the cluster in {where}: {exc}") from None
    try:
        reply = json.loads(answer)
        if not isinstance(reply, dict) or "ok" not in reply:
            raise ValueError
    except ValueError:
        raise ControlError(f"{host}:{port} does not answer as a kproto cluster", usage=True) from None
    if not reply["ok"]:
        raise ControlError(str(reply.get("error")), usage=bool(reply.get("usage")))
    return reply


def _read_line(sock: socket.socket) -> bytes:
    data = b""
    while not data.endswith(b"\n") and len(data) <= _MAX_LINE:
        chunk = sock.recv(4096)
        if not chunk:
            break
        data += chunk
    return data


def _write_private(path: str, data: bytes) -> None:
    """Write ``path`` whole, readable and writable by its owner alone from its creation."""
    tmp = path + ".tmp"
    if os.path.exists(tmp):
        os.remove(tmp)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def _refusal(message: str) -> dict[str, Any]:
    return {"ok": False, "error": message, "usage": True}


def _ids(ids: list[int]) -> str:
    return ", ".join(map(str, ids))

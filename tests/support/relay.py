"""A TCP relay between an operator process and the API server that can cut the link (a partition)."""

from __future__ import annotations

import contextlib
import selectors
import socket
import threading
from pathlib import Path

import yaml

from localcluster import Cluster


class Partition:
    """A TCP relay between the operator and the API server that can cut the link: while cut, it
    refuses every connection and drops the open ones, and counts the connections the operator tries."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.cut = threading.Event()
        self.attempts_while_cut = 0
        # On the API server's own address, so its certificate still names the host the operator dials.
        self._server = socket.create_server((upstream[0], 0))
        self.port = self._server.getsockname()[1]
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()  # over cut, _open and the counter: a connection is in or refused
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                downstream, _ = self._server.accept()
            except OSError:
                return
            with self._lock:
                if self.cut.is_set():
                    self.attempts_while_cut += 1
                    downstream.close()
                    continue
            try:
                upstream = socket.create_connection(self.upstream)
            except OSError:
                downstream.close()
                continue
            with self._lock:
                if self.cut.is_set():  # cut while it connected: dropped like the rest
                    downstream.close()
                    upstream.close()
                    continue
                self._open |= {downstream, upstream}
            threading.Thread(target=self._relay, args=(downstream, upstream), daemon=True).start()

    def _relay(self, a: socket.socket, b: socket.socket) -> None:
        """Both directions of one connection, in one thread that alone closes its sockets, after its
        last read: a descriptor closed under a pending read elsewhere could be reused by the next
        connection, and that read would then steal the next connection's bytes (a watch that hangs)."""
        peer = {a: b, b: a}
        with selectors.DefaultSelector() as selector, contextlib.suppress(OSError):
            for end in (a, b):
                selector.register(end, selectors.EVENT_READ, data=end)
            flowing = True
            while flowing:
                for ready, _ in selector.select():
                    source: socket.socket = ready.data
                    chunk = source.recv(65536)
                    if not chunk:  # one side closed (or the link was cut): the connection ends
                        flowing = False
                        break
                    peer[source].sendall(chunk)
        with self._lock:
            self._open -= {a, b}
        a.close()
        b.close()

    def sever(self) -> None:
        with self._lock:
            self.cut.set()
            for end in self._open:  # each relay thread sees its end and closes its sockets
                with contextlib.suppress(OSError):
                    end.shutdown(socket.SHUT_RDWR)

    def heal(self) -> None:
        with self._lock:
            self.cut.clear()

    def close(self) -> None:
        self.sever()
        self._server.close()


def relay_kubeconfig(relay: Partition, cluster: Cluster, path: Path) -> Path:
    """The cluster's admin kubeconfig, dialling the relay instead of the apiserver."""
    config = yaml.safe_load(cluster.kubeconfig.read_text())
    config["clusters"][0]["cluster"]["server"] = f"https://{relay.upstream[0]}:{relay.port}"
    path.write_text(yaml.safe_dump(config))
    return path


def relay_to(cluster: Cluster) -> Partition:
    """A relay in front of the cluster's API server."""
    server = yaml.safe_load(cluster.kubeconfig.read_text())["clusters"][0]["cluster"]["server"]
    host, port = server.removeprefix("https://").rsplit(":", 1)
    return Partition((host, int(port)))

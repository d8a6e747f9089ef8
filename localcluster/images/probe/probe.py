"""Network probe run inside test pods.

serve PORT             answer every TCP connection with this pod's hostname
ask HOST PORT TIMEOUT  resolve HOST (retrying until TIMEOUT) and print what HOST's server answers
pair HOST PORT TIMEOUT serve PORT and ask HOST; exit once both the question and the answer went through
https URL TIMEOUT      GET URL with the pod's service-account token; print the HTTP status
hold HOST PORT TIMEOUT ask HOST as `ask` does over a connection HOST's `hold-serve` keeps open, then print
                       when the connection ends (its peer gone)
hold-serve PORT        answer as `serve` does, and keep each connection open
"""

import json
import socket
import ssl
import sys
import threading
import time
import urllib.request


def serve(port: int, answered: threading.Event | None = None) -> None:
    with socket.create_server(("", port)) as server:
        while True:
            conn, _ = server.accept()
            with conn:
                conn.sendall(socket.gethostname().encode())
            if answered is not None:
                answered.set()


def hold_serve(port: int) -> None:
    held = []
    with socket.create_server(("", port)) as server:
        while True:
            conn, _ = server.accept()
            conn.sendall(socket.gethostname().encode())
            held.append(conn)


def hold(host: str, port: int, timeout: float) -> None:
    addr, conn = connect(host, port, timeout)
    with conn:
        print(json.dumps({"host": host, "addr": addr, "answer": conn.recv(256).decode()}), flush=True)
        conn.settimeout(None)
        left = conn.recv(256)
        print(json.dumps({"closed": True, "after": left.decode()}), flush=True)


def pair(host: str, port: int, timeout: float) -> None:
    answered = threading.Event()
    threading.Thread(target=serve, args=(port, answered), daemon=True).start()
    ask(host, port, timeout)
    if not answered.wait(timeout):
        sys.exit(f"{host} never asked us within {timeout}s")


def ask(host: str, port: int, timeout: float) -> None:
    addr, conn = connect(host, port, timeout)
    with conn:
        print(json.dumps({"host": host, "addr": addr, "answer": conn.recv(256).decode()}), flush=True)


def connect(host: str, port: int, timeout: float) -> tuple[str, socket.socket]:
    """HOST's address and a connection to it, retried (the name resolves once its pod has an IP)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            addr = socket.gethostbyname(host)
            return addr, socket.create_connection((addr, port), timeout=5)
        except OSError as err:
            if time.monotonic() > deadline:
                sys.exit(f"{host}:{port} not reachable in {timeout}s: {err}")
            time.sleep(0.5)


def https(url: str, timeout: float) -> None:
    sa = "/var/run/secrets/kubernetes.io/serviceaccount"
    with open(f"{sa}/token") as f:
        token = f.read()
    ctx = ssl.create_default_context(cafile=f"{sa}/ca.crt")
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(req, context=ctx, timeout=timeout) as resp:
        print(json.dumps({"url": url, "status": resp.status}), flush=True)


if __name__ == "__main__":
    cmd, *args = sys.argv[1:]
    if cmd == "serve":
        serve(int(args[0]))
    elif cmd == "ask":
        ask(args[0], int(args[1]), float(args[2]))
    elif cmd == "pair":
        pair(args[0], int(args[1]), float(args[2]))
    elif cmd == "hold":
        hold(args[0], int(args[1]), float(args[2]))
    elif cmd == "hold-serve":
        hold_serve(int(args[0]))
    elif cmd == "https":
        https(args[0], float(args[1]))
    else:
        sys.exit(f"unknown command {cmd}")

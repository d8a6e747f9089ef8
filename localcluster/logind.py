"""A stand-in for systemd-logind, on a D-Bus bus of its own, for a real node's kubelet.

The kubelet's graceful node shutdown (what GKE does to a Spot VM's pods in its 30 s notice) hears of a
shutdown from logind: it takes a "delay" inhibitor lock, listens for PrepareForShutdown(true), then stops
the node's pods within shutdownGracePeriod and marks them Failed with DisruptionTarget
TerminationByKubelet. These machines run no systemd. This process answers what the kubelet asks of logind
(InhibitDelayMaxUSec, Inhibit) and sends PrepareForShutdown(true) when it receives SIGUSR1: the node's
shutdown, as a VM's ACPI soft-off would start it.

    python -m localcluster.logind BUS_ADDRESS INHIBIT_DELAY_SECONDS
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys

from dbus_next import PropertyAccess
from dbus_next.aio import MessageBus
from dbus_next.service import ServiceInterface, dbus_property, method
from dbus_next.service import signal as dbus_signal

NAME = "org.freedesktop.login1"
PATH = "/org/freedesktop/login1"


class Manager(ServiceInterface):
    def __init__(self, inhibit_delay_s: float) -> None:
        super().__init__("org.freedesktop.login1.Manager")
        self.inhibit_delay_us = int(inhibit_delay_s * 1_000_000)
        self.locks: list[int] = []

    @dbus_property(access=PropertyAccess.READ)
    def InhibitDelayMaxUSec(self) -> t:  # type: ignore[name-defined]  # noqa: F821
        return self.inhibit_delay_us

    @method()
    def Inhibit(self, what: s, who: s, why: s, mode: s) -> h:  # type: ignore[name-defined]  # noqa: F821
        """A lock is a pipe's write end: the holder closes it to release it (as logind's is)."""
        read_end, write_end = os.pipe()
        self.locks.append(read_end)
        print(f"[logind] {who} holds a {mode} lock on {what}: {why}", flush=True)
        return write_end

    @dbus_signal()
    def PrepareForShutdown(self, active: bool) -> b:  # type: ignore[name-defined]  # noqa: F821
        return active


async def serve(address: str, inhibit_delay_s: float) -> None:
    bus = await MessageBus(bus_address=address, negotiate_unix_fd=True).connect()
    manager = Manager(inhibit_delay_s)
    bus.export(PATH, manager)
    await bus.request_name(NAME)
    print(f"[logind] serving {NAME} on {address}", flush=True)

    def shut_down() -> None:
        print("[logind] PrepareForShutdown(true)", flush=True)
        manager.PrepareForShutdown(True)

    asyncio.get_running_loop().add_signal_handler(signal.SIGUSR1, shut_down)
    await bus.wait_for_disconnect()


if __name__ == "__main__":
    asyncio.run(serve(sys.argv[1], float(sys.argv[2])))

"""What a framework plugs into the renderer: its rendezvous port and the environment of one member."""

from __future__ import annotations

from typing import Protocol

from dtjob.api import DistributedTrainingJobSpec
from dtjob.core.gang import Gang, Member

Env = list[tuple[str, str]]


class FrameworkWiring(Protocol):
    port_name: str
    """Name of the container and Service port (an IANA service name: at most 15 characters)."""

    def port(self, spec: DistributedTrainingJobSpec) -> int: ...

    def env(self, gang: Gang, member: Member) -> Env:
        """The rendezvous variables of one member, in a fixed order."""
        ...

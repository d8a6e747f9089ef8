"""End a trainer process whose work is done without the interpreter's teardown."""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from typing import NoReturn


def end_process(code: int) -> NoReturn:
    """Flush what the process printed and logged, then exit with `code` at once.

    Call it last, once the results are saved and the process group destroyed: nothing is left for the
    interpreter's teardown to do but to finalise torch's native threads (the autograd engine's, gloo's)
    while it dismantles itself, and that can crash the process (SIGSEGV or SIGABRT, pytorch#190489 and
    #179291). A rank that trained and saved would then end as a failed member and restart its gang.
    atexit handlers do not run."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # closed, or not a real stream
            stream.flush()
    os._exit(code)

"""The parent's side of the engine process: start it, send it requests, shut it down.

**The engine runs in a private subprocess** (`llm_collapse.backends.vllm.worker`), talked to over a socketpair.
vLLM starts its own worker processes with ``spawn``; run in-process, every script that uses it would need an
``if __name__ == "__main__":`` guard, and the process sometimes aborts at exit (rc 134) after all results are
out. In a subprocess neither reaches the caller: scripts, notebooks and pytest work unguarded, and its memory is
returned when the backend is closed (`VLLMBackend.close`, garbage collection, or interpreter exit). vLLM's log
goes to a file named in errors (``verbose=True`` streams it to stderr instead); a failed start's log is kept.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import time
import weakref
from pathlib import Path

from llm_collapse.backends.vllm import worker


class Engine:
    """A process holding one vLLM ``LLM`` at a time; requests go over a socketpair as pickled tuples.

    `start` builds the ``LLM`` (shutting down the previous one first), so a restart reuses the process and
    its imports."""

    def __init__(self, env: dict, *, verbose: bool) -> None:
        from multiprocessing.connection import Connection

        self.key = self.task = self.max_model_len = None
        self.info: dict = {}
        ours, theirs = socket.socketpair()
        env = dict(env)
        env[worker.FD_ENV] = str(theirs.fileno())
        if verbose:
            self.log_path, log = None, None
        else:
            handle, name = tempfile.mkstemp(prefix="llm_collapse_vllm_", suffix=".log")
            self.log_path, log = Path(name), handle
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-c", f"from {worker.__name__} import serve; serve()"],
                env=env,
                pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT if log is not None else None,
                start_new_session=True,  # its own process group: vLLM's helpers can be ended with it
            )
        finally:
            theirs.close()
            if log is not None:
                os.close(log)
        self.conn = Connection(ours.detach())
        self._finalizer = weakref.finalize(self, _shutdown, self.process, self.conn, self.log_path)

    def start(self, args: dict, *, key, task: str, max_model_len: int, timeout: float) -> None:
        self.key = None
        self.info = self._call(("start", args), timeout=timeout, what="start")
        self.key, self.task, self.max_model_len = key, task, max_model_len

    def alive(self) -> bool:
        return self.process.poll() is None

    def request(self, kind: str, **payload):
        return self._call((kind, payload), timeout=None, what=kind)

    def close(self) -> None:
        self._finalizer()

    def _call(self, message, *, timeout: float | None, what: str):
        started = time.monotonic()
        try:
            self.conn.send(message)
            while not self.conn.poll(0.5):
                if self.process.poll() is not None:
                    raise EOFError
                if timeout is not None and time.monotonic() - started > timeout:
                    raise TimeoutError(
                        f"the vLLM engine did not {what} within {timeout:.0f} s{self._log_hint()}"
                    )
            status, result = self.conn.recv()
        except (EOFError, BrokenPipeError, ConnectionResetError):
            code = self.process.wait(timeout=30) if self.process.poll() is None else self.process.returncode
            self._keep_log()
            raise RuntimeError(
                f"the vLLM engine process exited (code {code}) during {what}{self._log_hint(tail=True)}"
            ) from None
        if status != "ok":
            if what == "start":
                self.log_path = None if self.log_path is None else self._keep_log()
            raise RuntimeError(f"vLLM engine {what} failed: {result}{self._log_hint(tail=what == 'start')}")
        return result

    def _keep_log(self) -> Path:
        """A failed start's log must outlive the process (a clean exit would delete it)."""
        self._finalizer.detach()
        self._finalizer = weakref.finalize(self, _shutdown, self.process, self.conn, None)
        return self.log_path

    def _log_hint(self, *, tail: bool = False) -> str:
        if self.log_path is None:
            return ""
        hint = f" (vLLM log: {self.log_path})"
        if tail and self.log_path.is_file():
            lines = [ln for ln in self.log_path.read_text(errors="replace").splitlines() if ln.strip()]
            hint += "\n" + "\n".join(lines[-20:])
        return hint


def _shutdown(process: subprocess.Popen, conn, log_path: Path | None) -> None:
    """Asks the engine process to shut down; ends its process group if it does not within 60 s."""
    with contextlib.suppress(Exception):
        conn.send(("close", {}))
    try:
        process.wait(timeout=60)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, 15)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, 9)
            process.wait(timeout=10)
    with contextlib.suppress(Exception):
        conn.close()
    if log_path is not None and process.returncode == 0:
        with contextlib.suppress(OSError):
            log_path.unlink()

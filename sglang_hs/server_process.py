"""A `python -m sglang_hs.launch_server` (or stock `sglang.launch_server`) child process: start it,
wait until it serves, stop it."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def call(url: str, payload: dict | None = None, timeout: float = 300):
    """(status, body) of a GET (payload None) or JSON POST; a success body parsed as JSON when it is JSON,
    an error body as text."""
    data = None if payload is None else json.dumps(payload).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            body = r.read().decode()
            status = r.status
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    try:
        return status, json.loads(body)
    except json.JSONDecodeError:  # e.g. /flush_cache answers in plain text
        return status, body


def flush_cache(base: str, timeout_s: float = 120.0) -> None:
    """Empty the radix cache of the server at ``base``. SGLang answers 400 while a just-answered request
    is still being released, so retry; a server without /flush_cache (404/405) has nothing to flush.
    RuntimeError if it is still refused after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            status, body = call(base + "/flush_cache", {}, 60)
        except (urllib.error.URLError, ConnectionError, TimeoutError) as e:
            status, body = None, getattr(e, "reason", e)
        if status in (200, 404, 405):
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"could not flush the prefix cache of {base} within {timeout_s:.0f}s: "
                               f"HTTP {status}: {str(body)[:300]}")
        time.sleep(0.5)


class ServerProcess:
    """Context manager around the launcher; `base` is its URL once entered."""

    def __init__(self, args: list[str], env: dict, log_path: str, start_timeout_s: float = 600,
                 module: str = "sglang_hs.launch_server"):
        self.port = free_port()
        self.cmd = [sys.executable, "-m", module, *args, "--port", str(self.port)]
        self.env, self.log_path, self.start_timeout_s = env, log_path, start_timeout_s
        self.base = f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> "ServerProcess":
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(self.cmd, env=self.env, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + self.start_timeout_s
        try:
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"server exited with {self.proc.returncode}: {self._error_line()} (log: {self.log_path})")
                try:
                    if call(self.base + "/health", timeout=5)[0] == 200:
                        return self
                except (urllib.error.URLError, ConnectionError, TimeoutError):
                    pass
                time.sleep(1)
            raise RuntimeError(f"server did not come up in {self.start_timeout_s:.0f} s (log: {self.log_path})")
        except BaseException:
            self.__exit__(None, None, None)
            raise

    def _error_line(self) -> str:
        lines = open(self.log_path, errors="replace").read().strip().splitlines()
        errors = [ln for ln in lines if "Error" in ln or "error:" in ln] or lines[-1:] or ["(no output)"]
        return errors[-1].strip()[:400]

    def __exit__(self, *exc) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()

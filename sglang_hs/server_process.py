"""A `python -m sglang_hs.launch_server` child process: start it, wait until it serves, stop it."""

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
    """(status, body) of a GET (payload None) or JSON POST; body parsed as JSON when it is JSON."""
    data = None if payload is None else json.dumps(payload).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            body = r.read().decode()
            status = r.status
    except urllib.error.HTTPError as e:
        body, status = e.read().decode(), e.code
    try:
        return status, json.loads(body)
    except json.JSONDecodeError:  # e.g. /flush_cache answers in plain text
        return status, body


class ServerProcess:
    """Context manager around the launcher; `base` is its URL once entered."""

    def __init__(self, args: list[str], env: dict, log_path: str, start_timeout_s: float = 600):
        self.port = free_port()
        self.cmd = [sys.executable, "-m", "sglang_hs.launch_server", *args, "--port", str(self.port)]
        self.env, self.log_path, self.start_timeout_s = env, log_path, start_timeout_s
        self.base = f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> "ServerProcess":
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(self.cmd, env=self.env, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + self.start_timeout_s
        try:
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise RuntimeError("server exited: " + open(self.log_path).read()[-3000:])
                try:
                    if call(self.base + "/health", timeout=5)[0] == 200:
                        return self
                except (urllib.error.URLError, ConnectionError, TimeoutError):
                    pass
                time.sleep(1)
            raise RuntimeError(f"server did not come up in {self.start_timeout_s:.0f} s")
        except BaseException:
            self.__exit__(None, None, None)
            raise

    def __exit__(self, *exc) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()

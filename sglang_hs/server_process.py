"""A `python -m sglang_hs.launch_server` (or stock `sglang.launch_server`) child process: start it,
wait until it serves, stop it."""

from __future__ import annotations

import json
import random
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request


# a start that lost its port: uvicorn's line (stock SGLang), our launcher's refusal
PORT_TAKEN = ("error while attempting to bind on address", "sglang_hs: error: cannot listen on")


def ephemeral_range() -> tuple[int, int]:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low, high = map(int, f.read().split())
        return low, high
    except (OSError, ValueError):
        return 32768, 60999  # Linux's default


def bind_error(host: str, port: int) -> OSError | None:
    """Why ``host:port`` cannot be listened on now (bound as uvicorn binds it: a closed socket's port is free), or
    None."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as e:
            return e
    return None


def free_port() -> int:
    """A port nothing listens on, outside the kernel's ephemeral range. SGLang's own ports (torch distributed's
    store, gloo's listeners) come from bind(0), which draws from that range: a port taken from it and released
    can be handed to the server's scheduler before uvicorn binds it; uvicorn then fails to bind while SGLang's
    start-up check polls the scheduler's socket for minutes before killing the server."""
    low, high = ephemeral_range()
    candidates = [*range(max(1024, low - 16384), low), *range(high + 1, 65536)]
    for port in random.sample(candidates, min(64, len(candidates))):
        if bind_error("127.0.0.1", port) is None:
            return port
    with socket.socket() as s:  # no room outside the range: the kernel's choice
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


class PortTaken(RuntimeError):
    pass


class ServerProcess:
    """Context manager around the launcher; `base` is its URL once entered. A start whose port another process
    took meanwhile is retried on a new port."""

    START_ATTEMPTS = 3

    def __init__(self, args: list[str], env: dict, log_path: str, start_timeout_s: float = 600,
                 module: str = "sglang_hs.launch_server"):
        self.args, self.module = args, module
        self.env, self.log_path, self.start_timeout_s = env, log_path, start_timeout_s

    def __enter__(self) -> "ServerProcess":
        for attempt in range(1, self.START_ATTEMPTS + 1):
            try:
                return self._start()
            except PortTaken:
                if attempt == self.START_ATTEMPTS:
                    raise

    def _start(self) -> "ServerProcess":
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen([sys.executable, "-m", self.module, *self.args, "--port", str(self.port)],
                                     env=self.env, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + self.start_timeout_s
        try:
            while time.monotonic() < deadline:
                exited = self.proc.poll() is not None
                if any(line in self._log_text() for line in PORT_TAKEN):
                    raise PortTaken(f"port {self.port} was taken before the server bound it (log: {self.log_path})")
                if exited:
                    raise RuntimeError(f"server exited with {self.proc.returncode}: {self._error_line()} (log: {self.log_path})")
                try:
                    if call(self.base + "/health", timeout=5)[0] == 200:
                        return self
                except (urllib.error.URLError, ConnectionError, TimeoutError):
                    pass
                time.sleep(1)
            raise RuntimeError(f"server did not come up in {self.start_timeout_s:.0f} s (log: {self.log_path})")
        except BaseException as e:
            if isinstance(e, PortTaken):
                self.proc.kill()  # it served nothing; a graceful stop would wait for SGLang's start-up check
            self.__exit__(None, None, None)
            raise

    def _log_text(self) -> str:
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def _error_line(self) -> str:
        lines = self._log_text().strip().splitlines()
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

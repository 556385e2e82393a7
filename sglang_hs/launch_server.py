"""``python -m sglang_hs.launch_server --model-path PREPARED [sglang args] [--hs-... flags]``.

Starts a stock SGLang 0.5.17 HTTP server with the hs plugin active (attention backend, KV pool and
radix cache "hs", page size 64) plus GET /hs/stats. The --hs-* flags travel to SGLang's worker
processes in the SGLANG_HS_ARGS environment variable. Fails with one line if the plugin did not
register through its entry point or the model/flags are unusable.
"""

from __future__ import annotations

import json
import os
import sys

from .server_process import bind_error
from .settings import ENV_ARGS, FLAGS, HSConfigError, split_hs_flags

DEFAULTS = {"--attention-backend": "hs"}  # page size 64 and radix cache "hs" follow (plugin defaults)


def with_defaults(argv: list[str]) -> list[str]:
    present = {a.split("=", 1)[0] for a in argv}
    out = list(argv)
    for flag, value in DEFAULTS.items():
        if flag not in present:
            out += [flag, value]
    return out


def load_and_verify_plugin() -> None:
    """Load SGLang plugins the way SGLang does; refuse to go on if 'hs' did not register."""
    from sglang.srt.layers.attention.attention_registry import ATTENTION_BACKENDS
    from sglang.srt.mem_cache.registry import get_radix_cache_factory
    from sglang.srt.plugins import load_plugins

    from . import plugin

    load_plugins()
    if not (plugin.is_registered() and "hs" in ATTENTION_BACKENDS and get_radix_cache_factory("hs")):
        raise HSConfigError("the sglang_hs plugin did not register: install this package (pip install -e '.[serve]') so the "
                            "'sglang.srt.plugins' entry point 'hs = sglang_hs.plugin:register' exists, and do not exclude it with SGLANG_PLUGINS")


def add_stats_route() -> None:
    from sglang.srt.entrypoints.http_server import app

    from .stats import read_published

    if not any(getattr(r, "path", None) == "/hs/stats" for r in app.routes):
        app.add_api_route("/hs/stats", lambda: read_published(), methods=["GET"])


def check_port_free(host: str, port: int) -> None:
    """uvicorn binds the HTTP port only once the model is loaded; if it is taken then, SGLang's start-up check polls
    whatever listens there for minutes before killing the server. Refuse at once instead."""
    if (e := bind_error(host, port)) is not None:
        raise HSConfigError(f"cannot listen on {host}:{port}: {e.strerror or e}")


def prepare(argv: list[str]):
    """Parse and check everything; return SGLang ServerArgs (raises HSConfigError)."""
    hs_args, rest = split_hs_flags(argv)
    os.environ[ENV_ARGS] = json.dumps(hs_args)
    load_and_verify_plugin()
    from sglang.srt.server_args import prepare_server_args

    server_args = prepare_server_args(with_defaults(rest))
    check_port_free(server_args.host, server_args.port)
    return server_args


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if "-h" in argv or "--help" in argv:
        print(__doc__.strip() + "\n\nhs flags:")
        for flag, (_, typ, help_) in FLAGS.items():
            print(f"  {flag} {typ.__name__.upper()}: {help_}")
        print("\nAll other flags are SGLang's (python -m sglang.launch_server --help).")
        return 0
    try:
        server_args = prepare(argv)
    except (HSConfigError, ValueError) as e:  # SGLang's own argument checks raise ValueError
        print(f"sglang_hs: error: {str(e).splitlines()[0] if str(e) else type(e).__name__}", file=sys.stderr)
        return 2
    add_stats_route()
    from sglang.launch_server import run_server
    from sglang.srt.utils import kill_process_tree

    try:
        run_server(server_args)
    finally:
        kill_process_tree(os.getpid(), include_parent=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())

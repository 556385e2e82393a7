"""The server child process: its port cannot be one the server's own processes are handed by the kernel, and a start
whose port another process took is retried on a new port (CI once lost a run to that: uvicorn could not bind, and
SGLang's start-up check polled the other listener for minutes before killing the server)."""

import socket

import pytest

from sglang_hs import server_process


def test_free_port_is_free_and_outside_the_ephemeral_range():
    low, high = server_process.ephemeral_range()
    for _ in range(20):
        port = server_process.free_port()
        assert not low <= port <= high and port >= 1024
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    pytest.importorskip("sglang")
    pytest.importorskip("hs_prep")
    from sglang_hs.testing import prepare, tiny_model

    root = tmp_path_factory.mktemp("server_process")
    return prepare(tiny_model(str(root / "tiny")), str(root / "prepared"), 0.5)


@pytest.mark.slow
@pytest.mark.parametrize("module, extra", [("sglang_hs.launch_server", []),  # refuses the taken port at once
                                           ("sglang.launch_server", ["--attention-backend", "torch_native"])])  # uvicorn's bind fails
def test_a_start_on_a_taken_port_is_retried_on_another(tmp_path, monkeypatch, prepared, module, extra):
    from sglang_hs.testing import cpu_env

    taken = socket.socket()  # accepts connections and never answers, like a torch distributed store
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    ports = [taken.getsockname()[1]]
    real_free_port = server_process.free_port
    monkeypatch.setattr(server_process, "free_port", lambda: ports.pop() if ports else real_free_port())
    args = ["--model-path", prepared, "--device", "cpu", "--dtype", "float32", "--max-total-tokens", "1024",
            "--context-length", "512", "--disable-cuda-graph", "--sampling-backend", "pytorch", "--grammar-backend", "none",
            *extra]
    with taken, server_process.ServerProcess(args, cpu_env(), str(tmp_path / "server.log"), start_timeout_s=300,
                                             module=module) as proc:
        assert proc.port != taken.getsockname()[1]
        status, body = server_process.call(proc.base + "/generate", {"input_ids": [1, 2, 3],
                                                                     "sampling_params": {"max_new_tokens": 2}})
        assert status == 200 and len(body["output_ids"]) == 2, body

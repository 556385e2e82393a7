"""Hub ids resolve through huggingface_hub's real cache, offline (the hub is unreachable from CI)."""
import json
import os
import shutil
import subprocess
import sys

from tiny_checkpoints import make_checkpoint

COMMIT = "0123456789abcdef0123456789abcdef01234567"


def hf_cache_with(tmp_path, repo_id):
    """Lay a checkpoint out the way huggingface_hub caches a downloaded snapshot."""
    hf_home = tmp_path / "hf"
    repo_dir = hf_home / "hub" / ("models--" + repo_id.replace("/", "--"))
    make_checkpoint(str(repo_dir / "snapshots" / COMMIT), "qwen3")
    (repo_dir / "refs").mkdir(parents=True)
    (repo_dir / "refs" / "main").write_text(COMMIT)
    return hf_home


def hs_prep(*args, hf_home):
    env = dict(os.environ, HF_HOME=str(hf_home), HF_HUB_OFFLINE="1")
    exe = shutil.which("hs-prep", path=os.path.dirname(sys.executable))
    return subprocess.run([exe, *map(str, args)], env=env, capture_output=True, text=True, timeout=300)


def test_hub_id_from_cache_offline(tmp_path):
    hf_home = hf_cache_with(tmp_path, "acme/tiny-qwen3")
    out = tmp_path / "out"
    result = hs_prep("convert", "acme/tiny-qwen3", "-o", out, "--json", hf_home=hf_home)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["model_type"] == "qwen3"
    section = json.loads((out / "config.json").read_text())["hierasparse"]
    assert section["source"] == {"kind": "hub", "name": "acme/tiny-qwen3"}


def test_offline_with_nothing_cached(tmp_path):
    result = hs_prep("convert", "acme/absent", "-o", tmp_path / "out", hf_home=tmp_path / "hf")
    assert result.returncode != 0
    assert result.stderr.strip().splitlines() == [
        "Error: acme/absent is not in the local Hugging Face cache and the hub cannot be reached"
        " (offline, or HF_HUB_OFFLINE=1)"]
    assert not (tmp_path / "out").exists()

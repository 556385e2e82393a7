"""A Hugging Face checkpoint directory: its config, its safetensors shards and its attention tensors."""
import glob
import json
import os
from dataclasses import dataclass, field

import numpy as np

from hs_prep.architecture import ATTENTION_TENSOR, AttentionGeometry, read_geometry
from hs_prep.errors import PrepError
from hs_prep.safetensors_file import FLOAT_DTYPES, SafetensorsFile, open_safetensors

INDEX_NAME = "model.safetensors.index.json"


@dataclass
class Checkpoint:
    path: str
    config: dict
    geometry: AttentionGeometry
    shards: dict[str, SafetensorsFile]  # file name -> header
    # layer -> "q_proj.weight" etc. -> shard file name
    attention: dict[int, dict[str, str]] = field(default_factory=dict)
    attention_names: dict[int, dict[str, str]] = field(default_factory=dict)

    def read_attention(self, layer: int, key: str) -> np.ndarray:
        return self.shards[self.attention[layer][key]].read_float64(self.attention_names[layer][key])

    @property
    def weight_files(self) -> list[str]:
        return sorted(self.shards)


def load_config(path: str) -> dict:
    config_path = os.path.join(path, "config.json")
    if not os.path.isfile(config_path):
        raise PrepError(f"{path} has no config.json; is it a Hugging Face checkpoint directory?")
    try:
        with open(config_path) as f:
            config = json.load(f)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise PrepError(f"{config_path} is not valid JSON: {e}") from None
    if not isinstance(config, dict):
        raise PrepError(f"{config_path} is not a JSON object")
    return config


def open_checkpoint(path: str) -> Checkpoint:
    config = load_config(path)
    if "hierasparse" in config:
        raise PrepError(f"{path} is already prepared by hs-prep (config.json has a 'hierasparse' section)")
    geometry = read_geometry(config)
    shards = {name: open_safetensors(os.path.join(path, name)) for name in _weight_files(path)}
    ckpt = Checkpoint(path, config, geometry, shards)
    _index_attention(ckpt)
    return ckpt


def _weight_files(path: str) -> list[str]:
    index_path = os.path.join(path, INDEX_NAME)
    if os.path.isfile(index_path):
        try:
            with open(index_path) as f:
                weight_map = json.load(f)["weight_map"]
            files = sorted(set(weight_map.values()))
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            raise PrepError(f"{INDEX_NAME} is corrupt") from None
        missing = [f for f in files if not os.path.isfile(os.path.join(path, f))]
        if missing:
            raise PrepError(f"{INDEX_NAME} names missing shard {missing[0]}")
        return files
    if os.path.isfile(os.path.join(path, "model.safetensors")):
        return ["model.safetensors"]
    if glob.glob(os.path.join(path, "*.bin")) or glob.glob(os.path.join(path, "*.pt*")):
        raise PrepError(f"{path} has only pickle weights; hs-prep reads safetensors only (never unpickles)")
    raise PrepError(f"{path} has no model.safetensors or {INDEX_NAME}")


def _index_attention(ckpt: Checkpoint) -> None:
    geo = ckpt.geometry
    prefixes = set()
    for file_name, shard in ckpt.shards.items():
        for name, entry in shard.tensors.items():
            m = ATTENTION_TENSOR.match(name)
            if not m:
                continue
            layer, key = int(m["layer"]), f"{m['proj']}.{m['kind']}"
            prefixes.add(m["prefix"])
            if layer >= geo.num_layers:
                raise PrepError(f"{name}: layer {layer} but config.json has {geo.num_layers} layers")
            if entry.dtype not in FLOAT_DTYPES:
                raise PrepError(f"{name} has dtype {entry.dtype}; quantized checkpoints are not supported")
            expected = geo.expected_shape(m["proj"], m["kind"])
            if entry.shape != expected:
                raise PrepError(f"{name} has shape {list(entry.shape)}, config.json implies {list(expected)}")
            ckpt.attention.setdefault(layer, {})[key] = file_name
            ckpt.attention_names.setdefault(layer, {})[key] = name
    if len(prefixes) > 1:
        raise PrepError(f"several decoder stacks found ({', '.join(sorted(prefixes))}); not supported")
    for layer in range(geo.num_layers):
        present = ckpt.attention.get(layer, {})
        for key in ("q_proj.weight", "k_proj.weight", "v_proj.weight", "o_proj.weight"):
            if key not in present:
                raise PrepError(f"layer {layer} has no self_attn.{key} in the safetensors files")

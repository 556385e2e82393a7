"""HSSettings: everything the hs extension needs to know, resolved once per process.

Sources, later wins: the base setting, then the --hs-* flags (carried to SGLang's worker processes in the
SGLANG_HS_ARGS environment variable as JSON). The base setting is ``--hs-recipe``'s file if given, else the one
``hs-eval calibrate`` measured and wrote into the checkpoint (config.json's ``hierasparse.calibration``), else the
conservative recipe (recipes/conservative.json, measured quality-safe: docs/quality.md). The per-layer
retrieval/streaming split is the prepared checkpoint's, or its selection order cut at the setting's retrieval ratio.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path

import hs_recipes
from hs_kernels import BLOCK_SIZE, SparsityConfig
from hs_kernels.gpu import DECODE_KERNELS
from hs_prep.layout import SCOPES, relayout

ENV_ARGS = "SGLANG_HS_ARGS"
RECIPES_DIR = Path(hs_recipes.__file__).resolve().parent
PREPARE_HINT = "prepare it first: hs-prep convert MODEL --output DIR, then serve DIR"


class HSConfigError(ValueError):
    """A one-line, user-facing configuration error."""


@dataclass(frozen=True)
class LayerGroups:
    """One layer's KV groups on this tensor-parallel rank (local indices, prepared order)."""

    retrieval: tuple[int, ...]
    streaming: tuple[int, ...]


@dataclass
class HSSettings:
    prefill: SparsityConfig
    decode: SparsityConfig
    sink_tokens: int
    window_tokens: int
    dense_reserve: float | None  # a fraction of the pool's pages; None: auto_reserve_pages
    recipe: str
    stream_checkpoint: int = 4096
    decode_kernel: str = "auto"  # hs_kernels.decode_attention(kernel=...) for the retrieval groups
    extend_graph_tokens: int = 0  # short extends replayed from CUDA graphs up to this many tokens (resolve: 64)
    layers: list[LayerGroups] = field(default_factory=list)
    num_kv_heads: int = 0
    auto_reserve_pages: int = 0

    @property
    def stream_fraction(self) -> float:
        """Stream slots per cached page: one window per checkpoint interval."""
        window = -(-self.window_tokens // BLOCK_SIZE) * BLOCK_SIZE
        return min(1.0, window / self.stream_checkpoint)

    @property
    def chunk(self) -> SparsityConfig:
        """What a prompt's earlier prefill chunks are stored at until its prefill ends: never sparser than prefill
        attention sees them (the method's one-shot prefill) nor than the cache keeps them (blocks only get sparser)."""
        return SparsityConfig(min(self.prefill.s_k, self.decode.s_k), min(self.prefill.s_v, self.decode.s_v),
                              self.sink_tokens, self.window_tokens)

    @property
    def reserve_flag(self) -> float | str:
        """``--hs-dense-reserve`` as given: the fraction, or 'auto'."""
        return "auto" if self.dense_reserve is None else self.dense_reserve

    def reserve_pages(self, num_pages: int) -> int:
        """Pages of dense retrieval blocks and stream slots beyond what the decode sparsity and the
        checkpoints need: sinks, windows, and pages not yet compressed or trimmed."""
        if self.dense_reserve is not None:
            return math.ceil(self.dense_reserve * num_pages)
        return min(num_pages, self.auto_reserve_pages)

    def groups(self, layer_id: int) -> LayerGroups:
        return self.layers[layer_id]

    def describe(self) -> str:
        """One line: the split and the sparsities."""
        r = self.summary()["retrieval_fraction"]
        return (f"{r:.0%} of KV groups retrieval, prefill S_K {self.prefill.s_k:g} S_V {self.prefill.s_v:g}, "
                f"decode S_K {self.decode.s_k:g} S_V {self.decode.s_v:g}, sink {self.sink_tokens} window {self.window_tokens}")

    def summary(self) -> dict:
        n_r = sum(len(g.retrieval) for g in self.layers)
        n = sum(len(g.retrieval) + len(g.streaming) for g in self.layers)
        return {
            "recipe": self.recipe,
            "prefill": {"s_k": self.prefill.s_k, "s_v": self.prefill.s_v},
            "decode": {"s_k": self.decode.s_k, "s_v": self.decode.s_v},
            "sink_tokens": self.sink_tokens,
            "window_tokens": self.window_tokens,
            "stream_checkpoint": self.stream_checkpoint,
            "decode_kernel": self.decode_kernel,
            "extend_graph_tokens": self.extend_graph_tokens,
            "dense_reserve": self.reserve_flag,
            "auto_reserve_pages": self.auto_reserve_pages,
            "retrieval_fraction": n_r / n if n else 0.0,
        }


# ---- flags ----

EXTEND_GRAPH_TOKENS = 64  # a 64-token question after 4K: first token 0.020 s against 0.042 eager (H200, docs/performance.md)
RESERVE_REQUESTS = 32  # running requests the auto reserve holds sinks and windows for, unless --max-running-requests says


def fraction_or_auto(value: str) -> float | None:
    return None if value == "auto" else float(value)


fraction_or_auto.__name__ = "a fraction or 'auto'"


def auto_reserve_pages(chunk_tokens: int, running_requests: int, sink: int, window: int) -> int:
    """Dense/stream pages that ``chunk_tokens`` of prefill (dense until compressed, streamed until trimmed)
    and ``running_requests`` requests' sinks, windows and open pages hold at once."""
    pages = lambda n: -(-n // BLOCK_SIZE)  # noqa: E731
    return pages(chunk_tokens) + 1 + running_requests * (pages(sink) + pages(window) + 2)


FLAGS = {
    # flag: (key, type, help)
    "--hs-prefill-sk": ("prefill_sk", float, "block sparsity of K during prefill, in [0, 1]"),
    "--hs-prefill-sv": ("prefill_sv", float, "block sparsity of V during prefill, in [0, 1]"),
    "--hs-decode-sk": ("decode_sk", float, "block sparsity of K in the cache (decode), in [0, 1]"),
    "--hs-decode-sv": ("decode_sv", float, "block sparsity of V in the cache (decode), in [0, 1]"),
    "--hs-sink-tokens": ("sink_tokens", int, "dense sink tokens (streaming groups see only sink + window)"),
    "--hs-window-tokens": ("window_tokens", int, "dense recent-window tokens"),
    "--hs-dense-reserve": ("dense_reserve", fraction_or_auto, "extra dense block and stream page capacity (sinks, windows, blocks awaiting compression or trimming): 'auto' (default: two prefill chunks, one without the overlap scheduler, plus the sinks and windows of --max-running-requests requests; hs sets that to 32 when unset) or a fraction of the pool"),
    "--hs-stream-checkpoint": ("stream_checkpoint", int, "streaming groups keep their window before every multiple of this many tokens (a multiple of 64, >= window); a cached prefix is reused up to the last such point"),
    "--hs-decode-kernel": ("decode_kernel", str, "retrieval decode kernel on CUDA: 'auto' (default: 'cuda' where it applies, else 'triton'), 'cuda' (sparse tensor cores, mma.sp; built with the machine's nvcc; head_dim 64/128, at most 8 query heads per KV head) or 'triton'"),
    "--hs-extend-graph-tokens": ("extend_graph_tokens", int, "on CUDA, extends of at most this many tokens (a question on a cached prefix, a next turn, a short prompt) run as decode rows replayed from CUDA graphs, without the eager extend's host work per layer (default 64; 0: off)"),
    "--hs-retrieval-ratio": ("retrieval_ratio", float, "fraction of each layer's KV groups served as retrieval groups, "
                             "the lowest-scored of the checkpoint's selection first, in (0, 1] (default: the calibrated "
                             "or conservative setting's)"),
    "--hs-retrieval-scope": ("retrieval_scope", str, "how --hs-retrieval-ratio is applied: 'layer' (that fraction of "
                             "every layer's groups, the AoH paper) or 'model' (the lowest-scored fraction of all groups)"),
    "--hs-recipe": ("recipe", str, "recipe name in recipes/ or a path to a recipe JSON (default: the checkpoint's "
                    "calibrated setting, else recipes/conservative.json)"),
}


def split_hs_flags(argv: list[str]) -> tuple[dict, list[str]]:
    """Take the --hs-* flags out of argv; return (hs args dict, remaining argv)."""
    hs, rest, i = {}, [], 0
    while i < len(argv):
        arg = argv[i]
        name, eq, value = arg.partition("=")
        if name.startswith("--hs-"):
            if name not in FLAGS:
                raise HSConfigError(f"unknown flag {name}; known: {', '.join(FLAGS)}")
            if not eq:
                if i + 1 >= len(argv):
                    raise HSConfigError(f"{name} needs a value")
                value, i = argv[i + 1], i + 1
            key, typ, _ = FLAGS[name]
            try:
                hs[key] = typ(value)
            except ValueError:
                raise HSConfigError(f"{name} must be {typ.__name__}, got {value!r}") from None
        else:
            rest.append(arg)
        i += 1
    return hs, rest


def hs_args_from_env() -> dict:
    raw = os.environ.get(ENV_ARGS)
    return json.loads(raw) if raw else {}


# ---- recipes ----

CONSERVATIVE = "conservative"
CALIBRATED = "calibrated"


def load_recipe(name: str) -> dict:
    """A recipe file: by name in recipes/ or by path."""
    path = Path(name) if name.endswith(".json") else RECIPES_DIR / f"{name}.json"
    if not path.is_file():
        raise HSConfigError(f"recipe {name!r} not found (looked for {path})")
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise HSConfigError(f"recipe {path} is not valid JSON: {e}") from None


def base_setting(section: dict, recipe: str | None) -> tuple[str, dict]:
    """The setting flags apply over, and its name: ``recipe``'s, else the checkpoint's calibrated one, else the
    conservative recipe."""
    if recipe:
        return Path(recipe).stem, load_recipe(recipe)
    calibration = section.get("calibration")
    if isinstance(calibration, dict) and isinstance(calibration.get("setting"), dict):
        return CALIBRATED, calibration["setting"]
    return CONSERVATIVE, load_recipe(CONSERVATIVE)


# ---- the prepared checkpoint ----

def read_hierasparse(model_path: str) -> dict:
    """config.json["hierasparse"] of a prepared checkpoint; HSConfigError if absent."""
    config_path = Path(model_path) / "config.json"
    if not config_path.is_file():
        raise HSConfigError(f"{model_path} has no config.json (the hs backend needs a local prepared checkpoint; {PREPARE_HINT})")
    config = json.loads(config_path.read_text())
    section = config.get("hierasparse")
    if not isinstance(section, dict):
        raise HSConfigError(f"{model_path} is not a prepared checkpoint (config.json has no 'hierasparse' section); {PREPARE_HINT}")
    if section.get("format_version") != 1:
        raise HSConfigError(f"{model_path}: hierasparse format_version {section.get('format_version')!r} is not supported (need 1); re-run hs-prep convert")
    return {"config": config, "section": section}


def layer_groups(section: dict, num_layers: int, tp_size: int, tp_rank: int,
                 retrieval_ratio: float | None = None, scope: str = "layer") -> list[LayerGroups]:
    """Per layer, the retrieval and streaming KV groups of this rank's contiguous block of heads: the checkpoint's
    split, or ``retrieval_ratio``'s (``hs_prep.layout.relayout``)."""
    layers = section.get("layers")
    g = section.get("num_key_value_heads")
    if not isinstance(layers, list) or len(layers) != num_layers:
        raise HSConfigError(f"hierasparse section lists {len(layers) if isinstance(layers, list) else 'no'} layers, model has {num_layers}; re-run hs-prep convert")
    if not isinstance(g, int) or g < 1 or g % tp_size:
        raise HSConfigError(f"hierasparse num_key_value_heads={g!r} must be a positive multiple of --tp-size {tp_size}")
    prepared_tp = section.get("tp_size", 1)
    if prepared_tp != tp_size:
        raise HSConfigError(f"checkpoint was balanced for tp_size={prepared_tp}, server uses --tp-size {tp_size}; re-run hs-prep convert with the serving tp size")
    per_rank = g // tp_size
    if retrieval_ratio is not None:
        if not 0.0 < retrieval_ratio <= 1.0:
            raise HSConfigError(f"--hs-retrieval-ratio must be in (0, 1], got {retrieval_ratio}")
        if scope not in SCOPES:
            raise HSConfigError(f"--hs-retrieval-scope must be one of {', '.join(SCOPES)}, got {scope!r}")
        layers = [{"is_retrieval": flags} for flags in relayout(section, retrieval_ratio, scope)]
    out = []
    for i, layer in enumerate(layers):
        flags = layer.get("is_retrieval")
        if not isinstance(flags, list) or len(flags) != g:
            raise HSConfigError(f"hierasparse layer {i}: is_retrieval must list {g} booleans")
        local = flags[tp_rank * per_rank:(tp_rank + 1) * per_rank]
        out.append(LayerGroups(tuple(j for j, r in enumerate(local) if r), tuple(j for j, r in enumerate(local) if not r)))
    return out


# ---- resolution ----

def resolve(model_path: str, hs_args: dict | None = None, page_size: int | None = BLOCK_SIZE,
            tp_size: int = 1, tp_rank: int = 0, chunk_tokens: int | None = None,
            running_requests: int | None = None) -> HSSettings:
    """Check the checkpoint, recipe and flags; HSConfigError (one line) on anything wrong.
    ``chunk_tokens`` (SGLang's prefill chunk; default: the model's context length) and
    ``running_requests`` (default RESERVE_REQUESTS) size the auto reserve."""
    if page_size != BLOCK_SIZE:
        raise HSConfigError(f"the hs backend needs --page-size {BLOCK_SIZE} (one page = one HieraSparse block), got {page_size}")
    hs_args = dict(hs_args if hs_args is not None else hs_args_from_env())
    prepared = read_hierasparse(model_path)
    config, section = prepared["config"], prepared["section"]
    text_config = config.get("text_config", config)
    num_layers = text_config.get("num_hidden_layers")
    name, recipe = base_setting(section, hs_args.get("recipe"))

    def pick(key, recipe_value):
        return hs_args.get(key, recipe_value)

    try:
        prefill = SparsityConfig(float(pick("prefill_sk", recipe["prefill"]["s_k"])), float(pick("prefill_sv", recipe["prefill"]["s_v"])))
        decode = SparsityConfig(float(pick("decode_sk", recipe["decode"]["s_k"])), float(pick("decode_sv", recipe["decode"]["s_v"])))
    except ValueError as e:
        raise HSConfigError(f"sparsity out of range: {e} (--hs-*-sk/--hs-*-sv take values in [0, 1])") from None
    sink = int(pick("sink_tokens", recipe.get("sink_tokens", 128)))
    window = int(pick("window_tokens", recipe.get("window_tokens", 256)))
    reserve = pick("dense_reserve", None)
    reserve = None if reserve is None else fraction_or_auto(str(reserve))
    if sink < 0 or window < 1:
        raise HSConfigError(f"--hs-sink-tokens must be >= 0 and --hs-window-tokens >= 1, got {sink}, {window}")
    if reserve is not None and not 0.0 <= reserve <= 1.0:
        raise HSConfigError(f"--hs-dense-reserve must be in [0, 1], got {reserve}")
    checkpoint = int(pick("stream_checkpoint", recipe.get("stream_checkpoint", 4096)))
    if checkpoint % BLOCK_SIZE or checkpoint < window or checkpoint <= 0:
        raise HSConfigError(f"--hs-stream-checkpoint must be a positive multiple of {BLOCK_SIZE} and >= the window ({window}), got {checkpoint}")
    decode_kernel = pick("decode_kernel", "auto")
    if decode_kernel not in DECODE_KERNELS:
        raise HSConfigError(f"--hs-decode-kernel must be one of {', '.join(DECODE_KERNELS)}, got {decode_kernel!r}")
    extend_graph_tokens = int(pick("extend_graph_tokens", EXTEND_GRAPH_TOKENS))
    if extend_graph_tokens < 0:
        raise HSConfigError(f"--hs-extend-graph-tokens must be >= 0, got {extend_graph_tokens}")
    ratio = pick("retrieval_ratio", recipe.get("retrieval_ratio"))
    with_window = lambda c: SparsityConfig(c.s_k, c.s_v, sink, window)  # noqa: E731
    return HSSettings(
        prefill=with_window(prefill),
        decode=with_window(decode),
        sink_tokens=sink,
        window_tokens=window,
        dense_reserve=reserve,
        recipe=name,
        stream_checkpoint=checkpoint,
        decode_kernel=decode_kernel,
        extend_graph_tokens=extend_graph_tokens,
        layers=layer_groups(section, num_layers, tp_size, tp_rank, None if ratio is None else float(ratio),
                            str(pick("retrieval_scope", recipe.get("retrieval_scope", "layer")))),
        num_kv_heads=section["num_key_value_heads"] // tp_size,
        auto_reserve_pages=auto_reserve_pages(chunk_tokens or text_config.get("max_position_embeddings", 8192),
                                              running_requests or RESERVE_REQUESTS, sink, window),
    )

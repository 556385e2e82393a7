"""The method itself, simulated in Hugging Face transformers apart from the serving code: the oracle the served path is
compared against.

Per layer, a prepared checkpoint's retrieval groups see the whole context and its streaming groups see only the sink
and their recent window (``j < sink`` or ``j > p - window`` for a query at ``p``), in prefill and in decode. The
retrieval groups' keys and values are pruned 2:4 with ``hs_kernels.pruner`` (its masks and block choice; the attention
here is torch's own): in prefill the prompt's eligible blocks (outside the sink and the window of the prompt) at the
prefill sparsity, in decode the cache's eligible blocks (outside the sink and the window of the cache as it stands) at
the decode sparsity. Greedy decoding of a batch of prompts, right-padded: every row keeps its tokens at their own
positions, so blocks, sinks and windows are the same as for the prompt alone.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F

from hs_kernels import BLOCK_SIZE, SparsityConfig
from hs_kernels.pruner import block_loss, element_mask, eligible_range, loss_free_selection, select_sparse_blocks

ATTENTION = "hs_method"
STREAM_TILE = 256  # queries per tile of the streaming groups' banded prefill
BATCH_TOKENS = 1 << 17  # prompt tokens per batch: bounds the cache and the prefill's activations


@dataclass
class Plan:
    """What every layer's attention reads: the method's settings and the batch's state (set by ``Simulator``)."""

    prefill: SparsityConfig
    decode: SparsityConfig
    phase: str = "prefill"
    lengths: torch.Tensor | None = None  # [B] tokens each row holds once this step's are written
    capacity: int = 0  # cache slots per row
    caches: dict = field(default_factory=dict)  # layer -> LayerCache


@dataclass
class LayerCache:
    k: torch.Tensor  # [B, Hkv, capacity, D]
    v: torch.Tensor
    keep: dict  # op -> bool [B, Hkv, capacity, D]: the 2:4 element masks of the prompt's blocks


def sparse_blocks(x: torch.Tensor, keep: torch.Tensor, op: str, lengths: torch.Tensor, cfg: SparsityConfig) -> torch.Tensor:
    """Bool ``[B, H, nb]``: the blocks of each row (``lengths[b]`` tokens) that ``cfg`` makes sparse, the pruner's
    choice (``select_sparse_blocks``) per row."""
    b, h, n, _ = x.shape
    nb = n // BLOCK_SIZE
    s = cfg.sparsity(op)
    out = torch.zeros(b, h, nb, dtype=torch.bool, device=x.device)
    if s == 0.0:
        return out
    for row, length in enumerate(lengths.tolist()):
        first, stop = eligible_range(length, cfg.sink_tokens, cfg.window_tokens)
        if stop <= first:
            continue
        used = -(-length // BLOCK_SIZE)
        chosen = loss_free_selection(length, s, cfg.sink_tokens, cfg.window_tokens, x.device)
        if chosen is not None:  # S = 1: every eligible block, no loss to compute
            out[row, :, :used] = chosen
            continue
        blocks = x[row, :, :used * BLOCK_SIZE].reshape(h, used, BLOCK_SIZE, -1)
        loss = block_loss(blocks, keep[row, :, :used * BLOCK_SIZE].reshape(blocks.shape))
        out[row, :, :used] = select_sparse_blocks(loss, length, s, cfg.sink_tokens, cfg.window_tokens)
    return out


def pruned(x: torch.Tensor, keep: torch.Tensor, op: str, lengths: torch.Tensor, cfg: SparsityConfig) -> torch.Tensor:
    """``x [B, H, n, D]`` (n a multiple of 64) as the method sees it: chosen blocks with their pruned elements zeroed."""
    if cfg.sparsity(op) == 0.0:
        return x
    b, h, n, d = x.shape
    sparse = sparse_blocks(x, keep, op, lengths, cfg).repeat_interleave(BLOCK_SIZE, dim=-1)[..., None]
    return torch.where(sparse & ~keep, torch.zeros((), dtype=x.dtype, device=x.device), x)


def keep_masks(x: torch.Tensor, op: str) -> torch.Tensor:
    """The pruner's 2:4 element masks of every block of ``x [B, H, n, D]`` (n a multiple of 64), token-major."""
    b, h, n, d = x.shape
    return element_mask(x.reshape(b * h, n // BLOCK_SIZE, BLOCK_SIZE, d), op).reshape(x.shape)


def streaming_prefill(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float, sink: int, window: int) -> torch.Tensor:
    """Causal sink + window attention of ``q [B, Hq, T, D]`` over ``k, v [B, Hkv, T, D]`` at positions 0..T-1, by
    query tiles that each gather only the keys they may see."""
    bsz, hq, t, d = q.shape
    tile = STREAM_TILE
    n_tiles = -(-t // tile)
    sink_n = min(sink, t)
    span = sink_n + window - 1 + tile
    start = torch.arange(n_tiles, device=q.device) * tile
    j = torch.arange(span, device=q.device)
    low = torch.clamp(start - window + 1, min=sink_n)  # a tile's keys: the sink, then from low on
    kpos = torch.where(j[None] < sink_n, j[None], low[:, None] + j[None] - sink_n)  # [tiles, span]
    qpos = start[:, None] + torch.arange(tile, device=q.device)[None]  # [tiles, tile]
    kp, qp = kpos[:, None, :], qpos[:, :, None]
    seen = (kp <= qp) & ((kp < sink) | (kp > qp - window)) & (kp < t)
    index = kpos.clamp(max=t - 1).flatten()
    kg = k[:, :, index].unflatten(2, (n_tiles, span)).transpose(1, 2)  # [B, tiles, Hkv, span, D]
    vg = v[:, :, index].unflatten(2, (n_tiles, span)).transpose(1, 2)
    qt = F.pad(q, (0, 0, 0, n_tiles * tile - t)).unflatten(2, (n_tiles, tile)).transpose(1, 2)  # [B, tiles, Hq, tile, D]
    out = F.scaled_dot_product_attention(qt.flatten(0, 1), kg.flatten(0, 1), vg.flatten(0, 1),
                                         attn_mask=seen.repeat(bsz, 1, 1)[:, None], scale=scale, enable_gqa=True)
    return out.unflatten(0, (bsz, n_tiles)).transpose(1, 2).flatten(2, 3)[:, :, :t]


def streaming_decode(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, lengths: torch.Tensor, scale: float,
                     sink: int, window: int) -> torch.Tensor:
    """Each row's one query at ``lengths[b] - 1`` over its sink and window of ``k, v [B, Hkv, capacity, D]``."""
    p = (lengths - 1)[:, None]
    j = torch.arange(sink + window, device=q.device)[None]
    pos = torch.where(j < sink, j, torch.clamp(p - window + 1, min=sink) + j - sink)  # [B, span]: sink, then window
    valid = pos <= p
    index = pos.clamp(max=k.shape[2] - 1)[:, None, :, None].expand(-1, k.shape[1], -1, k.shape[3])
    out = F.scaled_dot_product_attention(q, k.gather(2, index), v.gather(2, index), attn_mask=valid[:, None, None],
                                         scale=scale, enable_gqa=True)
    return out


def method_attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
    """transformers attention function. Prefill: ``query [B, Hq, T, D]``, ``key``/``value [B, Hkv, T, D]``, right
    padded; decode: one new token per row (``T = 1``), kept in the plan's own cache. Returns ``[B, T, Hq, D]``."""
    plan: Plan = module.hs_plan
    retrieval: list[bool] = module.hs_retrieval
    layer = module.layer_idx
    q = query
    bsz, hq, t, d = q.shape
    hkv = key.shape[1]
    group = hq // hkv
    scale = scaling if scaling is not None else d ** -0.5
    lengths = plan.lengths
    if plan.phase == "prefill":
        pad = plan.capacity - t
        k, v = F.pad(key, (0, 0, 0, pad)), F.pad(value, (0, 0, 0, pad))
        cache = LayerCache(k, v, {"k": keep_masks(k, "k"), "v": keep_masks(v, "v")})
        plan.caches[layer] = cache
        cfg, n = plan.prefill, t
    else:
        cache = plan.caches[layer]
        rows = torch.arange(bsz, device=q.device)
        cache.k[rows, :, lengths - 1] = key[:, :, 0]
        cache.v[rows, :, lengths - 1] = value[:, :, 0]
        cfg, n = plan.decode, plan.capacity
    out = q.new_empty(bsz, hq, t, d)
    for kind in (True, False):
        groups = [g for g, r in enumerate(retrieval) if r == kind]
        if not groups:
            continue
        heads = torch.tensor([g * group + i for g in groups for i in range(group)], device=q.device)
        gi = torch.tensor(groups, device=q.device)
        qs, ks, vs = q[:, heads], cache.k[:, gi, :n], cache.v[:, gi, :n]
        if kind:
            ks = pruned(cache.k[:, gi], cache.keep["k"][:, gi], "k", lengths, cfg)[:, :, :n]
            vs = pruned(cache.v[:, gi], cache.keep["v"][:, gi], "v", lengths, cfg)[:, :, :n]
            if t > 1:  # right padding: a row's queries never reach its padding under the causal mask
                o = F.scaled_dot_product_attention(qs, ks, vs, is_causal=True, scale=scale, enable_gqa=True)
            else:
                seen = torch.arange(n, device=q.device)[None] < lengths[:, None]
                o = F.scaled_dot_product_attention(qs, ks, vs, attn_mask=seen[:, None, None], scale=scale, enable_gqa=True)
        elif t > 1:
            o = streaming_prefill(qs, ks, vs, scale, cfg.sink_tokens, cfg.window_tokens)
        else:
            o = streaming_decode(qs, ks, vs, lengths, scale, cfg.sink_tokens, cfg.window_tokens)
        out[:, heads] = o
    return out.transpose(1, 2), None


def register() -> None:
    """Make ``attn_implementation="hs_method"`` known to transformers (its masks as SDPA's; the function ignores them)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(ATTENTION, method_attention)
    AttentionMaskInterface.register(ATTENTION, sdpa_mask)


class Simulator:
    """A checkpoint in transformers under the method's settings (``configure``)."""

    def __init__(self, checkpoint: str, device: str = "cpu", dtype: str = "float32"):
        from transformers import AutoModelForCausalLM, AutoTokenizer

        register()
        self.checkpoint = Path(checkpoint)
        self.device = torch.device(device)
        self.model = AutoModelForCausalLM.from_pretrained(checkpoint, dtype=getattr(torch, dtype),
                                                          attn_implementation=ATTENTION).to(self.device).eval()
        self.tokenizer = AutoTokenizer.from_pretrained(checkpoint)
        eos = self.model.generation_config.eos_token_id
        self.stop = set(eos) if isinstance(eos, list) else {eos}
        self.configure({})

    def configure(self, hs: dict) -> None:
        """The method's settings: ``hs`` (hs-eval's keys, the launcher's flags: retrieval_ratio, retrieval_scope,
        prefill_sk, ..., sink_tokens, window_tokens) over what the launcher would serve the checkpoint with
        (``sglang_hs.settings.resolve``); an unprepared checkpoint: every group retrieval, dense KV."""
        text = self.model.config.get_text_config()
        config = json.loads((self.checkpoint / "config.json").read_text())
        if "hierasparse" in config:
            from ..settings import resolve

            settings = resolve(str(self.checkpoint), dict(hs))
            self.plan = Plan(settings.prefill, settings.decode)
            flags = [[g in groups.retrieval for g in range(len(groups.retrieval) + len(groups.streaming))]
                     for groups in settings.layers]
        else:
            dense = SparsityConfig(0.0, 0.0)
            self.plan = Plan(dense, dense)
            flags = [[True] * text.num_key_value_heads for _ in range(text.num_hidden_layers)]
        for layer, module in enumerate(self.model.model.layers):
            module.self_attn.hs_plan = self.plan
            module.self_attn.hs_retrieval = flags[layer]

    @torch.inference_mode()
    def greedy(self, prompts: list[list[int]], max_new_tokens: int) -> list[list[int]]:
        """Greedy continuations of ``prompts`` (one batch), each up to its first stop token or ``max_new_tokens``."""
        plan, dev = self.plan, self.device
        n = torch.tensor([len(p) for p in prompts], device=dev)
        t = int(n.max())
        plan.capacity = -(-(t + max_new_tokens) // BLOCK_SIZE) * BLOCK_SIZE
        x = torch.zeros(len(prompts), t, dtype=torch.long, device=dev)
        for row, p in enumerate(prompts):
            x[row, :len(p)] = torch.tensor(p, device=dev)
        plan.phase, plan.lengths = "prefill", n
        hidden = self.model.model(input_ids=x, use_cache=False).last_hidden_state  # logits of the last tokens only
        token = self.model.lm_head(hidden[torch.arange(len(prompts), device=dev), n - 1]).argmax(-1)
        out = [token]
        done = torch.zeros(len(prompts), dtype=torch.bool, device=dev)
        stops = torch.tensor(sorted(self.stop), device=dev)
        plan.phase = "decode"
        for step in range(1, max_new_tokens):
            done |= torch.isin(token, stops)
            if bool(done.all()):
                break
            plan.lengths = n + step
            logits = self.model(input_ids=token[:, None], position_ids=(n + step - 1)[:, None], use_cache=False).logits
            token = logits[:, -1].argmax(-1)
            out.append(token)
        plan.caches.clear()
        tokens = torch.stack(out, 1).tolist()
        result = []
        for row in tokens:
            cut = next((i for i, tok in enumerate(row) if tok in self.stop), len(row))
            result.append(row[:cut + 1] if cut < len(row) else row)
        return result


class SimulatedClient:
    """``hs-eval run``'s client over a ``Simulator``: prompts batched by length, no cache between requests."""

    def __init__(self, checkpoint: str | Simulator, hs: dict, device: str = "cpu", dtype: str = "float32"):
        """``checkpoint``: a path, or a loaded ``Simulator`` to reconfigure."""
        self.sim = checkpoint if isinstance(checkpoint, Simulator) else Simulator(checkpoint, device, dtype)
        self.sim.configure(hs)

    def flush(self) -> None:
        """No cache is kept between requests."""

    def server_info(self) -> dict:
        plan = self.sim.plan
        return {"simulation": {"prefill": vars(plan.prefill), "decode": vars(plan.decode)}}

    def generate(self, jobs: list[tuple]) -> list[dict]:
        order = sorted(range(len(jobs)), key=lambda i: (jobs[i][3], len(jobs[i][0])))
        results: list[dict | None] = [None] * len(jobs)
        while order:
            batch = []
            for i in order:  # ascending length: the one just taken is the batch's longest
                if batch and (jobs[i][3] != jobs[batch[0]][3] or len(jobs[i][0]) * (len(batch) + 1) > BATCH_TOKENS):
                    break
                batch.append(i)
            order = order[len(batch):]
            t0 = time.time()
            outs = self.sim.greedy([list(jobs[i][0]) for i in batch], jobs[batch[0]][3])
            seconds = round((time.time() - t0) / len(batch), 3)
            for i, tokens in zip(batch, outs):
                text = self.sim.tokenizer.decode([tok for tok in tokens if tok not in self.sim.stop])
                results[i] = {"output": text, "prompt_tokens": len(jobs[i][0]), "cached_tokens": 0, "latency_s": seconds}
        return results

    def close(self) -> None:
        self.sim = None

"""SGLang warm-up ``hs_prefill`` (``--warmups hs_prefill``; the plugin adds it on CUDA when no ``--warmups``
is given): before the HTTP server listens, run the prefill shapes whose Triton variants a first request would
otherwise compile while a user waits. SGLang's own warm-up (a few tokens) and its ``prefill_shapes`` (prompts
without a cached prefix) miss them: chunks after a prefix written by the same request, the short last chunk, and
a question on a cached prefix. Each layer runs its own variants, so one prompt covers them all. The streaming
kernel's tile height follows the query tokens (times the group's heads): short prompts and questions of 1, 2, 4, ...
128 tokens, fresh and on the cached prompt, meet every height for any group size. Questions of as many lengths on a
short cached prompt (128 tokens: a short system prompt shared by a chat's requests) split its few key blocks 3 ways,
which the merge compiles apart from 2 and 8 (Llama-3.1-8B's streaming half, 132 SMs), and with
``--hs-extend-graph-tokens`` capture the CUDA graphs of every bucket of short extends (``short_extends``)."""

from __future__ import annotations

import logging

import numpy as np

from .chunked_prefill import prefill_chunk

logger = logging.getLogger("sglang_hs")

NAME = "hs_prefill"
QUESTION_TOKENS = 128  # at one query head per KV head, the tallest streaming tile (128 rows)
SHORT_TOKENS = tuple(1 << i for i in range(QUESTION_TOKENS.bit_length()))  # 1, 2, 4, ..., 128


def prompt_tokens(chunk: int | None, limit: int, question: int = QUESTION_TOKENS) -> int:
    """Tokens of the warm-up prompt: two prefill chunks and a short tail (so the prompt's chunks read a
    prefix of its own, the last one short), leaving room under ``limit`` (the longest request the server
    takes) for the question and two output tokens; ``chunk`` None (chunked prefill off): 2048 and the tail."""
    return max(1, min(2 * (chunk or 1024) + question, limit - question - 2))


async def hs_prefill(disaggregation_mode: str, tokenizer_manager) -> None:
    from sglang.srt.managers.io_struct import GenerateReqInput

    if disaggregation_mode != "null":
        logger.info("hs: %s warm-up skipped under disaggregation", NAME)
        return
    chunk = prefill_chunk(tokenizer_manager.server_args)
    rng = np.random.default_rng(0)
    vocab = tokenizer_manager.model_config.vocab_size
    limit = min(tokenizer_manager.context_len, tokenizer_manager.max_req_input_len or tokenizer_manager.context_len)
    prompt = rng.integers(vocab, size=prompt_tokens(chunk, limit)).tolist()
    requests = [prompt]
    for n in SHORT_TOKENS:  # the questions' prefix is cached by then
        short = rng.integers(vocab, size=n).tolist()
        requests += [short, prompt + rng.integers(vocab, size=n).tolist()]
    requests += [short + rng.integers(vocab, size=n).tolist() for n in SHORT_TOKENS]  # on the last short prompt
    try:
        for ids in requests:
            req = GenerateReqInput(input_ids=ids, sampling_params={"max_new_tokens": 2, "temperature": 0.0})
            async for _ in tokenizer_manager.generate_request(req, None):
                pass
    except Exception as e:  # an optimisation only: the server still starts, and a real request meets the same error
        logger.warning("hs: %s warm-up failed (%s: %s); the first requests will compile their kernels",
                       NAME, type(e).__name__, e)
        return
    logger.info("hs: %s warm-up done (a %d-token prompt, then prompts of %s tokens, alone and on its cached prefix, "
                "and as many questions on the last)", NAME, len(prompt), "/".join(map(str, SHORT_TOKENS)))

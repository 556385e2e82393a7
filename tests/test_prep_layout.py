import numpy as np
import pytest

from hs_prep.errors import PrepError
from hs_prep.layout import plan_layer, relayout, retrieval_count


def test_retrieval_count_is_ceil_and_tp_multiple():
    assert retrieval_count(8, 0.5, 1) == 4
    assert retrieval_count(3, 0.5, 1) == 2
    assert retrieval_count(10, 0.3, 1) == 3  # no float drift: 0.3 * 10 is 3.0000000000000004
    assert retrieval_count(8, 0.25, 4) == 4  # 2 raised to one per rank
    assert retrieval_count(8, 1.0, 2) == 8
    for bad in (0.0, -0.1, 1.5):
        with pytest.raises(PrepError, match=r"\(0, 1\]"):
            retrieval_count(8, bad, 1)
    with pytest.raises(PrepError, match="does not divide"):
        retrieval_count(8, 0.5, 3)


def test_single_rank_layout_sorts_ascending_retrieval_first():
    scores = np.array([5.0, 1.0, 4.0, 2.0])
    layout = plan_layer(scores, 2, 1)
    assert layout.permutation == [1, 3, 2, 0]
    assert layout.is_retrieval == [True, True, False, False]


@pytest.mark.parametrize("groups,tp,k", [(8, 2, 4), (8, 4, 4), (8, 2, 2), (16, 4, 8), (8, 8, 8)])
def test_tp_layout_balances_every_rank(groups, tp, k):
    scores = np.random.default_rng(groups * tp + k).standard_normal(groups)
    layout = plan_layer(scores, k, tp)
    assert sorted(layout.permutation) == list(range(groups))
    lowest = set(np.argsort(scores)[:k].tolist())
    per = groups // tp
    for r in range(tp):
        block = layout.permutation[r * per:(r + 1) * per]
        flags = layout.is_retrieval[r * per:(r + 1) * per]
        assert sum(flags) == k // tp
        assert flags == sorted(flags, reverse=True)  # retrieval first inside the rank block
        assert {g for g, f in zip(block, flags) if f} <= lowest
    assert {g for g, f in zip(layout.permutation, layout.is_retrieval) if f} == lowest


def test_single_rank_layout_would_unbalance_tp_ranks():
    scores = np.arange(1.0, 9.0)
    flags = plan_layer(scores, 4, 1).is_retrieval
    assert [sum(flags[:4]), sum(flags[4:])] == [4, 0]
    flags = plan_layer(scores, 4, 2).is_retrieval
    assert [sum(flags[:4]), sum(flags[4:])] == [2, 2]


def _section(scores_per_layer, tp=1, ratio=0.5, selection="aoh"):
    layers = []
    for scores in scores_per_layer:
        layout = plan_layer(np.array(scores, dtype=float), retrieval_count(len(scores), ratio, tp), tp)
        layers.append({"is_retrieval": layout.is_retrieval, "permutation": layout.permutation, "group_scores": scores})
    return {"tp_size": tp, "selection": selection, "layers": layers}


def test_relayout_at_the_prepared_ratio_is_the_prepared_split():
    section = _section([[3.0, 1.0, 2.0, 5.0], [9.0, 8.0, 1.0, 7.0]], tp=2)
    assert relayout(section, 0.5) == [layer["is_retrieval"] for layer in section["layers"]]
    assert relayout(section, 1.0) == [[True] * 4, [True] * 4]


def test_relayout_per_model_takes_the_lowest_scores_of_all_layers():
    # layer 0 holds the three lowest scores of the model, layer 1 none of them
    section = _section([[1.0, 2.0, 3.0, 40.0], [10.0, 20.0, 30.0, 50.0]])
    flags = relayout(section, 3 / 8, "model")
    assert [sum(f) for f in flags] == [3, 0]
    assert flags[0] == [True, True, True, False]  # positions hold the groups in ascending score order
    assert [sum(f) for f in relayout(section, 0.5, "model")] == [3, 1]
    with pytest.raises(PrepError, match="scope must be one of"):
        relayout(section, 0.5, "global")


def test_relayout_per_model_keeps_tp_ranks_balanced():
    section = _section([[1.0, 2.0, 3.0, 40.0], [10.0, 20.0, 30.0, 50.0]], tp=2)
    for ratio in (0.25, 0.375, 0.5, 0.75):
        for flags in relayout(section, ratio, "model"):
            assert sum(flags[:2]) == sum(flags[2:])


def test_relayout_reverse_selection_ranks_by_the_negated_score():
    section = _section([[1.0, 2.0, 3.0, 40.0], [10.0, 20.0, 30.0, 50.0]], selection="reverse")
    for layer, scores in zip(section["layers"], ([-1.0, -2.0, -3.0, -40.0], [-10.0, -20.0, -30.0, -50.0])):
        layer["permutation"] = np.argsort(scores, kind="stable").tolist()
    assert [sum(f) for f in relayout(section, 0.25, "model")] == [1, 1]  # 40 and 50, the highest

"""When the hs stats are published: at idle only once nothing has changed for PUBLISH_QUIET_S (a client's next request,
sent as its last answer ends, must not wait behind the snapshot), and while busy at most once a second."""

import json

import pytest

pytest.importorskip("sglang")

from sglang_hs import stats as stats_module  # noqa: E402
from sglang_hs.stats import PUBLISH_QUIET_S, HSStats  # noqa: E402


@pytest.fixture
def clock(monkeypatch):
    now = [100.0]
    monkeypatch.setattr(stats_module.time, "monotonic", lambda: now[0])
    return now


def published(path) -> dict | None:
    return json.loads(path.read_text()) if path.exists() else None


def test_idle_publishes_once_nothing_changed_for_the_quiet_time(tmp_path, clock):
    path = tmp_path / "stats.json"
    stats = HSStats(str(path))
    stats.on_match(100, 64)
    stats.changed()
    clock[0] += PUBLISH_QUIET_S / 2
    stats.on_idle()
    assert published(path) is None  # a request arriving now would have waited
    stats.on_match(100, 64)
    stats.changed()  # busy again: the quiet time starts over
    clock[0] += PUBLISH_QUIET_S * 0.9
    stats.on_idle()
    assert published(path) is None
    clock[0] += PUBLISH_QUIET_S * 0.2
    stats.on_idle()
    assert published(path)["prefix_hit_tokens"] == 128 and not stats.dirty
    path.unlink()
    clock[0] += 10
    stats.on_idle()
    assert published(path) is None  # nothing changed since


def test_busy_publishes_at_most_once_a_second(tmp_path, clock):
    path = tmp_path / "stats.json"
    stats = HSStats(str(path))
    stats.changed()
    stats.maybe_publish()
    assert published(path)["prefix_queries"] == 0
    stats.on_match(10, 0)
    stats.changed()
    clock[0] += 0.5
    stats.maybe_publish()
    assert published(path)["prefix_queries"] == 0 and stats.dirty
    clock[0] += 0.5
    stats.maybe_publish()
    assert published(path)["prefix_queries"] == 1

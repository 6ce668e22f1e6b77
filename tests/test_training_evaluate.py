"""`aggregate-train evaluate` on the real Faithful-CoT pool reproduces ../shared/data/README.md's reference numbers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from training.evaluate import EvaluateConfig, evaluate, summarise

pytestmark = pytest.mark.slow


def test_evaluate_reproduces_faithful_cot_reference(tmp_path: Path) -> None:
    result = evaluate(
        EvaluateConfig(sample_sets="faithful_cot", output_dir=str(tmp_path), curve_ks=[5, 30], curve_draws=1)
    )
    metrics = result["metrics"]
    assert result["problems"] == 1319 and result["k"] == 30
    # README: single 53.11, maj@30 90.60, pass@30 99.17.
    assert metrics["single"]["mean"] == pytest.approx(53.11, abs=0.15)
    assert metrics["maj"]["mean"] == pytest.approx(90.60, abs=0.15)
    assert metrics["pass"]["mean"] == pytest.approx(99.17, abs=0.15)
    # Majority vote as the aggregator: zero Refinement Gap, and intervals that hold the mean.
    assert metrics["aggregator"]["mean"] == metrics["maj"]["mean"] and metrics["gap"]["mean"] == 0
    assert metrics["maj"]["ci_low"] < 90.60 < metrics["maj"]["ci_high"] and metrics["maj"]["ci_high"] - 90.60 < 2.5
    curve = {point["k"]: point for point in result["curve"]}
    assert curve[30]["maj"]["mean"] == pytest.approx(90.60, abs=0.15)  # all 30 drawn: the same set
    assert curve[5]["maj"]["mean"] < curve[30]["maj"]["mean"] and curve[5]["pass"]["mean"] < 99.17
    assert json.loads((tmp_path / "metrics.json").read_text())["metrics"] == json.loads(json.dumps(metrics))
    assert "| maj@30 | 90.60 |" in (tmp_path / "metrics.md").read_text()
    assert (tmp_path / "accuracy_vs_k.png").read_bytes()[:4] == b"\x89PNG"


def test_bootstrap_is_seeded_and_paired() -> None:
    import numpy as np

    values = {"a": np.array([100.0, 0.0, 100.0, 100.0]), "b": np.array([100.0, 0.0, 100.0, 100.0])}
    first, again = summarise(values, 500, seed=3), summarise(values, 500, seed=3)
    assert first == again and first["a"] == first["b"]  # same resamples for every metric
    assert first["a"]["mean"] == 75.0 and first["a"]["ci_low"] <= 75.0 <= first["a"]["ci_high"]

"""The shipped Prometheus rules, evaluated by promtool's own rule tests (no tests here)."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterable, Mapping
from pathlib import Path

import yaml

from support.paths import ROOT

__all__ = ["RULES", "rules_firing"]

RULES = ROOT / "deploy" / "prometheus" / "fleetwatch-rules.yaml"


def rules_firing(tmp_path: Path, series: Mapping[str, str], eval_time: str, alertnames: Iterable[str]) -> list[str]:
    """Which of `alertnames` the shipped rules fire at `eval_time` on `series` (series -> values in
    promtool's notation, one sample every 15 s, evaluated every 15 s). Every rule is told to expect
    nothing, so promtool names the ones that fired."""
    tests = {
        "rule_files": [str(RULES)],
        "evaluation_interval": "15s",
        "tests": [{
            "interval": "15s",
            "input_series": [{"series": name, "values": values} for name, values in series.items()],
            "alert_rule_test": [{"eval_time": eval_time, "alertname": name, "exp_alerts": []} for name in alertnames],
        }],
    }
    path = tmp_path / "rules_test.yaml"
    path.write_text(yaml.safe_dump(tests))
    result = subprocess.run(["promtool", "test", "rules", str(path)], capture_output=True, text=True, timeout=60)
    return sorted(set(re.findall(r"alertname: (Fleetwatch\w+)", result.stdout + result.stderr)))

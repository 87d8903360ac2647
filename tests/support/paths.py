"""Where the tests find the repository and the SPEC's worked examples, from any test folder."""

from __future__ import annotations

from pathlib import Path

__all__ = ["EXAMPLES", "ROOT"]

ROOT = Path(__file__).resolve().parents[2]
# The worked examples beside the SPEC: the repository is cloned beside shared/.
EXAMPLES = ROOT.parent / "shared" / "examples"

"""Where the tests find the repository and the SPEC's worked examples, from any test folder."""

from __future__ import annotations

from streaming.workshop.paths import ROOT

__all__ = ["EXAMPLES", "ROOT"]

# The worked examples beside the SPEC: the repository is cloned beside shared/.
EXAMPLES = ROOT.parent / "shared" / "examples"

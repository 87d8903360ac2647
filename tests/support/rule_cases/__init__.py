"""The rule scenarios, by subject: every rule of SPEC section 4 with cases that fire, stay quiet
and resolve. tests/detect/ runs them on the engine, tests/reference/test_reference_detector.py on the
reference detector of bench/."""

from __future__ import annotations

from support.rule_cases import broker, controller, identity, misroutes, partitions
from support.rule_events import table

__all__ = ["ALL_CASES", "CASES"]

# rule -> its scenarios (each rule's cases live in one module)
CASES = broker.CASES | controller.CASES | identity.CASES | misroutes.CASES | partitions.CASES
ALL_CASES = table(CASES)

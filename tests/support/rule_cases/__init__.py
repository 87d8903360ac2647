"""The rule scenarios, by subject: every rule of SPEC section 4 with cases that fire, stay quiet
and resolve. tests/detect/ runs them on the engine, tests/reference/test_reference_detector.py on the
reference detector of bench/."""

from __future__ import annotations

from support.rule_cases import broker, collectors, controller, identity, misroutes, partitions, readings
from support.rule_events import table

__all__ = ["ALL_CASES", "CASES"]

_MODULES = (broker, controller, identity, misroutes, partitions, collectors, readings)
# rule -> its scenarios (each rule's cases live in the module of its subject; a collector's rounds
# add cases to the broker and target rules they change)
CASES = {rule: [c for module in _MODULES for c in module.CASES.get(rule, [])]
         for rule in dict.fromkeys(r for module in _MODULES for r in module.CASES)}
ALL_CASES = table(CASES)

"""Helpers shared by the tests (no tests here). `tests/` is on the import path because
tests/conftest.py lives there, so test modules in any subfolder import them as `support.<module>`.
Test folders may have a conftest.py of their own, so nothing imports from `conftest`."""

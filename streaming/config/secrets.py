"""Checks on the secrets fleetwatch reads from the environment (or files it names).

The shipped env examples (deploy/systemd/*.env.example, deploy/k8s/secrets.env.example) hold
placeholder passwords that start with `change-me`: a deployment that copies one and forgets a line
must not serve the dashboard or `/metrics` behind a password anyone can read in the repository.
`refuse_example_secret` makes such a value a one-line ConfigError that names the variable, never
the value.
"""

from __future__ import annotations

from streaming.plumbing.errors import ConfigError

__all__ = ["EXAMPLE_SECRET_PREFIX", "refuse_example_secret"]

EXAMPLE_SECRET_PREFIX = "change-me"


def refuse_example_secret(variable: str, value: str | None) -> None:
    """Raise ConfigError when `value` (read from `variable`) is a shipped placeholder: it starts
    with `change-me`, in any case, after leading blanks."""
    if value is not None and value.lstrip().lower().startswith(EXAMPLE_SECRET_PREFIX):
        raise ConfigError(f"{variable} is still the placeholder of the shipped env examples: set a secret of your own")

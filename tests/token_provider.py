"""A token provider for the sink's ``oauth_cb`` reference (``tests.token_provider:token``), as a user module would be.

Each call is recorded as a file ``call-<pid>-<label>`` in the directory
``$RKS_TOKEN_LOG`` (else ``$RKS_HOOK_DIR``, which Spark's workers inherit from
the test session), ``label`` being the ``sasl.oauthbearer.config`` the
client passes: a test can tell which processes called it for its own sink.
"""

from __future__ import annotations

import os
import time

TOKEN = "tok-7f3c9e1b2a-never-printed"


def token(oauthbearer_config: str) -> tuple[str, float]:
    where = os.environ.get("RKS_TOKEN_LOG") or os.environ.get("RKS_HOOK_DIR")
    if where:
        label = "".join(c for c in (oauthbearer_config or "") if c.isalnum())[:40]  # None when not set
        with open(os.path.join(where, f"call-{os.getpid()}-{label}"), "a") as f:
            f.write("called\n")
    return TOKEN, time.time() + 3600


def broken(oauthbearer_config: str) -> tuple[str, float]:
    raise PermissionError("no credentials for this role")


NOT_CALLABLE = 42

"""Token providers for the sink's ``oauth_cb`` reference (``tests.token_provider:<function>``), as user modules are.

Each call is recorded as a file ``call-<pid>-<label>`` in the directory
``$RKS_TOKEN_LOG`` (else ``$RKS_HOOK_DIR``, which Spark's workers inherit from
the test session), ``label`` being the ``sasl.oauthbearer.config`` the
client passes: a test can tell which processes called it for its own sink.

``token`` and ``broken`` need no broker. ``signed``, ``expired``, ``forged``
and ``stale`` make RS256 JWTs for the ``secure_broker`` fixture's OAUTH
listener (tests/secure_broker.py) with the session's keys, found in every
process of the session:

* ``signed``: valid for an hour: the broker accepts it;
* ``expired``: its ``exp`` claim is 10 minutes past while the provider says it
  lasts an hour (an identity provider whose clock is off): the broker refuses it;
* ``forged``: signed by a key the broker's JWKS does not hold (same ``kid``);
* ``stale``: expired, and the provider says so (a cached token never
  refreshed): the Kafka client itself refuses it.
"""

from __future__ import annotations

import os
import time

TOKEN = "tok-7f3c9e1b2a-never-printed"


def _record(oauthbearer_config: str | None) -> None:
    where = os.environ.get("RKS_TOKEN_LOG") or os.environ.get("RKS_HOOK_DIR")
    if where:
        label = "".join(c for c in (oauthbearer_config or "") if c.isalnum())[:40]  # None when not set
        with open(os.path.join(where, f"call-{os.getpid()}-{label}"), "a") as f:
            f.write("called\n")


def token(oauthbearer_config: str) -> tuple[str, float]:
    _record(oauthbearer_config)
    return TOKEN, time.time() + 3600


def broken(oauthbearer_config: str) -> tuple[str, float]:
    raise PermissionError("no credentials for this role")


def signed(oauthbearer_config: str) -> tuple[str, float, str]:
    from tests.secure_broker import SUBJECT, make_token

    _record(oauthbearer_config)
    jwt, exp = make_token()
    return jwt, exp, SUBJECT


def expired(oauthbearer_config: str) -> tuple[str, float, str]:
    from tests.secure_broker import SUBJECT, make_token

    _record(oauthbearer_config)
    jwt, _exp = make_token(lifetime_s=-600)
    return jwt, time.time() + 3600, SUBJECT


def forged(oauthbearer_config: str) -> tuple[str, float, str]:
    from tests.secure_broker import SUBJECT, make_token

    _record(oauthbearer_config)
    jwt, exp = make_token(forged=True)
    return jwt, exp, SUBJECT


def stale(oauthbearer_config: str) -> tuple[str, float, str]:
    from tests.secure_broker import SUBJECT, make_token

    _record(oauthbearer_config)
    jwt, exp = make_token(lifetime_s=-600)
    return jwt, exp, SUBJECT


NOT_CALLABLE = 42

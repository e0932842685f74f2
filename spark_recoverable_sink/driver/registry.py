"""Schema Registry, driver side: the id of a schema under a subject, registered (or looked up) once per process.

Confluent's wire format puts the schema's registry id in every record
(:mod:`.formats`); the id comes from the registry, asked here through
confluent-kafka's ``SchemaRegistryClient`` (extra ``registry``). Ids are
cached for the life of the driver process, keyed by registry URL, subject,
schema type and schema text: a batch asks the registry only for a schema it
has not seen, and a restarted query asks again (registering an existing
schema returns its id; an evolved one gets its new id after the subject's
compatibility check).

Failures become :class:`..errors.RegistryError` subclasses, raised before
any record of the batch is written: no answer (``RegistryUnavailableError``),
credentials refused (``RegistryAuthError``), schema refused by the subject's
compatibility rules (``SchemaIncompatibleError``). Their messages, and the
exceptions they are chained from, never hold the registry's credentials
(``basic.auth.user.info``, tokens, passwords, a URL's ``user:password@``).

Where it runs: the driver only; the client is created on first use and
never pickled.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from typing import Any, Mapping
from urllib.parse import unquote

from ..config import is_secret_option
from ..errors import (
    ConfigError,
    RegistryAuthError,
    RegistryError,
    RegistryUnavailableError,
    SchemaIncompatibleError,
)

__all__ = ["RegistryClient", "scrub_url", "url_credentials"]

# A URL's ``user:password@``, with or without a scheme, in a comma-separated list or in a message's text: up
# to the authority's last '@' (a password may hold one).
_USERINFO = re.compile(r"(^|://|[,\s])([^/\s,]*)@")
_IDS: dict[tuple[str, str, str, str], int] = {}
_IDS_LOCK = threading.Lock()
#: Seconds per registry request when the settings give no ``timeout`` (confluent-kafka's client has none):
#: a registry that takes the connection and never answers ends in ``RegistryUnavailableError`` after at most
#: ``(1 + max.retries) * timeout`` (the client retries a timed-out request), never holds the driver forever.
DEFAULT_TIMEOUT_S = 30


def scrub_url(url: str) -> str:
    """``url`` (one, a comma-separated list, or a text naming them) with every ``user:password@`` as ``***@``."""
    return _USERINFO.sub(lambda m: f"{m.group(1)}***@", url)


def url_credentials(url: str) -> list[str]:
    """The ``user:password`` parts of ``url`` (one URL or a comma-separated list; a scheme is optional)."""
    return [m.group(2) for m in _USERINFO.finditer(url) if m.group(2)]


class RegistryClient:
    """A registry's client conf (values resolved) and, once used, its ``SchemaRegistryClient``.

    Raises:
        ConfigError: confluent-kafka's Schema Registry client is not installed, or refuses the conf.
    """

    def __init__(self, conf: Mapping[str, Any]) -> None:
        self._conf = _userinfo_to_basic_auth(dict(conf))
        self._conf.setdefault("timeout", DEFAULT_TIMEOUT_S)
        raw_url = str(conf.get("url", ""))
        self.url = scrub_url(raw_url)
        secrets = {str(v) for k, v in self._conf.items() if is_secret_option(k) and str(v)}
        secrets |= set(url_credentials(raw_url))
        secrets |= {unquote(s) for s in secrets}
        secrets |= {s.partition(":")[2] for s in secrets if len(s.partition(":")[2]) >= 4}  # user:PASSWORD
        self._secrets = sorted((s for s in secrets if s), key=len, reverse=True)
        # the id cache is per registry: every setting (credentials and tenant headers included) keys it
        self._key = hashlib.sha256(json.dumps(sorted(self._conf.items()), default=str).encode()).hexdigest()
        self._client: Any = None

    def scrub(self, text: str) -> str:
        """``text`` with the registry's credentials replaced by ``***``."""
        for secret in self._secrets:
            text = text.replace(secret, "***")
        return scrub_url(text)

    def _get(self) -> Any:
        if self._client is None:
            try:
                from confluent_kafka.schema_registry import SchemaRegistryClient
            except ImportError as exc:
                raise ConfigError("registry", "needs confluent-kafka's Schema Registry client: pip install "
                                              f"'spark-recoverable-sink[registry]' ({exc.name} is missing)") from None
            error = None
            try:
                self._client = SchemaRegistryClient(self._conf)
            except Exception as exc:  # noqa: BLE001 - any refusal of the settings, its text scrubbed
                error = ConfigError("registry", f"{type(exc).__name__}: {self.scrub(str(exc))}")
            if error is not None:  # raised outside the except: the original (it may hold credentials) is not kept
                raise error
        return self._client

    def schema_id(self, subject: str, schema: str, schema_type: str, auto_register: bool) -> int:
        """The id of ``schema`` under ``subject``: registered if ``auto_register`` (the subject's compatibility
        rules apply), else looked up (it must be registered already).

        Raises:
            RegistryUnavailableError / RegistryAuthError / SchemaIncompatibleError / RegistryError: see above.
            ConfigError: the client cannot be created.
        """
        key = (self._key, subject, schema_type, schema)
        with _IDS_LOCK:
            if key in _IDS:
                return _IDS[key]
        client = self._get()
        from confluent_kafka.schema_registry import Schema
        from confluent_kafka.schema_registry.error import SchemaRegistryError

        error: RegistryError | None = None
        cause: BaseException | None = None
        try:
            if auto_register:
                sid = int(client.register_schema(subject, Schema(schema, schema_type)))
            else:
                sid = int(client.lookup_schema(subject, Schema(schema, schema_type)).schema_id)
        except Exception as exc:  # noqa: BLE001 - every failure is mapped, credentials scrubbed
            error = self._error(exc, subject, auto_register)
            # chained only to the registry's own answer, and only when its text holds no credential: an HTTP
            # library's error carries the request (URL, Authorization header)
            cause = exc if isinstance(exc, SchemaRegistryError) and not self._leaks(exc) else None
        if error is not None:  # raised outside the except: nothing else is kept as its __context__
            raise error from cause
        with _IDS_LOCK:
            _IDS[key] = sid
        return sid

    def _leaks(self, exc: BaseException) -> bool:
        text = repr(exc) + str(exc)
        return any(s in text for s in self._secrets)

    def _error(self, exc: Exception, subject: str, auto_register: bool) -> RegistryError:
        status = getattr(exc, "http_status_code", None)
        if not isinstance(status, int):
            status = getattr(exc, "status_code", None)  # OAuthTokenError: the identity provider's answer
        code = int(getattr(exc, "error_code", -1) or -1)
        said = self.scrub(str(getattr(exc, "error_message", "") or exc))
        where = f"Schema Registry {self.url} subject {subject!r}"
        if isinstance(exc, json.JSONDecodeError):
            return RegistryError(f"{where}: the answer is not JSON (is the URL the registry's API, not a proxy's "
                                 f"or a login page?): {said}", subject, None, code)
        if isinstance(exc, (ValueError, TypeError)) and not isinstance(status, int):
            return RegistryError(f"{where}: the client refused its settings ({type(exc).__name__}: {said})",
                                 subject, None, code)
        if status is None or not isinstance(status, int) or status < 0:
            return RegistryUnavailableError(f"{where}: no answer ({type(exc).__name__}: {said}); nothing of "
                                            "the batch was written", subject, None, code)
        if status in (401, 403):
            return RegistryAuthError(f"{where}: HTTP {status}, the registry refused the credentials "
                                     f"(basic.auth.user.info / bearer settings): {said}", subject, status, code)
        if status == 409:
            return SchemaIncompatibleError(f"{where}: HTTP 409, the schema is incompatible with the subject's "
                                           f"earlier versions under its compatibility rules: {said}; nothing was "
                                           "registered or written", subject, status, code)
        if status >= 500 or status == 429:
            return RegistryUnavailableError(f"{where}: HTTP {status}: {said}", subject, status, code)
        if status == 404 and not auto_register:
            return RegistryError(f"{where}: the schema is not registered under this subject (auto_register="
                                 f"False): {said}", subject, status, code)
        return RegistryError(f"{where}: HTTP {status}: {said}", subject, status, code)


def _userinfo_to_basic_auth(conf: dict[str, Any]) -> dict[str, Any]:
    """``conf`` with the URLs' ``user:password@`` moved to ``basic.auth.user.info`` (an HTTP library logs URLs).

    Raises:
        ConfigError: the URLs of a list hold different credentials (one ``basic.auth.user.info`` serves them all).
    """
    url = conf.get("url")
    if not isinstance(url, str):
        return conf
    found = set(url_credentials(url))
    if not found:
        return conf
    if len(found) > 1:
        raise ConfigError("registry['url']", "its URLs hold different user:password@ parts; give the credentials "
                                             "once, as basic.auth.user.info")
    conf["url"] = _USERINFO.sub(lambda m: m.group(1), url)
    if "basic.auth.user.info" not in conf:
        user, _, password = found.pop().partition(":")
        conf["basic.auth.user.info"] = f"{unquote(user)}:{unquote(password)}"
    return conf

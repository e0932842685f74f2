"""Kafka client callbacks named by reference, and client files checked on the host that uses them.

A Kafka configuration is shipped from the driver to every executor, so it
holds values only. Callbacks are named instead: ``"oauth_cb":
"package.module:function"`` (confluent-kafka's contract: called with the
``sasl.oauthbearer.config`` string, returns ``(token, expiry_epoch_seconds[,
principal[, extensions]])``). The driver imports it once as a check
(:func:`load_callable`: a missing module or function is a
:class:`.ConfigError` naming it, before any task runs); every process that
builds a Kafka client imports it again (:func:`with_callbacks`), so the
token is made where it is used. Its token never reaches a log, a report or
an error of this package: a provider that fails is named with its error's
type, never with what it returned; one whose result the client would refuse
(not a ``(token, expiry)`` tuple, an expiry already past) is named with why.

Files a configuration names (``ssl.ca.location``, ``ssl.key.location``, ...)
must exist on every executor; :func:`check_files` says which host lacks which
one, and that the PEM-as-value options (``ssl.ca.pem``, ``ssl.certificate.pem``,
``ssl.key.pem``) avoid the files altogether. The Java client's keystores and
truststores are read here as librdkafka reads them (PEM and PKCS#12; JKS
refused with how to convert it): converters of :data:`.javaconf.TABLE`.
"""

from __future__ import annotations

import functools
import importlib
import os
import re
import socket
import time
from typing import Any, Callable, Mapping

from .errors import ConfigError

__all__ = ["CALLBACK_OPTIONS", "load_callable", "with_callbacks", "check_files", "FILE_OPTIONS", "provider_failure",
           "store_type_check", "keystore", "keystore_password", "truststore"]

#: Kafka options whose value is a callable, given here as ``"package.module:function"``.
CALLBACK_OPTIONS = ("oauth_cb",)
_REF_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*$")
#: Options naming a file a client reads, and the option that takes the file's content instead.
FILE_OPTIONS = {"ssl.ca.location": "ssl.ca.pem", "ssl.certificate.location": "ssl.certificate.pem",
                "ssl.key.location": "ssl.key.pem", "ssl.keystore.location": None, "ssl.crl.location": None,
                "sasl.kerberos.keytab": None}


@functools.lru_cache(maxsize=32)
def load_callable(option: str, ref: str) -> Callable[..., Any]:
    """Import ``ref`` (``"package.module:function"``) for option ``option``.

    Raises:
        ConfigError: naming the option and the reference: not a reference,
            the module cannot be imported, or it has no such callable.
    """
    name = f"kafka_conf[{option!r}]"
    if not isinstance(ref, str) or not _REF_RE.match(ref):
        raise ConfigError(name, f"must name a function as 'package.module:function' (imported by every executor), "
                                f"got {ref!r}")
    module, _, attr = ref.partition(":")
    try:
        fn = getattr(importlib.import_module(module), attr)
    except ImportError as exc:
        raise ConfigError(name, f"{ref}: module {module} cannot be imported here "
                                f"({type(exc).__name__}: {exc}); install it on the driver and every executor") from None
    except AttributeError:
        raise ConfigError(name, f"{ref}: module {module} has no {attr}") from None
    if not callable(fn):
        raise ConfigError(name, f"{ref} is not callable")
    return fn


_FAILURES: dict[str, str] = {}  # reference -> its last failure in this process (for clients that hide it)


def _unusable(ref: str, result: Any) -> str:
    """Why the Kafka client would refuse what provider ``ref`` returned (``""`` if nothing): never the token itself.

    Checked here because confluent-kafka hides the client's reason behind
    "OAuth token not set within 10 seconds timeout" when it builds a producer.
    """
    shape = "must return (token, expiry_epoch_seconds[, principal[, extensions]])"
    if not isinstance(result, tuple) or not 2 <= len(result) <= 4:
        return f"token provider {ref} returned a {type(result).__name__}: it {shape}"
    token, expiry = result[0], result[1]
    if not isinstance(token, str) or not token:
        return f"token provider {ref} returned a {type(token).__name__} as its token: it {shape}"
    try:  # what the client does with it
        expiry = float(expiry) if not isinstance(expiry, (str, bytes)) else None
    except (TypeError, ValueError):
        expiry = None
    if expiry is None:
        return f"token provider {ref} returned a {type(result[1]).__name__} as its expiry: it {shape}"
    now = time.time()
    if expiry <= now:
        return (f"token provider {ref} returned a token whose expiry {expiry:.0f} is {now - expiry:.0f} s in the "
                "past: the Kafka client refuses it; return a fresh token and its expiry in seconds since the "
                "epoch (not its lifetime)")
    return ""


def _token_provider(ref: str, fn: Callable[[str], Any]) -> Callable[[str], Any]:
    def oauth_cb(oauthbearer_config: str) -> Any:
        try:
            token = fn(oauthbearer_config)
        except Exception as exc:  # named by reference and error type; what it returns never appears
            _FAILURES[ref] = why = f"token provider {ref} failed: {type(exc).__name__}: {exc}"
            raise RuntimeError(why) from None
        why = _unusable(ref, token)
        if why:
            _FAILURES[ref] = why
            raise RuntimeError(why)
        _FAILURES.pop(ref, None)
        return token

    return oauth_cb


def provider_failure(conf: Mapping[str, Any]) -> str:
    """The last failure of ``conf``'s token provider in this process (``""`` if none): to name it in errors."""
    ref = conf.get("oauth_cb")
    return _FAILURES.get(ref, "") if isinstance(ref, str) else ""


def with_callbacks(conf: Mapping[str, Any]) -> dict[str, Any]:
    """``conf`` with every callback reference replaced by the callable it names (imported in this process).

    Raises:
        ConfigError: a reference cannot be imported here (:func:`load_callable`).
    """
    out = dict(conf)
    ref = out.get("oauth_cb")
    if isinstance(ref, str):
        out["oauth_cb"] = _token_provider(ref, load_callable("oauth_cb", ref))
    return out


def check_files(conf: Mapping[str, Any]) -> None:
    """Refuse a configuration that names a file this host does not have (executors: where clients are built).

    Raises:
        ConfigError: naming the option, the host and the path, and the PEM option that avoids the file.
    """
    for option, pem in FILE_OPTIONS.items():
        path = conf.get(option)
        if not path or (option == "ssl.ca.location" and str(path) == "probe"):
            continue
        if not os.path.exists(str(path)):
            instead = f"; or pass the file's content as {pem} (a value, shipped with the configuration)" if pem else ""
            raise ConfigError(f"kafka_conf[{option!r}]", f"{path} does not exist on host {socket.gethostname()}: "
                                                          f"install it on every executor{instead}")


# -- the Java client's keystores and truststores, as librdkafka reads them (javaconf.TABLE) ------------------------

_Convert = Callable[[str, Mapping[str, str]], dict]
_JKS_MAGIC = (b"\xfe\xed\xfe\xed", b"\xce\xce\xce\xce")  # JKS, JCEKS
_TO_PEM = ("export its certificates as PEM (keytool -exportcert -rfc, or openssl pkcs12 -nokeys) and give them as "
           "ssl.ca.location (a file) or ssl.ca.pem (the certificates as a value)")


def _store_type(kind: Any) -> str:
    return str(kind).strip().upper() if kind else "JKS"  # the Java client's default store type


def _is_jks(path: str) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(4) in _JKS_MAGIC
    except OSError:
        return False  # not on this host: the executors' check_files names a missing file


def store_type_check(name: str) -> _Convert:
    """A converter of ``ssl.keystore.type`` / ``ssl.truststore.type``: nothing to set;
    not JKS/PKCS12/PEM: ConfigError."""
    def convert(v: str, conf: Mapping[str, str]) -> dict:
        if _store_type(v) not in ("JKS", "PKCS12", "PEM"):
            raise ConfigError(f"kafka_conf[{name!r}]", f"must be JKS, PKCS12 or PEM, got {v!r}")
        return {}
    return convert


def keystore(v: str, conf: Mapping[str, str]) -> dict:
    """``ssl.keystore.location``: PKCS#12 kept (librdkafka's meaning), PEM split into key and certificate files.

    Raises:
        ConfigError: a JKS keystore (``ssl.keystore.type=JKS``, or a JKS file found on this host).
    """
    kind = _store_type(conf.get("ssl.keystore.type", "PKCS12"))
    if kind == "PEM":
        return {"ssl.key.location": v, "ssl.certificate.location": v}
    if kind == "JKS" or _is_jks(v):
        raise ConfigError("kafka_conf['ssl.keystore.location']", "is a JKS keystore; librdkafka reads PKCS#12 "
                          "(ssl.keystore.location with ssl.keystore.password; convert with keytool -importkeystore "
                          "-deststoretype PKCS12) or PEM (ssl.key.location and ssl.certificate.location)")
    return {"ssl.keystore.location": v}


def keystore_password(v: str, conf: Mapping[str, str]) -> dict:
    """``ssl.keystore.password`` kept; with a PEM keystore a ConfigError, as in the Java client."""
    if _store_type(conf.get("ssl.keystore.type", "PKCS12")) == "PEM":
        raise ConfigError("kafka_conf['ssl.keystore.password']",
                          "has no meaning for a PEM keystore (as in the Java client): put the key's passphrase in "
                          "ssl.key.password")
    return {"ssl.keystore.password": v}


def truststore(target: str, name: str) -> _Convert:
    """A converter of a PEM truststore setting ``name`` to librdkafka's ``target``; JKS/PKCS#12: ConfigError."""
    def convert(v: str, conf: Mapping[str, str]) -> dict:
        if _store_type(conf.get("ssl.truststore.type", "PEM" if name.endswith("certificates") else "")) != "PEM":
            raise ConfigError(f"kafka_conf[{name!r}]", f"names a JKS or PKCS#12 truststore, which librdkafka cannot "
                                                       f"read: {_TO_PEM}")
        return {target: v}
    return convert

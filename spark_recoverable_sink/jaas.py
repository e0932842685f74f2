"""The Java client's ``sasl.jaas.config``, read strictly, and the librdkafka settings it stands for.

Runs wherever a :class:`.SinkConfig` is built (driver, ``rks``, job
templates); nothing here pickles or connects. The grammar is the one Kafka's
Java client reads (``org.apache.kafka.common.security.JaasConfig``, a
``StreamTokenizer``): ``<LoginModule class> <flag> key=value ... ;`` with
exactly one login module, ``required`` / ``requisite`` / ``sufficient`` /
``optional`` as the flag, values bare words or quoted with ``"`` or ``'``
(escapes ``\\n \\t \\r \\b \\f \\a \\v``, octal ``\\0``..``\\377``, any other
escaped character is itself). Databricks' ``kafkashaded.`` prefix of the
class name is removed. Stricter than Java where Java would silently read
something else: a ``/`` outside quotes (a comment to Java), a line break
inside quotes, an unclosed quote, a repeated option are refused.

The string holds a password or client secret: no error raised here quotes it
or any of its values (positions and option names the module knows are named
instead); :func:`options` feeds :func:`.config.scrub_secrets`, which removes
its secret values from every text this package prints. The other SASL
settings of the Java client whose values librdkafka reads otherwise
(``sasl.mechanism``, ``sasl.login.callback.handler.class``, a ``file:`` token
URL) have their converters here too (:data:`.javaconf.TABLE`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Mapping

from .errors import ConfigError

__all__ = ["JaasEntry", "parse", "options", "jaas_settings", "sasl_mechanism", "token_url", "login_handler",
           "CALLBACK", "OPTION", "SHADED_PREFIX"]

OPTION = "kafka_conf['sasl.jaas.config']"
SHADED_PREFIX = "kafkashaded."
_CLASS_RE = re.compile(r"^[A-Za-z_$][\w$]*(\.[A-Za-z_$][\w$]*)+$")
_FLAGS = ("required", "requisite", "sufficient", "optional")
_SPECIAL = ';="\'/'
_ESCAPES = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v"}
_PKG = "org.apache.kafka.common.security."
PLAIN = _PKG + "plain.PlainLoginModule"
SCRAM = _PKG + "scram.ScramLoginModule"
OAUTH = _PKG + "oauthbearer.OAuthBearerLoginModule"
#: Login modules librdkafka has no counterpart for, and what to use instead.
_INSTEAD = {
    "software.amazon.msk.auth.iam.IAMLoginModule":
        "MSK IAM has no librdkafka mechanism: use sasl.mechanism=OAUTHBEARER with an oauth_cb reference "
        "('package.module:function') returning an MSK IAM token (e.g. from aws-msk-iam-sasl-signer-python)",
    "com.sun.security.auth.module.Krb5LoginModule":
        "librdkafka does Kerberos itself: use sasl.mechanism=GSSAPI with sasl.kerberos.keytab, "
        "sasl.kerberos.principal and sasl.kerberos.service.name (it runs kinit: sasl.kerberos.kinit.cmd)",
}


@dataclass(frozen=True)
class JaasEntry:
    """One login module: its class (``kafkashaded.`` removed), control flag and options (never in a repr)."""

    module: str
    flag: str
    options: tuple[tuple[str, str], ...] = field(repr=False)


def _fail(reason: str) -> ConfigError:
    return ConfigError(OPTION, reason + " (the value is not shown: it holds a secret)")


def _quoted(text: str, i: int) -> tuple[str, int]:
    """The quoted string opening at ``text[i]`` (Java's StreamTokenizer escapes) and the index after it."""
    quote, start, out = text[i], i, []
    i += 1
    while i < len(text) and text[i] != quote:
        c = text[i]
        if c in "\r\n":
            raise _fail(f"a line break inside the quoted value opened at character {start + 1}: close the quote "
                        "on the same line or write \\n")
        if c == "\\" and i + 1 < len(text):
            i += 1
            c = text[i]
            if "0" <= c <= "7":
                digits = 3 if c <= "3" else 2
                j = i
                while j < len(text) and j - i < digits and "0" <= text[j] <= "7":
                    j += 1
                c, i = chr(int(text[i:j], 8)), j - 1
            else:
                c = _ESCAPES.get(c, c)
        out.append(c)
        i += 1
    if i >= len(text):
        raise _fail(f"the quoted value opened at character {start + 1} is not closed")
    return "".join(out), i + 1


def _tokens(text: str) -> list[tuple[str, str, int]]:
    """``(kind, text, position)``: kind ``w`` (a word or quoted string), ``=`` or ``;``."""
    out, i = [], 0
    while i < len(text):
        c = text[i]
        if c <= " ":
            i += 1
        elif c in ";=":
            out.append((c, c, i))
            i += 1
        elif c == "/":
            raise _fail(f"a '/' outside quotes at character {i + 1} (JAAS reads it as the start of a comment): "
                        "quote the value that holds it")
        elif c in "\"'":
            word, j = _quoted(text, i)
            out.append(("w", word, i))
            i = j
        else:
            j = i
            while j < len(text) and text[j] > " " and text[j] not in _SPECIAL:
                j += 1
            out.append(("w", text[i:j], i))
            i = j
    return out


def parse(text: str) -> JaasEntry:
    """Read a ``sasl.jaas.config`` value: exactly one login module, its flag and options.

    Raises:
        ConfigError: naming ``kafka_conf['sasl.jaas.config']`` and where and why it cannot be read,
            never its text.
    """
    if not isinstance(text, str) or not text.strip():
        raise _fail("is empty: give '<LoginModule class> required key=\"value\" ...;'")
    toks = _tokens(text)
    if len(toks) < 2 or toks[0][0] != "w" or toks[1][0] != "w":
        raise _fail("must start with the login module's class and a control flag (required, requisite, "
                    "sufficient or optional)")
    if toks[1][1].lower() not in _FLAGS:
        raise _fail("its second word (the control flag) must be required, requisite, sufficient or optional")
    module = toks[0][1][len(SHADED_PREFIX):] if toks[0][1].startswith(SHADED_PREFIX) else toks[0][1]
    opts: dict[str, str] = {}
    i = 2
    while i < len(toks) and toks[i][0] != ";":
        key = toks[i]
        if key[0] != "w" or i + 2 >= len(toks) or toks[i + 1][0] != "=" or toks[i + 2][0] != "w":
            raise _fail(f"option {len(opts) + 1} (at character {key[2] + 1}) is not key=value")
        if key[1] in opts:
            raise _fail(f"option {len(opts) + 1} (at character {key[2] + 1}) repeats an earlier option's name")
        opts[key[1]] = toks[i + 2][1]
        i += 3
    if i >= len(toks):
        raise _fail("does not end with ';'")
    if i + 1 < len(toks):
        raise _fail("holds more than one login module: the Kafka client takes exactly one")
    return JaasEntry(module, toks[1][1].lower(), tuple(opts.items()))


_LENIENT = re.compile(r"""([^\s=;"']+)\s*=\s*("(?:\\.|[^"\\])*"?|'(?:\\.|[^'\\])*'?|[^\s;"']+)""")


def options(text: str) -> dict[str, str]:
    """The options of a ``sasl.jaas.config`` value: what a scrub must remove.

    A string :func:`parse` refuses is read leniently instead (every ``key=value``, quotes
    stripped), so that its password is still found.
    """
    try:
        return dict(parse(text).options)
    except ConfigError:
        return {k: v.strip("\"'") for k, v in _LENIENT.findall(text)}


def _only(entry: JaasEntry, allowed: tuple[str, ...], prefix: str = "") -> dict[str, str]:
    opts = dict(entry.options)
    for n, key in enumerate(opts, 1):
        if key not in allowed and not (prefix and key.startswith(prefix)):
            extra = f" or {prefix}<name>" if prefix else ""
            raise _fail(f"option {n} of {entry.module.rsplit('.', 1)[-1]} is not one librdkafka has a setting "
                        f"for (known: {', '.join(allowed)}{extra})")
    return opts


def _mechanism(conf: Mapping[str, str], module: str, wanted: tuple[str, ...]) -> dict[str, str]:
    """``{"sasl.mechanism": wanted[0]}`` when unset; ``{}`` when set to one of ``wanted``."""
    mech = conf.get("sasl.mechanism", conf.get("sasl.mechanisms"))
    if mech is None:
        return {"sasl.mechanism": wanted[0]}
    if str(mech).upper() not in wanted:
        raise ConfigError("kafka_conf['sasl.mechanism']", f"is {mech!r}, but sasl.jaas.config's {module} "
                                                          f"needs {' or '.join(wanted)}")
    return {}


def _credentials(entry: JaasEntry, opts: Mapping[str, str]) -> dict[str, str]:
    for key in ("username", "password"):
        if not opts.get(key):
            raise _fail(f"{entry.module.rsplit('.', 1)[-1]} needs a non-empty {key}")
    return {"sasl.username": opts["username"], "sasl.password": opts["password"]}


def _oauth(entry: JaasEntry, conf: Mapping[str, str]) -> dict[str, str]:
    opts = _only(entry, ("clientId", "clientSecret", "scope"), prefix="extension_")
    out = _mechanism(conf, "OAuthBearerLoginModule", ("OAUTHBEARER",))
    top_level = conf.get("sasl.oauthbearer.client.id", conf.get("sasl.oauthbearer.client.credentials.client.id"))
    if not (opts.get("clientId") or top_level):
        if "oauth_cb" in conf:
            return out  # the token comes from the user's provider
        raise _fail("OAuthBearerLoginModule names no client: give clientId and clientSecret (with "
                    "sasl.oauthbearer.token.endpoint.url: librdkafka's OIDC client), or an oauth_cb reference "
                    "('package.module:function') that returns tokens")
    if not conf.get("sasl.oauthbearer.token.endpoint.url"):
        raise ConfigError("kafka_conf['sasl.oauthbearer.token.endpoint.url']",
                          "is required with sasl.jaas.config's clientId: librdkafka's OIDC client "
                          "(sasl.oauthbearer.method=oidc) fetches its tokens there")
    out["sasl.oauthbearer.method"] = "oidc"
    for key, name in (("clientId", "client.id"), ("clientSecret", "client.secret"), ("scope", "scope")):
        if key in opts:
            out[f"sasl.oauthbearer.{name}"] = opts[key]
    ext = {k[len("extension_"):]: v for k, v in opts.items() if k.startswith("extension_")}
    if any(not k or "," in k + v or "=" in k for k, v in ext.items()):
        raise _fail("an extension_<name> option whose name is empty or holds ',' or '=', or whose value holds ',': "
                    "librdkafka's sasl.oauthbearer.extensions is a comma-separated list of name=value")
    if ext:
        out["sasl.oauthbearer.extensions"] = ",".join(f"{k}={v}" for k, v in ext.items())
    return out


def jaas_settings(text: str, conf: Mapping[str, str]) -> dict[str, str]:
    """The librdkafka settings a ``sasl.jaas.config`` value stands for, given the rest of ``conf``.

    * PlainLoginModule: ``sasl.username``, ``sasl.password``, ``sasl.mechanism=PLAIN`` unless set;
    * ScramLoginModule: ``sasl.username``, ``sasl.password``; ``sasl.mechanism`` must say SCRAM-SHA-256/512;
    * OAuthBearerLoginModule: with ``clientId`` (and ``sasl.oauthbearer.token.endpoint.url``),
      librdkafka's OIDC client (``sasl.oauthbearer.method=oidc``, ``...client.id``, ``...client.secret``,
      ``...scope``, ``extension_<name>`` options as ``sasl.oauthbearer.extensions``); without, an
      ``oauth_cb`` must give the tokens. ``sasl.mechanism=OAUTHBEARER`` unless set.

    Raises:
        ConfigError: the string cannot be read, a module librdkafka has no counterpart for (named with
            what to use instead), an option or mechanism that does not fit; never quoting a value.
    """
    entry = parse(text)
    if entry.module == PLAIN:
        opts = _only(entry, ("username", "password"))
        return {**_mechanism(conf, "PlainLoginModule", ("PLAIN",)), **_credentials(entry, opts)}
    if entry.module == SCRAM:
        opts = _only(entry, ("username", "password", "tokenauth"))
        if opts.get("tokenauth", "false").lower() != "false":
            raise _fail("ScramLoginModule's tokenauth (a delegation token) has no librdkafka counterpart: "
                        "authenticate with the user's own SCRAM credentials, or OAUTHBEARER")
        if conf.get("sasl.mechanism", conf.get("sasl.mechanisms")) is None:
            raise ConfigError("kafka_conf['sasl.mechanism']", "is required with sasl.jaas.config's ScramLoginModule: "
                                                              "SCRAM-SHA-256 or SCRAM-SHA-512")
        _mechanism(conf, "ScramLoginModule", ("SCRAM-SHA-256", "SCRAM-SHA-512"))
        return _credentials(entry, opts)
    if entry.module == OAUTH:
        return _oauth(entry, conf)
    instead = _INSTEAD.get(entry.module)
    named = entry.module if instead or _CLASS_RE.match(entry.module) else "its login module"
    raise ConfigError(OPTION, f"{named} is a login module librdkafka has no counterpart for: " + (instead or (
        "librdkafka reads PlainLoginModule, ScramLoginModule and OAuthBearerLoginModule (org.apache.kafka.common."
        "security.*); otherwise set librdkafka's sasl.mechanism with sasl.username / sasl.password, an oauth_cb "
        "reference, or sasl.kerberos.*")))


# -- the other SASL settings of the Java client whose values librdkafka reads otherwise (javaconf.TABLE) --------

_OIDC_HANDLERS = {"org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler",
                  "org.apache.kafka.common.security.oauthbearer.secured.OAuthBearerLoginCallbackHandler"}
CALLBACK = ("a Java class, which librdkafka cannot run: for tokens made by your code give an oauth_cb reference "
            "('package.module:function', see the sink's auth module) with sasl.mechanism=OAUTHBEARER")


def sasl_mechanism(v: str, conf: Mapping[str, str]) -> dict[str, str]:
    """``sasl.mechanism`` unchanged; Java's MSK IAM plug-in mechanism refused (ConfigError) with what to use."""
    if str(v).upper() == "AWS_MSK_IAM":
        raise ConfigError("kafka_conf['sasl.mechanism']", "AWS_MSK_IAM is a Java plug-in, not a librdkafka mechanism: "
                          "use sasl.mechanism=OAUTHBEARER with an oauth_cb reference ('package.module:function') "
                          "returning an MSK IAM token (e.g. from aws-msk-iam-sasl-signer-python)")
    return {"sasl.mechanism": v}


def token_url(v: str, conf: Mapping[str, str]) -> dict[str, str]:
    """``sasl.oauthbearer.token.endpoint.url`` unchanged; Java's ``file:`` URL (a token file) refused (ConfigError)."""
    if str(v).lower().startswith("file:"):
        raise ConfigError("kafka_conf['sasl.oauthbearer.token.endpoint.url']", "a file of tokens has no librdkafka "
                          "setting: give an oauth_cb reference ('package.module:function') that reads it")
    return {"sasl.oauthbearer.token.endpoint.url": v}


def login_handler(v: str, conf: Mapping[str, str]) -> dict[str, str]:
    """Kafka's own OIDC login handler: nothing (``sasl.jaas.config`` gives the oidc method).

    Raises:
        ConfigError: another class (librdkafka runs no Java), naming ``oauth_cb``.
    """
    if str(v).strip().removeprefix(SHADED_PREFIX) in _OIDC_HANDLERS:
        return {}
    raise ConfigError("kafka_conf['sasl.login.callback.handler.class']", CALLBACK)


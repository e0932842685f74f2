"""The Java producer's settings, as users of Spark's ``format("kafka")`` write them, in librdkafka's terms.

:data:`TABLE` is the one list of what the sink does with each setting of the
Java producer: ``same`` (librdkafka has the setting under that name, passed
unchanged), ``mapped`` (another name and, where units differ, another value),
``ignored`` (dropped, whatever its value: librdkafka has no counterpart and
needs none; the reason says why that is harmless, and the sink logs the
settings it ignored) or ``refused`` (a :class:`.ConfigError` naming what
librdkafka does the job with). :func:`to_librdkafka` applies it; :meth:`.SinkConfig.build`
calls it, so every entry point (``kafka_conf``, the data source's ``kafka.*``
options, job templates, ``rks --kafka-conf``) gets the same mapping, and every
client built from the sink's configuration sees librdkafka's names only. The
migration guide's table (``docs/migrating-from-spark-kafka.md``) is rendered from :data:`TABLE`.
The converters of the SASL settings (``sasl.jaas.config`` above all) are in
:mod:`.jaas`, those of keystores and truststores in :mod:`.auth`.

Pure and driver-side (wherever a configuration is built); idempotent: a
librdkafka configuration maps onto itself. No error here quotes a value of a
secret option.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping

from .auth import keystore, keystore_password, store_type_check, truststore
from .errors import ConfigError
from .jaas import CALLBACK, jaas_settings, login_handler, sasl_mechanism, token_url

__all__ = ["JavaSetting", "TABLE", "BY_NAME", "SAME", "MAPPED", "IGNORED", "REFUSED", "to_librdkafka", "ignored"]

SAME, MAPPED, IGNORED, REFUSED = "same", "mapped", "ignored", "refused"
Convert = Callable[[str, Mapping[str, str]], dict]


@dataclass(frozen=True)
class JavaSetting:
    """One Java producer setting: its status, the librdkafka setting(s) doing its job, and why."""

    java: str
    status: str
    librdkafka: str
    reason: str
    convert: Convert | None = field(default=None, repr=False, compare=False)


def _opt(name: str) -> str:
    return f"kafka_conf[{name!r}]"


def _int(name: str, value: str, low: int) -> int:
    try:
        n = int(str(value).strip())
    except ValueError:
        n = low - 1
    if n < low:
        raise ConfigError(_opt(name), f"must be a whole number >= {low}, got {value!r}")
    return n


def _to(target: str) -> Convert:
    return lambda v, conf: {target: v}


def _ignore(v: str, conf: Mapping[str, str]) -> dict:
    return {}


def _socket_buffer(java: str, target: str) -> Convert:
    return lambda v, conf: {target: str(max(0, _int(java, v, -1)))}


def _buffer_memory(v: str, conf: Mapping[str, str]) -> dict:
    n = _int("buffer.memory", v, 0)
    return {"queue.buffering.max.kbytes": str(max(1, -(-n // 1024)))}


def _level(codec: str) -> Convert:
    def convert(v: str, conf: Mapping[str, str]) -> dict:
        used = str(conf.get("compression.type", conf.get("compression.codec", "none"))).lower()
        return {"compression.level": v} if used == codec else {}
    return convert


def _ignore_keys(v: str, conf: Mapping[str, str]) -> dict:
    if str(v).lower() not in ("true", "false"):
        raise ConfigError(_opt("partitioner.ignore.keys"), f"must be true or false, got {v!r}")
    return {"partitioner": "random"} if str(v).lower() == "true" else {}


def _endpoint_check(v: str, conf: Mapping[str, str]) -> dict:
    return {"ssl.endpoint.identification.algorithm": str(v).strip().lower() or "none"}


def _ciphers(v: str, conf: Mapping[str, str]) -> dict:
    if "_WITH_" in str(v).upper():
        raise ConfigError(_opt("ssl.cipher.suites"), "names suites the Java way (TLS_..._WITH_...); librdkafka takes "
                          "OpenSSL's names, e.g. ECDHE-RSA-AES128-GCM-SHA256 (openssl ciphers -stdname lists both)")
    return {"ssl.cipher.suites": v}


def _s(java: str, reason: str = "", convert: Convert | None = None, alias: str = "") -> JavaSetting:
    return JavaSetting(java, SAME, java + (f" (alias of {alias})" if alias else ""), reason or "Same meaning.", convert)


def _m(java: str, lib: str, reason: str, convert: Convert) -> JavaSetting:
    return JavaSetting(java, MAPPED, lib, reason, convert)


def _i(java: str, reason: str) -> JavaSetting:
    """Ignored: dropped whatever its value; ``reason`` says why that is harmless."""
    return JavaSetting(java, IGNORED, "—", reason, _ignore)


def _r(java: str, lib: str, reason: str) -> JavaSetting:
    return JavaSetting(java, REFUSED, lib, reason)


def _u(java: str, lib: str, reason: str, empty: tuple[str, ...] = ("",)) -> JavaSetting:
    """Refused unless empty (or another value meaning "none"): the reason is the error's."""
    def convert(v: str, conf: Mapping[str, str]) -> dict:
        if str(v).strip().lower() in empty:
            return {}
        raise ConfigError(_opt(java), reason)
    unless = "empty" + (" or false" if "false" in empty else "")
    return JavaSetting(java, REFUSED, lib, f"Refused unless {unless}: {reason}.", convert)


_KEYLESS = "Only spreads keyless records; librdkafka's sticky partitioner (sticky.partitioning.linger.ms) does that"
TABLE: tuple[JavaSetting, ...] = (
    _s("bootstrap.servers", "Comma-separated host:port, as in Java.", alias="metadata.broker.list"),
    _s("acks", "all, -1, 0, 1 alike (all = -1); the sink sets all unless given. 0 or 1 need "
       "enable.idempotence=false: Java turns idempotence off by itself, librdkafka refuses.",
       alias="request.required.acks"),
    _s("enable.idempotence", "The sink sets true unless given (Java's default is true too)."),
    _s("retries", "Default 2147483647 in both; 0 needs enable.idempotence=false (as acks).",
       alias="message.send.max.retries"),
    _s("delivery.timeout.ms", "Milliseconds. Default 120000 in Java, 300000 in librdkafka; librdkafka's 0 means "
       "no limit. Exactly-once needs it <= transaction.timeout.ms (default 60000).", alias="message.timeout.ms"),
    _s("request.timeout.ms", "Milliseconds, the broker's ack timeout of a produce request. librdkafka's own "
       "wait for any request is socket.timeout.ms (default 60000)."),
    _s("linger.ms", "Milliseconds; default 5 in librdkafka and Java 4.0+ (0 before); librdkafka's maximum is "
       "900000.", alias="queue.buffering.max.ms"),
    _s("batch.size", "Bytes per batch (librdkafka counts the batch's framing too). Default 16384 in Java, 1000000 in "
       "librdkafka. Java's 0 (no batching) is refused by librdkafka: use 1."),
    _s("compression.type", "none, gzip, snappy, lz4, zstd in both.", alias="compression.codec"),
    _s("max.in.flight.requests.per.connection", "Default 5 in Java; librdkafka sets 5 with idempotence (more needs "
       "enable.idempotence=false, as acks).",
       alias="max.in.flight"),
    _s("retry.backoff.ms", "Milliseconds; default 100 in both (librdkafka's minimum is 1)."),
    _s("retry.backoff.max.ms", "Milliseconds; default 1000 in both."),
    _s("reconnect.backoff.ms", "Milliseconds; default 50 in Java, 100 in librdkafka."),
    _s("reconnect.backoff.max.ms", "Milliseconds; default 1000 in Java, 10000 in librdkafka."),
    _s("connections.max.idle.ms", "Milliseconds; default 540000 in Java, 0 (never closed) in librdkafka."),
    _s("socket.connection.setup.timeout.ms", "Milliseconds. librdkafka's is the whole setup's limit (default "
       "30000, minimum 1000), Java's the first attempt's (default 10000, growing to its .max.ms)."),
    _s("metadata.max.age.ms", "Milliseconds, but not the same job: librdkafka's is the metadata cache's age; "
       "Java's proactive refresh is librdkafka's topic.metadata.refresh.interval.ms (default 300000 in both)."),
    _s("client.id", "Default producer-<n> in Java, rdkafka in librdkafka."),
    _s("client.dns.lookup", "use_all_dns_ips or resolve_canonical_bootstrap_servers_only in both."),
    _s("transaction.timeout.ms", "Milliseconds; exactly-once checks it against delivery.timeout.ms."),
    _s("enable.metrics.push"),
    _s("metadata.recovery.strategy", "none or rebootstrap in both."),
    _s("metadata.recovery.rebootstrap.trigger.ms"),
    _s("security.protocol", "PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL (any case)."),
    _s("sasl.mechanism", "GSSAPI, PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER. AWS_MSK_IAM is refused: "
       "OAUTHBEARER with an oauth_cb.", sasl_mechanism, alias="sasl.mechanisms"),
    _s("sasl.kerberos.service.name"),
    _s("sasl.kerberos.min.time.before.relogin", "Milliseconds in both."),
    _s("sasl.oauthbearer.token.endpoint.url", "An https URL (used with sasl.jaas.config's clientId); a file: URL "
       "is refused: read the file in an oauth_cb.", token_url),
    _s("sasl.oauthbearer.sub.claim.name"),
    _s("sasl.oauthbearer.scope", "Java 4.1's top-level setting; the same in librdkafka (OIDC)."),
    _s("sasl.oauthbearer.client.credentials.client.id", "Java 4.1's top-level setting.",
       alias="sasl.oauthbearer.client.id"),
    _s("sasl.oauthbearer.client.credentials.client.secret", "Java 4.1's top-level setting.",
       alias="sasl.oauthbearer.client.secret"),
    _s("ssl.key.password", "The private key's passphrase."),
    _s("ssl.keystore.password", "PKCS#12 keystore password; refused with a PEM keystore, as in Java.",
       keystore_password),
    _s("ssl.cipher.suites", "OpenSSL's names (ECDHE-RSA-AES128-GCM-SHA256); Java's IANA names "
       "(TLS_..._WITH_...) are refused.", _ciphers),
    _m("ssl.keystore.location", "ssl.keystore.location (PKCS#12); PEM type: ssl.key.location + "
       "ssl.certificate.location", "librdkafka's keystore is PKCS#12: kept for PKCS12, split for PEM; a JKS "
       "keystore (Java's default type, or a JKS file found here) is refused.", keystore),
    _m("ssl.keystore.type", "—", "Decides how ssl.keystore.location is read (JKS, PKCS12, PEM).",
       store_type_check("ssl.keystore.type")),
    _m("ssl.keystore.key", "ssl.key.pem", "The PEM private key as a value.", _to("ssl.key.pem")),
    _m("ssl.keystore.certificate.chain", "ssl.certificate.pem", "The PEM certificate chain as a value.",
       _to("ssl.certificate.pem")),
    _m("ssl.truststore.location", "ssl.ca.location", "With ssl.truststore.type=PEM. A JKS or PKCS#12 "
       "truststore (Java's default type is JKS) is refused: export it as PEM.",
       truststore("ssl.ca.location", "ssl.truststore.location")),
    _m("ssl.truststore.certificates", "ssl.ca.pem", "PEM certificates as a value.",
       truststore("ssl.ca.pem", "ssl.truststore.certificates")),
    _m("ssl.truststore.type", "—", "Decides how the truststore is read: only PEM has a librdkafka counterpart.",
       store_type_check("ssl.truststore.type")),
    _i("ssl.truststore.password", "A JKS/PKCS#12 truststore's password (those are refused); PEM CA "
       "certificates have none."),
    _m("ssl.endpoint.identification.algorithm", "ssl.endpoint.identification.algorithm",
       "https stays https; Java's empty value (no hostname check) is librdkafka's none.", _endpoint_check),
    _m("max.request.size", "message.max.bytes", "Bytes, the largest request (and so record). Default 1048576 in "
       "Java, 1000000 in librdkafka (range 1000..1000000000).", _to("message.max.bytes")),
    _m("buffer.memory", "queue.buffering.max.kbytes", "Bytes -> KiB (1024 bytes), rounded up; Java's default "
       "33554432 is 32768. librdkafka also caps the queue at queue.buffering.max.messages (100000).",
       _buffer_memory),
    _m("send.buffer.bytes", "socket.send.buffer.bytes", "Bytes; Java's -1 (the OS default) is librdkafka's 0.",
       _socket_buffer("send.buffer.bytes", "socket.send.buffer.bytes")),
    _m("receive.buffer.bytes", "socket.receive.buffer.bytes", "Bytes; Java's -1 (the OS default) is librdkafka's 0.",
       _socket_buffer("receive.buffer.bytes", "socket.receive.buffer.bytes")),
    _m("compression.gzip.level", "compression.level", "When compression.type is gzip (else ignored): 0..9 in "
       "librdkafka, -1 the codec's default in both.", _level("gzip")),
    _m("compression.lz4.level", "compression.level", "When compression.type is lz4 (else ignored): 0..12 in "
       "librdkafka (Java's 13..17 are refused).", _level("lz4")),
    _m("compression.zstd.level", "compression.level", "When compression.type is zstd (else ignored): -1..12 "
       "in librdkafka (Java's 13..22 and levels below -1 are refused).", _level("zstd")),
    _m("partitioner.ignore.keys", "partitioner", "true: partitioner=random (keys ignored; exactly-once refuses it); "
       "false: nothing to set.", _ignore_keys),
    _m("sasl.jaas.config", "sasl.username, sasl.password, sasl.mechanism, sasl.oauthbearer.*",
       "Parsed: PlainLoginModule and ScramLoginModule give username and password, OAuthBearerLoginModule's "
       "clientId/clientSecret/scope/extension_* librdkafka's OIDC client (sasl.oauthbearer.method=oidc). Other "
       "login modules are refused (Kerberos: sasl.kerberos.*; MSK IAM: OAUTHBEARER with an oauth_cb).", jaas_settings),
    _m("sasl.login.callback.handler.class", "sasl.oauthbearer.method=oidc", "Kafka's own "
       "OAuthBearerLoginCallbackHandler is librdkafka's OIDC client (from sasl.jaas.config); any other class is "
       "refused: oauth_cb.", login_handler),
    _s("sasl.kerberos.kinit.cmd", "Not the same value: Java's is the kinit binary (default /usr/bin/kinit), "
       "librdkafka's the whole command it runs (default: kinit -R -t \"%{sasl.kerberos.keytab}\" -k "
       "%{sasl.kerberos.principal} || kinit -t ... -k ...); give librdkafka's, as Kerberos's JAAS string is "
       "refused anyway."),
    _i("max.block.ms", "librdkafka's produce never blocks; the sink bounds its own wait for room in the "
       "client's queue (max_block_s, at most the delivery timeout) and retries from the WAL."),
    _i("metadata.max.idle.ms", "How long the Java client keeps an idle topic's metadata; no effect on "
       "delivery."),
    _i("partitioner.adaptive.partitioning.enable", _KEYLESS + "."),
    _i("partitioner.availability.timeout.ms", _KEYLESS + "."),
    _i("socket.connection.setup.timeout.max.ms", "librdkafka has one limit, "
       "socket.connection.setup.timeout.ms (default 30000, Java's max default); set that."),
    _i("metrics.sample.window.ms", "The Java client's metrics; librdkafka's: statistics.interval.ms."),
    _i("metrics.num.samples", "The Java client's metrics."),
    _i("metrics.recording.level", "The Java client's metrics."),
    _i("ssl.protocol", "OpenSSL negotiates the highest TLS version both sides allow."),
    _i("ssl.enabled.protocols", "OpenSSL negotiates the highest TLS version both sides allow (the "
       "broker's ssl.enabled.protocols decides)."),
    _i("ssl.provider", "The JSSE provider; librdkafka uses OpenSSL (ssl.providers for OpenSSL 3 "
       "providers)."),
    _i("ssl.keymanager.algorithm", "A JSSE algorithm name; OpenSSL needs none."),
    _i("ssl.trustmanager.algorithm", "A JSSE algorithm name; OpenSSL needs none."),
    _i("ssl.secure.random.implementation", "OpenSSL uses its own random source."),
    _i("sasl.kerberos.ticket.renew.window.factor", "librdkafka renews with kinit every "
       "sasl.kerberos.min.time.before.relogin."),
    _i("sasl.kerberos.ticket.renew.jitter", "See sasl.kerberos.ticket.renew.window.factor."),
    *(_i(f"sasl.login.{n}", "librdkafka's OIDC client refreshes tokens on its own schedule (at 80% "
         "of their lifetime) and times out its own requests.")
      for n in ("refresh.window.factor", "refresh.window.jitter", "refresh.min.period.seconds",
                "refresh.buffer.seconds", "connect.timeout.ms", "read.timeout.ms", "retry.backoff.ms",
                "retry.backoff.max.ms")),
    _i("sasl.oauthbearer.scope.claim.name", "The Java client's check of its own token; the broker "
       "checks the token."),
    _u("interceptor.classes", "plugin.library.paths", "Java interceptor classes cannot run in librdkafka, whose "
       "interceptors are C plugins loaded with plugin.library.paths (e.g. Confluent's monitoring-interceptor)"),
    _u("metric.reporters", "statistics.interval.ms", "Java metric reporter classes cannot run in librdkafka: set "
       "statistics.interval.ms (its statistics reach the sink's reports) and the sink's metrics_port (Prometheus)"),
    _u("config.providers", "—", "Java config providers do not run here: give values, or {\"env\": \"VAR\"} in "
       "job settings and rks --kafka-conf files"),
    _u("transaction.two.phase.commit.enable", "—", "two-phase commit has no librdkafka counterpart: the sink's "
       "guarantee='exactly_once' runs its own transactions", ("", "false")),
    _r("transactional.id", "—", "the sink sets it itself (exactly-once: one per transactional producer it runs)"),
    _r("key.serializer", "—", "Spark's format(\"kafka\") refuses it too: keys are bytes; give the key column as "
       "binary or string, or the sink's key_format= (Avro / JSON Schema with a registry)"),
    _r("value.serializer", "—", "Spark's format(\"kafka\") refuses it too: values are bytes; give the value column "
       "as binary or string, or the sink's value_format= (Avro / JSON Schema with a registry)"),
    _r("partitioner.class", "partitioner", "a Java class, which librdkafka cannot run: use partitioner "
       "(murmur2_random, the sink's default, is the Java client's default partitioner; random for keys ignored)"),
    _r("sasl.client.callback.handler.class", "oauth_cb", CALLBACK),
    _r("sasl.login.class", "oauth_cb", CALLBACK),
    _r("security.providers", "ssl.providers", "a Java class, which librdkafka cannot run: OpenSSL 3 providers "
       "are ssl.providers"),
    _r("ssl.engine.factory.class", "ssl.providers", "a Java class, which librdkafka cannot run: OpenSSL 3 "
       "providers are ssl.providers, the CA and client certificate ssl.ca.* / ssl.certificate.* / ssl.key.*"),
)
BY_NAME = {s.java: s for s in TABLE}
#: librdkafka's aliases, by the name they stand for: two names of one setting must agree.
_CANON = {s.java: s.librdkafka.split("(alias of ")[1][:-1] for s in TABLE if "(alias of " in s.librdkafka}


def _norm(canon: str, value: str) -> str:
    v = str(value).strip().lower()
    return "-1" if canon == "request.required.acks" and v == "all" else v


def ignored(conf: Mapping[str, str]) -> list[str]:
    """The Java settings of ``conf`` that :func:`to_librdkafka` drops (status :data:`IGNORED`), sorted."""
    return sorted(k for k in conf if k in BY_NAME and BY_NAME[k].status == IGNORED)


def to_librdkafka(conf: Mapping[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """``(librdkafka configuration, origin)``: ``conf`` with every Java setting mapped (:data:`TABLE`).

    ``origin`` maps each librdkafka name a Java setting gave to that setting's name (to name it in
    errors). Names :data:`TABLE` does not hold pass unchanged (librdkafka judges them).

    Raises:
        ConfigError: naming the refused setting and the librdkafka one that does its job; or two
            settings (a Java one and its librdkafka equivalent, or two librdkafka aliases) that give
            one setting different values (never quoting them).
    """
    out: dict[str, str] = {}
    origin: dict[str, str] = {}
    given: dict[str, str] = {}  # librdkafka's name of a setting -> the name it is set under

    def put(name: str, value: str, source: str) -> None:
        canon = _CANON.get(name, name)
        if canon not in given:
            given[canon], out[name] = name, value
            if source != name:
                origin[name] = source
        elif _norm(canon, out[given[canon]]) != _norm(canon, value):
            other = origin.get(given[canon], given[canon])
            how = f"gives {name}, which kafka_conf also sets as {other!r}," if source != name else \
                f"is the same setting as {other!r} (librdkafka's {canon}) but"
            raise ConfigError(_opt(source), f"{how} with another value: keep one of them")

    for name, value in conf.items():  # librdkafka's settings first: a Java one's result must agree with them
        entry = BY_NAME.get(name)
        if entry is None or entry.convert is None and entry.status == SAME:
            put(name, value, name)
    for name in sorted(conf):
        entry = BY_NAME.get(name)
        if entry is None or entry.convert is None and entry.status == SAME:
            continue
        if entry.convert is None:
            raise ConfigError(_opt(name), entry.reason)
        for k, v in entry.convert(conf[name], conf).items():
            put(k, v, name)
    return out, origin

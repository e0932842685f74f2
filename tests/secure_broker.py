"""A real Kafka broker that authenticates as users configure it: SASL PLAIN and SCRAM, OAUTHBEARER (JWT), TLS.

Everything secret is made here, per test session, with ``cryptography``:

* a CA and a server certificate for ``127.0.0.1``/``localhost`` (SAN IP and
  DNS), as PEM files; the broker reads its key and chain from one PEM file
  (``ssl.keystore.type=PEM``, KIP-651), clients get the CA as a file or a value;
* an RSA signing key and its JWKS; :func:`sign_jwt` signs RS256 JWTs with it
  (no JWT library), which the broker checks with Kafka's own
  ``OAuthBearerValidatorCallbackHandler`` against that JWKS file;
* random passwords for a PLAIN user (static JAAS) and a SCRAM-SHA-512 user
  (added when the storage is formatted).

The signing keys live in :func:`jwt_dir`, a path derived from ``RKS_HOOK_DIR``
(set by ``tests/conftest.py`` at import): every process of the session,
Spark's Python workers included, finds them there without a variable of its
own, so ``tests.token_provider:signed`` works wherever a client is built.
"""

from __future__ import annotations

import base64
import datetime as dt
import ipaddress
import json
import os
import secrets
import shutil
import time
from dataclasses import dataclass, field
from typing import Any, Mapping

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = ["ISSUER", "AUDIENCE", "SUBJECT", "KID", "jwt_dir", "sign_jwt", "make_token", "TlsFiles",
           "write_tls_material", "write_jwt_material", "secure_listeners", "SecureBroker", "start_secure_broker"]

ISSUER = "https://idp.rks-test.invalid"
AUDIENCE = "rks-test-kafka"
SUBJECT = "rks-writer"
KID = "rks-test-key-1"
KEY_FILE = "signing-key.pem"        # the key the broker's JWKS names
FORGED_KEY_FILE = "forged-key.pem"  # another key, same kid: its tokens must be refused
JWKS_FILE = "jwks.json"
_VALIDATOR = "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler"


def jwt_dir() -> str:
    """Where the signing keys are: ``$RKS_TEST_JWT_DIR``, else ``$RKS_HOOK_DIR`` + ``-jwt`` (a sibling, not inside:
    the ``hooks`` fixture empties ``RKS_HOOK_DIR`` between tests)."""
    explicit = os.environ.get("RKS_TEST_JWT_DIR")
    if explicit:
        return explicit
    return os.environ["RKS_HOOK_DIR"].rstrip(os.sep) + "-jwt"


# -- JWT ----------------------------------------------------------------------------------------


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _int_b64url(n: int) -> str:
    return _b64url(n.to_bytes((n.bit_length() + 7) // 8, "big"))


def _load_key(path: str) -> rsa.RSAPrivateKey:
    with open(path, "rb") as f:
        key = serialization.load_pem_private_key(f.read(), password=None)
    assert isinstance(key, rsa.RSAPrivateKey)
    return key


def sign_jwt(key: rsa.RSAPrivateKey, claims: Mapping[str, Any], kid: str = KID) -> str:
    """A compact RS256 JWS of ``claims``: base64url(header).base64url(payload).base64url(signature)."""
    header = {"alg": "RS256", "typ": "JWT", "kid": kid}
    signing_input = ".".join(_b64url(json.dumps(part, separators=(",", ":")).encode())
                             for part in (header, dict(claims)))
    signature = key.sign(signing_input.encode("ascii"), padding.PKCS1v15(), hashes.SHA256())
    return f"{signing_input}.{_b64url(signature)}"


def make_token(*, lifetime_s: float = 3600.0, forged: bool = False, directory: str | None = None,
               subject: str = SUBJECT) -> tuple[str, float]:
    """``(jwt, exp)``: a token for the broker's OAUTH listener, signed with the session's key (or the forged one).

    A negative ``lifetime_s`` makes a token that expired that long ago.
    """
    now = int(time.time())
    exp = now + int(lifetime_s)
    iat = min(now, exp - 60)
    claims = {"iss": ISSUER, "aud": AUDIENCE, "sub": subject, "iat": iat, "nbf": iat, "exp": exp,
              "scope": "kafka-produce", "jti": secrets.token_hex(8)}
    key = _load_key(os.path.join(directory or jwt_dir(), FORGED_KEY_FILE if forged else KEY_FILE))
    return sign_jwt(key, claims), float(exp)


def _new_rsa() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _pem_key(key: rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _write(path: str, data: bytes, mode: int = 0o600) -> str:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    return path


def write_jwt_material(directory: str) -> str:
    """The signing key, a forged key (same ``kid``) and the JWKS naming only the first; returns the JWKS path."""
    os.makedirs(directory, mode=0o700, exist_ok=True)
    key, forged = _new_rsa(), _new_rsa()
    _write(os.path.join(directory, KEY_FILE), _pem_key(key))
    _write(os.path.join(directory, FORGED_KEY_FILE), _pem_key(forged))
    pub = key.public_key().public_numbers()
    jwks = {"keys": [{"kty": "RSA", "use": "sig", "alg": "RS256", "kid": KID, "n": _int_b64url(pub.n),
                      "e": _int_b64url(pub.e)}]}
    return _write(os.path.join(directory, JWKS_FILE), json.dumps(jwks).encode(), 0o644)


# -- TLS ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TlsFiles:
    """PEM files: the CA's certificate (what clients trust) and the broker's key followed by its chain."""

    ca_path: str
    keystore_path: str

    @property
    def ca_pem(self) -> str:
        with open(self.ca_path) as f:
            return f.read()


def _cert(subject: str, issuer: x509.Name | None, key: rsa.RSAPrivateKey, signer: rsa.RSAPrivateKey,
          *, ca: bool) -> x509.Certificate:
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
    now = dt.datetime.now(dt.timezone.utc)
    b = (x509.CertificateBuilder().subject_name(name).issuer_name(issuer or name).public_key(key.public_key())
         .serial_number(x509.random_serial_number()).not_valid_before(now - dt.timedelta(minutes=5))
         .not_valid_after(now + dt.timedelta(days=2))
         .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
         .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False))
    if ca:
        b = b.add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=False,
                                          data_encipherment=False, key_agreement=False, key_cert_sign=True,
                                          crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
    else:
        b = (b.add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost"),
                                                          x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                             critical=False)
             .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
             .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(signer.public_key()),
                            critical=False))
    return b.sign(signer, hashes.SHA256())


def write_tls_material(directory: str) -> TlsFiles:
    """A CA and a server certificate for ``127.0.0.1``/``localhost`` signed by it, as PEM files in ``directory``."""
    os.makedirs(directory, mode=0o700, exist_ok=True)
    ca_key, server_key = _new_rsa(), _new_rsa()
    ca = _cert("rks-test-ca", None, ca_key, ca_key, ca=True)
    server = _cert("localhost", ca.subject, server_key, ca_key, ca=False)
    pem = serialization.Encoding.PEM
    ca_path = _write(os.path.join(directory, "ca.pem"), ca.public_bytes(pem), 0o644)
    _write(os.path.join(directory, "ca-key.pem"), _pem_key(ca_key))
    keystore = _write(os.path.join(directory, "server-keystore.pem"),
                      _pem_key(server_key) + server.public_bytes(pem) + ca.public_bytes(pem))
    return TlsFiles(ca_path, keystore)


# -- the broker -----------------------------------------------------------------------------------


def secure_listeners(tls: TlsFiles, jwks_path: str, plain_users: Mapping[str, str]) -> tuple[Any, ...]:
    """``SASL_PLAIN`` (PLAIN + SCRAM-SHA-512), ``OAUTH`` (OAUTHBEARER, JWTs checked against ``jwks_path``), ``SSL``."""
    from devtools.kafka_broker import Listener

    users = " ".join(f'user_{u}="{p}"' for u, p in plain_users.items())
    sasl = Listener("SASL_PLAIN", "SASL_PLAINTEXT", ("PLAIN", "SCRAM-SHA-512"), {
        "plain.sasl.jaas.config": f"org.apache.kafka.common.security.plain.PlainLoginModule required {users};",
        "scram-sha-512.sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required;",
    })
    oauth = Listener("OAUTH", "SASL_PLAINTEXT", ("OAUTHBEARER",), {
        "oauthbearer.sasl.server.callback.handler.class": _VALIDATOR,
        "oauthbearer.sasl.jaas.config": "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;",
        "sasl.oauthbearer.jwks.endpoint.url": f"file://{jwks_path}",
        "sasl.oauthbearer.expected.audience": AUDIENCE,
        "sasl.oauthbearer.expected.issuer": ISSUER,
    })
    ssl = Listener("SSL", "SSL", (), {"ssl.keystore.type": "PEM", "ssl.keystore.location": tls.keystore_path,
                                      "ssl.client.auth": "none"})
    return sasl, oauth, ssl


@dataclass
class SecureBroker:
    """The started broker and what clients need: bootstraps, users, the CA. Passwords are random per session."""

    broker: Any  # devtools.kafka_broker.KafkaBroker
    tls: TlsFiles
    jwt_dir: str
    plain_users: dict[str, str] = field(default_factory=dict)
    scram_users: dict[str, str] = field(default_factory=dict)

    @property
    def bootstrap(self) -> str:
        """The PLAINTEXT listener: for creating and reading topics."""
        return self.broker.bootstrap

    @property
    def sasl_bootstrap(self) -> str:
        return self.broker.bootstrap_for("SASL_PLAIN")

    @property
    def oauth_bootstrap(self) -> str:
        return self.broker.bootstrap_for("OAUTH")

    @property
    def ssl_bootstrap(self) -> str:
        return self.broker.bootstrap_for("SSL")

    @property
    def ca_path(self) -> str:
        return self.tls.ca_path

    @property
    def ca_pem(self) -> str:
        return self.tls.ca_pem

    def token(self, lifetime_s: float = 3600.0, forged: bool = False) -> tuple[str, float]:
        """A JWT for the OAUTH listener (see :func:`make_token`)."""
        return make_token(lifetime_s=lifetime_s, forged=forged, directory=self.jwt_dir)

    def log_offset(self) -> int:
        """The broker log's size now: :meth:`log_since` it reads what the broker logged after."""
        return os.path.getsize(self.broker.log_path)

    def log_since(self, offset: int) -> str:
        with open(self.broker.log_path, "rb") as f:
            f.seek(offset)
            return f.read().decode(errors="replace")

    def secrets(self) -> list[str]:
        """Every secret of the session a report, error or log line must never show (private keys included)."""
        out = [*self.plain_users.values(), *self.scram_users.values()]
        tls = os.path.dirname(self.tls.ca_path)
        for path in (os.path.join(self.jwt_dir, KEY_FILE), os.path.join(self.jwt_dir, FORGED_KEY_FILE),
                     os.path.join(tls, "ca-key.pem"), self.tls.keystore_path):
            with open(path) as f:
                key = f.read().split("-----BEGIN PRIVATE KEY-----")[1].split("-----END PRIVATE KEY-----")[0]
            out += [ln for ln in key.splitlines() if ln]
        return out

    def stop(self) -> None:
        self.broker.stop()
        shutil.rmtree(self.jwt_dir, ignore_errors=True)


def start_secure_broker(workdir: str) -> SecureBroker:
    """Make the material under ``workdir`` and :func:`jwt_dir`, then start the broker; the caller stops it."""
    from devtools.kafka_broker import KafkaBroker

    keys = jwt_dir()
    jwks = write_jwt_material(keys)
    tls = write_tls_material(os.path.join(workdir, "tls"))
    plain = {"rks-plain": "plain-" + secrets.token_urlsafe(12)}
    scram = {"rks-scram": "scram-" + secrets.token_urlsafe(12)}
    broker = KafkaBroker(os.path.join(workdir, "kafka"), listeners=secure_listeners(tls, jwks, plain),
                         scram_users=scram, heap="512m",
                         system_properties={"org.apache.kafka.sasl.oauthbearer.allowed.urls": f"file://{jwks}"})
    try:
        broker.start()
    except BaseException:
        shutil.rmtree(keys, ignore_errors=True)
        raise
    return SecureBroker(broker, tls, keys, plain, scram)

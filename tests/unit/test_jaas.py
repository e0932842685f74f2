"""Tier 1: ``sasl.jaas.config`` read as the Java client reads it, strictly, and its secrets shown nowhere."""

from __future__ import annotations

import pickle

import pytest

from spark_recoverable_sink import ConfigError, RecoverableKafkaSink, SinkConfig
from spark_recoverable_sink.config import redact, scrub_secrets
from spark_recoverable_sink.jaas import jaas_settings, options, parse

PW = "Zq9-secret-Xv"  # in every string below: no error, repr or log may show it
PKG = "org.apache.kafka.common.security."
PLAIN = PKG + "plain.PlainLoginModule"
SCRAM = PKG + "scram.ScramLoginModule"
OAUTH = PKG + "oauthbearer.OAuthBearerLoginModule"
B = {"bootstrap.servers": "h:1"}


@pytest.mark.parametrize("text,module,flag,opts", [
    (f'{PLAIN} required username="alice" password="{PW}";', PLAIN, "required", {"username": "alice", "password": PW}),
    (f"{PLAIN} REQUIRED username=alice password={PW} ;", PLAIN, "required", {"username": "alice", "password": PW}),
    (f"kafkashaded.{SCRAM} required\n  username='alice'\n  password='{PW}';", SCRAM, "required",
     {"username": "alice", "password": PW}),
    (f'{PLAIN} optional username="a b" password="q\\"uo\\\\te\\n\\t\\101\\7x;=/";', PLAIN, "optional",
     {"username": "a b", "password": 'q"uo\\te\n\tA\x07x;=/'}),
    (f"{PLAIN} sufficient username='it' password=\"'\";", PLAIN, "sufficient", {"username": "it", "password": "'"}),
    (f'{OAUTH} requisite;', OAUTH, "requisite", {}),
])
def test_good_strings_parse_as_java_reads_them(text, module, flag, opts):
    entry = parse(text)
    assert (entry.module, entry.flag, dict(entry.options)) == (module, flag, opts)
    assert PW not in repr(entry)


@pytest.mark.parametrize("text,why", [
    ("", "is empty"),
    ("   ", "is empty"),
    (f'{PLAIN} required username="u" password="{PW}"', "does not end with ';'"),
    (f'{PLAIN} username="u" password="{PW}";', "control flag"),
    (f'{PLAIN} always username="u" password="{PW}";', "control flag"),
    (f'{PLAIN};', "must start with"),
    (f'{PLAIN} required username password="{PW}";', "option 1 (at character"),
    (f'{PLAIN} required username="u" password=;', "option 2"),
    (f"{PLAIN} required username='it''s' password='{PW}';", "option 2"),  # 'it' 's': Java refuses it too
    (f'{PLAIN} required username="u" password="{PW};', "is not closed"),
    (f'{PLAIN} required username="u" password="{PW}\n";', "line break inside the quoted value"),
    (f'{PLAIN} required username="u" password={PW}/x;', "'/' outside quotes"),
    (f'{PLAIN} required username="u" /* {PW} */ password="{PW}";', "'/' outside quotes"),
    (f'{PLAIN} required username="u" password="{PW}"; {PLAIN} required;', "more than one login module"),
    (f'{PLAIN} required password="x" password="{PW}";', "repeats an earlier option"),
])
def test_bad_strings_are_refused_without_showing_them(text, why):
    with pytest.raises(ConfigError) as ei:
        parse(text)
    assert ei.value.option == "kafka_conf['sasl.jaas.config']"
    assert why in str(ei.value) and PW not in str(ei.value), str(ei.value)
    assert "not shown" in str(ei.value)


def _settings(jaas: str, **conf: str) -> dict[str, str]:
    return jaas_settings(jaas, {**B, "sasl.jaas.config": jaas, **conf})


def test_plain_gives_username_password_and_the_mechanism_unless_set():
    jaas = f'{PLAIN} required username="alice" password="{PW}";'
    assert _settings(jaas) == {"sasl.mechanism": "PLAIN", "sasl.username": "alice", "sasl.password": PW}
    assert _settings(jaas, **{"sasl.mechanism": "PLAIN"}) == {"sasl.username": "alice", "sasl.password": PW}
    assert "sasl.mechanism" not in _settings(jaas, **{"sasl.mechanisms": "PLAIN"})


def test_scram_takes_its_mechanism_from_sasl_mechanism():
    jaas = f'kafkashaded.{SCRAM} required username="alice" password="{PW}" tokenauth=false;'
    for mech in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        assert _settings(jaas, **{"sasl.mechanism": mech}) == {"sasl.username": "alice", "sasl.password": PW}


def test_oauthbearer_client_credentials_become_librdkafka_s_oidc_client():
    jaas = (f'{OAUTH} required clientId="my-client" clientSecret="{PW}" scope="kafka.write" '
            'extension_logicalCluster="lkc-123" extension_identityPoolId="pool-4";')
    got = _settings(jaas, **{"sasl.oauthbearer.token.endpoint.url": "https://idp.example/oauth2/token"})
    assert got == {"sasl.mechanism": "OAUTHBEARER", "sasl.oauthbearer.method": "oidc",
                   "sasl.oauthbearer.client.id": "my-client", "sasl.oauthbearer.client.secret": PW,
                   "sasl.oauthbearer.scope": "kafka.write",
                   "sasl.oauthbearer.extensions": "logicalCluster=lkc-123,identityPoolId=pool-4"}
    # no client in the string: the tokens come from the user's oauth_cb
    assert _settings(f"{OAUTH} required;", oauth_cb="tests.token_provider:signed") == {"sasl.mechanism": "OAUTHBEARER"}


@pytest.mark.parametrize("jaas,conf,option,why", [
    (f'{PLAIN} required username="u" password="{PW}";', {"sasl.mechanism": "SCRAM-SHA-512"}, "sasl.mechanism",
     "needs PLAIN"),
    (f'{SCRAM} required username="u" password="{PW}";', {}, "sasl.mechanism", "SCRAM-SHA-256 or SCRAM-SHA-512"),
    (f'{SCRAM} required username="u" password="{PW}";', {"sasl.mechanism": "PLAIN"}, "sasl.mechanism",
     "SCRAM-SHA-256 or SCRAM-SHA-512"),
    (f'{SCRAM} required username="u" password="{PW}" tokenauth=true;', {"sasl.mechanism": "SCRAM-SHA-256"},
     "sasl.jaas.config", "delegation token"),
    (f'{PLAIN} required username="u";', {}, "sasl.jaas.config", "non-empty password"),
    (f'{PLAIN} required username="u" password="{PW}" user_admin="{PW}";', {}, "sasl.jaas.config",
     "option 3 of PlainLoginModule"),
    (f'{OAUTH} required clientId="c" clientSecret="{PW}";', {}, "sasl.oauthbearer.token.endpoint.url", "oidc"),
    (f'{OAUTH} required;', {}, "sasl.jaas.config", "oauth_cb"),
    (f'{OAUTH} required clientId="c" clientSecret="{PW}" extension_a="{PW},x";',
     {"sasl.oauthbearer.token.endpoint.url": "https://idp/t"}, "sasl.jaas.config", "comma-separated"),
    (f'{OAUTH} required unsecuredLoginStringClaim_sub="{PW}";', {}, "sasl.jaas.config", "clientId, clientSecret"),
    (f'software.amazon.msk.auth.iam.IAMLoginModule required awsProfileName="{PW}";', {}, "sasl.jaas.config",
     "oauth_cb"),
    (f'com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true keyTab="/k" principal="{PW}";', {},
     "sasl.jaas.config", "sasl.kerberos.keytab"),
    (f'com.example.CustomLoginModule required secret="{PW}";', {}, "sasl.jaas.config",
     "com.example.CustomLoginModule is a login module"),
])
def test_what_librdkafka_cannot_do_is_refused_with_what_to_use(jaas, conf, option, why):
    with pytest.raises(ConfigError) as ei:
        SinkConfig.build("j", {**B, "sasl.jaas.config": jaas, **conf}, "/tmp/rks-unit-jaas")
    assert ei.value.option == f"kafka_conf[{option!r}]" and why in str(ei.value), str(ei.value)
    assert PW not in str(ei.value)


def test_the_password_inside_a_jaas_string_is_scrubbed_and_redacted_everywhere():
    jaas = f'kafkashaded.{SCRAM} required username="alice" password="{PW}";'
    raw = {**B, "sasl.mechanism": "SCRAM-SHA-512", "sasl.jaas.config": jaas}
    sink = RecoverableKafkaSink("s", raw, wal_dir="/tmp/rks-unit-jaas")
    cfg = sink.config
    assert cfg.producer_conf()["sasl.password"] == PW  # the client gets it
    for text in (repr(sink), str(cfg), repr(cfg), repr(dict(cfg.kafka_conf_items).keys())):
        assert PW not in text and jaas not in text
    assert cfg.scrub(f"auth failed for {PW}!") == "auth failed for ***!"
    # the user's own configuration, as the rks commands scrub their errors with it: string and password both
    assert scrub_secrets(raw, f"{jaas} / {PW}") == "*** / ***"
    assert redact(raw)["sasl.jaas.config"] == "***"
    assert PW.encode() in pickle.dumps(cfg)  # shipped to executors as a value, like sasl.password
    assert options("not a jaas string") == {}
    # a string the parser refuses still gives its password to the scrub
    broken = f'{SCRAM} required username="alice" password="{PW}" /* no end'
    assert options(broken)["password"] == PW and scrub_secrets({"sasl.jaas.config": broken}, PW) == "***"
    assert options(f"{PLAIN} required password={PW}/x")["password"] == PW + "/x"


def test_an_oidc_client_secret_is_scrubbed():
    jaas = f'{OAUTH} required clientId="c" clientSecret="{PW}";'
    cfg = SinkConfig.build("j", {**B, "sasl.jaas.config": jaas, "sasl.oauthbearer.token.endpoint.url": "https://i/t"},
                           "/tmp/rks-unit-jaas")
    assert PW not in repr(cfg) and cfg.scrub(PW) == "***"
    assert scrub_secrets({"sasl.jaas.config": jaas}, f"x {PW} y") == "x *** y"

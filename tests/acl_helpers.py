"""Settings and client configs of the ACL integration tests: a SASL_PLAINTEXT broker with the
built-in authorizer (selected by Kafka's class name), PLAIN users admin (a super user, also the
brokers' own principal), alice and bob."""

from __future__ import annotations

from typing import Any

PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
JAAS = (
    f'{PLAIN_MODULE} required username="admin" password="admin-secret" '
    'user_admin="admin-secret" user_alice="alice-secret" user_bob="bob-secret";'
)
SETTINGS = {
    "listeners": "SASL_PLAINTEXT://127.0.0.1:0",
    "sasl.enabled.mechanisms": "PLAIN",
    "sasl.mechanism.inter.broker.protocol": "PLAIN",
    "sasl.jaas.config": JAAS,
    "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
    "super.users": "User:admin",
}


def librdkafka(user: str) -> dict[str, Any]:
    """confluent-kafka (librdkafka) settings of a PLAIN user (password: ``<user>-secret``)."""
    return {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.username": user,
        "sasl.password": f"{user}-secret",
    }


def kafka_python(user: str) -> dict[str, Any]:
    """kafka-python's settings of a PLAIN user."""
    return {
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "PLAIN",
        "sasl_plain_username": user,
        "sasl_plain_password": f"{user}-secret",
    }


ADMIN, ALICE, BOB = librdkafka("admin"), librdkafka("alice"), librdkafka("bob")

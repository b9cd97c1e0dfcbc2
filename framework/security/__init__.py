"""SASL authentication (Kafka's ``SASL_PLAINTEXT`` and, over TLS, ``SASL_SSL`` listeners).

The pieces, each independent of how bytes move, so a TLS byte stream composes with them:

- :mod:`.jaas` parses Kafka's JAAS text (``sasl.jaas.config``);
- :mod:`.mechanism` is the SaslServer/SaslClient interface and the mechanisms registry
  (built-ins plus the ``odradek_register_sasl_mechanisms`` hook);
- :mod:`.plain` and :mod:`.scram` are the PLAIN (RFC 4616) and SCRAM-SHA-256/512 (RFC 5802/7677)
  mechanisms;
- :mod:`.oauthbearer` is OAUTHBEARER's exchange (RFC 7628, KIP-255), :mod:`.oauth_unsecured` and
  :mod:`.oauth_jwt` its validators (unsecured JWTs; JWTs signed by a JWKS key, KIP-768),
  :mod:`.oauth_settings` which one a listener uses, :mod:`.oauth_client` the client's tokens;
- :mod:`.credentials` keeps SCRAM credentials in the metadata store as Kafka's user entity
  configs (``/config/users/<user>``);
- :mod:`.authenticator` is the server's per-connection state machine
  (``SaslServerAuthenticator``), sans-IO: frames in, frames out;
- :mod:`.client` authenticates odradek's own connections (clients, replica fetchers);
- :mod:`.settings` builds a listener's SASL settings from the broker config.
"""

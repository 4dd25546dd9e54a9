"""Kafka client glue shared by the worker and ``estimate --topic``: aiokafka's internals
(``compat``, checked against the installed version at import), connection options with
TLS and SASL (``options``), and the tolerant batch reader (``decode``)."""

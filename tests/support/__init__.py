"""Helpers shared by the test suites: config builders, the real broker, worker processes,
fault injection (a TCP proxy, frozen and killed processes), TLS certificates, fuzz corpora."""

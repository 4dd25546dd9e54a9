"""The per-subject privacy ledger: a cap per subject per window, charged exactly.

Pure: no Kafka. The worker restores it from the changelog, charges each
batch and sends ``Charge.updates`` in the batch's transaction
(docs/ledger.md states and proves the guarantee).
"""

from privstream.ledger.core import Charge, SubjectLedger
from privstream.ledger.policy import REASONS, LedgerPolicy

__all__ = ["REASONS", "Charge", "LedgerPolicy", "SubjectLedger"]

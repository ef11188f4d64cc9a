"""Log fingerprint: what vLLM really selected and what went wrong, read from its log.

`fingerprint(text)` is pure; `verdicts(fp, ...)` judges it against a cell's requests.
"""

from harness.fingerprint.model import Fingerprint
from harness.fingerprint.parse import fingerprint
from harness.fingerprint.tables import Signature, kernel_names, load_signatures
from harness.fingerprint.verdicts import Verdict, verdicts

__all__ = [
    "Fingerprint",
    "Signature",
    "Verdict",
    "fingerprint",
    "kernel_names",
    "load_signatures",
    "verdicts",
]

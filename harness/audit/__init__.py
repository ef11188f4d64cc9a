"""`harness audit`: prove from the binaries which GPU archs were really compiled."""

from harness.audit.archs import CC, CudaArch, Load
from harness.audit.report import DEFAULT_TARGETS, AuditReport, audit_path
from harness.audit.verdict import Target

__all__ = ["CC", "DEFAULT_TARGETS", "AuditReport", "CudaArch", "Load", "Target", "audit_path"]

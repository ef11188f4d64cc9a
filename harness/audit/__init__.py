"""`harness audit`: prove from the binaries which GPU archs were really compiled."""

from harness.archs import CC, CudaArch, Load
from harness.audit.report import DEFAULT_TARGETS, IMAGE_PATHS, AuditReport, audit_path
from harness.audit.verdict import Target

__all__ = ["CC", "DEFAULT_TARGETS", "IMAGE_PATHS", "AuditReport", "CudaArch", "Load", "Target", "audit_path"]

"""`harness audit`: prove from the binaries which GPU archs were really compiled.

`report.audit_path` audits a file, a folder, a wheel or an image's export against `verdict.Target`
chips; where code can load is harness.archs's rule. Nothing is imported here: a module of the
package imports its package first, so an `__init__` importing them back would draw a circle.
"""

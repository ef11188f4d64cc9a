"""`harness report`: report.md and a self-contained report.html for one run directory.

Pipeline: data.load (run dir -> frozen rows) -> figures (inline SVG) -> sections (table text)
-> markdown / html writers (write.write_report writes both). Everything shown passes
harness.redact.redact_text.

Package modules hold no imports of their own package here: a module of the package imports its
package first, so an `__init__` that imported them back would draw a circle (tools/import_graph.py).
"""

"""`harness bisect`: which upstream commit or release changed a verdict.

history.py lists the points between a good and a bad one (a git repository's commits, or a
package index's releases) and unpacks one; probes.py judges an unpacked tree; search.py picks
the next point, git-bisect style; store.py keeps one JSON per judged point so an interrupted
bisect resumes without judging anything twice; session.py runs the loop; report.py writes the
answer as Markdown and JSON. Semantics and formats: docs/bisect.md.
"""

"""Log fingerprint: what vLLM really selected and what went wrong, read from its log.

`parse.fingerprint(text)` is pure; `verdicts.verdicts(fp, ...)` judges it against a cell's
requests. Nothing is imported here: a module of the package imports its package first, so an
`__init__` importing them back would draw a circle.
"""

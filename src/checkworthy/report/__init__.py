"""Reports of stored calibration runs, for people: stored results, analyses and method comparisons
rendered as Markdown/HTML and figures; nothing here computes them (:mod:`checkworthy.runs.analyses`,
:mod:`checkworthy.runs.comparisons` do, and store what they compute).

Entry points: :func:`checkworthy.report.files.save_report` (render, write, store),
:func:`checkworthy.report.files.rerender` (a stored report, byte for byte),
:mod:`checkworthy.report.console` (tables for the terminal) and
:func:`checkworthy.runs.comparisons.ensure_comparison` (every method on a run's inputs).
"""

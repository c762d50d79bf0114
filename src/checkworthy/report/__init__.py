"""Reports of stored calibration runs, for people: analyses, method comparisons, Markdown/HTML and figures.

Entry points: :func:`checkworthy.report.files.save_report` (analyse, render, write, store),
:func:`checkworthy.report.files.rerender` (a stored report, byte for byte),
:mod:`checkworthy.report.console` (tables for the terminal) and
:func:`checkworthy.runs.comparisons.ensure_comparison` (every method on a run's inputs).
"""

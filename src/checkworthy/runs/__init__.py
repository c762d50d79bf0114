"""Runs over the store: one calibration run, incremental recalibration, your own scores, the main job."""

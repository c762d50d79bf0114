"""Scorers: every predictor J behind one interface (see ``base.Scorer``)."""

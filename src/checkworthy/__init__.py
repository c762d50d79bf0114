"""checkworthy: calibrate cheap language models' check-worthiness scores with NN-PPI."""

__version__ = "0.1.0"

"""Pure method code: NN-PPI, corrections, intervals, calibrators, the embedding head, metrics and sampling (arrays in, arrays out, no I/O)."""

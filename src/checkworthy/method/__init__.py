"""The method, as pure functions: NN-PPI, point corrections, intervals, calibrators, the embedding
head, metrics and sampling (arrays in, arrays out, no I/O)."""

"""The HTTP API (``checkworthy serve``): calibrated decisions for submitted texts, explanations,
health and metrics, behind API keys. The top layer beside the command line: it wires the runs,
store and report layers to FastAPI and holds no method of its own."""

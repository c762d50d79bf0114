"""The command line (thin: parse, call a run or a flow, print)."""

"""Evaluation and reports: the demo conversation, `vcm demo`, the Conveyance report."""

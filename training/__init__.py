"""Produces the trained aggregator model (collect → build → SFT → GRPO → evaluate → export). Not built yet."""

"""Produces the trained aggregator model that `serve-aggregator` serves: collect → weights → build → sft → grpo →
calibrate → evaluate → report → export, one config dataclass and one function per step (`aggregate-train <step>
--help`; `aggregate-train --help` lists them).

Prompts, parsers, the grader and the SampleSet type are imported from `aggregate_graph`, never copied, so the model
is trained on exactly what the runtime renders and graded exactly as the runtime grades. torch, transformers, TRL
and peft are imported by the steps that need them only.
"""

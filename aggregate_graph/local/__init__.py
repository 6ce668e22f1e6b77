"""Embedded local chat model: SmolLM2-135M-Instruct run in-process via transformers."""

from aggregate_graph.local.chat_model import LocalChatModel
from aggregate_graph.local.smollm2 import smollm2_path

__all__ = ["LocalChatModel", "smollm2_path"]
